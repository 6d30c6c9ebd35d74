// Client behaviour that needs no real server: retries, error mapping, SSE parsing, pagination,
// against a tiny in-test HTTP server. Run after `npm run build`.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import {
  PandaStack,
  PandaStackError,
  AuthenticationError,
  NotFoundError,
  ConflictError,
  InvalidArgumentError,
  RateLimitError,
  ServerError,
  APIConnectionError,
  RequestTimeoutError,
  CommandTimeoutError,
  CommandExitError,
  Execution,
  Result,
} from "../dist/index.js";
import { parseSse } from "../dist/sse.js";

/**
 * Starts a server whose handler gets (req, res, body, n) with n the 0-based request count;
 * returns { url, requests, close }.
 */
async function mockServer(handler) {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks).toString("utf8");
    const n = requests.length;
    requests.push({ method: req.method, url: req.url, headers: req.headers, body });
    try {
      await handler(req, res, body, n);
    } catch (e) {
      res.writeHead(500).end(String(e));
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }),
  };
}

function json(res, status, obj, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", "x-request-id": "req_test", ...headers });
  res.end(JSON.stringify(obj));
}

function envelope(code, message) {
  return { error: { code, message, request_id: "req_abc" } };
}

const SANDBOX = {
  id: "sb-1", template: "minimal", state: "running", cpu: 1, memory_mb: 512, metadata: { a: "b" },
  created_at: "2026-01-01T00:00:00Z", expires_at: null, ttl_seconds: null, idle_timeout_seconds: null,
  on_timeout: "kill", boot_ms: 400, boot_mode: "restore", snapshot_id: null, host: "h", brand_new_field: 1,
};

test("missing API key fails at construction", () => {
  const saved = { k: process.env.PANDASTACK_API_KEY, t: process.env.PANDASTACK_TOKEN };
  delete process.env.PANDASTACK_API_KEY;
  delete process.env.PANDASTACK_TOKEN;
  try {
    assert.throws(() => new PandaStack({ baseUrl: "http://127.0.0.1:1" }), (e) => e instanceof AuthenticationError && e.code === "missing_api_key");
    process.env.PANDASTACK_TOKEN = "pds_fromtoken";
    assert.doesNotThrow(() => new PandaStack({ baseUrl: "http://127.0.0.1:1" }));
  } finally {
    if (saved.k === undefined) delete process.env.PANDASTACK_API_KEY; else process.env.PANDASTACK_API_KEY = saved.k;
    if (saved.t === undefined) delete process.env.PANDASTACK_TOKEN; else process.env.PANDASTACK_TOKEN = saved.t;
  }
});

test("env config: PANDASTACK_BASE_URL and default", () => {
  const saved = process.env.PANDASTACK_BASE_URL;
  try {
    delete process.env.PANDASTACK_BASE_URL;
    assert.equal(new PandaStack({ apiKey: "pds_x" }).baseUrl, "http://localhost:8080");
    process.env.PANDASTACK_BASE_URL = "http://example.invalid:9/";
    assert.equal(new PandaStack({ apiKey: "pds_x" }).baseUrl, "http://example.invalid:9");
  } finally {
    if (saved === undefined) delete process.env.PANDASTACK_BASE_URL; else process.env.PANDASTACK_BASE_URL = saved;
  }
});

test("retry: 503 once then 200, same Idempotency-Key, bearer auth", async () => {
  const srv = await mockServer((req, res, body, n) => {
    if (n === 0) return json(res, 503, envelope("unavailable", "try again"));
    json(res, 201, SANDBOX);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 2 });
    const sb = await client.sandboxes.create({ template: "minimal", ttlSeconds: 60, metadata: { a: "b" } });
    assert.equal(sb.id, "sb-1");
    assert.equal(sb.data.memoryMb, 512);
    assert.equal(srv.requests.length, 2);
    const [a, b] = srv.requests;
    assert.equal(a.headers.authorization, "Bearer pds_test");
    assert.match(a.headers["idempotency-key"], /^[0-9a-f-]{36}$/);
    assert.equal(a.headers["idempotency-key"], b.headers["idempotency-key"]);
    assert.deepEqual(JSON.parse(a.body), { template: "minimal", ttl_seconds: 60, metadata: { a: "b" } });
  } finally {
    await srv.close();
  }
});

