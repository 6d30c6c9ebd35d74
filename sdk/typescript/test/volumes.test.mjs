// Volumes against real VMs: create/list/get/grow/delete and their errors; the agent workspace
// that survives its sandbox; one read-write mount at a time; volume snapshots; backups restored
// into a new volume.
import { after, test } from "node:test";
import assert from "node:assert/strict";

import { ConflictError, InvalidArgumentError, NotFoundError, VolumeBusyError } from "../dist/index.js";
import { RUN_ID, SandboxGuard } from "./helpers.mjs";

const guard = new SandboxGuard();
const ps = guard.client;

/** Volume names of this run; deleted at the end, after the sandboxes (`after` hooks run in order). */
const names = [];
const volumeName = (what) => {
  const n = `ts-${RUN_ID}-${what}`;
  names.push(n);
  return n;
};
after(async () => {
  await guard.killAll();
  const failed = [];
  for (const n of names) await ps.volumes.delete(n).catch((e) => failed.push(e));
  if (failed.length > 0) throw new AggregateError(failed, "cleanup: some volumes could not be deleted");
});

test("volume create, list, get, grow, delete", async () => {
  const name = volumeName("crud");
  const v = await ps.volumes.create({ name, sizeGb: 1 });
  assert.equal(v.name, name);
  assert.equal(v.sizeGb, 1);
  assert.equal(v.attachedTo, null);
  assert.deepEqual(v.attachments, []);
  assert.ok(v.id && v.host && v.createdAt);
  assert.ok((await ps.volumes.list().toArray()).some((x) => x.name === name));
  assert.equal((await ps.volumes.get(name)).id, v.id);
  assert.equal((await ps.volumes.grow(name, 2)).sizeGb, 2);
  assert.equal(await ps.volumes.delete(name), true);
  const e = await ps.volumes.get(name).catch((x) => x);
  assert.ok(e instanceof NotFoundError, String(e));
  assert.equal(e.code, "volume_not_found");
  assert.equal(await ps.volumes.delete(name), false);
});

test("volume errors: bad name and missing size are 422, a duplicate 409", async () => {
  const bad = await ps.volumes.create({ name: "Not_A_Name", sizeGb: 1 }).catch((e) => e);
  assert.ok(bad instanceof InvalidArgumentError, String(bad));
  assert.equal(bad.status, 422);
  const noSize = await ps.volumes.create({ name: volumeName("nosize") }).catch((e) => e);
  assert.ok(noSize instanceof InvalidArgumentError, String(noSize));
  assert.match(noSize.message, /size_gb/);
  const name = volumeName("dup");
  await ps.volumes.create({ name, sizeGb: 1 });
  const dup = await ps.volumes.create({ name, sizeGb: 1 }).catch((e) => e);
  assert.ok(dup instanceof ConflictError && !(dup instanceof VolumeBusyError), String(dup));
  assert.equal(dup.code, "conflict");
});

test("the workspace survives its sandbox; one read-write mount at a time", async () => {
  const name = volumeName("ws");
  await ps.volumes.create({ name, sizeGb: 1 });
  const first = await guard.create({ volumes: [{ name, path: "/workspace" }] });
  assert.deepEqual(first.volumes, [{ name, path: "/workspace", readOnly: false }]);
  await first.exec("mkdir -p /workspace/repo && echo 'state of the work' > /workspace/repo/notes.txt && sync", { check: true });
  assert.equal((await ps.volumes.get(name)).attachedTo, first.id);

  const busy = await guard.create({ volumes: [{ name, path: "/workspace" }] }).catch((e) => e);
  assert.ok(busy instanceof VolumeBusyError, String(busy));
  assert.equal(busy.status, 409);
  assert.match(busy.message, new RegExp(first.id));
  assert.ok((await ps.volumes.delete(name).catch((e) => e)) instanceof VolumeBusyError);

  await first.kill();
  assert.equal((await ps.volumes.get(name)).attachedTo, null);
  const second = await guard.create({ volumes: [{ name, path: "/home/work" }] });
  assert.equal(await second.files.read("/home/work/repo/notes.txt"), "state of the work\n");
});

test("volume snapshot, and a volume created from it", async () => {
  const name = volumeName("snap");
  await ps.volumes.create({ name, sizeGb: 1 });
  const sb = await guard.create({ volumes: [{ name, path: "/data" }] });
  await sb.exec("echo before > /data/f && sync", { check: true });
  const snap = await ps.volumes.snapshot(name);
  assert.equal(snap.volume, name);
  assert.equal(snap.frozen, true);
  await sb.exec("echo after > /data/f && sync", { check: true });
  assert.ok((await ps.volumes.snapshots(name).toArray()).some((s) => s.id === snap.id));
  const copy = await ps.volumes.create({ name: volumeName("snap-copy"), fromSnapshot: snap.id });
  assert.equal(copy.source, snap.id);
  const reader = await guard.create({ volumes: [{ name: copy.name, path: "/data", readOnly: true }] });
  assert.equal(await reader.files.read("/data/f"), "before\n");
  assert.equal(await ps.volumes.deleteSnapshot(name, snap.id), true);
});

test("backup, wait, restore into a new volume", async () => {
  const name = volumeName("bk");
  await ps.volumes.create({ name, sizeGb: 1 });
  const sb = await guard.create({ volumes: [{ name, path: "/data" }] });
  await sb.exec("head -c 2000000 /dev/urandom > /data/blob && sha256sum /data/blob > /data/sum && sync", { check: true });
  const want = await sb.files.read("/data/sum");
  const started = await ps.volumes.backup(name);
  assert.equal(started.volume, name);
  const done = await ps.volumes.waitBackup(name, started.id, { timeoutSeconds: 600 });
  assert.equal(done.state, "done");
  assert.ok(done.finishedAt);
  await sb.kill();
  assert.equal(await ps.volumes.delete(name), true);
  assert.ok((await ps.volumes.backups(name).toArray()).some((b) => b.id === done.id), "backups outlive their volume");
  const restored = await ps.volumes.create({ name: volumeName("bk-restored"), fromBackup: done.id });
  assert.equal(restored.source, done.id);
  const reader = await guard.create({ volumes: [{ name: restored.name, path: "/data" }] });
  assert.equal(await reader.files.read("/data/sum"), want);
  assert.equal((await reader.exec("sha256sum -c /data/sum")).exitCode, 0);
});
