// A small element builder: h("button", {type: "button", onclick}, "Text"). Text is always set
// as text, never as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Announces `text` to screen readers. */
export function announce(text) {
  const s = document.getElementById("status");
  if (s) s.textContent = text;
}

/** An error box for an ApiError (its message, code and request id). */
export function errorBox(err) {
  const detail = err.code ? ` (${err.code}${err.requestId ? ", " + err.requestId : ""})` : "";
  return h("p", { class: "error", role: "alert" }, err.message + detail);
}
