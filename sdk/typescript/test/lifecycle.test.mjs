// Sandbox lifecycle, listing and error mapping against a real server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import {
  PandaStack,
  AuthenticationError,
  NotFoundError,
  InvalidArgumentError,
  ConflictError,
  Sandbox,
} from "../dist/index.js";
import { API_KEY, BASE_URL, RUN_ID, SandboxGuard, TEMPLATE, client } from "./helpers.mjs";

const guard = new SandboxGuard();
const ps = guard.client;

test("create, get, info, update, setTimeout, metrics, logs, kill", async () => {
  const sb = await guard.create({ metadata: { case: "lifecycle" } });
  assert.ok(sb instanceof Sandbox);
  assert.match(sb.id, /^sb-/);
  assert.equal(sb.state, "running");
  assert.equal(sb.template, TEMPLATE);
  assert.equal(sb.data.metadata.case, "lifecycle");
  assert.ok(sb.data.memoryMb > 0);
  assert.ok(sb.data.expiresAt, "a sandbox with a TTL has expiresAt");

  const again = await ps.sandboxes.get(sb.id);
  assert.equal(again.id, sb.id);
  assert.equal(again.state, "running");
  assert.equal((await sb.info()).id, sb.id);
  assert.equal(await sb.isRunning(), true);

  const before = Date.parse(sb.data.expiresAt);
  const info = await sb.setTimeout(3600);
  assert.equal(info.ttlSeconds, 3600);
  assert.ok(Date.parse(info.expiresAt) > before);
  const upd = await sb.update({ metadata: { case: "lifecycle", extra: "1" }, idleTimeoutSeconds: 600 });
  assert.equal(upd.metadata.extra, "1");
  assert.equal(upd.idleTimeoutSeconds, 600);

  const m = await sb.metrics();
  assert.equal(m.state, "running");
  assert.equal(typeof m.raw, "object");

  const logs = await sb.logs();
  assert.equal(typeof logs, "string");

  assert.equal(await sb.kill(), true);
  assert.equal(await sb.kill(), false, "killing twice is not an error");
  await assert.rejects(ps.sandboxes.get(sb.id), (e) => e instanceof NotFoundError && e.code === "sandbox_not_found" && e.status === 404);
  assert.equal(await sb.isRunning(), false);
});

