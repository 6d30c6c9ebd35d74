"""exec and streaming exec against a real sandbox."""

from __future__ import annotations

import time

import pytest

from pandastack import (
    InvalidArgumentError,
    CommandExitError,
    CommandTimeoutError,
    ExecResult,
    ExitEvent,
    StderrEvent,
    StdoutEvent,
)


def test_exit_code_stdout_stderr(shared_sandbox):
    r = shared_sandbox.exec("echo out; echo err >&2; exit 7")
    assert isinstance(r, ExecResult)
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.ok) == ("out\n", "err\n", 7, False, False)
    assert r.duration_ms >= 0 and r.truncated is False
    assert shared_sandbox.exec("true").ok


def test_argv_is_not_shell(shared_sandbox):
    r = shared_sandbox.exec(["echo", "$HOME", "a  b", "'q'"])
    assert r.stdout == "$HOME a  b 'q'\n"
    assert shared_sandbox.exec(argv=["python3", "-c", "import sys; print(sys.argv[1])", "x y"]).stdout == "x y\n"
    r = shared_sandbox.exec(["/no/such/program"])
    assert r.exit_code != 0


def test_env_cwd_stdin(shared_sandbox):
    r = shared_sandbox.exec("echo $A-$B", env={"A": "1", "B": "two words"})
    assert r.stdout == "1-two words\n"
    shared_sandbox.filesystem.mkdir("/tmp/work/dir")
    assert shared_sandbox.exec("pwd", cwd="/tmp/work/dir").stdout == "/tmp/work/dir\n"
    assert shared_sandbox.exec("cat", stdin="line1\nline2\n").stdout == "line1\nline2\n"
    assert shared_sandbox.exec(["wc", "-c"], stdin=b"12345").stdout.strip() == "5"
    assert shared_sandbox.exec("cat", stdin="").stdout == ""
    r = shared_sandbox.exec("python3 -c 'import sys; print(sys.stdin.read().upper())'", stdin="héllo")
    assert r.stdout == "HÉLLO\n"
    assert shared_sandbox.exec(["id", "-un"], user="nobody").stdout == "nobody\n"
    with pytest.raises(InvalidArgumentError):
        shared_sandbox.exec("true", user="no-such-user")
    with pytest.raises(InvalidArgumentError):
        shared_sandbox.exec("true", cwd="/no/such/dir")


def test_check_raises_on_nonzero(shared_sandbox):
    with pytest.raises(CommandExitError) as ei:
        shared_sandbox.exec("echo nope >&2; exit 3", check=True)
    e = ei.value
    assert e.exit_code == 3 and e.stderr == "nope\n" and e.result.exit_code == 3
    assert "nope" in str(e)
    assert shared_sandbox.exec("echo fine", check=True).stdout == "fine\n"


def test_command_timeout(shared_sandbox):
    t = time.monotonic()
    r = shared_sandbox.exec("echo started; sleep 30; echo never", timeout_seconds=2)
    elapsed = time.monotonic() - t
    assert r.timed_out and not r.ok
    assert r.stdout == "started\n"
    assert elapsed < 20
    with pytest.raises(CommandTimeoutError) as ei:
        shared_sandbox.exec("sleep 30", timeout_seconds=1, check=True)
    assert ei.value.result is not None and ei.value.result.timed_out
    # The sandbox is still usable and the process group is gone.
    assert shared_sandbox.exec("echo alive").stdout == "alive\n"


def test_streaming_callbacks_arrive_live(shared_sandbox):
    seen = []
    t0 = time.monotonic()

    def on_out(s):
        seen.append(("out", s, time.monotonic() - t0))

    def on_err(s):
        seen.append(("err", s, time.monotonic() - t0))

    r = shared_sandbox.exec(
        "echo first; sleep 2; echo problem >&2; echo second",
        on_stdout=on_out,
        on_stderr=on_err,
    )
    total = time.monotonic() - t0
    assert r.stdout == "first\nsecond\n" and r.stderr == "problem\n" and r.exit_code == 0
    assert "".join(s for k, s, _ in seen if k == "out") == "first\nsecond\n"
    assert "".join(s for k, s, _ in seen if k == "err") == "problem\n"
    first_at = next(at for k, s, at in seen if "first" in s)
    # "first" came before the command finished, not all at the end
    assert first_at < total - 1.5, seen


def test_streaming_with_check_and_only_stderr_callback(shared_sandbox):
    errs = []
    with pytest.raises(CommandExitError) as ei:
        shared_sandbox.exec("echo x; echo y >&2; exit 4", on_stderr=errs.append, check=True)
    assert errs == ["y\n"] and ei.value.result.stdout == "x\n"


def test_exec_stream_iterator(shared_sandbox):
    events = list(shared_sandbox.exec_stream(["sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.2; done; echo e >&2; exit 5"]))
    assert isinstance(events[-1], ExitEvent) and events[-1].exit_code == 5
    assert all(isinstance(e, (StdoutEvent, StderrEvent)) for e in events[:-1])
    assert "".join(e.data for e in events if e.type == "stdout") == "1\n2\n3\n"
    assert "".join(e.data for e in events if e.type == "stderr") == "e\n"

    with shared_sandbox.exec_stream("echo a; echo b") as stream:
        first = next(iter(stream))
        assert first.type == "stdout"
        res = stream.wait()
    assert res.stdout == "a\nb\n" and res.exit_code == 0 and stream.exit.exit_code == 0
    assert stream.result == res


COUNT_PROCS = """
import os, sys
n = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            n += open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0")[:2] == [b"sleep", sys.argv[1].encode()]
        except OSError:
            pass
print(n)
"""


def test_exec_stream_early_close_kills_command(shared_sandbox):
    shared_sandbox.files.write("/tmp/count_procs.py", COUNT_PROCS)
    stream = shared_sandbox.exec_stream("echo go; sleep 1000")
    ev = next(stream)
    assert ev == StdoutEvent("go\n")
    count = lambda: shared_sandbox.exec(["python3", "/tmp/count_procs.py", "1000"]).stdout  # noqa: E731
    deadline = time.monotonic() + 10
    while count() != "1\n":
        assert time.monotonic() < deadline, "sleep 1000 never started"
        time.sleep(0.2)
    stream.close()
    # The server kills the process group once the client disconnects (well before the
    # command's 60 s default timeout).
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if count() == "0\n":
            break
        time.sleep(0.5)
    else:
        pytest.fail("sleep 1000 still running after the stream was closed")


def test_bigger_output(shared_sandbox):
    r = shared_sandbox.exec("python3 -c 'import sys; sys.stdout.write(\"x\" * 1000000)'")
    assert len(r.stdout) == 1000000 and not r.truncated
