// Tasks and executions: an agent's tasks, a new task, one task (start an
// execution with a form built from its input_schema; its executions), and
// one execution: its transitions arriving live, as a timeline with each
// step's output and duration; resume it when it waits, cancel it.

import { call, listAll, stream } from "../api.js";
import { badge, button, check, field, form, h, json, pager, parseJson, say, section, shortId, table, when } from "../ui.js";
import { load as loadYaml } from "../vendor/js-yaml.mjs";

/** @typedef {import("../app.js").PageContext} PageContext */

const EXAMPLE_TASK = `name: ask-and-greet
description: Asks a question, waits for the answer, greets.
input_schema:
  type: object
  properties:
    name: {type: string}
  required: [name]
main:
  - evaluate:
      question: "'How are you, ' + _.name + '?'"
  - wait_for_input:
      info: {question: _.question}
  - evaluate:
      greeting: "'Glad you are ' + _.mood"
`;

/**
 * A task definition typed by a person: JSON, else YAML (js-yaml's default
 * schema: YAML 1.2's core types only, no tags that run code).
 * @param {string} text
 */
function parseTask(text) {
  try {
    return JSON.parse(text);
  } catch {
    try {
      return loadYaml(text);
    } catch (e) {
      throw new Error(`The task is neither JSON nor YAML: ${e.message.split("\n")[0]}`);
    }
  }
}

/** @param {PageContext} ctx */
export async function list({ main }) {
  const agents = await listAll("agent_list");
  if (agents.length === 0) {
    main.append(h("h1", {}, "Tasks"), section("No agents", h("p", {}, "Tasks belong to an agent: ",
      h("a", { href: "#/agents" }, "create an agent"), " first.")));
    return;
  }
  const wanted = sessionStorage.getItem("console.tasks.agent");
  const agent = h("select", { name: "task-agent" }, agents.map((a) =>
    h("option", { value: a.id, selected: a.id === wanted }, a.name)));
  const tasksBox = h("div");
  const showTasks = () => {
    sessionStorage.setItem("console.tasks.agent", agent.value);
    tasksBox.replaceChildren(pager("tasks", async (limit, offset) =>
      (await call("task_list", { path: { id: agent.value }, query: { limit, offset } })).items,
    (items) => table("Tasks", [
      ["Name", (t) => h("a", { href: `#/tasks/${t.id}` }, t.name)],
      ["Description", (t) => t.description],
      ["Steps", (t) => t.main.length],
      ["Updated", (t) => when(t.updated_at)],
    ], items)));
  };
  agent.addEventListener("change", showTasks);
  showTasks();

  const definition = h("textarea", { name: "task-definition", class: "code", required: true, value: EXAMPLE_TASK });
  const create = form({ "aria-label": "New task" }, [
    field("Task (YAML or JSON)", definition, "The body of POST /api/agents/{id}/tasks: name, description, input_schema, main (the steps), workflows."),
  ], "Create task", async () => {
    const body = parseTask(definition.value);
    const task = await call("task_create", { path: { id: agent.value }, body });
    say(`Task ${task.name} created.`);
    location.hash = `#/tasks/${task.id}`;
  });

  main.append(h("h1", {}, "Tasks"), h("div", { class: "grid" },
    section("Tasks of an agent", field("Agent", agent), tasksBox),
    section("New task for this agent", create)));
}

