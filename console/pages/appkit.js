// What the app and function pages share (not a route): KEY=VALUE text, plain-text GETs, a
// deploy's phases as a timeline, and a deploy log followed over Server-Sent Events.

import { ApiError, listAll } from "../api.js";
import { h, logView, follow, announce } from "../ui.js";

/** `{A: "1"}` → "A=1" lines. */
export function envText(obj) {
  return Object.entries(obj || {})
    .map(([k, v]) => `${k}=${v}`)
    .join("\n");
}

/** "A=1\nB=two" → `{A: "1", B: "two"}`; blank lines and `#` comments are skipped. A line
 * without `=` throws an Error naming the field and the line. */
export function parseEnv(text, what = "Environment") {
  const out = {};
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/\r$/, "");
    if (!line.trim() || line.trim().startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`${what}, line ${i + 1}: write KEY=VALUE`);
    out[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return out;
}

/** GET a plain-text route (a log) with the session cookie; API errors as ApiError. */
export async function getText(path) {
  let resp;
  try {
    resp = await fetch(path, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/plain" } });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  const text = await resp.text();
  if (!resp.ok) {
    let err = null;
    try {
      err = JSON.parse(text).error;
    } catch {
      err = null;
    }
    throw new ApiError(resp.status, err ? err.code : "http_" + resp.status, err ? err.message : `HTTP ${resp.status}`, err ? err.request_id : resp.headers.get("X-Request-Id"));
  }
  return text;
}

/** 1234 → "1.2 s", 83 → "83 ms", 125000 → "2 min 5 s". */
export function duration(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

// The pipeline's phases in the order they run (docs/apps.md). `build_total` holds setup,
// deps_restore, install (which holds install_fetch and install_unpack) and build.
const TOP = ["clone", "vm", "build_total", "bake", "check", "snapshot", "checkpoint", "switch"];
const IN_BUILD = ["setup", "deps_restore", "install", "build"];
const IN_INSTALL = ["install_fetch", "install_unpack"];
const LABELS = {
  clone: "clone", vm: "VM", build_total: "build (all)", setup: "setup", deps_restore: "restore dependencies",
  install: "install", install_fetch: "fetch packages", install_unpack: "unpack packages", build: "build",
  bake: "bake (start)", check: "health check", snapshot: "snapshot", checkpoint: "checkpoint", switch: "switch",
};

/** The deploy's phases as rows `{name, label, start, ms, depth}`: durations from `phases_ms`
 * (the wire type has durations, not timestamps), starts laid end to end in pipeline order. */
export function phaseRows(phases) {
  const p = phases || {};
  const rows = [];
  let t = 0;
  const hasTotal = "build_total" in p;
  const top = hasTotal ? TOP : TOP.flatMap((n) => (n === "build_total" ? IN_BUILD : [n]));
  const known = new Set([...TOP, ...IN_BUILD, ...IN_INSTALL]);
  const order = [...top, ...Object.keys(p).filter((k) => !known.has(k))];
  for (const name of order) {
    if (!(name in p)) continue;
    rows.push({ name, label: LABELS[name] || name, start: t, ms: p[name], depth: 0 });
    if (name === "build_total") {
      let s = t;
      for (const sub of IN_BUILD) {
        if (!(sub in p)) continue;
        rows.push({ name: sub, label: LABELS[sub], start: s, ms: p[sub], depth: 1 });
        if (sub === "install") {
          let u = s;
          for (const x of IN_INSTALL) {
            if (!(x in p)) continue;
            rows.push({ name: x, label: LABELS[x], start: u, ms: p[x], depth: 2 });
            u += p[x];
          }
        }
        s += p[sub];
      }
    }
    if (name === "install" && !hasTotal) {
      let u = t;
      for (const x of IN_INSTALL) {
        if (!(x in p)) continue;
        rows.push({ name: x, label: LABELS[x], start: u, ms: p[x], depth: 1 });
        u += p[x];
      }
    }
    t += p[name];
  }
  return { rows, total: t };
}

/** A timeline of a deploy's phases: one horizontal bar per phase, placed on a shared time
 * axis, each with its duration written out (the list reads well without the bars). */
export function phaseTimeline(phases, { title = "Phases" } = {}) {
  const { rows, total } = phaseRows(phases);
  if (rows.length === 0) return h("p", { class: "muted" }, "No phase has finished yet.");
  const list = h(
    "ol",
    { class: "timeline", "aria-label": `${title}: ${duration(total)} in all` },
    rows.map((r) => {
      const bar = h("span", { class: `timeline-bar timeline-${r.name}` });
      const track = h("span", { class: "timeline-track", "aria-hidden": "true" }, bar);
      // Inline style attributes are refused by the page's policy; setting the style from
      // script is not.
      const span = Math.max(total, 1);
      bar.style.marginLeft = `${(r.start / span) * 100}%`;
      bar.style.width = `${Math.max((r.ms / span) * 100, 0.4)}%`;
      return h(
        "li",
        { class: `timeline-row depth-${r.depth}`, "data-phase": r.name },
        h("span", { class: "timeline-label" }, r.label),
        track,
        h("span", { class: "timeline-ms" }, duration(r.ms)),
      );
    }),
  );
  return h("div", { class: "timeline-wrap" }, h("h4", { class: "timeline-title" }, `${title} · ${duration(total)} in all`), list);
}

/**
 * A deploy log followed as Server-Sent Events (`…/logs?follow=1`: `log` events `{data}`, one
 * `end` event `{reason}`). The server sends no event ids, so a dropped stream is read again
 * from the start into a cleared view (a few times at most). Returns `{el, stop()}`.
 */
export function followedLog(url, label, { onEnd } = {}) {
  const view = logView(label);
  const status = h("p", { class: "muted small", role: "status" }, "Following the log…");
  let stop = null;
  let ended = false;
  let tries = 0;
  let timer = null;
  function start() {
    view.clear();
    stop = follow(
      url,
      {
        log: (d) => view.append(typeof d === "string" ? d : d.data ?? ""),
        end: (d) => {
          ended = true;
          stop?.();
          status.textContent = `Log complete (${d?.reason || "ended"}).`;
          onEnd?.(d?.reason);
        },
      },
      {
        onerror: () => {
          if (ended) return;
          stop?.();
          tries += 1;
          if (tries > 5) {
            status.textContent = "The log stream stopped; reload the page to read it again.";
            return;
          }
          status.textContent = "The log stream dropped; reading it again…";
          timer = setTimeout(start, 1500);
        },
      },
    );
  }
  start();
  return {
    el: h("div", { class: "followed-log" }, status, view.el),
    text: () => view.el.textContent,
    stop() {
      ended = true;
      clearTimeout(timer);
      stop?.();
    },
  };
}

/** A JSON value as indented text. */
export function pretty(v) {
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

/** `el.replaceChildren(...kids)` with arrays flattened and null/false left out (the DOM
 * would write them as the text "null"). */
export function fill(el, ...kids) {
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
  return el;
}

/**
 * Every item of the list at `listPath`, each read further by `enrich(item)` (four at a time)
 * and then added to `table` — unless an event put it there first. An item gone meanwhile (a
 * 404) is skipped; other errors go to `errors`. Announces the count of `noun`.
 */
export async function listEnriched(listPath, table, enrich, errors, noun) {
  const queue = [...(await listAll(listPath))];
  const worker = async () => {
    for (let item = queue.shift(); item; item = queue.shift()) {
      if (table.has(item.name)) continue;
      try {
        await enrich(item);
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 404)) errors.show(e);
        continue;
      }
      if (!table.has(item.name)) table.upsert(item, { append: true });
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  announce(`${table.size()} ${noun}`);
}

/**
 * `load` run so that calls never overlap: a call while one runs makes that one run once more
 * when it ends (a burst of events reads the page again once, and never misses the last).
 * Errors go to `onError`.
 */
export function coalesced(load, onError) {
  let busy = false;
  let again = false;
  return async function reload() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await load();
      } while (again);
    } catch (e) {
      onError(e);
    } finally {
      busy = false;
    }
  };
}
