"""Metrics over time against a fake local HTTP server (no PandaStack server needed): the query
of ``metrics(since=, step=)`` on sandboxes, databases, apps and functions, how the answer is
read (points, instances, the host-side figures of a sandbox, an older server's answer without
history), and what is refused before a request or mapped from the server's 422. Sync and
async."""

from __future__ import annotations

import asyncio
import datetime
from urllib.parse import parse_qs

import pytest

from fakeserver import SANDBOX, FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    InstanceMetrics,
    InvalidArgumentError,
    MetricPoint,
    Metrics,
    PandaStack,
)

pytestmark = pytest.mark.offline

POINT = {
    "t": "2026-12-04T10:00:00Z",
    "cpu_pct": 12.5,
    "vcpus": 1,
    "mem_bytes": 300_000_000,
    "pss_bytes": 120_000_000,
    "mem_total_bytes": 500_000_000,
    "mem_available_bytes": 400_000_000,
    "disk_bytes": 16_000_000,
    "disk_total_bytes": 1_000_000_000,
    "net_rx": 1200,
    "net_tx": 3400,
}
# A point with only the required fields (no guest answered, no NIC).
BARE = {"t": "2026-12-04T10:00:05Z", "cpu_pct": 0, "vcpus": 1, "mem_bytes": 1, "pss_bytes": 1}

SANDBOX_METRICS = {
    "state": "running",
    "host_rss_bytes": 310_000_000,
    "host_pss_bytes": 125_000_000,
    "cpu_time_ms": 4200,
    "step": 5,
    "samples": [POINT, BARE],
}

GROUP_METRICS = {
    "state": "running",
    "step": 60,
    "samples": [POINT],
    "instances": [
        {"sandbox_id": "sb-a", "state": "running", "samples": [POINT]},
        {"sandbox_id": "sb-b", "state": "hibernated", "samples": []},
    ],
}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


def test_sandbox_metrics_sends_since_and_step_and_reads_the_points(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("GET", "/v1/sandboxes/sb-fake/metrics", reply(200, SANDBOX_METRICS))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        m = sb.metrics()
        assert isinstance(m, Metrics)
        assert (m.state, m.host_rss_bytes, m.host_pss_bytes, m.cpu_time_ms, m.step) == (
            "running",
            310_000_000,
            125_000_000,
            4200,
            5,
        )
        assert m.raw == SANDBOX_METRICS and m.instances == []
        p, bare = m.samples
        assert isinstance(p, MetricPoint)
        assert p == MetricPoint(
            t="2026-12-04T10:00:00Z",
            cpu_pct=12.5,
            vcpus=1,
            mem_bytes=300_000_000,
            pss_bytes=120_000_000,
            mem_total_bytes=500_000_000,
            mem_available_bytes=400_000_000,
            disk_bytes=16_000_000,
            disk_total_bytes=1_000_000_000,
            net_rx=1200,
            net_tx=3400,
        )
        assert isinstance(bare.cpu_pct, float) and bare.cpu_pct == 0.0
        assert (bare.mem_total_bytes, bare.disk_bytes, bare.net_rx, bare.net_tx) == (None, None, None, None)
        sb.metrics(since="1m", step=1)
        sb.metrics(since=datetime.timedelta(minutes=15))
        sb.metrics(since=datetime.datetime(2026, 12, 4, 10, 0, 0), step=60)
        sb.metrics(since="2026-12-04T10:00:00+01:00")
    calls = fake.calls("GET", "/v1/sandboxes/sb-fake/metrics")
    assert [query(r) for r in calls] == [
        {},
        {"since": "1m", "step": "1"},
        {"since": "900s"},
        {"since": "2026-12-04T10:00:00+00:00", "step": "60"},
        {"since": "2026-12-04T10:00:00+01:00"},
    ]


def test_an_older_answer_without_history_still_reads(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("GET", "/v1/sandboxes/sb-fake/metrics", reply(200, {"state": "paused"}))
    with make(fake) as c:
        m = c.sandboxes.get("sb-fake").metrics()
    assert (m.state, m.host_rss_bytes, m.step, m.samples, m.instances) == ("paused", None, 0, [], [])


def test_bad_arguments_are_refused_before_a_request_and_the_servers_422_is_invalid_argument(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on(
        "GET",
        "/v1/sandboxes/sb-fake/metrics",
        error(422, "invalid_argument", "step: between 1 and 86400 seconds"),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        before = len(fake.requests)
        for bad in (1.5, "5", True):
            with pytest.raises(InvalidArgumentError):
                sb.metrics(step=bad)  # type: ignore[arg-type]
        for bad_since in ("", 15):
            with pytest.raises(InvalidArgumentError):
                sb.metrics(since=bad_since)  # type: ignore[arg-type]
        assert len(fake.requests) == before
        # The ranges are the server's to check.
        with pytest.raises(InvalidArgumentError) as e:
            sb.metrics(step=0)
        assert e.value.status == 422 and "step" in str(e.value)
    assert query(fake.calls("GET", "/v1/sandboxes/sb-fake/metrics")[-1]) == {"step": "0"}


@pytest.mark.parametrize(
    "namespace,name,path",
    [
        ("databases", "app db", "/v1/databases/app%20db/metrics"),
        ("apps", "web", "/v1/apps/web/metrics"),
        ("functions", "hello", "/v1/functions/hello/metrics"),
    ],
)
def test_databases_apps_and_functions_have_metrics_with_instances(fake, namespace, name, path):
    seen = []

    def answer(rec):
        seen.append((rec["path"], query(rec)))
        return reply(200, GROUP_METRICS)

    fake.on_call("GET", path, answer)
    with make(fake) as c:
        m = getattr(c, namespace).metrics(name, since="1h", step=60)
        getattr(c, namespace).metrics(name)
    assert (m.state, m.step, m.host_rss_bytes) == ("running", 60, None)
    assert [type(x) for x in m.samples] == [MetricPoint] and m.samples[0].mem_bytes == 300_000_000
    assert [type(i) for i in m.instances] == [InstanceMetrics, InstanceMetrics]
    a, b = m.instances
    assert (a.sandbox_id, a.state, len(a.samples), a.samples[0].cpu_pct) == ("sb-a", "running", 1, 12.5)
    assert (b.sandbox_id, b.state, b.samples) == ("sb-b", "hibernated", [])
    assert [q for _, q in seen] == [{"since": "1h", "step": "60"}, {}]


def test_async_metrics(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("GET", "/v1/sandboxes/sb-fake/metrics", reply(200, SANDBOX_METRICS))
    fake.on("GET", "/v1/apps/web/metrics", reply(200, GROUP_METRICS))
    fake.on("GET", "/v1/databases/db-1/metrics", reply(200, GROUP_METRICS))
    fake.on("GET", "/v1/functions/hello/metrics", reply(200, GROUP_METRICS))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            sb = await c.sandboxes.get("sb-fake")
            m = await sb.metrics(since="90s", step=5)
            assert len(m.samples) == 2 and m.samples[0].net_tx == 3400
            for ns, name in (("apps", "web"), ("databases", "db-1"), ("functions", "hello")):
                g = await getattr(c, ns).metrics(name, step=60)
                assert g.instances[0].sandbox_id == "sb-a"
            with pytest.raises(InvalidArgumentError):
                await sb.metrics(step=2.5)  # type: ignore[arg-type]

    asyncio.run(main())
    assert query(fake.calls("GET", "/v1/sandboxes/sb-fake/metrics")[-1]) == {"since": "90s", "step": "5"}
