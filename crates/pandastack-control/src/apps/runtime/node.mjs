// PandaStack function runtime for Node.js (runs in the function's VM; Apache-2.0).
//
// Imports the handler named by PANDASTACK_HANDLER ("file.export", file relative to /app:
// file.mjs, file.js or file.cjs) before it listens, so the baked snapshot of this VM holds it
// loaded. The same three routes as the Python runtime: GET /__pandastack/health,
// POST /__pandastack/invoke (event in, outcome out, JSON) and any other request as an
// HTTP-style call. What a call prints (console.*, process.stdout/stderr) is captured per
// call through AsyncLocalStorage.
//
// Randomness: instances restored from one snapshot share the memory of the baked process,
// and V8's Math.random state with it (it cannot be reseeded from JavaScript). So the runtime
// replaces Math.random, before the handler is imported, with numbers drawn from the kernel
// (/dev/urandom, which the post-restore hook reseeds), 4 KiB at a time; the buffered bytes are
// dropped when /run/pandastack/restored changes (a restore). `crypto` draws from OpenSSL's own
// generator, which reseeds itself from the kernel only periodically: two instances restored
// from one snapshot may repeat crypto.randomBytes/randomUUID output until it does.

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { AsyncLocalStorage } from "node:async_hooks";

const HANDLER = process.env.PANDASTACK_HANDLER || "index.handler";
const PORT = Number(process.env.PORT || 8000);
const MAX_OUTPUT = 64 * 1024;
const calls = new AsyncLocalStorage();

const RESTORED = "/run/pandastack/restored";
const readMark = () => {
  try {
    return fs.readFileSync(RESTORED, "utf8");
  } catch {
    return null;
  }
};
let seenRestore = readMark();
let pool = Buffer.alloc(0);
let at = 0;

// A float in [0, 1) from 53 bits of the kernel's randomness.
function kernelRandom() {
  if (at + 7 > pool.length) {
    pool = Buffer.alloc(4096);
    const fd = fs.openSync("/dev/urandom", "r");
    try {
      fs.readSync(fd, pool, 0, pool.length, null);
    } finally {
      fs.closeSync(fd);
    }
    at = 0;
  }
  const hi = pool.readUIntBE(at, 3) & 0x1fffff;
  const lo = pool.readUInt32BE(at + 3);
  at += 7;
  return (hi * 4294967296 + lo) / 9007199254740992;
}
Math.random = kernelRandom;

// Before each call: after a restore, nothing buffered before it is used.
function afterRestore() {
  const mark = readMark();
  if (mark !== seenRestore) {
    seenRestore = mark;
    pool = Buffer.alloc(0);
    at = 0;
  }
}

async function load() {
  const dot = HANDLER.lastIndexOf(".");
  const file = HANDLER.slice(0, dot);
  const name = HANDLER.slice(dot + 1);
  const found = ["mjs", "js", "cjs"].map((e) => path.join("/app", `${file}.${e}`)).find((p) => fs.existsSync(p));
  if (!found) throw new Error(`no ${file}.mjs, ${file}.js or ${file}.cjs in /app (handler ${HANDLER})`);
  const mod = await import(pathToFileURL(found).href);
  const fn = mod[name] ?? mod.default?.[name];
  if (typeof fn !== "function") throw new TypeError(`${found} exports no function ${name} (handler ${HANDLER})`);
  return fn;
}

let fn;
try {
  fn = await load();
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  console.error(`pandastack: cannot import the handler ${HANDLER}`);
  process.exit(1);
}

for (const [stream, key] of [[process.stdout, "out"], [process.stderr, "err"]]) {
  const write = stream.write.bind(stream);
  stream.write = (chunk, ...rest) => {
    const c = calls.getStore();
    if (c) c[key] += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
    return write(chunk, ...rest);
  };
}

async function call(event, context) {
  afterRestore();
  const c = { out: "", err: "" };
  return calls.run(c, async () => {
    const t = performance.now();
    let status = "ok", result = null, error = null;
    try {
      result = await fn(event, context);
      if (result === undefined) result = null;
      JSON.stringify(result);
    } catch (e) {
      status = "error";
      result = null;
      error = {
        type: (e && e.constructor && e.constructor.name) || "Error",
        message: e && e.message !== undefined ? String(e.message) : String(e),
        traceback: (e && e.stack) || String(e),
      };
    }
    return { status, result, error, stdout: c.out.slice(-MAX_OUTPUT), stderr: c.err.slice(-MAX_OUTPUT), duration_ms: performance.now() - t };
  });
}

function send(res, code, body, type = "application/json", headers = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  res.writeHead(code, { ...headers, "content-type": type, "content-length": buf.length });
  res.end(buf);
}

const context = (req) => ({
  function: process.env.PANDASTACK_FUNCTION || "",
  version: process.env.PANDASTACK_FUNCTION_VERSION || "",
  invocation_id: req.headers["x-pandastack-invocation"] || "",
});

http
  .createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks);
    if (req.method === "GET" && req.url === "/__pandastack/health") return send(res, 200, "ok", "text/plain");
    if (req.method === "POST" && req.url === "/__pandastack/invoke") {
      let event = null;
      try {
        event = raw.length ? JSON.parse(raw.toString()) : null;
      } catch (e) {
        return send(res, 400, JSON.stringify({ error: `the event is not JSON: ${e.message}` }));
      }
      return send(res, 200, JSON.stringify(await call(event, context(req))));
    }
    const url = new URL(req.url, "http://localhost");
    const text = raw.toString();
    const b64 = !Buffer.from(text).equals(raw);
    const event = {
      method: req.method,
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: req.headers,
      body: b64 ? raw.toString("base64") : text,
      isBase64Encoded: b64,
    };
    const r = await call(event, context(req));
    if (r.status !== "ok") {
      process.stderr.write(r.error.traceback + "\n");
      return send(res, 500, JSON.stringify({ error: r.error.type, message: r.error.message }));
    }
    const v = r.result;
    if (v && typeof v === "object" && ("statusCode" in v || "body" in v)) {
      const headers = { ...(v.headers || {}) };
      let type = "text/plain; charset=utf-8";
      for (const k of Object.keys(headers)) if (k.toLowerCase() === "content-type") { type = headers[k]; delete headers[k]; }
      let body = v.body ?? "";
      body = v.isBase64Encoded ? Buffer.from(body, "base64") : typeof body === "string" ? body : JSON.stringify(body);
      return send(res, Number(v.statusCode || 200), body, type, headers);
    }
    return send(res, 200, JSON.stringify(v));
  })
  .listen(PORT, "0.0.0.0", () => console.error(`pandastack: handler ${HANDLER} imported; listening on ${PORT}`));
