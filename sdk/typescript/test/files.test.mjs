// Files in a real sandbox: text, binary, a 20 MiB file, directory operations, local transfer.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { NotFoundError, InvalidArgumentError } from "../dist/index.js";
import { SandboxGuard, sha256Hex } from "./helpers.mjs";

const guard = new SandboxGuard();
let sb;
let local;

before(async () => {
  sb = await guard.create({ metadata: { case: "files" } });
  local = await mkdtemp(join(tmpdir(), "pandastack-ts-"));
});
after(async () => {
  if (local) await rm(local, { recursive: true, force: true });
});

test("text round trip (the API.md snippet) and UTF-8", async () => {
  await sb.filesystem.write("/tmp/notes.txt", "hello");
  assert.equal(await sb.filesystem.read("/tmp/notes.txt"), "hello");
  const text = "grüße, 世界 🐼\nsecond line\n";
  const w = await sb.files.write("/tmp/utf8.txt", text);
  assert.equal(w.bytesWritten, Buffer.byteLength(text));
  assert.equal(await sb.files.read("/tmp/utf8.txt"), text);
  assert.equal((await sb.exec("cat /tmp/utf8.txt")).stdout, text);
  // Files written by commands are readable too.
  await sb.exec("printf 'from exec' > /tmp/fromexec");
  assert.equal(await sb.files.read("/tmp/fromexec"), "from exec");
  await sb.files.write("/tmp/empty", "");
  assert.equal(await sb.files.read("/tmp/empty"), "");
});

test("binary 0..255 round trip", async () => {
  const bytes = new Uint8Array(256 * 4);
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256;
  await sb.files.write("/tmp/bin", bytes);
  const back = await sb.files.readBytes("/tmp/bin");
  assert.ok(back instanceof Uint8Array);
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
  const inGuest = await sb.exec("sha256sum /tmp/bin | cut -d' ' -f1");
  assert.equal(inGuest.stdout.trim(), await sha256Hex(bytes));
  // ArrayBuffer and Blob bodies work as well.
  await sb.files.write("/tmp/ab", bytes.buffer);
  assert.deepEqual(Buffer.from(await sb.files.readBytes("/tmp/ab")), Buffer.from(bytes));
  await sb.files.write("/tmp/blob", new Blob([bytes]));
  assert.deepEqual(Buffer.from(await sb.files.readBytes("/tmp/blob")), Buffer.from(bytes));
});

test("20 MiB file: write, read back, sha256 on both sides", async () => {
  const big = randomBytes(20 * 1024 * 1024);
  const want = await sha256Hex(big);
  const w = await sb.files.write("/tmp/big.bin", big);
  assert.equal(w.bytesWritten, big.length);
  const inGuest = await sb.exec("sha256sum /tmp/big.bin | cut -d' ' -f1", { timeoutSeconds: 120 });
  assert.equal(inGuest.stdout.trim(), want);
  const back = await sb.files.readBytes("/tmp/big.bin");
  assert.equal(back.length, big.length);
  assert.equal(await sha256Hex(back), want);
  const st = await sb.files.stat("/tmp/big.bin");
  assert.equal(st.size, big.length);
});

test("upload and download stream local files", async () => {
  const src = join(local, "up.bin");
  const data = randomBytes(3 * 1024 * 1024 + 17);
  await writeFile(src, data);
  const up = await sb.files.upload(src, "/tmp/up/nested/up.bin");
  assert.equal(up.bytesWritten, data.length);
  const dst = join(local, "down.bin");
  const n = await sb.files.download("/tmp/up/nested/up.bin", dst);
  assert.equal(n, data.length);
  assert.equal(await sha256Hex(await readFile(dst)), await sha256Hex(data));
  await assert.rejects(sb.files.download("/tmp/does-not-exist", join(local, "x")), NotFoundError);
  await assert.rejects(stat(join(local, "x")), { code: "ENOENT" });
});

test("readStream gives a byte stream", async () => {
  await sb.files.write("/tmp/stream.txt", "a".repeat(100_000));
  const stream = await sb.files.readStream("/tmp/stream.txt");
  let total = 0;
  for await (const chunk of stream) total += chunk.length;
  assert.equal(total, 100_000);
});

