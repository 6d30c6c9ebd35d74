"""Template builds against a real server: a ``docker save`` tarball made here from the host's
static busybox (``busybox-static``, installed by scripts/setup-host.sh) is built, followed to
``ready``, run as a sandbox (its file and the image's ``Env`` are there) and deleted; a garbage
tarball's build fails with :class:`TemplateBuildError`."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import tarfile
import uuid

import pytest

from pandastack import (
    AsyncPandaStack,
    PandaStackError,
    Template,
    TemplateBuildError,
    TemplateNotFoundError,
)

BUSYBOX = "/bin/busybox"
#: Upload, unpack and a cold-boot bake under TCG take seconds; this bounds a stuck build.
BUILD_TIMEOUT = 240


def _entry(tar: tarfile.TarFile, name: str, data: bytes = b"", *, mode: int = 0o644,
           kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 1_700_000_000
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _tar(build) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        build(tar)
    return buf.getvalue()


def docker_save() -> bytes:
    """A ``docker save`` tarball: one layer with busybox, ``sh`` and ``cat`` linked to it and
    ``/hello.txt``; the config's ``Env`` sets ``GREETING``."""
    if not os.path.exists(BUSYBOX):
        pytest.fail(f"{BUSYBOX} is missing: install busybox-static (scripts/setup-host.sh)")
    with open(BUSYBOX, "rb") as f:
        busybox = f.read()

    def layer(tar: tarfile.TarFile) -> None:
        _entry(tar, "bin", kind=tarfile.DIRTYPE, mode=0o755)
        _entry(tar, "bin/busybox", busybox, mode=0o755)
        for tool in ("sh", "cat"):
            _entry(tar, f"bin/{tool}", kind=tarfile.SYMTYPE, mode=0o777, link="busybox")
        _entry(tar, "hello.txt", b"hello from the image\n")

    l1 = _tar(layer)
    manifest = json.dumps([{"Config": "config.json", "Layers": ["l1/layer.tar"]}]).encode()
    config = json.dumps({"config": {"Env": ["PATH=/bin", "GREETING=hi"]}}).encode()

    def outer(tar: tarfile.TarFile) -> None:
        _entry(tar, "manifest.json", manifest)
        _entry(tar, "config.json", config)
        _entry(tar, "l1", kind=tarfile.DIRTYPE, mode=0o755)
        _entry(tar, "l1/layer.tar", l1)

    return _tar(outer)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def forget(client, name: str) -> None:
    """Cleanup that never masks the test's own outcome."""
    try:
        client.templates.delete(name)
    except PandaStackError as e:  # pragma: no cover - e.g. a build still under way
        print(f"cleanup of template {name} failed: {e}", file=sys.stderr)


def test_build_busybox_tarball_run_and_delete(client, make_sandbox, tmp_path):
    name = unique("py-bb")
    path = tmp_path / "busybox.tar"
    path.write_bytes(docker_save())
    pieces = []
    try:
        t = client.templates.build(
            name,
            tarball=path,  # streamed from disk
            memory_mb=256,
            description="busybox from the Python SDK tests",
            on_log=pieces.append,
            timeout_seconds=BUILD_TIMEOUT,
        )
        assert isinstance(t, Template)
        assert (t.name, t.state, t.source, t.version, t.ready_version) == (name, "ready", "oci", 1, 1)
        assert t.memory_mb == 256 and t.error is None and not t.building
        assert t.bake_ms and t.bake_ms > 0 and t.image_bytes and t.created_at
        log = "".join(pieces)
        assert "ready" in log, log
        assert client.templates.logs(name) == log
        assert client.templates.logs(name, version=1) == log
        got = client.templates.get(name)
        assert (got.state, got.description) == ("ready", "busybox from the Python SDK tests")
        assert name in {x.name for x in client.templates.list()}

        sb = make_sandbox(template=name)
        r = sb.exec(argv=["/bin/sh", "-c", "cat /hello.txt; echo $GREETING"])
        assert (r.exit_code, r.stdout) == (0, "hello from the image\nhi\n"), r
        assert sb.kill() is True

        assert client.templates.delete(name) is True
        with pytest.raises(TemplateNotFoundError):
            client.templates.get(name)
        assert client.templates.delete(name) is False
    finally:
        forget(client, name)


def test_garbage_tarball_build_fails(server_env):
    name = unique("py-junk")

    async def main() -> TemplateBuildError:
        async with AsyncPandaStack(
            api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"]
        ) as c:
            try:
                queued = await c.templates.build(name, tarball=b"not a tarball at all" * 100, wait=False)
                assert (queued.name, queued.state, queued.version) == (name, "queued", 1)
                for _ in range(BUILD_TIMEOUT * 2):
                    if not (await c.templates.get(name)).building:
                        break
                    await asyncio.sleep(0.5)
                assert (await c.templates.get(name)).state == "failed"
                # Version 2, waited for: the failure is raised.
                with pytest.raises(TemplateBuildError) as ei:
                    await c.templates.build(
                        name, tarball=io.BytesIO(b"\x00garbage" * 64), timeout_seconds=BUILD_TIMEOUT
                    )
                assert "failed" in await c.templates.logs(name)
                assert "failed" in await c.templates.logs(name, version=1)
                assert await c.templates.delete(name) is True
                return ei.value
            finally:
                try:
                    await c.templates.delete(name)
                except PandaStackError:
                    pass

    err = asyncio.run(main())
    assert err.template.name == name and err.template.state == "failed"
    assert err.template.version == 2
    assert err.error and err.error in str(err)
