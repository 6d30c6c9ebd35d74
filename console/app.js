// The console's entry: asks the server whether this browser has a session, then shows the
// sign-in page or the sandboxes. The session's CSRF token lives in memory only.

import { api, setCsrf, ApiError } from "./api.js";
import { h, errorBox } from "./dom.js";
import { initTheme } from "./theme.js";
import { renderSignIn } from "./signin.js";
import { renderSandboxes } from "./sandboxes.js";

const main = document.getElementById("main");
const who = document.getElementById("who");
const signout = document.getElementById("signout");
let stop = null;

function signedIn(session) {
  setCsrf(session.csrf_token);
  who.textContent = `${session.key_name}${session.role ? " (" + session.role + ")" : ""} · ${session.workspace_id}`;
  signout.hidden = false;
  stop = renderSandboxes(main);
  main.focus();
}

function signedOut() {
  if (stop) stop();
  stop = null;
  setCsrf("");
  who.textContent = "";
  signout.hidden = true;
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

initTheme();
api("GET", "/console/session")
  .then(signedIn)
  .catch((e) => {
    if (e instanceof ApiError && e.status === 401) signedOut();
    else main.replaceChildren(h("h1", {}, "PandaStack"), errorBox(e));
  });
