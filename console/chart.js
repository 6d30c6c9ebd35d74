// Time-series charts as SVG (no library): `lineChart({title, series, unit, max?})` where each
// series is `{label, points: [[epochMs, value], …]}`. The chart has a title, a text summary
// for screen readers (last and peak values) and a table fallback behind a <details>, so the
// numbers are reachable without seeing the picture. Colours come from CSS variables.

import { h } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 640;
const H = 180;
const PAD = { l: 76, r: 12, t: 10, b: 22 };

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c);
  return el;
}

function fmt(v, unit) {
  if (v === null || v === undefined || isNaN(v)) return "–";
  if (unit === "bytes") {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) {
      v /= 1024;
      i += 1;
    }
    return `${v.toFixed(i ? 1 : 0)} ${u[i]}`;
  }
  if (unit === "%") return `${v.toFixed(1)} %`;
  if (unit === "s") return `${v.toFixed(v < 10 ? 2 : 0)} s`;
  return unit ? `${+v.toFixed(2)} ${unit}` : String(+v.toFixed(2));
}

/** A line chart; returns `{el, update(series)}`. */
export function lineChart({ title, series = [], unit = "", max }) {
  const figure = h("figure", { class: "chart" });
  const caption = h("figcaption", {}, title);
  const summary = h("p", { class: "visually-hidden" });
  const graph = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, preserveAspectRatio: "none" });
  const legend = h("div", { class: "legend" });
  const details = h("details", {}, h("summary", {}, "Values"));
  figure.append(caption, graph, legend, summary, details);

  function update(list) {
    graph.replaceChildren();
    const all = list.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
    if (all.length === 0) {
      graph.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, document.createTextNode("no data yet")));
      summary.textContent = `${title}: no data yet`;
      legend.replaceChildren();
      details.replaceChildren(h("summary", {}, "Values"));
      return;
    }
    const t0 = Math.min(...all.map((p) => p[0]));
    const t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
    // An all-zero series still gets a scale: 1 of its unit (1 KiB for bytes).
    const peakAll = Math.max(...all.map((p) => p[1]));
    // Percentages of a whole stop at 100.
    let top = max ?? (peakAll > 0 ? peakAll * 1.1 : unit === "bytes" ? 1024 : 1);
    if (max === undefined && unit === "%" && peakAll <= 100) top = Math.min(top, 100);
    const x = (t) => PAD.l + ((t - t0) / (t1 - t0)) * (W - PAD.l - PAD.r);
    const y = (v) => H - PAD.b - (Math.min(v, top) / top) * (H - PAD.t - PAD.b);
    // Grid: 0, half and top, labelled.
    for (const f of [0, 0.5, 1]) {
      const v = top * f;
      graph.append(
        svg("line", { x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v), class: "chart-grid" }),
        svg("text", { x: PAD.l - 4, y: y(v) + 4, "text-anchor": "end", class: "chart-label" }, document.createTextNode(fmt(v, unit))),
      );
    }
    for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
      graph.append(svg("text", { x: x(t), y: H - 6, "text-anchor": anchor, class: "chart-label" }, document.createTextNode(new Date(t).toLocaleTimeString())));
    }
    const parts = [];
    legend.replaceChildren();
    list.forEach((s, i) => {
      const pts = s.points.filter((p) => p[1] !== null && p[1] !== undefined);
      if (pts.length === 0) return;
      const d = pts.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
      graph.append(svg("path", { d, class: `chart-line chart-line-${i % 4}`, fill: "none" }));
      const last = pts[pts.length - 1][1];
      const peak = Math.max(...pts.map((p) => p[1]));
      parts.push(`${s.label}: now ${fmt(last, unit)}, peak ${fmt(peak, unit)}`);
      legend.append(h("span", { class: `legend-item chart-key-${i % 4}` }, `${s.label} ${fmt(last, unit)}`));
    });
    summary.textContent = `${title}. ${parts.join("; ")}.`;
    const rows = [];
    const times = [...new Set(all.map((p) => p[0]))].sort((a, b) => a - b).slice(-60);
    for (const t of times) {
      rows.push(h("tr", {}, h("td", {}, new Date(t).toLocaleTimeString()), list.map((s) => h("td", {}, fmt(s.points.find((p) => p[0] === t)?.[1], unit)))));
    }
    details.replaceChildren(
      h("summary", {}, "Values (last 60)"),
      h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Time"), list.map((s) => h("th", { scope: "col" }, s.label)))), h("tbody", {}, rows))),
    );
  }
  update(series);
  return { el: figure, update };
}

/**
 * Bars of use against a limit: `usageBars([{label, used, limit, unit}])`; a bar without a limit
 * shows the use only. Each is a <meter>-like row with the numbers written out.
 */
export function usageBars(items) {
  return h(
    "div",
    { class: "bars" },
    items.map((it) => {
      const pct = it.limit ? Math.min(100, (it.used / it.limit) * 100) : null;
      return h(
        "div",
        { class: "bar-row" },
        h("span", { class: "bar-label" }, it.label),
        h(
          "div",
          {
            class: "bar-track",
            role: "meter",
            "aria-label": it.label,
            "aria-valuenow": it.used,
            "aria-valuemin": 0,
            "aria-valuemax": it.limit ?? it.used,
          },
          h("div", { class: `bar-fill${pct !== null && pct >= 90 ? " bar-high" : ""}`, "data-pct": pct === null ? "" : pct.toFixed(1) }),
        ),
        h("span", { class: "bar-value" }, it.limit ? `${fmt(it.used, it.unit)} of ${fmt(it.limit, it.unit)}` : fmt(it.used, it.unit)),
      );
    }),
  );
}

/** Sets each bar's width from its data-pct (after it is in the document; CSS cannot read
 * attributes as lengths, and inline style attributes are refused by the page's policy). */
export function sizeBars(root) {
  for (const el of root.querySelectorAll(".bar-fill[data-pct]")) {
    el.style.width = el.dataset.pct === "" ? "100%" : `${el.dataset.pct}%`;
  }
}
