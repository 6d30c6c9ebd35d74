"""Hosts (the operator routes, admin keys) against a fake local HTTP server (no PandaStack
server needed): what each call of ``client.hosts`` sends and how it reads the answers, and the
errors a workspace key (403) or a host in the wrong state (409) gets. Sync and async."""

from __future__ import annotations

import asyncio

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    ConflictError,
    Host,
    HostCapacity,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    PermissionDeniedError,
)

pytestmark = pytest.mark.offline

CAPACITY = {"vcpus": 16, "memory_mib": 65536, "disk_bytes": 10**12, "free_slots": 30, "creates_in_flight": 1, "slots": 32}


def host(**kw):
    h = {
        "id": "host-1",
        "name": "node-a",
        "address": "10.0.0.1:7070",
        "state": "ready",
        "epoch": 3,
        "lease_expires_at": "2026-01-01T00:00:30Z",
        "capacity": CAPACITY,
        "compat_key": "qemu-9.0/k6.6/x86-64-v3",
        "templates": ["base", "minimal"],
        "sandboxes": 2,
        "created_at": "2026-01-01T00:00:00Z",
        "last_seen_at": "2026-01-01T00:00:01Z",
    }
    h.update(kw)
    return h


FORBIDDEN = error(403, "forbidden", "this route takes an admin key")


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_admin", base_url=fake.url, max_retries=0)


def test_list_and_get_read_every_field(fake):
    local = host(id="host-0", name="local", address=None, lease_expires_at=None, compat_key=None, sandboxes=0,
                 capacity={k: 0 for k in CAPACITY}, templates=[])
    fake.on("GET", "/v1/hosts", reply(200, {"data": [local, host()], "next_cursor": None}))
    fake.on("GET", "/v1/hosts/host-1", reply(200, host(future_field="kept")))
    fake.on("GET", "/v1/hosts/host-9", error(404, "host_not_found", "host host-9 not found"))
    with make(fake) as c:
        hosts = c.hosts.list()
        assert [h.id for h in hosts] == ["host-0", "host-1"]
        assert (hosts[0].address, hosts[0].lease_expires_at, hosts[0].compat_key) == (None, None, None)
        assert hosts[0].capacity == HostCapacity()
        h = c.hosts.get("host-1")
        assert isinstance(h, Host)
        assert (h.id, h.name, h.address, h.state, h.epoch, h.sandboxes) == ("host-1", "node-a", "10.0.0.1:7070", "ready", 3, 2)
        assert h.capacity == HostCapacity(vcpus=16, memory_mib=65536, disk_bytes=10**12, free_slots=30, creates_in_flight=1, slots=32)
        assert (h.templates, h.compat_key) == (["base", "minimal"], "qemu-9.0/k6.6/x86-64-v3")
        assert (h.created_at, h.last_seen_at, h.lease_expires_at) == (
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:01Z",
            "2026-01-01T00:00:30Z",
        )
        assert h.raw["future_field"] == "kept"
        with pytest.raises(NotFoundError) as e:
            c.hosts.get("host-9")
        assert e.value.code == "host_not_found" and e.value.status == 404
    assert [r["headers"]["authorization"] for r in fake.requests[:1]] == ["Bearer pds_admin"]


def test_drain_undrain_and_forget(fake):
    fake.on("POST", "/v1/hosts/host-1/drain", reply(200, host(state="draining")))
    fake.on("POST", "/v1/hosts/host-1/undrain", reply(200, host(state="ready")))
    fake.on("DELETE", "/v1/hosts/host-2", reply(204))
    fake.on("DELETE", "/v1/hosts/host-9", error(404, "host_not_found", "host host-9 not found"))
    with make(fake) as c:
        assert c.hosts.drain("host-1").state == "draining"
        assert c.hosts.undrain("host-1").state == "ready"
        assert c.hosts.forget("host-2") is True
        assert c.hosts.forget("host-9") is False
    assert [(r["method"], r["path"], r["body"]) for r in fake.requests] == [
        ("POST", "/v1/hosts/host-1/drain", b""),
        ("POST", "/v1/hosts/host-1/undrain", b""),
        ("DELETE", "/v1/hosts/host-2", b""),
        ("DELETE", "/v1/hosts/host-9", b""),
    ]


