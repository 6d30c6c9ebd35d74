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
  PermissionDeniedError,
  InvalidArgumentError,
  LimitReachedError,
  RateLimitError,
  ServerError,
  APIConnectionError,
  RequestTimeoutError,
  CommandTimeoutError,
  CommandExitError,
  Execution,
  Result,
  TemplateBuildError,
  TemplateBuildTimeoutError,
  QuotaExceededError,
  QueryError,
  DatabaseNotFoundError,
  DATABASE_CREATE_TIMEOUT_MS,
  AppNotFoundError,
  DeployTimeoutError,
  isDeployActive,
  FunctionVersionTimeoutError,
  INVOKE_TIMEOUT_MS,
  isVersionBuilding,
  VolumeBackupError,
  VolumeBackupTimeoutError,
  VolumeBusyError,
  isBuilding,
  GitError,
  GitAuthError,
} from "../dist/index.js";
import { parseSse } from "../dist/sse.js";
import { gitCheckName, gitCommand, gitFailure, gitIsConflict, parseGitBranches, parseGitStatus } from "../dist/git.js";

/**
 * Starts a server whose handler gets (req, res, body, n) with n the 0-based request count;
 * returns { url, requests, close }.
 */
async function mockServer(handler) {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks);
    const body = raw.toString("utf8");
    const n = requests.length;
    requests.push({ method: req.method, url: req.url, headers: req.headers, body, raw });
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

