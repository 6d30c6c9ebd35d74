// A sandbox's terminal: xterm.js (console/vendor, filled by scripts/console-deps.sh) over the
// PTY WebSocket `GET /v1/sandboxes/{id}/pty?cols=&rows=` (docs/streams.md): binary frames are
// raw terminal bytes both ways, client text frames are JSON control (`resize`), the server's
// text frames are `exit` (then a normal close) and `error`. The session cookie authenticates the
// socket (same origin; the browser sends the Origin the server checks).
//
// The page's Content-Security-Policy refuses inline <style> elements, and xterm's DOM renderer
// writes its dimensions and theme into <style> elements it makes inside the terminal. Their
// text is moved into constructed stylesheets (document.adoptedStyleSheets, which the policy
// allows) instead: see `adoptXtermStyles`.

import { h, announce, actionButton, errorArea, path } from "./ui.js";

const SHIFT_ESC_HELP = "Shift+Escape leaves the terminal (Tab and Escape go to the shell).";

// ---- xterm's <style> elements → constructed stylesheets -------------------------------------

const sheets = new WeakMap(); // <style> inside .xterm → its CSSStyleSheet
let adopted = false;

function adoptXtermStyles() {
  if (adopted) return;
  adopted = true;
  const desc = Object.getOwnPropertyDescriptor(Node.prototype, "textContent");
  Object.defineProperty(HTMLStyleElement.prototype, "textContent", {
    configurable: true,
    enumerable: desc.enumerable,
    get() {
      const s = sheets.get(this);
      return s ? s.text : desc.get.call(this);
    },
    set(v) {
      if (!this.closest(".xterm")) {
        desc.set.call(this, v);
        return;
      }
      let s = sheets.get(this);
      if (!s) {
        s = { sheet: new CSSStyleSheet(), text: "" };
        sheets.set(this, s);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, s.sheet];
      }
      s.text = String(v ?? "");
      s.sheet.replaceSync(s.text);
    },
  });
}

/** Drops the constructed sheets of the <style> elements under `root` (a disposed terminal). */
function dropSheets(root) {
  const gone = new Set();
  for (const el of root.querySelectorAll("style")) {
    const s = sheets.get(el);
    if (s) gone.add(s.sheet);
  }
  if (gone.size) document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !gone.has(s));
}

// ---- theme ----------------------------------------------------------------------------------

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function theme() {
  const bg = cssVar("--surface") || "#ffffff";
  const fg = cssVar("--text") || "#1b1c1f";
  const dark = document.documentElement.dataset.theme === "dark";
  return {
    background: bg,
    foreground: fg,
    cursor: cssVar("--accent") || fg,
    cursorAccent: bg,
    selectionBackground: dark ? "#3a4a6a" : "#c5d5f5",
  };
}

function loadCss() {
  const href = new URL("./vendor/xterm.css", import.meta.url).href;
  if ([...document.querySelectorAll('link[rel="stylesheet"]')].some((l) => l.href === href)) return;
  document.head.append(h("link", { rel: "stylesheet", href }));
}

/** Why a socket closed, in words. */
function closeText(ev, exit) {
  if (exit !== null) return `The program exited with code ${exit}.`;
  if (ev.code === 1000) return "The terminal closed.";
  if (ev.code === 1006) return "The connection was lost (or refused).";
  return `The terminal closed (code ${ev.code}${ev.reason ? ": " + ev.reason : ""}).`;
}

/**
 * Renders the terminal tab into `panel` for sandbox `id`; returns its cleanup. `sandboxState()`
 * gives the sandbox's state now (a paused sandbox is not connected to), `ready` settles once it
 * is first known.
 */
