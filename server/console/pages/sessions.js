// Sessions: the list, a new session, and one session: its messages (tool
// calls and their outputs inline) and a chat playground that streams the
// answer, shows the server's tool calls and asks for approvals.

import { ApiError, call, listAll, stream } from "../api.js";
import { badge, button, check, field, form, h, pager, say, section, shortId, table, when } from "../ui.js";

/** @typedef {import("../app.js").PageContext} PageContext */

/** @param {PageContext} ctx */
export async function list({ main }) {
  const [agents, users] = await Promise.all([listAll("agent_list"), listAll("user_list")]);
  const agentName = new Map(agents.map((a) => [a.id, a.name]));
  const userName = new Map(users.map((u) => [u.id, u.name || u.id.slice(0, 8)]));

  const sessions = pager("sessions", async (limit, offset) =>
    (await call("session_list", { query: { limit, offset } })).items,
  (items) => table("Sessions", [
    ["Session", (s) => h("a", { href: `#/sessions/${s.id}` }, shortId(s.id))],
    ["Agents", (s) => s.agents.map((a) => agentName.get(a) ?? a.slice(0, 8)).join(", ") || h("span", { class: "muted" }, "none")],
    ["Users", (s) => (s.users ?? []).map((u) => userName.get(u) ?? u.slice(0, 8)).join(", ")],
    ["Updated", (s) => when(s.updated_at)],
  ], items));

  const agent = h("select", { name: "agent", required: true },
    agents.map((a) => h("option", { value: a.id }, a.name)));
  const who = h("select", { name: "users", multiple: true, size: Math.min(5, Math.max(2, users.length)) },
    users.map((u) => h("option", { value: u.id }, u.name || u.id)));
  const situation = h("textarea", { name: "situation" });
  const create = agents.length === 0
    ? h("p", {}, "Create an agent first: ", h("a", { href: "#/agents" }, "Agents"), ".")
    : form({ "aria-label": "New session" }, [
      field("Agent", agent),
      field("Users", who, "Optional; Ctrl or Shift to pick several."),
      field("Situation", situation, "Optional text added after the system prompt of every chat."),
    ], "Create session", async () => {
      /** @type {import("../api.gen.js").CreateSessionRequest} */
      const body = { agent: agent.value, users: [...who.selectedOptions].map((o) => o.value) };
      if (situation.value.trim()) body.situation = situation.value;
      const session = await call("session_create", { body });
      say("Session created.");
      location.hash = `#/sessions/${session.id}`;
    });

  const userNameInput = h("input", { name: "user-name", required: true, maxlength: 120 });
  const newUser = form({ "aria-label": "New user" }, [field("User name", userNameInput)], "Create user", async () => {
    const user = await call("user_create", { body: { name: userNameInput.value } });
    who.append(h("option", { value: user.id, selected: true }, user.name));
    who.size = Math.min(5, Math.max(2, who.options.length));
    say(`User ${user.name} created.`);
    userNameInput.value = "";
  });

  main.append(h("h1", {}, "Sessions"), h("div", { class: "grid" },
    section("All sessions", sessions),
    h("div", {}, section("New session", create), section("New user", newUser))));
}