test("retry: gives up after maxRetries and throws ServerError", async () => {
  const srv = await mockServer((req, res) => json(res, 503, envelope("unavailable", "down"), { "retry-after": "0" }));
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 2 });
    await assert.rejects(client.sandboxes.get("sb-1"), (e) => {
      assert.ok(e instanceof ServerError);
      assert.equal(e.status, 503);
      assert.equal(e.code, "unavailable");
      assert.equal(e.requestId, "req_abc");
      return true;
    });
    assert.equal(srv.requests.length, 3);
  } finally {
    await srv.close();
  }
});

test("no retry of exec on 503 (it may have run); 429 is retried", async () => {
  let execs = 0;
  const srv = await mockServer((req, res) => {
    if (!req.url.endsWith("/exec")) return json(res, 200, SANDBOX);
    execs += 1;
    if (execs === 1) return json(res, 503, envelope("unavailable", "guest"));
    if (execs === 2) return json(res, 429, envelope("rate_limited", "slow down"), { "retry-after": "0" });
    return json(res, 200, { stdout: "hi\n", stderr: "", exit_code: 0, timed_out: false, truncated: false, duration_ms: 3 });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 2 });
    const sb = await client.sandboxes.get("sb-1");
    await assert.rejects(sb.exec("echo hi"), ServerError);
    assert.equal(srv.requests.length, 2);
    const r = await sb.exec(["echo", "hi"], { env: { A: "1" }, cwd: "/tmp", stdin: "x", timeoutSeconds: 5 });
    assert.equal(r.stdout, "hi\n");
    assert.equal(srv.requests.length, 4);
    assert.deepEqual(JSON.parse(srv.requests[3].body), { argv: ["echo", "hi"], env: { A: "1" }, cwd: "/tmp", stdin: "x", timeout_seconds: 5 });
  } finally {
    await srv.close();
  }
});

test("429 maps to RateLimitError with retryAfter; Retry-After is honoured", async () => {
  let first = 0;
  const srv = await mockServer((req, res, body, n) => {
    if (n === 0) return json(res, 429, envelope("rate_limited", "workspace create rate reached"), { "retry-after": "1" });
    if (n === 1) { first = Date.now(); return json(res, 429, envelope("rate_limited", "wait"), { "retry-after": "1" }); }
    if (n === 2) return json(res, 201, SANDBOX);
    json(res, 429, envelope("rate_limited", "again"), { "retry-after": "7" });
  });
  try {
    const noRetry = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    await assert.rejects(noRetry.sandboxes.create(), (e) => {
      assert.ok(e instanceof RateLimitError);
      assert.ok(e instanceof PandaStackError);
      assert.equal(e.status, 429);
      assert.equal(e.code, "rate_limited");
      assert.equal(e.retryAfter, 1);
      assert.equal(e.requestId, "req_abc");
      assert.match(e.message, /create rate/);
      return true;
    });
    const retrying = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 1 });
    const sb = await retrying.sandboxes.create();
    assert.ok(Date.now() - first >= 1000, "waited for Retry-After");
    assert.equal(sb.id, "sb-1");
    await assert.rejects(noRetry.sandboxes.create(), (e) => e instanceof RateLimitError && e.retryAfter === 7);
  } finally {
    await srv.close();
  }
});

test("error statuses map to typed errors", async () => {
  const cases = {
    "/v1/sandboxes/a": [401, "unauthorized", AuthenticationError],
    "/v1/sandboxes/b": [404, "sandbox_not_found", NotFoundError],
    "/v1/sandboxes/c": [409, "sandbox_state", ConflictError],
    "/v1/sandboxes/d": [422, "invalid_argument", InvalidArgumentError],
    "/v1/sandboxes/e": [400, "invalid_json", InvalidArgumentError],
    "/v1/sandboxes/f": [500, "internal", ServerError],
  };
  const srv = await mockServer((req, res) => {
    const [status, code] = cases[req.url];
    json(res, status, envelope(code, `boom ${code}`));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    for (const [path, [status, code, cls]] of Object.entries(cases)) {
      await assert.rejects(client.sandboxes.get(path.split("/").pop()), (e) => {
        assert.ok(e instanceof cls, `${path}: ${e}`);
        assert.equal(e.status, status);
        assert.equal(e.code, code);
        assert.equal(e.requestId, "req_abc");
        return true;
      });
    }
  } finally {
    await srv.close();
  }
});

test("non-JSON error bodies and connection failures", async () => {
  const srv = await mockServer((req, res) => { res.writeHead(502, { "content-type": "text/html" }).end("<h1>Bad Gateway</h1>"); });
  const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
  await assert.rejects(client.sandboxes.get("x"), (e) => e instanceof ServerError && e.status === 502 && /Bad Gateway/.test(e.message));
  await srv.close();
  const dead = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 1 });
  await assert.rejects(dead.sandboxes.get("x"), (e) => e instanceof APIConnectionError && e.code === "connection_error");
});

