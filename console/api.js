// The console's only way to the server: same-origin fetch with the session cookie (the browser
// sends it; scripts cannot read it), the session's CSRF token on every change, and errors read
// from the API's envelope {"error":{code,message,request_id}}.

let csrf = "";

/** An API error: the envelope's code and message, and the HTTP status. */
export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

export function setCsrf(token) {
  csrf = token || "";
}

/** Calls the API; resolves to the JSON body (or null), rejects with an ApiError. */
export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  const text = await resp.text();
  let json = null;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  if (!resp.ok) {
    const err = json && json.error;
    throw new ApiError(
      resp.status,
      err ? err.code : "http_" + resp.status,
      err ? err.message : `HTTP ${resp.status}`,
      err ? err.request_id : resp.headers.get("X-Request-Id"),
    );
  }
  return json;
}

/** Every item of a paged /v1 list (`?limit=&cursor=` → `{data, next_cursor}`). */
export async function listAll(path, limit = 200) {
  const out = [];
  let cursor = null;
  const sep = path.includes("?") ? "&" : "?";
  do {
    const q = `${sep}limit=${limit}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");
    const page = await api("GET", path + q);
    out.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}
