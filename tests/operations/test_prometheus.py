"""The server's Prometheus endpoint (``GET /metrics``) read by a real parser: the OpenMetrics
parser of the official Python client (PyPI ``prometheus-client``,
``prometheus_client.openmetrics.parser``), against a real server with real guests.

The module makes a sandbox and runs a command in it over plain HTTP, scrapes ``/metrics`` with an
admin key, and checks what an operator's Prometheus and dashboards rely on: every family with
its type, the sandbox counted as running, its create counted and timed (histogram buckets
cumulative), API requests counted by route *template* (no sandbox id in any label), the state
store's statements timed; and that the endpoint is an operator's (a workspace's key gets 403).

Needs PANDASTACK_BASE_URL, PANDASTACK_API_KEY (a workspace's key), PANDASTACK_TEST_ADMIN_KEY
(``pandastack keys create --admin``) and PANDASTACK_TEST_TEMPLATE (``minimal``);
scripts/test-clients.sh sets them. The sandbox is killed at the end of the module.
"""

from __future__ import annotations

import math
import os
import re
import uuid
from typing import Dict, Iterator, List, Tuple

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

REQUIRED = ("PANDASTACK_BASE_URL", "PANDASTACK_API_KEY", "PANDASTACK_TEST_ADMIN_KEY", "PANDASTACK_TEST_TEMPLATE")
RUN = uuid.uuid4().hex[:12]
TIMEOUT = 300.0

#: Every family the server exports (OpenMetrics names: a counter's without ``_total``) and its type.
FAMILIES: Dict[str, str] = {
    "pandastack_vms": "gauge",
    "pandastack_hosts": "gauge",
    "pandastack_jobs": "gauge",
    "pandastack_job_oldest_queued_seconds": "gauge",
    "pandastack_vm_operations": "counter",
    "pandastack_vm_operation_seconds": "histogram",
    "pandastack_http_requests": "counter",
    "pandastack_http_request_seconds": "histogram",
    "pandastack_proxy_requests": "counter",
    "pandastack_object_store_bytes": "counter",
    "pandastack_object_store_operations": "counter",
    "pandastack_store_query_seconds": "histogram",
    "pandastack_metrics_sample_round_seconds": "histogram",
    "pandastack_metrics_sampled_vms": "gauge",
    "pandastack_pool_vms": "gauge",
    "pandastack_database_wal_archive_lag_seconds": "gauge",
    "pandastack_database_wal_outbox_segments": "gauge",
}

#: What a sandbox id looks like (``sb-`` and hex), anywhere in the text.
SANDBOX_ID = re.compile(r"\bsb-[0-9a-f]{6,}")


def env() -> Dict[str, str]:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if missing:
        pytest.exit("operations tests need a real server: set " + ", ".join(missing), returncode=2)
    return {k: os.environ[k] for k in REQUIRED}


def client(key: str) -> httpx.Client:
    return httpx.Client(
        base_url=env()["PANDASTACK_BASE_URL"].rstrip("/"),
        headers={"Authorization": f"Bearer {key}"},
        timeout=TIMEOUT,
    )