test("mkdir, list, stat, exists, rename, remove", async () => {
  const fs = sb.filesystem;
  await fs.mkdir("/tmp/tree/a/b");
  assert.equal((await fs.stat("/tmp/tree/a/b")).type, "dir");
  await fs.write("/tmp/tree/a/one.txt", "1");
  await fs.write("/tmp/tree/two.txt", "22");

  const top = await fs.list("/tmp/tree");
  assert.deepEqual(top.map((e) => e.name).sort(), ["a", "two.txt"]);
  const two = top.find((e) => e.name === "two.txt");
  assert.equal(two.type, "file");
  assert.equal(two.size, 2);
  assert.equal(two.path, "/tmp/tree/two.txt");
  const deep = await fs.list("/tmp/tree", { depth: 3 });
  assert.ok(deep.some((e) => e.path === "/tmp/tree/a/one.txt"), JSON.stringify(deep.map((e) => e.path)));
  assert.ok(deep.some((e) => e.path === "/tmp/tree/a/b" && e.type === "dir"));
  // A search by name at every depth listed.
  const found = await fs.list("/tmp/tree", { depth: 3, pattern: "o*.txt" });
  assert.deepEqual(found.map((e) => e.path), ["/tmp/tree/a/one.txt"]);

  const st = await fs.stat("/tmp/tree/a/one.txt");
  assert.equal(st.name, "one.txt");
  assert.equal(st.size, 1);
  assert.ok(st.mtimeMs > 0);
  assert.equal(typeof st.mode, "number");

  assert.equal(await fs.exists("/tmp/tree/two.txt"), true);
  assert.equal(await fs.exists("/tmp/tree/nope"), false);
  await assert.rejects(fs.stat("/tmp/tree/nope"), (e) => e instanceof NotFoundError && e.code === "not_found");

  await fs.rename("/tmp/tree/two.txt", "/tmp/tree/a/two.txt");
  assert.equal(await fs.exists("/tmp/tree/two.txt"), false);
  assert.equal(await fs.read("/tmp/tree/a/two.txt"), "22");
  await fs.write("/tmp/tree/three.txt", "3");
  await assert.rejects(fs.rename("/tmp/tree/three.txt", "/tmp/tree/a/two.txt"));
  await fs.rename("/tmp/tree/three.txt", "/tmp/tree/a/two.txt", { overwrite: true });
  assert.equal(await fs.read("/tmp/tree/a/two.txt"), "3");

  await fs.remove("/tmp/tree/a/one.txt");
  assert.equal(await fs.exists("/tmp/tree/a/one.txt"), false);
  await assert.rejects(fs.remove("/tmp/tree/a"), "a non-empty directory needs recursive");
  await fs.remove("/tmp/tree", { recursive: true });
  assert.equal(await fs.exists("/tmp/tree"), false);
  await fs.remove("/tmp/tree", { force: true });
});

test("bad paths are rejected before reaching the guest", async () => {
  await assert.rejects(sb.files.read("relative/path"), (e) => e instanceof InvalidArgumentError && e.status === 422);
  await assert.rejects(sb.files.read("/tmp/../etc/shadow"), InvalidArgumentError);
  await assert.rejects(sb.files.read("/tmp"), (e) => e instanceof InvalidArgumentError && /not a regular file/.test(e.message));
  await assert.rejects(sb.files.read("/no/such/file"), NotFoundError);
});

test("signed URLs upload and download with plain fetch, no API key", async () => {
  const put = await sb.files.url("/tmp/signed/in.txt", { method: "PUT", expiresIn: 120 });
  assert.equal(put.method, "PUT");
  assert.match(put.url, /^https?:\/\/.*\/files\/signed\?/);
  let res = await fetch(put.url, { method: "PUT", body: "via fetch" });
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal((await sb.exec("cat /tmp/signed/in.txt")).stdout, "via fetch");
  const get = await sb.files.url("/tmp/signed/in.txt");
  res = await fetch(get.url);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "via fetch");
  // Signed for GET of that path only.
  res = await fetch(get.url, { method: "PUT", body: "x" });
  assert.equal(res.status, 403);
  assert.ok(get.url.includes("path=/tmp/signed/in.txt&"), get.url);
  res = await fetch(get.url.replace("in.txt", "other.txt"));
  assert.equal(res.status, 403);
  await assert.rejects(sb.files.url("/tmp/x", { expiresIn: 0 }), InvalidArgumentError);
});

test("watch yields ready, then what a command writes at every depth", async () => {
  await sb.exec("rm -rf /tmp/watched && mkdir -p /tmp/watched");
  const ctl = new AbortController();
  const events = sb.files.watch("/tmp/watched", { recursive: true, signal: ctl.signal });
  const next = async () => (await events.next()).value;
  assert.deepEqual(await next(), { type: "ready", path: "/tmp/watched", dir: false });
  await sb.exec("mkdir /tmp/watched/sub");
  assert.deepEqual(await next(), { type: "create", path: "/tmp/watched/sub", dir: true });
  await sb.exec("echo hi > /tmp/watched/sub/a.txt && mv /tmp/watched/sub/a.txt /tmp/watched/b.txt");
  const seen = [];
  for (;;) {
    const ev = await next();
    seen.push(ev);
    if (ev.type === "rename") break;
  }
  assert.deepEqual(seen.at(-1), { type: "rename", path: "/tmp/watched/b.txt", from: "/tmp/watched/sub/a.txt", dir: false });
  assert.ok(seen.some((e) => e.type === "create" && e.path === "/tmp/watched/sub/a.txt"), JSON.stringify(seen));
  ctl.abort();
  await events.return();

  await assert.rejects(sb.files.watch("/tmp/no-such-dir").next(), NotFoundError);
  await assert.rejects(sb.files.watch("/tmp/watched/b.txt").next(), InvalidArgumentError);
});
