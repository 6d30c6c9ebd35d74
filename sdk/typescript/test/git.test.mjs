// sandbox.git against a real guest: a bare repository served over HTTP with a token (git
// http-backend behind Basic authentication, sdk/python/tests/fixtures/git_http_server.py) inside one sandbox of
// the `app` template (git, python3; PANDASTACK_TEST_GIT_TEMPLATE overrides), cloned, committed,
// pushed and pulled from working copies there.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { GitAuthError, GitConflictError, GitError, PandaStackError } from "../dist/index.js";
import { SandboxGuard } from "./helpers.mjs";

const TEMPLATE = process.env.PANDASTACK_TEST_GIT_TEMPLATE || "app";
const PORT = 8472;
const URL = `http://127.0.0.1:${PORT}/repo.git`;
// The bare repository with one commit on main: README.md and shared.txt.
const SETUP = `set -e
mkdir -p /srv/git
git init -q --bare -b main /srv/git/repo.git
git -C /srv/git/repo.git config http.receivepack true
git init -q -b main /tmp/seed
cd /tmp/seed
printf 'seed\\n' > README.md
printf 'one\\ntwo\\nthree\\n' > shared.txt
git add -A
git -c user.name=seed -c user.email=seed@example.com commit -q -m seed
git push -q /srv/git/repo.git main
`;

const guard = new SandboxGuard();
const token = `pdt_${randomBytes(16).toString("hex")}`;
let sb;

before(async () => {
  sb = await guard.create({ template: TEMPLATE, metadata: { case: "git" } });
  // The Python SDK tests' server, shared by both suites.
  const fixture = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "python", "tests", "fixtures", "git_http_server.py");
  const server = await readFile(fixture, "utf8");
  await sb.files.write("/srv/git-http-server.py", server);
  await sb.exec(SETUP, { check: true });
  const expected = createHash("sha256").update(`x-access-token:${token}`).digest("hex");
  await sb.exec(
    ["sh", "-c", 'setsid python3 /srv/git-http-server.py /srv/git "$1" "$2" >/tmp/git-http.log 2>&1 </dev/null &', "sh", String(PORT), expected],
    { check: true },
  );
  const probe = `curl -s -o /dev/null -w '%{http_code}' ${URL}/info/refs`;
  const ready = await sb.exec(`for i in $(seq 300); do [ "$(${probe})" = 401 ] && exit 0; sleep 0.1; done; exit 1`);
  assert.equal(ready.exitCode, 0, (await sb.exec("cat /tmp/git-http.log")).stdout);
});

test("clone, commit, push from one copy, pull into the other; branches", async () => {
  await sb.git.clone({ url: URL, path: "/work/a", token });
  let st = await sb.git.status("/work/a");
  assert.deepEqual([st.branch, st.upstream, st.ahead, st.behind, st.clean], ["main", "origin/main", 0, 0, true]);
  assert.match(st.commit, /^[0-9a-f]{40}$/);

  await sb.files.write("/work/a/new.txt", "new\n");
  st = await sb.git.status("/work/a");
  assert.deepEqual(st.files.map((f) => [f.path, f.index, f.worktree, f.untracked]), [["new.txt", "?", "?", true]]);
  await sb.git.add("/work/a");
  st = await sb.git.status("/work/a");
  assert.deepEqual(st.files.map((f) => [f.path, f.index, f.worktree, f.staged]), [["new.txt", "A", ".", true]]);
  const sha = await sb.git.commit("/work/a", "add new.txt");
  assert.match(sha, /^[0-9a-f]{40}$/);
  st = await sb.git.status("/work/a");
  assert.deepEqual([st.commit, st.ahead, st.clean], [sha, 1, true]);
  const author = await sb.exec(["git", "log", "-1", "--format=%an <%ae>"], { cwd: "/work/a" });
  assert.equal(author.stdout, "PandaStack <sandbox@pandastack.local>\n");
  await sb.git.push("/work/a", { token });
  assert.equal((await sb.git.status("/work/a")).ahead, 0);

  await sb.git.clone({ url: URL, path: "/work/b", token, depth: 1, branch: "main" });
  assert.equal(await sb.files.read("/work/b/new.txt"), "new\n");
  await sb.files.write("/work/b/README.md", "changed in b\n");
  await sb.git.add("/work/b", ["README.md"]);
  const shaB = await sb.git.commit("/work/b", "change README", { authorName: "Agent Smith", authorEmail: "agent@example.com" });
  await sb.git.push("/work/b", { remote: "origin", branch: "main", token });

  await sb.git.pull("/work/a", { token });
  assert.equal(await sb.files.read("/work/a/README.md"), "changed in b\n");
  st = await sb.git.status("/work/a");
  assert.deepEqual([st.commit, st.ahead, st.behind], [shaB, 0, 0]);
  const log = await sb.exec(["git", "log", "-1", "--format=%an <%ae>"], { cwd: "/work/a" });
  assert.equal(log.stdout, "Agent Smith <agent@example.com>\n");

  await sb.git.createBranch("/work/a", "feature");
  let br = await sb.git.branches("/work/a");
  assert.deepEqual([br.current, br.local], ["feature", ["feature", "main"]]);
  assert.ok(br.remote.includes("origin/main"));
  await sb.git.checkoutBranch("/work/a", "main");
  br = await sb.git.branches("/work/a");
  assert.equal(br.current, "main");
});