class Scrape:
    """One scrape: the response, its text and the parsed families by name."""

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.text = resp.text
        self.families = {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self, family: str, suffix: str = "") -> List[Sample]:
        return [s for s in self.families[family].samples if s.name == family + suffix]

    def value(self, family: str, suffix: str = "", **labels: str) -> float:
        """The one sample of `family` + `suffix` whose labels include `labels`."""
        found = [s for s in self.samples(family, suffix) if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, f"{family}{suffix}{labels}: {len(found)} samples: {found}"
        return found[0].value


@pytest.fixture(scope="module")
def sandbox_id() -> Iterator[str]:
    """A running sandbox in which one command ran through `POST /v1/sandboxes/{id}/exec`."""
    e = env()
    with client(e["PANDASTACK_API_KEY"]) as c:
        r = c.post(
            "/v1/sandboxes",
            json={
                "template": e["PANDASTACK_TEST_TEMPLATE"],
                "ttl_seconds": 600,
                "metadata": {"suite": "operations", "run": RUN},
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        try:
            r = c.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo scraped"})
            assert r.status_code == 200, r.text
            assert (r.json()["stdout"], r.json()["exit_code"]) == ("scraped\n", 0)
            yield sid
        finally:
            c.delete(f"/v1/sandboxes/{sid}")


@pytest.fixture(scope="module")
def scrape(sandbox_id: str) -> Scrape:
    with client(env()["PANDASTACK_TEST_ADMIN_KEY"]) as c:
        r = c.get("/metrics")
    assert r.status_code == 200, r.text
    return Scrape(r)


def test_the_scrape_is_openmetrics_text(scrape: Scrape) -> None:
    ctype = scrape.resp.headers["content-type"]
    assert ctype.startswith("application/openmetrics-text"), ctype
    assert "version=1.0.0" in ctype and "charset=utf-8" in ctype, ctype
    assert scrape.text.endswith("# EOF\n")


def test_every_family_is_there_with_its_type(scrape: Scrape) -> None:
    got = {name: f.type for name, f in scrape.families.items() if name in FAMILIES}
    assert got == FAMILIES
    for name in FAMILIES:
        assert scrape.families[name].documentation, f"{name} has no HELP"
    others = sorted(n for n in scrape.families if not n.startswith("pandastack_"))
    assert not others, f"families without the pandastack_ prefix: {others}"


def test_the_running_sandbox_is_counted(scrape: Scrape) -> None:
    assert scrape.value("pandastack_vms", state="running") >= 1
    assert scrape.value("pandastack_hosts", state="ready") >= 1


def _histograms(scrape: Scrape, family: str) -> Dict[Tuple[Tuple[str, str], ...], Dict[str, object]]:
    """Per label set (without `le`): its buckets as (le, count) in the text's order, `count`, `sum`."""
    out: Dict[Tuple[Tuple[str, str], ...], Dict[str, object]] = {}
    for s in scrape.families[family].samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        h = out.setdefault(key, {"buckets": []})
        if s.name == family + "_bucket":
            h["buckets"].append((float(s.labels["le"]), s.value))  # type: ignore[union-attr]
        elif s.name == family + "_count":
            h["count"] = s.value
        elif s.name == family + "_sum":
            h["sum"] = s.value
    return out


def _check_histogram(family: str, key: object, h: Dict[str, object]) -> None:
    buckets: List[Tuple[float, float]] = h["buckets"]  # type: ignore[assignment]
    where = f"{family}{dict(key)}"  # type: ignore[call-overload]
    assert buckets, f"{where}: no buckets"
    bounds = [le for le, _ in buckets]
    assert bounds == sorted(bounds) and math.isinf(bounds[-1]), f"{where}: bucket bounds {bounds}"
    counts = [n for _, n in buckets]
    assert all(a <= b for a, b in zip(counts, counts[1:])), f"{where}: buckets not cumulative: {counts}"
    assert counts[-1] == h["count"], f"{where}: +Inf bucket {counts[-1]} != count {h['count']}"
    assert h["sum"] >= 0, f"{where}: sum {h['sum']}"  # type: ignore[operator]


def test_the_create_is_counted_and_timed(scrape: Scrape) -> None:
    assert scrape.value("pandastack_vm_operations", "_total", op="create", result="ok") >= 1
    hists = _histograms(scrape, "pandastack_vm_operation_seconds")
    create = hists[(("op", "create"),)]
    assert create["count"] >= 1  # type: ignore[operator]
    assert create["sum"] > 0  # type: ignore[operator]
    _check_histogram("pandastack_vm_operation_seconds", (("op", "create"),), create)


def test_every_histogram_is_cumulative(scrape: Scrape) -> None:
    names = [n for n, t in FAMILIES.items() if t == "histogram"]
    for name in names:
        for key, h in _histograms(scrape, name).items():
            _check_histogram(name, key, h)


def test_requests_are_counted_by_route_template(scrape: Scrape, sandbox_id: str) -> None:
    assert scrape.value("pandastack_http_requests", "_total", method="POST", route="/v1/sandboxes/{id}/exec", status="200") >= 1
    assert scrape.value("pandastack_http_requests", "_total", method="POST", route="/v1/sandboxes", status="201") >= 1
    assert scrape.value("pandastack_http_request_seconds", "_count", method="POST", route="/v1/sandboxes/{id}/exec") >= 1
    routes = {s.labels["route"] for s in scrape.samples("pandastack_http_requests", "_total")}
    assert all(r.startswith("/") for r in routes), routes
    # The sandbox's id (or any other) is in no label: routes are templates.
    assert sandbox_id not in scrape.text
    assert not SANDBOX_ID.findall(scrape.text), SANDBOX_ID.findall(scrape.text)[:5]


def test_store_statements_are_timed(scrape: Scrape) -> None:
    assert scrape.value("pandastack_store_query_seconds", "_count") > 0
    assert scrape.value("pandastack_metrics_sample_round_seconds", "_count") >= 0


def test_it_is_an_operators_endpoint() -> None:
    e = env()
    with client(e["PANDASTACK_API_KEY"]) as c:
        r = c.get("/metrics")
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "forbidden"
    with httpx.Client(base_url=e["PANDASTACK_BASE_URL"].rstrip("/"), timeout=TIMEOUT) as c:
        assert c.get("/metrics").status_code == 401


def test_the_checks_see_what_they_look_for() -> None:
    """The checks can fail (no server needed): the parser refuses a histogram whose buckets
    shrink or whose +Inf bucket is not its count, and so do the checks of this module on their
    own; a sandbox id in a label is found."""
    shrinking = '# TYPE x histogram\nx_bucket{le="1.0"} 3\nx_bucket{le="+Inf"} 2\nx_count 2\nx_sum 1.5\n# EOF\n'
    miscounted = '# TYPE x histogram\nx_bucket{le="1.0"} 1\nx_bucket{le="+Inf"} 1\nx_count 2\nx_sum 1.5\n# EOF\n'
    for bad in (shrinking, miscounted):
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(bad))
    with pytest.raises(AssertionError, match="not cumulative"):
        _check_histogram("x", (), {"buckets": [(1.0, 3), (math.inf, 2)], "count": 2, "sum": 1.5})
    with pytest.raises(AssertionError, match="!= count"):
        _check_histogram("x", (), {"buckets": [(1.0, 1), (math.inf, 1)], "count": 2, "sum": 1.5})
    _check_histogram("x", (), {"buckets": [(1.0, 1), (math.inf, 2)], "count": 2, "sum": 1.5})
    leaked = 'pandastack_http_requests_total{route="/v1/sandboxes/sb-2dfc1c11595fa65a/exec"} 1'
    assert SANDBOX_ID.findall(leaked) == ["sb-2dfc1c11595fa65a"]
    assert not SANDBOX_ID.findall('route="/v1/sandboxes/{id}/exec"')
