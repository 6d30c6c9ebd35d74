// One database (GET /v1/databases/{id}): its facts and connection strings (passwords masked
// until shown), password rotation, hibernate (its VM's sandbox route) and wake (a query wakes
// it), delete; tabs for a SQL console (POST …/query, Ctrl/Cmd+Enter runs, the last queries kept
// in memory), branches (from now or from a time), restore in place to a time, base backups,
// and WAL: the position and archiver status read with SQL (pg_stat_archiver), the host's
// archive lag when the key is an operator's (GET /metrics), and the VM's resource use
// (GET …/metrics). `database.*` events, and `sandbox.*` events of its VM, re-read it.

import { api, listAll, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import { lineChart } from "../chart.js";
import {
  h, announce, page, dataTable, actionButton, field, input, textarea, formCard, link, when,
  stateBadge, path, errorArea, copyable, tabs, kv, newId, bytes,
} from "../ui.js";

const history = new Map(); // database id → the last queries run here (newest first)
const HISTORY = 8;

/** `postgres://user:secret@host/…` with the password replaced by dots. */
function masked(uri) {
  return uri.replace(/^(\w+:\/\/[^:/@]+:)([^@]*)(@)/, (_, a, _p, c) => `${a}••••••••${c}`);
}

/** A connection string: masked with a Show toggle, copied whole. */
function secretCopyable(uri, label) {
  const c = copyable(uri, label);
  const code = c.querySelector("code");
  const hidden = masked(uri);
  if (hidden === uri) return c;
  code.textContent = hidden;
  const toggle = h("button", { type: "button", class: "ghost small", "aria-pressed": "false", "aria-label": `Show the password in the ${label}` }, "Show");
  toggle.addEventListener("click", () => {
    const show = toggle.getAttribute("aria-pressed") !== "true";
    toggle.setAttribute("aria-pressed", String(show));
    toggle.textContent = show ? "Hide" : "Show";
    code.textContent = show ? uri : hidden;
  });
  c.insertBefore(toggle, code.nextSibling);
  return c;
}

/** `datetime-local` value (local time) → RFC 3339 UTC, or throws with a clear message. */
export function localToRfc3339(value, what) {
  if (!value) throw new Error(`Choose ${what}.`);
  const d = new Date(value);
  if (isNaN(d)) throw new Error(`${what}: not a time.`);
  return d.toISOString();
}

/** A Date as a `datetime-local` value (local time, seconds). */
function toLocalInput(d) {
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function render(main, params, session) {
  const id = params.id;
  const { body, errors } = page(main, id, { crumbs: [["#/databases", "Databases"]] });
  const h1 = main.querySelector("h1");
  const actionsEl = main.querySelector(".actions");
  const facts = h("div", {});
  const conn = h("div", {});
  const cleanups = [];
  let db = null;
  let gone = false;

  function show(d) {
    db = d;
    h1.textContent = d.name;
    document.title = `${d.name} · PandaStack console`;
    facts.replaceChildren(
      kv([
        ["State", stateBadge(d.state)],
        ["ID", h("span", { class: "mono" }, d.id)],
        ["PostgreSQL", String(d.version)],
        ["Owner role", h("span", { class: "mono" }, d.user)],
        ["Disk", `${d.size_gb} GiB (volume ${d.volume})`],
        ["Memory", `${d.memory_mb} MiB`],
        ["Hibernates after", d.idle_seconds ? `${d.idle_seconds} s idle` : "never"],
        ["VM", d.sandbox_id ? link(`#/sandboxes/${encodeURIComponent(d.sandbox_id)}`, d.sandbox_id, { class: "mono" }) : "none (the next connection starts one)"],
        ["Host", d.host],
        ["Branch of", d.parent ? link(`#/databases/${encodeURIComponent(d.parent)}`, d.parent, { class: "mono" }) : null],
        ["Created", when(d.created_at)],
      ]),
    );
    conn.replaceChildren(
      h("h2", {}, "Connect"),
      kv([
        ["Connection string", secretCopyable(d.connection_uri, "connection string")],
        ["Pooled (PgBouncer)", secretCopyable(d.pooled_uri, "pooled connection string")],
        ["HTTP (POST …/sql)", copyable(d.http_url, "HTTP URL")],
      ]),
    );
    hibernate.hidden = !(d.state === "ready" && d.sandbox_id);
    wake.hidden = d.state === "ready" || d.state === "creating";
  }

  async function reload() {
    try {
      show(await api("GET", path("/v1/databases", id)));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        gone = true;
        facts.replaceChildren(h("p", {}, "This database does not exist (any more). ", link("#/databases", "All databases")));
        conn.replaceChildren();
        tabsEl.hidden = true;
        actionsEl.replaceChildren();
      }
      errors.show(e);
    }
  }

  const hibernate = actionButton(
    "Hibernate",
    async () => {
      await api("POST", path("/v1/sandboxes", db.sandbox_id, "hibernate"));
      await reload();
      announce(`Database ${db.name} hibernated`);
    },
    { errors, kind: "ghost" },
  );
  const wake = actionButton(
    "Wake",
    async () => {
      await api("POST", path("/v1/databases", id, "query"), { sql: "select 1" });
      await reload();
      announce(`Database ${db.name} is awake`);
    },
    { errors, kind: "ghost" },
  );
  hibernate.hidden = true;
  wake.hidden = true;
  actionsEl.append(
    wake,
    hibernate,
    actionButton(
      "Reset password",
      async () => {
        show(await api("POST", path("/v1/databases", id, "password")));
        announce("Password reset: the connection strings changed");
      },
      { errors, kind: "ghost", confirm: "Reset the owner's password? The old one stops working at once (open sessions stay)." },
    ),
    actionButton(
      "Delete",
      async () => {
        await api("DELETE", path("/v1/databases", id));
        announce(`Database ${db?.name || id} deleted`);
        location.hash = "#/databases";
      },
      { errors, danger: true, confirm: `Delete database ${id}, its VM and its data volume? Its backups stay in the object store.` },
    ),
  );

  const t = tabs([
    { label: "SQL", render: (p) => sqlConsole(p, id) },
    { label: "Branches", render: (p) => branchesPanel(p, id, () => db) },
    { label: "Restore & backups", render: (p) => restorePanel(p, id, () => db, reload) },
    { label: "WAL & metrics", render: (p) => walPanel(p, id, () => db, session) },
  ]);
  const tabsEl = t.el;
  body.append(facts, h("section", { class: "card" }, conn), tabsEl);
  cleanups.push(() => t.stop());

  cleanups.push(
    onEvents(["database.*", "sandbox.*"], (e) => {
      if (gone) return;
      const r = e.resource || {};
      if ((r.kind === "database" && r.id === db?.id) || (r.kind === "sandbox" && db && r.id === db.sandbox_id)) reload();
    }),
  );
  reload();
  return () => cleanups.forEach((c) => c());
}

/** A value of a query result as text (NULL marked, JSON as JSON). */
function cellText(v) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "NULL");
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function sqlConsole(panel, id) {
  const errors = errorArea();
  const sql = textarea({ rows: 6, spellcheck: "false", autocapitalize: "off", placeholder: "select now()" });
  const runBtn = h("button", { type: "submit" }, "Run");
  const status = h("p", { class: "muted small", role: "status" });
  const result = h("div", { class: "sql-result" });
  const hist = h("ol", { class: "plain sql-history" });
  const past = history.get(id) || [];
  history.set(id, past);

  function showHistory() {
    hist.replaceChildren(
      ...past.map((q) =>
        h(
          "li",
          {},
          h("button", {
            type: "button", class: "ghost small mono", title: "Put this query back in the editor",
            onclick: () => {
              sql.value = q;
              sql.focus();
            },
          }, q.length > 120 ? q.slice(0, 117) + "…" : q),
        ),
      ),
    );
    histWrap.hidden = past.length === 0;
  }

  async function run() {
    const text = sql.value.trim();
    if (!text) {
      errors.show(new Error("Write a statement first."));
      return;
    }
    errors.clear();
    runBtn.disabled = true;
    status.textContent = "Running…";
    const i = past.indexOf(text);
    if (i >= 0) past.splice(i, 1);
    past.unshift(text);
    past.length = Math.min(past.length, HISTORY);
    showHistory();
    const t0 = performance.now();
    try {
      const r = await api("POST", path("/v1/databases", id, "query"), { sql: text });
      const ms = Math.round(performance.now() - t0);
      const n = r.row_count ?? r.rows.length;
      status.textContent = `${r.command || "Done"} · ${n} row${n === 1 ? "" : "s"} · ${ms} ms`;
      if (r.fields.length === 0) {
        result.replaceChildren();
      } else {
        result.replaceChildren(
          h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              { class: "sql-table" },
              h("caption", { class: "visually-hidden" }, "Query result"),
              h("thead", {}, h("tr", {}, r.fields.map((f) => h("th", { scope: "col" }, f.name)))),
              h("tbody", {}, r.rows.map((row) => h("tr", {}, row.map((v, j) => h("td", { "data-label": r.fields[j]?.name }, cellText(v)))))),
            ),
          ),
        );
      }
      announce(status.textContent);
    } catch (e) {
      status.textContent = "Failed.";
      result.replaceChildren();
      errors.show(e);
    } finally {
      runBtn.disabled = false;
    }
  }

  const form = h(
    "form",
    { class: "card stack", "aria-label": "SQL console" },
    field("SQL", sql, "one statement, run as the owner role; Ctrl+Enter (⌘+Enter) runs it"),
    h("div", { class: "actions" }, runBtn),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    run();
  });
  sql.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      if (!runBtn.disabled) run();
    }
  });
  const histId = newId("hist");
  const histWrap = h("section", { class: "card", "aria-labelledby": histId }, h("h2", { id: histId }, "Recent queries"), hist);
  panel.append(form, errors.el, status, result, histWrap);
  showHistory();
}

