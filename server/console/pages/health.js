// Health: the store and search (`GET /api/healthz`, no key needed) and the
// model providers (`GET /v1/models`: the tenant's agents, then each
// provider's models).

import { ApiError, call } from "../api.js";
import { badge, button, h, section, table } from "../ui.js";

/** @typedef {import("../app.js").PageContext} PageContext */

/** @param {PageContext} ctx */
export async function page({ main }) {
  const store = h("div");
  const models = h("div");
  const check = async () => {
    try {
      /** @type {import("../api.gen.js").Health} */
      const health = await call("healthz");
      store.replaceChildren(h("dl", { class: "facts" },
        h("dt", {}, "Store"), h("dd", {}, badge(health.status), " it takes writes"),
        h("dt", {}, "Search"), h("dd", {}, badge(health.search),
          health.search === "warming" ? " the index is being built; searches answer 503 until it is ready" : "")),
      h("p", { class: "muted" }, `Checked ${new Date().toLocaleTimeString()}.`));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      store.replaceChildren(h("div", { class: "error", role: "alert" },
        h("strong", {}, `Unhealthy (${e.status}${e.code ? `, ${e.code}` : ""}): `), e.message,
        e.requestId ? h("span", { class: "request-id" }, " request id ", h("code", {}, e.requestId)) : null));
    }
    /** @type {import("../api.gen.js").ModelList} */
    const list = await call("openai_model_list");
    const byOwner = new Map();
    for (const m of list.data) byOwner.set(m.owned_by, [...(byOwner.get(m.owned_by) ?? []), m.id]);
    const agents = byOwner.get("agent-platform")?.length ?? 0;
    byOwner.delete("agent-platform");
    models.replaceChildren(
      h("p", {}, `${agents} agent(s) answer as models. `,
        byOwner.size ? "" : "No provider lists a model: chats answer 503 unless a configured default model is served."),
      table("Providers and their models", [
        ["Provider", ([owner]) => h("code", {}, owner)],
        ["Models", ([, ids]) => ids.join(", ")],
      ], [...byOwner.entries()]));
  };
  await check();
  main.append(h("h1", {}, "Health"),
    h("div", { class: "grid" },
      section("Store and search", store, button("Check again", check, { class: "quiet" })),
      section("Model providers", models)),
    h("p", { class: "muted" }, "The API offers no count of pending work (queued executions, background runs); each task's executions list shows their status."));
}