/** @param {PageContext} ctx */
export async function detail({ main, params }) {
  /** @type {import("../api.gen.js").Task} */
  const task = await call("task_get_by_id", { path: { task_id: params.id } });
  const executions = pager("executions", async (limit, offset) =>
    (await call("execution_list", { path: { task_id: task.id }, query: { limit, offset } })).items,
  (items) => table("Executions", [
    ["Execution", (e) => h("a", { href: `#/executions/${e.id}` }, shortId(e.id))],
    ["Status", (e) => badge(e.status)],
    ["Started", (e) => when(e.created_at)],
    ["Updated", (e) => when(e.updated_at)],
  ], items), 10);

  const input = inputForm(task.input_schema);
  const start = form({ "aria-label": "Start an execution" }, [input.fields], "Start execution", async () => {
    const execution = await call("execution_create", { path: { task_id: task.id }, body: { input: input.value() } });
    say("Execution started.");
    location.hash = `#/executions/${execution.id}`;
  });

  main.append(
    h("p", {}, h("a", { href: "#/tasks" }, "← All tasks")),
    h("h1", {}, task.name, " ", h("span", { class: "muted" }, shortId(task.id))),
    task.description ? h("p", {}, task.description) : null,
    h("div", { class: "grid" },
      section("Start an execution", start),
      section("Executions", executions)),
    section("Definition",
      h("details", {}, h("summary", {}, "Input schema"), json(task.input_schema)),
      h("details", { open: true }, h("summary", {}, `Steps (${task.main.length})`), json(task.main)),
      task.workflows ? h("details", {}, h("summary", {}, "Sub-workflows"), json(task.workflows)) : null),
  );
}

/**
 * Fields for an input that `schema` describes: one per property of an
 * object schema whose properties are plain (string, number, integer,
 * boolean, enum), else one JSON textarea.
 * @param {Record<string, any>|null|undefined} schema
 * @returns {{fields: HTMLElement, value: () => Record<string, unknown>}}
 */
