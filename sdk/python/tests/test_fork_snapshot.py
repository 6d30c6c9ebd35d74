"""Forks, snapshots, hibernate/wake and list pagination against a real server."""

from __future__ import annotations

import concurrent.futures as cf

from pandastack import Sandbox, Snapshot


def test_fork_isolation(client, make_sandbox):
    parent = make_sandbox(metadata={"role": "parent"})
    parent.files.write("/root/state.txt", "from parent")
    parent.exec("echo 41 > /tmp/counter")

    child = parent.fork()
    make_sandbox.track(child)
    assert isinstance(child, Sandbox) and child.id != parent.id
    assert child.state == "running" and child.snapshot_id
    assert child.metadata["role"] == "parent"  # inherited
    assert child.files.read("/root/state.txt") == "from parent"
    assert child.exec("cat /tmp/counter").stdout == "41\n"

    child.files.write("/root/child-only.txt", "mine")
    child.exec("echo 42 > /tmp/counter")
    assert not parent.files.exists("/root/child-only.txt")
    assert parent.exec("cat /tmp/counter").stdout == "41\n"
    parent.files.write("/root/parent-later.txt", "later")
    assert not child.files.exists("/root/parent-later.txt")

    kids = parent.fork(count=2, metadata={**make_sandbox.tags, "role": "kid"})
    make_sandbox.track(*kids)
    assert isinstance(kids, list) and len(kids) == 2 and len({k.id for k in kids}) == 2
    assert all(k.metadata["role"] == "kid" for k in kids)
    for i, k in enumerate(kids):
        k.exec(f"echo {i} > /tmp/who")
    assert [k.exec("cat /tmp/who").stdout for k in kids] == ["0\n", "1\n"]
    one = parent.fork(count=1)
    make_sandbox.track(*one)
    assert isinstance(one, list) and len(one) == 1


def test_snapshot_and_create_from_it(client, make_sandbox):
    sb = make_sandbox()
    sb.files.write("/root/snap.txt", "snapshotted")
    snap = sb.snapshot()
    assert isinstance(snap, Snapshot) and snap.sandbox_id == sb.id and snap.size_bytes >= 0
    assert snap.id in {s.id for s in client.snapshots.list()}
    sb.files.write("/root/snap.txt", "changed after")

    restored = make_sandbox(snapshot_id=snap.id)
    assert restored.id != sb.id and restored.snapshot_id == snap.id
    assert restored.template == sb.template
    assert restored.files.read("/root/snap.txt") == "snapshotted"
    assert sb.files.read("/root/snap.txt") == "changed after"

    assert client.snapshots.delete(snap.id) is True
    assert client.snapshots.delete(snap.id) is False
    assert snap.id not in {s.id for s in client.snapshots.list()}


def test_hibernate_wake_and_auto_wake(client, make_sandbox):
    sb = make_sandbox()
    sb.files.write("/root/keep.txt", "survives")
    sb.exec("echo 123 > /dev/shm/in-memory")
    assert sb.hibernate().state == "hibernated"
    assert client.sandboxes.get(sb.id).state == "hibernated"
    assert sb.hibernate().state == "hibernated"  # idempotent
    assert sb.wake().state == "running"
    assert sb.files.read("/root/keep.txt") == "survives"
    assert sb.exec("cat /dev/shm/in-memory").stdout == "123\n"  # memory came back too

    # Any sandbox route wakes a hibernated sandbox.
    sb.hibernate()
    r = sb.exec("cat /root/keep.txt")
    assert r.stdout == "survives"
    assert sb.refresh().state == "running"
    sb.hibernate()
    assert sb.files.read("/root/keep.txt") == "survives"
    assert client.sandboxes.get(sb.id).state == "running"
    # connect() wakes explicitly
    sb.hibernate()
    assert client.sandboxes.connect(sb.id).state == "running"


def test_pagination_with_metadata_filter(client, template, tags, make_sandbox):
    group = {**tags, "group": "page"}
    with cf.ThreadPoolExecutor(3) as pool:
        made = list(pool.map(lambda i: make_sandbox(metadata={"group": "page", "i": str(i)}), range(3)))
    it = client.sandboxes.list(metadata=group, limit=1)
    pages = list(it.pages())
    assert len(pages) == 3 and all(len(p.data) == 1 for p in pages)
    assert pages[-1].next_cursor is None and pages[0].next_cursor
    ids = [s.id for s in it]
    assert sorted(ids) == sorted(s.id for s in made) and len(set(ids)) == 3
    # the cursor can be handed back explicitly
    rest = client.sandboxes.list(metadata=group, limit=1, cursor=pages[0].next_cursor).to_list()
    assert [s.id for s in rest] == ids[1:]
    assert client.sandboxes.list(metadata={**group, "i": "1"}).to_list()[0].id == made[1].id
    assert client.sandboxes.list(metadata=group, state="hibernated").to_list() == []
    snaps = client.snapshots.list(limit=1)
    assert all(isinstance(s, Snapshot) for s in snaps)
