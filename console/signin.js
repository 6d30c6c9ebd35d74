// Sign-in: the API key is sent once to POST /console/session, which answers with a session
// cookie; the key is never kept (the field is cleared whatever the answer).

import { api } from "./api.js";
import { h, errorBox } from "./dom.js";

export function renderSignIn(main, onSignedIn) {
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "api-key-help",
  });
  const errors = h("div", { class: "errors" });
  const submit = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "card signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h(
      "p",
      { id: "api-key-help", class: "muted" },
      "A key of your workspace (pds_…). It is exchanged for a session and not stored in this browser.",
    ),
    errors,
    submit,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = input.value;
    input.value = "";
    errors.replaceChildren();
    submit.disabled = true;
    try {
      const session = await api("POST", "/console/session", { api_key: key });
      onSignedIn(session);
    } catch (e) {
      errors.replaceChildren(errorBox(e));
      input.focus();
    } finally {
      submit.disabled = false;
    }
  });
  main.replaceChildren(form);
  input.focus();
}
