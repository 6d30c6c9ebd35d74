"""Running commands: :class:`AsyncExecStream` (``sandbox.exec_stream``, Server-Sent Events),
:class:`AsyncProcess` (``sandbox.spawn``) and :class:`AsyncPty` (``sandbox.pty``), both on a
WebSocket."""

from __future__ import annotations

import collections
import json as _json
from typing import Any, AsyncGenerator, AsyncIterator, Dict, Optional, Union

import httpx

from .. import _base as b
from .. import _ws
from ..errors import CommandTimeoutError, StreamError
from ..types import ExecEvent, ExecResult, ExitEvent
from .sandbox import AsyncSandbox


class AsyncExecStream:
    """The events of a running command: iterate for :class:`~pandastack.StdoutEvent`,
    :class:`~pandastack.StderrEvent` and finally one :class:`~pandastack.ExitEvent`.

    The request is sent on first iteration (or ``async with``). Closing the stream early (``close()``,
    leaving the ``async with`` block, or breaking out of the loop and dropping it) disconnects, and the
    server kills the command. After the loop, ``result`` holds the collected
    :class:`~pandastack.ExecResult`; ``wait()`` drains the rest and returns it.

    Async: ``async for ev in stream``; ``aclose()`` is ``close()``.
    """

    def __init__(self, sandbox: "AsyncSandbox", body: Dict[str, Any], timeout: httpx.Timeout):
        self._sandbox = sandbox
        self._body = body
        self._timeout = timeout
        self._resp: Optional[httpx.Response] = None
        self._gen: Optional[AsyncGenerator[ExecEvent, None]] = None
        self._collector = b.ExecCollector()
        self.exit: Optional[ExitEvent] = None

    def _open(self) -> AsyncGenerator[ExecEvent, None]:
        if self._gen is None:
            self._gen = self._events()
        return self._gen

    def _take(self, pair: Any) -> Optional[ExecEvent]:
        ev = b.exec_event(*pair)
        if ev is not None:
            self._collector.add(ev)
            if isinstance(ev, ExitEvent):
                self.exit = ev
        return ev

    async def _events(self) -> AsyncGenerator[ExecEvent, None]:
        t = self._sandbox._t
        self._resp = await t.request(
            "POST",
            f"/v1/sandboxes/{b.seg(self._sandbox.id)}/exec/stream",
            json=self._body,
            headers={"Accept": "text/event-stream"},
            timeout=self._timeout,
            stream=True,
        )
        dec = b.SSEDecoder()
        try:
            try:
                async for line in self._resp.aiter_lines():
                    pair = dec.feed(line)
                    if pair is None:
                        continue
                    ev = self._take(pair)
                    if ev is None:
                        continue
                    yield ev
                    if isinstance(ev, ExitEvent):
                        return
                pair = dec.flush()
                if pair is not None:
                    ev = self._take(pair)
                    if ev is not None:
                        yield ev
                        if isinstance(ev, ExitEvent):
                            return
            except httpx.TimeoutException as e:
                raise CommandTimeoutError(
                    f"exec stream: no data from the server for {self._timeout.read} s",
                    code="request_timeout",
                ) from e
            except httpx.TransportError as e:
                raise b.error_from_exception(e, "exec stream") from e
            raise StreamError("exec stream ended without an exit event", code="stream_incomplete")
        finally:
            await self._resp.aclose()

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        return self

    async def __anext__(self) -> ExecEvent:
        return await self._open().__anext__()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()
        if self._resp is not None:
            await self._resp.aclose()

    # unasync: async-only
    async def close(self) -> None:
        """Same as :meth:`aclose`."""
        await self.aclose()

    # unasync: end
    @property
    def result(self) -> Optional[ExecResult]:
        """The result once the exit event was seen, else ``None``."""
        return self._collector.result() if self._collector.exit is not None else None

    async def wait(self, check: bool = False) -> ExecResult:
        """Consumes the remaining events and returns the :class:`~pandastack.ExecResult`."""
        async for _ in self:
            pass
        return b.check_result(self._collector.result(), check, b.describe_cmd(self._body))