test("429 limit_reached is a LimitReachedError and is not retried", async () => {
  const srv = await mockServer((req, res) =>
    json(res, 429, envelope("limit_reached", "workspace limit of 2 snapshots reached; delete some first")),
  );
  try {
    const c = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 2 });
    await assert.rejects(c.sandboxes.create(), (e) => {
      assert.ok(e instanceof LimitReachedError);
      assert.ok(e instanceof RateLimitError);
      assert.equal(e.code, "limit_reached");
      assert.match(e.message, /2 snapshots/);
      return true;
    });
    assert.equal(srv.requests.length, 1, "asked once: it lasts until something is deleted");
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

test("exec: a timeout and a non-zero exit are data; with check they throw, with the partial output", async () => {
  const srv = await mockServer((req, res, body) => {
    if (!req.url.endsWith("/exec")) return json(res, 200, SANDBOX);
    const b = JSON.parse(body);
    if (b.cmd === "slow") return json(res, 200, { stdout: "partial", stderr: "", exit_code: -1, timed_out: true, truncated: false, duration_ms: 1000 });
    json(res, 200, { stdout: "", stderr: "bad\n", exit_code: 3, timed_out: false, truncated: false, duration_ms: 1 });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const slow = await sb.exec("slow", { timeoutSeconds: 1 });
    assert.equal(slow.timedOut, true);
    assert.equal(slow.stdout, "partial");
    await assert.rejects(sb.exec("slow", { timeoutSeconds: 1, check: true }), (e) => e instanceof CommandTimeoutError && e.result.stdout === "partial" && /timeoutSeconds=1/.test(e.message));
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

test("filesystem.list follows next_cursor to the last page", async () => {
  const entry = (name) => ({ name, path: `/d/${name}`, type: "file", size: 1, mode: 420, mtime_ms: 0 });
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    if (u.pathname === "/v1/sandboxes/sb-1") return json(res, 200, SANDBOX);
    const cursor = u.searchParams.get("cursor");
    const page = cursor === null ? { data: [entry("a"), entry("b")], next_cursor: "L2QvYg" }
      : cursor === "L2QvYg" ? { data: [entry("c")], next_cursor: "L2QvYw" }
      : { data: [entry("d")], next_cursor: null };
    json(res, 200, page);
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    const entries = await sb.filesystem.list("/d", { depth: 2 });
    assert.deepEqual(entries.map((e) => e.path), ["/d/a", "/d/b", "/d/c", "/d/d"]);
    const lists = srv.requests.filter((r) => r.url.startsWith("/v1/sandboxes/sb-1/fs/list"));
    assert.equal(lists.length, 3);
    const q = new URL(lists[0].url, "http://x").searchParams;
    assert.deepEqual([q.get("path"), q.get("depth"), q.get("limit"), q.get("cursor")], ["/d", "2", "5000", null]);
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
    await sb.runCode("1 + 1", { language: "javascript" });
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
      { code: "x" },
      { code: "y", context_id: "ctx-1", env: { A: "1" }, timeout_seconds: 2 },
      { code: "z", context_id: "ctx-2" },
      { code: "1 + 1", language: "javascript" },
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

// ---------------------------------------------------------------- template builds

function tpl(extra = {}) {
  return {
    name: "bb", description: "", cpu: 1, memory_mb: 512, disk_mb: 0, state: "queued", bake_ms: null,
    source: "oci", version: 1, created_at: "2026-01-01T00:00:00Z", ...extra,
  };
}

function sse(...events) {
  return events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join("");
}

const query = (r) => Object.fromEntries(new URL(r.url, "http://x").searchParams);
const pathOf = (r) => new URL(r.url, "http://x").pathname;

test("templates.build: tarball path streamed, bytes and Blob; query parameters and content type", async () => {
  const { mkdtemp, writeFile, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { gzipSync } = await import("node:zlib");
  const dir = await mkdtemp(join(tmpdir(), "pandastack-tpl-"));
  const data = Buffer.alloc(300_000, "not really a tar ");
  const file = join(dir, "image.tar");
  await writeFile(file, data);
  const gz = gzipSync(Buffer.from("layer".repeat(100)));
  const srv = await mockServer((req, res) => json(res, 202, tpl()));
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const t = await client.templates.build({
      name: "bb", tarball: file, cpu: 2, memoryMb: 256, diskMb: 1024, description: "busy box", wait: false,
    });
    assert.deepEqual(
      [t.name, t.state, t.version, t.source, t.readyVersion, t.error, t.createdAt],
      ["bb", "queued", 1, "oci", null, null, "2026-01-01T00:00:00Z"],
    );
    assert.ok(isBuilding(t));
    await client.templates.build({ name: "bb", tarball: new Uint8Array(gz), wait: false });
    await client.templates.build({ name: "bb", tarball: new Blob([Buffer.from("blob tar")]), wait: false });
    const [a, b, c] = srv.requests;
    assert.equal(pathOf(a), "/v1/templates");
    assert.deepEqual(query(a), { name: "bb", cpu: "2", memory_mb: "256", disk_mb: "1024", description: "busy box" });
    assert.deepEqual(query(b), { name: "bb" });
    assert.deepEqual([a, b, c].map((r) => r.headers["content-type"]), ["application/x-tar", "application/gzip", "application/x-tar"]);
    assert.equal(a.headers["transfer-encoding"], "chunked", "a path is streamed, not read into memory first");
    assert.ok(a.raw.equals(data));
    assert.ok(b.raw.equals(gz));
    assert.equal(c.body, "blob tar");
  } finally {
    await srv.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("templates.build: spec body; bad arguments never reach the server", async () => {
  const spec = 'name = "tools"\npackages = ["curl"]\n';
  const srv = await mockServer((req, res) => json(res, 202, tpl({ name: "tools", source: "spec" })));
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const t = await client.templates.build({ spec, wait: false });
    assert.equal(t.source, "spec");
    await client.templates.build({ name: "tools", spec, wait: false });
    const bad = (opts, re) => assert.rejects(client.templates.build({ wait: false, ...opts }), (e) => e instanceof InvalidArgumentError && re.test(e.message));
    await bad({ name: "x" }, /exactly one/);
    await bad({ name: "x", tarball: new Uint8Array([1]), spec }, /exactly one/);
    await bad({ tarball: new Uint8Array([1]) }, /needs the template's name/);
    await bad({ spec, cpu: 2, memoryMb: 256 }, /cpu, memoryMb: only for tarball/);
    await assert.rejects(client.templates.build({ name: "x", tarball: "/nonexistent/image.tar" }), (e) => e.code === "ENOENT");
    assert.equal(srv.requests.length, 2);
    assert.equal(srv.requests[0].headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(srv.requests[0].body), { spec });
    assert.deepEqual(JSON.parse(srv.requests[1].body), { name: "tools", spec });
    assert.deepEqual(query(srv.requests[0]), {});
  } finally {
    await srv.close();
  }
});

test("templates.build: waits by following the log; ready resolves, failed throws TemplateBuildError", async () => {
  let builds = 0;
  const srv = await mockServer((req, res) => {
    const p = pathOf(req);
    if (req.method === "POST") return json(res, 202, tpl({ version: ++builds + 2 }));
    if (p === "/v1/templates/bb/logs") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (builds === 1) {
        return res.end(":\n\n" + sse(["log", { data: "queued\n" }], ["log", { data: "building \u2713\n" }], ["end", { reason: "ready" }]));
      }
      return res.end(sse(["log", { data: "failed: build: not a tarball\n" }], ["end", { reason: "failed" }]));
    }
    if (builds === 1) return json(res, 200, tpl({ state: "ready", version: 3, ready_version: 3, bake_ms: 900, build_ms: 1200, image_bytes: 4096 }));
    json(res, 200, tpl({ state: "failed", version: 4, ready_version: 3, error: "build: not a tarball" }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const seen = [];
    const t = await client.templates.build({ name: "bb", tarball: new Uint8Array([1, 2, 3]), onLog: (s) => seen.push(s) });
    assert.deepEqual(seen, ["queued\n", "building \u2713\n"]);
    assert.deepEqual([t.state, t.version, t.readyVersion, t.bakeMs, t.buildMs, t.imageBytes], ["ready", 3, 3, 900, 1200, 4096]);
    assert.ok(!isBuilding(t));
    const follow = srv.requests.find((r) => pathOf(r).endsWith("/logs"));
    assert.deepEqual(query(follow), { follow: "1", version: "3" });
    assert.match(follow.headers.accept, /text\/event-stream/);
    await assert.rejects(client.templates.build({ name: "bb", tarball: new Uint8Array([0]) }), (e) => {
      assert.ok(e instanceof TemplateBuildError && e instanceof PandaStackError);
      assert.ok(!(e instanceof TemplateBuildTimeoutError));
      assert.equal(e.code, "template_build_failed");
      assert.equal(e.template.state, "failed");
      assert.equal(e.error, "build: not a tarball");
      assert.match(e.message, /bb version 4: build failed: build: not a tarball/);
      return true;
    });
  } finally {
    await srv.close();
  }
});

test("templates.build: a broken log stream is reopened without repeating text", async () => {
  let follows = 0;
  const srv = await mockServer((req, res) => {
    if (req.method === "POST") return json(res, 202, tpl());
    if (pathOf(req).endsWith("/logs")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (++follows === 1) return res.end(sse(["log", { data: "one\n" }], ["log", { data: "tw" }]));
      return res.end(sse(["log", { data: "one\ntwo\n" }], ["log", { data: "three\n" }], ["end", { reason: "ready" }]));
    }
    json(res, 200, tpl({ state: "ready", ready_version: 1 }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const seen = [];
    const t = await client.templates.build({ name: "bb", tarball: new Uint8Array([1]), onLog: async (s) => { seen.push(s); } });
    assert.deepEqual(seen, ["one\n", "tw", "o\n", "three\n"]);
    assert.equal(t.state, "ready");
    assert.equal(follows, 2);
  } finally {
    await srv.close();
  }
});

test("templates.build: timeoutSeconds throws TemplateBuildTimeoutError with the latest state; signal aborts", async () => {
  const srv = await mockServer((req, res) => {
    if (req.method === "POST") return json(res, 202, tpl());
    if (pathOf(req).endsWith("/logs")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(sse(["log", { data: "building\n" }]));
      return new Promise((r) => res.on("close", r)); // never ends
    }
    json(res, 200, tpl({ state: "building" }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const t0 = Date.now();
    await assert.rejects(client.templates.build({ name: "bb", tarball: new Uint8Array([1]), timeoutSeconds: 0.5 }), (e) => {
      assert.ok(e instanceof TemplateBuildTimeoutError && e instanceof TemplateBuildError);
      assert.equal(e.code, "template_build_timeout");
      assert.equal(e.template.state, "building");
      assert.match(e.message, /timeoutSeconds=0.5/);
      return true;
    });
    assert.ok(Date.now() - t0 < 2000, `took ${Date.now() - t0} ms`);
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(new Error("stop waiting")), 300);
    await assert.rejects(client.templates.build({ name: "bb", tarball: new Uint8Array([1]), signal: ctl.signal }), /stop waiting/);
  } finally {
    await srv.close();
  }
});

test("templates.build: a build that ended as the time ran out gives its result, not a timeout", async () => {
  let gets = 0;
  const srv = await mockServer((req, res) => {
    if (req.method === "POST") return json(res, 202, tpl({ version: 2 }));
    if (pathOf(req).endsWith("/logs")) return new Promise((r) => res.on("close", r)); // no headers, ever
    gets += 1;
    if (gets === 1) return json(res, 200, tpl({ version: 2, state: "ready", ready_version: 2 }));
    json(res, 200, tpl({ version: 2, state: "failed", ready_version: 1, error: "bake: no answer" }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const t = await client.templates.build({ name: "bb", tarball: new Uint8Array([1]), timeoutSeconds: 0.3 });
    assert.deepEqual([t.state, t.readyVersion], ["ready", 2]);
    await assert.rejects(
      client.templates.build({ name: "bb", tarball: new Uint8Array([1]), timeoutSeconds: 0.3 }),
      (e) => e instanceof TemplateBuildError && !(e instanceof TemplateBuildTimeoutError) && e.error === "bake: no answer",
    );
  } finally {
    await srv.close();
  }
});

test("templates: get is a real GET; logs, bake, delete (missing → false), typed refusals", async () => {
  const srv = await mockServer((req, res) => {
    const p = pathOf(req);
    if (req.method === "POST" && p === "/v1/templates") return json(res, 409, envelope("conflict", "a build of template bb is under way"));
    if (p === "/v1/templates/nope") return json(res, 404, envelope("template_not_found", "template nope not found"));
    if (req.method === "DELETE" && p === "/v1/templates/minimal") return json(res, 409, envelope("conflict", "minimal is a catalog template"));
    if (req.method === "DELETE") return res.writeHead(204).end();
    if (p === "/v1/templates/bb/logs") return res.writeHead(200, { "content-type": "text/plain" }).end("[    0.0s] queued\n");
    if (p === "/v1/templates/bb/bake") return json(res, 200, tpl({ state: "ready", bake_ms: 1500 }));
    if (p === "/v1/templates") {
      return json(res, 200, { data: [{ name: "minimal", description: "d", cpu: 1, memory_mb: 512, disk_mb: 2048, state: "available", bake_ms: null }, tpl({ state: "ready" })] });
    }
    json(res, 200, tpl({ state: "ready" }));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    assert.equal((await client.templates.get("bb")).state, "ready");
    await assert.rejects(client.templates.get("nope"), (e) => e instanceof NotFoundError && e.code === "template_not_found");
    assert.ok(!srv.requests.some((r) => pathOf(r) === "/v1/templates"), "get does not scan the list");
    const [cat, built] = await client.templates.list().toArray();
    assert.deepEqual([cat.source, cat.version, built.source, built.version], ["catalog", null, "oci", 1]);
    assert.equal(await client.templates.logs("bb"), "[    0.0s] queued\n");
    await client.templates.logs("bb", { version: 2 });
    assert.deepEqual(srv.requests.filter((r) => pathOf(r).endsWith("/logs")).map(query), [{}, { version: "2" }]);
    assert.equal((await client.templates.bake("bb")).bakeMs, 1500);
    assert.equal(await client.templates.delete("bb"), true);
    assert.equal(await client.templates.delete("nope"), false);
    await assert.rejects(client.templates.delete("minimal"), ConflictError);
    await assert.rejects(client.templates.build({ name: "bb", tarball: new Uint8Array([1]) }), ConflictError);
  } finally {
    await srv.close();
  }
});

const POINT = {
  t: "2026-12-04T10:00:00Z", cpu_pct: 12.5, vcpus: 1, mem_bytes: 300_000_000, pss_bytes: 120_000_000,
  mem_total_bytes: 500_000_000, mem_available_bytes: 400_000_000, disk_bytes: 16_000_000,
  disk_total_bytes: 1_000_000_000, net_rx: 1200, net_tx: 3400,
};
const BARE_POINT = { t: "2026-12-04T10:00:05Z", cpu_pct: 0, vcpus: 1, mem_bytes: 1, pss_bytes: 1 };
const POINT_CAMEL = {
  t: "2026-12-04T10:00:00Z", cpuPct: 12.5, vcpus: 1, memBytes: 300_000_000, pssBytes: 120_000_000,
  memTotalBytes: 500_000_000, memAvailableBytes: 400_000_000, diskBytes: 16_000_000,
  diskTotalBytes: 1_000_000_000, netRx: 1200, netTx: 3400,
};

test("metrics: since and step in the query; points, instances and the sandbox's figures read; bad values", async () => {
  const sandboxMetrics = {
    state: "running", host_rss_bytes: 310_000_000, host_pss_bytes: 125_000_000, cpu_time_ms: 4200, step: 5,
    samples: [POINT, BARE_POINT],
  };
  const group = {
    state: "running", step: 60, samples: [POINT],
    instances: [
      { sandbox_id: "sb-a", state: "running", samples: [POINT] },
      { sandbox_id: "sb-b", state: "hibernated", samples: [] },
    ],
  };
  const srv = await mockServer((req, res) => {
    const path = req.url.split("?")[0];
    const step = new URL(req.url, "http://x").searchParams.get("step");
    if (step === "0") return json(res, 422, envelope("invalid_argument", "step: between 1 and 86400 seconds"));
    if (path === "/v1/sandboxes/sb-1") return json(res, 200, SANDBOX);
    if (path === "/v1/sandboxes/sb-1/metrics") return json(res, 200, sandboxMetrics);
    if (path === "/v1/sandboxes/sb-old") return json(res, 200, { ...SANDBOX, id: "sb-old", state: "paused" });
    if (path === "/v1/sandboxes/sb-old/metrics") return json(res, 200, { state: "paused" });
    if (/^\/v1\/(databases|apps|functions)\/[^/]+\/metrics$/.test(path)) return json(res, 200, group);
    json(res, 404, envelope("not_found", path));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const sb = await client.sandboxes.get("sb-1");
    const m = await sb.metrics();
    assert.equal(m.state, "running");
    assert.deepEqual([m.hostRssBytes, m.hostPssBytes, m.cpuTimeMs, m.step], [310_000_000, 125_000_000, 4200, 5]);
    assert.deepEqual(m.samples[0], POINT_CAMEL);
    assert.deepEqual(m.samples[1], {
      t: "2026-12-04T10:00:05Z", cpuPct: 0, vcpus: 1, memBytes: 1, pssBytes: 1,
      memTotalBytes: null, memAvailableBytes: null, diskBytes: null, diskTotalBytes: null, netRx: null, netTx: null,
    });
    assert.deepEqual(m.instances, []);
    assert.deepEqual(m.raw, sandboxMetrics);
    await sb.metrics({ since: "1m", step: 1 });
    await sb.metrics({ since: new Date("2026-12-04T10:00:00Z"), step: 60 });
    await sb.metrics({ since: "2026-12-04T10:00:00+01:00" });
    const queries = srv.requests.filter((r) => r.url.startsWith("/v1/sandboxes/sb-1/metrics")).map((r) => r.url.split("?")[1] ?? "");
    assert.deepEqual(queries.map((q) => Object.fromEntries(new URLSearchParams(q))), [
      {},
      { since: "1m", step: "1" },
      { since: "2026-12-04T10:00:00.000Z", step: "60" },
      { since: "2026-12-04T10:00:00+01:00" },
    ]);

    // An older server's answer (no history) still reads.
    const oldM = await (await client.sandboxes.get("sb-old")).metrics();
    assert.deepEqual([oldM.state, oldM.step, oldM.samples, oldM.instances, oldM.hostRssBytes], ["paused", 0, [], [], undefined]);

    // Types are checked before a request; ranges are the server's (422 → InvalidArgumentError).
    const before = srv.requests.length;
    for (const bad of [{ step: 1.5 }, { step: "5" }, { since: "" }, { since: new Date("nope") }, { since: 15 }]) {
      await assert.rejects(sb.metrics(bad), InvalidArgumentError, JSON.stringify(bad));
    }
    assert.equal(srv.requests.length, before);
    await assert.rejects(sb.metrics({ step: 0 }), (e) => e instanceof InvalidArgumentError && e.status === 422);

    // Databases, apps and functions: the same query, and each VM in `instances`.
    for (const [ns, name, path] of [
      ["databases", "app db", "/v1/databases/app%20db/metrics"],
      ["apps", "web", "/v1/apps/web/metrics"],
      ["functions", "hello", "/v1/functions/hello/metrics"],
    ]) {
      const g = await client[ns].metrics(name, { since: "1h", step: 60 });
      assert.equal(srv.requests.at(-1).url, `${path}?since=1h&step=60`);
      assert.deepEqual([g.state, g.step, g.hostRssBytes], ["running", 60, undefined]);
      assert.deepEqual(g.samples, [POINT_CAMEL]);
      assert.deepEqual(g.instances, [
        { sandboxId: "sb-a", state: "running", samples: [POINT_CAMEL] },
        { sandboxId: "sb-b", state: "hibernated", samples: [] },
      ]);
      await client[ns].metrics(name);
      assert.equal(srv.requests.at(-1).url, path);
      await assert.rejects(client[ns].metrics(name, { step: 2.5 }), InvalidArgumentError);
      await assert.rejects(client[ns].metrics("", {}), InvalidArgumentError);
    }
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

test("preview URLs: getUrl, getPort, setPortPublic; bad ports refused before any request", async () => {
  const PORT_URL = { url: "http://8000-sb-1.localhost:8081", port: 8000, public: false, token: "0123456789abcdef0123456789abcdef" };
  const srv = await mockServer((req, res, body) => {
    if (req.method === "GET" && req.url === "/v1/sandboxes/sb-1") return json(res, 200, SANDBOX);
    if (req.method === "GET" && req.url === "/v1/sandboxes/sb-1/ports/8000/url") return json(res, 200, PORT_URL);
    if (req.method === "PATCH" && req.url === "/v1/sandboxes/sb-1/ports/8000") {
      return json(res, 200, { ...PORT_URL, public: JSON.parse(body).public });
    }
    json(res, 404, envelope("not_found", "no such route"));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url });
    const sb = await client.sandboxes.get("sb-1");
    assert.equal(await sb.getUrl(8000), PORT_URL.url);
    assert.deepEqual(await sb.getPort(8000), PORT_URL);
    assert.equal((await sb.setPortPublic(8000)).public, true);
    assert.deepEqual(JSON.parse(srv.requests.at(-1).body), { public: true });
    assert.equal((await sb.setPortPublic(8000, false)).public, false);
    assert.deepEqual(JSON.parse(srv.requests.at(-1).body), { public: false });
    const before = srv.requests.length;
    for (const bad of [0, 65536, -1, 80.5, "80", null]) {
      await assert.rejects(sb.getUrl(bad), InvalidArgumentError);
      await assert.rejects(sb.setPortPublic(bad), InvalidArgumentError);
    }
    assert.equal(srv.requests.length, before);
  } finally {
    await srv.close();
  }
});

// ---- volumes

const VOL = {
  id: "vol-1",
  name: "ws",
  size_gb: 2,
  attached_to: null,
  attachments: [{ sandbox_id: "sb-1", path: "/w", read_only: true }],
  source: null,
  host: "local",
  created_at: "2026-01-01T00:00:00Z",
};
const backupWire = (state, extra = {}) => ({
  id: "vb-1", volume: "ws", size_gb: 2, state, bytes_uploaded: null, chunks: null, error: null,
  created_at: "t", finished_at: null, ...extra,
});

test("volumes: create, list, get, grow, delete send the documented requests", async () => {
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/volumes") return json(res, 201, { ...VOL, name: JSON.parse(body).name });
    if (req.method === "GET" && u.pathname === "/v1/volumes") {
      return u.searchParams.get("cursor") === "c1"
        ? json(res, 200, { data: [{ ...VOL, name: "b" }], next_cursor: null })
        : json(res, 200, { data: [{ ...VOL, name: "a" }], next_cursor: "c1" });
    }
    if (req.method === "GET" && u.pathname === "/v1/volumes/ws") return json(res, 200, VOL);
    if (req.method === "PATCH" && u.pathname === "/v1/volumes/ws") return json(res, 200, { ...VOL, size_gb: JSON.parse(body).size_gb });
    if (req.method === "DELETE" && u.pathname === "/v1/volumes/ws") return res.writeHead(204).end();
    if (req.method === "DELETE" && u.pathname === "/v1/volumes/gone") {
      return json(res, 404, { error: { code: "volume_not_found", message: "no volume gone", request_id: "r" } });
    }
    json(res, 404, { error: { code: "not_found", message: "no route", request_id: "r" } });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const v = await c.volumes.create({ name: "ws", sizeGb: 2 });
    assert.deepEqual(v, {
      id: "vol-1", name: "ws", state: "ready", sizeGb: 2, attachedTo: null,
      attachments: [{ sandboxId: "sb-1", path: "/w", readOnly: true }],
      source: null, host: "local", createdAt: "2026-01-01T00:00:00Z",
    });
    await c.volumes.create({ name: "r", fromBackup: "vb-1" });
    await c.volumes.create({ name: "s", fromSnapshot: "vs-1", sizeGb: 4 });
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => JSON.parse(r.body)), [
      { name: "ws", size_gb: 2 },
      { name: "r", from_backup: "vb-1" },
      { name: "s", size_gb: 4, from_snapshot: "vs-1" },
    ]);
    assert.ok(posts.every((r) => r.headers["idempotency-key"]));
    await assert.rejects(c.volumes.create({ name: "x", fromSnapshot: "a", fromBackup: "b" }), InvalidArgumentError);
    assert.deepEqual((await c.volumes.list({ limit: 1 }).toArray()).map((x) => x.name), ["a", "b"]);
    assert.equal((await c.volumes.get("ws")).name, "ws");
    assert.equal((await c.volumes.grow("ws", 8)).sizeGb, 8);
    assert.deepEqual(JSON.parse(srv.requests.find((r) => r.method === "PATCH").body), { size_gb: 8 });
    assert.equal(await c.volumes.delete("ws"), true);
    assert.equal(await c.volumes.delete("gone"), false);
  } finally {
    await srv.close();
  }
});

test("volumes: volume_busy and quota_exceeded have their own error classes", async () => {
  const srv = await mockServer((req, res) => {
    if (req.url === "/v1/sandboxes") return json(res, 409, { error: { code: "volume_busy", message: "volume ws is mounted by sb-1", request_id: "r" } });
    if (req.url === "/v1/volumes") return json(res, 507, { error: { code: "quota_exceeded", message: "quota", request_id: "r" } });
    return json(res, 409, { error: { code: "conflict", message: "name in use", request_id: "r" } });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const busy = await c.sandboxes.create({ volumes: [{ name: "ws", path: "/w" }] }).catch((e) => e);
    assert.ok(busy instanceof VolumeBusyError && busy instanceof ConflictError, String(busy));
    assert.equal(busy.code, "volume_busy");
    assert.equal(busy.status, 409);
    const quota = await c.volumes.create({ name: "big", sizeGb: 1024 }).catch((e) => e);
    assert.ok(quota instanceof QuotaExceededError, String(quota));
    assert.equal(quota.status, 507);
    const conflict = await c.volumes.grow("ws", 3).catch((e) => e);
    assert.ok(conflict instanceof ConflictError && !(conflict instanceof VolumeBusyError));
  } finally {
    await srv.close();
  }
});

test("fork sends keep_snapshot only when asked and reads which snapshot it made", async () => {
  const child = { ...SANDBOX, id: "sb-kid", snapshot_id: "snap-1" };
  const srv = await mockServer((req, res, body) => {
    if (req.method === "GET") return json(res, 200, SANDBOX);
    const keep = JSON.parse(body).keep_snapshot === true;
    json(res, 201, { parent_id: "sb-1", snapshot_id: "snap-1", keep_snapshot: keep, children: [child] });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const sb = await c.sandboxes.get("sb-1");
    const one = await sb.fork();
    assert.equal(one.data.snapshotId, "snap-1");
    const kept = await sb.forkDetailed(1, { metadata: { a: "c" }, keepSnapshot: true });
    assert.deepEqual([kept.snapshotId, kept.keepSnapshot, kept.children[0].id], ["snap-1", true, "sb-kid"]);
    const gone = await sb.forkDetailed(2);
    assert.equal(gone.keepSnapshot, false);
    const bodies = srv.requests.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body));
    assert.deepEqual(bodies, [{ count: 1 }, { count: 1, metadata: { a: "c" }, keep_snapshot: true }, { count: 2 }]);
  } finally {
    await srv.close();
  }
});

test("volumes: sandbox create sends volumes and reads them back", async () => {
  const mounted = [{ name: "ws", path: "/workspace", read_only: false }, { name: "ref", path: "/ref", read_only: true }];
  const srv = await mockServer((req, res) => json(res, 201, { id: "sb-1", template: "minimal", state: "running", volumes: mounted }));
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const sb = await c.sandboxes.create({ volumes: [{ name: "ws", path: "/workspace" }, { name: "ref", path: "/ref", readOnly: true }] });
    assert.deepEqual(JSON.parse(srv.requests[0].body).volumes, mounted);
    assert.deepEqual(sb.volumes, [{ name: "ws", path: "/workspace", readOnly: false }, { name: "ref", path: "/ref", readOnly: true }]);
    await assert.rejects(c.sandboxes.create({ volumes: [{ name: "ws" }] }), InvalidArgumentError);
    const plain = await c.sandboxes.create({});
    assert.equal("volumes" in JSON.parse(srv.requests.at(-1).body), false);
    assert.deepEqual(plain.volumes, mounted.map((m) => ({ name: m.name, path: m.path, readOnly: m.read_only })));
  } finally {
    await srv.close();
  }
});

test("volumes: snapshots, backups and waiting for a backup", async () => {
  const snap = { id: "vs-1", volume: "ws", size_gb: 2, frozen: true, created_at: "t" };
  let polls = 0;
  let mode = "done";
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/volumes/ws/snapshots") return json(res, 201, snap);
    if (req.method === "GET" && u.pathname === "/v1/volumes/ws/snapshots") return json(res, 200, { data: [snap], next_cursor: null });
    if (req.method === "DELETE" && u.pathname === "/v1/volumes/ws/snapshots/vs-1") return res.writeHead(204).end();
    if (req.method === "POST" && u.pathname === "/v1/volumes/ws/backups") return json(res, 202, backupWire("uploading"));
    if (req.method === "GET" && u.pathname === "/v1/volumes/ws/backups") return json(res, 200, { data: [backupWire("done")], next_cursor: null });
    if (req.method === "GET" && u.pathname === "/v1/volumes/ws/backups/vb-1") {
      polls += 1;
      if (mode === "stuck" || polls < 3) return json(res, 200, backupWire("uploading"));
      if (mode === "failed") return json(res, 200, backupWire("failed", { error: "s3 said no" }));
      return json(res, 200, backupWire("done", { bytes_uploaded: 20, chunks: 3, finished_at: "t2" }));
    }
    json(res, 404, { error: { code: "not_found", message: "no route", request_id: "r" } });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const s = await c.volumes.snapshot("ws");
    assert.deepEqual(s, { id: "vs-1", volume: "ws", sizeGb: 2, frozen: true, createdAt: "t" });
    assert.deepEqual((await c.volumes.snapshots("ws").toArray()).map((x) => x.id), ["vs-1"]);
    assert.equal(await c.volumes.deleteSnapshot("ws", "vs-1"), true);

    const started = await c.volumes.backup("ws");
    assert.equal(started.state, "uploading");
    const done = await c.volumes.waitBackup("ws", started.id, { pollMs: 10 });
    assert.deepEqual([done.state, done.bytesUploaded, done.chunks, done.finishedAt], ["done", 20, 3, "t2"]);
    assert.equal(polls, 3);
    assert.deepEqual((await c.volumes.backups("ws").toArray()).map((x) => x.state), ["done"]);

    polls = 0;
    mode = "failed";
    const failed = await c.volumes.backup("ws", { wait: true, pollMs: 10 }).catch((e) => e);
    assert.ok(failed instanceof VolumeBackupError, String(failed));
    assert.equal(failed.error, "s3 said no");
    assert.match(failed.message, /s3 said no/);

    mode = "stuck";
    const stuck = await c.volumes.waitBackup("ws", "vb-1", { timeoutSeconds: 0.2, pollMs: 20 }).catch((e) => e);
    assert.ok(stuck instanceof VolumeBackupTimeoutError && stuck instanceof VolumeBackupError, String(stuck));
    assert.equal(stuck.backup.state, "uploading");
  } finally {
    await srv.close();
  }
});

// ---- databases

const URI = "postgres://app:s3cret@db-1.db.localhost:5432/app?sslmode=require";
const DB = {
  id: "db-1", name: "app", version: 17, state: "ready", user: "app", connection_uri: URI,
  pooled_uri: URI.replace("db-1.", "db-1-pooler."), http_url: "http://127.0.0.1:8080/v1/databases/db-1",
  size_gb: 1, memory_mb: 1024, idle_seconds: 300, parent: null, sandbox_id: "sb-9", volume: "pgdata-db-1", host: "local",
  created_at: "2026-01-01T00:00:00Z",
};
const RESULT = {
  command: "SELECT", row_count: 2,
  fields: [{ name: "id", data_type_id: 23 }, { name: "note", data_type_id: 25 }],
  rows: [[1, "one"], [2, null]],
};

test("databases: create, list, get, branch, restore, password, delete send the documented requests", async () => {
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/databases") return json(res, 201, { ...DB, name: JSON.parse(body).name });
    if (req.method === "GET" && u.pathname === "/v1/databases") {
      return u.searchParams.get("cursor") === "a"
        ? json(res, 200, { data: [{ ...DB, id: "db-2", name: "b" }], next_cursor: null })
        : json(res, 200, { data: [{ ...DB, name: "a" }], next_cursor: "a" });
    }
    if (req.method === "GET" && u.pathname === "/v1/databases/app") return json(res, 200, DB);
    if (req.method === "POST" && u.pathname === "/v1/databases/db-1/branches") return json(res, 201, { ...DB, id: "db-2", parent: "db-1" });
    if (req.method === "POST" && u.pathname === "/v1/databases/db-1/password") return json(res, 200, { ...DB, connection_uri: URI.replace("s3cret", "n3w") });
    if (req.method === "POST" && u.pathname === "/v1/databases/db-1/restore") {
      return JSON.parse(body).to_time.startsWith("2001-")
        ? json(res, 422, { error: { code: "invalid_argument", message: "2001-01-01T00:00:00Z is outside the restore window (from 2026-01-01T00:00:00Z to now)", request_id: "r" } })
        : json(res, 200, DB);
    }
    if (req.method === "DELETE" && u.pathname === "/v1/databases/db-1") return res.writeHead(204).end();
    if (u.pathname === "/v1/databases/gone") {
      return json(res, 404, { error: { code: "database_not_found", message: "no database gone", request_id: "r" } });
    }
    json(res, 404, { error: { code: "not_found", message: "no route", request_id: "r" } });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const d = await c.databases.create({ name: "app" });
    assert.deepEqual(d, {
      id: "db-1", name: "app", version: 17, state: "ready", user: "app", connectionUri: URI,
      pooledUri: URI.replace("db-1.", "db-1-pooler."), httpUrl: "http://127.0.0.1:8080/v1/databases/db-1",
      sizeGb: 1, memoryMb: 1024, idleSeconds: 300, parent: null, sandboxId: "sb-9", volume: "pgdata-db-1", host: "local",
      createdAt: "2026-01-01T00:00:00Z",
    });
    await c.databases.create({ name: "big", version: 17, sizeGb: 4, memoryMb: 2048, idleSeconds: 0, idempotencyKey: "k-1" });
    await assert.rejects(c.databases.create({ name: "" }), InvalidArgumentError);
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => JSON.parse(r.body)), [{ name: "app" }, { name: "big", version: 17, size_gb: 4, memory_mb: 2048, idle_seconds: 0 }]);
    assert.ok(posts[0].headers["idempotency-key"]);
    assert.equal(posts[1].headers["idempotency-key"], "k-1");
    assert.deepEqual((await c.databases.list({ limit: 1 }).toArray()).map((x) => x.name), ["a", "b"]);
    assert.equal((await c.databases.get("app")).id, "db-1");
    const br = await c.databases.branch("db-1");
    assert.equal(br.parent, "db-1");
    await c.databases.branch("db-1", { name: "feature_x", idleSeconds: 60 });
    await c.databases.branch("db-1", { name: "pitr", fromTime: new Date(Date.UTC(2026, 0, 1, 12, 30, 0, 250)) });
    await c.databases.branch("db-1", { fromTime: "2026-01-01T14:30:00+02:00" });
    await assert.rejects(c.databases.branch("db-1", { fromTime: new Date(NaN) }), InvalidArgumentError);
    const branches = srv.requests.filter((r) => r.url === "/v1/databases/db-1/branches");
    assert.deepEqual(branches.map((r) => JSON.parse(r.body)), [
      {},
      { name: "feature_x", idle_seconds: 60 },
      { name: "pitr", from_time: "2026-01-01T12:30:00.250Z" },
      { from_time: "2026-01-01T14:30:00+02:00" },
    ]);
    assert.ok(branches.every((r) => r.headers["idempotency-key"]));
    const restored = await c.databases.restore("db-1", new Date(Date.UTC(2026, 0, 1, 12, 30)));
    assert.deepEqual([restored.id, restored.connectionUri], ["db-1", URI]);
    const outside = await c.databases.restore("db-1", "2001-01-01T00:00:00Z").catch((e) => e);
    assert.ok(outside instanceof InvalidArgumentError, String(outside));
    assert.deepEqual([outside.status, outside.code], [422, "invalid_argument"]);
    assert.match(outside.message, /restore window/);
    await assert.rejects(c.databases.restore("db-1", ""), InvalidArgumentError);
    const restores = srv.requests.filter((r) => r.url === "/v1/databases/db-1/restore");
    assert.deepEqual(restores.map((r) => JSON.parse(r.body)), [{ to_time: "2026-01-01T12:30:00.000Z" }, { to_time: "2001-01-01T00:00:00Z" }]);
    assert.ok(restores.every((r) => r.headers["idempotency-key"]));
    assert.match((await c.databases.rotatePassword("db-1")).connectionUri, /n3w/);
    assert.equal(await c.databases.delete("db-1"), true);
    assert.equal(await c.databases.delete("gone"), false);
    const nf = await c.databases.get("gone").catch((e) => e);
    assert.ok(nf instanceof DatabaseNotFoundError && nf instanceof NotFoundError, String(nf));
    assert.equal(nf.code, "database_not_found");
    assert.ok(DATABASE_CREATE_TIMEOUT_MS >= 900_000, "the first create bakes the postgres template: minutes");
  } finally {
    await srv.close();
  }
});

test("databases: query sends sql and params, reads the result; query_failed is a QueryError with the SQLSTATE", async () => {
  let fail = null;
  const srv = await mockServer((req, res) => {
    if (fail) return json(res, fail.status, { error: { code: fail.code, message: fail.message, request_id: "req_q" } });
    json(res, 200, RESULT);
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const r = await c.databases.query("db-1", "select id, note from t where id = any($1)", ["{1,2}"]);
    assert.deepEqual(r, {
      command: "SELECT", rowCount: 2,
      fields: [{ name: "id", dataTypeId: 23 }, { name: "note", dataTypeId: 25 }],
      rows: [[1, "one"], [2, null]],
    });
    const when = new Date(Date.UTC(2026, 0, 2, 3, 4, 5));
    await c.databases.query("db-1", "insert …", [7, 1.5, true, null, undefined, "x", [0.1, 0.2, 0.3], { a: 1 }, when, 12n, new Uint8Array([0, 255])], {
      statementTimeoutMs: 5000,
    });
    await c.databases.query("db-1", "select 1");
    await assert.rejects(c.databases.query("db-1", "  "), InvalidArgumentError);
    await assert.rejects(c.databases.query("db-1", "select $1", [Symbol("x")]), InvalidArgumentError);
    assert.deepEqual(srv.requests.map((x) => [x.url, JSON.parse(x.body)]), [
      ["/v1/databases/db-1/query", { sql: "select id, note from t where id = any($1)", params: ["{1,2}"] }],
      ["/v1/databases/db-1/query", {
        sql: "insert …",
        params: [7, 1.5, true, null, null, "x", "[0.1,0.2,0.3]", '{"a":1}', "2026-01-02T03:04:05.000Z", "12", "\\x00ff"],
        timeout_ms: 5000,
      }],
      ["/v1/databases/db-1/query", { sql: "select 1" }],
    ]);

    fail = { status: 400, code: "query_failed", message: 'ERROR 42601: syntax error at or near "selec"' };
    const e = await c.databases.query("db-1", "selec 1").catch((x) => x);
    assert.ok(e instanceof QueryError && !(e instanceof InvalidArgumentError), String(e));
    assert.deepEqual([e.status, e.code, e.sqlstate, e.severity, e.requestId], [400, "query_failed", "42601", "ERROR", "req_q"]);
    assert.equal(e.pgMessage, 'syntax error at or near "selec"');
    fail = { status: 400, code: "query_failed", message: "something else" };
    const odd = await c.databases.query("db-1", "select 1").catch((x) => x);
    assert.ok(odd instanceof QueryError);
    assert.equal(odd.sqlstate, undefined);
    assert.equal(odd.pgMessage, "something else");
    fail = { status: 413, code: "payload_too_large", message: "more than 10000 rows" };
    const big = await c.databases.query("db-1", "select generate_series(1, 100000)").catch((x) => x);
    assert.ok(big instanceof InvalidArgumentError, String(big));
  } finally {
    await srv.close();
  }
});

test("databases: extensions, backups and waiting for a backup", async () => {
  const bk = (state, extra = {}) => backupWire(state, { volume: "pgdata-db-1", ...extra });
  let lists = 0;
  let mode = "done";
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    if (u.pathname === "/v1/databases/extensions") {
      return json(res, 200, { versions: { 17: [{ name: "vector", default_version: "0.8.0" }] }, preloaded: ["pg_stat_statements"] });
    }
    if (req.method === "POST" && u.pathname === "/v1/databases/db-1/backups") return json(res, 202, bk("uploading"));
    if (req.method === "GET" && u.pathname === "/v1/databases/db-1/backups") {
      lists += 1;
      if (mode === "stuck" || lists < 3) return json(res, 200, { data: [bk("uploading")], next_cursor: null });
      if (mode === "failed") return json(res, 200, { data: [bk("failed", { error: "s3 said no" })], next_cursor: null });
      return json(res, 200, { data: [bk("done", { id: "vb-0" }), bk("done", { bytes_uploaded: 20, finished_at: "t2" })], next_cursor: null });
    }
    json(res, 404, { error: { code: "not_found", message: "no route", request_id: "r" } });
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    assert.deepEqual(await c.databases.extensions(), {
      versions: { 17: [{ name: "vector", defaultVersion: "0.8.0" }] },
      preloaded: ["pg_stat_statements"],
    });
    const started = await c.databases.backup("db-1");
    assert.equal(started.state, "uploading");
    const done = await c.databases.waitBackup("db-1", started.id, { pollMs: 10 });
    assert.deepEqual([done.id, done.state, done.bytesUploaded, done.finishedAt], ["vb-1", "done", 20, "t2"]);
    assert.equal(lists, 3);
    assert.deepEqual((await c.databases.backups("db-1").toArray()).map((x) => x.id), ["vb-0", "vb-1"]);
    const missing = await c.databases.waitBackup("db-1", "vb-nope", { pollMs: 10 }).catch((e) => e);
    assert.ok(missing instanceof NotFoundError, String(missing));

    lists = 0;
    mode = "failed";
    const failed = await c.databases.backup("db-1", { wait: true, pollMs: 10 }).catch((e) => e);
    assert.ok(failed instanceof VolumeBackupError, String(failed));
    assert.match(failed.message, /database db-1 failed: s3 said no/);
    mode = "stuck";
    const stuck = await c.databases.waitBackup("db-1", "vb-1", { timeoutSeconds: 0.2, pollMs: 20 }).catch((e) => e);
    assert.ok(stuck instanceof VolumeBackupTimeoutError, String(stuck));
  } finally {
    await srv.close();
  }
});

// ---- apps

const APP = {
  id: "app-1", name: "web", url: "http://web.apps.localhost:8080",
  git: { url: "https://git.example/web.git", ref: "main" }, env: { NODE_ENV: "production" }, secret_names: ["DB_PASSWORD"],
  build: { command: "npm run build", output_dir: null }, start: { command: null, port: 3000 },
  memory_mb: 1024, min_instances: 0, idle_seconds: 300, health_path: "/healthz", webhook_secret: "whsec-s3cret",
  deploy_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 pandastack-app-web",
  live_deploy: null, instance_state: null, created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z",
};
const deployWire = (state = "queued", extra = {}) => ({
  id: "dep-1", app: "web", number: 1, ref: "main", commit: null, state, error: null, plan: null, phases_ms: {},
  sandbox_id: null, created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z", ...extra,
});
const notFoundApp = (res, name) => json(res, 404, { error: { code: "app_not_found", message: `app ${name} not found`, request_id: "r" } });

/** The entries of a tar archive (ustar/GNU/pax headers; long names by prefix or `L` records): name → { type, data }. */
function tarEntries(buf) {
  const out = new Map();
  let longName;
  for (let off = 0; off + 512 <= buf.length; ) {
    const h = buf.subarray(off, off + 512);
    if (h.every((b) => b === 0)) break;
    const field = (a, b) => h.subarray(a, b).toString("utf8").replace(/\0.*$/s, "");
    const size = parseInt(field(124, 136).trim() || "0", 8);
    const type = field(156, 157) || "0";
    const data = buf.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (type === "L") { longName = data.toString("utf8").replace(/\0.*$/s, ""); continue; }
    if (type === "x" || type === "g") continue;
    const prefix = h.subarray(257, 263).toString() === "ustar\0" || h.subarray(257, 262).toString() === "ustar" ? field(345, 500) : "";
    let name = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
    longName = undefined;
    name = name.replace(/^\.\//, "").replace(/\/$/, "");
    if (name === "." || name === "") continue;
    out.set(name, { type, data: Buffer.from(data) });
  }
  return out;
}

test("apps: create, list, get, update, delete send the documented requests and read the app", async () => {
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/apps") return json(res, 201, { ...APP, name: JSON.parse(body).name });
    if (req.method === "GET" && u.pathname === "/v1/apps") {
      return u.searchParams.get("cursor") === "a"
        ? json(res, 200, { data: [{ ...APP, id: "app-2", name: "b" }], next_cursor: null })
        : json(res, 200, { data: [{ ...APP, name: "a" }], next_cursor: "a" });
    }
    if (req.method === "GET" && u.pathname === "/v1/apps/web") return json(res, 200, { ...APP, live_deploy: "dep-1", instance_state: "running" });
    if (req.method === "PATCH" && u.pathname === "/v1/apps/web") {
      const { secrets, ...rest } = JSON.parse(body);
      void secrets;
      return json(res, 200, { ...APP, ...rest });
    }
    if (req.method === "DELETE" && u.pathname === "/v1/apps/web") return res.writeHead(204).end();
    if (req.method === "POST" && u.pathname === "/v1/apps/web/deploy-key") {
      return json(res, 200, { ...APP, deploy_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2 pandastack-app-web" });
    }
    if (u.pathname === "/v1/apps/gone") return notFoundApp(res, "gone");
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const a = await c.apps.create({ name: "web", git: "https://git.example/web.git" });
    assert.deepEqual(a, {
      id: "app-1", name: "web", url: "http://web.apps.localhost:8080",
      git: { url: "https://git.example/web.git", ref: "main" }, env: { NODE_ENV: "production" }, secretNames: ["DB_PASSWORD"],
      build: { command: "npm run build", outputDir: null }, start: { command: null, port: 3000 },
      rootDir: null, memoryMb: 1024, minInstances: 0, idleSeconds: 300, healthPath: "/healthz", webhookSecret: "whsec-s3cret",
      deployKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 pandastack-app-web", domains: [],
      liveDeploy: null, instanceState: null, createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-01T00:00:00Z",
    });
    await c.apps.create({
      name: "full", git: { url: "https://git.example/full.git", ref: "v1" }, env: { A: "1" }, secrets: { TOKEN: "t" },
      build: { command: "make", outputDir: "dist" }, start: { command: "node server.js", port: 8080 },
      memoryMb: 2048, minInstances: 1, idleSeconds: 60, healthPath: "/up", rootDir: "services/web", deploy: false,
    });
    await c.apps.create({ name: "refd", git: { url: "/srv/git/refd.git", ref: null }, ref: "dev", start: { port: 5000 }, deploy: true });
    await assert.rejects(c.apps.create({ name: "", git: "https://x" }), InvalidArgumentError);
    await assert.rejects(c.apps.create({ name: "x", git: "" }), InvalidArgumentError);
    await assert.rejects(c.apps.create({ name: "x", git: "u", start: { port: 0 } }), InvalidArgumentError);
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => JSON.parse(r.body)), [
      { name: "web", git: { url: "https://git.example/web.git" } },
      {
        name: "full", git: { url: "https://git.example/full.git", ref: "v1" }, env: { A: "1" }, secrets: { TOKEN: "t" },
        build: { command: "make", output_dir: "dist" }, start: { command: "node server.js", port: 8080 },
        memory_mb: 2048, min_instances: 1, idle_seconds: 60, health_path: "/up", root_dir: "services/web", deploy: false,
      },
      { name: "refd", git: { url: "/srv/git/refd.git", ref: "dev" }, start: { port: 5000 }, deploy: true },
    ]);
    assert.equal(posts[0].headers["content-type"], "application/json");

    assert.deepEqual((await c.apps.list({ limit: 1 }).toArray()).map((x) => x.name), ["a", "b"]);
    const lists = srv.requests.filter((r) => r.method === "GET" && pathOf(r) === "/v1/apps");
    assert.deepEqual(lists.map(query), [{ limit: "1" }, { limit: "1", cursor: "a" }]);
    const got = await c.apps.get("web");
    assert.deepEqual([got.liveDeploy, got.instanceState], ["dep-1", "running"]);
    const u = await c.apps.update("web", { env: { NODE_ENV: "staging" }, minInstances: 1 });
    assert.deepEqual([u.env, u.minInstances], [{ NODE_ENV: "staging" }, 1]);
    await c.apps.update("web", { git: "https://git.example/other.git", ref: "release", secrets: {}, idleSeconds: 30 });
    await c.apps.update("web", { build: { outputDir: "out" }, start: { command: "serve" }, memoryMb: 512, healthPath: "/" });
    await c.apps.update("web", { env: {} });
    await assert.rejects(c.apps.update("web", { ref: "main" }), InvalidArgumentError);
    const rotated = await c.apps.rotateDeployKey("web");
    assert.equal(rotated.deployKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2 pandastack-app-web");
    assert.equal(srv.requests.filter((r) => r.method === "POST" && pathOf(r) === "/v1/apps/web/deploy-key").length, 1);
    assert.deepEqual(srv.requests.filter((r) => r.method === "PATCH").map((r) => JSON.parse(r.body)), [
      { env: { NODE_ENV: "staging" }, min_instances: 1 },
      { git: { url: "https://git.example/other.git", ref: "release" }, secrets: {}, idle_seconds: 30 },
      { build: { output_dir: "out" }, start: { command: "serve" }, memory_mb: 512, health_path: "/" },
      { env: {} },
    ]);
    assert.equal(await c.apps.delete("web"), true);
    assert.equal(await c.apps.delete("gone"), false);
    const nf = await c.apps.get("gone").catch((e) => e);
    assert.ok(nf instanceof AppNotFoundError && nf instanceof NotFoundError, String(nf));
    assert.deepEqual([nf.status, nf.code], [404, "app_not_found"]);
    await assert.rejects(c.apps.get(""), InvalidArgumentError);
  } finally {
    await srv.close();
  }
});

test("apps: domains are sent when given (an update's [] too) and read back with their TLS", async () => {
  // The server's answer: the domains the request named, without TLS (the client suite's server has none).
  const withDomains = (body) => ({
    ...APP,
    domains: (JSON.parse(body).domains ?? []).map((name) => ({ name, tls: "none", tls_expires_at: null, tls_error: null })),
  });
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/apps") return json(res, 201, withDomains(body));
    if (req.method === "PATCH" && u.pathname === "/v1/apps/web") return json(res, 200, withDomains(body));
    if (req.method === "GET" && u.pathname === "/v1/apps/web") {
      return json(res, 200, {
        ...APP,
        domains: [
          { name: "shop.example.com", tls: "issued", tls_expires_at: "2026-04-01T00:00:00Z", tls_error: null },
          { name: "www.example.com", tls: "failed", tls_error: "dns: NXDOMAIN", since: "an unknown field" },
          { name: "files.example.com", tls: "files" },
          "not an object",
        ],
      });
    }
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const a = await c.apps.create({ name: "web", git: "https://git.example/web.git", domains: ["shop.example.com", "www.example.com"] });
    assert.deepEqual(a.domains, [
      { name: "shop.example.com", tls: "none", tlsExpiresAt: null, tlsError: null },
      { name: "www.example.com", tls: "none", tlsExpiresAt: null, tlsError: null },
    ]);
    assert.deepEqual((await c.apps.create({ name: "web", git: "https://git.example/web.git" })).domains, []);
    assert.deepEqual((await c.apps.update("web", { domains: ["shop.example.com"] })).domains.map((d) => d.name), ["shop.example.com"]);
    assert.deepEqual((await c.apps.update("web", { domains: [] })).domains, []);
    await c.apps.update("web", { minInstances: 1 });
    assert.deepEqual((await c.apps.get("web")).domains, [
      { name: "shop.example.com", tls: "issued", tlsExpiresAt: "2026-04-01T00:00:00Z", tlsError: null },
      { name: "www.example.com", tls: "failed", tlsExpiresAt: null, tlsError: "dns: NXDOMAIN" },
      { name: "files.example.com", tls: "files", tlsExpiresAt: null, tlsError: null },
    ]);
    const before = srv.requests.length;
    await assert.rejects(c.apps.create({ name: "x", git: "u", domains: "shop.example.com" }), InvalidArgumentError);
    await assert.rejects(c.apps.create({ name: "x", git: "u", domains: [""] }), InvalidArgumentError);
    const bad = await c.apps.update("web", { domains: ["ok.example.com", 42] }).catch((e) => e);
    assert.ok(bad instanceof InvalidArgumentError && /domains\[1\]/.test(bad.message), String(bad));
    assert.equal(srv.requests.length, before, "refused before any request");
    assert.deepEqual(srv.requests.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body)), [
      { name: "web", git: { url: "https://git.example/web.git" }, domains: ["shop.example.com", "www.example.com"] },
      { name: "web", git: { url: "https://git.example/web.git" } },
    ]);
    assert.deepEqual(srv.requests.filter((r) => r.method === "PATCH").map((r) => JSON.parse(r.body)), [
      { domains: ["shop.example.com"] },
      { domains: [] }, // [] is sent: it removes them all
      { min_instances: 1 }, // not given: left out, the domains stay
    ]);
  } finally {
    await srv.close();
  }
});

test("apps: deploy, deploys, getDeploy, rollback; waitForDeploy polls to the end and times out", async () => {
  let polls = 0;
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/apps/web/deploys") return json(res, 202, deployWire("queued", { ref: JSON.parse(body).ref ?? "main" }));
    if (req.method === "GET" && u.pathname === "/v1/apps/web/deploys") {
      return u.searchParams.get("cursor") === "c2"
        ? json(res, 200, { data: [deployWire("standby")], next_cursor: null })
        : json(res, 200, { data: [deployWire("live", { id: "dep-2", number: 2 })], next_cursor: "c2" });
    }
    if (u.pathname === "/v1/apps/web/deploys/dep-1") {
      polls += 1;
      return json(res, 200, polls < 3 ? deployWire(polls === 1 ? "cloning" : "building") : deployWire("failed", { error: "build: npm ERR!" }));
    }
    if (u.pathname === "/v1/apps/web/deploys/dep-2") {
      return json(res, 200, deployWire("live", { id: "dep-2", number: 2, commit: "abc123", plan: { framework: "next" }, phases_ms: { clone: 120, build: 9000 }, sandbox_id: "sb-7" }));
    }
    if (u.pathname === "/v1/apps/web/deploys/dep-9") return json(res, 200, deployWire("checking", { id: "dep-9" }));
    if (u.pathname === "/v1/apps/web/deploys/nope") return json(res, 404, envelope("not_found", "deploy nope not found"));
    if (u.pathname === "/v1/apps/web/rollback") return json(res, 200, deployWire("live"));
    if (u.pathname.startsWith("/v1/apps/gone")) return notFoundApp(res, "gone");
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const d = await c.apps.deploy("web");
    assert.deepEqual([d.id, d.state, d.ref, isDeployActive(d)], ["dep-1", "queued", "main", true]);
    assert.equal((await c.apps.deploy("web", { ref: "feature-x" })).ref, "feature-x");
    assert.deepEqual(srv.requests.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body)), [{}, { ref: "feature-x" }]);
    assert.deepEqual((await c.apps.deploys("web", { limit: 1 }).toArray()).map((x) => [x.id, x.number, x.state]), [["dep-2", 2, "live"], ["dep-1", 1, "standby"]]);
    const g = await c.apps.getDeploy("web", "dep-2");
    assert.deepEqual([g.commit, g.plan, g.phasesMs, g.sandboxId, isDeployActive(g)], ["abc123", { framework: "next" }, { clone: 120, build: 9000 }, "sb-7", false]);
    await assert.rejects(c.apps.getDeploy("web", "nope"), (e) => e instanceof NotFoundError && !(e instanceof AppNotFoundError));
    await assert.rejects(c.apps.deploy("gone"), AppNotFoundError);

    const ended = await c.apps.deploy("web", { wait: true, pollMs: 10 });
    assert.deepEqual([ended.state, ended.error, polls], ["failed", "build: npm ERR!", 3]);
    const stuck = await c.apps.waitForDeploy("web", "dep-9", { timeoutSeconds: 0.2, pollMs: 20 }).catch((e) => e);
    assert.ok(stuck instanceof DeployTimeoutError && stuck instanceof PandaStackError, String(stuck));
    assert.deepEqual([stuck.code, stuck.deploy.id, stuck.deploy.state], ["deploy_timeout", "dep-9", "checking"]);
    assert.match(stuck.message, /dep-9 of app web still checking after timeoutSeconds=0.2/);

    assert.equal((await c.apps.rollback("web")).state, "live");
    await c.apps.rollback("web", { deployId: "dep-1" });
    const rb = srv.requests.filter((r) => pathOf(r) === "/v1/apps/web/rollback");
    assert.deepEqual(rb.map((r) => JSON.parse(r.body)), [{}, { deploy_id: "dep-1" }]);
  } finally {
    await srv.close();
  }
});

test("apps: deployDirectory uploads a gzip tar of the directory without .git and node_modules", async () => {
  const { mkdtemp, mkdir, writeFile, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { gunzipSync } = await import("node:zlib");
  const dir = await mkdtemp(join(tmpdir(), "pandastack-app-"));
  for (const d of ["src/lib", ".git/objects", "node_modules/left-pad", "src/node_modules/x"]) await mkdir(join(dir, d), { recursive: true });
  const files = {
    "package.json": '{"name": "web"}', "src/index.js": "console.log('hi')", "src/lib/util.js": "export {}", ".env.example": "A=1",
    ".git/HEAD": "ref: refs/heads/main", "node_modules/left-pad/index.js": "module.exports = 1", "src/node_modules/x/i.js": "x",
  };
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  let polls = 0;
  const srv = await mockServer((req, res) => {
    if (req.method === "POST") return json(res, 202, deployWire("queued", { ref: "upload" }));
    polls += 1;
    json(res, 200, deployWire(polls < 2 ? "baking" : "live", { ref: "upload" }));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const d = await c.apps.deployDirectory("web", dir);
    assert.deepEqual([d.ref, d.state], ["upload", "queued"]);
    const up = srv.requests[0];
    assert.equal(pathOf(up), "/v1/apps/web/deploys");
    assert.equal(up.headers["content-type"], "application/gzip");
    assert.deepEqual([...up.raw.subarray(0, 2)], [0x1f, 0x8b], "gzip");
    const entries = tarEntries(gunzipSync(up.raw));
    assert.deepEqual([...entries.keys()].filter((n) => entries.get(n).type === "0").sort(), [".env.example", "package.json", "src/index.js", "src/lib/util.js"]);
    assert.ok(![...entries.keys()].some((n) => n.split("/").includes(".git") || n.split("/").includes("node_modules")));
    assert.equal(entries.get("src/lib/util.js").data.toString(), "export {}");
    assert.equal(entries.get("src").type, "5");
    const live = await c.apps.deployDirectory("web", dir, { wait: true, pollMs: 10 });
    assert.equal(live.state, "live");
    await assert.rejects(c.apps.deployDirectory("web", join(dir, "package.json")), InvalidArgumentError);
    await assert.rejects(c.apps.deployDirectory("web", join(dir, "missing")), InvalidArgumentError);
    assert.equal(srv.requests.filter((r) => r.method === "POST").length, 2);
  } finally {
    await srv.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("apps: logs plain and followed (a broken stream reopened without repeats); onLog throwing stops", async () => {
  let deployFollows = 0;
  const srv = await mockServer((req, res) => {
    const p = pathOf(req);
    const follow = query(req).follow === "1";
    if (!follow) return res.writeHead(200, { "content-type": "text/plain" }).end(p.includes("/deploys/") ? "clone\nbuild\n" : "listening on 3000\n");
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (p === "/v1/apps/web/deploys/dep-1/logs") {
      if (++deployFollows === 1) return res.end(":\n\n" + sse(["log", { data: "clone\n" }], ["log", { data: "bui" }]));
      return res.end(sse(["log", { data: "clone\nbuild\n" }], ["log", { data: "live\n" }], ["end", { reason: "live" }]));
    }
    if (p === "/v1/apps/web/logs") return res.end(sse(["log", { data: "GET / 200\n" }], ["log", { data: "GET /a 200\n" }], ["end", { reason: "stopped" }]));
    res.end();
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    assert.equal(await c.apps.deployLogs("web", "dep-1"), "clone\nbuild\n");
    assert.equal(await c.apps.logs("web"), "listening on 3000\n");
    assert.ok(srv.requests.every((r) => /text\/plain/.test(r.headers.accept)));
    const seen = [];
    assert.equal(await c.apps.deployLogs("web", "dep-1", { follow: true, onLog: (t) => { seen.push(t); } }), "clone\nbuild\nlive\n");
    assert.deepEqual(seen, ["clone\n", "bui", "ld\n", "live\n"]);
    assert.equal(deployFollows, 2);
    assert.equal(await c.apps.logs("web", { follow: true }), "GET / 200\nGET /a 200\n");
    const followed = srv.requests.filter((r) => query(r).follow === "1");
    assert.equal(followed.length, 3);
    assert.ok(followed.every((r) => /text\/event-stream/.test(r.headers.accept)));
    await assert.rejects(c.apps.logs("web", { follow: true, onLog: () => { throw new Error("enough"); } }), /enough/);
    assert.equal(srv.requests.filter((r) => query(r).follow === "1").length, 4, "not reopened after the callback threw");
  } finally {
    await srv.close();
  }
});

// ---- functions

const FUNCTION = {
  id: "app-f1", name: "hello", runtime: "python", handler: "main.handler", url: "http://fn-hello.apps.localhost:8080",
  public: false, env: { A: "1" }, secret_names: ["TOKEN"], memory_mb: 1024, timeout_seconds: 60, concurrency: 1,
  max_instances: 4, idle_seconds: 300, live_version: null, warm_instances: 0,
  created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z",
};
const versionWire = (state = "queued", version = 1, extra = {}) => ({
  id: `dep-${version}`, function: "hello", version, state, error: null, handler: null, phases_ms: {},
  created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z", ...extra,
});
const outcomeWire = (status = "ok", extra = {}) => ({
  id: null, function: "hello", status, result: null, error: null, stdout: "", stderr: "", version: 1, duration_ms: 1.5,
  cold: false, attempts: 1, created_at: null, finished_at: null, ...extra,
});
const MAIN_PY = "def handler(event, context):\n    return {'hi': event}\n";

test("functions: create, list, get, update, delete send the documented requests and read the function", async () => {
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/functions") return json(res, 201, { ...FUNCTION, name: JSON.parse(body).name });
    if (req.method === "GET" && u.pathname === "/v1/functions") {
      return u.searchParams.get("cursor") === "a"
        ? json(res, 200, { data: [{ ...FUNCTION, id: "app-f2", name: "b" }], next_cursor: null })
        : json(res, 200, { data: [{ ...FUNCTION, name: "a" }], next_cursor: "a" });
    }
    if (req.method === "GET" && u.pathname === "/v1/functions/hello") return json(res, 200, { ...FUNCTION, live_version: 2, warm_instances: 1 });
    if (req.method === "PATCH" && u.pathname === "/v1/functions/hello") return json(res, 200, { ...FUNCTION, ...JSON.parse(body) });
    if (req.method === "DELETE" && u.pathname === "/v1/functions/hello") return res.writeHead(204).end();
    if (u.pathname === "/v1/functions/gone") return json(res, 404, envelope("app_not_found", "app function gone not found"));
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const f = await c.functions.create({ name: "hello", runtime: "python", handler: "main.handler", files: { "main.py": MAIN_PY } });
    assert.deepEqual(f, {
      id: "app-f1", name: "hello", runtime: "python", handler: "main.handler", url: "http://fn-hello.apps.localhost:8080",
      public: false, env: { A: "1" }, secretNames: ["TOKEN"], memoryMb: 1024, timeoutSeconds: 60, concurrency: 1,
      maxInstances: 4, idleSeconds: 300, liveVersion: null, warmInstances: 0,
      createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-01T00:00:00Z",
    });
    await c.functions.create({
      name: "full", runtime: "node", handler: "index.handler", files: { "index.mjs": "export const handler = (e) => e;\n" },
      dependencies: '{"dependencies": {"lodash": "4"}}', env: { A: "1" }, secrets: { TOKEN: "t" }, memoryMb: 512,
      timeoutSeconds: 30, concurrency: 4, maxInstances: 2, idleSeconds: 60, public: true,
    });
    await c.functions.create({ name: "fromgit", runtime: "python", handler: "app.main", git: "https://git.example/fn.git", ref: "v1" });
    const before = srv.requests.length;
    for (const bad of [
      { name: "", runtime: "python", handler: "main.handler", files: { "main.py": "" } },
      { name: "x", runtime: "ruby", handler: "main.handler", files: { "main.rb": "" } },
      { name: "x", runtime: "python", handler: "", files: { "main.py": "" } },
      { name: "x", runtime: "python", handler: "main.handler" },
      { name: "x", runtime: "python", handler: "main.handler", files: {} },
      { name: "x", runtime: "python", handler: "main.handler", files: { "main.py": 1 } },
      { name: "x", runtime: "python", handler: "m.h", files: { "m.py": "" }, git: "https://g/x.git" },
      { name: "x", runtime: "python", handler: "m.h", files: { "m.py": "" }, ref: "main" },
    ]) {
      await assert.rejects(c.functions.create(bad), InvalidArgumentError, JSON.stringify(bad));
    }
    assert.equal(srv.requests.length, before, "refused before any request");
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => JSON.parse(r.body)), [
      { name: "hello", runtime: "python", handler: "main.handler", files: { "main.py": MAIN_PY } },
      {
        name: "full", runtime: "node", handler: "index.handler", files: { "index.mjs": "export const handler = (e) => e;\n" },
        dependencies: '{"dependencies": {"lodash": "4"}}', env: { A: "1" }, secrets: { TOKEN: "t" }, memory_mb: 512,
        timeout_seconds: 30, concurrency: 4, max_instances: 2, idle_seconds: 60, public: true,
      },
      { name: "fromgit", runtime: "python", handler: "app.main", git: { url: "https://git.example/fn.git", ref: "v1" } },
    ]);
    assert.equal(posts[0].headers["content-type"], "application/json");

    assert.deepEqual((await c.functions.list({ limit: 1 }).toArray()).map((x) => x.name), ["a", "b"]);
    const lists = srv.requests.filter((r) => r.method === "GET" && pathOf(r) === "/v1/functions");
    assert.deepEqual(lists.map(query), [{ limit: "1" }, { limit: "1", cursor: "a" }]);
    const got = await c.functions.get("hello");
    assert.deepEqual([got.liveVersion, got.warmInstances], [2, 1]);
    const u = await c.functions.update("hello", { timeoutSeconds: 120, public: true });
    assert.deepEqual([u.timeoutSeconds, u.public], [120, true]);
    await c.functions.update("hello", { concurrency: 8, maxInstances: 2, idleSeconds: 30 });
    assert.deepEqual(srv.requests.filter((r) => r.method === "PATCH").map((r) => JSON.parse(r.body)), [
      { timeout_seconds: 120, public: true },
      { concurrency: 8, max_instances: 2, idle_seconds: 30 },
    ]);
    assert.equal(await c.functions.delete("hello"), true);
    assert.equal(await c.functions.delete("gone"), false);
    const nf = await c.functions.get("gone").catch((e) => e);
    assert.ok(nf instanceof AppNotFoundError && nf instanceof NotFoundError, String(nf));
    await assert.rejects(c.functions.get(""), InvalidArgumentError);
  } finally {
    await srv.close();
  }
});

test("functions: versions, getVersion, versionLogs, rollback; waitForVersion polls to the end and times out", async () => {
  let polls = 0;
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/functions/hello/versions") {
      return json(res, 202, versionWire("queued", 2, { handler: JSON.parse(body).handler ?? null }));
    }
    if (req.method === "GET" && u.pathname === "/v1/functions/hello/versions") {
      return u.searchParams.get("cursor") === "c2"
        ? json(res, 200, { data: [versionWire("standby", 1)], next_cursor: null })
        : json(res, 200, { data: [versionWire("live", 2)], next_cursor: "c2" });
    }
    if (u.pathname === "/v1/functions/hello/versions/2") {
      polls += 1;
      return json(res, 200, polls < 3 ? versionWire(polls === 1 ? "building" : "baking", 2) : versionWire("failed", 2, { error: "ImportError: six" }));
    }
    if (u.pathname === "/v1/functions/hello/versions/3") return json(res, 200, versionWire("checking", 3));
    if (u.pathname === "/v1/functions/hello/versions/2/logs") return res.writeHead(200, { "content-type": "text/plain" }).end("installing six\n");
    if (u.pathname === "/v1/functions/hello/versions/9") return json(res, 404, envelope("not_found", "version 9 of hello not found"));
    if (u.pathname === "/v1/functions/hello/rollback") return json(res, 200, versionWire("live", 1));
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const v = await c.functions.createVersion("hello", { files: { "main.py": MAIN_PY }, dependencies: "six\n", env: { B: "2" } });
    assert.deepEqual([v.version, v.state, isVersionBuilding(v)], [2, "queued", true]);
    assert.equal((await c.functions.createVersion("hello", { handler: "main.other" })).handler, "main.other");
    await c.functions.createVersion("hello");
    await c.functions.createVersion("hello", { git: { url: "https://git.example/fn.git" }, secrets: {} });
    await assert.rejects(c.functions.createVersion("hello", { ref: "main" }), InvalidArgumentError);
    assert.deepEqual(srv.requests.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body)), [
      { files: { "main.py": MAIN_PY }, dependencies: "six\n", env: { B: "2" } },
      { handler: "main.other" },
      {},
      { git: { url: "https://git.example/fn.git" }, secrets: {} },
    ]);
    assert.deepEqual((await c.functions.versions("hello", { limit: 1 }).toArray()).map((x) => [x.version, x.state]), [[2, "live"], [1, "standby"]]);
    await assert.rejects(c.functions.getVersion("hello", 9), NotFoundError);
    for (const bad of [0, -1, 1.5, "2"]) await assert.rejects(c.functions.getVersion("hello", bad), InvalidArgumentError);
    const ended = await c.functions.createVersion("hello", { files: { "main.py": MAIN_PY }, wait: true, pollMs: 10 });
    assert.deepEqual([ended.state, ended.error, polls, isVersionBuilding(ended)], ["failed", "ImportError: six", 3, false]);
    const stuck = await c.functions.waitForVersion("hello", 3, { timeoutSeconds: 0.2, pollMs: 20 }).catch((e) => e);
    assert.ok(stuck instanceof FunctionVersionTimeoutError && stuck instanceof PandaStackError, String(stuck));
    assert.deepEqual([stuck.code, stuck.version.version, stuck.version.state], ["function_version_timeout", 3, "checking"]);
    assert.match(stuck.message, /version 3 of function hello still checking after timeoutSeconds=0.2/);
    assert.equal(await c.functions.versionLogs("hello", 2), "installing six\n");
    assert.ok(/text\/plain/.test(srv.requests.find((r) => pathOf(r).endsWith("/logs")).headers.accept));
    assert.equal((await c.functions.rollback("hello")).version, 1);
    await c.functions.rollback("hello", { version: 1 });
    const rb = srv.requests.filter((r) => pathOf(r) === "/v1/functions/hello/rollback");
    assert.deepEqual(rb.map((r) => JSON.parse(r.body)), [{}, { version: 1 }]);
  } finally {
    await srv.close();
  }
});

test("functions: invoke sends any JSON event and resolves with the handler's error as data", async () => {
  const srv = await mockServer((req, res, body) => {
    const p = pathOf(req);
    if (p === "/v1/functions/idle/invoke") return json(res, 409, envelope("conflict", "function idle has no live version"));
    if (p === "/v1/functions/busy/invoke") return json(res, 502, envelope("bad_gateway", "the instance went away"));
    const event = body ? JSON.parse(body) : null;
    if (event && event.fail) {
      return json(res, 200, outcomeWire("error", { error: { type: "ValueError", message: "asked to fail", traceback: "Traceback ...\nValueError: asked to fail\n" }, stderr: "oops\n" }));
    }
    if (event && event.sleep) return json(res, 200, outcomeWire("timeout", { error: { type: "Timeout", message: "past 1 s", traceback: "" } }));
    json(res, 200, outcomeWire("ok", { result: { echo: event }, stdout: "got it\n", cold: true, duration_ms: 2 }));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 3 });
    const r = await c.functions.invoke("hello", { name: "x" });
    assert.deepEqual(r, {
      id: null, function: "hello", status: "ok", result: { echo: { name: "x" } }, error: null, stdout: "got it\n", stderr: "",
      version: 1, durationMs: 2, cold: true, attempts: 1, createdAt: null, finishedAt: null,
    });
    assert.deepEqual((await c.functions.invoke("hello", [1, 2])).result, { echo: [1, 2] });
    assert.deepEqual((await c.functions.invoke("hello", "plain words")).result, { echo: "plain words" });
    assert.deepEqual((await c.functions.invoke("hello", null)).result, { echo: null });
    assert.deepEqual((await c.functions.invoke("hello")).result, { echo: null });
    const sent = srv.requests.filter((r) => pathOf(r) === "/v1/functions/hello/invoke");
    assert.deepEqual(sent.slice(0, 4).map((r) => JSON.parse(r.body)), [{ name: "x" }, [1, 2], "plain words", null]);
    assert.equal(sent[0].headers["content-type"], "application/json");
    assert.equal(sent[4].body, "", "no event: no body (the server reads it as null)");
    const failed = await c.functions.invoke("hello", { fail: true });
    assert.deepEqual([failed.status, failed.result, failed.stderr], ["error", null, "oops\n"]);
    assert.deepEqual(failed.error, { type: "ValueError", message: "asked to fail", traceback: "Traceback ...\nValueError: asked to fail\n" });
    const slow = await c.functions.invoke("hello", { sleep: 5 });
    assert.deepEqual([slow.status, slow.error.type], ["timeout", "Timeout"]);
    await assert.rejects(c.functions.invoke("idle", {}), ConflictError);
    await assert.rejects(c.functions.invoke("busy", {}), ServerError);
    assert.equal(srv.requests.filter((r) => pathOf(r) === "/v1/functions/busy/invoke").length, 1, "not retried: the handler may have run");
  } finally {
    await srv.close();
  }
});

test("functions: invoke waits as long as a call may run; timeoutMs overrides", async () => {
  const seen = [];
  const fetch = async (url, init) => {
    seen.push(init.signal);
    return new Response(JSON.stringify(outcomeWire()), { status: 200, headers: { "content-type": "application/json" } });
  };
  const c = new PandaStack({ apiKey: "pds_x", baseUrl: "http://fake", maxRetries: 0, fetch });
  assert.ok(INVOKE_TIMEOUT_MS >= 900_000, "a call may run 900 s");
  // The request timer each call arms (and clears once answered).
  const slowTimers = [];
  const realSetTimeout = globalThis.setTimeout;
  globalThis.setTimeout = (fn, ms, ...rest) => {
    slowTimers.push(ms);
    return realSetTimeout(fn, ms, ...rest);
  };
  try {
    await c.functions.invoke("hello", {});
    await c.functions.invoke("hello", {}, { timeoutMs: 5000 });
  } finally {
    globalThis.setTimeout = realSetTimeout;
  }
  assert.ok(slowTimers.includes(INVOKE_TIMEOUT_MS), String(slowTimers));
  assert.ok(slowTimers.includes(5000), String(slowTimers));
  assert.equal(seen.length, 2);
});

test("functions: submit queues a call; getInvocation fetches it", async () => {
  let polls = 0;
  const srv = await mockServer((req, res) => {
    const p = pathOf(req);
    if (p === "/v1/functions/hello/invoke") return json(res, 202, outcomeWire("queued", { id: "inv-1", version: null, duration_ms: null, attempts: 0, created_at: "t" }));
    if (p === "/v1/functions/hello/invocations/inv-1") {
      polls += 1;
      return json(res, 200, polls === 1 ? outcomeWire("running", { id: "inv-1" }) : outcomeWire("ok", { id: "inv-1", result: [1, 2], attempts: 2, finished_at: "t2" }));
    }
    json(res, 404, envelope("not_found", "invocation not found"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const q = await c.functions.submit("hello", { n: 1 });
    assert.deepEqual([q.id, q.status, q.attempts, q.version, q.durationMs], ["inv-1", "queued", 0, null, null]);
    await c.functions.submit("hello", undefined, { retries: 5 });
    assert.equal((await c.functions.getInvocation("hello", "inv-1")).status, "running");
    const done = await c.functions.getInvocation("hello", "inv-1");
    assert.deepEqual([done.status, done.result, done.attempts, done.finishedAt], ["ok", [1, 2], 2, "t2"]);
    await assert.rejects(c.functions.getInvocation("hello", "nope"), NotFoundError);
    await assert.rejects(c.functions.getInvocation("hello", ""), InvalidArgumentError);
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map(query), [{ async: "1" }, { async: "1", retries: "5" }]);
    assert.deepEqual([JSON.parse(posts[0].body), posts[1].body], [{ n: 1 }, ""]);
  } finally {
    await srv.close();
  }
});

// ---- schedules

const TARGET = { type: "sandbox_exec", template: "minimal", command: "echo hi", env: {}, timeout_seconds: 300 };
const SCHEDULE = {
  id: "sch-1", name: "nightly", cron: "0 3 * * *", timezone: "UTC", target: TARGET, payload: null, concurrency_policy: "allow",
  starting_deadline_seconds: null, retries: 0, paused: false, next_run_at: "2026-01-02T03:00:00Z",
  created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z",
};
const runWire = (state = "queued", extra = {}) => ({
  id: "run-1", schedule: "nightly", due_at: "2026-01-02T03:00:00Z", trigger: "scheduled", state, attempt: 1, sandbox_id: null,
  started_at: null, ended_at: null, exit_code: null, output: null, error: null, created_at: "2026-01-02T03:00:00Z", ...extra,
});

test("schedules: create, list, get, update, pause, resume, delete send the documented requests", async () => {
  const srv = await mockServer((req, res, body) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "POST" && u.pathname === "/v1/schedules") {
      const { paused, ...rest } = JSON.parse(body);
      return json(res, 201, { ...SCHEDULE, ...rest, paused: paused === true });
    }
    if (req.method === "GET" && u.pathname === "/v1/schedules") {
      return u.searchParams.get("cursor") === "a"
        ? json(res, 200, { data: [{ ...SCHEDULE, id: "sch-2", name: "b" }], next_cursor: null })
        : json(res, 200, { data: [{ ...SCHEDULE, name: "a" }], next_cursor: "a" });
    }
    if (req.method === "GET" && u.pathname === "/v1/schedules/nightly") return json(res, 200, SCHEDULE);
    if (req.method === "GET" && u.pathname === "/v1/schedules/other") return json(res, 200, { ...SCHEDULE, target: { type: "webhook", url: "u" } });
    if (req.method === "PATCH" && u.pathname === "/v1/schedules/nightly") return json(res, 200, { ...SCHEDULE, ...JSON.parse(body) });
    if (u.pathname === "/v1/schedules/nightly/pause") return json(res, 200, { ...SCHEDULE, paused: true, next_run_at: null });
    if (u.pathname === "/v1/schedules/nightly/resume") return json(res, 200, SCHEDULE);
    if (req.method === "DELETE" && u.pathname === "/v1/schedules/nightly") return res.writeHead(204).end();
    json(res, 404, envelope("not_found", "schedule not found"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const s = await c.schedules.create({ name: "nightly", cron: "0 3 * * *", target: { type: "sandbox_exec", template: "minimal", command: "echo hi" } });
    assert.deepEqual(s, {
      id: "sch-1", name: "nightly", cron: "0 3 * * *", timezone: "UTC",
      target: { type: "sandbox_exec", template: "minimal", command: "echo hi", env: {}, timeoutSeconds: 300 },
      payload: null, concurrencyPolicy: "allow", startingDeadlineSeconds: null, retries: 0, paused: false,
      nextRunAt: "2026-01-02T03:00:00Z", createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-01T00:00:00Z",
    });
    const full = await c.schedules.create({
      name: "every-5", cron: "*/5 * * * *", timezone: "Europe/Berlin",
      target: { type: "sandbox_exec", template: "minimal", command: "python3 job.py", env: { MODE: "full" }, timeoutSeconds: 60 },
      payload: { full: true }, concurrencyPolicy: "forbid", startingDeadlineSeconds: 120, retries: 2, paused: true,
    });
    assert.deepEqual([full.timezone, full.payload, full.concurrencyPolicy, full.startingDeadlineSeconds, full.retries, full.paused], [
      "Europe/Berlin", { full: true }, "forbid", 120, 2, true,
    ]);
    const f = await c.schedules.create({ name: "calls", cron: "@hourly", target: { type: "function", name: "hello" }, payload: [1, 2] });
    assert.deepEqual(f.target, { type: "function", name: "hello" });
    const before = srv.requests.length;
    for (const bad of [
      { name: "", cron: "@daily", target: { type: "function", name: "f" } },
      { name: "x", cron: " ", target: { type: "function", name: "f" } },
      { name: "x", cron: "@daily" },
      { name: "x", cron: "@daily", target: { template: "minimal", command: "true" } },
      { name: "x", cron: "@daily", target: { type: "function", name: "f" }, concurrencyPolicy: "queue" },
    ]) {
      await assert.rejects(c.schedules.create(bad), InvalidArgumentError, JSON.stringify(bad));
    }
    assert.equal(srv.requests.length, before, "refused before any request");
    assert.deepEqual(srv.requests.filter((r) => r.method === "POST").map((r) => JSON.parse(r.body)), [
      { name: "nightly", cron: "0 3 * * *", target: { type: "sandbox_exec", template: "minimal", command: "echo hi" } },
      {
        name: "every-5", cron: "*/5 * * * *", timezone: "Europe/Berlin",
        target: { type: "sandbox_exec", template: "minimal", command: "python3 job.py", env: { MODE: "full" }, timeout_seconds: 60 },
        payload: { full: true }, concurrency_policy: "forbid", starting_deadline_seconds: 120, retries: 2, paused: true,
      },
      { name: "calls", cron: "@hourly", target: { type: "function", name: "hello" }, payload: [1, 2] },
    ]);

    assert.deepEqual((await c.schedules.list({ limit: 1 }).toArray()).map((x) => x.name), ["a", "b"]);
    assert.equal((await c.schedules.get("nightly")).cron, "0 3 * * *");
    assert.equal((await c.schedules.get("other")).target, null, "a kind of target this SDK does not know");
    await assert.rejects(c.schedules.get("nope"), NotFoundError);
    const u = await c.schedules.update("nightly", { cron: "0 4 * * *", timezone: "Asia/Tokyo", retries: 1 });
    assert.deepEqual([u.cron, u.timezone, u.retries], ["0 4 * * *", "Asia/Tokyo", 1]);
    await c.schedules.update("nightly", { target: { type: "function", name: "hello" }, payload: { n: 1 }, startingDeadlineSeconds: 0 });
    assert.deepEqual(srv.requests.filter((r) => r.method === "PATCH").map((r) => JSON.parse(r.body)), [
      { timezone: "Asia/Tokyo", retries: 1, cron: "0 4 * * *" },
      { target: { type: "function", name: "hello" }, payload: { n: 1 }, starting_deadline_seconds: 0 },
    ]);
    const p = await c.schedules.pause("nightly");
    assert.deepEqual([p.paused, p.nextRunAt], [true, null]);
    assert.equal((await c.schedules.resume("nightly")).paused, false);
    assert.equal(await c.schedules.delete("nightly"), true);
    assert.equal(await c.schedules.delete("nope"), false);
  } finally {
    await srv.close();
  }
});

test("schedules: run, runs, getRun", async () => {
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    if (u.pathname === "/v1/schedules/nightly/run") return json(res, 202, runWire("queued", { id: "run-9", trigger: "manual" }));
    if (u.pathname === "/v1/schedules/nightly/runs") {
      return u.searchParams.get("cursor") === "c2"
        ? json(res, 200, { data: [runWire("missed")], next_cursor: null })
        : json(res, 200, { data: [runWire("running", { id: "run-2", sandbox_id: "sb-7" })], next_cursor: "c2" });
    }
    if (u.pathname === "/v1/schedules/nightly/runs/run-2") {
      return json(res, 200, runWire("failed", { id: "run-2", attempt: 3, exit_code: 2, output: "boom\n", error: "exit 2", started_at: "s", ended_at: "e" }));
    }
    if (u.pathname === "/v1/schedules/busy/run") return json(res, 409, envelope("conflict", "busy"));
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_x", baseUrl: srv.url, maxRetries: 0 });
    const r = await c.schedules.run("nightly");
    assert.deepEqual([r.id, r.state, r.trigger], ["run-9", "queued", "manual"]);
    assert.deepEqual((await c.schedules.runs("nightly", { limit: 1 }).toArray()).map((x) => [x.id, x.state, x.sandboxId]), [
      ["run-2", "running", "sb-7"],
      ["run-1", "missed", null],
    ]);
    assert.deepEqual(await c.schedules.getRun("nightly", "run-2"), {
      id: "run-2", schedule: "nightly", dueAt: "2026-01-02T03:00:00Z", trigger: "scheduled", state: "failed", attempt: 3,
      sandboxId: null, startedAt: "s", endedAt: "e", exitCode: 2, output: "boom\n", error: "exit 2", createdAt: "2026-01-02T03:00:00Z",
    });
    await assert.rejects(c.schedules.run("busy"), ConflictError);
    await assert.rejects(c.schedules.getRun("nightly", ""), InvalidArgumentError);
  } finally {
    await srv.close();
  }
});

const HOST = {
  id: "host-1", name: "node-a", address: "10.0.0.1:7070", state: "ready", epoch: 3,
  lease_expires_at: "2026-01-01T00:00:30Z",
  capacity: { vcpus: 16, memory_mib: 65536, disk_bytes: 1e12, free_slots: 30, creates_in_flight: 1, slots: 32 },
  compat_key: "qemu-9.0/k6.6/x86-64-v3", templates: ["base", "minimal"], sandboxes: 2,
  created_at: "2026-01-01T00:00:00Z", last_seen_at: "2026-01-01T00:00:01Z",
};

test("hosts: list, get, drain, undrain, forget send the documented requests and read hosts", async () => {
  const local = { ...HOST, id: "host-0", name: "local", address: null, lease_expires_at: null, compat_key: null, sandboxes: 0, templates: [] };
  const srv = await mockServer((req, res) => {
    const u = new URL(req.url, "http://x");
    if (req.method === "GET" && u.pathname === "/v1/hosts") return json(res, 200, { data: [local, HOST], next_cursor: null });
    if (req.method === "GET" && u.pathname === "/v1/hosts/host-1") return json(res, 200, { ...HOST, future_field: 1 });
    if (req.method === "GET" && u.pathname === "/v1/hosts/a%2Fb") return json(res, 200, { ...HOST, id: "a/b" });
    if (req.method === "POST" && u.pathname === "/v1/hosts/host-1/drain") return json(res, 200, { ...HOST, state: "draining" });
    if (req.method === "POST" && u.pathname === "/v1/hosts/host-1/undrain") return json(res, 200, HOST);
    if (req.method === "DELETE" && u.pathname === "/v1/hosts/host-2") return res.writeHead(204).end();
    json(res, 404, envelope("host_not_found", "host not found"));
  });
  try {
    const c = new PandaStack({ apiKey: "pds_admin", baseUrl: srv.url, maxRetries: 0 });
    const hosts = await c.hosts.list();
    assert.deepEqual(hosts.map((h) => h.id), ["host-0", "host-1"]);
    assert.deepEqual([hosts[0].address, hosts[0].leaseExpiresAt, hosts[0].compatKey], [null, null, null]);
    assert.deepEqual(await c.hosts.get("host-1"), {
      id: "host-1", name: "node-a", address: "10.0.0.1:7070", state: "ready", epoch: 3,
      capacity: { vcpus: 16, memoryMib: 65536, diskBytes: 1e12, freeSlots: 30, createsInFlight: 1, slots: 32 },
      compatKey: "qemu-9.0/k6.6/x86-64-v3", templates: ["base", "minimal"], sandboxes: 2,
      createdAt: "2026-01-01T00:00:00Z", lastSeenAt: "2026-01-01T00:00:01Z", leaseExpiresAt: "2026-01-01T00:00:30Z",
    });
    assert.equal((await c.hosts.get("a/b")).id, "a/b");
    const missing = await c.hosts.get("host-9").catch((e) => e);
    assert.ok(missing instanceof NotFoundError);
    assert.equal(missing.code, "host_not_found");
    assert.equal((await c.hosts.drain("host-1")).state, "draining");
    assert.equal((await c.hosts.undrain("host-1")).state, "ready");
    assert.equal(await c.hosts.forget("host-2"), true);
    assert.equal(await c.hosts.forget("host-9"), false);
    await assert.rejects(c.hosts.drain(""), InvalidArgumentError);
    assert.deepEqual(
      srv.requests.map((r) => [r.method, r.url, r.body]),
      [
        ["GET", "/v1/hosts", ""],
        ["GET", "/v1/hosts/host-1", ""],
        ["GET", "/v1/hosts/a%2Fb", ""],
        ["GET", "/v1/hosts/host-9", ""],
        ["POST", "/v1/hosts/host-1/drain", ""],
        ["POST", "/v1/hosts/host-1/undrain", ""],
        ["DELETE", "/v1/hosts/host-2", ""],
        ["DELETE", "/v1/hosts/host-9", ""],
      ],
    );
    assert.equal(srv.requests[0].headers.authorization, "Bearer pds_admin");
  } finally {
    await srv.close();
  }
});

test("hosts: a workspace key gets PermissionDeniedError, a host in the wrong state ConflictError, with the server's message", async () => {
  const notDead = "host host-1 is not dead: only a dead host (its lease lapsed) can be forgotten";
  const dead = "host host-2 is dead: only its agent joining again makes it ready";
  const srv = await mockServer((req, res) => {
    if (req.headers.authorization !== "Bearer pds_admin") return json(res, 403, envelope("forbidden", "this route takes an admin key"));
    const u = new URL(req.url, "http://x");
    if (req.method === "DELETE" && u.pathname === "/v1/hosts/host-1") return json(res, 409, envelope("conflict", notDead));
    if (u.pathname.startsWith("/v1/hosts/host-2/")) return json(res, 409, envelope("conflict", dead));
    json(res, 404, envelope("not_found", "no route"));
  });
  try {
    const ws = new PandaStack({ apiKey: "pds_workspace", baseUrl: srv.url, maxRetries: 0 });
    for (const call of [() => ws.hosts.list(), () => ws.hosts.get("host-1"), () => ws.hosts.drain("host-1"), () => ws.hosts.undrain("host-1"), () => ws.hosts.forget("host-1")]) {
      const e = await call().catch((err) => err);
      assert.ok(e instanceof PermissionDeniedError, String(e));
      assert.deepEqual([e.status, e.code, e.requestId], [403, "forbidden", "req_abc"]);
      assert.match(e.message, /admin key/);
    }
    const admin = new PandaStack({ apiKey: "pds_admin", baseUrl: srv.url, maxRetries: 0 });
    const e = await admin.hosts.forget("host-1").catch((err) => err);
    assert.ok(e instanceof ConflictError, String(e));
    assert.deepEqual([e.status, e.code], [409, "conflict"]);
    assert.ok(e.message.includes(notDead), e.message);
    for (const call of [() => admin.hosts.drain("host-2"), () => admin.hosts.undrain("host-2")]) {
      await assert.rejects(call(), (err) => err instanceof ConflictError && err.message.includes(dead));
    }
    assert.equal(srv.requests.length, 8, "no retries of a 403 or 409");
  } finally {
    await srv.close();
  }
});

// sandbox.git's pure part (test/git.test.mjs runs git for real).
test("git: a token goes in the environment of the command only", () => {
  const cmd = gitCommand(["push", "origin", "HEAD"], { token: "s3cret" });
  const basic = Buffer.from("x-access-token:s3cret").toString("base64");
  assert.deepEqual(cmd.argv, ["git", "push", "origin", "HEAD"]);
  assert.deepEqual(
    [cmd.env.GIT_CONFIG_COUNT, cmd.env.GIT_CONFIG_KEY_0, cmd.env.GIT_CONFIG_VALUE_0, cmd.env.GIT_TERMINAL_PROMPT],
    ["1", "http.extraHeader", `Authorization: Basic ${basic}`, "0"],
  );
  assert.deepEqual(cmd.secrets, ["s3cret", basic]);
  assert.equal(gitCommand(["fetch"], { token: "t", username: "me" }).env.GIT_CONFIG_VALUE_0, `Authorization: Basic ${Buffer.from("me:t").toString("base64")}`);
  const plain = gitCommand(["status"]);
  assert.equal(plain.env.GIT_CONFIG_COUNT, undefined);
  assert.equal(plain.env.GIT_TERMINAL_PROMPT, "0");
  for (const bad of [{ token: "" }, { token: "a\nb" }, { username: "u" }, { token: "t", username: "a:b" }]) {
    assert.throws(() => gitCommand(["fetch"], bad), InvalidArgumentError);
  }
  const id = gitCommand(["commit", "-m", "$(rm -rf /)"], {}, true);
  assert.deepEqual([id.argv[0], id.argv[1], id.argv[3], ...id.argv.slice(4)], ["sh", "-c", "git", "commit", "-m", "$(rm -rf /)"]);
  for (const bad of ["", "-x", "--upload-pack=evil"]) assert.throws(() => gitCheckName("branch", bad), InvalidArgumentError);
});

test("git: status porcelain v2 and branches are parsed", () => {
  const out = [
    "# branch.oid " + "1".repeat(40),
    "# branch.head main",
    "# branch.upstream origin/main",
    "# branch.ab +2 -3",
    "1 .M N... 100644 100644 100644 aaaa aaaa a file with spaces.txt",
    "1 A. N... 000000 100644 100644 0000 bbbb new.txt",
    "2 R. N... 100644 100644 100644 cccc cccc R100 renamed.txt",
    "old name.txt",
    "u UU N... 100644 100644 100644 100644 d1 d2 d3 shared.txt",
    "? untracked/",
    "! ignored.log",
    "",
  ].join("\0");
  const st = parseGitStatus(out);
  assert.deepEqual([st.branch, st.commit, st.upstream, st.ahead, st.behind, st.clean], ["main", "1".repeat(40), "origin/main", 2, 3, false]);
  assert.deepEqual(
    st.files.map((f) => [f.path, f.index, f.worktree, f.origPath, f.staged]),
    [
      ["a file with spaces.txt", ".", "M", null, false],
      ["new.txt", "A", ".", null, true],
      ["renamed.txt", "R", ".", "old name.txt", true],
      ["shared.txt", "U", "U", null, false],
      ["untracked/", "?", "?", null, false],
    ],
  );
  assert.deepEqual(st.conflicts, ["shared.txt"]);
  const bare = parseGitStatus("# branch.oid (initial)\0# branch.head (detached)\0");
  assert.deepEqual([bare.branch, bare.commit, bare.upstream, bare.clean], [null, null, null, true]);
  const br = parseGitBranches(" refs/heads/feature\n*refs/heads/main\n refs/remotes/origin/HEAD\n refs/remotes/origin/main\n");
  assert.deepEqual(br, { current: "main", local: ["feature", "main"], remote: ["origin/main"] });
});

test("git: failures map onto GitError, GitAuthError; secrets are redacted", () => {
  const r = (o) => ({ stdout: "", stderr: "", exitCode: 1, timedOut: false, truncated: false, durationMs: 5, ...o });
  let e = gitFailure(["clone", "--", "u", "/p"], r({ stderr: "fatal: could not read Username for 'https://h': terminal prompts disabled\n" }));
  assert.ok(e instanceof GitAuthError && e instanceof PandaStackError);
  assert.deepEqual([e.code, e.command, e.exitCode], ["git_auth_failed", ["git", "clone", "--", "u", "/p"], 1]);
  assert.ok(gitFailure(["push"], r({ stderr: "fatal: unable to access 'x': The requested URL returned error: 403\n" })) instanceof GitAuthError);
  e = gitFailure(["push"], r({ stderr: " ! [rejected]  main -> main (fetch first)\n" }));
  assert.ok(e instanceof GitError && !(e instanceof GitAuthError) && e.message.includes("rejected"));
  e = gitFailure(["push"], r({ stderr: "echoed secret c2VjcmV0" }), ["secret", "c2VjcmV0"]);
  assert.ok(!e.message.includes("secret") && !e.message.includes("c2VjcmV0"), e.message);
  assert.equal(gitFailure(["fetch"], r({ timedOut: true })).code, "git_timeout");
  assert.equal(gitFailure(["status"], r({ exitCode: 127, stderr: "git: command not found" })).code, "git_not_found");
  e = gitFailure(["-c", "user.name=x", "commit", "-m", "m"], r({ stdout: "nothing to commit, working tree clean\n" }));
  assert.equal(e.message, "git commit failed: nothing to commit, working tree clean");
  assert.ok(gitIsConflict(r({ stdout: "CONFLICT (content): Merge conflict in a.txt\nAutomatic merge failed; fix conflicts\n" })));
  assert.ok(!gitIsConflict(r({ stderr: "fatal: boom" })));
});

// ---------------------------------------------------------------- events, webhooks, keys

function wireEvent(i, type = "sandbox.created", id = "sb-1", data = {}) {
  return { id: String(i), type, resource: { kind: type.split(".")[0], id }, at: `2026-01-01T00:00:0${i % 10}Z`, data };
}

function sseFrames(...events) {
  return ": keep-alive\n\n" + events.map((e) => `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("");
}

test("events.list: pages with the filters, read as EventInfo", async () => {
  const srv = await mockServer((req, res) => {
    const cursor = new URL(req.url, "http://x").searchParams.get("cursor");
    if (!cursor) return json(res, 200, { data: [wireEvent(1), wireEvent(2, "sandbox.paused")], next_cursor: "2" });
    json(res, 200, { data: [wireEvent(3, "deploy.phase", "web", { phase: "building" })], next_cursor: null });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const got = await client.events.list({ limit: 2, type: "*", resource: "sb-1" }).toArray();
    assert.deepEqual(got.map((e) => [e.id, e.type]), [["1", "sandbox.created"], ["2", "sandbox.paused"], ["3", "deploy.phase"]]);
    assert.deepEqual(got[2], { id: "3", type: "deploy.phase", resource: { kind: "deploy", id: "web" }, at: "2026-01-01T00:00:03Z", data: { phase: "building" } });
    const qs = srv.requests.map((r) => Object.fromEntries(new URL(r.url, "http://x").searchParams));
    assert.deepEqual(qs, [
      { limit: "2", type: "*", resource: "sb-1" },
      { limit: "2", cursor: "2", type: "*", resource: "sb-1" },
    ]);
  } finally {
    await srv.close();
  }
});

test("events.stream: resumes after the last event seen with Last-Event-ID", async () => {
  const srv = await mockServer((req, res, body, n) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    // Each connection ends after its events: a broken stream, as far as the client knows.
    if (n === 0) res.end(sseFrames(wireEvent(5), wireEvent(6, "sandbox.paused")));
    else res.end(sseFrames(wireEvent(7, "sandbox.killed")));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const got = [];
    for await (const ev of client.events.stream({ after: "4", type: "sandbox.*", retryDelayMs: 0 })) {
      got.push([ev.id, ev.type, ev.resource.id]);
      if (got.length === 3) break;
    }
    assert.deepEqual(got, [["5", "sandbox.created", "sb-1"], ["6", "sandbox.paused", "sb-1"], ["7", "sandbox.killed", "sb-1"]]);
    assert.equal(srv.requests.length, 2);
    const [a, b] = srv.requests;
    assert.equal(a.headers.accept, "text/event-stream");
    assert.equal(a.headers["last-event-id"], "4");
    assert.equal(b.headers["last-event-id"], "6");
    assert.deepEqual(Object.fromEntries(new URL(b.url, "http://x").searchParams), { cursor: "6", type: "sandbox.*" });
  } finally {
    await srv.close();
  }
});

test("events.stream: from now on without a cursor; gives up when it keeps ending; error answers and aborts at once", async () => {
  let mode = "empty";
  const srv = await mockServer((req, res) => {
    if (mode === "401") return json(res, 401, envelope("unauthorized", "bad key"));
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(": keep-alive\n\n");
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    await assert.rejects(
      (async () => {
        for await (const _ of client.events.stream({ retryDelayMs: 0 })) void _;
      })(),
      (e) => e instanceof APIConnectionError && e.code === "stream_incomplete",
    );
    assert.equal(srv.requests.length, 6, "the first connection and five reopenings");
    assert.equal(srv.requests[0].headers["last-event-id"], undefined);
    assert.equal(new URL(srv.requests[0].url, "http://x").search, "");
    mode = "401";
    srv.requests.length = 0;
    await assert.rejects(client.events.stream({ retryDelayMs: 0 }).next(), AuthenticationError);
    assert.equal(srv.requests.length, 1);
    mode = "empty";
    const ctl = new AbortController();
    const it = client.events.stream({ signal: ctl.signal, retryDelayMs: 50 });
    const pending = it.next();
    setTimeout(() => ctl.abort(new Error("stop")), 20);
    await assert.rejects(pending, /stop/);
  } finally {
    await srv.close();
  }
});

const WEBHOOK = { id: "wh_1", url: "https://example.com/hooks", events: ["sandbox.*"], created_at: "2026-01-01T00:00:00Z" };
const DELIVERY = {
  id: "whd_1", webhook_id: "wh_1", event_id: "7", event_type: "sandbox.created", state: "failed", attempts: 8,
  created_at: "2026-01-01T00:00:00Z", delivered_at: null, last_attempt_at: "2026-01-02T00:00:00Z",
  last_error: "HTTP 500", last_status: 500, next_attempt_at: null,
};

test("webhooks: create (secret once), list, get, deliveries, redeliver, delete; errors", async () => {
  const srv = await mockServer((req, res, body) => {
    const path = req.url.split("?")[0];
    if (req.method === "POST" && path === "/v1/webhooks") {
      const b = JSON.parse(body);
      if (b.url.includes("127.0.0.1")) return json(res, 422, envelope("invalid_argument", "url: 127.0.0.1 is a loopback address"));
      return json(res, 201, { ...WEBHOOK, ...b, secret: b.secret ?? "whsec_gen" });
    }
    if (req.method === "GET" && path === "/v1/webhooks") return json(res, 200, { data: [WEBHOOK], next_cursor: null });
    if (req.method === "GET" && path === "/v1/webhooks/wh_1") return json(res, 200, WEBHOOK);
    if (req.method === "GET" && path === "/v1/webhooks/wh_1/deliveries") return json(res, 200, { data: [DELIVERY], next_cursor: null });
    if (req.method === "POST" && path === "/v1/webhooks/wh_1/deliveries/whd_1/redeliver") {
      return json(res, 202, { ...DELIVERY, state: "pending", next_attempt_at: "2026-01-03T00:00:00Z" });
    }
    if (req.method === "DELETE" && path === "/v1/webhooks/wh_1") return res.writeHead(204).end();
    json(res, 404, envelope("not_found", `no webhook at ${path}`));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const wh = await client.webhooks.create({ url: WEBHOOK.url, events: ["sandbox.*"] });
    assert.deepEqual(wh, { id: "wh_1", url: WEBHOOK.url, events: ["sandbox.*"], createdAt: "2026-01-01T00:00:00Z", secret: "whsec_gen" });
    const own = await client.webhooks.create({ url: "https://example.com/x", events: ["*"], secret: "whsec_mine", idempotencyKey: "k-1" });
    assert.equal(own.secret, "whsec_mine");
    const posts = srv.requests.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => JSON.parse(r.body)), [
      { url: WEBHOOK.url, events: ["sandbox.*"] },
      { url: "https://example.com/x", events: ["*"], secret: "whsec_mine" },
    ]);
    assert.ok(posts[0].headers["idempotency-key"]);
    assert.equal(posts[1].headers["idempotency-key"], "k-1");
    await assert.rejects(client.webhooks.create({ url: "http://127.0.0.1/h", events: ["*"] }), (e) => e instanceof InvalidArgumentError && /loopback/.test(e.message));
    const listed = await client.webhooks.list().toArray();
    assert.deepEqual(listed.map((w) => [w.id, w.secret]), [["wh_1", null]]);
    assert.deepEqual(await client.webhooks.get("wh_1"), listed[0]);
    await assert.rejects(client.webhooks.get("wh_2"), NotFoundError);
    const [d] = await client.webhooks.deliveries("wh_1", { limit: 10 }).toArray();
    assert.deepEqual(d, {
      id: "whd_1", webhookId: "wh_1", eventId: "7", eventType: "sandbox.created", state: "failed", attempts: 8,
      createdAt: "2026-01-01T00:00:00Z", deliveredAt: null, lastAttemptAt: "2026-01-02T00:00:00Z",
      lastError: "HTTP 500", lastStatus: 500, nextAttemptAt: null,
    });
    const again = await client.webhooks.redeliver("wh_1", "whd_1");
    assert.deepEqual([again.state, again.nextAttemptAt], ["pending", "2026-01-03T00:00:00Z"]);
    await client.webhooks.delete("wh_1");
    assert.equal(srv.requests.filter((r) => r.method === "DELETE").length, 1);
    assert.ok(srv.requests.some((r) => r.url === "/v1/webhooks/wh_1/deliveries?limit=10"));
  } finally {
    await srv.close();
  }
});

test("keys: list, create with scopes and expiry, revoke; a refused call is PermissionDeniedError naming the scope", async () => {
  const KEY = { id: "key-1", name: "ro", prefix: "pds_ab", created_at: "2026-01-01T00:00:00Z", revoked: false, admin: false, scopes: ["*:read"], expires_at: "2027-01-01T00:00:00.000Z", last_used_at: null };
  const srv = await mockServer((req, res, body) => {
    if (req.method === "GET" && req.url === "/v1/keys") return json(res, 200, { data: [{ ...KEY, last_used_at: "2026-01-01T00:01:00Z" }] });
    if (req.method === "POST" && req.url === "/v1/keys") return json(res, 201, { ...KEY, ...JSON.parse(body), secret: "pds_secret" });
    if (req.method === "DELETE" && req.url === "/v1/keys/key-1") return res.writeHead(204).end();
    if (req.url === "/v1/sandboxes") return json(res, 403, envelope("forbidden", "this key lacks the scope sandboxes:write"));
    json(res, 404, envelope("not_found", "no"));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const k = await client.keys.create({ name: "ro", scopes: ["*:read"], expiresAt: new Date("2027-01-01T00:00:00Z") });
    assert.deepEqual(k, {
      id: "key-1", name: "ro", prefix: "pds_ab", createdAt: "2026-01-01T00:00:00Z", revoked: false, admin: false,
      scopes: ["*:read"], expiresAt: "2027-01-01T00:00:00.000Z", lastUsedAt: null, memberId: null, role: null, secret: "pds_secret",
    });
    assert.deepEqual(JSON.parse(srv.requests[0].body), { name: "ro", scopes: ["*:read"], expires_at: "2027-01-01T00:00:00.000Z" });
    await client.keys.create();
    assert.deepEqual(JSON.parse(srv.requests[1].body), { name: "" });
    const [listed] = await client.keys.list();
    assert.deepEqual([listed.id, listed.scopes, listed.lastUsedAt], ["key-1", ["*:read"], "2026-01-01T00:01:00Z"]);
    await client.keys.revoke("key-1");
    await assert.rejects(
      client.sandboxes.create({ template: "minimal" }),
      (e) => e instanceof PermissionDeniedError && e.status === 403 && e.code === "forbidden" && e.message.includes("sandboxes:write"),
    );
  } finally {
    await srv.close();
  }
});

// ---------------------------------------------------------------- members, audit

const MEMBER = { id: "mem-1", name: "Ada", email: "ada@example.org", role: "developer", created_at: "2026-01-01T00:00:00Z", active_keys: 0 };

test("members: create, list, get, update, delete send the documented requests and read members", async () => {
  const srv = await mockServer((req, res, body) => {
    const path = req.url.split("?")[0];
    if (req.method === "POST" && path === "/v1/members") return json(res, 201, { ...MEMBER, ...JSON.parse(body) });
    if (req.method === "GET" && path === "/v1/members") return json(res, 200, { data: [MEMBER], next_cursor: null });
    if (req.method === "GET" && path === "/v1/members/mem-1") return json(res, 200, { ...MEMBER, active_keys: 2 });
    if (req.method === "PATCH" && path === "/v1/members/mem-1") return json(res, 200, { ...MEMBER, ...JSON.parse(body) });
    if (req.method === "DELETE" && path === "/v1/members/mem-1") return res.writeHead(204).end();
    if (req.method === "POST" && path === "/v1/keys") {
      const b = JSON.parse(body);
      return json(res, 201, {
        id: "key-2", name: b.name, prefix: "pds_cd", created_at: "2026-01-01T00:00:00Z", revoked: false, admin: false,
        scopes: ["*"], expires_at: null, last_used_at: null, member_id: b.member_id, role: "developer", secret: "pds_dev",
      });
    }
    json(res, 404, envelope("not_found", `no member at ${path}`));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const m = await client.members.create({ name: "Ada", email: "ada@example.org", role: "developer" });
    assert.deepEqual(m, { id: "mem-1", name: "Ada", email: "ada@example.org", role: "developer", createdAt: "2026-01-01T00:00:00Z", activeKeys: 0 });
    assert.deepEqual(JSON.parse(srv.requests[0].body), { name: "Ada", email: "ada@example.org", role: "developer" });
    const k = await client.keys.create({ name: "ada", memberId: "mem-1" });
    assert.deepEqual(JSON.parse(srv.requests[1].body), { name: "ada", member_id: "mem-1" });
    assert.deepEqual([k.memberId, k.role, k.secret], ["mem-1", "developer", "pds_dev"]);
    assert.deepEqual(await client.members.list(), [m]);
    assert.equal((await client.members.get("mem-1")).activeKeys, 2);
    const up = await client.members.update("mem-1", { role: "viewer" });
    assert.equal(up.role, "viewer");
    await client.members.update("mem-1", { name: "Ada L." });
    await client.members.update("mem-1");
    const patches = srv.requests.filter((r) => r.method === "PATCH").map((r) => JSON.parse(r.body));
    assert.deepEqual(patches, [{ role: "viewer" }, { name: "Ada L." }, {}]);
    await client.members.delete("mem-1");
    assert.equal(srv.requests.filter((r) => r.method === "DELETE" && r.url === "/v1/members/mem-1").length, 1);
    await assert.rejects(client.members.get("mem-2"), NotFoundError);
  } finally {
    await srv.close();
  }
});

test("members: bad arguments never reach the server; refusals are typed with the server's message", async () => {
  const srv = await mockServer((req, res, body) => {
    if (req.method === "POST" && req.url === "/v1/members") {
      const b = JSON.parse(body);
      if (b.email === "taken@example.org") return json(res, 409, envelope("conflict", "a member with email taken@example.org exists"));
      return json(res, 403, envelope("forbidden", "this key (role developer) lacks the scope members:write"));
    }
    if (req.method === "DELETE") return json(res, 409, envelope("conflict", "the workspace keeps its last owner"));
    if (req.method === "PATCH") return json(res, 403, envelope("forbidden", "only an owner changes an owner"));
    json(res, 404, envelope("not_found", "no"));
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    for (const bad of [
      () => client.members.create({ name: "", email: "a@example.org", role: "viewer" }),
      () => client.members.create({ name: "A", email: 7, role: "viewer" }),
      () => client.members.create({ name: "A", email: "a@example.org", role: "root" }),
      () => client.members.create(),
      () => client.members.get(""),
      () => client.members.update("mem-1", { role: "superuser" }),
      () => client.members.delete(undefined),
      () => client.keys.create({ memberId: "" }),
      () => client.audit.list({ since: new Date("not a date") }),
    ]) {
      await assert.rejects(async () => bad(), InvalidArgumentError);
    }
    assert.equal(srv.requests.length, 0);
    await assert.rejects(
      client.members.create({ name: "T", email: "taken@example.org", role: "viewer" }),
      (e) => e instanceof ConflictError && e.code === "conflict" && /taken@example.org/.test(e.message),
    );
    await assert.rejects(
      client.members.create({ name: "X", email: "x@example.org", role: "viewer" }),
      (e) => e instanceof PermissionDeniedError && e.status === 403 && e.message.includes("members:write"),
    );
    await assert.rejects(client.members.update("mem-0", { role: "admin" }), PermissionDeniedError);
    await assert.rejects(client.members.delete("mem-0"), (e) => e instanceof ConflictError && /last owner/.test(e.message));
  } finally {
    await srv.close();
  }
});

function wireAudit(i, action = "create_member", resource = "members/mem-1") {
  return {
    id: String(i), at: `2026-01-01T00:00:0${i % 10}Z`, key_id: "key-1", key_name: "admin", member_id: i % 2 ? "mem-0" : null,
    action, method: "POST", route: "/v1/members", resource, result: "ok", status: 201, source: "192.0.2.7", request_id: `req_${i}`,
  };
}

test("audit.list: one page or every page, with the filters; since as a Date; refused without audit:read", async () => {
  let refuse = false;
  const srv = await mockServer((req, res) => {
    if (refuse) return json(res, 403, envelope("forbidden", "this key (role developer) lacks the scope audit:read"));
    const cursor = new URL(req.url, "http://x").searchParams.get("cursor");
    if (!cursor) return json(res, 200, { data: [wireAudit(3), wireAudit(2)], next_cursor: "c2" });
    json(res, 200, { data: [wireAudit(1, "create_key", "keys/key-2")], next_cursor: null });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const page = await client.audit.list({ limit: 2 }).firstPage();
    assert.equal(page.nextCursor, "c2");
    assert.deepEqual(page.data[0], {
      id: "3", at: "2026-01-01T00:00:03Z", keyId: "key-1", keyName: "admin", memberId: "mem-0", action: "create_member",
      method: "POST", route: "/v1/members", resource: "members/mem-1", result: "ok", status: 201, source: "192.0.2.7", requestId: "req_3",
    });
    assert.equal(page.data[1].memberId, null);
    const since = new Date("2026-01-01T00:00:00Z");
    const all = await client.audit.list({ limit: 2, keyId: "key-1", resourceId: "mem-1", action: "create_member", since }).toArray();
    assert.deepEqual(all.map((r) => [r.id, r.action, r.resource]), [
      ["3", "create_member", "members/mem-1"],
      ["2", "create_member", "members/mem-1"],
      ["1", "create_key", "keys/key-2"],
    ]);
    const qs = srv.requests.map((r) => Object.fromEntries(new URL(r.url, "http://x").searchParams));
    const filters = { key_id: "key-1", resource_id: "mem-1", action: "create_member", since: "2026-01-01T00:00:00.000Z" };
    assert.deepEqual(qs, [{ limit: "2" }, { limit: "2", ...filters }, { limit: "2", cursor: "c2", ...filters }]);
    await client.audit.list({ since: "2026-01-02T00:00:00Z", cursor: "c9" }).firstPage();
    assert.deepEqual(Object.fromEntries(new URL(srv.requests.at(-1).url, "http://x").searchParams), { cursor: "c9", since: "2026-01-02T00:00:00Z" });
    refuse = true;
    await assert.rejects(
      client.audit.list().firstPage(),
      (e) => e instanceof PermissionDeniedError && e.code === "forbidden" && e.message.includes("audit:read"),
    );
  } finally {
    await srv.close();
  }
});

test("usage: no argument asks for the server's default; from/to/groupBy become the query; usageCsv asks for CSV", async () => {
  const metered = {
    from: "2026-12-01T00:00:00Z", to: "2026-12-04T12:00:00Z", group_by: ["kind"],
    totals: { vcpu_seconds: 12.5, memory_gib_seconds: 1, storage_gib_hours: 0, egress_bytes: 10, ingress_bytes: 0, invocations: 0, invocation_seconds: 0, database_seconds: 0 },
    groups: [],
  };
  const srv = await mockServer((req, res) => {
    if (req.url.includes("format=csv")) {
      res.writeHead(200, { "content-type": "text/csv; charset=utf-8" });
      return res.end("from,to,kind\r\na,b,sandbox\r\n");
    }
    json(res, 200, { sandboxes: { running: 1 }, metered });
  });
  try {
    const client = new PandaStack({ apiKey: "pds_test", baseUrl: srv.url, maxRetries: 0 });
    const u = await client.usage();
    assert.equal(u.metered.totals.vcpu_seconds, 12.5);
    await client.usage({ from: new Date("2026-12-01T00:00:00Z"), to: "2026-12-02T00:00:00Z", groupBy: ["resource", "day"] });
    const text = await client.usageCsv({ groupBy: "kind" });
    assert.equal(text, "from,to,kind\r\na,b,sandbox\r\n");
    const q = srv.requests.map((r) => Object.fromEntries(new URL(r.url, srv.url).searchParams));
    assert.deepEqual(q, [
      {},
      { from: "2026-12-01T00:00:00.000Z", to: "2026-12-02T00:00:00Z", group_by: "resource,day" },
      { group_by: "kind", format: "csv" },
    ]);
    assert.ok(srv.requests.every((r) => r.url.startsWith("/v1/usage")));
  } finally {
    await srv.close();
  }
});
