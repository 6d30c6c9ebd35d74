#!/usr/bin/env python3
"""Runs the workspace's tests, each test in a process of its own, N at a time across all test
binaries, longest first; plus whole commands given with --also (the client suites).

`cargo test` runs one test binary at a time, so a binary holding one long test (a deploy, a
database's life) keeps one of the two cores idle for its whole run, and the client suites after
it keep the other idle. Here every test is a job in one queue: at most --jobs run at any moment
(as with `--test-threads=2`, the load the tests are written for), and the queue is ordered by how
long each job took last time (`scripts/test-times.json`, refreshed from a run's timings in
$PANDASTACK_CACHE) so the long ones do not start last.

What a passing test prints is its test harness's own report (`running 1 test`, `test NAME ... ok`,
`test result: ok. ...`, as `cargo test` prints it); the rest of its output is kept and printed only
if it fails. The --also commands and the doctests print their whole output when they end. At the
end: a `test result:` line for the whole run, the failures, the slowest jobs, and the timings
written to $PANDASTACK_CACHE/test-times.json (and target/test-times.json).

    scripts/run-tests.py [--jobs N] [--also NAME=COMMAND]... [--filter SUBSTRING]
"""

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "scripts" / "test-times.json"
# A job with no timing on record: placed as if it took this long.
UNKNOWN_SECS = 30.0
# A job running longer than this many times its last timing (and at least MIN_LIMIT_SECS) is
# killed and failed.
LIMIT_FACTOR = 3.0
MIN_LIMIT_SECS = float(os.environ.get("RUN_TESTS_MIN_LIMIT", "900"))
# Lines of a failed job's output printed (its server's log can be long; the end says why).
FAILED_TAIL_LINES = 3000

# How often the jobs still running are named (a job that hangs shows in a log's last lines).
RUNNING_EVERY_SECS = float(os.environ.get("RUN_TESTS_RUNNING_EVERY", "600"))

# The lines of libtest's report, echoed for a passing test (what a reader or a log scanner of
# `cargo test` output looks for).
LIBTEST_REPORT = re.compile(r"^(running \d+ tests?$|test .+ \.\.\. \w+$|test result: )")

PASSED = re.compile(r"^test result: ok\. (\d+) passed")

T0 = time.monotonic()
PRINT = threading.Lock()
RUNNING: dict[str, float] = {}


def say(msg: str) -> None:
    with PRINT:
        print(f"[{time.monotonic() - T0:6.0f}s] {msg}", flush=True)


def test_binaries() -> list[dict]:
    """Builds the workspace's test targets; one entry per test executable."""
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    ).stdout
    bins = []
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        target = msg["target"]
        pkg_dir = Path(msg["manifest_path"]).parent
        kind = "lib" if target["kind"] in (["lib"], ["rlib"], ["proc-macro"]) else target["kind"][0]
        bins.append(
            {
                "exe": msg["executable"],
                "dir": str(pkg_dir),
                "package": pkg_dir.name,
                # "pandastack-store/store" for tests/store.rs, "pandastack-store/lib" for unit tests.
                "label": f"{pkg_dir.name}/{target['name'] if kind == 'test' else kind}",
            }
        )
    return bins


def list_tests(b: dict, ignored: bool) -> list[str]:
    args = [b["exe"], "--list", "--format", "terse"] + (["--ignored"] if ignored else [])
    out = subprocess.run(args, cwd=b["dir"], stdout=subprocess.PIPE, check=True, text=True).stdout
    return [line[: -len(": test")] for line in out.splitlines() if line.endswith(": test")]


def jobs_of(bins: list[dict]) -> tuple[list[dict], int]:
    """One job per test of `bins`, and how many tests are marked #[ignore] (run by hand)."""
    jobs = []
    ignored_count = 0
    for b in bins:
        ignored = set(list_tests(b, ignored=True))
        ignored_count += len(ignored)
        env = {"CARGO_MANIFEST_DIR": b["dir"], "CARGO_PKG_NAME": b["package"]}
        for name in list_tests(b, ignored=False):
            if name in ignored:
                continue
            jobs.append(
                {
                    "key": f"{b['label']}::{name}",
                    "argv": [b["exe"], "--exact", name, "--test-threads=1"],
                    "cwd": b["dir"],
                    "env": env,
                    "libtest": True,
                }
            )
    return jobs, ignored_count


def load_times() -> dict[str, float]:
    times: dict[str, float] = {}
    for path in (SEED, cache_dir() / "test-times.json"):
        try:
            times.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return times


def cache_dir() -> Path:
    return Path(os.environ.get("PANDASTACK_CACHE", "/var/cache/pandastack"))


def name_running() -> None:
    while True:
        time.sleep(RUNNING_EVERY_SECS)
        now = time.monotonic()
        jobs = ", ".join(f"{k} ({now - t:.0f}s)" for k, t in list(RUNNING.items()))
        say(f"running: {jobs}")


