"""Usage against a fake local HTTP server (no PandaStack server needed): ``usage()`` with no
argument asks for the server's default window; ``from_``, ``to`` and ``group_by`` become the
query; ``usage_csv()`` asks for CSV and returns the text; a naive ``datetime`` is refused before
a request and the server's 422 is ``InvalidArgumentError``. Sync and async."""

from __future__ import annotations

import asyncio
import datetime
from urllib.parse import parse_qs

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import AsyncPandaStack, InvalidArgumentError, PandaStack

pytestmark = pytest.mark.offline

FIGURES = {
    "vcpu_seconds": 12.5,
    "memory_gib_seconds": 6.25,
    "storage_gib_hours": 0.5,
    "egress_bytes": 1000,
    "ingress_bytes": 10,
    "invocations": 3,
    "invocation_seconds": 0.25,
    "database_seconds": 0.0,
}
USAGE = {
    "sandboxes": {"running": 1, "hibernated": 0, "limit": 200, "hibernated_limit": 50, "creates_per_minute": 600},
    "volumes": {"count": 0, "size_gb": 0, "quota_gb": 100, "snapshots": 0},
    "snapshots": {"count": 0, "limit": 100, "bytes": 0},
    "templates": {"builds": 0, "limit": 20, "bytes": 0},
    "storage": {"bytes": 0, "quota_gb": 500, "snapshot_bytes": 0, "hibernated_bytes": 0, "template_bytes": 0},
    "metered": {
        "from": "2026-12-01T00:00:00Z",
        "to": "2026-12-04T12:00:00Z",
        "group_by": ["kind"],
        "totals": FIGURES,
        "groups": [{"kind": "sandbox", "usage": FIGURES}],
    },
}
CSV = "from,to,kind,resource_id,start,vcpu_seconds\r\n2026-12-01T00:00:00Z,x,sandbox,,,12.5\r\n"


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


def test_usage_sends_the_window_and_grouping_and_reads_the_answer(fake):
    fake.on("GET", "/v1/usage", reply(200, USAGE))
    with PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
        u = c.usage()
        assert u["metered"]["totals"]["vcpu_seconds"] == 12.5
        assert u["sandboxes"]["running"] == 1
        c.usage(from_="2026-12-01T00:00:00Z", to="2026-12-02T00:00:00Z", group_by="kind,day")
        c.usage(
            from_=datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc),
            group_by=["resource", "hour"],
        )
    assert [query(r) for r in fake.calls("GET", "/v1/usage")] == [
        {},
        {"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "group_by": "kind,day"},
        {"from": "2026-12-01T00:00:00+00:00", "group_by": "resource,hour"},
    ]


def test_usage_csv_asks_for_csv_and_returns_the_text(fake):
    fake.on("GET", "/v1/usage", reply(200, CSV.encode(), {"Content-Type": "text/csv; charset=utf-8"}))
    with PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
        assert c.usage_csv(group_by="kind") == CSV
    assert [query(r) for r in fake.calls("GET", "/v1/usage")] == [{"group_by": "kind", "format": "csv"}]


def test_a_naive_time_is_refused_and_the_servers_422_is_invalid_argument(fake):
    fake.on("GET", "/v1/usage", error(422, "invalid_argument", "group_by: \"week\": none, or a comma list"))
    with PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
        with pytest.raises(ValueError):
            c.usage(from_=datetime.datetime(2026, 12, 1))
        assert fake.calls("GET", "/v1/usage") == []
        with pytest.raises(InvalidArgumentError) as e:
            c.usage(group_by="week")
        assert "group_by" in str(e.value)


def test_async_usage(fake):
    fake.on("GET", "/v1/usage", reply(200, USAGE))

    async def go():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            return await c.usage(to="2026-12-04T12:00:00Z", group_by="none")

    u = asyncio.run(go())
    assert u["metered"]["groups"][0]["kind"] == "sandbox"
    assert [query(r) for r in fake.calls("GET", "/v1/usage")] == [{"to": "2026-12-04T12:00:00Z", "group_by": "none"}]
