// Events, webhooks and scoped keys against a real server: a sandbox's create is a
// `sandbox.created` event that `events.list` and `events.stream` (resumed from the start) both
// show; a webhook is created (its secret shown once), listed, fetched and deleted; a read-only
// key lists sandboxes but is refused a create, naming `sandboxes:write`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import { NotFoundError, PandaStack, PermissionDeniedError } from "../dist/index.js";
import { BASE_URL, RUN_ID, SandboxGuard, TEMPLATE, TEST_TTL_SECONDS, client } from "./helpers.mjs";

const c = client();
const guard = new SandboxGuard(c);

test("a create is a sandbox.created event, listed and streamed; a pause reaches the open stream", async () => {
  const sb = await guard.create();
  const listed = await c.events.list({ type: "sandbox.created", resource: sb.id }).toArray();
  assert.deepEqual(listed.map((e) => [e.type, e.resource.kind, e.resource.id]), [["sandbox.created", "sandbox", sb.id]]);
  const [ev] = listed;
  assert.equal(ev.data.template, TEMPLATE);
  assert.ok(Number(ev.id) > 0 && ev.at);
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new Error("no event streamed within 30 s")), 30_000);
  try {
    const seen = [];
    for await (const e of c.events.stream({ after: "0", resource: sb.id, signal: ctl.signal })) {
      seen.push([e.type, e.data.from ?? null, e.data.to ?? null]);
      if (seen.length === 1) {
        assert.equal(e.id, ev.id);
        // A change made while the stream waits reaches it.
        await sb.pause();
      } else break;
    }
    assert.deepEqual(seen, [["sandbox.created", null, null], ["sandbox.paused", "running", "paused"]]);
  } finally {
    clearTimeout(timer);
  }
});

test("a webhook is created, listed, fetched and deleted", async () => {
  const url = `https://example.com/pandastack-sdk-test/${randomUUID().slice(0, 8)}`;
  // A type the test never causes, so nothing is sent to example.com.
  const wh = await c.webhooks.create({ url, events: ["schedule.failed"] });
  try {
    assert.ok(wh.id.startsWith("wh_"));
    assert.deepEqual([wh.url, wh.events], [url, ["schedule.failed"]]);
    assert.ok(wh.secret?.startsWith("whsec_"));
    const listed = (await c.webhooks.list().toArray()).find((w) => w.id === wh.id);
    assert.ok(listed);
    assert.equal(listed.secret, null);
    const got = await c.webhooks.get(wh.id);
    assert.deepEqual([got.url, got.events, got.secret], [url, ["schedule.failed"], null]);
    assert.deepEqual(await c.webhooks.deliveries(wh.id).toArray(), []);
  } finally {
    await c.webhooks.delete(wh.id);
  }
  await assert.rejects(c.webhooks.get(wh.id), NotFoundError);
});

test("a read-only key lists sandboxes but is refused a create, naming sandboxes:write", async () => {
  const key = await c.keys.create({ name: "tssdk-read-only", scopes: ["*:read"] });
  try {
    assert.deepEqual(key.scopes, ["*:read"]);
    assert.ok(key.secret);
    const ro = new PandaStack({ apiKey: key.secret, baseUrl: BASE_URL, maxRetries: 0 });
    await ro.sandboxes.list({ metadata: { "ts-sdk-run": RUN_ID } }).toArray();
    await assert.rejects(
      ro.sandboxes.create({ template: TEMPLATE, ttlSeconds: TEST_TTL_SECONDS, metadata: { "ts-sdk-run": RUN_ID } }),
      (e) => e instanceof PermissionDeniedError && e.status === 403 && e.code === "forbidden" && e.message.includes("sandboxes:write"),
    );
    // The server records a key's use off the request's path: wait a little for it.
    let listed;
    for (let i = 0; i < 50; i++) {
      listed = (await c.keys.list()).find((k) => k.id === key.id);
      if (listed?.lastUsedAt) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(listed && listed.lastUsedAt !== null, "the key's use is recorded");
    assert.deepEqual(listed.scopes, ["*:read"]);
  } finally {
    await c.keys.revoke(key.id);
  }
});
