"""Events and webhooks against a real server: a sandbox's create is a ``sandbox.created``
event that ``events.list`` and ``events.stream`` (resumed from the start) both show, and a pause
made while the stream is open reaches it; a webhook
is created (its secret shown once), listed, fetched and deleted."""

from __future__ import annotations

import uuid

import pytest

from pandastack import NotFoundError, PandaStack


def test_a_create_is_a_sandbox_created_event(client: PandaStack, make_sandbox, template: str) -> None:
    sb = make_sandbox()
    # The event is written before the create returns (docs/events.md).
    listed = list(client.events.list(type="sandbox.created", resource=sb.id))
    assert [(e.type, e.resource.kind, e.resource.id) for e in listed] == [("sandbox.created", "sandbox", sb.id)]
    ev = listed[0]
    assert ev.data.get("template") == template and ev.at and int(ev.id) > 0
    streamed = client.events.stream(after="0", resource=sb.id)
    try:
        first = next(streamed)
        assert (first.id, first.type) == (ev.id, "sandbox.created")
        # A change made while the stream is open reaches it.
        sb.pause()
        second = next(streamed)
    finally:
        streamed.close()
    assert (second.type, second.data.get("from"), second.data.get("to")) == ("sandbox.paused", "running", "paused")
    assert int(second.id) > int(first.id)


def test_a_webhook_is_created_listed_and_deleted(client: PandaStack) -> None:
    url = f"https://example.com/pandastack-sdk-test/{uuid.uuid4().hex[:8]}"
    # A type the test never causes, so nothing is sent to example.com.
    wh = client.webhooks.create(url, events=["schedule.failed"])
    try:
        assert wh.id.startswith("wh_") and wh.url == url and wh.events == ["schedule.failed"]
        assert wh.secret and wh.secret.startswith("whsec_")
        listed = {w.id: w for w in client.webhooks.list()}
        assert wh.id in listed and listed[wh.id].secret is None
        got = client.webhooks.get(wh.id)
        assert (got.url, got.events, got.secret) == (url, ["schedule.failed"], None)
        assert client.webhooks.deliveries(wh.id).to_list() == []
    finally:
        client.webhooks.delete(wh.id)
    with pytest.raises(NotFoundError):
        client.webhooks.get(wh.id)
    assert wh.id not in {w.id for w in client.webhooks.list()}
