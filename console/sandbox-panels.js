// The sandbox page's smaller tabs: the guest console log (followed), metrics over time, preview
// URLs of ports and the sandbox's snapshots. Each renders into its tab panel and returns the
// function that stops it (its stream, its timer, its event subscription).

import { api, listAll } from "./api.js";
import { onEvents } from "./events.js";
import { lineChart } from "./chart.js";
import {
  h, announce, actionButton, errorArea, dataTable, field, input, select, formCard, kv, bytes,
  when, copyable, path, follow, logView,
} from "./ui.js";

/** A button made small (actionButton's class is danger or kind, not both). */
function small(b) {
  b.classList.add("small");
  return b;
}

// ---- Logs -----------------------------------------------------------------------------------

// Terminal control sequences (colours, cursor moves) in the console's text: shown as plain text.
const CSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r(?!\n)/g;
const CSI_TAIL = /\x1b(\[[0-?]*[ -/]*)?$|\x1b[()]$/;

/** The guest console, followed (`GET …/logs?follow=1`, events `log {data}` and `end {reason}`). */
export function logsTab(panel, id) {
  const errors = errorArea();
  const view = logView("Guest console log");
  view.el.classList.add("log-tall");
  const status = h("p", { role: "status", class: "small muted" }, "Connecting…");
  let paused = false;
  let held = [];
  let carry = "";
  let stop = null;
  let ended = false;

  const pause = h("button", { type: "button", class: "ghost", "aria-pressed": "false" }, "Pause following");
  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume following" : "Pause following";
    if (!paused) {
      view.append(held.join(""));
      held = [];
      view.el.scrollTop = view.el.scrollHeight;
      setStatus();
    } else setStatus();
  });
  const again = actionButton("Reconnect", async () => start(), { errors });
  again.hidden = true;

  function setStatus(text) {
    if (text) status.textContent = text;
    else if (ended) return;
    else status.textContent = paused ? `Paused: ${held.length ? "new output is held" : "nothing new yet"}.` : "Following.";
  }

  function add(text) {
    const s = (carry + text).replace(CSI, "");
    const tail = s.match(CSI_TAIL);
    carry = tail ? tail[0] : "";
    const out = tail ? s.slice(0, tail.index) : s;
    if (!out) return;
    if (paused) {
      held.push(out);
      setStatus();
    } else view.append(out);
  }

  function start() {
    stop?.();
    view.clear();
    held = [];
    carry = "";
    ended = false;
    again.hidden = true;
    setStatus("Connecting…");
    let opened = false;
    stop = follow(`${path("/v1/sandboxes", id, "logs")}?follow=1`, {
      log: (d) => {
        if (!opened) {
          opened = true;
          setStatus();
        }
        add(typeof d === "object" && d ? d.data ?? "" : String(d));
      },
      end: (d) => {
        ended = true;
        stop?.();
        setStatus(`The log ended: ${d?.reason === "deleted" ? "the sandbox was deleted" : d?.reason ?? "closed"}.`);
      },
    }, {
      onerror: () => {
        if (ended) return;
        // EventSource would reconnect and be sent the whole log again: stop, and offer to.
        stop?.();
        setStatus("The log stream was interrupted.");
        again.hidden = false;
      },
    });
  }

  panel.append(errors.el, h("div", { class: "term-bar" }, status, pause, again), view.el);
  start();
  return () => stop?.();
}

// ---- Metrics --------------------------------------------------------------------------------

const SPANS = [
  { value: "15m", label: "Last 15 minutes", step: 5 },
  { value: "1h", label: "Last hour", step: 5 },
  { value: "6h", label: "Last 6 hours", step: 60 },
];

/** CPU, memory, disk and network over time (`GET …/metrics?since=&step=`), every 5 s while the
 * tab is shown. */
export function metricsTab(panel, id) {
  const errors = errorArea();
  const since = select(SPANS, { name: "since" });
  since.value = "1h";
  const now = h("div", {});
  const cpu = lineChart({ title: "CPU (% of the vCPUs)", unit: "%" });
  const mem = lineChart({ title: "Guest memory", unit: "bytes" });
  const disk = lineChart({ title: "Root disk", unit: "bytes" });
  const net = lineChart({ title: "Network (bytes per second)", unit: "bytes" });
  const updated = h("p", { class: "small muted", role: "status" });
  const noNet = h("p", { class: "muted small", hidden: true }, "No network chart: this sandbox has no network interface.");
  panel.append(
    errors.el,
    h("div", { class: "inline metrics-bar" }, field("Since", since), updated),
    now,
    h("div", { class: "charts" }, cpu.el, mem.el, disk.el, net.el),
    noNet,
  );

  let busy = false;
  async function load() {
    if (busy) return;
    busy = true;
    try {
      const span = SPANS.find((s) => s.value === since.value) || SPANS[1];
      const m = await api("GET", `${path("/v1/sandboxes", id, "metrics")}?since=${span.value}&step=${span.step}`);
      const pts = (m.samples || []).map((s) => ({ ...s, ms: Date.parse(s.t) }));
      const series = (label, f) => ({ label, points: pts.map((s) => [s.ms, f(s)]) });
      const used = (total, avail) => (total == null || avail == null ? null : total - avail);
      cpu.update([series("CPU", (s) => s.cpu_pct)]);
      mem.update([
        series("used", (s) => used(s.mem_total_bytes, s.mem_available_bytes)),
        series("total", (s) => s.mem_total_bytes),
        series("host RSS", (s) => s.mem_bytes),
      ]);
      disk.update([series("used", (s) => s.disk_bytes), series("size", (s) => s.disk_total_bytes)]);
      const rate = (v) => (v == null ? null : v / (m.step || span.step));
      net.update([series("in", (s) => rate(s.net_rx)), series("out", (s) => rate(s.net_tx))]);
      const nic = pts.length === 0 || pts.some((s) => s.net_rx != null || s.net_tx != null);
      net.el.hidden = !nic;
      noNet.hidden = nic;
      const last = pts[pts.length - 1];
      now.replaceChildren(
        kv([
          ["State", m.state],
          ["vCPUs", last?.vcpus],
          ["CPU time", m.cpu_time_ms == null ? null : `${(m.cpu_time_ms / 1000).toFixed(1)} s`],
          ["Host memory (RSS / PSS)", m.host_rss_bytes == null ? null : `${bytes(m.host_rss_bytes)} / ${bytes(m.host_pss_bytes)}`],
          ["Guest memory used", last && last.mem_total_bytes != null ? `${bytes(used(last.mem_total_bytes, last.mem_available_bytes))} of ${bytes(last.mem_total_bytes)}` : null],
          ["Disk used", last && last.disk_bytes != null ? `${bytes(last.disk_bytes)} of ${bytes(last.disk_total_bytes)}` : null],
        ]),
      );
      updated.textContent = `Updated ${new Date().toLocaleTimeString()} · ${pts.length} points of ${m.step} s`;
      errors.clear();
    } catch (e) {
      errors.show(e);
    } finally {
      busy = false;
    }
  }
  since.addEventListener("change", load);
  const visible = () => !panel.hidden && document.visibilityState === "visible";
  // No event tells of new readings: a modest timer, only while the tab is seen.
  const timer = setInterval(() => visible() && load(), 5000);
  const onVis = () => visible() && load();
  document.addEventListener("visibilitychange", onVis);
  load();
  return {
    stop() {
      clearInterval(timer);
      document.removeEventListener("visibilitychange", onVis);
    },
    shown: load,
  };
}

