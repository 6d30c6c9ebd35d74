// Usage: GET /v1/usage — the workspace's use against its limits as bars (sandboxes running
// and hibernated, volumes, snapshots, template builds, storage), and its metered usage over a
// window (from/to, UTC days) grouped by day, kind or resource as a table with totals and a CSV
// download. Nothing here has events; "Refresh" reads it again.

import { api } from "../api.js";
import { h, announce, page, actionButton, field, input, select, formCard, bytes } from "../ui.js";
import { usageBars, sizeBars } from "../chart.js";
import { fill } from "./appkit.js";

const GIB = 1024 ** 3;

function ymd(d) {
  return d.toISOString().slice(0, 10);
}

function num(v, digits = 1) {
  if (v === null || v === undefined) return "";
  return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits });
}

const FIGURES = [
  { key: "vcpu_seconds", label: "vCPU-seconds", fmt: (v) => num(v) },
  { key: "memory_gib_seconds", label: "Memory GiB-seconds", fmt: (v) => num(v) },
  { key: "storage_gib_hours", label: "Storage GiB-hours", fmt: (v) => num(v, 2) },
  { key: "egress_bytes", label: "Egress", fmt: (v) => bytes(v) },
  { key: "ingress_bytes", label: "Ingress", fmt: (v) => bytes(v) },
  { key: "invocations", label: "Invocations", fmt: (v) => num(v, 0) },
  { key: "invocation_seconds", label: "Invocation seconds", fmt: (v) => num(v, 2) },
  { key: "database_seconds", label: "Database seconds", fmt: (v) => num(v) },
];

export function render(main) {
  const quotas = h("section", { "aria-labelledby": "quota-title" });
  const slot = h("span");
  const { body, errors } = page(main, "Usage", { actions: [slot] });
  slot.replaceWith(actionButton("Refresh", () => load(), { errors, kind: "ghost" }));
  const metered = h("section", { "aria-labelledby": "metered-title" });
  body.append(quotas, metered);

  // The window: this month (UTC) to today by default.
  const now = new Date();
  const from = input({ type: "date", name: "from", value: ymd(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))) });
  const to = input({ type: "date", name: "to", value: ymd(now) });
  const groupBy = select([
    { value: "day", label: "Day" },
    { value: "kind,day", label: "Day and kind" },
    { value: "kind", label: "Kind" },
    { value: "resource", label: "Resource" },
    { value: "none", label: "Totals only" },
  ], { name: "group-by" });
  const tableBox = h("div");
  const csv = h("a", { class: "small", download: "usage.csv" }, "Download as CSV");
  const windowForm = formCard(
    "Window (UTC days)",
    [field("From", from), field("To (inclusive)", to), field("Group by", groupBy)],
    () => load(),
    { errors, submitLabel: "Show" },
  );
  metered.append(h("h2", { id: "metered-title", class: "section" }, "Metered usage"), windowForm, tableBox, h("p", {}, csv));

  function query() {
    if (!from.value || !to.value) throw new Error("Window: give both days");
    const f = new Date(`${from.value}T00:00:00Z`);
    const t = new Date(`${to.value}T00:00:00Z`);
    t.setUTCDate(t.getUTCDate() + 1); // through the end of the last day
    const cap = new Date();
    if (f >= t) throw new Error("Window: “From” comes after “To”");
    const q = new URLSearchParams({ from: f.toISOString(), to: (t > cap ? cap : t).toISOString(), group_by: groupBy.value });
    return q;
  }

  function showQuotas(u) {
    const items = [
      { label: "Sandboxes running", used: u.sandboxes.running, limit: u.sandboxes.limit || null },
      { label: "Sandboxes hibernated", used: u.sandboxes.hibernated, limit: u.sandboxes.hibernated_limit || null },
      { label: "Volumes (GB)", used: u.volumes.size_gb, limit: u.volumes.quota_gb || null, unit: "GB" },
      { label: "Snapshots", used: u.snapshots.count, limit: u.snapshots.limit || null },
      { label: "Template builds", used: u.templates.builds, limit: u.templates.limit || null },
      { label: "Storage", used: u.storage.bytes, limit: u.storage.quota_gb ? u.storage.quota_gb * GIB : null, unit: "bytes" },
    ];
    const bars = usageBars(items);
    quotas.replaceChildren(
      h("h2", { id: "quota-title", class: "section" }, "Against the workspace's limits"),
      h("div", { class: "card" }, bars,
        h("p", { class: "muted small" },
          `${u.volumes.count} volumes with ${u.volumes.snapshots} snapshots · snapshots take ${bytes(u.snapshots.bytes)} · `,
          `storage: ${bytes(u.storage.snapshot_bytes)} snapshots, ${bytes(u.storage.hibernated_bytes)} hibernated sandboxes, ${bytes(u.storage.template_bytes)} template builds · `,
          `at most ${u.sandboxes.creates_per_minute} sandbox creates a minute`)),
    );
    sizeBars(quotas);
  }

  function showMetered(m) {
    const dims = m.group_by;
    const cols = [
      ...(dims.includes("day") || dims.includes("hour") ? [{ label: dims.includes("hour") ? "Hour (UTC)" : "Day (UTC)", cell: (g) => (g.start ? (dims.includes("hour") ? g.start.slice(0, 16).replace("T", " ") : g.start.slice(0, 10)) : "") }] : []),
      ...(dims.includes("kind") ? [{ label: "Kind", cell: (g) => g.kind || "" }] : []),
      ...(dims.includes("resource") ? [{ label: "Resource", cell: (g) => g.resource_id || "", class: "mono" }] : []),
    ];
    const head = h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c.label)), FIGURES.map((f) => h("th", { scope: "col", class: "num" }, f.label)));
    const rows = m.groups.map((g) =>
      h("tr", {}, cols.map((c) => h("td", { "data-label": c.label, class: c.class || "" }, c.cell(g))), FIGURES.map((f) => h("td", { class: "num", "data-label": f.label }, f.fmt(g.usage[f.key])))),
    );
    const total = h("tr", {}, cols.length ? h("td", { colspan: cols.length }, "Total") : null, FIGURES.map((f) => h("td", { class: "num", "data-label": cols.length ? f.label : `Total ${f.label}` }, f.fmt(m.totals[f.key]))));
    fill(tableBox, 
      h("p", { class: "muted small" }, `From ${m.from.replace("T", " ").slice(0, 16)} to ${m.to.replace("T", " ").slice(0, 16)} UTC (hours are the resolution).`),
      h("div", { class: "table-wrap" },
        h("table", {},
          h("caption", { class: "visually-hidden" }, "Metered usage"),
          h("thead", {}, head),
          h("tbody", {}, rows),
          h("tfoot", {}, total))),
      m.groups.length === 0 && dims.length ? h("p", { class: "muted" }, "Nothing was metered in this window.") : null,
    );
  }

  async function load() {
    const q = query();
    const u = await api("GET", `/v1/usage?${q}`);
    showQuotas(u);
    showMetered(u.metered);
    q.set("format", "csv");
    csv.href = `/v1/usage?${q}`;
    announce("Usage read");
  }
  load().catch((e) => errors.show(e));
}
