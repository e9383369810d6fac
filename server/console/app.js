// The console's entry: sign-in, the navigation and a hash router
// (`#/agents/<id>`): the server answers the one page, the routes live here.

import { ApiError, call, clearKey, getKey, setKey } from "./api.js";
import { clearError, field, form, h, setErrorBox, showError } from "./ui.js";
import * as agents from "./pages/agents.js";
import * as sessions from "./pages/sessions.js";
import * as tasks from "./pages/tasks.js";
import * as openai from "./pages/openai.js";
import * as keys from "./pages/keys.js";
import * as health from "./pages/health.js";

/**
 * The routes: a pattern of `#/…` segments (`:name` takes one) and the page
 * that renders it. The first that matches wins.
 * @type {[string, string, (ctx: PageContext) => Promise<void>][]}
 */
const ROUTES = [
  ["agents", "Agents", agents.list],
  ["agents/:id", "Agent", agents.detail],
  ["sessions", "Sessions", sessions.list],
  ["sessions/:id", "Session", sessions.detail],
  ["tasks", "Tasks", tasks.list],
  ["tasks/:id", "Task", tasks.detail],
  ["executions/:id", "Execution", tasks.execution],
  ["openai", "Responses and conversations", openai.list],
  ["openai/responses/:id", "Response", openai.response],
  ["openai/conversations/:id", "Conversation", openai.conversation],
  ["keys", "API keys", keys.page],
  ["health", "Health", health.page],
];

/**
 * What a page gets: where to render, the route's parameters, and a signal
 * that aborts when the person leaves the page (streams stop then).
 * @typedef {Object} PageContext
 * @property {HTMLElement} main
 * @property {Record<string, string>} params
 * @property {AbortSignal} signal
 */

const main = /** @type {HTMLElement} */ (document.getElementById("main"));
const nav = /** @type {HTMLElement} */ (document.getElementById("nav"));
const signOut = /** @type {HTMLButtonElement} */ (document.getElementById("sign-out"));
let leaving = new AbortController();

function match(pattern, segments) {
  const parts = pattern.split("/");
  if (parts.length !== segments.length) return null;
  /** @type {Record<string, string>} */
  const params = {};
  for (let i = 0; i < parts.length; i += 1) {
    if (parts[i].startsWith(":")) params[parts[i].slice(1)] = decodeURIComponent(segments[i]);
    else if (parts[i] !== segments[i]) return null;
  }
  return params;
}

async function route() {
  leaving.abort();
  leaving = new AbortController();
  const signedIn = Boolean(getKey());
  nav.hidden = !signedIn;
  signOut.hidden = !signedIn;
  const errors = h("div", { class: "errors" });
  setErrorBox(errors);
  if (!signedIn) {
    main.replaceChildren(errors, signInForm());
    document.title = "Sign in · agent-platform console";
    main.querySelector("input")?.focus();
    return;
  }
  const segments = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (segments.length === 0) {
    location.replace("#/agents");
    return;
  }
  for (const link of nav.querySelectorAll("a")) {
    const here = link.getAttribute("href") === `#/${segments[0]}` ||
      (segments[0] === "executions" && link.getAttribute("href") === "#/tasks");
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  for (const [pattern, title, render] of ROUTES) {
    const params = match(pattern, segments);
    if (!params) continue;
    document.title = `${title} · agent-platform console`;
    main.replaceChildren(errors);
    try {
      await render({ main, params, signal: leaving.signal });
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        clearKey();
        await route();
        showError(new Error("The API key was refused (revoked or mistyped): sign in again."));
        return;
      }
      showError(e);
    }
    return;
  }
  main.replaceChildren(errors, h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/agents" }, "Go to the agents.")));
}

function signInForm() {
  const key = h("input", { type: "password", name: "key", autocomplete: "off", required: true, spellcheck: "false" });
  return h("div", { class: "sign-in card" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Enter an API key of this server: the one it printed when it first started, or one made with ",
      h("code", {}, "agent-platform keys create"), ". It is kept for this browser tab only."),
    form({ "aria-label": "Sign in" }, [field("API key", key)], "Sign in", async () => {
      setKey(key.value.trim());
      try {
        await call("key_list", { query: { limit: 1 } });
      } catch (e) {
        clearKey();
        throw e;
      }
      clearError();
      if (!location.hash || location.hash === "#/") location.hash = "#/agents";
      await route();
    }));
}

signOut.addEventListener("click", () => {
  clearKey();
  route();
});
window.addEventListener("hashchange", () => route());
window.addEventListener("unhandledrejection", (event) => {
  showError(event.reason);
});
route();