/** @param {PageContext} ctx */
export async function detail({ main, params, signal }) {
  /** @type {import("../api.gen.js").Session} */
  const session = await call("session_get", { path: { id: params.id } });
  const agents = await Promise.all(session.agents.map((id) => call("agent_get", { path: { id } }).catch(() => ({ id, name: id }))));
  const users = await Promise.all((session.users ?? []).map((user_id) =>
    call("user_get", { path: { user_id } }).catch(() => ({ id: user_id, name: user_id }))));

  const history = h("div", { class: "messages", "aria-live": "off" });
  const older = h("div");
  const PAGE = 50;
  let loaded = 0;
  const loadOlder = async () => {
    const page = await call("message_list", { path: { id: session.id }, query: { direction: "desc", limit: PAGE, offset: loaded } });
    loaded += page.items.length;
    history.prepend(...page.items.reverse().map(message));
    older.replaceChildren(page.items.length < PAGE ? h("p", { class: "muted" }, loaded ? "The start of the session." : "No messages yet.")
      : button("Show older messages", loadOlder, { class: "quiet" }));
  };
  const reload = async () => {
    history.replaceChildren();
    loaded = 0;
    await loadOlder();
  };
  await reload();

  main.append(
    h("p", {}, h("a", { href: "#/sessions" }, "← All sessions")),
    h("h1", {}, "Session ", h("span", { class: "muted" }, shortId(session.id))),
    h("dl", { class: "facts" },
      h("dt", {}, "Agents"), h("dd", {}, agents.map((a, i) => [i ? ", " : "", h("a", { href: `#/agents/${a.id}` }, a.name)])),
      h("dt", {}, "Users"), h("dd", {}, users.length ? users.map((u, i) => [i ? ", " : "", u.name || shortId(u.id)]) : "none"),
      h("dt", {}, "Created"), h("dd", {}, when(session.created_at)),
      h("dt", {}, "As a conversation"), h("dd", {}, h("a", { href: `#/openai/conversations/${session.id}` }, "its /v1 items"))),
    h("div", { class: "grid" },
      section("Messages", older, history),
      section("Chat", session.agents.length ? playground(session, agents, reload, signal)
        : h("p", { class: "muted" }, "This session has no agent (a /v1 conversation): nobody answers a chat here."))),
  );
}

/**
 * One message: its role, text, the tools it calls and, for a `tool`
 * message, the call it answers.
 * @param {import("../api.gen.js").Message} m
 */
function message(m) {
  const run = m.metadata?.tool_run;
  return h("article", { class: `message ${m.role}` },
    h("header", {}, badge(m.role), m.name ? h("span", {}, m.name) : null, when(m.created_at),
      h("span", {}, `${m.token_count} tokens`)),
    m.role === "tool"
      ? h("div", { class: "tool-call" },
        h("div", { class: "muted" }, "Output of call ", h("code", {}, m.tool_call_id ?? "?"),
          run ? ` (${run.name}, ${run.type}, ${run.ms} ms${run.error ? `, failed: ${run.error}` : ""})` : ""),
        h("pre", { class: "json" }, m.content))
      : m.content ? h("div", { class: "content" }, m.content) : null,
    (m.tool_calls ?? []).map((c) => h("div", { class: "tool-call" },
      h("div", {}, "Calls ", h("code", {}, c.function.name), " ", h("span", { class: "muted" }, c.id)),
      h("pre", { class: "json" }, pretty(c.function.arguments)))),
  );
}

function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/**
 * The chat playground: a message box; the answer streams into the page as
 * it comes (or arrives whole); server-run tool calls show as they end;
 * calls waiting for approval get Approve/Deny.
 * @param {import("../api.gen.js").Session} session
 * @param {{id: string, name: string}[]} agents the session's agents
 * @param {() => Promise<void>} reload the history
 * @param {AbortSignal} signal
 */