test("request timeout is its own error", async () => {
  const srv = await mockServer(() => new Promise(() => {}));
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, timeoutMs: 200, maxRetries: 0 });
    await assert.rejects(client.sandboxes.get("x"), (e) => e instanceof RequestTimeoutError && e instanceof APIConnectionError);
  } finally {
    await srv.close();
  }
});

test("exec: timedOut throws CommandTimeoutError with partial output; check throws CommandExitError", async () => {
  const srv = await mockServer((req, res, body) => {
    if (!req.url.endsWith("/exec")) return json(res, 200, SANDBOX);
    const b = JSON.parse(body);
    if (b.cmd === "slow") return json(res, 200, { stdout: "partial", stderr: "", exit_code: -1, timed_out: true, truncated: false, duration_ms: 1000 });
    json(res, 200, { stdout: "", stderr: "bad\n", exit_code: 3, timed_out: false, truncated: false, duration_ms: 1 });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    await assert.rejects(sb.exec("slow", { timeoutSeconds: 1 }), (e) => e instanceof CommandTimeoutError && e.result.stdout === "partial" && /timeoutSeconds=1/.test(e.message));
    const r = await sb.exec("fail");
    assert.equal(r.exitCode, 3);
    await assert.rejects(sb.exec("fail", { check: true }), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stderr === "bad\n");
  } finally {
    await srv.close();
  }
});

test("SSE parser: events, multi-line data, comments, CRLF, split chunks", async () => {
  const text = ": keep-alive\r\nevent: stdout\r\ndata: {\"data\":\"a\"}\r\n\r\nevent: stderr\ndata: line1\ndata: line2\n\nid: 7\nevent: exit\ndata: {\"exit_code\":0}\n\n";
  const bytes = new TextEncoder().encode(text);
  // Deliver one byte at a time to exercise every split point.
  const body = new ReadableStream({
    start(c) { for (const b of bytes) c.enqueue(new Uint8Array([b])); c.close(); },
  });
  const got = [];
  for await (const m of parseSse(body)) got.push(m);
  assert.deepEqual(got, [
    { event: "stdout", data: '{"data":"a"}' },
    { event: "stderr", data: "line1\nline2" },
    { event: "exit", data: '{"exit_code":0}', id: "7" },
  ]);
});

test("execStream over SSE: typed events, onStdout callbacks, error events", async () => {
  const srv = await mockServer((req, res, body) => {
    if (!req.url.endsWith("/exec/stream")) return json(res, 200, SANDBOX);
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (JSON.parse(body).cmd === "broken") {
      res.end('event: error\ndata: {"message":"guest went away"}\n\n');
      return;
    }
    res.write('event: stdout\ndata: {"data":"he"}\n\n');
    res.write('event: stderr\ndata: {"data":"warn"}\n\n');
    res.write(':\n\nevent: stdout\ndata: {"data":"llo\\n"}\n\n');
    res.end('event: exit\ndata: {"exit_code":2,"timed_out":false,"truncated":false,"duration_ms":5}\n\n');
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const events = [];
    for await (const ev of sb.execStream("x")) events.push(ev);
    assert.deepEqual(events, [
      { type: "stdout", data: "he" },
      { type: "stderr", data: "warn" },
      { type: "stdout", data: "llo\n" },
      { type: "exit", exitCode: 2, timedOut: false, truncated: false, durationMs: 5 },
    ]);
    const out = [];
    const r = await sb.exec("x", { onStdout: (d) => out.push(d) });
    assert.deepEqual(out, ["he", "llo\n"]);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "warn");
    assert.equal(r.exitCode, 2);
    await assert.rejects(async () => { for await (const _ of sb.execStream("broken")); }, (e) => e instanceof PandaStackError && /guest went away/.test(e.message));
  } finally {
    await srv.close();
  }
});

test("pagination follows next_cursor and passes filters", async () => {
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    const cursor = u.searchParams.get("cursor");
    const page = cursor === null ? { data: [{ ...SANDBOX, id: "sb-1" }], next_cursor: "c1" }
      : cursor === "c1" ? { data: [{ ...SANDBOX, id: "sb-2" }], next_cursor: "c2" }
      : { data: [{ ...SANDBOX, id: "sb-3" }], next_cursor: null };
    json(res, 200, page);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const ids = [];
    for await (const sb of client.sandboxes.list({ limit: 1, state: "running", metadata: { task: "x y" } })) ids.push(sb.id);
    assert.deepEqual(ids, ["sb-1", "sb-2", "sb-3"]);
    const q = new URL(srv.requests[0].url, "http://x").searchParams;
    assert.equal(q.get("limit"), "1");
    assert.equal(q.get("state"), "running");
    assert.equal(q.get("metadata.task"), "x y");
    assert.deepEqual((await client.sandboxes.list().toArray(2)).map((s) => s.id), ["sb-1", "sb-2"]);
  } finally {
    await srv.close();
  }
});

