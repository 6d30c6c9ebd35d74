// Volumes: durable disks that outlive sandboxes (GET /v1/volumes), made empty (name, size) or
// restored from a snapshot or a backup; grown (PATCH, only while nothing has it mounted) and
// deleted (refused while mounted read-write). One volume at a time is opened below the list:
// its snapshots (taken, restored as a new volume, deleted) and its backups (taken, followed
// until uploaded, restored as a new volume). There are no volume events: the list is re-read
// after each change made here and after `sandbox.*` events (mounts come and go with sandboxes);
// a backup being uploaded is re-read every few seconds until it is done or failed.

import { api, listAll, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, formCard, link, when,
  stateBadge, path, errorArea, bytes,
} from "../ui.js";

const sandboxLink = (id) => link(`#/sandboxes/${encodeURIComponent(id)}`, id, { class: "mono" });

function attachmentsCell(v) {
  const list = v.attachments || [];
  if (list.length === 0) return v.attached_to ? sandboxLink(v.attached_to) : h("span", { class: "muted" }, "not mounted");
  return h(
    "ul",
    { class: "plain" },
    list.map((a) => h("li", {}, sandboxLink(a.sandbox_id), ` at ${a.path}`, a.read_only ? " (read-only copy)" : "")),
  );
}

export function render(main) {
  const { body, errors } = page(main, "Volumes");
  let detail = null; // {name, stop()}
  const detailEl = h("div", { class: "detail" });

  const table = dataTable({
    caption: "Volumes of this workspace",
    key: (v) => v.name,
    empty: "No volumes yet.",
    columns: [
      { label: "Name", class: "mono", cell: (v) => v.name },
      { label: "Size", cell: (v) => `${v.size_gb} GiB` },
      { label: "State", cell: (v) => stateBadge(v.state || "ready") },
      { label: "Mounted by", cell: attachmentsCell },
      { label: "Restored from", class: "mono", cell: (v) => v.source || "" },
      { label: "Created", cell: (v) => when(v.created_at) },
      {
        label: "Actions",
        cell: (v) =>
          h(
            "div",
            { class: "actions" },
            h(
              "button",
              {
                type: "button", class: "ghost small", "aria-label": `Snapshots and backups of volume ${v.name}`,
                onclick: () => open(v.name),
              },
              "Snapshots & backups",
            ),
            actionButton(
              "Delete",
              async () => {
                await api("DELETE", path("/v1/volumes", v.name));
                table.remove(v.name);
                if (detail?.name === v.name) close();
                announce(`Volume ${v.name} deleted`);
              },
              { errors, danger: true, confirm: `Delete volume ${v.name} and its snapshots? This cannot be undone.`, ariaLabel: `Delete volume ${v.name}` },
            ),
          ),
      },
    ],
  });

  async function reload() {
    const all = await listAll("/v1/volumes");
    table.set(all);
    announce(`${all.length} volumes`);
    return all;
  }
  function close() {
    detail?.stop();
    detail = null;
    detailEl.replaceChildren();
  }
  function open(name) {
    close();
    detail = volumeDetail(name, detailEl, {
      changed: () => reload().catch((e) => errors.show(e)),
      closed: close,
    });
    detailEl.querySelector("h2")?.focus();
  }

  body.append(
    newVolumeForm(errors, async (v) => {
      table.upsert(v);
      announce(`Volume ${v.name} created`);
    }),
    table.el,
    detailEl,
  );

  // Mounts change with sandboxes (created with volumes, deleted): re-read the list, once per
  // burst of events.
  let timer = null;
  const off = onEvents(["sandbox.*"], () => {
    clearTimeout(timer);
    timer = setTimeout(() => reload().catch((e) => errors.show(e)), 500);
  });
  reload().catch((e) => errors.show(e));
  return () => {
    off();
    clearTimeout(timer);
    close();
  };
}

function newVolumeForm(errors, created) {
  const name = input({ name: "name", required: true, pattern: "[a-z0-9][a-z0-9\\-]{0,62}", autocomplete: "off", placeholder: "data" });
  const size = input({ type: "number", name: "size_gb", min: "1", max: "1024", step: "1", value: "1", required: true, inputmode: "numeric" });
  return formCard(
    "New volume",
    [field("Name", name, "a-z, 0-9 and -"), field("Size (GiB)", size)],
    async () => {
      const v = await api("POST", "/v1/volumes", { name: name.value.trim(), size_gb: Number(size.value) });
      name.value = "";
      await created(v);
    },
    { errors },
  );
}

