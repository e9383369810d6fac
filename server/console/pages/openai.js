// The OpenAI-compatible side (`/v1`): conversations (every session is one)
// and responses (opened by id, or made here), each with its items.

import { call, listAll } from "../api.js";
import { badge, button, field, form, h, json, pager, say, section, table, when } from "../ui.js";

/** @typedef {import("../app.js").PageContext} PageContext */

/** A session's id as a `/v1` conversation id (`conv_` and 32 hex digits). */
function convId(sessionId) {
  return `conv_${sessionId.replaceAll("-", "")}`;
}

/** @param {PageContext} ctx */
export async function list({ main }) {
  const conversations = pager("conversations", async (limit, offset) =>
    (await call("session_list", { query: { limit, offset } })).items,
  (items) => table("Conversations (sessions)", [
    ["Conversation", (s) => h("a", { href: `#/openai/conversations/${convId(s.id)}` }, h("code", { title: convId(s.id) }, "conv_…" + convId(s.id).slice(-8)))],
    ["Agents", (s) => String(s.agents.length)],
    ["Updated", (s) => when(s.updated_at)],
  ], items));

  const responseId = h("input", { name: "response-id", required: true, placeholder: "resp_…", pattern: "resp_[A-Za-z0-9_-]+" });
  const open = form({ "aria-label": "Open a response" }, [field("Response id", responseId)], "Open response", async () => {
    location.hash = `#/openai/responses/${encodeURIComponent(responseId.value.trim())}`;
  });

  const agents = await listAll("agent_list");
  const model = h("select", { name: "response-model" },
    agents.map((a) => h("option", { value: a.id }, `agent: ${a.name}`)),
    h("option", { value: "" }, "the server's default model"));
  const input = h("textarea", { name: "response-input", required: true });
  const create = form({ "aria-label": "New response" }, [
    field("Model", model, "An agent answers as itself (instructions, tools, documents)."),
    field("Input", input),
  ], "Create response", async () => {
    /** @type {import("../api.gen.js").CreateResponseRequest} */
    const body = { input: input.value, model: model.value || undefined };
    const r = await call("openai_response_create", { body });
    say("Response created.");
    location.hash = `#/openai/responses/${r.id}`;
  });

  main.append(h("h1", {}, "Responses and conversations (/v1)"),
    h("p", { class: "muted" }, "What OpenAI's clients see: every session is a conversation; a stored response is one turn of a session."),
    h("div", { class: "grid" },
      section("Conversations", conversations),
      h("div", {}, section("Open a response", open), section("New response", create))));
}

/**
 * A paged list of `/v1` items (cursor paging: `after`, `has_more`).
 * @param {string} op `openai_item_list` or `openai_response_input_items`
 * @param {Record<string, string>} path
 */
function items(op, path) {
  const box = h("div", { class: "messages" });
  const more = h("div");
  const load = async (after) => {
    /** @type {import("../api.gen.js").ItemList} */
    const page = await call(op, { path, query: { order: "asc", limit: 20, after } });
    box.append(...page.data.map(item));
    if (page.data.length === 0 && !after) box.append(h("p", { class: "empty" }, "No items."));
    more.replaceChildren(...(page.has_more ? [button("Load more items", () => load(page.last_id), { class: "quiet" })] : []));
  };
  return { el: h("div", {}, box, more), load };
}

/** One item: a message (its text parts), a function call or a call's output. */
function item(it) {
  if (it.type === "message") {
    const text = (it.content ?? []).map((p) => p.text ?? (p.image_url ? `[image ${p.image_url.slice(0, 40)}]` : `[${p.type}]`)).join("\n");
    return h("article", { class: `message ${it.role}` },
      h("header", {}, badge(it.role), h("code", {}, it.id)), h("div", { class: "content" }, text));
  }
  if (it.type === "function_call") {
    return h("article", { class: "message assistant" }, h("header", {}, badge("function_call"), h("code", {}, it.id)),
      h("div", { class: "tool-call" }, "Calls ", h("code", {}, it.name), " ", h("span", { class: "muted" }, it.call_id),
        h("pre", { class: "json" }, it.arguments)));
  }
  if (it.type === "function_call_output") {
    return h("article", { class: "message tool" }, h("header", {}, badge("function_call_output"), h("code", {}, it.call_id)),
      h("pre", { class: "json" }, typeof it.output === "string" ? it.output : JSON.stringify(it.output, null, 2)));
  }
  return h("article", { class: "message" }, h("header", {}, badge(it.type ?? "item")), json(it));
}

/** @param {PageContext} ctx */
export async function conversation({ main, params }) {
  /** @type {import("../api.gen.js").Conversation} */
  const conv = await call("openai_conversation_get", { path: { conversation_id: params.id } });
  const list = items("openai_item_list", { conversation_id: conv.id });
  main.append(
    h("p", {}, h("a", { href: "#/openai" }, "← Responses and conversations")),
    h("h1", {}, "Conversation ", h("code", {}, conv.id)),
    h("dl", { class: "facts" },
      h("dt", {}, "Created"), h("dd", {}, when(conv.created_at)),
      h("dt", {}, "Metadata"), h("dd", {}, Object.keys(conv.metadata ?? {}).length ? json(conv.metadata) : "none")),
    section("Items", list.el));
  await list.load(undefined);
}

/** @param {PageContext} ctx */
export async function response({ main, params }) {
  /** @type {import("../api.gen.js").ModelResponse} */
  const r = await call("openai_response_get", { path: { response_id: params.id } });
  const inputs = items("openai_response_input_items", { response_id: r.id });
  const conv = typeof r.conversation === "string" ? r.conversation : r.conversation?.id;
  main.append(
    h("p", {}, h("a", { href: "#/openai" }, "← Responses and conversations")),
    h("h1", {}, "Response ", h("code", {}, r.id), " ", badge(r.status)),
    h("dl", { class: "facts" },
      h("dt", {}, "Model"), h("dd", {}, r.model),
      h("dt", {}, "Created"), h("dd", {}, when(r.created_at)),
      h("dt", {}, "Conversation"), h("dd", {}, conv ? h("a", { href: `#/openai/conversations/${conv}` }, conv) : "none"),
      h("dt", {}, "Previous response"), h("dd", {}, r.previous_response_id
        ? h("a", { href: `#/openai/responses/${r.previous_response_id}` }, r.previous_response_id) : "none"),
      h("dt", {}, "Usage"), h("dd", {}, r.usage ? `${r.usage.input_tokens} in, ${r.usage.output_tokens} out` : "—"),
      r.error ? [h("dt", {}, "Error"), h("dd", {}, r.error.message)] : null),
    h("div", { class: "grid" },
      section("Input items", inputs.el),
      section("Output", h("div", { class: "messages" }, r.output.map(item)))));
  await inputs.load(undefined);
}