function branchesPanel(panel, id, current) {
  const errors = errorArea();
  const table = dataTable({
    caption: "Branches of this database",
    empty: "No branches.",
    columns: [
      { label: "Name", cell: (d) => link(`#/databases/${encodeURIComponent(d.id)}`, d.name) },
      { label: "ID", class: "mono", cell: (d) => d.id },
      { label: "State", cell: (d) => stateBadge(d.state) },
      { label: "Created", cell: (d) => when(d.created_at) },
    ],
  });
  async function load() {
    const all = await listAll("/v1/databases");
    table.set(all.filter((d) => d.parent === (current()?.id || id)));
  }
  const name = input({ name: "name", pattern: "[a-z][a-z0-9_]{0,39}", autocomplete: "off", placeholder: "default: <name>_<hex>" });
  const fromNow = h("input", { type: "radio", name: "branch-from", value: "now", checked: true });
  const fromTime = h("input", { type: "radio", name: "branch-from", value: "time" });
  const at = input({ type: "datetime-local", step: "1", name: "from_time", value: toLocalInput(new Date(Date.now() - 60_000)) });
  const atField = field("Time (your local time)", at, "restored from the newest base backup before it plus the archived WAL");
  const status = h("p", { class: "muted small", role: "status" });
  const sync = () => (atField.hidden = !fromTime.checked);
  fromNow.addEventListener("change", sync);
  fromTime.addEventListener("change", sync);
  const radio = (el, label) => {
    el.id = newId("radio");
    return h("span", { class: "radio" }, el, h("label", { for: el.id }, label));
  };
  const form = formCard(
    "New branch",
    [
      field("Name", name),
      h("fieldset", { class: "choice" }, h("legend", {}, "From"), radio(fromNow, "now (a copy-on-write copy)"), radio(fromTime, "a past time")),
      atField,
    ],
    async () => {
      const req = {};
      if (name.value.trim()) req.name = name.value.trim();
      if (fromTime.checked) req.from_time = localToRfc3339(at.value, "the time to branch from");
      status.textContent = "Branching: a new VM on a copy of the data, up to a minute…";
      try {
        const b = await api("POST", path("/v1/databases", id, "branches"), req);
        status.textContent = "";
        table.upsert(b);
        name.value = "";
        announce(`Branch ${b.name} is ready`);
      } catch (e) {
        status.textContent = "";
        throw e;
      }
    },
    { errors, submitLabel: "Create branch" },
  );
  sync();
  panel.append(errors.el, form, status, table.el);
  load().catch((e) => errors.show(e));
  const off = onEvents(["database.ready"], (e) => {
    if (e.data?.parent_id === (current()?.id || id)) load().catch((err) => errors.show(err));
  });
  return off;
}

