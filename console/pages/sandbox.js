// One sandbox: its facts and state (kept live: a `sandbox.*` event about it re-reads
// `GET /v1/sandboxes/{id}`), the actions its state allows (snapshot, fork, pause/resume,
// hibernate/wake, delete), and tabs: a terminal (PTY WebSocket), its files, the guest console
// log, metrics over time, preview URLs of ports, and its snapshots.

import { api, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, actionButton, field, input, formCard, kv, link, when, stateBadge, path,
  tabs, bytes,
} from "../ui.js";
import { terminalTab } from "../terminal.js";
import { filesTab } from "../files.js";
import { logsTab, metricsTab, portsTab, snapshotsTab } from "../sandbox-panels.js";

function metadataText(m) {
  return Object.entries(m || {}).map(([k, v]) => `${k}=${v}`).join(", ");
}

function facts(sb) {
  return kv([
    ["State", stateBadge(sb.state)],
    ["Template", sb.template],
    ["CPU", `${sb.cpu} vCPU`],
    ["Memory", `${sb.memory_mb} MiB`],
    ["Created", when(sb.created_at)],
    ["Expires", sb.expires_at ? when(sb.expires_at) : "never (no TTL)"],
    ["Idle timeout", sb.idle_timeout_seconds ? `${sb.idle_timeout_seconds} s, then ${sb.on_timeout}` : null],
    ["Boot", sb.boot_ms != null ? `${sb.boot_ms} ms (${sb.boot_mode})` : null],
    ["Host", sb.host],
    ["From snapshot", sb.snapshot_id],
    ["Metadata", metadataText(sb.metadata) || "none"],
  ]);
}

export function render(main, params, session) {
  const id = params.id;
  const base = path("/v1/sandboxes", id);
  const { section, body, errors } = page(main, `Sandbox ${id}`, {
    crumbs: [["#/sandboxes", "Sandboxes"]],
  });
  const actions = section.querySelector(".actions");
  const factsEl = h("div", { class: "card sb-facts" }, h("p", { class: "muted" }, "Loading…"));
  const gone = h("p", { class: "error", role: "alert", hidden: true }, "This sandbox no longer exists.");
  let sb = null;

  // Fork: N children from a snapshot of this one; links to them.
  const count = input({ type: "number", name: "count", min: "1", max: "16", step: "1", value: "1", inputmode: "numeric" });
  const forked = h("div", { class: "fork-result", "aria-live": "polite" });
  const fork = formCard(
    "Fork",
    [field("Copies", count, "1 to 16 children, each running from this moment")],
    async () => {
      const r = await api("POST", `${base}/fork`, { count: Number(count.value || 1) });
      forked.replaceChildren(
        h("p", {}, `Forked into ${r.children.length} sandbox${r.children.length === 1 ? "" : "es"}:`),
        h("ul", { class: "children" }, r.children.map((c) => h("li", {}, link(`#/sandboxes/${encodeURIComponent(c.id)}`, c.id, { class: "mono" })))),
      );
      announce(`Forked into ${r.children.map((c) => c.id).join(", ")}`);
    },
    { submitLabel: "Fork", errors },
  );
  fork.append(forked);

  const result = h("div", { "aria-live": "polite" });

  const act = (label, route, done) =>
    actionButton(label, async () => {
      const r = await api("POST", `${base}/${route}`);
      if (done) done(r);
      await refresh();
    }, { errors, kind: "ghost" });

  function showActions() {
    const s = sb?.state;
    const list = [];
    if (s === "running") {
      list.push(
        act("Snapshot", "snapshots", (snap) => {
          result.replaceChildren(h("p", { class: "notice" }, `Snapshot ${snap.id} made (${bytes(snap.size_bytes)}): see the Snapshots tab.`));
          announce(`Snapshot ${snap.id} made`);
          snaps?.reload();
        }),
        act("Pause", "pause"),
        act("Hibernate", "hibernate"),
      );
    }
    if (s === "paused") list.push(act("Resume", "resume"));
    if (s === "hibernated") list.push(act("Wake", "wake"));
    if (sb) {
      list.push(
        actionButton(
          "Delete",
          async () => {
            await api("DELETE", base);
            announce(`Sandbox ${id} deleted`);
            location.hash = "#/sandboxes";
          },
          { errors, danger: true, confirm: `Delete sandbox ${id}? This cannot be undone.` },
        ),
      );
    }
    actions.replaceChildren(...list);
    fork.hidden = s !== "running";
  }

  // One read at a time; an event during a read asks for one more after it (the read in
  // flight may have been answered before the change the event tells of).
  let reading = null;
  let again = false;
  async function read() {
    try {
      sb = await api("GET", base);
      factsEl.replaceChildren(facts(sb));
      gone.hidden = true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        sb = null;
        gone.hidden = false;
        factsEl.replaceChildren(kv([["State", stateBadge("deleted")]]));
      } else errors.show(e);
    } finally {
      showActions();
    }
  }
  function refresh() {
    if (reading) {
      again = true;
      return reading;
    }
    reading = (async () => {
      do {
        again = false;
        await read();
      } while (again);
      reading = null;
    })();
    return reading;
  }

  // The event stream is open before the first read: nothing between is missed.
  const off = onEvents(["sandbox.*"], (e) => {
    if (e.resource?.kind === "sandbox" && e.resource.id === id) refresh();
  });

  let snaps = null;
  let metrics = null;
  const first = refresh();
  const t = tabs([
    { label: "Terminal", render: (p) => terminalTab(p, id, { sandboxState: () => sb?.state ?? "gone", ready: first }) },
    { label: "Files", render: (p) => filesTab(p, id, { csrf: session?.csrf_token }) },
    { label: "Logs", render: (p) => logsTab(p, id) },
    {
      label: "Metrics",
      render: (p) => {
        metrics = metricsTab(p, id);
        return metrics.stop;
      },
      onshow: () => metrics?.shown(),
    },
    { label: "Ports", render: (p) => portsTab(p, id) },
    {
      label: "Snapshots",
      render: (p) => {
        snaps = snapshotsTab(p, id);
        return snaps.stop;
      },
    },
  ]);

  body.append(gone, h("div", { class: "sb-top" }, factsEl, fork), result, t.el);

  return () => {
    off();
    t.stop();
  };
}
