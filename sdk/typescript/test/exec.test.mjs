// Commands in a real sandbox: blocking exec, streaming, callbacks, timeouts.
import { test, before } from "node:test";
import assert from "node:assert/strict";

import { CommandExitError, CommandTimeoutError, InvalidArgumentError } from "../dist/index.js";
import { SandboxGuard } from "./helpers.mjs";

const guard = new SandboxGuard();

// Counts processes running `sleep 60` (minbase has no ps).
const COUNT_SLEEPERS = `
import os
n = 0
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0")[:2] == [b"sleep", b"60"]:
            n += 1
    except OSError:
        pass
print(n)
`;
let sb;

before(async () => {
  sb = await guard.create({ metadata: { case: "exec" } });
});

test("the API.md snippet: python prints 1024", async () => {
  const r = await sb.exec("python3 -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
  assert.equal(r.stdout, "1024\n");
  assert.equal(r.exitCode, 0);
  assert.equal(r.timedOut, false);
  assert.equal(typeof r.durationMs, "number");
});

test("exit code and stderr are data, not errors", async () => {
  const r = await sb.exec("echo out; echo err >&2; exit 3");
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  await assert.rejects(sb.exec("exit 4", { check: true }), (e) => e instanceof CommandExitError && e.exitCode === 4 && e.result.exitCode === 4);
  const ok = await sb.exec("true", { check: true });
  assert.equal(ok.exitCode, 0);
});

test("argv runs without a shell", async () => {
  const r = await sb.exec(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME"]);
  assert.equal(r.stdout, "['a b', '$HOME']\n");
});

test("env, cwd and stdin", async () => {
  const env = await sb.exec("echo \"$FOO-$BAR\"", { env: { FOO: "foo", BAR: "bar baz" } });
  assert.equal(env.stdout, "foo-bar baz\n");
  const cwd = await sb.exec("pwd", { cwd: "/tmp" });
  assert.equal(cwd.stdout, "/tmp\n");
  const stdin = await sb.exec("tr a-z A-Z", { stdin: "hello stdin\n" });
  assert.equal(stdin.stdout, "HELLO STDIN\n");
  const bytes = await sb.exec(["wc", "-c"], { stdin: new TextEncoder().encode("12345") });
  assert.equal(bytes.stdout.trim(), "5");
  await assert.rejects(sb.exec("pwd", { cwd: "relative" }), (e) => e instanceof InvalidArgumentError && /cwd/.test(e.message));
});

test("timeout kills the command and keeps partial output", async () => {
  const t = Date.now();
  // A timeout is data, as a non-zero exit is (the same as the Python SDK)...
  const r = await sb.exec("echo started; sleep 30; echo never", { timeoutSeconds: 1 });
  assert.equal(r.timedOut, true);
  assert.equal(r.stdout, "started\n");
  // ...and an exception with `check`.
  await assert.rejects(sb.exec("echo started; sleep 30; echo never", { timeoutSeconds: 1, check: true }), (e) => {
    assert.ok(e instanceof CommandTimeoutError, String(e));
    assert.equal(e.result.timedOut, true);
    assert.equal(e.stdout, "started\n");
    return true;
  });
  assert.ok(Date.now() - t < 40_000, "returned well before the sleeps would have ended");
  // The sandbox is still usable afterwards.
  assert.equal((await sb.exec("echo alive")).stdout, "alive\n");
});

test("execStream yields typed events in order", async () => {
  const events = [];
  for await (const ev of sb.execStream("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo oops >&2; exit 5")) events.push(ev);
  const stdout = events.filter((e) => e.type === "stdout").map((e) => e.data).join("");
  const stderr = events.filter((e) => e.type === "stderr").map((e) => e.data).join("");
  assert.equal(stdout, "line1\nline2\nline3\n");
  assert.equal(stderr, "oops\n");
  const last = events.at(-1);
  assert.equal(last.type, "exit");
  assert.equal(last.exitCode, 5);
  assert.equal(last.timedOut, false);
  assert.ok(events.filter((e) => e.type === "stdout").length >= 2, "output arrives in more than one chunk");
});

test("exec with onStdout/onStderr streams while the command runs", async () => {
  const seen = [];
  const t0 = Date.now();
  const r = await sb.exec("echo first; sleep 1; echo second; echo e >&2", {
    onStdout: (d) => seen.push([Date.now() - t0, d]),
    onStderr: (d) => seen.push([Date.now() - t0, `ERR:${d}`]),
  });
  assert.equal(r.stdout, "first\nsecond\n");
  assert.equal(r.stderr, "e\n");
  assert.equal(r.exitCode, 0);
  const first = seen.find(([, d]) => d.includes("first"));
  const second = seen.find(([, d]) => d.includes("second"));
  assert.ok(first && second);
  assert.ok(second[0] - first[0] >= 700, `"first" arrived before the command finished (${first[0]} vs ${second[0]} ms)`);
});

// The SDK closes the connection at once (see unit.test.mjs); the server then cancels the guest
// call, whose agent kills the process tree.
test("breaking out of execStream kills the command", async () => {
  for await (const ev of sb.execStream("echo go; sleep 60")) {
    if (ev.type === "stdout") break;
  }
  let n = "";
  for (let i = 0; i < 10; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    n = (await sb.exec(["python3", "-c", COUNT_SLEEPERS])).stdout.trim();
    if (n === "0") break;
  }
  assert.equal(n, "0", "sleep 60 still running 10 s after the stream was closed");
});

test("streaming with a timeout ends with a timed-out exit event", async () => {
  const events = [];
  for await (const ev of sb.execStream("echo a; sleep 30", { timeoutSeconds: 1 })) events.push(ev);
  const exit = events.at(-1);
  assert.equal(exit.type, "exit");
  assert.equal(exit.timedOut, true);
  assert.equal((await sb.exec("sleep 30", { timeoutSeconds: 1, onStdout: () => {} })).timedOut, true);
  await assert.rejects(sb.exec("sleep 30", { timeoutSeconds: 1, onStdout: () => {}, check: true }), CommandTimeoutError);
});

test("multi-byte UTF-8 output survives chunking, streamed and blocking", async () => {
  // 3-byte characters with an odd prefix, so that chunk boundaries fall inside characters.
  const script = "import sys\nsys.stdout.write('x' + '\u732b' * 200000)\nsys.stdout.flush()";
  const want = "x" + "\u732b".repeat(200000);
  let streamed = "";
  for await (const ev of sb.execStream(["python3", "-c", script])) if (ev.type === "stdout") streamed += ev.data;
  assert.equal(streamed.length, want.length);
  assert.ok(!streamed.includes("\ufffd"), "no replacement characters in the stream");
  assert.equal(streamed, want);
  const r = await sb.exec(["python3", "-c", script]);
  assert.equal(r.stdout, want);
});

test("large output is returned whole up to the limit", async () => {
  const r = await sb.exec("python3 -c \"import sys; sys.stdout.write('x' * 1000000)\"");
  assert.equal(r.stdout.length, 1_000_000);
  assert.equal(r.truncated, false);
});
