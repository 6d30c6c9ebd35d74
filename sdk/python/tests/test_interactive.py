"""Interactive routes against a real server: exec over WebSocket (stdin, kill), the PTY, and
following the console log."""

from __future__ import annotations

import asyncio
import threading
import time


from pandastack import AsyncPandaStack


def read_until(proc, want):
    """Collects stdout events until ``want`` has arrived (chunks need not be line-aligned)."""
    got = ""
    while want not in got:
        ev = next(proc)
        assert ev.type == "stdout", ev
        got += ev.data
    return got


def test_spawn_stdin_and_exit(shared_sandbox):
    with shared_sandbox.spawn(["python3", "-u", "-c", "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\nprint('bye', file=sys.stderr)\nsys.exit(4)"]) as p:
        p.send_stdin("hello\n")
        assert read_until(p, "\n") == "HELLO\n"
        p.send_stdin(b"w\xc3\xb6rld\n")
        assert read_until(p, "\n") == "WÖRLD\n"
        p.close_stdin()
        res = p.wait()
    assert res.exit_code == 4 and res.stdout == "HELLO\nWÖRLD\n" and res.stderr == "bye\n"
    assert p.exit_code == 4


def test_spawn_kill_and_timeout(shared_sandbox):
    p = shared_sandbox.spawn("echo started; sleep 600")
    assert read_until(p, "started\n") == "started\n"
    t = time.monotonic()
    p.kill()
    res = p.wait()
    assert res.exit_code == 137 and time.monotonic() - t < 10
    res = shared_sandbox.spawn(["sleep", "60"], timeout_seconds=1).wait()
    assert res.timed_out


def test_pty_runs_a_shell(shared_sandbox):
    with shared_sandbox.pty(cols=100, rows=30) as term:
        term.write("stty size; echo $((6 * 7)); exit 3\n")
        out = b"".join(term)
    text = out.decode("utf-8", "replace")
    assert "30 100" in text and "42" in text
    assert term.exit_code == 3

    with shared_sandbox.pty(cmd="cat") as term:
        term.resize(120, 40)
        term.write("abc\n")
        seen = b""
        while b"abc" not in seen:
            chunk = term.read()
            assert chunk, "terminal ended early"
            seen += chunk
        term.write(b"\x04")  # ^D: end of input
        assert term.wait() == 0


def test_logs_stream_follows_until_deleted(client, make_sandbox):
    sb = make_sandbox()
    assert sb.logs()  # the console has the guest agent's start-up lines
    chunks = []
    done = threading.Event()

    def follow():
        for c in sb.logs_stream():
            chunks.append(c)
        done.set()

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(1)
    sb.kill()
    assert done.wait(30), "logs stream did not end after the sandbox was deleted"
    text = "".join(chunks)
    assert text and text == text.replace("\x00", ""), chunks[:3]


def test_async_spawn(server_env, shared_sandbox):
    async def main():
        async with AsyncPandaStack(api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"]) as c:
            sb = await c.sandboxes.get(shared_sandbox.id)
            procs = [await sb.spawn("cat") for _ in range(3)]
            for i, p in enumerate(procs):
                await p.send_stdin(f"{i}\n")
                await p.close_stdin()
            results = await asyncio.gather(*(p.wait() for p in procs))
            async with await sb.pty(cmd="echo from-pty") as term:
                out = b"".join([c async for c in term])
            return results, out, term.exit_code

    results, out, code = asyncio.run(main())
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert b"from-pty" in out and code == 0