export function terminalTab(panel, id, { sandboxState, ready = Promise.resolve() } = {}) {
  const errors = errorArea();
  const status = h("p", { class: "term-status", role: "status" }, "Loading the terminal…");
  const box = h("div", { class: "term-box" });
  let reconnect = null;
  const bar = h("div", { class: "term-bar" }, status);
  const help = h("p", { class: "muted small" }, SHIFT_ESC_HELP);
  panel.append(errors.el, bar, box, help);

  let term = null;
  let fit = null;
  let ws = null;
  let stopped = false;
  const observers = [];
  const offs = [];

  function connect() {
    errors.clear();
    reconnect.hidden = true;
    const state = sandboxState?.();
    // A paused sandbox refuses a terminal (409), a gone one is 404: say so instead of trying.
    // (A hibernated one is woken by the connection.)
    if (state && !["running", "hibernated", "starting"].includes(state)) {
      status.textContent = `The sandbox is ${state}: ${state === "paused" ? "resume it, then connect" : "no terminal"}.`;
      reconnect.textContent = "Connect";
      reconnect.hidden = state !== "paused";
      return;
    }
    reconnect.textContent = "Reconnect";
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${proto}//${location.host}${path("/v1/sandboxes", id, "pty")}?cols=${term.cols}&rows=${term.rows}`;
    const sock = new WebSocket(url);
    sock.binaryType = "arraybuffer";
    ws = sock;
    let opened = false;
    let exit = null;
    status.textContent = "Connecting…";
    sock.addEventListener("open", () => {
      opened = true;
      status.textContent = "Connected.";
      announce("Terminal connected");
      // The size may have changed while connecting.
      sock.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
    });
    sock.addEventListener("message", (ev) => {
      if (typeof ev.data !== "string") {
        term.write(new Uint8Array(ev.data));
        return;
      }
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (f.type === "exit") exit = f.exit_code;
      else if (f.type === "error") errors.show({ message: f.message || "terminal error", code: f.code });
    });
    sock.addEventListener("close", async (ev) => {
      if (ws !== sock || stopped) return;
      ws = null;
      let text = closeText(ev, exit);
      if (!opened) {
        const state = sandboxState?.();
        text = `Could not open the terminal${state ? ` (the sandbox is ${state})` : ""}.`;
      }
      status.textContent = text;
      announce(text);
      reconnect.hidden = false;
    });
  }

  reconnect = actionButton("Reconnect", async () => {
    term.reset();
    connect();
    term.focus();
  }, { errors });
  reconnect.hidden = true;
  bar.append(reconnect);

  Promise.all([import("./vendor/xterm.mjs"), import("./vendor/addon-fit.mjs"), ready.catch(() => {})])
    .then(([{ Terminal }, { FitAddon }]) => {
      if (stopped) return;
      loadCss();
      adoptXtermStyles();
      term = new Terminal({
        cursorBlink: true,
        fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
        fontSize: 13,
        scrollback: 5000,
        theme: theme(),
      });
      fit = new FitAddon();
      term.loadAddon(fit);
      term.open(box);
      term.textarea?.setAttribute("aria-label", "Terminal input");
      try {
        fit.fit();
      } catch {
        /* not laid out yet: the observer fits it */
      }
      const enc = new TextEncoder();
      term.onData((d) => {
        if (ws && ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
      });
      term.onBinary((d) => {
        if (ws && ws.readyState === WebSocket.OPEN) ws.send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff));
      });
      term.onResize(({ cols, rows }) => {
        if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
      });
      term.attachCustomKeyEventHandler((e) => {
        if (e.type === "keydown" && e.key === "Escape" && e.shiftKey) {
          reconnect.hidden ? document.getElementById(panel.getAttribute("aria-labelledby"))?.focus() : reconnect.focus();
          return false;
        }
        return true;
      });
      // Fit to the box whenever it changes size (the window, the phone turned, the tab shown).
      const ro = new ResizeObserver(() => {
        if (box.clientWidth > 0 && box.clientHeight > 0) fit.fit();
      });
      ro.observe(box);
      observers.push(ro);
      // Follow the console's theme (the toggle sets data-theme; the system's change too).
      const mo = new MutationObserver(() => (term.options.theme = theme()));
      mo.observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
      observers.push(mo);
      const mq = matchMedia("(prefers-color-scheme: dark)");
      const onScheme = () => (term.options.theme = theme());
      mq.addEventListener("change", onScheme);
      offs.push(() => mq.removeEventListener("change", onScheme));
      connect();
    })
    .catch((e) => {
      if (stopped) return;
      status.textContent = "No terminal.";
      box.hidden = true;
      help.hidden = true;
      errors.show({
        message: `This build has no terminal: run scripts/console-deps.sh and rebuild (${e.message}).`,
      });
    });

  return () => {
    stopped = true;
    if (ws) ws.close();
    ws = null;
    observers.forEach((o) => o.disconnect());
    offs.forEach((f) => f());
    if (term) {
      dropSheets(box);
      term.dispose();
    }
  };
}
