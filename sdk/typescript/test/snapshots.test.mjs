// Fork, snapshot, hibernate/wake and pause/resume against real VMs.
import { test } from "node:test";
import assert from "node:assert/strict";

import { ConflictError, NotFoundError, Sandbox } from "../dist/index.js";
import { RUN_ID, SandboxGuard, TEMPLATE } from "./helpers.mjs";

const guard = new SandboxGuard();
const ps = guard.client;

test("fork: children start from the parent's state and are isolated", async () => {
  const parent = await guard.create({ metadata: { case: "fork" } });
  await parent.files.write("/root/state.txt", "parent");
  await parent.exec("python3 -c \"open('/tmp/mem','w').write('x')\"");

  const kids = await parent.fork(2);
  kids.forEach((k) => guard.track(k));
  assert.equal(kids.length, 2);
  for (const k of kids) {
    assert.ok(k instanceof Sandbox);
    assert.notEqual(k.id, parent.id);
    assert.equal(k.state, "running");
    assert.ok(k.data.snapshotId, "a child names the snapshot it came from");
    assert.equal(await k.files.read("/root/state.txt"), "parent");
  }

  await kids[0].files.write("/root/state.txt", "child0");
  await kids[1].exec("rm /root/state.txt");
  await parent.files.write("/root/state.txt", "parent2");
  assert.equal(await kids[0].files.read("/root/state.txt"), "child0");
  assert.equal(await kids[1].files.exists("/root/state.txt"), false);
  assert.equal(await parent.files.read("/root/state.txt"), "parent2");

  const one = guard.track(await parent.fork());
  assert.ok(one instanceof Sandbox);
  assert.equal(await one.files.read("/root/state.txt"), "parent2");
  assert.equal(one.metadata.case, "fork", "children inherit metadata by default");

  const detailed = await parent.forkDetailed(1, { metadata: { case: "fork-child", "ts-sdk-run": RUN_ID } });
  detailed.children.forEach((k) => guard.track(k));
  assert.equal(detailed.parentId, parent.id);
  assert.match(detailed.snapshotId, /^snap-/);
  assert.equal(detailed.children[0].metadata.case, "fork-child");
});

test("snapshot, create from it, list and delete snapshots", async () => {
  const sb = await guard.create({ metadata: { case: "snapshot" } });
  await sb.files.write("/root/snap.txt", "before snapshot");
  const snap = await sb.snapshot();
  assert.match(snap.id, /^snap-/);
  assert.equal(snap.sandboxId, sb.id);
  assert.ok(snap.sizeBytes >= 0);
  await sb.files.write("/root/snap.txt", "after snapshot");

  const restored = await guard.create({ snapshotId: snap.id });
  assert.equal(restored.data.snapshotId, snap.id);
  assert.equal(restored.template, TEMPLATE);
  assert.equal(await restored.files.read("/root/snap.txt"), "before snapshot");
  assert.equal((await restored.exec("echo restored")).stdout, "restored\n");

  const listed = await ps.snapshots.list().toArray();
  assert.ok(listed.some((s) => s.id === snap.id));
  const pages = [];
  for await (const p of ps.snapshots.list({ limit: 1 }).pages()) pages.push(p);
  assert.equal(pages.length, listed.length);

  await ps.snapshots.delete(snap.id);
  assert.ok(!(await ps.snapshots.list().toArray()).some((s) => s.id === snap.id));
  // A sandbox made from a deleted snapshot keeps working.
  assert.equal((await restored.exec("cat /root/snap.txt")).stdout, "before snapshot");
  await assert.rejects(ps.snapshots.delete(snap.id), NotFoundError);
  await assert.rejects(guard.create({ snapshotId: snap.id }), (e) => e instanceof NotFoundError && e.code === "snapshot_not_found");
});

test("hibernate and wake keep memory and disk; any call auto-wakes", async () => {
  const sb = await guard.create({ metadata: { case: "hibernate" } });
  await sb.files.write("/root/h.txt", "kept on disk");
  // A process started before hibernation is still there after waking (memory is kept).
  await sb.exec("nohup sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/sleeper.pid");
  const pid = (await sb.files.read("/tmp/sleeper.pid")).trim();

  await sb.hibernate();
  assert.equal(sb.state, "hibernated");
  assert.equal((await ps.sandboxes.get(sb.id)).state, "hibernated");
  const hibernated = await ps.sandboxes.list({ state: "hibernated", metadata: { case: "hibernate", "ts-sdk-run": RUN_ID } }).toArray();
  assert.deepEqual(hibernated.map((s) => s.id), [sb.id]);

  await sb.wake();
  assert.equal(sb.state, "running");
  assert.equal(await sb.files.read("/root/h.txt"), "kept on disk");
  assert.equal((await sb.exec(`test -d /proc/${pid} && echo alive`)).stdout, "alive\n");

  await sb.hibernate();
  // No explicit wake: exec wakes it.
  const r = await sb.exec("cat /root/h.txt");
  assert.equal(r.stdout, "kept on disk");
  assert.equal((await sb.info()).state, "running");

  await sb.hibernate();
  // Files wake it too.
  assert.equal(await sb.files.read("/root/h.txt"), "kept on disk");
  assert.equal((await sb.info()).state, "running");
});

test("pause and resume", async () => {
  const sb = await guard.create({ metadata: { case: "pause" } });
  await sb.pause();
  assert.equal(sb.state, "paused");
  assert.equal((await sb.info()).state, "paused");
  // A paused sandbox does not run commands until resumed (it is not auto-resumed).
  await assert.rejects(sb.exec("echo x"), (e) => e instanceof ConflictError && e.status === 409 && e.code === "sandbox_state");
  await sb.resume();
  assert.equal(sb.state, "running");
  assert.equal((await sb.exec("echo back")).stdout, "back\n");
  await sb.resume(); // idempotent
  assert.equal(sb.state, "running");
});
