"""The async client against a real server."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pytest
import pytest_asyncio

from pandastack import (
    AsyncPandaStack,
    AsyncSandbox,
    CommandExitError,
    ExitEvent,
    InvalidArgumentError,
    NotFoundError,
    SandboxNotFoundError,
)

from conftest import CREATED


@pytest_asyncio.fixture
async def aclient(server_env):
    async with AsyncPandaStack(
        api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"]
    ) as c:
        yield c


@pytest_asyncio.fixture
async def asandbox(aclient, template, tags):
    sb = await aclient.sandboxes.create(template=template, ttl_seconds=600, metadata={**tags, "kind": "async"})
    CREATED.add(sb.id)
    try:
        yield sb
    finally:
        await sb.kill()


@pytest.mark.asyncio
async def test_async_lifecycle(aclient, template, tags):
    async with aclient.sandboxes.create(template=template, ttl_seconds=300, metadata={**tags, "case": "alife"}) as sb:
        CREATED.add(sb.id)
        assert isinstance(sb, AsyncSandbox) and sb.state == "running"
        got = await aclient.sandboxes.get(sb.id)
        assert got == sb
        listed = [s.id async for s in aclient.sandboxes.list(metadata={**tags, "case": "alife"}, limit=1)]
        assert listed == [sb.id]
        assert (await sb.info()).state == "running"
        assert (await sb.hibernate()).state == "hibernated"
        assert (await sb.exec("echo woke")).stdout == "woke\n"  # auto-wake
        assert (await sb.refresh()).state == "running"
        sid = sb.id
    with pytest.raises(SandboxNotFoundError):
        await aclient.sandboxes.get(sid)

    # await + async with on the sandbox
    sb = await aclient.sandboxes.create(template=template, ttl_seconds=300, metadata=tags)
    CREATED.add(sb.id)
    async with sb:
        assert (await sb.exec("true")).ok
    assert await sb.kill() is False


@pytest.mark.asyncio
async def test_async_exec(asandbox):
    r = await asandbox.exec("echo $X; echo e >&2; exit 2", env={"X": "y"})
    assert (r.stdout, r.stderr, r.exit_code) == ("y\n", "e\n", 2)
    assert (await asandbox.exec(["pwd"], cwd="/tmp")).stdout == "/tmp\n"
    assert (await asandbox.exec("cat", stdin="in")).stdout == "in"
    with pytest.raises(CommandExitError):
        await asandbox.exec("exit 1", check=True)
    r = await asandbox.exec("sleep 20", timeout_seconds=1)
    assert r.timed_out
    with pytest.raises(InvalidArgumentError):
        await asandbox.exec("true", timeout_seconds=100000)

    chunks = []

    async def on_out(s):
        chunks.append(s)

    r = await asandbox.exec("echo a; sleep 0.5; echo b", on_stdout=on_out, on_stderr=print)
    assert r.stdout == "a\nb\n" and "".join(chunks) == "a\nb\n"
    events = [e async for e in asandbox.exec_stream("echo s; exit 3")]
    assert events[-1] == ExitEvent(exit_code=3, duration_ms=events[-1].duration_ms)
    assert "".join(e.data for e in events if e.type == "stdout") == "s\n"
    async with asandbox.exec_stream("echo w") as st:
        res = await st.wait()
    assert res.stdout == "w\n"


@pytest.mark.asyncio
async def test_async_concurrent_execs(asandbox):
    await asandbox.exec("true")
    t = time.monotonic()
    results = await asyncio.gather(*(asandbox.exec(f"sleep 2; echo {i}") for i in range(5)))
    elapsed = time.monotonic() - t
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(5)]
    assert elapsed < 8, f"5 concurrent 2 s commands took {elapsed:.1f} s"


@pytest.mark.asyncio
async def test_async_files(asandbox, tmp_path):
    fs = asandbox.filesystem
    await fs.write("/tmp/a/t.txt", "héllo")
    assert await fs.read("/tmp/a/t.txt") == "héllo"
    await fs.write("/tmp/a/b.bin", bytes(range(256)))
    assert await fs.read_bytes("/tmp/a/b.bin") == bytes(range(256))
    await fs.mkdir("/tmp/a/d")
    assert sorted(e.name for e in await fs.list("/tmp/a")) == ["b.bin", "d", "t.txt"]
    assert (await fs.stat("/tmp/a/t.txt")).size == len("héllo".encode())
    await fs.rename("/tmp/a/t.txt", "/tmp/a/u.txt")
    assert await fs.exists("/tmp/a/u.txt") and not await fs.exists("/tmp/a/t.txt")
    await fs.remove("/tmp/a", recursive=True)
    with pytest.raises(NotFoundError):
        await fs.read("/tmp/a/u.txt")

    src = tmp_path / "up.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)
    src.write_bytes(data)
    assert (await asandbox.files.upload(src, "/tmp/up.bin")).bytes_written == len(data)
    dst = tmp_path / "down.bin"
    assert await asandbox.files.download("/tmp/up.bin", dst) == len(data)
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(data).digest()

    async def gen():
        yield b"x" * 10
        yield b"y" * 10

    await fs.write("/tmp/gen.txt", gen())
    assert await fs.read("/tmp/gen.txt") == "x" * 10 + "y" * 10
    assert b"".join([c async for c in fs.read_stream("/tmp/gen.txt")]) == b"x" * 10 + b"y" * 10


@pytest.mark.asyncio
async def test_async_fork_snapshot(aclient, asandbox):
    await asandbox.files.write("/root/f.txt", "p")
    child = await asandbox.fork()
    CREATED.add(child.id)
    try:
        assert await child.files.read("/root/f.txt") == "p"
        await child.files.write("/root/c.txt", "c")
        assert not await asandbox.files.exists("/root/c.txt")
    finally:
        await child.kill()
    snap = await asandbox.snapshot()
    assert snap.sandbox_id == asandbox.id
    assert snap.id in [s.id async for s in aclient.snapshots.list()]
    assert await aclient.snapshots.delete(snap.id)
    assert [t.name for t in await aclient.templates.list()]
