// API keys of the signed-in tenant: create (the key is shown once), list, revoke.

import { call, clearKey, getKey } from "../api.js";
import { button, h, pager, say, section, shortId, table, when } from "../ui.js";

/** @typedef {import("../app.js").PageContext} PageContext */

/** @param {PageContext} ctx */
export async function page({ main }) {
  const mine = getKey() ?? "";
  const created = h("div", { "aria-live": "polite" });
  const keys = pager("keys", async (limit, offset) =>
    (await call("key_list", { query: { limit, offset } })).items,
  (items) => table("API keys", [
    ["Prefix", (k) => h("code", {}, k.prefix)],
    ["Id", (k) => shortId(k.id)],
    ["Created", (k) => when(k.created_at)],
    ["", (k) => (mine.startsWith(k.prefix) ? h("span", { class: "badge" }, "this session's key") : null)],
    ["", (k) => button("Revoke", async () => {
      await call("key_delete", { path: { key_id: k.id } });
      say(`Key ${k.prefix} revoked.`);
      if (mine.startsWith(k.prefix)) {
        clearKey();
        location.hash = "#/agents";
        return;
      }
      keys.reload();
    }, { class: "danger", "aria-label": `Revoke key ${k.prefix}` })],
  ], items));

  const create = button("Create key", async () => {
    /** @type {import("../api.gen.js").ApiKeyCreated} */
    const k = await call("key_create");
    const copy = button("Copy", async () => {
      await navigator.clipboard.writeText(k.key);
      say("Copied.");
    }, { class: "quiet", "aria-label": "Copy the new key" });
    created.replaceChildren(h("div", { class: "notice" },
      h("p", {}, h("strong", {}, "New key, shown this once: "), "keep it now; the server keeps only its hash."),
      h("p", {}, h("code", { class: "new-key" }, k.key), " ", copy)));
    keys.reload();
  });

  main.append(h("h1", {}, "API keys"),
    h("p", { class: "muted" }, "The keys of this tenant. A revoked key is refused at once; the last key cannot be revoked (create its successor first)."),
    section("New key", create, created),
    section("Keys", keys));
}
