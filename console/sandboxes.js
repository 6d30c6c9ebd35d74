// Sandboxes: every page of GET /v1/sandboxes, kept live by the workspace's event stream
// (GET /v1/events as Server-Sent Events): a `sandbox.*` event re-reads that one sandbox and
// updates its row in place (or removes it when it is gone). New sandbox and delete send the
// session's CSRF token (api.js).

import { api, listAll, ApiError } from "./api.js";
import { h, announce, errorBox } from "./dom.js";

const STATES = ["starting", "running", "paused", "hibernated", "stopped", "failed", "lost"];

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

function metadataText(m) {
  return Object.entries(m || {})
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

export function renderSandboxes(main) {
  const rows = new Map(); // id -> <tr>
  const errors = h("div", { class: "errors" });
  const live = h("span", { class: "live muted" }, "connecting…");
  const tbody = h("tbody");
  const empty = h("p", { class: "muted", hidden: true }, "No sandboxes yet.");
  const table = h(
    "table",
    {},
    h("caption", { class: "visually-hidden" }, "Sandboxes of this workspace"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["ID", "Template", "State", "Created", "Metadata"].map((t) => h("th", { scope: "col" }, t)),
        h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")),
      ),
    ),
    tbody,
  );
  const form = newSandboxForm(errors, (sb) => upsert(sb));

  main.replaceChildren(
    h(
      "section",
      { "aria-labelledby": "sb-title" },
      h("div", { class: "head" }, h("h1", { id: "sb-title" }, "Sandboxes"), live),
      form,
      errors,
      h("div", { class: "table-wrap" }, table),
      empty,
    ),
  );

  function showEmpty() {
    empty.hidden = rows.size > 0;
  }

  function row(sb) {
    const del = h(
      "button",
      { type: "button", class: "danger", "aria-label": `Delete sandbox ${sb.id}` },
      "Delete",
    );
    del.addEventListener("click", async () => {
      if (!confirm(`Delete sandbox ${sb.id}? This cannot be undone.`)) return;
      del.disabled = true;
      errors.replaceChildren();
      try {
        await api("DELETE", `/v1/sandboxes/${encodeURIComponent(sb.id)}`);
        remove(sb.id);
        announce(`Sandbox ${sb.id} deleted`);
      } catch (e) {
        errors.replaceChildren(errorBox(e));
        del.disabled = false;
      }
    });
    const state = STATES.includes(sb.state) ? sb.state : "other";
    return h(
      "tr",
      { "data-id": sb.id },
      h("td", { class: "mono" }, sb.id),
      h("td", {}, sb.template || ""),
      h("td", {}, h("span", { class: `state state-${state}` }, sb.state)),
      h("td", {}, h("time", { datetime: sb.created_at }, when(sb.created_at))),
      h("td", { class: "meta" }, metadataText(sb.metadata)),
      h("td", {}, del),
    );
  }

  function upsert(sb) {
    const tr = row(sb);
    const old = rows.get(sb.id);
    if (old) old.replaceWith(tr);
    else tbody.prepend(tr);
    rows.set(sb.id, tr);
    showEmpty();
  }

  function remove(id) {
    rows.get(id)?.remove();
    rows.delete(id);
    showEmpty();
  }

  // Re-reads one sandbox after an event about it; a burst of events for one id reads it once.
  const pending = new Set();
  async function refresh(id) {
    if (pending.has(id)) return;
    pending.add(id);
    await Promise.resolve();
    pending.delete(id);
    try {
      upsert(await api("GET", `/v1/sandboxes/${encodeURIComponent(id)}`));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) remove(id);
      else if (e instanceof ApiError && e.status === 401) location.reload();
      else errors.replaceChildren(errorBox(e));
    }
  }

  // The stream starts with events from now on: open it before the first list, so nothing
  // between the two is missed (an event for a listed sandbox only re-reads it).
  const source = new EventSource("/v1/events");
  source.addEventListener("open", () => (live.textContent = "live"));
  source.addEventListener("error", () => (live.textContent = "reconnecting…"));
  const onEvent = (ev) => {
    try {
      const e = JSON.parse(ev.data);
      if (e.resource && e.resource.kind === "sandbox") refresh(e.resource.id);
    } catch {
      /* not an event this page reads */
    }
  };
  for (const t of [
    "sandbox.created",
    "sandbox.paused",
    "sandbox.resumed",
    "sandbox.hibernated",
    "sandbox.woken",
    "sandbox.killed",
    "sandbox.lost",
    "sandbox.expired",
    "sandbox.forked",
  ]) {
    source.addEventListener(t, onEvent);
  }
  source.addEventListener("message", onEvent);

  listAll("/v1/sandboxes")
    .then((all) => {
      const frag = document.createDocumentFragment();
      for (const sb of all) {
        if (rows.has(sb.id)) continue;
        const tr = row(sb);
        rows.set(sb.id, tr);
        frag.append(tr);
      }
      tbody.append(frag);
      showEmpty();
      announce(`${rows.size} sandboxes`);
    })
    .catch((e) => errors.replaceChildren(errorBox(e)));

  return () => source.close();
}

function newSandboxForm(errors, created) {
  const template = h("select", { id: "new-template", name: "template", required: true });
  const ttl = h("input", {
    id: "new-ttl",
    name: "ttl",
    type: "number",
    min: "1",
    step: "1",
    inputmode: "numeric",
    placeholder: "server default",
  });
  const submit = h("button", { type: "submit" }, "Create");
  const form = h(
    "form",
    { class: "card inline", "aria-labelledby": "new-title" },
    h("h2", { id: "new-title" }, "New sandbox"),
    h("div", { class: "field" }, h("label", { for: "new-template" }, "Template"), template),
    h("div", { class: "field" }, h("label", { for: "new-ttl" }, "TTL (seconds)"), ttl),
    submit,
  );
  api("GET", "/v1/templates")
    .then((list) => {
      template.replaceChildren(
        ...list.data.map((t) => h("option", { value: t.name }, t.name)),
      );
    })
    .catch((e) => errors.replaceChildren(errorBox(e)));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    errors.replaceChildren();
    const body = { template: template.value };
    if (ttl.value) body.ttl_seconds = Number(ttl.value);
    submit.disabled = true;
    submit.textContent = "Creating…";
    try {
      const sb = await api("POST", "/v1/sandboxes", body);
      created(sb);
      announce(`Sandbox ${sb.id} created`);
    } catch (e) {
      errors.replaceChildren(errorBox(e));
    } finally {
      submit.disabled = false;
      submit.textContent = "Create";
    }
  });
  return form;
}