test("metrics: a point of the VM's and the guest's memory within seconds; a bad step is refused", async () => {
  // The server reads every running VM every 5 s.
  const sb = await guard.create({ metadata: { case: "metrics" } });
  const deadline = Date.now() + 25_000;
  let m;
  let points = [];
  for (;;) {
    m = await sb.metrics({ since: "1m", step: 1 });
    points = m.samples.filter((p) => p.memBytes > 0 && (p.memTotalBytes ?? 0) > 0);
    if (points.length > 0 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  assert.equal(m.step, 1);
  assert.equal(m.state, "running");
  assert.ok(m.hostRssBytes > 0);
  assert.ok(points.length > 0, `no point with the VM's and the guest's memory: ${JSON.stringify(m.raw)}`);
  const p = points.at(-1);
  assert.ok(!Number.isNaN(Date.parse(p.t)), p.t);
  assert.ok(p.vcpus >= 1 && p.pssBytes > 0 && p.cpuPct >= 0);
  await assert.rejects(sb.metrics({ step: 0 }), (e) => e instanceof InvalidArgumentError && e.status === 422);
  await assert.rejects(sb.metrics({ since: "7h" }), InvalidArgumentError);
});

test("create-time env reaches every command; exec env overrides it", async () => {
  const sb = await guard.create({ env: { GREETING: "hi", WHO: "sandbox" } });
  assert.equal((await sb.exec("echo $GREETING $WHO")).stdout, "hi sandbox\n");
  assert.equal((await sb.exec("echo $GREETING $WHO", { env: { WHO: "exec" } })).stdout, "hi exec\n");
});

test("list: pagination with limit=1 and a metadata filter", async () => {
  const tag = `page-${RUN_ID}`;
  const made = [];
  for (let i = 0; i < 3; i++) made.push(await guard.create({ metadata: { page: tag, i: String(i) } }));
  await guard.create({ metadata: { page: "someone-else" } });

  const paginator = ps.sandboxes.list({ limit: 1, metadata: { page: tag } });
  const pages = [];
  for await (const page of paginator.pages()) pages.push(page);
  assert.equal(pages.length, 3, "three pages of one");
  for (const p of pages) assert.equal(p.data.length, 1);
  assert.equal(pages[2].nextCursor, null);

  const ids = [];
  for await (const sb of ps.sandboxes.list({ limit: 1, metadata: { page: tag } })) {
    assert.ok(sb instanceof Sandbox);
    ids.push(sb.id);
  }
  assert.deepEqual(ids.sort(), made.map((s) => s.id).sort());

  const running = await ps.sandboxes.list({ state: "running", metadata: { page: tag, i: "1" } }).toArray();
  assert.deepEqual(running.map((s) => s.id), [made[1].id]);
  const none = await ps.sandboxes.list({ state: "hibernated", metadata: { page: tag } }).toArray();
  assert.equal(none.length, 0);
});

test("connect wakes a hibernated sandbox", async () => {
  const sb = await guard.create();
  await sb.hibernate();
  assert.equal(sb.state, "hibernated");
  const c = await ps.sandboxes.connect(sb.id);
  assert.equal(c.state, "running");
  assert.equal((await c.exec("echo up")).stdout, "up\n");
  // A single-host server has nowhere to move it: 409 conflict, and it keeps running.
  await assert.rejects(c.migrate(), (e) => e instanceof ConflictError && e.status === 409 && /single host/.test(e.message));
  assert.equal((await c.exec("echo still")).stdout, "still\n");
});

test("templates list and get", async () => {
  const all = await ps.templates.list().toArray();
  const t = all.find((x) => x.name === TEMPLATE);
  assert.ok(t, `template ${TEMPLATE} is listed`);
  assert.ok(t.memoryMb > 0);
  const one = await ps.templates.get(TEMPLATE);
  assert.equal(one.name, TEMPLATE);
  await assert.rejects(ps.templates.get("no-such-template"), (e) => e instanceof NotFoundError && e.code === "template_not_found");
});

test("error mapping: 401, 404, 422", async () => {
  const bad = new PandaStack({ apiKey: "pds_not_a_real_key", baseUrl: BASE_URL, maxRetries: 0 });
  await assert.rejects(bad.sandboxes.list().toArray(), (e) => {
    assert.ok(e instanceof AuthenticationError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.code, "unauthorized");
    assert.match(e.requestId, /\S/);
    return true;
  });

  await assert.rejects(ps.sandboxes.get("sb-doesnotexist"), (e) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.code, "sandbox_not_found");
    assert.match(e.requestId, /\S/);
    return true;
  });
  await assert.rejects(ps.snapshots.delete("snap-doesnotexist"), (e) => e instanceof NotFoundError && e.code === "snapshot_not_found");

  await assert.rejects(ps.sandboxes.create({ template: TEMPLATE, ttlSeconds: 0 }), (e) => {
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.equal(e.status, 422);
    assert.equal(e.code, "invalid_argument");
    assert.match(e.message, /ttl_seconds/);
    return true;
  });
  await assert.rejects(ps.sandboxes.create({ template: "no-such-template" }), (e) => e instanceof NotFoundError && e.code === "template_not_found");
  await assert.rejects(ps.sandboxes.list({ limit: 0 }).toArray(), (e) => e instanceof InvalidArgumentError && e.status === 422);
});

test("idempotent create: the same key gives the same sandbox", async () => {
  const key = `idem-${RUN_ID}`;
  const a = await guard.create({ idempotencyKey: key });
  const b = await ps.sandboxes.create({ template: TEMPLATE, ttlSeconds: 900, metadata: { "ts-sdk-run": RUN_ID }, idempotencyKey: key });
  guard.track(b);
  assert.equal(a.id, b.id);
});

test("await using kills the sandbox at the end of the block", async () => {
  let supported = true;
  try {
    new Function("return async () => { await using x = null; }");
  } catch {
    supported = false;
  }
  const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "await-using.mjs");
  let mod;
  if (supported) {
    mod = await import(fixture);
  } else {
    // This Node parses no `await using` yet: run the fixture as TypeScript users get it, with
    // the syntax lowered by tsc onto Symbol.asyncDispose (which the SDK guarantees exists).
    const ts = (await import("typescript")).default;
    const src = await readFile(fixture, "utf8");
    const out = ts.transpileModule(src, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } });
    const dir = await mkdtemp(join(tmpdir(), "pandastack-using-"));
    const file = join(dir, "await-using.mjs");
    await writeFile(file, out.outputText);
    try {
      mod = await import(pathToFileURL(file).href);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  const id = await mod.useAndDispose(client(), TEMPLATE, RUN_ID);
  await assert.rejects(ps.sandboxes.get(id), NotFoundError);
});

test("Symbol.asyncDispose called directly kills the sandbox", async () => {
  const sb = await guard.create();
  await sb[Symbol.asyncDispose]();
  await assert.rejects(ps.sandboxes.get(sb.id), NotFoundError);
});

test("token option and env-less construction against the real server", async () => {
  const viaToken = new PandaStack({ token: API_KEY, baseUrl: BASE_URL });
  const page = await viaToken.sandboxes.list({ limit: 1 }).firstPage();
  assert.ok(Array.isArray(page.data));
});