function restorePanel(panel, id, current, reloadDb) {
  const errors = errorArea();
  const timers = [];
  const window_ = h("p", { class: "muted small" });
  const backups = dataTable({
    caption: "Base backups of this database",
    empty: "No base backups yet (one is taken as soon as the database runs).",
    columns: [
      { label: "Backup", class: "mono", cell: (b) => b.id },
      { label: "State", cell: (b) => [stateBadge(b.state), b.error ? h("span", { class: "small" }, ` ${b.error}`) : null] },
      { label: "Uploaded", cell: (b) => (b.bytes_uploaded == null ? "" : bytes(b.bytes_uploaded)) },
      { label: "Taken", cell: (b) => when(b.created_at) },
      { label: "Finished", cell: (b) => when(b.finished_at) },
    ],
  });
  let polling = null;
  async function load() {
    const list = (await api("GET", path("/v1/databases", id, "backups"))).data;
    backups.set([...list].reverse());
    const done = list.filter((b) => b.state === "done");
    window_.textContent = done.length
      ? `Restore window: from ${new Date(done[0].finished_at || done[0].created_at).toLocaleString()} to now.`
      : "No finished base backup yet: nothing to restore to.";
    const uploading = list.some((b) => b.state === "uploading");
    if (uploading && !polling) {
      polling = setInterval(() => load().catch((e) => errors.show(e)), 3000);
      timers.push(polling);
    } else if (!uploading && polling) {
      clearInterval(polling);
      polling = null;
    }
  }

  const at = input({ type: "datetime-local", step: "1", name: "to_time", value: toLocalInput(new Date(Date.now() - 60_000)) });
  const status = h("p", { class: "muted small", role: "status" });
  const restoreForm = formCard(
    "Restore to a time",
    [field("Time (your local time)", at, "the data as of then, in place: same name, password and connection strings")],
    async () => {
      const to = localToRfc3339(at.value, "the time to restore to");
      const name = current()?.name || id;
      if (!window.confirm(`Restore ${name} to ${new Date(to).toLocaleString()}? Everything written after that time is lost, and open connections are closed.`)) return;
      status.textContent = "Restoring: a new VM replays the archive to that time…";
      try {
        await api("POST", path("/v1/databases", id, "restore"), { to_time: to });
        status.textContent = `Restored to ${new Date(to).toLocaleString()}.`;
        announce(status.textContent);
        await reloadDb();
        await load();
      } catch (e) {
        status.textContent = "";
        throw e;
      }
    },
    { errors, submitLabel: "Restore" },
  );
  const backupsId = newId("backups");
  panel.append(
    errors.el,
    restoreForm,
    status,
    h(
      "section",
      { "aria-labelledby": backupsId },
      h(
        "div",
        { class: "head" },
        h("h2", { id: backupsId }, "Base backups"),
        h("div", { class: "actions" }, actionButton("Back up now", async () => {
          const b = await api("POST", path("/v1/databases", id, "backups"));
          announce(`Backup ${b.id} started`);
          await load();
        }, { errors })),
      ),
      window_,
      backups.el,
    ),
  );
  load().catch((e) => errors.show(e));
  return () => timers.forEach(clearInterval);
}

