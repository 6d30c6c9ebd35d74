// Sandboxes: every page of GET /v1/sandboxes, kept live by the workspace's event stream: a
// `sandbox.*` event re-reads that one sandbox and updates its row in place (or removes it when
// it is gone). New sandbox (a template, whose shape it takes, and a TTL) and delete send the CSRF token.

import { api, listAll } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, formCard, link, when,
  stateBadge, path, rowRefresher,
} from "../ui.js";

function metadataText(m) {
  return Object.entries(m || {})
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

export function render(main) {
  const { body, errors } = page(main, "Sandboxes");
  const table = dataTable({
    caption: "Sandboxes of this workspace",
    empty: "No sandboxes yet.",
    columns: [
      { label: "ID", class: "mono", cell: (sb) => link(`#/sandboxes/${encodeURIComponent(sb.id)}`, sb.id) },
      { label: "Template", cell: (sb) => sb.template || "" },
      { label: "State", cell: (sb) => stateBadge(sb.state) },
      { label: "Created", cell: (sb) => when(sb.created_at) },
      { label: "Metadata", class: "meta", cell: (sb) => metadataText(sb.metadata) },
      {
        label: "Actions",
        cell: (sb) =>
          actionButton(
            "Delete",
            async () => {
              await api("DELETE", path("/v1/sandboxes", sb.id));
              table.remove(sb.id);
              announce(`Sandbox ${sb.id} deleted`);
            },
            { errors, danger: true, confirm: `Delete sandbox ${sb.id}? This cannot be undone.`, ariaLabel: `Delete sandbox ${sb.id}` },
          ),
      },
    ],
  });
  body.append(newSandboxForm(errors, (sb) => table.upsert(sb)), table.el);

  const refresh = rowRefresher(table, (id) => api("GET", path("/v1/sandboxes", id)), errors);
  // The console's stream is open before a page is shown (app.js waits for it), so nothing
  // between this list and the events is missed (an event for a listed sandbox re-reads it).
  const off = onEvents(["sandbox.*"], (e) => {
    if (e.resource?.kind === "sandbox") refresh(e.resource.id);
  });
  listAll("/v1/sandboxes")
    .then((all) => {
      for (const sb of all) if (!table.has(sb.id)) table.upsert(sb, { append: true });
      announce(`${table.size()} sandboxes`);
    })
    .catch((e) => errors.show(e));
  return off;
}

function newSandboxForm(errors, created) {
  const template = select([], { name: "template", required: true });
  const ttl = input({ type: "number", name: "ttl", min: "1", step: "1", inputmode: "numeric", placeholder: "server default" });
  api("GET", "/v1/templates")
    .then((list) => template.replaceChildren(...list.data.map((t) =>
          h("option", { value: t.name }, `${t.name} (${t.cpu} vCPU, ${t.memory_mb} MiB)`),
        )))
    .catch((e) => errors.show(e));
  return formCard(
    "New sandbox",
    [field("Template (its shape)", template), field("TTL (seconds)", ttl)],
    async () => {
      const body = { template: template.value };
      if (ttl.value) body.ttl_seconds = Number(ttl.value);
      const sb = await api("POST", "/v1/sandboxes", body);
      created(sb);
      announce(`Sandbox ${sb.id} created`);
    },
    { errors },
  );
}
