"""Callbacks the client calls with output as it arrives, and followed logs (``…/logs?follow=1``,
Server-Sent Events, reconnected when the connection breaks)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

import httpx

from .. import _base as b
from ..errors import APIConnectionError
from ..types import ExecutionError, Result
from .transport import _AsyncTransport

#: Callbacks may be plain functions or coroutine functions.  # unasync: async-only
AsyncOutputCallback = Callable[[str], Any]
AsyncResultCallback = Callable[[Result], Any]
AsyncErrorCallback = Callable[[ExecutionError], Any]


async def _call(cb: Optional[Callable[[Any], Any]], data: Any) -> None:
    """Calls an optional callback.

    Async: what a coroutine function returns is awaited.
    """
    if cb is None:
        return
    r = cb(data)  # unasync: sync: cb(data)
    # unasync: async-only
    if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
        await r
    # unasync: end


async def _follow_once(
    t: _AsyncTransport, f: b.LogFollower, on_log: Optional[AsyncOutputCallback]
) -> None:
    """One connection of a followed log (``…/logs?follow=1``): passes each new piece of text
    to ``on_log`` until the log's ``end`` event, the follower's deadline, or a broken stream;
    then, unless the log ended, pauses before the caller reconnects. Raises once the stream
    keeps breaking without new text, and on error answers of the server (404, ...)."""
    f.start()
    try:
        resp = await t.request(
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
            async for line in resp.aiter_lines():
                text = f.line(line)
                if text:
                    await _call(on_log, text)
                if f.done or f.expired():
                    ended = True
                    break
            if not ended:
                text = f.finish()
                if text:
                    await _call(on_log, text)
        finally:
            await resp.aclose()
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
        await asyncio.sleep(f.retry_delay())
