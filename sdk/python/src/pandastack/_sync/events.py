# Generated from _async/events.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/events.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.events``: :class:`Events`, the lifecycle events of the caller's workspace (a
page at a time, or a resumable Server-Sent Events stream)."""

from __future__ import annotations

import time
from typing import Dict, Iterator, Optional

import httpx

from .. import _base as b
from ..errors import APIConnectionError, PandaStackError, StreamError
from ..types import Event, Page
from .client import PandaStack
from .pagination import Paginator


class Events:
    """``client.events``: every lifecycle change of the workspace's resources
    (``sandbox.created``, ``deploy.live``, ``schedule.failed``...; see the server's
    docs/events.md), oldest first::

        for ev in client.events.list(type="sandbox.*"):
            print(ev.id, ev.type, ev.resource.id, ev.data)
        for ev in client.events.stream(after=last_id):   # waits for new ones
            ...

    ``type`` filters by an exact type, ``<kind>.*`` or ``*``; ``resource`` by a resource's id
    (a sandbox's ``sb-…``; templates, apps, functions and schedules by name)."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(
        self,
        *,
        cursor: Optional[str] = None,
        limit: Optional[int] = None,
        type: Optional[str] = None,
        resource: Optional[str] = None,
    ) -> Paginator[Event]:
        """The events after ``cursor`` (an event's id; ``"0"`` or ``None``: the oldest kept,
        events are kept 30 days), oldest first, ``limit`` (1-1000) per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[Event]:
            data = self._t.json("GET", "/v1/events", params=b.event_params(limit, c, type, resource))
            return Page([Event.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def stream(
        self,
        after: Optional[str] = None,
        *,
        type: Optional[str] = None,
        resource: Optional[str] = None,
    ) -> Iterator[Event]:
        """Yields events as they happen, until you stop iterating: those after the event id
        ``after`` first (``"0"``: every event kept), or, with ``after=None``, the events from
        now on. A broken connection is reopened where it left off (``Last-Event-ID``: the
        server sends exactly the events after the last one yielded); after
        ``EVENT_STREAM_MAX_FAILURES`` reopenings in a row without an event the connection's
        error is raised. An error answer (401, 403...) is raised at once. To resume later,
        keep the last event's ``id`` and pass it as ``after``."""
        last = after
        failures = 0
        while True:
            err: Optional[PandaStackError] = None
            headers: Dict[str, str] = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            try:
                resp = self._t.request(
                    "GET",
                    "/v1/events",
                    params=b.event_params(None, last, type, resource),
                    headers=headers,
                    timeout=httpx.Timeout(b.EVENT_STREAM_READ_TIMEOUT, connect=30.0),
                    stream=True,
                )
                try:
                    dec = b.SSEDecoder()
                    for line in resp.iter_lines():
                        pair = dec.feed(line)
                        if pair is None:
                            continue
                        ev = b.event_from_sse(*pair)
                        if ev is None:
                            continue
                        last = ev.id or dec.last_id or last
                        failures = 0
                        yield ev
                finally:
                    resp.close()
            except httpx.TransportError as e:
                err = b.error_from_exception(e, "event stream")
            except APIConnectionError as e:
                err = e
            failures += 1
            if failures > b.EVENT_STREAM_MAX_FAILURES:
                raise err or StreamError("event stream: the server keeps ending it", code="stream_incomplete")
            time.sleep(b.EVENT_STREAM_RETRY_DELAY)
