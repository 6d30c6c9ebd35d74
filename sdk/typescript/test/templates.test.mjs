// Template builds against a real server: a `docker save` tarball written here (a minimal ustar
// writer, no dependency) from the host's static busybox (`busybox-static`, installed by
// scripts/setup-host.sh) is built, followed to `ready`, run as a sandbox (its file and the
// image's `Env` are there) and deleted; a garbage tarball's build fails with TemplateBuildError.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { NotFoundError, TemplateBuildError, isBuilding } from "../dist/index.js";
import { SandboxGuard } from "./helpers.mjs";

const BUSYBOX = "/bin/busybox";
/** Upload, unpack and a cold-boot bake under TCG take seconds; this bounds a stuck build. */
const BUILD_TIMEOUT_SECONDS = 240;

const guard = new SandboxGuard();
const ps = guard.client;
const made = [];
after(async () => {
  // Never masks a test's own outcome (e.g. a build still under way refuses deletion).
  for (const name of made) await ps.templates.delete(name).catch(() => undefined);
});

function unique(prefix) {
  const name = `${prefix}-${randomBytes(5).toString("hex")}`;
  made.push(name);
  return name;
}

/**
 * A ustar archive of `entries` ({ name, type: "0" file | "2" symlink | "5" dir, mode, data?,
 * link? }): 512-byte headers with octal fields and checksum, data padded to 512, two zero blocks.
 */
function ustar(entries) {
  const octal = (n, width) => `${n.toString(8).padStart(width - 1, "0")}\0`;
  const parts = [];
  for (const e of entries) {
    const data = e.data ?? Buffer.alloc(0);
    const h = Buffer.alloc(512);
    h.write(e.name, 0, 100, "utf8");
    h.write(octal(e.mode, 8), 100, "ascii");
    h.write(octal(0, 8), 108, "ascii"); // uid
    h.write(octal(0, 8), 116, "ascii"); // gid
    h.write(octal(data.length, 12), 124, "ascii");
    h.write(octal(1_700_000_000, 12), 136, "ascii"); // mtime
    h.write("        ", 148, "ascii"); // checksum: spaces while summing
    h.write(e.type, 156, "ascii");
    if (e.link) h.write(e.link, 157, 100, "utf8");
    h.write("ustar\0", 257, "ascii");
    h.write("00", 263, "ascii");
    h.write("root", 265, "ascii");
    h.write("root", 297, "ascii");
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
    parts.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** A `docker save` tarball: one layer with busybox, `sh` and `cat` linked to it and `/hello.txt`; the config's `Env` sets GREETING. */
async function dockerSave() {
  const busybox = await readFile(BUSYBOX).catch((e) => {
    throw new Error(`${BUSYBOX} is missing: install busybox-static (scripts/setup-host.sh): ${e.message}`);
  });
  const layer = ustar([
    { name: "bin/", type: "5", mode: 0o755 },
    { name: "bin/busybox", type: "0", mode: 0o755, data: busybox },
    { name: "bin/sh", type: "2", mode: 0o777, link: "busybox" },
    { name: "bin/cat", type: "2", mode: 0o777, link: "busybox" },
    { name: "hello.txt", type: "0", mode: 0o644, data: Buffer.from("hello from the image\n") },
  ]);
  const manifest = [{ Config: "config.json", Layers: ["l1/layer.tar"] }];
  const config = { config: { Env: ["PATH=/bin", "GREETING=hi"] } };
  return ustar([
    { name: "manifest.json", type: "0", mode: 0o644, data: Buffer.from(JSON.stringify(manifest)) },
    { name: "config.json", type: "0", mode: 0o644, data: Buffer.from(JSON.stringify(config)) },
    { name: "l1/", type: "5", mode: 0o755 },
    { name: "l1/layer.tar", type: "0", mode: 0o644, data: layer },
  ]);
}

test("build a busybox tarball from a path, run it, delete it", async () => {
  const name = unique("ts-bb");
  const dir = await mkdtemp(join(tmpdir(), "pandastack-ts-tpl-"));
  try {
    const file = join(dir, "busybox.tar");
    await writeFile(file, await dockerSave());
    const pieces = [];
    const t = await ps.templates.build({
      name,
      tarball: file, // streamed from disk
      memoryMb: 256,
      description: "busybox from the TypeScript SDK tests",
      onLog: (s) => pieces.push(s),
      timeoutSeconds: BUILD_TIMEOUT_SECONDS,
    });
    assert.deepEqual([t.name, t.state, t.source, t.version, t.readyVersion, t.error], [name, "ready", "oci", 1, 1, null]);
    assert.equal(t.memoryMb, 256);
    assert.ok(!isBuilding(t));
    assert.ok(t.bakeMs > 0 && t.imageBytes > 0 && t.createdAt, JSON.stringify(t));
    const log = pieces.join("");
    assert.match(log, /ready/);
    assert.equal(await ps.templates.logs(name), log);
    assert.equal(await ps.templates.logs(name, { version: 1 }), log);
    const got = await ps.templates.get(name);
    assert.deepEqual([got.state, got.description], ["ready", "busybox from the TypeScript SDK tests"]);
    assert.ok((await ps.templates.list().toArray()).some((x) => x.name === name));

    const sb = await guard.create({ template: name });
    const r = await sb.exec(["/bin/sh", "-c", "cat /hello.txt; echo $GREETING"]);
    assert.deepEqual([r.exitCode, r.stdout], [0, "hello from the image\nhi\n"], JSON.stringify(r));
    assert.equal(await sb.kill(), true);

    assert.equal(await ps.templates.delete(name), true);
    await assert.rejects(ps.templates.get(name), (e) => e instanceof NotFoundError && e.code === "template_not_found");
    assert.equal(await ps.templates.delete(name), false);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a garbage tarball's build fails with TemplateBuildError", async () => {
  const name = unique("ts-junk");
  await assert.rejects(
    ps.templates.build({ name, tarball: new Blob([Buffer.from("not a tarball at all ".repeat(100))]), timeoutSeconds: BUILD_TIMEOUT_SECONDS }),
    (e) => {
      assert.ok(e instanceof TemplateBuildError, String(e));
      assert.equal(e.template.name, name);
      assert.equal(e.template.state, "failed");
      assert.ok(e.error && e.message.includes(e.error), e.message);
      return true;
    },
  );
  assert.equal((await ps.templates.get(name)).state, "failed");
  assert.match(await ps.templates.logs(name), /failed/);
  assert.equal(await ps.templates.delete(name), true);
});
