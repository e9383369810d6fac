// The console's one way to the API: `call(operationId, {path, query, body})`,
// built from the generated operation table (api.gen.js), with the key the
// person signed in with (kept in sessionStorage for this tab's session only).

import { operations } from "./api.gen.js";
import { readEvents } from "./sse.js";

const KEY = "agent-platform.console.key";

/** @returns {string|null} */
export function getKey() {
  return sessionStorage.getItem(KEY);
}

/** @param {string} key */
export function setKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function clearKey() {
  sessionStorage.removeItem(KEY);
}

/** An error answer of the API: its status, its message and its request id. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {string|null} requestId
   * @param {string|null} code
   */
  constructor(status, message, requestId, code) {
    super(message);
    this.status = status;
    this.requestId = requestId;
    this.code = code;
  }
}

/**
 * The URL of an operation with its path and query parameters.
 * @param {string} id an operation id of api.gen.js
 * @param {Record<string, string>} path
 * @param {Record<string, unknown>} query
 */
export function url(id, path = {}, query = {}) {
  const op = operations[id];
  if (!op) throw new Error(`no operation ${id} in the spec`);
  let p = op.path;
  for (const name of op.pathParams) {
    if (path[name] === undefined) throw new Error(`${id} needs the path parameter ${name}`);
    p = p.replace(`{${name}}`, encodeURIComponent(String(path[name])));
  }
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (!op.queryParams.includes(name)) throw new Error(`${id} takes no query parameter ${name}`);
    if (value !== undefined && value !== null && value !== "") q.set(name, String(value));
  }
  const qs = q.toString();
  return qs ? `${p}?${qs}` : p;
}

/**
 * Sends a request; answers the response when it succeeded, else throws its ApiError.
 * @param {string} id
 * @param {{path?: Record<string, string>, query?: Record<string, unknown>, body?: unknown, signal?: AbortSignal}} [args]
 * @returns {Promise<Response>}
 */
async function send(id, { path = {}, query = {}, body, signal } = {}) {
  const op = operations[id];
  const headers = { Accept: "application/json, text/event-stream" };
  const key = getKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  const init = { method: op?.method, headers, signal };
  if (op?.body) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body ?? {});
  }
  const response = await fetch(url(id, path, query), init);
  if (!response.ok) throw await errorOf(response);
  return response;
}

/**
 * Calls an operation and answers its JSON (null for an empty answer).
 * @param {string} id an operation id of api.gen.js, e.g. "agent_create"
 * @param {{path?: Record<string, string>, query?: Record<string, unknown>, body?: unknown, signal?: AbortSignal}} [args]
 */
export async function call(id, args = {}) {
  const response = await send(id, args);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/**
 * Calls an operation that answers `text/event-stream` and hands each event
 * to `onEvent` until the stream ends. An error answer throws before any
 * event. Answers the request id (for an error event in the stream).
 * @param {string} id
 * @param {{path?: Record<string, string>, query?: Record<string, unknown>, body?: unknown, signal?: AbortSignal}} args
 * @param {(e: import("./sse.js").SseEvent) => void} onEvent
 * @returns {Promise<string|null>}
 */
export async function stream(id, args, onEvent) {
  const response = await send(id, args);
  await readEvents(response, onEvent);
  return response.headers.get("x-request-id");
}

/**
 * The ApiError of an error answer: `/api`'s `{detail, code, request_id}` or
 * its 422 `{detail: [{loc, msg}]}`, or `/v1`'s `{error: {message, code}}`;
 * the request id from the body or the `x-request-id` header.
 * @param {Response} response
 */
async function errorOf(response) {
  const headerId = response.headers.get("x-request-id");
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON: the status says it all.
  }
  let message = `${response.status} ${response.statusText}`;
  let code = null;
  if (body && Array.isArray(body.detail)) {
    message = body.detail.map((i) => `${(i.loc || []).join(".")}: ${i.msg}`).join("; ");
    code = "validation";
  } else if (body && typeof body.detail === "string") {
    message = body.detail;
    code = body.code ?? null;
  } else if (body && body.error && typeof body.error.message === "string") {
    message = body.error.message;
    code = body.error.code ?? body.error.type ?? null;
  }
  return new ApiError(response.status, message, body?.request_id || headerId, code);
}

/**
 * Every page of a list operation, `limit` records at a time, until a page
 * comes back empty (for the few lists the console needs whole, e.g. agents
 * in a select; at most `max` records).
 * @param {string} id
 * @param {{path?: Record<string, string>, query?: Record<string, unknown>}} [args]
 */
export async function listAll(id, { path = {}, query = {} } = {}, max = 1000) {
  const items = [];
  for (;;) {
    const page = await call(id, { path, query: { ...query, limit: 100, offset: items.length } });
    items.push(...page.items);
    if (page.items.length === 0 || items.length >= max) return items;
  }
}
