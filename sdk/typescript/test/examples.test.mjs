// The examples in examples/typescript run as smoke tests, against the same server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

import { NotFoundError } from "../dist/index.js";
import { TEMPLATE, client } from "./helpers.mjs";

const run = promisify(execFile);
const examples = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "examples", "typescript");

const ps = client();

/**
 * Runs an example; afterwards deletes the snapshots its forks left behind (their sandboxes are
 * gone) and, with `databases`, the databases it left behind (and fails if there were any).
 */
async function example(name, { databases = false } = {}) {
  const before = new Set((await ps.snapshots.list().toArray()).map((s) => s.id));
  const dbsBefore = databases ? new Set((await ps.databases.list().toArray()).map((d) => d.id)) : new Set();
  try {
    const { stdout } = await run(process.execPath, [join(examples, name)], {
      env: { ...process.env, PANDASTACK_TEMPLATE: TEMPLATE },
      // A database create may bake the `postgres` template first (minutes).
      timeout: databases ? 1_200_000 : 600_000,
    });
    return stdout;
  } finally {
    if (databases) {
      const left = (await ps.databases.list().toArray()).filter((d) => !dbsBefore.has(d.id));
      for (const d of left) await ps.databases.delete(d.id);
      assert.deepEqual(left.map((d) => d.id), [], `${name} left databases behind`);
    }
    for (const s of await ps.snapshots.list().toArray()) {
      if (before.has(s.id)) continue;
      const parentAlive = await ps.sandboxes.get(s.sandboxId).then(() => true, () => false);
      if (!parentAlive) await ps.snapshots.delete(s.id).catch((e) => { if (!(e instanceof NotFoundError)) throw e; });
    }
  }
}

test("create-exec-read-fork", async () => {
  const out = await example("create-exec-read-fork.mjs");
  assert.match(out, /python says 1024/);
  assert.match(out, /read back: hello from the parent/);
  assert.match(out, /fork sb-\S+: hello from the fork/);
  assert.match(out, /parent still: hello from the parent/);
});

test("parallel-fixes keeps the passing candidate", async () => {
  const out = await example("parallel-fixes.mjs");
  assert.match(out, /candidate 2 in sb-\S+: PASS/);
  assert.equal((out.match(/: PASS/g) ?? []).length, 1);
  assert.match(out, /keeping candidate 2/);
});

test("streaming", async () => {
  const out = await example("streaming.mjs");
  assert.match(out, /\[out\] step 1\n[\s\S]*\[out\] step 5\n/);
  assert.match(out, /\[err\] a warning/);
  assert.match(out, /\[exit\] code 2/);
  assert.match(out, /\[callback\] tick 0/);
  assert.match(out, /collected "tick 0\\ntick 1\\ntick 2\\n", exit 0/);
});

test("code-interpreter", async () => {
  const out = await example("code-interpreter.mjs");
  assert.match(out, /stdout: sorting 8 numbers \| result: \[1, 1, 2, 3, 4, 5, 6, 9\]/);
  assert.match(out, /png: 8 bytes, signature ok: true/);
  assert.match(out, /error: ZeroDivisionError: division by zero/);
  assert.match(out, /  live: step 0/);
  assert.match(out, /step 2\n  live result: 31\n/);
  assert.match(out, /context \S+ sees data: False/);
  assert.match(out, /done/);
});

test("agent-workspace", async () => {
  const out = await example("agent-workspace.mjs");
  assert.match(out, /wrote the project; fib\(10\) = 55/);
  assert.match(out, /sandbox 1 deleted; volume attached to: null/);
  assert.match(out, /found: step 1 done: fib\(10\) = 55/);
  assert.match(out, /progress now: step 1 done: fib\(10\) = 55 \| step 2 done: fib\(20\) = 6765/);
  assert.match(out, /backup vb-\S+: done, \d+ bytes uploaded/);
  assert.match(out, /\ndone\n/);
});

test(
  "agent-database",
  { skip: process.env.PANDASTACK_DB_FRONT ? false : "PANDASTACK_DB_FRONT is not set (scripts/dev-server.sh prints it)" },
  async () => {
    const out = await example("agent-database.mjs", { databases: true });
    assert.match(out, /database agent_\S+ \(\S+\): PostgreSQL 17, ready/);
    assert.match(out, /stored 4 documents/);
    assert.match(out, /nearest neighbour: rust borrow checker explained \(distance 0\.087\)/);
    assert.match(out, /database deleted\ndone\n/);
  },
);