/** The card of one volume: facts, grow, snapshots, backups, restore. Returns `{name, stop}`. */
function volumeDetail(name, el, { changed, closed }) {
  const errors = errorArea();
  const timers = new Set();
  let stopped = false;
  const headingId = `vol-${name}`;
  const facts = h("div", {});

  // Restore: a new volume from a snapshot or a done backup.
  const source = select([], { name: "source", required: true });
  const newName = input({ name: "name", required: true, pattern: "[a-z0-9][a-z0-9\\-]{0,62}", autocomplete: "off" });
  const newSize = input({ type: "number", name: "size_gb", min: "1", max: "1024", step: "1", inputmode: "numeric", placeholder: "same" });
  function setSources() {
    const keep = source.value;
    const opts = [
      ...snaps.list.map((s) => ({ value: `s:${s.id}`, label: `Snapshot ${s.id} (${when(s.created_at).textContent})` })),
      ...backs.list.filter((b) => b.state === "done").map((b) => ({ value: `b:${b.id}`, label: `Backup ${b.id} (${when(b.created_at).textContent})` })),
    ];
    source.replaceChildren(...opts.map((o) => h("option", { value: o.value }, o.label)));
    if (opts.some((o) => o.value === keep)) source.value = keep;
  }
  function restoreFrom(value) {
    source.value = value;
    newName.focus();
  }
  const restoreForm = formCard(
    "Restore into a new volume",
    [field("From", source), field("New volume name", newName), field("Size (GiB, to grow)", newSize)],
    async () => {
      if (!source.value) throw new Error("Take a snapshot or a backup first: there is nothing to restore from.");
      const [kind, id] = [source.value.slice(0, 1), source.value.slice(2)];
      const req = { name: newName.value.trim() };
      if (kind === "s") req.from_snapshot = id;
      else req.from_backup = id;
      if (newSize.value) req.size_gb = Number(newSize.value);
      const v = await api("POST", "/v1/volumes", req);
      newName.value = "";
      announce(`Volume ${v.name} restored from ${id}`);
      changed();
    },
    { errors, submitLabel: "Restore" },
  );

  // Snapshots.
  const snaps = { list: [] };
  const snapTable = dataTable({
    caption: `Snapshots of volume ${name}`,
    empty: "No snapshots.",
    columns: [
      { label: "Snapshot", class: "mono", cell: (s) => s.id },
      { label: "Size", cell: (s) => `${s.size_gb} GiB` },
      { label: "Consistency", cell: (s) => (s.frozen ? "file system frozen" : "not mounted at the time") },
      { label: "Taken", cell: (s) => when(s.created_at) },
      {
        label: "Actions",
        cell: (s) =>
          h(
            "div",
            { class: "actions" },
            h("button", { type: "button", class: "ghost small", "aria-label": `Restore snapshot ${s.id} into a new volume`, onclick: () => restoreFrom(`s:${s.id}`) }, "Restore…"),
            actionButton(
              "Delete",
              async () => {
                await api("DELETE", path("/v1/volumes", name, "snapshots", s.id));
                await loadSnaps();
                announce(`Snapshot ${s.id} deleted`);
              },
              { errors, danger: true, confirm: `Delete snapshot ${s.id}?`, ariaLabel: `Delete snapshot ${s.id}` },
            ),
          ),
      },
    ],
  });
  async function loadSnaps() {
    snaps.list = (await api("GET", path("/v1/volumes", name, "snapshots"))).data;
    snapTable.set([...snaps.list].reverse());
    setSources();
  }

  // Backups (no delete route: retention removes old ones).
  const backs = { list: [] };
  const backTable = dataTable({
    caption: `Backups of volume ${name}`,
    empty: "No backups.",
    columns: [
      { label: "Backup", class: "mono", cell: (b) => b.id },
      { label: "State", cell: (b) => [stateBadge(b.state), b.error ? h("span", { class: "small" }, ` ${b.error}`) : null] },
      { label: "Uploaded", cell: (b) => (b.bytes_uploaded === null || b.bytes_uploaded === undefined ? "" : bytes(b.bytes_uploaded)) },
      { label: "Taken", cell: (b) => when(b.created_at) },
      { label: "Finished", cell: (b) => when(b.finished_at) },
      {
        label: "Actions",
        cell: (b) =>
          b.state === "done"
            ? h("button", { type: "button", class: "ghost small", "aria-label": `Restore backup ${b.id} into a new volume`, onclick: () => restoreFrom(`b:${b.id}`) }, "Restore…")
            : "",
      },
    ],
  });
  async function loadBacks() {
    backs.list = (await api("GET", path("/v1/volumes", name, "backups"))).data;
    backTable.set([...backs.list].reverse());
    setSources();
    for (const b of backs.list) if (b.state === "uploading") watchBackup(b.id);
  }
  const watching = new Set();
  function watchBackup(id) {
    if (watching.has(id) || stopped) return;
    watching.add(id);
    const t = setInterval(async () => {
      try {
        const b = await api("GET", path("/v1/volumes", name, "backups", id));
        if (b.state !== "uploading") {
          clearInterval(t);
          timers.delete(t);
          watching.delete(id);
          await loadBacks();
          announce(`Backup ${id} ${b.state}`);
        }
      } catch (e) {
        clearInterval(t);
        timers.delete(t);
        watching.delete(id);
        errors.show(e);
      }
    }, 3000);
    timers.add(t);
  }

  const grow = input({ type: "number", name: "size_gb", min: "1", max: "1024", step: "1", inputmode: "numeric", required: true });
  const growForm = formCard(
    "Grow",
    [field("New size (GiB)", grow, "only larger, and only while no sandbox has it mounted")],
    async () => {
      const v = await api("PATCH", path("/v1/volumes", name), { size_gb: Number(grow.value) });
      showFacts(v);
      announce(`Volume ${name} is now ${v.size_gb} GiB`);
      changed();
    },
    { errors, submitLabel: "Grow" },
  );

  function showFacts(v) {
    grow.min = String(v.size_gb + 1);
    grow.value = String(v.size_gb + 1);
    facts.replaceChildren(
      h(
        "dl",
        { class: "kv" },
        [
          ["ID", h("span", { class: "mono" }, v.id)],
          ["Size", `${v.size_gb} GiB`],
          ["Host", v.host],
          ["Mounted by", attachmentsCell(v)],
        ].map(([k, val]) => [h("dt", {}, k), h("dd", {}, val)]),
      ),
    );
  }

  el.replaceChildren(
    h(
      "section",
      { class: "card", "aria-labelledby": headingId },
      h(
        "div",
        { class: "head" },
        h("h2", { id: headingId, tabindex: "-1" }, `Volume ${name}`),
        h("div", { class: "actions" }, h("button", { type: "button", class: "ghost small", onclick: closed }, "Close")),
      ),
      errors.el,
      facts,
      growForm,
      h("div", { class: "head" }, h("h3", {}, "Snapshots"), h("div", { class: "actions" },
        actionButton("Take snapshot", async () => {
          const s = await api("POST", path("/v1/volumes", name, "snapshots"));
          await loadSnaps();
          announce(`Snapshot ${s.id} taken`);
        }, { errors }))),
      snapTable.el,
      h("div", { class: "head" }, h("h3", {}, "Backups"), h("div", { class: "actions" },
        actionButton("Back up now", async () => {
          const b = await api("POST", path("/v1/volumes", name, "backups"));
          await loadBacks();
          watchBackup(b.id);
          announce(`Backup ${b.id} started`);
        }, { errors }))),
      backTable.el,
      restoreForm,
    ),
  );
  api("GET", path("/v1/volumes", name))
    .then(showFacts)
    .catch((e) => {
      if (e instanceof ApiError && e.status === 404) closed();
      else errors.show(e);
    });
  loadSnaps().catch((e) => errors.show(e));
  loadBacks().catch((e) => errors.show(e));
  return {
    name,
    stop() {
      stopped = true;
      for (const t of timers) clearInterval(t);
      timers.clear();
    },
  };
}
