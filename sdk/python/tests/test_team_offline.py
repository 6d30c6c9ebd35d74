"""Members, the audit log and members' keys against a fake local HTTP server (no PandaStack
server needed): what ``client.members``, ``client.audit`` and ``client.keys.create(...,
member_id=...)`` send and how they read the answers, paging the audit log with its filters,
bad arguments refused before any request, and the server's refusals as typed errors. Sync and
async."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from urllib.parse import parse_qs

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    AuditEntry,
    AuthenticationError,
    ConflictError,
    InvalidArgumentError,
    Member,
    NotFoundError,
    PandaStack,
    PermissionDeniedError,
)

pytestmark = pytest.mark.offline

MEMBER = {
    "id": "mem-1",
    "name": "Ada",
    "email": "ada@example.org",
    "role": "developer",
    "created_at": "2026-01-01T00:00:00Z",
    "active_keys": 0,
}


def audit_row(i, action="create_member", resource="members/mem-1", member_id=None):
    return {
        "id": str(i),
        "at": f"2026-01-01T00:00:{i:02d}Z",
        "key_id": "key-1",
        "key_name": "admin",
        "member_id": member_id,
        "action": action,
        "method": "POST",
        "route": "/v1/members",
        "resource": resource,
        "result": "ok",
        "status": 201,
        "source": "192.0.2.7",
        "request_id": f"req_{i}",
    }


def body(rec):
    return json.loads(rec["body"]) if rec["body"] else None


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)


def test_member_and_audit_entry_read_every_field():
    m = Member.from_json(MEMBER)
    assert (m.id, m.name, m.email, m.role, m.created_at, m.active_keys) == (
        "mem-1", "Ada", "ada@example.org", "developer", "2026-01-01T00:00:00Z", 0,
    )
    a = AuditEntry.from_json(audit_row(3, member_id="mem-0"))
    assert (a.id, a.at, a.key_id, a.key_name, a.member_id) == ("3", "2026-01-01T00:00:03Z", "key-1", "admin", "mem-0")
    assert (a.action, a.method, a.route, a.resource) == ("create_member", "POST", "/v1/members", "members/mem-1")
    assert (a.result, a.status, a.source, a.request_id) == ("ok", 201, "192.0.2.7", "req_3")
    assert AuditEntry.from_json(audit_row(4)).member_id is None and a.raw["id"] == "3"


def test_members_send_the_documented_requests(fake):
    fake.on_call("POST", "/v1/members", lambda r: reply(201, {**MEMBER, **body(r)}))
    fake.on("GET", "/v1/members", reply(200, {"data": [MEMBER], "next_cursor": None}))
    fake.on("GET", "/v1/members/mem-1", reply(200, {**MEMBER, "active_keys": 2}))
    fake.on_call("PATCH", "/v1/members/mem-1", lambda r: reply(200, {**MEMBER, **body(r)}))
    fake.on("DELETE", "/v1/members/mem-1", reply(204))
    with make(fake) as c:
        m = c.members.create("Ada", "ada@example.org", "developer")
        assert m == Member.from_json(MEMBER)
        assert c.members.list() == [m]
        assert c.members.get("mem-1").active_keys == 2
        assert c.members.update("mem-1", role="viewer").role == "viewer"
        assert c.members.update("mem-1", name="Ada L.").name == "Ada L."
        c.members.update("mem-1")
        assert c.members.delete("mem-1") is None
        with pytest.raises(NotFoundError):
            c.members.get("mem-2")
    assert body(fake.calls("POST", "/v1/members")[0]) == {"name": "Ada", "email": "ada@example.org", "role": "developer"}
    assert [body(r) for r in fake.calls("PATCH", "/v1/members/mem-1")] == [{"role": "viewer"}, {"name": "Ada L."}, {}]
    assert len(fake.calls("DELETE", "/v1/members/mem-1")) == 1


def test_a_key_for_a_member_carries_its_member_and_role(fake):
    def create(r):
        b_ = body(r)
        return reply(201, {
            "id": "key-2", "name": b_["name"], "prefix": "pds_cd", "created_at": "2026-01-01T00:00:00Z",
            "revoked": False, "admin": False, "scopes": ["*"], "expires_at": None, "last_used_at": None,
            "member_id": b_.get("member_id"), "role": "developer" if b_.get("member_id") else None, "secret": "pds_dev",
        })

    fake.on_call("POST", "/v1/keys", create)
    with make(fake) as c:
        k = c.keys.create("ada", member_id="mem-1")
        assert (k.member_id, k.role, k.secret) == ("mem-1", "developer", "pds_dev")
        w = c.keys.create("ci")
        assert (w.member_id, w.role) == (None, None)
        with pytest.raises(InvalidArgumentError):
            c.keys.create("x", member_id="")
    assert [body(r) for r in fake.calls("POST", "/v1/keys")] == [{"name": "ada", "member_id": "mem-1"}, {"name": "ci"}]


def test_bad_arguments_never_reach_the_server(fake):
    with make(fake) as c:
        for call in (
            lambda: c.members.create("", "a@example.org", "viewer"),
            lambda: c.members.create("A", "", "viewer"),
            lambda: c.members.create("A", "a@example.org", "root"),  # type: ignore[arg-type]
            lambda: c.members.get(""),
            lambda: c.members.update("mem-1", role="superuser"),  # type: ignore[arg-type]
            lambda: c.members.update("mem-1", name=""),
            lambda: c.members.delete(""),
            lambda: c.audit.list(since=""),
            lambda: c.audit.list(since=12),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidArgumentError):
                call()
    assert fake.requests == []


def test_refusals_are_typed_with_the_servers_message(fake):
    fake.on_call(
        "POST",
        "/v1/members",
        lambda r: error(409, "conflict", "a member with this email exists")
        if body(r)["email"] == "taken@example.org"
        else error(403, "forbidden", "this key (role developer) lacks the scope members:write"),
    )
    fake.on("PATCH", "/v1/members/mem-0", error(403, "forbidden", "only an owner changes an owner"))
    fake.on("DELETE", "/v1/members/mem-0", error(409, "conflict", "the workspace keeps its last owner"))
    fake.on("GET", "/v1/audit", error(403, "forbidden", "this key (role developer) lacks the scope audit:read"))
    fake.on("GET", "/v1/members", error(401, "unauthorized", "revoked key"))
    with make(fake) as c:
        with pytest.raises(ConflictError, match="email"):
            c.members.create("T", "taken@example.org", "viewer")
        with pytest.raises(PermissionDeniedError, match="members:write") as e:
            c.members.create("X", "x@example.org", "viewer")
        assert e.value.status == 403 and e.value.code == "forbidden"
        with pytest.raises(PermissionDeniedError):
            c.members.update("mem-0", role="admin")
        with pytest.raises(ConflictError, match="last owner"):
            c.members.delete("mem-0")
        with pytest.raises(PermissionDeniedError, match="audit:read"):
            c.audit.list().first_page()
        with pytest.raises(AuthenticationError):
            c.members.list()


def test_audit_pages_with_the_filters(fake):
    pages = {
        "": {"data": [audit_row(3), audit_row(2)], "next_cursor": "c2"},
        "c2": {"data": [audit_row(1, "create_key", "keys/key-2")], "next_cursor": None},
    }
    fake.on_call("GET", "/v1/audit", lambda r: reply(200, pages[query(r).get("cursor", "")]))
    since = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with make(fake) as c:
        page = c.audit.list(limit=2).first_page()
        assert [a.id for a in page.data] == ["3", "2"] and page.next_cursor == "c2"
        got = list(c.audit.list(limit=2, key_id="key-1", resource_id="mem-1", action="create_member", since=since))
        assert [(a.id, a.action, a.resource) for a in got] == [
            ("3", "create_member", "members/mem-1"),
            ("2", "create_member", "members/mem-1"),
            ("1", "create_key", "keys/key-2"),
        ]
        assert all(isinstance(a, AuditEntry) for a in got)
        c.audit.list(cursor="c2", since="2026-01-02T00:00:00Z").first_page()
        # A naive datetime is taken as UTC.
        c.audit.list(since=dt.datetime(2026, 1, 3)).first_page()
    qs = [query(r) for r in fake.calls("GET", "/v1/audit")]
    filters = {"key_id": "key-1", "resource_id": "mem-1", "action": "create_member", "since": "2026-01-01T00:00:00+00:00"}
    assert qs[0] == {"limit": "2"}
    assert qs[1] == {"limit": "2", **filters}
    assert qs[2] == {"limit": "2", "cursor": "c2", **filters}
    assert qs[3] == {"cursor": "c2", "since": "2026-01-02T00:00:00Z"}
    assert qs[4] == {"since": "2026-01-03T00:00:00+00:00"}


def test_async_members_and_audit(fake):
    fake.on_call("POST", "/v1/members", lambda r: reply(201, {**MEMBER, **body(r)}))
    fake.on("DELETE", "/v1/members/mem-1", reply(204))
    fake.on("GET", "/v1/audit", reply(200, {"data": [audit_row(1)], "next_cursor": None}))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            m = await c.members.create("Ada", "ada@example.org", "admin")
            rows = [a async for a in c.audit.list(action="create_member")]
            page = await c.audit.list().first_page()
            await c.members.delete(m.id)
            return m, rows, page

    m, rows, page = asyncio.run(main())
    assert m.role == "admin"
    assert [a.resource for a in rows] == ["members/mem-1"] and page.next_cursor is None
    assert query(fake.calls("GET", "/v1/audit")[0]) == {"action": "create_member"}
