// Agents: the list, a new agent, and one agent: its settings, its tools,
// its documents and a search tester.

import { call } from "../api.js";
import { badge, button, field, form, h, pager, parseJson, say, section, shortId, table, when } from "../ui.js";

/** @typedef {import("../app.js").PageContext} PageContext */

/** @param {PageContext} ctx */
export async function list({ main }) {
  const agents = pager("agents", async (limit, offset) =>
    (await call("agent_list", { query: { limit, offset } })).items,
  (items) => table("Agents", [
    ["Name", (a) => h("a", { href: `#/agents/${a.id}` }, a.name)],
    ["Model", (a) => a.model || h("span", { class: "muted" }, "server default")],
    ["Id", (a) => shortId(a.id)],
    ["Updated", (a) => when(a.updated_at)],
  ], items));

  const name = h("input", { name: "name", required: true, maxlength: 120 });
  const model = h("input", { name: "model", placeholder: "the server's default" });
  const instructions = h("textarea", { name: "instructions" });
  const about = h("input", { name: "about" });
  const create = form({ "aria-label": "New agent" }, [
    h("div", { class: "row" }, field("Name", name), field("Model", model)),
    field("Instructions", instructions, "One per line."),
    field("About", about),
  ], "Create agent", async () => {
    /** @type {import("../api.gen.js").CreateAgentRequest} */
    const body = { name: name.value, model: model.value, about: about.value, instructions: lines(instructions.value) };
    const agent = await call("agent_create", { body });
    say(`Agent ${agent.name} created.`);
    location.hash = `#/agents/${agent.id}`;
  });

  main.append(h("h1", {}, "Agents"), h("div", { class: "grid" }, section("All agents", agents), section("New agent", create)));
}

/** @param {PageContext} ctx */
export async function detail({ main, params }) {
  /** @type {import("../api.gen.js").Agent} */
  const agent = await call("agent_get", { path: { id: params.id } });
  main.append(
    h("p", {}, h("a", { href: "#/agents" }, "← All agents")),
    h("h1", {}, agent.name, " ", h("span", { class: "muted" }, shortId(agent.id))),
    h("div", { class: "grid" }, settings(agent), tools(agent)),
    docs(agent),
  );
}

function lines(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean);
}

/** @param {import("../api.gen.js").Agent} agent */
function settings(agent) {
  const name = h("input", { name: "name", required: true, value: agent.name });
  const model = h("input", { name: "model", value: agent.model, placeholder: "the server's default" });
  const instructions = h("textarea", { name: "instructions", value: agent.instructions.join("\n") });
  const about = h("textarea", { name: "about", value: agent.about });
  const defaults = h("textarea", {
    name: "default_settings", class: "code",
    value: agent.default_settings ? JSON.stringify(agent.default_settings, null, 2) : "",
    placeholder: '{"temperature": 0.2, "max_tokens": 512}',
  });
  const edit = form({ "aria-label": "Agent settings" }, [
    h("div", { class: "row" }, field("Name", name), field("Model", model)),
    field("Instructions", instructions, "One per line."),
    field("About", about),
    field("Default settings (JSON)", defaults, "temperature, top_p, max_tokens, stop, seed, penalties; empty for none."),
  ], "Save agent", async () => {
    /** @type {import("../api.gen.js").CreateAgentRequest} */
    const body = {
      name: name.value, model: model.value, about: about.value, instructions: lines(instructions.value),
      default_settings: parseJson(defaults.value, "Default settings") ?? null, metadata: agent.metadata ?? null,
    };
    const saved = await call("agent_update", { path: { id: agent.id }, body });
    say(`Agent ${saved.name} saved.`);
  });
  const remove = button("Delete agent", async () => {
    await call("agent_delete", { path: { id: agent.id } });
    say("Agent deleted.");
    location.hash = "#/agents";
  }, { class: "danger", "aria-label": `Delete agent ${agent.name}` });
  return section("Settings", h("dl", { class: "facts" },
    h("dt", {}, "Created"), h("dd", {}, when(agent.created_at)),
    h("dt", {}, "Updated"), h("dd", {}, when(agent.updated_at))), edit, h("div", { class: "actions" }, remove));
}

const TOOL_TYPES = ["function", "api_call", "mcp", "file_search", "memory", "conversation_search"];

