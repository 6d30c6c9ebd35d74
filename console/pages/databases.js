// Databases: every page of GET /v1/databases (managed PostgreSQL, one VM each), kept live by
// the workspace's event stream: a `database.*` event re-reads that one database and updates
// its row. New database (name, PostgreSQL version, volume size, memory) waits for the database
// to accept connections (tens of seconds): the row shows `creating` meanwhile.

import { api, listAll, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, formCard, link, when,
  stateBadge, path,
} from "../ui.js";

export const dbLink = (d) => link(`#/databases/${encodeURIComponent(d.id)}`, d.name);

export function render(main) {
  const { body, errors } = page(main, "Databases");
  const names = new Map(); // id → name, for parent links
  const table = dataTable({
    caption: "Databases of this workspace",
    empty: "No databases yet.",
    columns: [
      { label: "Name", cell: dbLink },
      { label: "ID", class: "mono", cell: (d) => d.id },
      { label: "PostgreSQL", cell: (d) => String(d.version ?? "") },
      { label: "State", cell: (d) => stateBadge(d.state) },
      { label: "Size", cell: (d) => `${d.size_gb} GiB disk, ${d.memory_mb} MiB memory` },
      {
        label: "Branch of",
        cell: (d) => (d.parent ? link(`#/databases/${encodeURIComponent(d.parent)}`, names.get(d.parent) || d.parent) : ""),
      },
      { label: "Created", cell: (d) => when(d.created_at) },
      {
        label: "Actions",
        cell: (d) =>
          actionButton(
            "Delete",
            async () => {
              await api("DELETE", path("/v1/databases", d.id));
              table.remove(d.id);
              announce(`Database ${d.name} deleted`);
            },
            {
              errors, danger: true, ariaLabel: `Delete database ${d.name}`,
              confirm: `Delete database ${d.name}, its VM and its data volume? Its backups stay in the object store.`,
            },
          ),
      },
    ],
  });
  const upsert = (d, opts) => {
    names.set(d.id, d.name);
    table.upsert(d, opts);
  };

  async function refresh(id) {
    try {
      upsert(await api("GET", path("/v1/databases", id)));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) table.remove(id);
      else errors.show(e);
    }
  }
  async function reload() {
    const all = await listAll("/v1/databases");
    for (const d of all) names.set(d.id, d.name);
    table.set(all);
    announce(`${all.length} databases`);
  }

  body.append(newDatabaseForm(errors, upsert, () => reload().catch((e) => errors.show(e))), table.el);
  const off = onEvents(["database.*"], (e) => {
    if (e.resource?.kind === "database") refresh(e.resource.id);
  });
  reload().catch((e) => errors.show(e));
  return off;
}

function newDatabaseForm(errors, created, relist) {
  const name = input({ name: "name", required: true, pattern: "[a-z][a-z0-9_]{0,39}", autocomplete: "off", placeholder: "app" });
  const version = select([{ value: "", label: "default" }], { name: "version" });
  const size = input({ type: "number", name: "size_gb", min: "1", max: "1024", step: "1", value: "1", inputmode: "numeric" });
  const memory = input({ type: "number", name: "memory_mb", min: "256", max: "16384", step: "256", value: "1024", inputmode: "numeric" });
  const status = h("p", { class: "muted small", role: "status" });
  api("GET", "/v1/databases/extensions")
    .then((x) => {
      const vs = Object.keys(x.versions || {}).sort((a, b) => b - a);
      version.replaceChildren(...vs.map((v) => h("option", { value: v }, `PostgreSQL ${v}`)));
    })
    .catch((e) => errors.show(e));
  const form = formCard(
    "New database",
    [
      field("Name", name, "a-z, 0-9 and _, starting with a letter; also the owner role"),
      field("Version", version),
      field("Disk (GiB)", size),
      field("Memory (MiB)", memory, "a multiple of 256"),
    ],
    async () => {
      const req = { name: name.value.trim() };
      if (version.value) req.version = Number(version.value);
      if (size.value) req.size_gb = Number(size.value);
      if (memory.value) req.memory_mb = Number(memory.value);
      status.textContent = `Creating ${req.name}: its VM and cluster take up to a minute…`;
      // The row exists (`creating`) as soon as the server starts: show it.
      const peek = setTimeout(relist, 1500);
      try {
        const d = await api("POST", "/v1/databases", req);
        created(d);
        name.value = "";
        status.textContent = `Database ${d.name} is ready.`;
        announce(`Database ${d.name} created`);
      } catch (e) {
        status.textContent = "";
        relist();
        throw e;
      } finally {
        clearTimeout(peek);
      }
    },
    { errors },
  );
  form.append(status);
  return form;
}
