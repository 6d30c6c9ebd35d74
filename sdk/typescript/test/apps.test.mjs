// Apps against a real server, only what needs no VM: an app created without its first deploy
// (`deploy: false`), read back by name and by id, listed, updated (environment and scaling),
// refused for a bad field or a name in use, with no deploys; deploys (from git and uploaded) to
// an unknown app refused; custom domains set, refused (bad, or another app's) and removed; then
// deleted, after which it is AppNotFoundError. Builds and deploys need the `app` template and minutes of VM time: the
// server's own end-to-end tests cover them.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { AppNotFoundError, ConflictError, InvalidArgumentError, NotFoundError } from "../dist/index.js";
import { RUN_ID, client } from "./helpers.mjs";

const ps = client();
const name = `ts-${RUN_ID}`;
const GIT = "https://git.example.invalid/pandastack/web.git";

describe("apps", () => {
  let app;

  after(async () => {
    // Also after a failed test: nothing this run made may outlive it.
    await ps.apps.delete(name);
    await ps.apps.delete(`${name}-dom`);
    await ps.apps.delete(`${name}-dom2`);
  });

  test("created without a deploy", async () => {
    app = await ps.apps.create({
      name, git: GIT, ref: "main", env: { GREETING: "hello" }, secrets: { API_TOKEN: "t0ken" }, start: { port: 3000 }, deploy: false,
    });
    assert.equal(app.name, name);
    assert.ok(app.id && app.url.includes(name) && app.webhookSecret && app.createdAt && app.updatedAt);
    assert.deepEqual(app.git, { url: GIT, ref: "main" });
    assert.deepEqual([app.env, app.secretNames], [{ GREETING: "hello" }, ["API_TOKEN"]]);
    assert.deepEqual([app.start.port, app.build.command], [3000, null]);
    assert.deepEqual([app.memoryMb, app.minInstances, app.idleSeconds, app.healthPath], [1024, 0, 300, "/"]);
    assert.deepEqual([app.liveDeploy, app.instanceState], [null, null]);
    assert.deepEqual(await ps.apps.deploys(name).toArray(), []);
  });

  test("found by name and by id, and listed", async () => {
    assert.equal((await ps.apps.get(name)).id, app.id);
    assert.equal((await ps.apps.get(app.id)).name, name);
    assert.ok((await ps.apps.list().toArray()).some((a) => a.name === name));
    assert.ok((await ps.apps.list({ limit: 1 }).toArray()).some((a) => a.name === name), "found across pages");
  });

  test("update the environment and the scaling", async () => {
    const u = await ps.apps.update(name, { env: { GREETING: "hi", MODE: "test" }, minInstances: 1, idleSeconds: 60 });
    assert.deepEqual(u.env, { GREETING: "hi", MODE: "test" });
    assert.deepEqual([u.minInstances, u.idleSeconds], [1, 60]);
    assert.deepEqual([u.secretNames, u.git], [["API_TOKEN"], app.git], "what was not given stays");
    const again = await ps.apps.get(name);
    assert.deepEqual([again.env, again.minInstances], [u.env, 1]);
    const back = await ps.apps.update(name, { minInstances: 0, build: { command: "npm run build" } });
    assert.deepEqual([back.minInstances, back.build.command], [0, "npm run build"]);
  });

  test("refusals: a name in use, a bad field, an unknown app", async () => {
    await assert.rejects(ps.apps.create({ name, git: GIT, deploy: false }), ConflictError);
    const bad = await ps.apps.update(name, { memoryMb: 100 }).catch((e) => e);
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    assert.equal(bad.status, 422);
    assert.match(bad.message, /memory_mb/);
    await assert.rejects(ps.apps.create({ name: `${name}-bad`, git: "ftp://example/x.git", deploy: false }), InvalidArgumentError);
    const nf = await ps.apps.get(`nope-${RUN_ID}`).catch((e) => e);
    assert.ok(nf instanceof AppNotFoundError, String(nf));
    assert.deepEqual([nf.status, nf.code], [404, "app_not_found"]);
    await assert.rejects(ps.apps.deploy(`nope-${RUN_ID}`), AppNotFoundError);
    const dir = await mkdtemp(join(tmpdir(), "pandastack-app-"));
    try {
      await writeFile(join(dir, "index.html"), "hello");
      // The upload is read and dropped.
      await assert.rejects(ps.apps.deployDirectory(`nope-${RUN_ID}`, dir), AppNotFoundError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("custom domains: set, refused when bad or another app's, removed", async () => {
    const dom = `${name}-dom`;
    const other = `${name}-dom2`;
    const domain = `${dom}.example.test`;
    const a = await ps.apps.create({ name: dom, git: GIT, deploy: false, domains: [domain] });
    // The client suite's server has no TLS listener: no certificate, and no error.
    assert.deepEqual(a.domains, [{ name: domain, tls: "none", tlsExpiresAt: null, tlsError: null }]);
    assert.deepEqual((await ps.apps.get(dom)).domains, a.domains);
    const taken = await ps.apps.create({ name: other, git: GIT, deploy: false, domains: [domain] }).catch((e) => e);
    assert.ok(taken instanceof ConflictError, String(taken));
    assert.equal(taken.status, 409);
    // A refused domain refuses the app: nothing is left behind.
    await assert.rejects(ps.apps.get(other), AppNotFoundError);
    const bad = await ps.apps.update(dom, { domains: [`ok-${domain}`, "Not A Domain"] }).catch((e) => e);
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    assert.equal(bad.status, 422);
    assert.match(bad.message, /domains\[1\]/);
    assert.deepEqual((await ps.apps.get(dom)).domains, a.domains, "a refused update changes nothing");
    assert.deepEqual((await ps.apps.update(dom, { minInstances: 0 })).domains, a.domains, "not given: they stay");
    assert.deepEqual((await ps.apps.update(dom, { domains: [] })).domains, []);
    assert.deepEqual((await ps.apps.get(dom)).domains, []);
    const b = await ps.apps.create({ name: other, git: GIT, deploy: false, domains: [domain] }); // free again
    assert.deepEqual(b.domains.map((d) => d.name), [domain]);
  });

  test("delete, then it is gone", async () => {
    assert.equal(await ps.apps.delete(name), true);
    const e = await ps.apps.get(name).catch((x) => x);
    assert.ok(e instanceof AppNotFoundError && e instanceof NotFoundError, String(e));
    assert.equal(await ps.apps.delete(name), false);
  });
});
