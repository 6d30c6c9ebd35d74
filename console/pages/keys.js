// API keys: GET /v1/keys (name, prefix, scopes, member and role, created, expires, last
// used, revoked). New key: a name, scopes (everything, or read/write/exec per resource kind;
// none ticked: this key's own) and an expiry; its secret is shown once, in a box with a copy
// button and a warning, and kept nowhere. Revoke asks first; revoking the key this session
// stands for ends the session (the next call is 401 and the page goes back to sign-in).

import { api } from "../api.js";
import {
  h, announce, page, dataTable, actionButton, field, input, formCard, when, stateBadge, path,
  copyable,
} from "../ui.js";

// The resource kinds scopes name (pandastack-api-types `SCOPE_KINDS`), but `hosts`, which
// only operators' keys (made on the server) reach.
const KINDS = ["sandboxes", "snapshots", "templates", "volumes", "databases", "apps", "functions", "schedules", "keys", "usage", "events", "webhooks", "audit", "members"];
const ACTIONS = ["read", "write", "exec"];

export function render(main, _params, session) {
  const { body, errors } = page(main, "API keys");
  const onceBox = h("div", { "aria-live": "polite" });

  const table = dataTable({
    caption: "API keys of this workspace",
    empty: "No keys.",
    columns: [
      {
        label: "Name",
        cell: (k) => h("span", {}, k.name || h("span", { class: "muted" }, "(no name)"), k.id === session?.key_id ? h("span", { class: "muted small" }, " · this session's key") : null),
      },
      { label: "Prefix", class: "mono", cell: (k) => `${k.prefix}…` },
      { label: "Scopes", class: "meta mono", cell: (k) => (k.admin ? "admin, " : "") + (k.scopes.join(", ") || "none") },
      { label: "Member", class: "meta", cell: (k) => (k.member_id ? `${k.member_id}${k.role ? " (" + k.role + ")" : ""}` : "workspace key") },
      { label: "Created", cell: (k) => when(k.created_at) },
      { label: "Expires", cell: (k) => (k.expires_at ? when(k.expires_at) : "never") },
      { label: "Last used", cell: (k) => (k.last_used_at ? when(k.last_used_at) : h("span", { class: "muted" }, "never")) },
      { label: "State", cell: (k) => stateBadge(k.revoked ? "revoked" : k.expires_at && new Date(k.expires_at) < new Date() ? "expired" : "active") },
      {
        label: "Actions",
        cell: (k) =>
          k.revoked
            ? ""
            : actionButton(
                "Revoke",
                async () => {
                  await api("DELETE", path("/v1/keys", k.id));
                  announce(`Key ${k.name || k.id} revoked`);
                  // Revoking this session's key ends the session: this read is then a 401,
                  // which the errors area answers by reloading (to the sign-in form).
                  await load();
                },
                {
                  errors,
                  danger: true,
                  ariaLabel: `Revoke key ${k.name || k.id}`,
                  confirm:
                    k.id === session?.key_id
                      ? `Revoke ${k.name || k.id}? It is the key this session signed in with: you will be signed out.`
                      : `Revoke key ${k.name || k.id}? Anything using it stops working at once.`,
                },
              ),
      },
    ],
  });

  async function load() {
    const list = await api("GET", "/v1/keys");
    table.set(list.data);
  }

  body.append(newKeyForm(errors, onceBox, load), onceBox, h("h2", { class: "section" }, "All keys"), table.el);
  load().catch((e) => errors.show(e));
  // Keys have no events; nothing to follow.
  return () => onceBox.replaceChildren();
}

function newKeyForm(errors, onceBox, reload) {
  const name = input({ name: "name", required: true, maxlength: "64", autocomplete: "off" });
  const expires = input({ type: "datetime-local", name: "expires" });
  const everything = h("input", { type: "checkbox", id: "scope-all", value: "*" });
  const boxes = [];
  const grid = h(
    "div",
    { class: "scope-grid" },
    KINDS.map((kind) =>
      h("div", { class: "scope-row", role: "group", "aria-label": kind },
        h("span", { class: "kind", "aria-hidden": "true" }, kind),
        ACTIONS.map((a) => {
          const id = `scope-${kind}-${a}`;
          const cb = h("input", { type: "checkbox", id, value: `${kind}:${a}`, "data-kind": kind });
          boxes.push(cb);
          return h("label", { for: id }, cb, a);
        })),
    ),
  );
  everything.addEventListener("change", () => {
    for (const b of boxes) b.disabled = everything.checked;
  });
  const scopes = h(
    "fieldset",
    { class: "scopes" },
    h("legend", {}, "Scopes"),
    h("p", { class: "muted small" }, "None ticked: the same scopes as the key this session signed in with. A key can only grant what its own scopes cover."),
    h("div", { class: "check" }, everything, h("label", { for: "scope-all" }, "Everything (*)")),
    grid,
  );
  return formCard(
    "New key",
    [
      h("div", { class: "form-row" }, field("Name", name), field("Expires (optional, your local time)", expires, "Empty: never (or when this key expires)")),
      scopes,
    ],
    async () => {
      const req = { name: name.value.trim() };
      if (everything.checked) req.scopes = ["*"];
      else {
        const picked = [];
        for (const kind of KINDS) {
          const on = boxes.filter((b) => b.dataset.kind === kind && b.checked).map((b) => b.value.split(":")[1]);
          if (on.length === ACTIONS.length) picked.push(`${kind}:*`);
          else picked.push(...on.map((a) => `${kind}:${a}`));
        }
        if (picked.length) req.scopes = picked;
      }
      if (expires.value) {
        const at = new Date(expires.value);
        if (isNaN(at)) throw new Error("Expires: not a date and time");
        req.expires_at = at.toISOString();
      }
      const k = await api("POST", "/v1/keys", req);
      showOnce(onceBox, k);
      name.value = "";
      expires.value = "";
      await reload();
    },
    { errors, inline: false, submitLabel: "Create key" },
  );
}

/** The new key's secret, this once: a warning, the secret with a copy button, and "Done",
 * which forgets it (the secret is in no other place on the page or in storage). */
function showOnce(box, k) {
  const title = h("h2", { tabindex: "-1", id: "once-title" }, `Key ${k.name} created`);
  const done = h("button", { type: "button" }, "Done: I have copied it");
  done.addEventListener("click", () => {
    box.replaceChildren();
    announce("The secret is no longer shown");
  });
  box.replaceChildren(
    h("section", { class: "card once stack", "aria-labelledby": "once-title" },
      title,
      h("p", { class: "warning", role: "alert" }, "Copy this secret now: it is shown only this once and cannot be shown again."),
      h("div", { class: "secret-value" }, copyable(k.secret, `Secret of key ${k.name}`)),
      h("p", { class: "muted small" }, `Scopes: ${k.scopes.join(", ")}${k.expires_at ? ` · expires ${new Date(k.expires_at).toLocaleString()}` : ""}`),
      done),
  );
  title.focus();
}
