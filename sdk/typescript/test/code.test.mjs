// The code interpreter in a real sandbox: a persistent kernel, errors as data, timeouts,
// contexts, streaming callbacks and rich results. One sandbox for the whole file.
import { test, before } from "node:test";
import assert from "node:assert/strict";

import { Execution, InvalidArgumentError, NotFoundError, Result } from "../dist/index.js";
import { SandboxGuard } from "./helpers.mjs";

const guard = new SandboxGuard();
let sb;

before(async () => {
  sb = await guard.create({ metadata: { case: "code" } });
});

test("state persists between calls", async () => {
  const first = await sb.runCode("x = 21");
  assert.ok(first instanceof Execution);
  assert.deepEqual(first.results, []);
  assert.equal(first.error, null);
  assert.equal(first.text, undefined);
  const r = await sb.runCode("x * 2");
  assert.ok(r.results[0] instanceof Result);
  assert.equal(r.results[0].text, "42");
  assert.equal(r.text, "42");
  assert.equal(r.truncated, false);
  assert.equal(typeof r.durationMs, "number");
});

test("stdout and stderr are captured", async () => {
  const r = await sb.runCode("import sys\nprint('hi')\nprint('oops', file=sys.stderr)\n6 * 7");
  assert.equal(r.stdout, "hi\n");
  assert.equal(r.stderr, "oops\n");
  assert.equal(r.text, "42");
  const shell = await sb.runCode("import os\nos.system('echo from-shell')");
  assert.match(shell.stdout, /from-shell\n/);
});

test("an exception comes back as data", async () => {
  const r = await sb.runCode("def f():\n    return 1/0\nprint('before')\nf()");
  assert.equal(r.error.name, "ZeroDivisionError");
  assert.match(r.error.value, /division/);
  assert.match(r.error.traceback, /return 1\/0/);
  assert.equal(r.stdout, "before\n");
  assert.equal((await sb.runCode("def broken(:")).error.name, "SyntaxError");
});

test("a timeout interrupts the run and the kernel keeps its variables", async () => {
  await sb.runCode("kept = 'still here'");
  const t = Date.now();
  const r = await sb.runCode("while True:\n    pass", { timeoutSeconds: 2 });
  assert.equal(r.error?.name, "TimeoutError", JSON.stringify(r));
  assert.ok(Date.now() - t < 30_000);
  assert.equal((await sb.runCode("kept")).text, "'still here'");
});

test("a separate context has its own variables; deleting it makes runs fail with NotFoundError", async () => {
  await sb.runCode("only_default = 1");
  const ctx = await sb.createCodeContext();
  assert.match(ctx.id, /\S/);
  assert.equal(ctx.language, "python");
  const r = await sb.runCode("only_default", { context: ctx });
  assert.equal(r.error?.name, "NameError");
  await sb.runCode("mine = 'ctx'", { context: ctx });
  assert.equal((await sb.runCode("mine", { context: ctx.id })).text, "'ctx'");
  assert.equal((await sb.runCode("'mine' in dir()")).text, "False");
  assert.equal((await sb.runCode("only_default")).text, "1");

  await sb.deleteCodeContext(ctx);
  await assert.rejects(sb.runCode("1", { context: ctx }), NotFoundError);
  await assert.rejects(sb.runCode("1", { context: ctx, onStdout: () => {} }), NotFoundError);
  await assert.rejects(sb.deleteCodeContext(ctx.id), NotFoundError); // already gone

  const withEnv = await sb.createCodeContext({ env: { CODE_CTX_VAR: "v1" } });
  try {
    assert.equal((await sb.runCode("import os; os.environ['CODE_CTX_VAR']", { context: withEnv })).text, "'v1'");
  } finally {
    await sb.deleteCodeContext(withEnv);
  }
});

test("streaming callbacks receive stdout and the result in order", async () => {
  const seen = [];
  const r = await sb.runCode("import sys\nprint('streamed')\nsys.stdout.flush()\nprint('warn', file=sys.stderr)\n6 * 7", {
    onStdout: (d) => seen.push(["stdout", d]),
    onStderr: (d) => seen.push(["stderr", d]),
    onResult: (res) => seen.push(["result", res.text]),
    onError: (e) => seen.push(["error", e.name]),
  });
  const kinds = seen.map(([k]) => k);
  assert.ok(kinds.indexOf("stdout") < kinds.indexOf("result"), JSON.stringify(seen));
  assert.equal(seen.filter(([k]) => k === "stdout").map(([, d]) => d).join(""), "streamed\n");
  assert.equal(seen.filter(([k]) => k === "stderr").map(([, d]) => d).join(""), "warn\n");
  assert.deepEqual(seen.at(-1), ["result", "42"]);
  assert.ok(!kinds.includes("error"));
  assert.ok(r instanceof Execution);
  assert.equal(r.stdout, "streamed\n");
  assert.equal(r.text, "42");

  const errors = [];
  const failed = await sb.runCode("print('x')\nraise ValueError('bad')", { onError: (e) => errors.push(e) });
  assert.deepEqual(errors.map((e) => e.name), ["ValueError"]);
  assert.deepEqual(failed.error, errors[0]);
  assert.equal(failed.stdout, "x\n");
});

test("an object's _repr_png_ comes back as a PNG", async () => {
  const r = await sb.runCode(
    "class Chart:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n\\x1a\\nfake'\n    def _repr_html_(self):\n        return '<b>chart</b>'\nChart()",
  );
  const res = r.results[0];
  assert.equal(res.html, "<b>chart</b>");
  const png = res.pngBytes();
  assert.ok(png instanceof Uint8Array);
  assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  const shown = await sb.runCode("display('a', 2)");
  assert.deepEqual(shown.results.map((x) => x.text), ["'a'", "2"]);
});

test("bad arguments name the field", async () => {
  await assert.rejects(sb.runCode("1", { language: "cobol" }), (e) => e instanceof InvalidArgumentError && /language/.test(e.message));
  await assert.rejects(sb.runCode("1", { context: "../x" }), (e) => e instanceof InvalidArgumentError && /context_id/.test(e.message));
  await assert.rejects(sb.runCode("1", { timeoutSeconds: 100000 }), (e) => e instanceof InvalidArgumentError && /timeout_seconds/.test(e.message));
});