test("a wrong or missing token is a GitAuthError at once", async () => {
  const wrong = `pdt_wrong_${randomBytes(8).toString("hex")}`;
  await assert.rejects(sb.git.clone({ url: URL, path: "/work/x", token: wrong }), (e) => {
    assert.ok(e instanceof GitAuthError && e instanceof GitError && e instanceof PandaStackError);
    assert.equal(e.code, "git_auth_failed");
    assert.ok(!e.message.includes(wrong));
    return true;
  });
  await assert.rejects(sb.git.clone({ url: URL, path: "/work/y" }), GitAuthError);
});

test("a conflicting pull is a GitConflictError naming the file", async () => {
  for (const d of ["/work/c1", "/work/c2"]) await sb.git.clone({ url: URL, path: d, token });
  await sb.files.write("/work/c1/shared.txt", "one\nchanged in c1\nthree\n");
  await sb.git.add("/work/c1");
  await sb.git.commit("/work/c1", "c1's change");
  await sb.files.write("/work/c2/shared.txt", "one\nchanged in c2\nthree\n");
  await sb.git.add("/work/c2");
  await sb.git.commit("/work/c2", "c2's change");
  await sb.git.push("/work/c2", { token });
  await assert.rejects(sb.git.push("/work/c1", { token }), GitError); // rejected: fetch first
  await assert.rejects(sb.git.pull("/work/c1", { token }), (e) => {
    assert.ok(e instanceof GitConflictError);
    assert.deepEqual(e.files, ["shared.txt"]);
    assert.match(e.message, /shared\.txt/);
    return true;
  });
  assert.deepEqual((await sb.git.status("/work/c1")).conflicts, ["shared.txt"]);
});

test("the token is in no argv while pushing, and in no file", async () => {
  await sb.git.clone({ url: URL, path: "/work/s", token });
  await sb.files.write("/work/s/s.txt", "s\n");
  await sb.git.add("/work/s");
  await sb.git.commit("/work/s", "s");
  // Every process's argv, over and over while the push runs.
  await sb.exec(
    "rm -f /tmp/ps.stop; setsid sh -c 'while [ ! -e /tmp/ps.stop ]; do ps -eo args; sleep 0.02; done' >/tmp/ps.log 2>&1 </dev/null &",
    { check: true },
  );
  try {
    await sb.git.push("/work/s", { token });
  } finally {
    await sb.exec("touch /tmp/ps.stop; sleep 0.3", { check: true });
  }
  const listing = await sb.files.read("/tmp/ps.log");
  assert.ok(listing.includes("git push") || listing.includes("git-remote-http"), "ps never ran during the push");
  assert.ok(!listing.includes(token));
  // The token and its header form in no file of the working copies, the home directory, /tmp or
  // the served repositories; grep reads them from stdin (no argv). Exit 1: nothing found, no error.
  const basic = Buffer.from(`x-access-token:${token}`).toString("base64");
  const found = await sb.exec(["grep", "-rlF", "-f", "-", "/work", "/root", "/tmp", "/srv"], { stdin: `${token}\n${basic}\n` });
  assert.deepEqual([found.exitCode, found.stdout, found.stderr], [1, "", ""]);
  assert.ok(!(await sb.files.read("/work/s/.git/config")).includes(token));
});
