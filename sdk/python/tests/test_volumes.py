"""Volumes against a real server with real guests: create/list/get/grow/delete and their
errors; the agent workspace that survives its sandbox (write in one sandbox, read back in the
next); one read-write mount at a time, read-only copies alongside; volume snapshots; backups
restored into a new volume."""

from __future__ import annotations

import sys
from typing import Iterator, List

import pytest

from conftest import RUN_ID, Factory
from pandastack import (
    ConflictError,
    InvalidArgumentError,
    PandaStack,
    VolumeBusyError,
    VolumeMount,
    VolumeNotFoundError,
)


class Volumes:
    """Creates volumes named for this run and deletes them at teardown, after killing the
    test's sandboxes (a volume mounted read-write cannot be deleted)."""

    def __init__(self, client: PandaStack, sandboxes: Factory) -> None:
        self.client = client
        self.sandboxes = sandboxes
        self.names: List[str] = []

    def name(self, what: str) -> str:
        n = f"py-{RUN_ID}-{what}"
        self.names.append(n)
        return n

    def create(self, what: str, size_gb: int = 1, **kw):
        return self.client.volumes.create(self.name(what), size_gb=size_gb, **kw)

    def cleanup(self) -> None:
        self.sandboxes.cleanup()
        for n in self.names:
            try:
                self.client.volumes.delete(n)
            except Exception as e:  # pragma: no cover - report, do not mask the test result
                print(f"cleanup of volume {n} failed: {e!r}", file=sys.stderr)


@pytest.fixture
def volumes(client: PandaStack, make_sandbox: Factory) -> Iterator[Volumes]:
    v = Volumes(client, make_sandbox)
    yield v
    v.cleanup()


def test_create_list_get_grow_delete(client, volumes):
    v = volumes.create("crud", size_gb=1)
    assert v.name.endswith("-crud") and v.size_gb == 1
    assert v.attached_to is None and v.attachments == [] and v.source is None
    assert v.id and v.created_at and v.host
    assert v.name in [x.name for x in client.volumes.list()]
    assert client.volumes.get(v.name).id == v.id
    grown = client.volumes.grow(v.name, 2)
    assert grown.size_gb == 2 and client.volumes.get(v.name).size_gb == 2
    assert client.volumes.delete(v.name) is True
    with pytest.raises(VolumeNotFoundError) as ei:
        client.volumes.get(v.name)
    assert ei.value.status == 404 and ei.value.code == "volume_not_found"
    assert client.volumes.delete(v.name) is False


def test_bad_name_missing_size_and_duplicate(client, volumes):
    with pytest.raises(InvalidArgumentError) as ei:
        client.volumes.create("Not_A_Name", size_gb=1)
    assert ei.value.status == 422 and ei.value.code == "invalid_argument"
    with pytest.raises(InvalidArgumentError) as ei:
        client.volumes.create(volumes.name("nosize"))
    assert ei.value.status == 422 and "size_gb" in ei.value.message
    v = volumes.create("dup")
    with pytest.raises(ConflictError) as ei:
        client.volumes.create(v.name, size_gb=1)
    assert ei.value.status == 409 and ei.value.code == "conflict"


def test_workspace_survives_its_sandbox(client, volumes, make_sandbox):
    v = volumes.create("ws")
    first = make_sandbox(volumes=[{"name": v.name, "path": "/workspace"}])
    assert first.volumes == [VolumeMount(v.name, "/workspace", False)]
    first.exec(
        "mkdir -p /workspace/repo && echo 'state of the work' > /workspace/repo/notes.txt && sync",
        check=True,
    )
    assert client.volumes.get(v.name).attached_to == first.id

    # One read-write mount at a time: a second sandbox is refused, naming the first.
    with pytest.raises(VolumeBusyError) as ei:
        make_sandbox(volumes=[VolumeMount(v.name, "/workspace")])
    assert ei.value.status == 409 and ei.value.code == "volume_busy"
    assert first.id in ei.value.message
    with pytest.raises(VolumeBusyError):
        client.volumes.delete(v.name)

    first.kill()
    assert client.volumes.get(v.name).attached_to is None
    second = make_sandbox(volumes=[{"name": v.name, "path": "/home/work"}])
    assert second.files.read("/home/work/repo/notes.txt") == "state of the work\n"
    second.exec("echo more >> /home/work/repo/notes.txt && sync", check=True)
    assert second.exec("cat /home/work/repo/notes.txt").stdout == "state of the work\nmore\n"


