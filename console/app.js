// The console's entry: asks the server whether this browser has a session, then shows the
// sign-in page or the page the address names (`#/sandboxes`, `#/sandboxes/<id>`, …). The
// session's CSRF token lives in memory only. Each page is a module under pages/ exporting
// `render(main, params, session)`, which may return the function that stops it (closes its
// streams) when another page is shown.

import { api, setCsrf, ApiError } from "./api.js";
import { h, errorBox } from "./dom.js";
import { initTheme } from "./theme.js";
import { renderSignIn } from "./signin.js";
import { openEvents, closeEvents, eventsReady } from "./events.js";

// [pattern, module]: `:name` segments become params.
const ROUTES = [
  ["sandboxes", "sandboxes"],
  ["sandboxes/:id", "sandbox"],
  ["templates", "templates"],
  ["volumes", "volumes"],
  ["databases", "databases"],
  ["databases/:id", "database"],
  ["apps", "apps"],
  ["apps/:id", "app"],
  ["functions", "functions"],
  ["functions/:id", "function"],
  ["schedules", "schedules"],
  ["keys", "keys"],
  ["usage", "usage"],
];

const main = document.getElementById("main");
const who = document.getElementById("who");
const nav = document.getElementById("nav");
const signout = document.getElementById("signout");
let session = null;
let stop = null;
let shown = 0;

function match(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { module: "sandboxes", params: {}, section: "sandboxes" };
  for (const [pattern, module] of ROUTES) {
    const segs = pattern.split("/");
    if (segs.length !== parts.length) continue;
    const params = {};
    if (segs.every((s, i) => (s.startsWith(":") ? ((params[s.slice(1)] = parts[i]), true) : s === parts[i]))) {
      return { module, params, section: segs[0] };
    }
  }
  return null;
}

async function show() {
  if (!session) return;
  if (stop) {
    try {
      stop();
    } catch (e) {
      console.error(e);
    }
  }
  stop = null;
  const n = ++shown;
  const route = match(location.hash);
  for (const a of nav.querySelectorAll("a")) {
    const current = route && a.getAttribute("href") === `#/${route.section}`;
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!route) {
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No page at this address. "), h("a", { href: "#/sandboxes" }, "Sandboxes"));
    return;
  }
  try {
    // The page's first reads come after the event stream is open, so no change between the
    // two is missed.
    const [mod] = await Promise.all([import(`./pages/${route.module}.js`), eventsReady()]);
    if (n !== shown) return; // another page was asked for meanwhile
    const s = mod.render(main, route.params, session);
    stop = typeof s === "function" ? s : null;
    document.title = `${main.querySelector("h1")?.textContent || "PandaStack"} · PandaStack console`;
    main.focus({ preventScroll: true });
  } catch (e) {
    main.replaceChildren(h("h1", {}, "This page failed to load"), errorBox(e));
  }
}

function signedIn(s) {
  session = s;
  setCsrf(s.csrf_token);
  who.textContent = `${s.key_name}${s.role ? " (" + s.role + ")" : ""} · ${s.workspace_id}`;
  signout.hidden = false;
  nav.hidden = false;
  openEvents(document.getElementById("live"));
  show();
}

function signedOut() {
  if (stop) stop();
  stop = null;
  session = null;
  closeEvents();
  setCsrf("");
  who.textContent = "";
  signout.hidden = true;
  nav.hidden = true;
  renderSignIn(main, signedIn);
}

signout.addEventListener("click", async () => {
  try {
    await api("DELETE", "/console/session");
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) {
      main.prepend(errorBox(e));
      return;
    }
  }
  signedOut();
});

// The skip link moves focus to the page's content; following its `#main` would be a route.
document.querySelector("a.skip")?.addEventListener("click", (e) => {
  e.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", show);
initTheme();
api("GET", "/console/session")
  .then(signedIn)
  .catch((e) => {
    if (e instanceof ApiError && e.status === 401) signedOut();
    else main.replaceChildren(h("h1", {}, "PandaStack"), errorBox(e));
  });
