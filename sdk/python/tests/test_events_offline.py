"""Events and webhooks against a fake local HTTP server (no PandaStack server needed): what
``client.events`` and ``client.webhooks`` send and how they read the answers, paging, the SSE
stream resumed with ``Last-Event-ID`` after a broken connection, and the errors. Sync and
async."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    AuthenticationError,
    Event,
    EventResource,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    StreamError,
    Webhook,
    WebhookDelivery,
)
from pandastack import _base as b

pytestmark = pytest.mark.offline


def event(i, type_="sandbox.created", rid="sb-1", **data):
    return {
        "id": str(i),
        "type": type_,
        "resource": {"kind": type_.split(".")[0], "id": rid},
        "at": f"2026-01-01T00:00:{i:02d}Z",
        "data": data,
    }


def sse(*events, comment=True):
    out = ": keep-alive\n\n" if comment else ""
    for e in events:
        out += f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n"
    return reply(200, out.encode(), {"Content-Type": "text/event-stream"})


WEBHOOK = {
    "id": "wh_1",
    "url": "https://example.com/hooks",
    "events": ["sandbox.*"],
    "created_at": "2026-01-01T00:00:00Z",
}


def delivery(**kw):
    d = {
        "id": "whd_1",
        "webhook_id": "wh_1",
        "event_id": "7",
        "event_type": "sandbox.created",
        "state": "failed",
        "attempts": 8,
        "created_at": "2026-01-01T00:00:00Z",
        "delivered_at": None,
        "last_attempt_at": "2026-01-02T00:00:00Z",
        "last_error": "HTTP 500",
        "last_status": 500,
        "next_attempt_at": None,
    }
    d.update(kw)
    return d


def body(rec):
    return json.loads(rec["body"]) if rec["body"] else None


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(b, "EVENT_STREAM_RETRY_DELAY", 0.0)


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)


def test_event_reads_every_field():
    e = Event.from_json(event(3, "deploy.phase", "web", phase="building"))
    assert (e.id, e.type, e.at) == ("3", "deploy.phase", "2026-01-01T00:00:03Z")
    assert e.resource == EventResource(kind="deploy", id="web")
    assert e.data == {"phase": "building"} and e.raw["id"] == "3"


def test_list_pages_with_the_filters(fake):
    pages = {"": {"data": [event(1), event(2)], "next_cursor": "2"}, "2": {"data": [event(3)], "next_cursor": None}}
    fake.on_call("GET", "/v1/events", lambda r: reply(200, pages[query(r).get("cursor", "")]))
    with make(fake) as c:
        got = list(c.events.list(limit=2, type="sandbox.*", resource="sb-1"))
        assert [e.id for e in got] == ["1", "2", "3"] and all(isinstance(e, Event) for e in got)
        assert got[0].resource.id == "sb-1"
        page = c.events.list(cursor="2").first_page()
        assert [e.id for e in page.data] == ["3"] and page.next_cursor is None
    qs = [query(r) for r in fake.calls("GET", "/v1/events")]
    assert qs[0] == {"limit": "2", "type": "sandbox.*", "resource": "sb-1"}
    assert qs[1] == {"limit": "2", "type": "sandbox.*", "resource": "sb-1", "cursor": "2"}
    assert qs[2] == {"cursor": "2"}


def test_stream_resumes_after_the_last_event_seen(fake, quick):
    # The first connection ends after two events (a broken connection, as far as the client
    # knows); the second must ask for what follows the second.
    fake.on("GET", "/v1/events", sse(event(5), event(6, "sandbox.paused")), sse(event(7, "sandbox.killed")))
    with make(fake) as c:
        got = []
        for ev in c.events.stream(after="4", type="sandbox.*"):
            got.append(ev)
            if len(got) == 3:
                break
    assert [(e.id, e.type) for e in got] == [("5", "sandbox.created"), ("6", "sandbox.paused"), ("7", "sandbox.killed")]
    calls = fake.calls("GET", "/v1/events")
    assert [r["headers"]["accept"] for r in calls] == ["text/event-stream"] * 2
    assert calls[0]["headers"]["last-event-id"] == "4" and query(calls[0])["cursor"] == "4"
    assert calls[1]["headers"]["last-event-id"] == "6" and query(calls[1]) == {"cursor": "6", "type": "sandbox.*"}


def test_stream_from_now_sends_no_cursor(fake, quick):
    fake.on("GET", "/v1/events", sse(event(9)))
    with make(fake) as c:
        it = c.events.stream()
        assert next(it).id == "9"
        it.close()
    first = fake.calls("GET", "/v1/events")[0]
    assert "last-event-id" not in first["headers"] and query(first) == {}


def test_stream_gives_up_when_it_keeps_ending_without_events(fake, quick):
    fake.on("GET", "/v1/events", sse())
    with make(fake) as c:
        with pytest.raises(StreamError):
            next(iter(c.events.stream("0")))
    assert len(fake.calls("GET", "/v1/events")) == b.EVENT_STREAM_MAX_FAILURES + 1


def test_stream_raises_error_answers_at_once(fake, quick):
    fake.on("GET", "/v1/events", error(401, "unauthorized", "bad key"))
    with make(fake) as c:
        with pytest.raises(AuthenticationError):
            next(iter(c.events.stream()))
    assert len(fake.calls("GET", "/v1/events")) == 1


def test_async_list_and_stream(fake, quick):
    fake.on("GET", "/v1/events", sse(event(1)), sse(event(2)))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            got = []
            async for ev in c.events.stream("0"):
                got.append(ev.id)
                if len(got) == 2:
                    break
            fake.on("GET", "/v1/events", reply(200, {"data": [event(1)], "next_cursor": None}))
            listed = [e.id async for e in c.events.list()]
            return got, listed

    got, listed = asyncio.run(main())
    assert got == ["1", "2"] and listed == ["1"]
    assert fake.calls("GET", "/v1/events")[1]["headers"]["last-event-id"] == "1"


def test_webhook_create_sends_the_body_and_reads_the_secret(fake):
    fake.on_call("POST", "/v1/webhooks", lambda r: reply(201, {**WEBHOOK, **body(r), "secret": body(r).get("secret") or "whsec_gen"}))
    with make(fake) as c:
        wh = c.webhooks.create("https://example.com/hooks", events=["sandbox.*"])
        assert isinstance(wh, Webhook)
        assert (wh.id, wh.url, wh.events, wh.secret) == ("wh_1", "https://example.com/hooks", ["sandbox.*"], "whsec_gen")
        own = c.webhooks.create("https://example.com/x", ["*"], secret="whsec_mine", idempotency_key="k-1")
        assert own.secret == "whsec_mine"
        with pytest.raises(TypeError):
            c.webhooks.create("https://example.com/x", "sandbox.*")  # type: ignore[arg-type]
    calls = fake.calls("POST", "/v1/webhooks")
    assert [body(r) for r in calls] == [
        {"url": "https://example.com/hooks", "events": ["sandbox.*"]},
        {"url": "https://example.com/x", "events": ["*"], "secret": "whsec_mine"},
    ]
    assert calls[0]["headers"]["idempotency-key"] and calls[1]["headers"]["idempotency-key"] == "k-1"


def test_webhook_list_get_delete_deliveries_redeliver(fake):
    fake.on("GET", "/v1/webhooks", reply(200, {"data": [WEBHOOK], "next_cursor": None}))
    fake.on("GET", "/v1/webhooks/wh_1", reply(200, WEBHOOK))
    fake.on("GET", "/v1/webhooks/wh_2", error(404, "not_found", "no webhook wh_2"))
    fake.on("DELETE", "/v1/webhooks/wh_1", reply(204))
    fake.on("GET", "/v1/webhooks/wh_1/deliveries", reply(200, {"data": [delivery()], "next_cursor": None}))
    fake.on("POST", "/v1/webhooks/wh_1/deliveries/whd_1/redeliver", reply(202, delivery(state="pending", next_attempt_at="2026-01-03T00:00:00Z")))
    with make(fake) as c:
        [wh] = list(c.webhooks.list())
        assert wh.secret is None and wh.events == ["sandbox.*"]
        assert c.webhooks.get("wh_1") == wh
        with pytest.raises(NotFoundError):
            c.webhooks.get("wh_2")
        [d] = c.webhooks.deliveries("wh_1", limit=10).to_list()
        assert isinstance(d, WebhookDelivery)
        assert (d.state, d.attempts, d.last_status, d.last_error, d.event_id) == ("failed", 8, 500, "HTTP 500", "7")
        again = c.webhooks.redeliver("wh_1", "whd_1")
        assert (again.state, again.next_attempt_at) == ("pending", "2026-01-03T00:00:00Z")
        c.webhooks.delete("wh_1")
    assert query(fake.calls("GET", "/v1/webhooks/wh_1/deliveries")[0]) == {"limit": "10"}
    assert len(fake.calls("DELETE", "/v1/webhooks/wh_1")) == 1


def test_webhook_errors_map(fake):
    fake.on("POST", "/v1/webhooks", error(422, "invalid_argument", "url: 127.0.0.1 is a loopback address"))
    with make(fake) as c:
        with pytest.raises(InvalidArgumentError, match="loopback"):
            c.webhooks.create("http://127.0.0.1/h", ["*"])


def test_async_webhooks(fake):
    fake.on("POST", "/v1/webhooks", reply(201, {**WEBHOOK, "secret": "whsec_a"}))
    fake.on("GET", "/v1/webhooks/wh_1/deliveries", reply(200, {"data": [delivery(state="delivered", delivered_at="x")], "next_cursor": None}))
    fake.on("DELETE", "/v1/webhooks/wh_1", reply(204))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            wh = await c.webhooks.create(WEBHOOK["url"], ["sandbox.*"])
            ds = [d async for d in c.webhooks.deliveries(wh.id)]
            await c.webhooks.delete(wh.id)
            return wh, ds

    wh, ds = asyncio.run(main())
    assert wh.secret == "whsec_a" and [d.state for d in ds] == ["delivered"]
