# Generated from _async/exec.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/exec.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""Running commands: :class:`ExecStream` (``sandbox.exec_stream``, Server-Sent Events),
:class:`Process` (``sandbox.spawn``) and :class:`Pty` (``sandbox.pty``), both on a
WebSocket."""

from __future__ import annotations

import collections
import json as _json
from typing import Any, Dict, Generator, Iterator, Optional, Union

import httpx

from .. import _base as b
from .. import _ws
from ..errors import CommandTimeoutError, StreamError
from ..types import ExecEvent, ExecResult, ExitEvent
from .sandbox import Sandbox


class ExecStream:
    """The events of a running command: iterate for :class:`~pandastack.StdoutEvent`,
    :class:`~pandastack.StderrEvent` and finally one :class:`~pandastack.ExitEvent`.

    The request is sent on first iteration (or ``with``). Closing the stream early (``close()``,
    leaving the ``with`` block, or breaking out of the loop and dropping it) disconnects, and the
    server kills the command. After the loop, ``result`` holds the collected
    :class:`~pandastack.ExecResult`; ``wait()`` drains the rest and returns it.
    """

    def __init__(self, sandbox: "Sandbox", body: Dict[str, Any], timeout: httpx.Timeout):
        self._sandbox = sandbox
        self._body = body
        self._timeout = timeout
        self._resp: Optional[httpx.Response] = None
        self._gen: Optional[Generator[ExecEvent, None, None]] = None
        self._collector = b.ExecCollector()
        self.exit: Optional[ExitEvent] = None

    def _open(self) -> Generator[ExecEvent, None, None]:
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

    def _events(self) -> Generator[ExecEvent, None, None]:
        t = self._sandbox._t
        self._resp = t.request(
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
                for line in self._resp.iter_lines():
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
            self._resp.close()

    def __iter__(self) -> Iterator[ExecEvent]:
        return self

    def __next__(self) -> ExecEvent:
        return self._open().__next__()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
        if self._resp is not None:
            self._resp.close()

    @property
    def result(self) -> Optional[ExecResult]:
        """The result once the exit event was seen, else ``None``."""
        return self._collector.result() if self._collector.exit is not None else None

    def wait(self, check: bool = False) -> ExecResult:
        """Consumes the remaining events and returns the :class:`~pandastack.ExecResult`."""
        for _ in self:
            pass
        return b.check_result(self._collector.result(), check, b.describe_cmd(self._body))


class Process:
    """A command started with :meth:`Sandbox.spawn`, on its own WebSocket: live output, stdin,
    and kill. Iterate for :class:`~pandastack.StdoutEvent` / :class:`~pandastack.StderrEvent`
    and a final :class:`~pandastack.ExitEvent`; or call :meth:`wait`.

    Standard input stays open until :meth:`close_stdin`. Closing the handle (``close()`` or
    leaving ``with``) before the command exits kills it.
    """

    _ID = "c1"

    def __init__(self, ws: _ws.SyncWebSocket, body: Dict[str, Any]) -> None:
        self._ws = ws
        self._body = body
        self._frames = b.FrameDecoder(self._ID)
        self._pending: "collections.deque[ExecEvent]" = collections.deque()
        self._collector = b.ExecCollector()
        self._done = False
        self.exit: Optional[ExitEvent] = None
        ws.send_text(b.ws_start_frame(self._ID, body))

    def __iter__(self) -> "Process":
        return self

    def __next__(self) -> ExecEvent:
        while not self._pending:
            if self._done:
                raise StopIteration
            op, payload = self._ws.recv()
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
                self._ws.close()
                raise
            for ev in evs:
                self._collector.add(ev)
                if isinstance(ev, ExitEvent):
                    self.exit = ev
                    self._done = True
                    self._ws.close()
            self._pending.extend(evs)
        return self._pending.popleft()

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the command exited, else ``None``."""
        return self.exit.exit_code if self.exit else None

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the command's standard input (text is sent as UTF-8)."""
        self._ws.send_text(b.ws_stdin_frame(self._ID, data))

    def close_stdin(self) -> None:
        """Closes standard input (the command sees end of file)."""
        self._ws.send_text(_json.dumps({"type": "stdin_close", "id": self._ID}))

    def kill(self) -> None:
        """Kills the command's process group (SIGKILL); its exit event follows (code 137)."""
        if not self._done:
            self._ws.send_text(_json.dumps({"type": "kill", "id": self._ID}))

    def wait(self, check: bool = False) -> ExecResult:
        """Reads the remaining output and returns the :class:`~pandastack.ExecResult`."""
        for _ in self:
            pass
        return b.check_result(self._collector.result(), check, b.describe_cmd(self._body))

    def close(self) -> None:
        """Disconnects; a command still running is killed by the server."""
        self._done = True
        self._ws.close()

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Pty:
    """An interactive terminal from :meth:`Sandbox.pty`: :meth:`write` keystrokes, :meth:`read`
    (or iterate over) output bytes, :meth:`resize`. ``exit_code`` is set once the program ends.
    """

    def __init__(self, ws: _ws.SyncWebSocket) -> None:
        self._ws = ws
        self.exit_code: Optional[int] = None
        self._eof = False

    def write(self, data: Union[str, bytes]) -> None:
        """Sends input to the terminal (text is sent as UTF-8)."""
        self._ws.send_binary(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send_text(_json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}))

    def read(self) -> bytes:
        """The next piece of terminal output; ``b""`` once the terminal has ended."""
        while not self._eof:
            try:
                op, payload = self._ws.recv()
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
                self._ws.close()
                raise StreamError(str(frame.get("message") or "pty failed"), code=str(frame.get("code") or "stream_error"))
        return b""

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks()

    def _chunks(self) -> Iterator[bytes]:
        while True:
            chunk = self.read()
            if not chunk:
                return
            yield chunk

    def wait(self) -> int:
        """Reads (and discards) output until the program ends; returns its exit code."""
        for _ in self:
            pass
        if self.exit_code is None:
            raise StreamError("terminal closed without an exit status", code="stream_incomplete")
        return self.exit_code

    def close(self) -> None:
        """Closes the terminal (the program gets a hangup)."""
        self._eof = True
        self._ws.close()

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
