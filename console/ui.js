// The console's one small component set: every page is built from these, so every page looks
// and behaves the same (labels, focus, errors, live updates). Text is always set as text.

import { ApiError } from "./api.js";
import { h, announce, errorBox } from "./dom.js";

let uid = 0;
/** A fresh element id with a readable prefix. */
export function newId(prefix = "f") {
  uid += 1;
  return `${prefix}-${uid}`;
}

/** A local date and time for an RFC 3339 string, in a <time>. */
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return h("time", { datetime: iso, title: iso }, isNaN(d) ? iso : d.toLocaleString());
}

/** 1536 → "1.5 KiB". */
export function bytes(n) {
  if (n === null || n === undefined || isNaN(n)) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

/** A link inside the console: `link("#/sandboxes/sb_1", "sb_1")`. */
export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

/** `/v1/...` path with each segment encoded: `path("/v1/apps", name, "deploys")`. */
export function path(base, ...segments) {
  return [base, ...segments.map((s) => encodeURIComponent(String(s)))].join("/");
}

/** A state as a coloured word (colour is never the only sign: the word is there). */
export function stateBadge(state) {
  const known = {
    running: "ok", ready: "ok", live: "ok", succeeded: "ok", ok: "ok", active: "ok",
    starting: "warn", building: "warn", pending: "warn", paused: "warn", hibernated: "warn",
    deploying: "warn", creating: "warn", restoring: "warn", queued: "warn",
    failed: "bad", lost: "bad", error: "bad", dead: "bad",
  };
  return h("span", { class: `state state-${known[state] || "other"}` }, state ?? "");
}

/** The errors area of a page: `show(err)` puts an API error's message, code and request id in
 * it (never swallowed), `clear()` empties it. A 401 means the session ended: reload to sign in. */
export function errorArea() {
  const el = h("div", { class: "errors" });
  return {
    el,
    show(err) {
      if (err instanceof ApiError && err.status === 401) {
        location.reload();
        return;
      }
      el.replaceChildren(errorBox(err));
      el.scrollIntoView?.({ block: "nearest" });
    },
    clear() {
      el.replaceChildren();
    },
  };
}

/** A page: a heading with optional actions beside it, an errors area and a body. */
export function page(main, title, { actions = [], crumbs = [] } = {}) {
  const titleId = newId("title");
  const errors = errorArea();
  const body = h("div", { class: "page-body" });
  const section = h(
    "section",
    { "aria-labelledby": titleId },
    crumbs.length
      ? h(
          "nav",
          { class: "crumbs", "aria-label": "Breadcrumb" },
          crumbs.map((c) => [link(c[0], c[1]), " / "]),
        )
      : null,
    h("div", { class: "head" }, h("h1", { id: titleId }, title), h("div", { class: "actions" }, actions)),
    errors.el,
    body,
  );
  main.replaceChildren(section);
  return { section, body, errors };
}

/** A button running `fn` (async): disabled while it runs, errors go to `errors`, an optional
 * `confirm` question first. */
export function actionButton(label, fn, { errors, danger = false, confirm: ask, ariaLabel, kind } = {}) {
  const b = h(
    "button",
    { type: "button", class: danger ? "danger" : kind || "", "aria-label": ariaLabel },
    label,
  );
  b.addEventListener("click", async () => {
    if (ask && !window.confirm(ask)) return;
    b.disabled = true;
    errors?.clear();
    try {
      await fn();
    } catch (e) {
      if (errors) errors.show(e);
      else console.error(e);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

/** A labelled field around `input` (which gets an id if it has none). */
export function field(label, input, help) {
  if (!input.id) input.id = newId("field");
  const helpId = help ? newId("help") : null;
  if (helpId) input.setAttribute("aria-describedby", helpId);
  return h(
    "div",
    { class: "field" },
    h("label", { for: input.id }, label),
    input,
    help ? h("span", { id: helpId, class: "muted small" }, help) : null,
  );
}

export function input(attrs = {}) {
  return h("input", { type: "text", ...attrs });
}

export function textarea(attrs = {}) {
  return h("textarea", { rows: 4, ...attrs });
}

export function select(options, attrs = {}) {
  return h(
    "select",
    attrs,
    options.map((o) => (typeof o === "string" ? h("option", { value: o }, o) : h("option", { value: o.value }, o.label))),
  );
}

/** A form card: `fields` (elements from field()), a submit button, `onsubmit` (async) whose
 * errors go to `errors`. */
export function formCard(title, fields, onsubmit, { submitLabel = "Create", errors, inline = true } = {}) {
  const titleId = newId("form");
  const submit = h("button", { type: "submit" }, submitLabel);
  const form = h(
    "form",
    { class: `card ${inline ? "inline" : "stack"}`, "aria-labelledby": titleId },
    h("h2", { id: titleId }, title),
    fields,
    submit,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    errors?.clear();
    submit.disabled = true;
    try {
      await onsubmit();
    } catch (e) {
      if (errors) errors.show(e);
      else console.error(e);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** A definition list of [term, value] pairs (values may be elements). */
export function kv(pairs) {
  return h(
    "dl",
    { class: "kv" },
    pairs.filter((p) => p && p[1] !== undefined && p[1] !== null && p[1] !== "").map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

/** A button that copies `text` to the clipboard. */
export function copyButton(text, label = "Copy") {
  const b = h("button", { type: "button", class: "ghost small", "aria-label": `${label}: copy to the clipboard` }, "Copy");
  b.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = "Copied";
      announce("Copied");
    } catch {
      b.textContent = "Select and copy";
    }
    setTimeout(() => (b.textContent = "Copy"), 1500);
  });
  return b;
}

/** A value in monospace with a copy button. */
export function copyable(text, label) {
  return h("span", { class: "copyable" }, h("code", { class: "mono" }, text), copyButton(text, label));
}

/**
 * A table kept by key: `columns` are `{label, cell(row) → node|string, class?}`; returns
 * `{el, upsert(row), remove(key), set(rows), size()}`. Rows added later go on top.
 */
export function dataTable({ caption, columns, key = (r) => r.id, empty = "Nothing here yet." }) {
  const tbody = h("tbody");
  const rows = new Map();
  const emptyEl = h("p", { class: "muted" }, empty);
  const table = h(
    "table",
    {},
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c.label)))),
    tbody,
  );
  const el = h("div", {}, h("div", { class: "table-wrap" }, table), emptyEl);
  const make = (r) =>
    h(
      "tr",
      { "data-key": key(r) },
      columns.map((c) => {
        const v = c.cell(r);
        const blank = v === null || v === undefined || v === "";
        return h("td", { class: c.class || "", "data-label": c.label, "data-empty": blank }, v);
      }),
    );
  const showEmpty = () => (emptyEl.hidden = rows.size > 0);
  return {
    el,
    upsert(r, { append = false } = {}) {
      const k = key(r);
      const tr = make(r);
      const old = rows.get(k);
      if (old) old.replaceWith(tr);
      else if (append) tbody.append(tr);
      else tbody.prepend(tr);
      rows.set(k, tr);
      showEmpty();
    },
    remove(k) {
      rows.get(k)?.remove();
      rows.delete(k);
      showEmpty();
    },
    set(list) {
      rows.clear();
      const frag = document.createDocumentFragment();
      for (const r of list) {
        const tr = make(r);
        rows.set(key(r), tr);
        frag.append(tr);
      }
      tbody.replaceChildren(frag);
      showEmpty();
    },
    has(k) {
      return rows.has(k);
    },
    size() {
      return rows.size;
    },
  };
}

/**
 * Tabs (WAI-ARIA tablist, arrow keys move between them): `tabs([{label, render(panel) →
 * cleanup?}])`; a tab's content is rendered when first shown. Returns `{el, stop()}`.
 */
export function tabs(list, { initial = 0 } = {}) {
  const tablist = h("div", { role: "tablist", class: "tabs" });
  const panels = h("div", {});
  const cleanups = [];
  const items = list.map((t, i) => {
    const tabId = newId("tab");
    const panelId = newId("panel");
    const tab = h("button", {
      type: "button", role: "tab", id: tabId, "aria-controls": panelId,
      "aria-selected": "false", tabindex: "-1", class: "tab",
    }, t.label);
    const panel = h("div", { role: "tabpanel", id: panelId, "aria-labelledby": tabId, hidden: true, class: "panel" });
    let rendered = false;
    const show = () => {
      for (const it of items) {
        it.tab.setAttribute("aria-selected", "false");
        it.tab.tabIndex = -1;
        it.panel.hidden = true;
      }
      tab.setAttribute("aria-selected", "true");
      tab.tabIndex = 0;
      panel.hidden = false;
      if (!rendered) {
        rendered = true;
        const c = t.render(panel);
        if (typeof c === "function") cleanups.push(c);
      }
      t.onshow?.();
    };
    tab.addEventListener("click", show);
    tab.addEventListener("keydown", (e) => {
      const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      const next = items[(i + d + items.length) % items.length];
      next.show();
      next.tab.focus();
    });
    tablist.append(tab);
    panels.append(panel);
    return { tab, panel, show };
  });
  items[initial]?.show();
  return { el: h("div", { class: "tabbed" }, tablist, panels), stop: () => cleanups.forEach((c) => c()) };
}

/** A log view that keeps to the bottom while the reader is there. */
export function logView(label) {
  const pre = h("pre", { class: "log", tabindex: "0", "aria-label": label, role: "log" });
  return {
    el: pre,
    append(text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(document.createTextNode(text));
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    },
    clear() {
      pre.replaceChildren();
    },
  };
}

/** Follows a GET Server-Sent Events route (cookie-authenticated): `handlers` maps event names
 * to `fn(data)` (JSON-parsed when it parses). Returns the function that stops it. */
export function follow(url, handlers, { onerror } = {}) {
  const es = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (ev) => {
      let d = ev.data;
      try {
        d = JSON.parse(ev.data);
      } catch {
        /* plain text */
      }
      fn(d, ev);
    });
  }
  if (onerror) es.addEventListener("error", onerror);
  return () => es.close();
}

/**
 * Re-reads one row of `table` when an event names it: `refresh(key)` calls `read(key)` and
 * puts the answer in its row, or removes the row on a 404 (gone). A burst of events for one
 * key reads it once. Other errors go to `errors`.
 */
export function rowRefresher(table, read, errors) {
  const pending = new Set();
  return async function refresh(key) {
    if (pending.has(key)) return;
    pending.add(key);
    await Promise.resolve();
    pending.delete(key);
    try {
      table.upsert(await read(key));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) table.remove(key);
      else errors.show(e);
    }
  };
}

export { h, announce };
