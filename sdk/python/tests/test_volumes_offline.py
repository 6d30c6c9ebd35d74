"""Volumes against a fake local HTTP server (no PandaStack server needed): what each call of
``client.volumes`` sends and how it reads the answers, the error classes of the volume codes,
waiting for a backup, and ``volumes=`` of a sandbox create. Sync and async."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

import pytest

from fakeserver import SANDBOX, FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    ConflictError,
    InvalidArgumentError,
    PandaStack,
    QuotaExceededError,
    Volume,
    VolumeBackup,
    VolumeBackupError,
    VolumeBackupTimeoutError,
    VolumeBusyError,
    VolumeMount,
    VolumeNotFoundError,
    VolumeSnapshot,
)

pytestmark = pytest.mark.offline


def vol(**kw):
    v = {
        "id": "vol-1",
        "name": "ws",
        "size_gb": 2,
        "attached_to": None,
        "attachments": [],
        "source": None,
        "host": "local",
        "created_at": "2026-01-01T00:00:00Z",
    }
    v.update(kw)
    return v


def backup(state="uploading", **kw):
    bk = {
        "id": "vb-1",
        "volume": "ws",
        "size_gb": 2,
        "state": state,
        "bytes_uploaded": None,
        "chunks": None,
        "error": None,
        "created_at": "2026-01-01T00:00:00Z",
        "finished_at": None,
    }
    bk.update(kw)
    return bk


def body(rec):
    return json.loads(rec["body"]) if rec["body"] else None


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    c = PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)
    return c


def test_create_sends_only_what_was_given_and_reads_the_volume(fake):
    fake.on("POST", "/v1/volumes", reply(201, vol(attachments=[{"sandbox_id": "sb-1", "path": "/w", "read_only": True}])))
    with make(fake) as c:
        v = c.volumes.create("ws", size_gb=2)
        assert isinstance(v, Volume)
        assert (v.name, v.size_gb, v.attached_to, v.host) == ("ws", 2, None, "local")
        assert v.attachments[0].sandbox_id == "sb-1" and v.attachments[0].read_only is True
        c.volumes.create("ws2", from_backup="vb-1")
        c.volumes.create("ws3", size_gb=5, from_snapshot="vs-1")
    calls = fake.calls("POST", "/v1/volumes")
    assert [body(r) for r in calls] == [
        {"name": "ws", "size_gb": 2},
        {"name": "ws2", "from_backup": "vb-1"},
        {"name": "ws3", "size_gb": 5, "from_snapshot": "vs-1"},
    ]
    assert all(r["headers"].get("idempotency-key") for r in calls)


def test_create_refuses_both_sources_before_any_request(fake):
    with make(fake) as c:
        with pytest.raises(InvalidArgumentError):
            c.volumes.create("ws", from_snapshot="vs-1", from_backup="vb-1")
    assert fake.requests == []


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (404, "volume_not_found", VolumeNotFoundError),
        (409, "volume_busy", VolumeBusyError),
        (409, "conflict", ConflictError),
        (507, "quota_exceeded", QuotaExceededError),
        (422, "invalid_argument", InvalidArgumentError),
    ],
)
def test_volume_error_codes_map_to_classes(fake, status, code, cls):
    fake.on("PATCH", "/v1/volumes/ws", error(status, code, f"{code} here"))
    with make(fake) as c:
        with pytest.raises(cls) as ei:
            c.volumes.grow("ws", 4)
    assert ei.value.code == code and ei.value.status == status
    if cls is VolumeBusyError:
        assert isinstance(ei.value, ConflictError)
    assert body(fake.calls("PATCH", "/v1/volumes/ws")[0]) == {"size_gb": 4}


def test_list_follows_cursors_and_get_grow_delete(fake):
    fake.on_call(
        "GET",
        "/v1/volumes",
        lambda r: reply(200, {"data": [vol(name="b")], "next_cursor": None})
        if query(r).get("cursor") == "c1"
        else reply(200, {"data": [vol(name="a")], "next_cursor": "c1"}),
    )
    fake.on("GET", "/v1/volumes/a", reply(200, vol(name="a")))
    fake.on("PATCH", "/v1/volumes/a", reply(200, vol(name="a", size_gb=8)))
    fake.on("DELETE", "/v1/volumes/a", reply(204), error(404, "volume_not_found", "gone"))
    with make(fake) as c:
        assert [v.name for v in c.volumes.list(limit=1)] == ["a", "b"]
        assert query(fake.calls("GET", "/v1/volumes")[0]) == {"limit": "1"}
        assert c.volumes.get("a").name == "a"
        assert c.volumes.grow("a", 8).size_gb == 8
        assert c.volumes.delete("a") is True
        assert c.volumes.delete("a") is False


def test_snapshots(fake):
    snap = {"id": "vs-1", "volume": "ws", "size_gb": 2, "frozen": True, "created_at": "t"}
    fake.on("POST", "/v1/volumes/ws/snapshots", reply(201, snap))
    fake.on("GET", "/v1/volumes/ws/snapshots", reply(200, {"data": [snap], "next_cursor": None}))
    fake.on("DELETE", "/v1/volumes/ws/snapshots/vs-1", reply(204), error(404, "not_found", "gone"))
    with make(fake) as c:
        s = c.volumes.snapshot("ws")
        assert isinstance(s, VolumeSnapshot) and s.frozen and s.volume == "ws"
        assert [x.id for x in c.volumes.snapshots("ws")] == ["vs-1"]
        assert c.volumes.delete_snapshot("ws", "vs-1") is True
        assert c.volumes.delete_snapshot("ws", "vs-1") is False


def test_backup_wait_polls_until_done(fake):
    fake.on("POST", "/v1/volumes/ws/backups", reply(202, backup()))
    fake.on(
        "GET",
        "/v1/volumes/ws/backups/vb-1",
        reply(200, backup()),
        reply(200, backup(bytes_uploaded=10)),
        reply(200, backup("done", bytes_uploaded=20, chunks=3, finished_at="t2")),
    )
    fake.on("GET", "/v1/volumes/ws/backups", reply(200, {"data": [backup("done")], "next_cursor": None}))
    with make(fake) as c:
        bk = c.volumes.backup("ws")
        assert isinstance(bk, VolumeBackup) and bk.state == "uploading" and not bk.finished
        done = c.volumes.wait_backup("ws", bk.id, timeout=30)
        assert (done.state, done.bytes_uploaded, done.chunks, done.finished_at) == ("done", 20, 3, "t2")
        assert done.finished
        assert len(fake.calls("GET", "/v1/volumes/ws/backups/vb-1")) == 3
        assert [x.state for x in c.volumes.backups("ws")] == ["done"]


def test_backup_wait_true_and_failure(fake):
    fake.on("POST", "/v1/volumes/ws/backups", reply(202, backup()))
    fake.on("GET", "/v1/volumes/ws/backups/vb-1", reply(200, backup("failed", error="s3 said no")))
    with make(fake) as c:
        with pytest.raises(VolumeBackupError) as ei:
            c.volumes.backup("ws", wait=True)
    assert ei.value.error == "s3 said no" and ei.value.backup.id == "vb-1"
    assert "s3 said no" in str(ei.value)


def test_backup_wait_times_out(fake):
    fake.on("GET", "/v1/volumes/ws/backups/vb-1", reply(200, backup()))
    with make(fake) as c:
        with pytest.raises(VolumeBackupTimeoutError) as ei:
            c.volumes.wait_backup("ws", "vb-1", timeout=0.3)
    assert ei.value.backup.state == "uploading"
    assert isinstance(ei.value, VolumeBackupError)


def test_sandbox_create_sends_volumes_and_reads_them_back(fake):
    mounted = [{"name": "ws", "path": "/workspace", "read_only": False}, {"name": "ref", "path": "/ref", "read_only": True}]
    fake.on("POST", "/v1/sandboxes", reply(201, {**SANDBOX, "volumes": mounted}))
    with make(fake) as c:
        sb = c.sandboxes.create(
            template="minimal",
            volumes=[{"name": "ws", "path": "/workspace"}, VolumeMount("ref", "/ref", read_only=True)],
        )
        assert sb.volumes == [VolumeMount("ws", "/workspace"), VolumeMount("ref", "/ref", True)]
        assert sb.data.volumes[1].read_only is True
        with pytest.raises(InvalidArgumentError):
            c.sandboxes.create(volumes=[{"name": "ws"}])
        with pytest.raises(InvalidArgumentError):
            c.sandboxes.create(volumes={"name": "ws", "path": "/w"})
        with pytest.raises(InvalidArgumentError):
            c.sandboxes.create(volumes=[{"name": "ws", "path": "/w", "readonly": True}])
    calls = fake.calls("POST", "/v1/sandboxes")
    assert len(calls) == 1
    assert body(calls[0])["volumes"] == mounted


def test_sandbox_without_volumes_sends_none_and_reads_an_empty_list(fake):
    fake.on("POST", "/v1/sandboxes", reply(201, SANDBOX))
    with make(fake) as c:
        sb = c.sandboxes.create()
        assert sb.volumes == []
    assert "volumes" not in body(fake.calls("POST", "/v1/sandboxes")[0])


def test_async_volumes(fake):
    fake.on("POST", "/v1/volumes", reply(201, vol()))
    fake.on("GET", "/v1/volumes", reply(200, {"data": [vol()], "next_cursor": None}))
    fake.on("POST", "/v1/volumes/ws/backups", reply(202, backup()))
    fake.on("GET", "/v1/volumes/ws/backups/vb-1", reply(200, backup()), reply(200, backup("done")))
    fake.on("POST", "/v1/sandboxes", error(409, "volume_busy", "volume ws is mounted by sb-1"))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            v = await c.volumes.create("ws", size_gb=2)
            assert v.name == "ws"
            assert [x.name async for x in c.volumes.list()] == ["ws"]
            done = await c.volumes.backup("ws", wait=True, timeout=30)
            assert done.state == "done"
            with pytest.raises(VolumeBusyError):
                await c.sandboxes.create(volumes=[VolumeMount("ws", "/w")])

    asyncio.run(main())