function playground(session, agents, reload, signal) {
  const text = h("textarea", { name: "chat-message", required: true, placeholder: "Say something to the agent" });
  const streamed = h("input", { type: "checkbox", name: "chat-stream", checked: true });
  const out = h("div", { class: "chat-out", "aria-live": "polite" });

  /**
   * Runs one chat turn and shows it.
   * @param {import("../api.gen.js").ChatRequest} body
   */
  const turn = async (body) => {
    const answer = h("div", { class: "content" });
    const runs = h("div");
    const state = h("span", { class: "muted", "aria-busy": "true" }, "Waiting for the answer…");
    const bubble = h("article", { class: "message assistant live" }, h("header", {}, badge("assistant"), state), answer, runs);
    out.replaceChildren(bubble);
    let pending = [];
    let finish = null;
    if (streamed.checked) {
      /** @type {{message: string, code?: string} | null} */
      let failure = null;
      const requestId = await stream("session_chat", { path: { id: session.id }, body: { ...body, stream: true }, signal }, (e) => {
        if (e.data === "[DONE]") return;
        const chunk = JSON.parse(e.data);
        if (chunk.error) {
          failure = chunk.error;
          return;
        }
        if (chunk.tool_run) runs.append(toolRun(chunk.tool_run));
        for (const c of chunk.choices ?? []) {
          if (c.delta?.content) {
            answer.append(c.delta.content);
            state.textContent = "Streaming…";
          }
          for (const call of c.delta?.tool_calls ?? []) {
            if (call.function?.name) runs.append(h("div", { class: "tool-call" }, "Calls ", h("code", {}, call.function.name), " (a function tool: its result is yours to send)"));
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
        if (chunk.pending_approvals) pending = chunk.pending_approvals;
      });
      if (failure) throw new ApiError(502, failure.message, requestId, failure.code);
    } else {
      /** @type {import("../api.gen.js").ChatResponse} */
      const r = await call("session_chat", { path: { id: session.id }, body, signal });
      for (const run of r.tool_runs ?? []) runs.append(toolRun(run));
      answer.append(r.choices[0]?.message?.content ?? "");
      finish = r.choices[0]?.finish_reason ?? null;
      pending = r.pending_approvals ?? [];
    }
    state.removeAttribute("aria-busy");
    state.textContent = `Done${finish ? ` (${finish})` : ""}.`;
    if (pending.length) bubble.append(approvals(pending));
    await reload();
  };

  /** @param {import("../api.gen.js").PendingApproval[]} calls */
  const approvals = (calls) => {
    const decisions = calls.map((c) => {
      const decision = h("select", { name: `decision-${c.id}` },
        h("option", { value: "approve" }, "Approve: run it"), h("option", { value: "deny" }, "Deny: tell the model it was denied"));
      const reason = h("input", { name: `reason-${c.id}` });
      const box = h("fieldset", { class: "approval" },
        h("legend", {}, "Run ", h("code", {}, c.tool), c.server ? ` of ${c.server}` : "", "?"),
        h("pre", { class: "json" }, pretty(c.arguments)),
        h("div", { class: "row" }, field(`Decision on ${c.tool}`, decision), field("Reason (optional)", reason)));
      return { c, decision, reason, box };
    });
    return h("div", {}, h("h3", {}, "Waiting for your approval"), decisions.map((d) => d.box),
      button("Send decisions", () => turn({
        messages: [],
        approvals: decisions.map((d) => ({ id: d.c.id, approve: d.decision.value === "approve", reason: d.reason.value || null })),
      })));
  };

  // Which agent answers, when the session has several (the first by default).
  const answering = h("select", { name: "chat-agent" }, agents.map((a) => h("option", { value: a.id }, a.name)));
  const send = form({ "aria-label": "Chat" }, [
    field("Message", text),
    agents.length > 1 ? field("Answering agent", answering) : null,
    check("Stream the answer", streamed),
  ], "Send", async () => {
    const content = text.value;
    text.value = "";
    try {
      await turn({ messages: [{ role: "user", content }], agent: agents.length > 1 ? answering.value : null });
    } catch (e) {
      text.value = content;
      throw e;
    }
  });
  return h("div", {}, send, out);
}

/** @param {import("../api.gen.js").ToolRun} run */
function toolRun(run) {
  return h("div", { class: "tool-call" },
    h("div", {}, "Ran ", h("code", {}, run.name), ` (${run.type}${run.server ? ` on ${run.server}` : ""}, ${run.ms} ms)`,
      run.error ? h("span", { class: "badge badge-error" }, "failed") : null),
    h("details", {}, h("summary", {}, "Arguments and output"),
      h("pre", { class: "json" }, pretty(run.arguments)),
      run.error ? h("p", {}, run.error) : h("pre", { class: "json" }, run.output ?? "")));
}