// ---- Ports ----------------------------------------------------------------------------------

/** Preview URLs: a port's `{url, public, token}`, open it, make it public or private. */
export function portsTab(panel, id) {
  const errors = errorArea();
  const port = input({ type: "number", name: "port", min: "1", max: "65535", step: "1", inputmode: "numeric", required: true, value: "8080" });
  const result = h("div", { "aria-live": "polite" });
  const portPath = (p) => path("/v1/sandboxes", id, "ports", p);

  function show(u) {
    const open = u.public ? u.url : `${u.url}${u.url.includes("?") ? "&" : "?"}pandastack_access=${encodeURIComponent(u.token)}`;
    result.replaceChildren(
      h(
        "div",
        { class: "card" },
        h("h2", {}, `Port ${u.port}`),
        kv([
          ["URL", copyable(u.url, `Preview URL of port ${u.port}`)],
          ["Access", u.public ? "public: anyone with the URL" : "private: an API key or the access token"],
          ["Access token", u.public ? null : copyable(u.token, "Access token")],
        ]),
        h(
          "div",
          { class: "actions" },
          h("a", { href: open, target: "_blank", rel: "noopener noreferrer", class: "button-link" }, `Open port ${u.port}`),
          actionButton(
            u.public ? "Make private" : "Make public",
            async () => {
              const next = await api("PATCH", portPath(u.port), { public: !u.public });
              show(next);
              announce(`Port ${u.port} is ${next.public ? "public" : "private"}`);
            },
            { errors, kind: u.public ? "ghost" : "", danger: false },
          ),
        ),
      ),
    );
  }

  panel.append(
    errors.el,
    formCard("Preview URL", [field("Port", port, "A TCP port a program in the sandbox listens on")], async () => {
      show(await api("GET", `${portPath(port.value)}/url`));
    }, { submitLabel: "Show URL", errors }),
    result,
  );
}

// ---- Snapshots ------------------------------------------------------------------------------

/** This sandbox's snapshots (the list has no filter: every page, kept to this sandbox's). */
export function snapshotsTab(panel, id) {
  const errors = errorArea();
  const table = dataTable({
    caption: "Snapshots of this sandbox",
    empty: "No snapshots of this sandbox yet.",
    columns: [
      { label: "ID", class: "mono", cell: (s) => s.id },
      { label: "Created", cell: (s) => when(s.created_at) },
      { label: "Size", cell: (s) => bytes(s.size_bytes) },
      { label: "Durable", cell: (s) => (s.durable_at ? when(s.durable_at) : "not yet") },
      {
        label: "Actions",
        cell: (s) =>
          h(
            "div",
            { class: "row-actions" },
            actionButton(
              "New sandbox",
              async () => {
                const sb = await api("POST", "/v1/sandboxes", { template: s.template, snapshot_id: s.id });
                announce(`Sandbox ${sb.id} created from ${s.id}`);
                location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`;
              },
              { errors, kind: "small", ariaLabel: `New sandbox from snapshot ${s.id}` },
            ),
            small(actionButton(
              "Delete",
              async () => {
                await api("DELETE", path("/v1/snapshots", s.id));
                table.remove(s.id);
                announce(`Snapshot ${s.id} deleted`);
              },
              { errors, danger: true, confirm: `Delete snapshot ${s.id}?`, ariaLabel: `Delete snapshot ${s.id}` },
            )),
          ),
      },
    ],
  });
  panel.append(errors.el, table.el);
  async function load() {
    try {
      const all = await listAll("/v1/snapshots");
      table.set(all.filter((s) => s.sandbox_id === id));
    } catch (e) {
      errors.show(e);
    }
  }
  const off = onEvents(["snapshot.created", "sandbox.forked"], (e) => {
    if (e.type === "snapshot.created" ? e.data?.sandbox_id === id : e.resource?.id === id) load();
  });
  load();
  return { stop: off, reload: load };
}