export function inputForm(schema) {
  const props = schema && schema.type === "object" && schema.properties ? Object.entries(schema.properties) : null;
  const plain = (s) => s && (Array.isArray(s.enum) || ["string", "number", "integer", "boolean"].includes(s.type));
  if (!props || props.length === 0 || !props.every(([, s]) => plain(s))) {
    const text = h("textarea", { name: "execution-input", class: "code", value: "{}" });
    return {
      fields: field("Input (JSON)", text, schema ? "The task's input_schema is shown below." : "The task takes any object."),
      value: () => parseJson(text.value, "The input") ?? {},
    };
  }
  const required = new Set(schema.required ?? []);
  const controls = props.map(([name, s]) => {
    let control;
    if (Array.isArray(s.enum)) {
      control = h("select", { name: `input-${name}` }, required.has(name) ? null : h("option", { value: "" }, "—"),
        s.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    } else if (s.type === "boolean") {
      control = h("input", { type: "checkbox", name: `input-${name}`, checked: s.default === true });
    } else {
      control = h("input", {
        name: `input-${name}`, type: s.type === "string" ? "text" : "number",
        step: s.type === "integer" ? 1 : "any", required: required.has(name),
        value: s.default !== undefined ? String(s.default) : null,
      });
    }
    const label = `${s.title ?? name}${required.has(name) ? "" : " (optional)"}`;
    const el = s.type === "boolean" ? check(label, /** @type {HTMLInputElement} */ (control)) : field(label, control, s.description);
    return { name, s, control, el };
  });
  return {
    fields: h("div", {}, controls.map((c) => c.el)),
    value: () => {
      /** @type {Record<string, unknown>} */
      const out = {};
      for (const { name, s, control } of controls) {
        if (control instanceof HTMLInputElement && control.type === "checkbox") out[name] = control.checked;
        else if (control.value === "") continue;
        else if (Array.isArray(s.enum)) out[name] = JSON.parse(control.value);
        else if (s.type === "string") out[name] = control.value;
        else out[name] = Number(control.value);
      }
      return out;
    },
  };
}

/** The status a transition leaves its execution in. */
const STATUS_AFTER = {
  init: "starting", init_branch: "running", step: "running", resume: "running", finish_branch: "running",
  wait: "awaiting_input", finish: "succeeded", error: "failed", cancelled: "cancelled",
};

/** @param {PageContext} ctx */
export async function execution({ main, params, signal }) {
  /** @type {import("../api.gen.js").Execution} */
  const e = await call("execution_get", { path: { id: params.id } });
  const status = h("span", {}, badge(e.status));
  const live = h("span", { class: "muted", "aria-live": "polite" });
  const timeline = h("ol", { class: "timeline", "aria-label": "Transitions" });
  const outcome = h("div");
  const resumeBox = h("div");
  const count = h("span", { class: "muted" });
  let previous = null;
  let n = 0;

  const ended = h("p", { class: "muted" }, "The execution has ended: nothing to resume or cancel.");
  const setStatus = (s) => {
    status.replaceChildren(badge(s));
    const over = ["succeeded", "failed", "cancelled"].includes(s);
    resumeBox.hidden = s !== "awaiting_input";
    cancel.hidden = over;
    ended.hidden = !over;
  };

  /** @param {import("../api.gen.js").Transition} t */
  const add = (t) => {
    n += 1;
    const at = new Date(t.created_at);
    const took = previous ? `${Math.max(0, at.getTime() - previous.getTime())} ms after the previous` : "first";
    previous = at;
    const place = `${t.current.workflow}[${t.current.step}]`;
    const next = t.next ? ` → ${t.next.workflow}[${t.next.step}]` : "";
    timeline.append(h("li", { class: `t-${t.type}` },
      h("div", {}, badge(t.type), " ", h("code", {}, place + next)),
      h("div", { class: "meta" }, when(t.created_at), ` · ${took}`),
      t.output === null || t.output === undefined ? null
        : h("details", { open: t.type === "wait" || t.type === "finish" || t.type === "error" },
          h("summary", {}, t.type === "resume" ? "Input given" : t.type === "wait" ? "What it waits for" : "Output"), json(t.output))));
    count.textContent = `${n} transition(s)`;
    setStatus(STATUS_AFTER[t.type] ?? e.status);
  };

  const resumeInput = h("textarea", { name: "resume-input", class: "code", value: "{}" });
  resumeBox.append(form({ "aria-label": "Resume the execution" }, [
    field("Input for the waiting step (JSON)", resumeInput),
  ], "Resume", async () => {
    const input = parseJson(resumeInput.value, "The input") ?? null;
    await call("execution_update", { path: { id: e.id }, body: { status: "running", input } });
    say("Execution resumed.");
  }));
  const reason = h("input", { name: "cancel-reason" });
  const cancel = h("div", {}, form({ "aria-label": "Cancel the execution" }, [field("Reason (optional)", reason)],
    "Cancel execution", async () => {
      await call("execution_update", { path: { id: e.id }, body: { status: "cancelled", reason: reason.value || null } });
      say("Execution cancelled.");
    }));
  setStatus(e.status);

  main.append(
    h("p", {}, h("a", { href: `#/tasks/${e.task_id}` }, "← Its task")),
    h("h1", {}, "Execution ", h("span", { class: "muted" }, shortId(e.id)), " ", status),
    h("div", { class: "grid" },
      section("Timeline", h("p", {}, count, " ", live), timeline, outcome),
      h("div", {},
        section("Input", json(e.input)),
        section("Control", resumeBox, cancel, ended))),
  );

  // Every transition so far, then each new one as it commits; the stream
  // ends after the last (finish, error, cancelled).
  live.textContent = "following live…";
  live.setAttribute("aria-busy", "true");
  /** @type {{message: string, code?: string} | null} */
  let failure = null;
  await stream("transition_stream", { path: { id: e.id }, signal }, (ev) => {
    if (ev.event === "error") {
      failure = JSON.parse(ev.data).error;
      return;
    }
    add(JSON.parse(ev.data));
  });
  live.removeAttribute("aria-busy");
  live.textContent = failure ? `the stream failed: ${failure.message}` : "ended.";
  const done = await call("execution_get", { path: { id: e.id } });
  setStatus(done.status);
  outcome.replaceChildren(h("div", {},
    done.error ? h("div", { class: "error" }, `Error: ${done.error}`) : null,
    done.output !== undefined && done.output !== null ? [h("h3", {}, "Output"), json(done.output)] : null));
}