test("Symbol.asyncDispose exists and kill is idempotent", async () => {
  assert.equal(typeof Symbol.asyncDispose, "symbol");
  const srv = await mockServer((req, res) => {
    if (req.method === "DELETE") return json(res, 404, envelope("sandbox_not_found", "sandbox sb-1 not found"));
    json(res, 200, SANDBOX);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    assert.equal(await sb.kill(), false);
    await sb[Symbol.asyncDispose]();
    assert.equal(srv.requests.filter((r) => r.method === "DELETE").length, 2);
  } finally {
    await srv.close();
  }
});

test("breaking out of execStream closes the connection at once", async () => {
  let closedAfter = -1;
  const srv = await mockServer((req, res) => {
    if (!req.url.endsWith("/exec/stream")) return json(res, 200, SANDBOX);
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write('event: stdout\ndata: {"data":"go\\n"}\n\n');
    const t0 = Date.now();
    return new Promise((resolve) => res.on("close", () => { closedAfter = Date.now() - t0; resolve(); }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    for await (const ev of sb.execStream("sleep 60")) if (ev.type === "stdout") break;
    for (let i = 0; i < 50 && closedAfter < 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(closedAfter >= 0 && closedAfter < 1000, `server saw the close after ${closedAfter} ms`);
  } finally {
    await srv.close();
  }
});

const CODE_RESULT = {
  stdout: "hi\n", stderr: "", error: null, truncated: false, duration_ms: 7,
  results: [{ text: "<Chart>", html: "<b>c</b>", png: "iVBORw0KGgo=", json: { a: [1] } }, { text: "42" }],
};

const CODE_SSE =
  ':\n\nevent: stdout\ndata: {"data":"hel"}\n\n' +
  'event: stderr\r\ndata: {"data":"warn\\n"}\r\n\r\n' +
  'event: stdout\ndata: {"data":"lo\\n"}\n\n' +
  'event: result\ndata: {"text":"42"}\n\n' +
  'event: error\ndata: {"name":"ValueError","value":"bad","traceback":"tb"}\n\n' +
  "event: brand_new\ndata: {}\n\n" +
  'event: done\ndata: {"duration_ms":12,"truncated":true}\n\n';

test("runCode: blocking body and Execution, rich results, errors as data", async () => {
  const srv = await mockServer((req, res) => {
    if (req.url.endsWith("/code")) return json(res, 200, CODE_RESULT);
    json(res, 200, SANDBOX);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const r = await sb.runCode("x");
    await sb.runCode("y", { context: { id: "ctx-1", language: "python" }, env: { A: "1" }, timeoutSeconds: 2 });
    await sb.runCode("z", { context: "ctx-2" });
    assert.ok(r instanceof Execution);
    assert.equal(r.text, "42");
    assert.equal(r.stdout, "hi\n");
    assert.equal(r.error, null);
    assert.equal(r.durationMs, 7);
    const first = r.results[0];
    assert.ok(first instanceof Result);
    assert.equal(first.html, "<b>c</b>");
    assert.deepEqual(first.json, { a: [1] });
    assert.equal(first.svg, undefined);
    assert.deepEqual([...first.pngBytes()], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.equal(r.results[1].pngBytes(), undefined);
    const bodies = srv.requests.filter((q) => q.url.endsWith("/code")).map((q) => JSON.parse(q.body));
    assert.deepEqual(bodies, [
      { code: "x", language: "python" },
      { code: "y", language: "python", context_id: "ctx-1", env: { A: "1" }, timeout_seconds: 2 },
      { code: "z", language: "python", context_id: "ctx-2" },
    ]);
  } finally {
    await srv.close();
  }
});

test("runCode with callbacks streams over SSE; ContextNotFound is NotFoundError", async () => {
  const srv = await mockServer((req, res, body) => {
    if (req.url.endsWith("/code")) return json(res, 404, envelope("not_found", "code context ctx-x not found"));
    if (!req.url.endsWith("/code/stream")) return json(res, 200, SANDBOX);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const b = JSON.parse(body);
    if (b.context_id === "ctx-x") return res.end('event: error\ndata: {"name":"ContextNotFound","value":"ctx-x","traceback":""}\n\nevent: done\ndata: {}\n\n');
    if (b.code === "cut") return res.end('event: stdout\ndata: {"data":"a"}\n\n');
    res.end(CODE_SSE);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const seen = [];
    const r = await sb.runCode("x", {
      onStdout: (d) => seen.push(["out", d]),
      onStderr: (d) => seen.push(["err", d]),
      onResult: (x) => seen.push(["result", x.text]),
      onError: (e) => seen.push(["error", e.name]),
    });
    assert.deepEqual(seen, [["out", "hel"], ["err", "warn\n"], ["out", "lo\n"], ["result", "42"], ["error", "ValueError"]]);
    assert.ok(r instanceof Execution);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "warn\n");
    assert.equal(r.text, "42");
    assert.deepEqual(r.error, { name: "ValueError", value: "bad", traceback: "tb" });
    assert.equal(r.truncated, true);
    assert.equal(r.durationMs, 12);
    const results = [];
    const r2 = await sb.runCode("x", { onResult: (x) => results.push(x) });
    assert.ok(results[0] instanceof Result && results[0].text === "42" && r2.text === "42");
    await assert.rejects(sb.runCode("1", { context: "ctx-x" }), (e) => e instanceof NotFoundError && /ctx-x/.test(e.message));
    await assert.rejects(sb.runCode("1", { context: "ctx-x", onStdout: () => {} }), (e) => e instanceof NotFoundError && e.code === "not_found" && /ctx-x/.test(e.message));
    await assert.rejects(sb.runCode("cut", { onStdout: () => {} }), (e) => e instanceof APIConnectionError && e.code === "stream_incomplete");
    // An error thrown by a callback reaches the caller unchanged.
    await assert.rejects(sb.runCode("x", { onStdout: () => { throw new Error("from the callback"); } }), /from the callback/);
  } finally {
    await srv.close();
  }
});

test("createCodeContext and deleteCodeContext", async () => {
  const srv = await mockServer((req, res) => {
    if (req.url.endsWith("/code/contexts")) return json(res, 201, { id: "ctx-9", language: "python" });
    if (req.method === "DELETE") return res.writeHead(204).end();
    json(res, 200, SANDBOX);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const ctx = await sb.createCodeContext({ env: { K: "v" } });
    assert.deepEqual(ctx, { id: "ctx-9", language: "python" });
    await sb.deleteCodeContext(ctx);
    await sb.deleteCodeContext("ctx-9");
    await assert.rejects(sb.deleteCodeContext(""), InvalidArgumentError);
    const create = srv.requests.find((q) => q.method === "POST");
    assert.deepEqual(JSON.parse(create.body), { language: "python", env: { K: "v" } });
    assert.deepEqual(srv.requests.filter((q) => q.method === "DELETE").map((q) => q.url), [
      "/v1/sandboxes/sb-1/code/contexts/ctx-9",
      "/v1/sandboxes/sb-1/code/contexts/ctx-9",
    ]);
  } finally {
    await srv.close();
  }
});

test("VERSION matches package.json", async () => {
  const { VERSION } = await import("../dist/index.js");
  const { readFile } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(VERSION, pkg.version);
});