def limit_of(job: dict, times: dict[str, float]) -> float:
    """How long a job may run before it is killed and failed: a hang costs a bounded part of
    the budget, not the rest of the run."""
    return max(MIN_LIMIT_SECS, LIMIT_FACTOR * times.get(job["key"], UNKNOWN_SECS))


def kill_group(pgid: int) -> bool:
    """Kills what is left of a job's process group; whether anything was."""
    try:
        os.killpg(pgid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def run(job: dict) -> dict:
    start = time.monotonic()
    RUNNING[job["key"]] = start
    env = dict(os.environ, **job.get("env", {}))
    # Output goes to a file, not a pipe: a process the job left behind holding it open does not
    # keep the runner waiting. The job leads a process group of its own, so what it leaves
    # behind is found and killed when it ends.
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(
            job["argv"],
            cwd=job["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            shell=isinstance(job["argv"], str),
            start_new_session=True,
        )
        limit = job["limit"]
        try:
            returncode = p.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            kill_group(p.pid)
            returncode = p.wait()
            timed_out = True
        left_behind = kill_group(p.pid)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if timed_out:
        text += f"\n[run-tests] killed after {limit:.0f}s (its limit: {LIMIT_FACTOR:g}x its last timing, at least {MIN_LIMIT_SECS:.0f}s)"
    elif left_behind:
        text += "\n[run-tests] processes it left behind were killed"
    p = subprocess.CompletedProcess(job["argv"], returncode, text.encode())
    secs = time.monotonic() - start
    RUNNING.pop(job["key"], None)
    ok = p.returncode == 0
    say(f"{'PASS' if ok else 'FAIL'} [{secs:7.1f}s] {job['key']}")
    if left_behind and not timed_out:
        say(f"{job['key']} left processes behind; they were killed")
    lines = p.stdout.decode(errors="replace").splitlines()
    # Counted from libtest's summary: a test whose child processes write to the same output can
    # split its `test NAME ... ok` line.
    passed = sum(int(m.group(1)) for line in lines if (m := PASSED.match(line)))
    if ok and job.get("libtest"):
        with PRINT:
            print("\n".join(line for line in lines if LIBTEST_REPORT.match(line)), flush=True)
    elif ok:
        with PRINT:
            print(f"--- output of {job['key']} ---")
            print("\n".join(lines))
            print(f"--- end of {job['key']} ---", flush=True)
    else:
        with PRINT:
            print(f"\n--- output of {job['key']} (exit {p.returncode}), last {FAILED_TAIL_LINES} lines ---")
            print("\n".join(lines[-FAILED_TAIL_LINES:]))
            print(f"--- end of {job['key']} ---\n", flush=True)
    return {"key": job["key"], "ok": ok, "secs": secs, "passed": passed if job.get("libtest") else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--also", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("--filter", default="", help="only tests whose key contains this")
    a = ap.parse_args()

    # Doctests are compiled and run by rustdoc, not listed by a test binary: one job for all.
    doctests = {"key": "doctests", "argv": ["cargo", "test", "--workspace", "--locked", "--doc"], "cwd": str(ROOT)}
    tests, ignored = jobs_of(test_binaries())
    jobs = [j for j in tests + [doctests] if a.filter in j["key"]]
    for also in a.also:
        name, _, cmd = also.partition("=")
        jobs.append({"key": name, "argv": cmd, "cwd": str(ROOT)})
    times = load_times()
    jobs.sort(key=lambda j: times.get(j["key"], UNKNOWN_SECS), reverse=True)
    for j in jobs:
        j["limit"] = limit_of(j, times)
    say(f"{len(jobs)} jobs, {a.jobs} at a time, longest first by their last timings")

    threading.Thread(target=name_running, daemon=True).start()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(run, jobs))

    # A partial run (--filter) updates the timings of what it ran and keeps the rest.
    took = dict(times, **{r["key"]: round(r["secs"], 1) for r in results})
    for path in (cache_dir() / "test-times.json", ROOT / "target" / "test-times.json"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(took, indent=1, sort_keys=True) + "\n")
        except OSError as e:
            say(f"timings not written to {path}: {e}")
    slowest = sorted(results, key=lambda r: r["secs"], reverse=True)[:15]
    say("slowest: " + ", ".join(f"{r['key']} {r['secs']:.0f}s" for r in slowest))
    failed = [r["key"] for r in results if not r["ok"]]
    tests_passed = sum(r["passed"] for r in results)
    # The whole run's Rust tests in libtest's words (the doctests and --also suites report above).
    with PRINT:
        print(
            f"\ntest result: {'FAILED' if failed else 'ok'}. {tests_passed} passed; {len(failed)} failed; "
            f"{ignored} ignored; 0 measured; 0 filtered out; finished in {time.monotonic() - T0:.2f}s",
            flush=True,
        )
    if failed:
        say(f"{len(failed)} of {len(results)} jobs failed: " + ", ".join(failed))
        return 1
    say(f"all {len(results)} jobs passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