/** @param {import("../api.gen.js").Agent} agent */
function tools(agent) {
  const listed = pager("tools", async (limit, offset) =>
    (await call("tool_list", { path: { id: agent.id }, query: { limit, offset } })).items,
  (items) => table("Tools", [
    ["Name", (t) => h("code", {}, t.name)],
    ["Type", (t) => badge(t.type)],
    ["Description", (t) => t.description],
    ["", (t) => button("Delete", async () => {
      await call("tool_delete", { path: { id: agent.id, tool_id: t.id } });
      say(`Tool ${t.name} deleted.`);
      listed.reload();
    }, { class: "danger", "aria-label": `Delete tool ${t.name}` })],
  ], items), 10);

  const name = h("input", { name: "tool-name", required: true, pattern: "[A-Za-z_][A-Za-z0-9_]*", maxlength: 40 });
  const type = h("select", { name: "tool-type" }, TOOL_TYPES.map((t) => h("option", { value: t }, t)));
  const description = h("input", { name: "tool-description" });
  const definition = h("textarea", {
    name: "tool-definition", class: "code",
    placeholder: '{"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}',
  });
  const create = form({ "aria-label": "New tool" }, [
    h("div", { class: "row" }, field("Tool name", name), field("Type", type)),
    field("Description", description),
    field("Definition (JSON)", definition, "The object for the type's own field (function, api_call, mcp, …); empty for none."),
  ], "Add tool", async () => {
    /** @type {import("../api.gen.js").CreateToolRequest} */
    const body = { name: name.value, type: /** @type {any} */ (type.value), description: description.value };
    const def = parseJson(definition.value, "Definition");
    if (def !== undefined) body[type.value] = def;
    await call("tool_create", { path: { id: agent.id }, body });
    say(`Tool ${name.value} added.`);
    name.value = "";
    definition.value = "";
    listed.reload();
  });
  return section("Tools", listed, h("h3", {}, "New tool"), create);
}

/** @param {import("../api.gen.js").Agent} agent */
function docs(agent) {
  const listed = pager("documents", async (limit, offset) =>
    (await call("agent_doc_list", { path: { id: agent.id }, query: { limit, offset } })).items,
  (items) => table("Documents", [
    ["Title", (d) => d.title],
    ["Snippets", (d) => d.content.length],
    ["Vectors", (d) => (d.embeddings ? "yes" : "no")],
    ["Created", (d) => when(d.created_at)],
    ["", (d) => button("Delete", async () => {
      await call("agent_doc_delete", { path: { id: agent.id, doc_id: d.id } });
      say(`Document ${d.title} deleted.`);
      listed.reload();
    }, { class: "danger", "aria-label": `Delete document ${d.title}` })],
  ], items), 10);

  const title = h("input", { name: "doc-title", required: true, maxlength: 800 });
  const content = h("textarea", { name: "doc-content", required: true });
  const file = h("input", { type: "file", name: "doc-file", accept: ".txt,.md,.csv,.json,text/*" });
  file.addEventListener("change", async () => {
    const f = file.files?.[0];
    if (!f) return;
    content.value = await f.text();
    if (!title.value) title.value = f.name;
  });
  const create = form({ "aria-label": "New document" }, [
    field("Title", title),
    field("Text", content, "Snippets are separated by a blank line; each is searched on its own."),
    field("Or upload a text file", file),
  ], "Add document", async () => {
    const snippets = content.value.split(/\n\s*\n/).map((s) => s.trim()).filter(Boolean);
    await call("agent_doc_create", { path: { id: agent.id }, body: { title: title.value, content: snippets } });
    say(`Document ${title.value} added.`);
    title.value = "";
    content.value = "";
    file.value = "";
    listed.reload();
  });

  const text = h("input", { name: "search-text", required: true, type: "search" });
  const mode = h("select", { name: "search-mode" }, ["text", "vector", "hybrid"].map((m) => h("option", { value: m }, m)));
  const alpha = h("input", { name: "search-alpha", type: "number", min: 0, max: 1, step: 0.05, value: "0.5" });
  const limit = h("input", { name: "search-limit", type: "number", min: 1, max: 100, value: "10" });
  const results = h("div", { class: "results", "aria-live": "polite" });
  const search = form({ "aria-label": "Search tester" }, [
    h("div", { class: "row" }, field("Search for", text), field("Mode", mode),
      field("Alpha (hybrid)", alpha), field("Results", limit)),
  ], "Search", async () => {
    /** @type {import("../api.gen.js").SearchRequest} */
    const body = { text: text.value, mode: /** @type {any} */ (mode.value), limit: Number(limit.value) };
    if (mode.value === "hybrid") body.alpha = Number(alpha.value);
    /** @type {import("../api.gen.js").DocSearchResponse} */
    const found = await call("agent_search", { path: { id: agent.id }, body });
    results.replaceChildren(
      h("p", { class: "muted" }, `${found.docs.length} snippet(s) in ${(found.time * 1000).toFixed(1)} ms (${mode.value}).`),
      table("Search results", [
        ["Score", (r) => h("span", { class: "score" }, r.score.toFixed(4))],
        ["Document", (r) => r.title],
        ["Snippet", (r) => r.snippet.content],
      ], found.docs));
  });

  return h("div", { class: "grid" },
    section("Documents", listed, h("h3", {}, "New document"), create),
    section("Search tester", search, results));
}

