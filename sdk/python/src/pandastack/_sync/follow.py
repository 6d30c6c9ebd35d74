# Generated from _async/follow.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/follow.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""Callbacks the client calls with output as it arrives, and followed logs (``…/logs?follow=1``,
Server-Sent Events, reconnected when the connection breaks)."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import httpx

from .. import _base as b
from ..errors import APIConnectionError
from ..types import ExecutionError, Result
from .transport import _Transport

OutputCallback = Callable[[str], Any]
ResultCallback = Callable[[Result], Any]
ErrorCallback = Callable[[ExecutionError], Any]


def _call(cb: Optional[Callable[[Any], Any]], data: Any) -> None:
    """Calls an optional callback.
    """
    if cb is None:
        return
    cb(data)


def _follow_once(
    t: _Transport, f: b.LogFollower, on_log: Optional[OutputCallback]
) -> None:
    """One connection of a followed log (``…/logs?follow=1``): passes each new piece of text
    to ``on_log`` until the log's ``end`` event, the follower's deadline, or a broken stream;
    then, unless the log ended, pauses before the caller reconnects. Raises once the stream
    keeps breaking without new text, and on error answers of the server (404, ...)."""
    f.start()
    try:
        resp = t.request(
            "GET",
            f.path,
            params=f.params(),
            headers={"Accept": "text/event-stream"},
            timeout=f.http_timeout(),
            # Broken streams are reopened by the caller, within the deadline.
            retry=b.RETRY_IDEMPOTENT,
            stream=True,
        )
        try:
            ended = False
            for line in resp.iter_lines():
                text = f.line(line)
                if text:
                    _call(on_log, text)
                if f.done or f.expired():
                    ended = True
                    break
            if not ended:
                text = f.finish()
                if text:
                    _call(on_log, text)
        finally:
            resp.close()
    except httpx.TransportError as e:
        if not f.expired():
            f.broken(b.error_from_exception(e, f.what))
    except APIConnectionError as e:
        if not f.expired():
            f.broken(e)
    else:
        if not f.done and not f.expired():
            f.broken(None)
    if not f.done and not f.expired():
        time.sleep(f.retry_delay())