def test_read_only_copies_alongside_the_writer(client, volumes, make_sandbox):
    v = volumes.create("ro")
    writer = make_sandbox(volumes=[{"name": v.name, "path": "/data"}])
    writer.exec("echo one > /data/f && sync", check=True)
    readers = [make_sandbox(volumes=[VolumeMount(v.name, "/data", read_only=True)]) for _ in range(2)]
    for r in readers:
        assert r.volumes[0].read_only is True
        assert r.files.read("/data/f") == "one\n"
        assert r.exec("echo x > /data/g").exit_code != 0, "a read-only mount refuses writes"
    attachments = client.volumes.get(v.name).attachments
    assert {a.sandbox_id for a in attachments} == {writer.id} | {r.id for r in readers}
    assert [a.sandbox_id for a in attachments if not a.read_only] == [writer.id]


def test_snapshot_and_create_from_it(client, volumes, make_sandbox):
    v = volumes.create("snap")
    sb = make_sandbox(volumes=[{"name": v.name, "path": "/data"}])
    sb.exec("echo before > /data/f && sync", check=True)
    snap = client.volumes.snapshot(v.name)
    assert snap.id and snap.volume == v.name and snap.size_gb == 1
    assert snap.frozen is True, "a running sandbox's file system is frozen for the copy"
    sb.exec("echo after > /data/f && sync", check=True)
    assert snap.id in [s.id for s in client.volumes.snapshots(v.name)]

    restored = client.volumes.create(volumes.name("snap-copy"), from_snapshot=snap.id, size_gb=2)
    assert restored.source == snap.id and restored.size_gb == 2
    other = make_sandbox(volumes=[{"name": restored.name, "path": "/data"}])
    assert other.files.read("/data/f") == "before\n"
    assert client.volumes.delete_snapshot(v.name, snap.id) is True
    assert snap.id not in [s.id for s in client.volumes.snapshots(v.name)]


def test_backup_wait_and_restore(client, volumes, make_sandbox):
    v = volumes.create("bk")
    sb = make_sandbox(volumes=[{"name": v.name, "path": "/data"}])
    sb.exec("head -c 3000000 /dev/urandom > /data/blob && sha256sum /data/blob > /data/sum && sync", check=True)
    want = sb.files.read("/data/sum")
    started = client.volumes.backup(v.name)
    assert started.volume == v.name and started.state in ("uploading", "done")
    done = client.volumes.wait_backup(v.name, started.id, timeout=600)
    assert done.state == "done" and done.finished_at and done.error is None
    assert (done.bytes_uploaded or 0) >= 3_000_000
    assert done.id in [bk.id for bk in client.volumes.backups(v.name)]

    sb.kill()
    assert client.volumes.delete(v.name) is True
    # Backups live in the object store: listed and restorable after the volume is gone.
    assert done.id in [bk.id for bk in client.volumes.backups(v.name)]
    restored = client.volumes.create(volumes.name("bk-restored"), from_backup=done.id)
    assert restored.source == done.id and restored.size_gb == 1
    reader = make_sandbox(volumes=[VolumeMount(restored.name, "/restored", read_only=True)])
    assert reader.files.read("/restored/sum") == want
    assert reader.exec("cd / && sed 's#/data/#/restored/#' /restored/sum | sha256sum -c -").exit_code == 0
