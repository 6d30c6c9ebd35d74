"""Runs every script in examples/python as a smoke test against the real server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "python"
EXPECT = {
    "create_exec_read_fork.py": ["exec: 1024 exit 0", "parent still has: written by the parent", "done"],
    "parallel_fixes.py": ["candidate 2", "PASS", "kept sb-"],
    "streaming_output.py": ["out: step 1", "exit 0, 6 stdout lines", "tick 0\ntick 1\ntick 2\nexit 0 after"],
    "interactive.py": ["process said: running total: 42", "final: 42 | exit 0", "shell exit code: 7"],
    "agent_workspace.py": [
        "wrote the project; fib(10) = 55",
        "sandbox 1 deleted; volume attached to: None",
        "found: step 1 done: fib(10) = 55",
        "progress now: step 1 done: fib(10) = 55 | step 2 done: fib(20) = 6765",
        ": done,",
        "done",
    ],
    "agent_database.py": [
        "stored 4 documents",
        "nearest neighbour: rust borrow checker explained (distance 0.087)",
        "database deleted",
        "done",
    ],
    "agent_deploys_app.py": [
        "agent wrote 6 files and committed",
        "read the commit out as a git bundle:",
        "checked the commit out of the bundle:",
        "uploaded the checked-out tree as deploy #",
        "framework: vite (install: npm install",
        "phases: clone",
        "the app's page: Agent-built app, script /assets/",
        'the app serves: "Built by an agent in sandbox sb-',
        "app agent-app-",
        "done",
    ],
    "function_numpy.py": [
        "building version 1",
        "version 1 is live",
        "call 1 (cold): det 6.0, eigenvalues [2.0, 3.0]",
        "it printed: a 2x2 matrix",
        "call 2 (warm): det 10.0, eigenvalues [2.0, 5.0]",
        "a non-square matrix: error, LinAlgError:",
        "function deleted",
        "done",
    ],
    "nightly_agent_schedule.py": [
        "'0 3 * * *' in Europe/Berlin, next at 20",
        "(manual): succeeded, exit 0",
        "  agent task: nightly dependency audit",
        "  report: lockfile: ok; licenses: ok; tests: ok",
        "history: 1 run(s)",
        "schedule deleted",
        "done",
    ],
    "async_quickstart.py": ["'job 0', 'job 1', 'job 2', 'job 3'", "hello from asyncio"],
    "code_interpreter.py": [
        "stdout: sorting 8 numbers | result: [1, 1, 2, 3, 4, 5, 6, 9]",
        "png: 8 bytes, signature ok: True",
        "error: ZeroDivisionError: division by zero",
        "  live: step 0",
        "step 2\n  live result: 31",
        "sees data: False",
        "done",
    ],
}


def test_every_example_is_covered():
    assert EXAMPLES.is_dir(), EXAMPLES
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECT)


#: Examples that create a managed database: they need the server's database front (skipped
#: without PANDASTACK_DB_FRONT, like tests/test_databases.py) and get longer (the first database
#: create on a server bakes the `postgres` template).
DATABASE_EXAMPLES = {"agent_database.py"}

#: Examples that deploy an app: its build VM installs from the npm registry, so the server needs
#: sandbox networking (PANDASTACK_DEV_NETWORK=on|auto, which scripts/test-clients.sh sets for its
#: server; skipped otherwise). The first use bakes the `app` template, and `npm install` plus
#: `vite build` take minutes under TCG.
APP_EXAMPLES = {"agent_deploys_app.py", "function_numpy.py"}

TIMEOUTS = {"agent_database.py": 1200, "agent_deploys_app.py": 1800, "function_numpy.py": 1800}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_runs(name, client, template):
    uses_db = name in DATABASE_EXAMPLES
    uses_apps = name in APP_EXAMPLES
    if uses_db and not os.environ.get("PANDASTACK_DB_FRONT"):
        pytest.skip("PANDASTACK_DB_FRONT is not set (scripts/dev-server.sh prints it)")
    if uses_apps and os.environ.get("PANDASTACK_DEV_NETWORK", "off") == "off":
        pytest.skip("needs a server with sandbox networking: set PANDASTACK_DEV_NETWORK=on for it")
    before = {s.id for s in client.sandboxes.list()}
    snaps_before = {s.id for s in client.snapshots.list()}
    dbs_before = {d.id for d in client.databases.list()} if uses_db else set()
    apps_before = {a.name for a in client.apps.list()} if uses_apps else set()
    fns_before = {f.name for f in client.functions.list()} if uses_apps else set()
    env = dict(os.environ)
    env["PANDASTACK_TEMPLATE"] = template
    env.pop("PANDASTACK_EXAMPLE_REPO", None)  # agent_deploys_app.py uploads its tree
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run(
            [sys.executable, str(EXAMPLES / name)],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUTS.get(name, 600),
        )
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        for needle in EXPECT[name]:
            assert needle in out, f"{needle!r} not in output:\n{out}"
        if name == "parallel_fixes.py":
            assert out.count("PASS") == 1, out
    finally:
        left = [s for s in client.sandboxes.list() if s.id not in before and "example" in s.metadata]
        for s in left:
            s.kill()
        left_snaps = [s.id for s in client.snapshots.list() if s.id not in snaps_before]
        for sid in left_snaps:
            client.snapshots.delete(sid)
        left_dbs = [d.id for d in client.databases.list() if d.id not in dbs_before] if uses_db else []
        for did in left_dbs:
            client.databases.delete(did)
        left_apps = [a.name for a in client.apps.list() if a.name not in apps_before] if uses_apps else []
        for app in left_apps:
            client.apps.delete(app)
        left_fns = [f.name for f in client.functions.list() if f.name not in fns_before] if uses_apps else []
        for fn in left_fns:
            client.functions.delete(fn)
    assert not left, f"{name} left sandboxes behind: {[s.id for s in left]}"
    assert not left_dbs, f"{name} left databases behind: {left_dbs}"
    assert not left_apps, f"{name} left apps behind: {left_apps}"
    assert not left_fns, f"{name} left functions behind: {left_fns}"
    assert not left_snaps, f"{name} left snapshots behind: {left_snaps}"