def test_a_workspace_key_is_refused_with_a_typed_error(fake):
    for method, path in (
        ("GET", "/v1/hosts"),
        ("GET", "/v1/hosts/host-1"),
        ("POST", "/v1/hosts/host-1/drain"),
        ("POST", "/v1/hosts/host-1/undrain"),
        ("DELETE", "/v1/hosts/host-1"),
    ):
        fake.on(method, path, FORBIDDEN)
    with make(fake) as c:
        for call in (
            c.hosts.list,
            lambda: c.hosts.get("host-1"),
            lambda: c.hosts.drain("host-1"),
            lambda: c.hosts.undrain("host-1"),
            lambda: c.hosts.forget("host-1"),
        ):
            with pytest.raises(PermissionDeniedError) as e:
                call()
            assert (e.value.status, e.value.code) == (403, "forbidden")
            assert "admin key" in str(e.value) and e.value.request_id == "req_fake_403"
    assert len(fake.requests) == 5


def test_a_host_in_the_wrong_state_is_a_conflict_with_the_reason(fake):
    not_dead = "host host-1 is not dead: only a dead host (its lease lapsed) can be forgotten"
    dead = "host host-2 is dead: only its agent joining again makes it ready"
    fake.on("DELETE", "/v1/hosts/host-1", error(409, "conflict", not_dead))
    fake.on("POST", "/v1/hosts/host-2/drain", error(409, "conflict", dead))
    fake.on("POST", "/v1/hosts/host-2/undrain", error(409, "conflict", dead))
    with make(fake) as c:
        with pytest.raises(ConflictError) as e:
            c.hosts.forget("host-1")
        assert (e.value.status, e.value.code) == (409, "conflict") and not_dead in str(e.value)
        for call in (c.hosts.drain, c.hosts.undrain):
            with pytest.raises(ConflictError) as e:
                call("host-2")
            assert dead in str(e.value)


def test_ids_are_one_path_segment(fake):
    fake.on("GET", "/v1/hosts/a%2Fb", reply(200, host(id="a/b")))
    with make(fake) as c:
        assert c.hosts.get("a/b").id == "a/b"
        with pytest.raises(InvalidArgumentError):
            c.hosts.drain("")
    assert [r["path"] for r in fake.requests] == ["/v1/hosts/a%2Fb"]


def test_async_hosts(fake):
    fake.on("GET", "/v1/hosts", reply(200, {"data": [host()], "next_cursor": None}))
    fake.on("GET", "/v1/hosts/host-1", reply(200, host()))
    fake.on("POST", "/v1/hosts/host-1/drain", reply(200, host(state="draining")))
    fake.on("POST", "/v1/hosts/host-1/undrain", reply(200, host()))
    fake.on("DELETE", "/v1/hosts/host-1", error(409, "conflict", "host host-1 is not dead"))
    fake.on("DELETE", "/v1/hosts/host-2", reply(204))
    fake.on("GET", "/v1/hosts/host-3", FORBIDDEN)

    async def main():
        async with AsyncPandaStack(api_key="pds_admin", base_url=fake.url, max_retries=0) as c:
            assert [h.id for h in await c.hosts.list()] == ["host-1"]
            assert (await c.hosts.get("host-1")).capacity.free_slots == 30
            assert (await c.hosts.drain("host-1")).state == "draining"
            assert (await c.hosts.undrain("host-1")).state == "ready"
            with pytest.raises(ConflictError, match="not dead"):
                await c.hosts.forget("host-1")
            assert await c.hosts.forget("host-2") is True
            with pytest.raises(PermissionDeniedError, match="admin key"):
                await c.hosts.get("host-3")

    asyncio.run(main())
