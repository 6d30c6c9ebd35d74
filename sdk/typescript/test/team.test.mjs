// Members and the audit log against a real server: the workspace key adds an admin member; the
// admin's key adds a developer and a viewer, each with a key of their own (`keys.create({ memberId })`,
// which carries the member's id and role). The developer's key lists sandboxes but is refused the
// audit log, naming `audit:read`; the viewer's key is refused adding a member; the admin's key
// finds the developer's creation in the audit log (`create_member`, resource `members/<id>`).
// A removed member's key stops working (401). Nothing here boots a VM.
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { AuthenticationError, NotFoundError, PandaStack, PermissionDeniedError } from "../dist/index.js";
import { BASE_URL, RUN_ID, client } from "./helpers.mjs";

const c = client();
/** Every member made here, removed when the file ends (a member already gone is fine). */
const made = [];
after(async () => {
  for (const id of made.splice(0)) {
    await c.members.delete(id).catch((e) => {
      if (!(e instanceof NotFoundError)) throw e;
    });
  }
});

/** A member with `role` made by `by`, and a client with a new key of theirs. */
async function memberWithKey(by, role) {
  const email = `tssdk-${role}-${RUN_ID}@example.org`;
  const m = await by.members.create({ name: `tssdk ${role}`, email, role });
  made.push(m.id);
  assert.deepEqual([m.email, m.role, m.activeKeys], [email, role, 0]);
  const key = await by.keys.create({ name: `tssdk-${role}`, memberId: m.id });
  assert.deepEqual([key.memberId, key.role], [m.id, role]);
  assert.ok(key.secret);
  return { member: m, key, client: new PandaStack({ apiKey: key.secret, baseUrl: BASE_URL, maxRetries: 0 }) };
}

test("members' keys do what their roles allow; the audit log records who added whom", async () => {
  const admin = await memberWithKey(c, "admin");
  const dev = await memberWithKey(admin.client, "developer");
  const viewer = await memberWithKey(admin.client, "viewer");

  assert.equal((await c.members.get(dev.member.id)).activeKeys, 1);
  const listed = (await c.members.list()).filter((m) => made.includes(m.id));
  assert.deepEqual(listed.map((m) => m.role).sort(), ["admin", "developer", "viewer"]);
  assert.equal((await c.keys.list()).find((k) => k.id === dev.key.id)?.role, "developer");

  // A developer uses resources but may not read the audit log.
  assert.ok(Array.isArray(await dev.client.sandboxes.list({ metadata: { "ts-sdk-run": RUN_ID } }).toArray()));
  await assert.rejects(
    dev.client.audit.list().firstPage(),
    (e) => e instanceof PermissionDeniedError && e.status === 403 && e.message.includes("audit:read"),
  );
  // A viewer may not manage members.
  await assert.rejects(
    viewer.client.members.create({ name: "nope", email: `tssdk-nope-${RUN_ID}@example.org`, role: "viewer" }),
    PermissionDeniedError,
  );

  // The admin's key reads the audit log; a call is recorded off its request's path, so wait a little.
  let row;
  for (let i = 0; i < 50 && !row; i++) {
    const rows = await admin.client.audit.list({ action: "create_member", resourceId: dev.member.id }).toArray(10);
    row = rows.find((r) => r.resource === `members/${dev.member.id}`);
    if (!row) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(row, "the developer's creation is in the audit log");
  assert.deepEqual(
    [row.action, row.result, row.status, row.keyId, row.memberId, row.method],
    ["create_member", "ok", 201, admin.key.id, admin.member.id, "POST"],
  );
  assert.ok(row.at && row.requestId);

  // A role change applies to the member's keys at once; removing the member revokes them.
  assert.equal((await c.members.update(viewer.member.id, { role: "developer" })).role, "developer");
  assert.equal((await c.keys.list()).find((k) => k.id === viewer.key.id)?.role, "developer");
  await c.members.delete(dev.member.id);
  await assert.rejects(dev.client.sandboxes.list().firstPage(), AuthenticationError);
  await assert.rejects(c.members.get(dev.member.id), NotFoundError);
});