const WAL_SQL = `select pg_current_wal_lsn()::text as lsn,
  pg_walfile_name(pg_current_wal_lsn()) as current_segment,
  a.last_archived_wal, a.last_archived_time, a.archived_count, a.failed_count,
  a.last_failed_wal, a.last_failed_time,
  case when length(a.last_archived_wal) = 24 then
    (select segment_number from pg_split_walfile_name(pg_walfile_name(pg_current_wal_lsn())))
    - (select segment_number from pg_split_walfile_name(a.last_archived_wal)) - 1 end as segments_waiting
from pg_stat_archiver a`;

/** `name{database="id"} value` lines of an OpenMetrics text. */
function metricOf(text, name, id) {
  const re = new RegExp(`^${name}\\{[^}]*database="${id.replace(/[^A-Za-z0-9_-]/g, "")}"[^}]*\\}\\s+([0-9.eE+-]+)`, "m");
  const m = text.match(re);
  return m ? Number(m[1]) : null;
}

function walPanel(panel, id, current, session) {
  const errors = errorArea();
  const walFacts = h("div", {});
  const lagPoints = [];
  const lagChart = lineChart({ title: "Archive lag (segments finished, not yet archived)", series: [{ label: "segments waiting", points: [] }] });
  const hostLag = h("p", { class: "small" });
  const timers = [];

  async function readWal() {
    const d = current();
    if (d && d.state !== "ready") {
      walFacts.replaceChildren(h("p", { class: "muted" }, `The database is ${d.state}: reading its WAL would wake it. Use “Read now” to do so.`));
      return;
    }
    await readWalNow();
  }
  async function readWalNow() {
    const r = await api("POST", path("/v1/databases", id, "query"), { sql: WAL_SQL });
    const row = Object.fromEntries(r.fields.map((f, i) => [f.name, r.rows[0]?.[i]]));
    const waiting = row.segments_waiting == null ? null : Number(row.segments_waiting);
    walFacts.replaceChildren(
      kv([
        ["WAL position (LSN)", h("span", { class: "mono" }, row.lsn)],
        ["Current segment", h("span", { class: "mono" }, row.current_segment)],
        ["Last archived segment", row.last_archived_wal ? h("span", { class: "mono" }, row.last_archived_wal) : "none yet"],
        ["Last archived at", row.last_archived_time ? `${new Date(row.last_archived_time).toLocaleString()}` : null],
        ["Archive lag", waiting == null ? "unknown" : `${waiting} segment${waiting === 1 ? "" : "s"} finished and not archived`],
        ["Archived / failed", `${row.archived_count} / ${row.failed_count}`],
        ["Last failure", row.last_failed_wal ? `${row.last_failed_wal} at ${new Date(row.last_failed_time).toLocaleString()}` : null],
      ]),
    );
    if (waiting != null) {
      lagPoints.push([Date.now(), waiting]);
      if (lagPoints.length > 120) lagPoints.shift();
      lagChart.update([{ label: "segments waiting", points: lagPoints }]);
    }
    if (session?.admin) {
      try {
        const resp = await fetch("/metrics", { credentials: "same-origin", cache: "no-store" });
        if (!resp.ok) throw new ApiError(resp.status, `http_${resp.status}`, `GET /metrics: HTTP ${resp.status}`);
        const text = await resp.text();
        const lag = metricOf(text, "pandastack_database_wal_archive_lag_seconds", id) ?? metricOf(text, "database_wal_archive_lag_seconds", id);
        const outbox = metricOf(text, "pandastack_database_wal_outbox_segments", id) ?? metricOf(text, "database_wal_outbox_segments", id);
        hostLag.textContent = lag == null
          ? "Host archive lag: not reported (the archiver has not looked at this database yet)."
          : `Host archive lag: ${lag.toFixed(1)} s (${outbox ?? 0} segments waiting in the outbox for the object store).`;
      } catch (e) {
        errors.show(e);
      }
    }
  }

  // The VM's resource use (no event exists for it: re-read every 15 s while the page is open).
  const cpu = lineChart({ title: "CPU", unit: "%", series: [] });
  const mem = lineChart({ title: "Memory", unit: "bytes", series: [] });
  async function readMetrics() {
    const m = await api("GET", `${path("/v1/databases", id, "metrics")}?since=15m&step=10`);
    const pts = (f) => m.samples.map((s) => [Date.parse(s.t), f(s)]);
    cpu.update([{ label: "CPU", points: pts((s) => s.cpu_pct) }]);
    mem.update([
      { label: "used", points: pts((s) => s.mem_bytes) },
      { label: "total", points: pts((s) => s.mem_total_bytes ?? null) },
    ]);
  }

  const auto = h("input", { type: "checkbox", name: "auto" });
  auto.id = newId("auto");
  let autoTimer = null;
  auto.addEventListener("change", () => {
    clearInterval(autoTimer);
    autoTimer = auto.checked ? setInterval(() => readWal().catch((e) => errors.show(e)), 10_000) : null;
    if (autoTimer) timers.push(autoTimer);
  });
  const walId = newId("wal");
  panel.append(
    errors.el,
    h(
      "section",
      { class: "card", "aria-labelledby": walId },
      h(
        "div",
        { class: "head" },
        h("h2", { id: walId }, "Write-ahead log"),
        h(
          "div",
          { class: "actions" },
          actionButton("Read now", () => readWalNow(), { errors, kind: "ghost" }),
          h("span", { class: "radio" }, auto, h("label", { for: auto.id }, "every 10 s (keeps it awake)")),
        ),
      ),
      h("p", { class: "muted small" }, "Read with SQL from pg_stat_archiver: segments PostgreSQL finished and has not archived yet. The host then uploads them to the object store (about a second)."),
      walFacts,
      session?.admin ? hostLag : h("p", { class: "muted small" }, "The host's upload lag is in the operator metrics (GET /metrics, an admin key's)."),
    ),
    lagChart.el,
    cpu.el,
    mem.el,
  );
  readWal().catch((e) => errors.show(e));
  readMetrics().catch((e) => errors.show(e));
  timers.push(setInterval(() => readMetrics().catch((e) => errors.show(e)), 15_000));
  return () => {
    clearInterval(autoTimer);
    timers.forEach(clearInterval);
  };
}
