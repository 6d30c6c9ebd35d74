// Hosts (the operator routes) against a real server: an admin key (PANDASTACK_TEST_ADMIN_KEY, made
// with `pandastack keys create --admin`; scripts/test-clients.sh makes one) sees the single-node
// server's own host, drains and undrains it and cannot forget it (it is not dead); the workspace
// key the other tests use is refused every operator route.
import { test } from "node:test";
import assert from "node:assert/strict";

import { ConflictError, PermissionDeniedError } from "../dist/index.js";
import { SandboxGuard, client } from "./helpers.mjs";

const ADMIN_KEY = process.env.PANDASTACK_TEST_ADMIN_KEY;
if (!ADMIN_KEY) {
  throw new Error(
    "set PANDASTACK_TEST_ADMIN_KEY to an admin key of the server under test " +
      "(`pandastack keys create --admin --data-dir DIR`), or leave test/hosts.test.mjs out",
  );
}

const guard = new SandboxGuard();
const admin = client({ apiKey: ADMIN_KEY });

test("an admin key sees, drains and undrains the server's host", async () => {
  const sb = await guard.create();
  const hosts = await admin.hosts.list();
  assert.equal(hosts.length, 1, JSON.stringify(hosts));
  const h = hosts[0];
  // The single node's in-process host: ready, no address, the sandbox just made on it.
  assert.equal(h.state, "ready");
  assert.ok(h.epoch >= 1);
  assert.equal(h.address, null);
  assert.ok(h.sandboxes >= 1, `sandboxes: ${h.sandboxes}`);
  const got = await admin.hosts.get(h.id);
  assert.deepEqual([got.id, got.name, got.epoch], [h.id, h.name, h.epoch]);
  try {
    assert.equal((await admin.hosts.drain(h.id)).state, "draining");
    assert.equal((await admin.hosts.get(h.id)).state, "draining");
    // A drain is recorded, not a stop: the sandbox on it still runs.
    assert.equal((await sb.exec("echo still")).stdout, "still\n");
  } finally {
    assert.equal((await admin.hosts.undrain(h.id)).state, "ready");
  }
  const e = await admin.hosts.forget(h.id).catch((x) => x);
  assert.ok(e instanceof ConflictError, String(e));
  assert.equal((await admin.hosts.get(h.id)).state, "ready");
  assert.equal(await admin.hosts.forget("no-such-host"), false);
});

test("a workspace key is refused the operator routes", async () => {
  const ps = client();
  for (const call of [() => ps.hosts.list(), () => ps.hosts.drain("any")]) {
    const e = await call().catch((x) => x);
    assert.ok(e instanceof PermissionDeniedError, String(e));
  }
});
