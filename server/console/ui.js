// Render helpers: elements from plain calls (no HTML strings, so no markup
// can come in through data), labelled fields, tables, pagers, errors.

import { ApiError } from "./api.js";

let nextId = 0;

/**
 * An element: `h("button", {type: "button", onclick: f}, "Save")`. Attributes
 * named `on…` become event listeners; `null`/`false` attributes are left out;
 * children are nodes or text (arrays are flattened, null skipped).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any>} [attrs]
 * @param {...any} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "value") /** @type {HTMLInputElement} */ (el).value = value;
    else if (name === "checked") /** @type {HTMLInputElement} */ (el).checked = value;
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** A fresh id for a label's `for`. */
export function uid(prefix = "f") {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

/**
 * A labelled control: `field("Name", h("input", {name: "name"}))`.
 * @param {string} label
 * @param {HTMLElement} control
 * @param {string} [hint]
 */
export function field(label, control, hint) {
  if (!control.id) control.id = uid();
  const hintEl = hint ? h("small", { id: `${control.id}-hint`, class: "hint" }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, hintEl);
}

/**
 * A labelled checkbox or radio button, the label after it.
 * @param {string} label
 * @param {HTMLInputElement} input
 */
export function check(label, input) {
  if (!input.id) input.id = uid();
  return h("div", { class: "field inline" }, input, h("label", { for: input.id }, label));
}

/** A button that runs `action`, disabled and marked busy while it runs. */
export function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", () => busy(b, action));
  return b;
}

/**
 * Runs `action` with `control` disabled and `aria-busy` set, so long work
 * shows (the stylesheet draws a spinner); errors go to the page's error box.
 * @param {HTMLButtonElement} control
 * @param {() => Promise<unknown>} action
 */
export async function busy(control, action) {
  control.disabled = true;
  control.setAttribute("aria-busy", "true");
  try {
    await action();
  } catch (e) {
    showError(e);
  } finally {
    control.disabled = false;
    control.removeAttribute("aria-busy");
  }
}

/**
 * A form whose submit runs `action(data)` (never a navigation): Enter in a
 * field submits it, and its submit button shows progress.
 * @param {Record<string, any>} attrs
 * @param {HTMLElement[]} fields
 * @param {string} submitLabel
 * @param {(form: HTMLFormElement) => Promise<unknown>} action
 */
export function form(attrs, fields, submitLabel, action) {
  const submit = h("button", { type: "submit" }, submitLabel);
  const f = h("form", attrs, fields, h("div", { class: "actions" }, submit));
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(submit, () => action(f));
  });
  return f;
}

/**
 * A table: `columns` are [header, (row) => cell content].
 * @template T
 * @param {string} caption
 * @param {[string, (row: T) => any][]} columns
 * @param {T[]} rows
 */
export function table(caption, columns, rows) {
  if (rows.length === 0) return h("p", { class: "empty" }, `${caption}: none yet.`);
  return h(
    "table",
    {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))),
  );
}

/**
 * A paged list: loads `pageSize` records at `offset` with `load(limit,
 * offset)` and renders them with `render(items)`, with Previous/Next buttons.
 * @param {string} name what is listed, for the buttons' labels
 * @param {(limit: number, offset: number) => Promise<any[]>} load
 * @param {(items: any[]) => HTMLElement} render
 * @param {number} [pageSize]
 */
export function pager(name, load, render, pageSize = 20) {
  /** @type {HTMLDivElement & {reload: () => void}} */
  const box = Object.assign(h("div", { class: "paged" }), { reload: () => {} });
  let offset = 0;
  const show = async () => {
    box.replaceChildren(h("p", { class: "loading", "aria-busy": "true" }, `Loading ${name}…`));
    const items = await load(pageSize, offset);
    const prev = button("Previous", async () => { offset = Math.max(0, offset - pageSize); await show(); }, {
      "aria-label": `Previous page of ${name}`, disabled: offset === 0,
    });
    const next = button("Next", async () => { offset += items.length; await show(); }, {
      "aria-label": `Next page of ${name}`, disabled: items.length < pageSize,
    });
    const range = items.length ? `${offset + 1}–${offset + items.length}` : "—";
    // One page in all: no pager.
    const alone = offset === 0 && items.length < pageSize;
    box.replaceChildren(render(items), alone ? "" : h("div", { class: "pager" }, prev, h("span", { class: "muted" }, range), next));
  };
  box.reload = () => show().catch(showError);
  box.reload();
  return box;
}

/** JSON, indented, in a <pre>. */
export function json(value) {
  return h("pre", { class: "json" }, value === undefined ? "" : JSON.stringify(value, null, 2));
}

/** A date-time, short and local. */
export function when(value) {
  if (value === null || value === undefined) return "";
  const d = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return h("time", { datetime: d.toISOString() }, d.toLocaleString());
}

/**
 * A short id with its full value as a tooltip: its end, since ids (UUIDv7)
 * made about the same time share their first digits.
 */
export function shortId(id) {
  return h("code", { title: id }, "…" + String(id).slice(-8));
}

/** A status word as a coloured badge. */
export function badge(text) {
  return h("span", { class: `badge badge-${String(text).replace(/[^a-z_]/gi, "")}` }, text);
}

let errorBox = null;

/** Where errors show (the page sets it on each render). */
export function setErrorBox(el) {
  errorBox = el;
}

/**
 * Shows an error: the API's message, its status and request id.
 * @param {unknown} e
 */
export function showError(e) {
  if (e instanceof Error && e.name === "AbortError") return;
  const box = errorBox;
  if (!box) return;
  const parts = [];
  if (e instanceof ApiError) {
    parts.push(h("strong", {}, `Error ${e.status}${e.code ? ` (${e.code})` : ""}: `), e.message);
    if (e.requestId) parts.push(h("span", { class: "request-id" }, " request id ", h("code", {}, e.requestId)));
  } else {
    parts.push(h("strong", {}, "Error: "), e instanceof Error ? e.message : String(e));
  }
  box.replaceChildren(h("div", { class: "error", role: "alert" }, parts, " ",
    h("button", { type: "button", class: "quiet", "aria-label": "Dismiss the error", onclick: () => box.replaceChildren() }, "×")));
}

/** Clears the error box. */
export function clearError() {
  errorBox?.replaceChildren();
}

let sayTimer = 0;

/** Says something briefly in the status line (read by screen readers). */
export function say(text) {
  const status = document.getElementById("status");
  if (!status) return;
  status.textContent = text;
  clearTimeout(sayTimer);
  sayTimer = setTimeout(() => { status.textContent = ""; }, 4000);
}

/** A section with a heading. */
export function section(title, ...children) {
  return h("section", { class: "card" }, h("h2", {}, title), children);
}

/** Parses JSON typed by a person, with an error that says which field. */
export function parseJson(text, what) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${what} is not valid JSON: ${e.message}`);
  }
}
