"""The file API against a real sandbox."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc

import pytest

from pandastack import ConflictError, InvalidArgumentError, NotFoundError


def test_text_round_trip(shared_sandbox):
    fs = shared_sandbox.filesystem
    text = "hello\nwörld ✓ 🐼\n"
    info = fs.write("/tmp/t/notes.txt", text)
    assert info.path == "/tmp/t/notes.txt" and info.bytes_written == len(text.encode())
    assert fs.read("/tmp/t/notes.txt") == text
    assert shared_sandbox.exec("cat /tmp/t/notes.txt").stdout == text
    fs.write("/tmp/t/notes.txt", "replaced")
    assert fs.read("/tmp/t/notes.txt") == "replaced"
    fs.write("/tmp/t/empty", "")
    assert fs.read_bytes("/tmp/t/empty") == b""
    assert shared_sandbox.files is fs


def test_binary_all_byte_values(shared_sandbox):
    data = bytes(range(256)) * 4
    shared_sandbox.files.write("/tmp/bin/all.bin", data)
    assert shared_sandbox.files.read_bytes("/tmp/bin/all.bin") == data
    r = shared_sandbox.exec("sha256sum /tmp/bin/all.bin")
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    # a file written by the guest, read back as bytes
    shared_sandbox.exec("python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' > /tmp/bin/g.bin", check=True)
    assert shared_sandbox.files.read_bytes("/tmp/bin/g.bin") == bytes(range(256))
    with pytest.raises(UnicodeDecodeError):
        shared_sandbox.files.read("/tmp/bin/g.bin")


def test_write_from_file_object_and_chunks(shared_sandbox):
    fs = shared_sandbox.files
    fs.write("/tmp/s/fileobj.bin", io.BytesIO(b"abc" * 1000))
    assert fs.read_bytes("/tmp/s/fileobj.bin") == b"abc" * 1000
    fs.write("/tmp/s/chunks.txt", (c for c in [b"one,", b"two,", b"three"]))
    assert fs.read("/tmp/s/chunks.txt") == "one,two,three"
    assert b"".join(fs.read_stream("/tmp/s/chunks.txt", chunk_size=4)) == b"one,two,three"


def test_large_upload_download_streamed(shared_sandbox, tmp_path):
    size = 20 * 1024 * 1024
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for i in range(20):
            block = os.urandom(1024 * 1024)
            h.update(block)
            f.write(block)
    digest = h.hexdigest()

    tracemalloc.start()
    try:
        info = shared_sandbox.files.upload(src, "/tmp/big/big.bin")
        assert info.bytes_written == size
        dst = tmp_path / "back.bin"
        n = shared_sandbox.files.download("/tmp/big/big.bin", dst)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == size
    # Streamed both ways: nowhere near the file size in Python memory.
    assert peak < 8 * 1024 * 1024, f"peak Python allocation {peak} bytes"

    guest = shared_sandbox.exec("sha256sum /tmp/big/big.bin", timeout_seconds=120)
    assert guest.stdout.split()[0] == digest
    h2 = hashlib.sha256()
    with open(dst, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h2.update(block)
    assert h2.hexdigest() == digest
    assert shared_sandbox.files.stat("/tmp/big/big.bin").size == size
    shared_sandbox.files.remove("/tmp/big/big.bin")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".pandastack-")]


def test_list_stat_mkdir_rename_remove(shared_sandbox):
    fs = shared_sandbox.filesystem
    fs.mkdir("/tmp/tree/a/b")
    fs.write("/tmp/tree/a/one.txt", "1")
    fs.write("/tmp/tree/a/b/two.txt", "22")

    st = fs.stat("/tmp/tree/a/one.txt")
    assert (st.name, st.path, st.type, st.size, st.is_file) == ("one.txt", "/tmp/tree/a/one.txt", "file", 1, True)
    assert st.mtime_ms > 0 and st.mode & 0o777
    assert fs.stat("/tmp/tree/a").is_dir

    top = fs.list("/tmp/tree/a")
    assert sorted((e.name, e.type) for e in top) == [("b", "dir"), ("one.txt", "file")]
    deep = fs.list("/tmp/tree", depth=3)
    assert {"/tmp/tree/a", "/tmp/tree/a/b", "/tmp/tree/a/one.txt", "/tmp/tree/a/b/two.txt"} <= {e.path for e in deep}
    # A search by name at every depth listed.
    found = fs.list("/tmp/tree", depth=3, pattern="t*.txt")
    assert [e.path for e in found] == ["/tmp/tree/a/b/two.txt"]

    assert fs.exists("/tmp/tree/a/one.txt") and not fs.exists("/tmp/tree/nope")
    fs.rename("/tmp/tree/a/one.txt", "/tmp/tree/a/uno.txt")
    assert not fs.exists("/tmp/tree/a/one.txt") and fs.read("/tmp/tree/a/uno.txt") == "1"
    with pytest.raises(ConflictError):
        fs.rename("/tmp/tree/a/uno.txt", "/tmp/tree/a/b/two.txt")
    fs.rename("/tmp/tree/a/uno.txt", "/tmp/tree/a/b/two.txt", overwrite=True)
    assert fs.read("/tmp/tree/a/b/two.txt") == "1"

    with pytest.raises(InvalidArgumentError):
        fs.remove("/tmp/tree/a")  # not empty
    fs.mkdir("/tmp/tree/a/b")  # like mkdir -p: an existing directory is fine
    with pytest.raises(ConflictError):
        fs.mkdir("/tmp/tree/a/b", parents=False)
    with pytest.raises(NotFoundError):
        fs.mkdir("/tmp/tree/x/y", parents=False)
    fs.remove("/tmp/tree/a/b/two.txt")
    assert not fs.exists("/tmp/tree/a/b/two.txt")
    fs.remove("/tmp/tree", recursive=True)
    assert not fs.exists("/tmp/tree")
    with pytest.raises(NotFoundError):
        fs.remove("/tmp/tree")


def test_file_errors(shared_sandbox):
    fs = shared_sandbox.files
    with pytest.raises(NotFoundError):
        fs.read("/tmp/does/not/exist")
    with pytest.raises(NotFoundError):
        fs.stat("/tmp/does/not/exist")
    with pytest.raises(InvalidArgumentError):
        fs.read("/tmp")  # a directory
    with pytest.raises(InvalidArgumentError):
        fs.read("relative/path")
    with pytest.raises(InvalidArgumentError):
        fs.write("/tmp/../etc/x", "no")
    with pytest.raises(InvalidArgumentError):
        fs.remove("/")
    with pytest.raises(NotFoundError):
        fs.download("/tmp/does/not/exist", "/tmp/pysdk-never-written")
    assert not os.path.exists("/tmp/pysdk-never-written")


def test_signed_urls_work_with_curl_and_no_key(shared_sandbox):
    """A signed URL uploads and downloads one file with plain curl (no API key), and opens
    nothing for another path, another method, or once it expired."""
    import subprocess
    import time

    def curl(*args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", *args],
            capture_output=True, text=True, timeout=60, check=True,
        )

    def answer(r: "subprocess.CompletedProcess[str]"):
        body, _, code = r.stdout.rpartition("\n")
        return int(code), body

    fs = shared_sandbox.files
    put = fs.url("/tmp/signed/in.txt", method="PUT", expires_in=120)
    assert put.method == "PUT" and put.path == "/tmp/signed/in.txt"
    assert put.url.startswith("http") and "/files/signed?" in put.url
    code, body = answer(curl("-X", "PUT", "--data-binary", "via curl", put.url))
    assert code == 200, body
    assert shared_sandbox.exec("cat /tmp/signed/in.txt").stdout == "via curl"

    get = fs.url("/tmp/signed/in.txt")
    assert answer(curl(get.url)) == (200, "via curl")
    # Another path (the signature names the path), another method: 403.
    assert "path=/tmp/signed/in.txt&" in get.url, get.url
    other = get.url.replace("in.txt", "other.txt")
    code, body = answer(curl(other))
    assert code == 403 and "signature" in body, body
    code, body = answer(curl("-X", "PUT", "--data-binary", "x", get.url))
    assert code == 403, body
    # Expired.
    short = fs.url("/tmp/signed/in.txt", expires_in=1)
    time.sleep(2.2)
    code, body = answer(curl(short.url))
    assert code == 403 and "expired" in body, body
    with pytest.raises(ValueError):
        fs.url("/tmp/x", method="DELETE")
    with pytest.raises(InvalidArgumentError):
        fs.url("/tmp/x", expires_in=0)


def test_watch_sees_what_a_command_writes(shared_sandbox):
    """files.watch yields ready, then the changes a command makes at every depth; a write
    through the API lands by a rename; leaving the loop ends the watch; a file is refused."""
    sb = shared_sandbox
    sb.exec("rm -rf /tmp/watched && mkdir -p /tmp/watched")
    events = sb.files.watch("/tmp/watched", recursive=True)
    first = next(events)
    assert (first.type, first.path) == ("ready", "/tmp/watched")
    sb.exec("mkdir /tmp/watched/sub")
    seen = []
    for ev in events:
        seen.append((ev.type, ev.path))
        if ev.type == "create" and ev.path == "/tmp/watched/sub":
            break
    assert seen == [("create", "/tmp/watched/sub")], seen
    sb.exec("echo hi > /tmp/watched/sub/a.txt")
    sb.files.write("/tmp/watched/sub/b.txt", "via the API")
    seen = []
    for ev in events:
        seen.append((ev.type, ev.path, ev.from_path))
        if ev.type == "rename" and ev.path == "/tmp/watched/sub/b.txt":
            break
    assert ("create", "/tmp/watched/sub/a.txt", None) in seen, seen
    assert ("modify", "/tmp/watched/sub/a.txt", None) in seen, seen
    assert seen[-1][2].startswith("/tmp/watched/sub/."), seen  # the API's temporary file
    events.close()

    with pytest.raises(InvalidArgumentError):
        next(sb.files.watch("/tmp/watched/sub/a.txt"))
    with pytest.raises(NotFoundError):
        next(sb.files.watch("/tmp/no-such-dir"))