class AsyncProcess:
    """A command started with :meth:`AsyncSandbox.spawn`, on its own WebSocket: live output, stdin,
    and kill. Iterate for :class:`~pandastack.StdoutEvent` / :class:`~pandastack.StderrEvent`
    and a final :class:`~pandastack.ExitEvent`; or call :meth:`wait`.

    Standard input stays open until :meth:`close_stdin`. Closing the handle (``close()`` or
    leaving ``async with``) before the command exits kills it.

    Async: from ``await sandbox.spawn(...)``; ``async for ev in proc``, ``await
    proc.send_stdin(...)``.
    """

    _ID = "c1"

    def __init__(self, ws: _ws.AsyncWebSocket, body: Dict[str, Any]) -> None:
        self._ws = ws
        self._body = body
        self._frames = b.FrameDecoder(self._ID)
        self._pending: "collections.deque[ExecEvent]" = collections.deque()
        self._collector = b.ExecCollector()
        self._done = False
        self.exit: Optional[ExitEvent] = None
        # unasync: sync: ws.send_text(b.ws_start_frame(self._ID, body))

    # unasync: async-only
    async def _start(self) -> "AsyncProcess":
        await self._ws.send_text(b.ws_start_frame(self._ID, self._body))
        return self

    # unasync: end
    def __aiter__(self) -> "AsyncProcess":
        return self

    async def __anext__(self) -> ExecEvent:
        while not self._pending:
            if self._done:
                raise StopAsyncIteration
            op, payload = await self._ws.recv()
            if op == _ws.OP_CLOSE:
                self._done = True
                raise StreamError("exec socket closed before the command exited", code="stream_incomplete")
            if op != _ws.OP_TEXT:
                continue
            try:
                frame = _json.loads(payload.decode("utf-8"))
            except ValueError:
                continue
            try:
                evs = self._frames.events(frame)
            except StreamError:
                self._done = True
                await self._ws.close()
                raise
            for ev in evs:
                self._collector.add(ev)
                if isinstance(ev, ExitEvent):
                    self.exit = ev
                    self._done = True
                    await self._ws.close()
            self._pending.extend(evs)
        return self._pending.popleft()

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the command exited, else ``None``."""
        return self.exit.exit_code if self.exit else None

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the command's standard input (text is sent as UTF-8)."""
        await self._ws.send_text(b.ws_stdin_frame(self._ID, data))

    async def close_stdin(self) -> None:
        """Closes standard input (the command sees end of file)."""
        await self._ws.send_text(_json.dumps({"type": "stdin_close", "id": self._ID}))

    async def kill(self) -> None:
        """Kills the command's process group (SIGKILL); its exit event follows (code 137)."""
        if not self._done:
            await self._ws.send_text(_json.dumps({"type": "kill", "id": self._ID}))

    async def wait(self, check: bool = False) -> ExecResult:
        """Reads the remaining output and returns the :class:`~pandastack.ExecResult`."""
        async for _ in self:
            pass
        return b.check_result(self._collector.result(), check, b.describe_cmd(self._body))

    async def close(self) -> None:
        """Disconnects; a command still running is killed by the server."""
        self._done = True
        await self._ws.close()

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncPty:
    """An interactive terminal from :meth:`AsyncSandbox.pty`: :meth:`write` keystrokes, :meth:`read`
    (or iterate over) output bytes, :meth:`resize`. ``exit_code`` is set once the program ends.

    Async: from ``await sandbox.pty(...)``; ``async for chunk in term``.
    """

    def __init__(self, ws: _ws.AsyncWebSocket) -> None:
        self._ws = ws
        self.exit_code: Optional[int] = None
        self._eof = False

    async def write(self, data: Union[str, bytes]) -> None:
        """Sends input to the terminal (text is sent as UTF-8)."""
        await self._ws.send_binary(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send_text(_json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}))

    async def read(self) -> bytes:
        """The next piece of terminal output; ``b""`` once the terminal has ended."""
        while not self._eof:
            try:
                op, payload = await self._ws.recv()
            except _ws.WebSocketClosed:
                self._eof = True
                break
            if op == _ws.OP_BINARY:
                if payload:
                    return payload
                continue
            if op == _ws.OP_CLOSE:
                self._eof = True
                break
            try:
                frame = _json.loads(payload.decode("utf-8"))
            except ValueError:
                continue
            if frame.get("type") == "exit":
                self.exit_code = int(frame.get("exit_code", -1))
            elif frame.get("type") == "error":
                self._eof = True
                await self._ws.close()
                raise StreamError(str(frame.get("message") or "pty failed"), code=str(frame.get("code") or "stream_error"))
        return b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.read()
            if not chunk:
                return
            yield chunk

    async def wait(self) -> int:
        """Reads (and discards) output until the program ends; returns its exit code."""
        async for _ in self:
            pass
        if self.exit_code is None:
            raise StreamError("terminal closed without an exit status", code="stream_incomplete")
        return self.exit_code

    async def close(self) -> None:
        """Closes the terminal (the program gets a hangup)."""
        self._eof = True
        await self._ws.close()

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
