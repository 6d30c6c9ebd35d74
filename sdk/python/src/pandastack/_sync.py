# Generated from _async.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""The synchronous client: :class:`PandaStack` and :class:`Sandbox`."""


from __future__ import annotations

import collections
import json as _json
import os
import tempfile
import time
from datetime import datetime
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Generator,
    Generic,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

import httpx

from . import _base as b
from . import _ws
from .errors import (
    APIConnectionError,
    APIError,
    CommandTimeoutError,
    NotFoundError,
    PandaStackError,
    RequestTimeoutError,
    StreamError,
    TemplateNotFoundError,
)
from .types import (
    APIKey,
    App,
    CodeContext,
    CreatedAPIKey,
    Database,
    DatabaseExtensions,
    Deploy,
    ExecEvent,
    ExecResult,
    Execution,
    ExecutionError,
    ExitEvent,
    FileInfo,
    Function,
    FunctionVersion,
    Invocation,
    Metrics,
    Page,
    PortUrl,
    QueryResult,
    Result,
    SandboxInfo,
    Schedule,
    ScheduleRun,
    Snapshot,
    StderrEvent,
    StdoutEvent,
    Template,
    Volume,
    VolumeBackup,
    VolumeMount,
    VolumeSnapshot,
    WriteInfo,
)

T = TypeVar("T")
#: Entries per page ``filesystem.list`` asks for: the most the server returns at once (each page
#: walks the directory again in the guest, so fewer pages cost less).
FS_LIST_PAGE = 5000
OutputCallback = Callable[[str], Any]
ResultCallback = Callable[[Result], Any]
ErrorCallback = Callable[[ExecutionError], Any]
FileContent = Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]

__all__ = [
    "PandaStack",
    "Sandbox",
    "Filesystem",
    "ExecStream",
    "Paginator",
    "Process",
    "Pty",
    "Volumes",
    "Databases",
    "Apps",
    "Functions",
    "Schedules",
]


class _Transport:
    def __init__(
        self,
        cfg: b.Config,
        http_client: Optional[httpx.Client],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        self.cfg = cfg
        self._own = http_client is None
        self.http = http_client or httpx.Client(timeout=b.timeout_for(None, cfg.timeout))
        self.headers = {**b.default_headers(cfg), **dict(headers or {})}

    def close(self) -> None:
        if self._own:
            self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, str]] = None,
        json: Any = None,
        content: Any = None,
        content_factory: Optional[Callable[[], Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[httpx.Timeout] = None,
        retry: Optional[str] = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends a request with retries. Raises a :class:`PandaStackError` for error statuses.
        With ``stream=True`` the caller must close the returned response."""
        if retry is None:
            if method in ("GET", "HEAD"):
                retry = b.RETRY_READ
            elif method in ("PUT", "PATCH", "DELETE"):
                retry = b.RETRY_IDEMPOTENT
            else:
                retry = b.RETRY_UNSAFE
        cfg = self.cfg
        url = cfg.base_url + path
        hdrs = {**self.headers, **dict(headers or {})}
        what = f"{method} {path}"
        attempt = 0
        while True:
            body = content_factory() if content_factory is not None else content
            try:
                req = self.http.build_request(
                    method,
                    url,
                    params=params,
                    json=json,
                    content=body,
                    headers=hdrs,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
                try:
                    resp = self.http.send(req, stream=True)
                    if resp.status_code < 400 and not stream:
                        try:
                            resp.read()
                        finally:
                            resp.close()
                except httpx.TransportError as e:
                    if attempt < cfg.max_retries and b.retryable_exception(retry, e):
                        time.sleep(b.backoff(cfg, attempt, None) or 0.0)
                        attempt += 1
                        continue
                    raise b.error_from_exception(e, what) from e
            finally:
                if content_factory is not None and hasattr(body, "close"):
                    body.close()
            if resp.status_code >= 400:
                try:
                    data = resp.read()
                except httpx.TransportError:
                    data = b""
                finally:
                    resp.close()
                err = b.error_from_response(resp, data)
                if (
                    attempt < cfg.max_retries
                    and b.retryable_status(retry, resp.status_code)
                    and err.code != "limit_reached"
                ):
                    wait = b.backoff(cfg, attempt, getattr(err, "retry_after", None))
                    if wait is not None:
                        time.sleep(wait)
                        attempt += 1
                        continue
                raise err
            return resp

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.request(method, path, **kw)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()


class Paginator(Generic[T]):
    """Iterates over every item of a cursor-paginated list, fetching pages as needed.

    ``for x in paginator`` yields items; ``paginator.pages()`` yields :class:`~pandastack.Page`
    objects; ``paginator.to_list()`` collects everything. Each iteration starts over from the
    first page.
    """

    def __init__(
        self, fetch: Callable[[Optional[str]], Page[T]], cursor: Optional[str] = None
    ):
        self._fetch = fetch
        self._cursor = cursor

    def pages(self) -> Iterator[Page[T]]:
        cursor = self._cursor
        while True:
            page = self._fetch(cursor)
            yield page
            if not page.next_cursor or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    def _items(self) -> Iterator[T]:
        for page in self.pages():
            for x in page.data:
                yield x

    def __iter__(self) -> Iterator[T]:
        return self._items()

    def first_page(self) -> Page[T]:
        return self._fetch(self._cursor)

    def to_list(self) -> List[T]:
        return [x for x in self]


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


class Filesystem:
    """Files inside a sandbox (``sandbox.filesystem``, alias ``sandbox.files``). Paths are
    absolute guest paths. Missing paths raise :class:`~pandastack.NotFoundError`."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _t(self) -> _Transport:
        return self._sb._t

    @property
    def _p(self) -> str:
        return f"/v1/sandboxes/{b.seg(self._sb.id)}/fs"

    def _io_timeout(self) -> httpx.Timeout:
        return b.timeout_for(None, max(self._t.cfg.timeout, 300.0))

    def read(self, path: str, *, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The file's content as text."""
        return self.read_bytes(path).decode(encoding, errors)

    def read_bytes(self, path: str) -> bytes:
        """The file's content as bytes (held in memory: use :meth:`download` or
        :meth:`read_stream` for large files)."""
        resp = self._t.request("GET", self._p, params={"path": path}, timeout=self._io_timeout())
        return resp.content

    def read_stream(self, path: str, chunk_size: int = b.CHUNK_SIZE) -> Iterator[bytes]:
        """Yields the file's content in chunks without holding it in memory."""
        resp = self._t.request(
            "GET", self._p, params={"path": path}, stream=True, timeout=self._io_timeout()
        )
        try:
            try:
                for chunk in resp.iter_bytes(chunk_size):
                    yield chunk
            except httpx.TransportError as e:
                raise b.error_from_exception(e, f"read {path}") from e
        finally:
            resp.close()

    def write(self, path: str, data: FileContent) -> WriteInfo:
        """Creates or replaces a file (parents are created; the replacement is atomic).
        ``data`` is text (UTF-8), bytes, a binary file object or an iterable of bytes chunks;
        file objects and iterables are streamed."""
        kw: Dict[str, Any] = {}
        if isinstance(data, str):
            kw["content"] = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            kw["content"] = bytes(data)
        else:
            # Streams can be sent once only: never retried (upload() reopens its file and is).
            kw["content"] = data
            kw["retry"] = b.RETRY_NEVER
        resp = self._t.request(
            "PUT",
            self._p,
            params={"path": path},
            headers={"Content-Type": "application/octet-stream"},
            timeout=self._io_timeout(),
            **kw,
        )
        return WriteInfo.from_json(resp.json())

    def upload(self, local_path: Union[str, "os.PathLike[str]"], remote_path: str) -> WriteInfo:
        """Streams a local file into the sandbox (never held in memory)."""
        local = os.fspath(local_path)
        size = os.path.getsize(local)
        resp = self._t.request(
            "PUT",
            self._p,
            params={"path": remote_path},
            content_factory=lambda: open(local, "rb"),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            timeout=self._io_timeout(),
        )
        return WriteInfo.from_json(resp.json())

    def download(self, remote_path: str, local_path: Union[str, "os.PathLike[str]"]) -> int:
        """Streams a sandbox file to a local path (written to a temporary file next to it, then
        renamed into place). Returns the number of bytes written."""
        local = os.fspath(local_path)
        d = os.path.dirname(os.path.abspath(local))
        fd, tmp = tempfile.mkstemp(prefix=".pandastack-", dir=d)
        n = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in self.read_stream(remote_path):
                    f.write(chunk)
                    n += len(chunk)
            os.replace(tmp, local)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return n

    def list(self, path: str = "/", *, depth: int = 1) -> List[FileInfo]:
        """Entries under a directory, ``depth`` levels deep (1-10), sorted by path. The server
        answers a page at a time (one answer cannot carry a large directory); this follows
        ``next_cursor`` to the last page."""
        params = {"path": path, "depth": str(int(depth)), "limit": str(FS_LIST_PAGE)}

        def fetch(c: Optional[str]) -> Page[FileInfo]:
            q = dict(params, cursor=c) if c else params
            body = self._t.json("GET", f"{self._p}/list", params=q) or {}
            return Page([FileInfo.from_json(x) for x in body.get("data", [])], body.get("next_cursor"))

        return Paginator(fetch).to_list()

    def stat(self, path: str) -> FileInfo:
        return FileInfo.from_json(self._t.json("GET", f"{self._p}/stat", params={"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, *, parents: bool = True) -> None:
        """Creates a directory (with its parents unless ``parents=False``)."""
        self._t.request(
            "POST", f"{self._p}/mkdir", json={"path": path, "parents": parents}, retry=b.RETRY_IDEMPOTENT
        )

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or a directory (non-empty ones need ``recursive=True``)."""
        params = {"path": path}
        if recursive:
            params["recursive"] = "true"
        self._t.request("DELETE", self._p, params=params)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Moves ``src`` to ``dst`` (fails if ``dst`` exists unless ``overwrite=True``)."""
        self._t.request(
            "POST", f"{self._p}/rename", json={"from": src, "to": dst, "overwrite": overwrite}
        )


class Sandbox:
    """A handle on one sandbox. Fields (``id``, ``state``, ``template``, ``metadata``, …) reflect
    the last answer from the server; :meth:`refresh` re-reads them.

    ``with client.sandboxes.create(...) as sandbox:`` kills the sandbox on exit.
    """

    def __init__(self, client: "PandaStack", info: SandboxInfo) -> None:
        self._client = client
        self._t = client._t
        self._info = info
        self.filesystem = Filesystem(self)
        self.files = self.filesystem

    # ---- fields
    @property
    def id(self) -> str:
        return self._info.id

    @property
    def state(self) -> str:
        return self._info.state

    @property
    def template(self) -> str:
        return self._info.template

    @property
    def metadata(self) -> Dict[str, str]:
        return self._info.metadata

    @property
    def created_at(self) -> str:
        return self._info.created_at

    @property
    def expires_at(self) -> Optional[str]:
        return self._info.expires_at

    @property
    def snapshot_id(self) -> Optional[str]:
        return self._info.snapshot_id

    @property
    def boot_ms(self) -> int:
        return self._info.boot_ms

    @property
    def volumes(self) -> List[VolumeMount]:
        """The volumes mounted in the sandbox (from its create)."""
        return self._info.volumes

    @property
    def data(self) -> SandboxInfo:
        """The last known :class:`~pandastack.SandboxInfo` (no request)."""
        return self._info

    @property
    def client(self) -> "PandaStack":
        return self._client

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, template={self.template!r}, state={self.state!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    @property
    def _p(self) -> str:
        return f"/v1/sandboxes/{b.seg(self.id)}"

    def _set(self, body: Any) -> SandboxInfo:
        self._info = SandboxInfo.from_json(body)
        return self._info

    def _long(self) -> httpx.Timeout:
        return b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT))

    # ---- info
    def info(self) -> SandboxInfo:
        """Fetches the sandbox's current state (does not wake it)."""
        return self._set(self._t.json("GET", self._p))

    def refresh(self) -> "Sandbox":
        """Re-reads the sandbox's fields; returns ``self``."""
        self.info()
        return self

    def is_running(self) -> bool:
        return self.info().state == "running"

    def logs(self) -> str:
        """The guest console output so far."""
        return self._t.request("GET", f"{self._p}/logs").text

    def logs_stream(self) -> Iterator[str]:
        """Follows the guest console: yields the log so far, then every piece appended, until
        the sandbox is deleted (or you stop iterating). Needs a server with ``?follow=1``."""
        resp = self._t.request(
            "GET",
            f"{self._p}/logs",
            params={"follow": "1"},
            headers={"Accept": "text/event-stream"},
            timeout=b.exec_stream_timeout(None),
            stream=True,
        )
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            resp.close()
            raise APIError(
                "this server cannot follow logs (no `?follow=1` support); use logs()",
                code="not_supported",
                status=resp.status_code,
                request_id=resp.headers.get("x-request-id"),
            )
        dec = b.SSEDecoder()
        try:
            try:
                for line in resp.iter_lines():
                    pair = dec.feed(line)
                    if pair is None:
                        continue
                    chunk = b.log_event(*pair)
                    if chunk is None:
                        return
                    if chunk:
                        yield chunk
            except httpx.TransportError as e:
                raise b.error_from_exception(e, "logs stream") from e
        finally:
            resp.close()

    def metrics(self) -> Metrics:
        return Metrics.from_json(self._t.json("GET", f"{self._p}/metrics"))

    # ---- preview URLs
    def get_port(self, port: int) -> PortUrl:
        """The preview URL of ``port`` inside the sandbox, whether it is public, and the token
        that opens it while private (whether or not anything listens there yet)."""
        p = b.port(port)
        return PortUrl.from_json(self._t.json("GET", f"{self._p}/ports/{p}/url"))

    def get_url(self, port: int) -> str:
        """The preview URL of ``port``: ``https://<port>-<id>.<domain>``. Private ports need the
        token of :meth:`get_port` in the ``X-PandaStack-Access-Token`` header."""
        return self.get_port(port).url

    def set_port_public(self, port: int, public: bool = True) -> PortUrl:
        """Makes ``port`` reachable without a token (or, with ``public=False``, private again)."""
        p = b.port(port)
        body = {"public": bool(public)}
        return PortUrl.from_json(self._t.json("PATCH", f"{self._p}/ports/{p}", json=body))

    # ---- exec
    def exec(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_seconds: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        check: bool = False,
        request_timeout: Optional[float] = None,
    ) -> ExecResult:
        """Runs a command to completion.

        ``cmd`` is a shell command line (``/bin/sh -c``) or an argv list (no shell); ``argv=``
        is the explicit form of the latter. ``timeout_seconds`` bounds the command (server
        default 60 s, max 3600). With ``on_stdout``/``on_stderr`` the output is streamed and
        the callbacks get each chunk as it arrives; the result still holds all output.

        A non-zero exit is returned as data. With ``check=True`` a non-zero exit raises
        :class:`~pandastack.CommandExitError` and a timeout raises
        :class:`~pandastack.CommandTimeoutError`. If the HTTP request itself outlives
        ``timeout_seconds`` + 30 s, :class:`~pandastack.CommandTimeoutError` is raised
        regardless of ``check``.
        """
        body = b.exec_body(cmd, argv, timeout_seconds, env, cwd, user, stdin)
        what = b.describe_cmd(body)
        if on_stdout is not None or on_stderr is not None:
            stream = ExecStream(self, body, b.exec_stream_timeout(request_timeout))
            with stream:
                for ev in stream:
                    if isinstance(ev, StdoutEvent):
                        _call(on_stdout, ev.data)
                    elif isinstance(ev, StderrEvent):
                        _call(on_stderr, ev.data)
            result = stream._collector.result()
        else:
            try:
                data = self._t.json(
                    "POST",
                    f"{self._p}/exec",
                    json=body,
                    timeout=b.exec_http_timeout(body, request_timeout),
                )
            except RequestTimeoutError as e:
                raise CommandTimeoutError(
                    f"{what}: no answer within the command timeout plus "
                    f"{b.EXEC_HTTP_MARGIN:.0f} s",
                    code="request_timeout",
                ) from e
            result = ExecResult.from_json(data)
        return b.check_result(result, check, what)

    def exec_stream(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_seconds: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        request_timeout: Optional[float] = None,
    ) -> ExecStream:
        """Runs a command and returns an :class:`ExecStream` of typed events::

            for ev in sandbox.exec_stream("make test"):
                if ev.type == "stdout": print(ev.data, end="")
                elif ev.type == "exit": print("exit", ev.exit_code)
        """
        body = b.exec_body(cmd, argv, timeout_seconds, env, cwd, user, stdin)
        return ExecStream(self, body, b.exec_stream_timeout(request_timeout))

    def _ws_connect(self, suffix: str, params: Optional[Mapping[str, str]] = None) -> _ws.SyncWebSocket:
        cfg = self._t.cfg
        return _ws.SyncWebSocket.connect(
            cfg.base_url,
            f"{self._p}/{suffix}",
            params,
            self._t.headers,
            max(cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT),
        )

    def spawn(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        timeout_seconds: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Process:
        """Starts a command over a WebSocket (``…/exec/ws``) and returns a :class:`Process`
        for interactive use: ``send_stdin``, ``close_stdin``, ``kill``, live events, ``wait``.
        Without ``timeout_seconds`` it runs until it exits, is killed, or the handle closes."""
        body = b.exec_body(cmd, argv, timeout_seconds, env, cwd, user, None)
        ws = self._ws_connect("exec/ws")
        return Process(ws, body)

    def pty(self, *, cols: int = 80, rows: int = 24, cmd: Optional[str] = None) -> Pty:
        """Opens an interactive terminal (``…/pty``) running ``cmd`` (default: a login shell)."""
        params = {"cols": str(int(cols)), "rows": str(int(rows))}
        if cmd is not None:
            params["cmd"] = cmd
        return Pty(self._ws_connect("pty", params))

    # ---- code interpreter
    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = "python",
        context: Union[CodeContext, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout_seconds: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_result: Optional[ResultCallback] = None,
        on_error: Optional[ErrorCallback] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        """Runs code in the sandbox's code interpreter and returns an
        :class:`~pandastack.Execution`::

            sandbox.run_code("x = 21")
            print(sandbox.run_code("x * 2").text)   # 42

        The code runs in a long-lived kernel (Python: the template needs ``python3``), so
        variables, imports and open files stay for the next call in the same context.
        ``context`` is a :class:`~pandastack.CodeContext` from :meth:`create_code_context` (or
        its id); without it the sandbox's ``default`` context is used. ``env`` applies when
        the call starts the kernel. ``timeout_seconds`` bounds the run (server default 300 s,
        max 3600): the code is interrupted, ``error.name`` is ``"TimeoutError"`` and the kernel
        keeps its variables.

        The value of a final expression, ``display(...)`` calls and matplotlib figures come
        back in ``results``. An exception in the code is data (``error``), not raised. With any
        of the callbacks the run is streamed and they are called as output, results and the
        error arrive; the returned :class:`~pandastack.Execution` still holds everything.

        A context that does not exist (or was deleted) raises
        :class:`~pandastack.NotFoundError`. If the HTTP request itself outlives
        ``timeout_seconds`` + 60 s, :class:`~pandastack.CommandTimeoutError` is raised.
        """
        body = b.code_body(code, language, context, env, timeout_seconds)
        if on_stdout is None and on_stderr is None and on_result is None and on_error is None:
            try:
                data = self._t.json(
                    "POST",
                    f"{self._p}/code",
                    json=body,
                    timeout=b.code_http_timeout(body, request_timeout),
                )
            except RequestTimeoutError as e:
                raise CommandTimeoutError(
                    f"run_code: no answer within the run's timeout plus "
                    f"{b.CODE_HTTP_MARGIN:.0f} s",
                    code="request_timeout",
                ) from e
            return Execution.from_json(data)
        callbacks: Dict[str, Optional[Callable[[Any], Any]]] = {
            "stdout": on_stdout,
            "stderr": on_stderr,
            "result": on_result,
            "error": on_error,
        }
        timeout = b.exec_stream_timeout(request_timeout)
        collector = b.CodeCollector()
        resp = self._t.request(
            "POST",
            f"{self._p}/code/stream",
            json=body,
            headers={"Accept": "text/event-stream"},
            timeout=timeout,
            stream=True,
        )

        def take(pair: Optional[Tuple[str, str]]) -> bool:
            """Handles one SSE event; ``True`` once the run is done."""
            ev = b.code_event(*pair) if pair is not None else None
            if ev is None:
                return False
            kind, value = ev
            collector.add(kind, value)
            _call(callbacks.get(kind), value)
            return kind == "done"

        dec = b.SSEDecoder()
        try:
            try:
                done = False
                for line in resp.iter_lines():
                    if take(dec.feed(line)):
                        done = True
                        break
                if not done:
                    take(dec.flush())
            except httpx.TimeoutException as e:
                raise CommandTimeoutError(
                    f"code stream: no data from the server for {timeout.read} s",
                    code="request_timeout",
                ) from e
            except httpx.TransportError as e:
                raise b.error_from_exception(e, "code stream") from e
        finally:
            resp.close()
        return collector.execution()

    def create_code_context(
        self, *, language: Optional[str] = "python", env: Optional[Mapping[str, str]] = None
    ) -> CodeContext:
        """Creates a code context: a kernel of its own, whose variables no other context sees
        (``env`` is its environment). Pass it as ``context=`` to :meth:`run_code`; delete it
        with :meth:`delete_code_context`."""
        return CodeContext.from_json(
            self._t.json(
                "POST",
                f"{self._p}/code/contexts",
                json=b.code_context_body(language, env),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.CODE_CONTEXT_TIMEOUT)),
            )
        )

    def delete_code_context(self, context: Union[CodeContext, str]) -> None:
        """Stops a context's kernel; its variables are gone and a later :meth:`run_code` in it
        raises :class:`~pandastack.NotFoundError`. Deleting ``"default"`` resets the default
        context (the next run starts a fresh kernel). A context that does not exist (deleted
        already) raises :class:`~pandastack.NotFoundError`."""
        self._t.request(
            "DELETE",
            f"{self._p}/code/contexts/{b.seg(b.context_id_of(context) or '')}",
            timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.CODE_CONTEXT_TIMEOUT)),
        )

    # ---- lifecycle
    def _verb(self, verb: str) -> "Sandbox":
        self._set(self._t.json("POST", f"{self._p}/{verb}", timeout=self._long()))
        return self

    def pause(self) -> "Sandbox":
        """Freezes the vCPUs in place (memory stays resident)."""
        return self._verb("pause")

    def resume(self) -> "Sandbox":
        """Continues a paused sandbox."""
        return self._verb("resume")

    def hibernate(self) -> "Sandbox":
        """Saves the sandbox to disk and frees its memory. Any later call wakes it."""
        return self._verb("hibernate")

    def wake(self) -> "Sandbox":
        """Brings a hibernated sandbox back (any sandbox call also does this implicitly)."""
        return self._verb("wake")

    def kill(self) -> bool:
        """Destroys the sandbox. Returns ``False`` if it was already gone."""
        return self._client.sandboxes.kill(self.id)

    def update(
        self,
        *,
        ttl_seconds: Optional[int] = None,
        idle_timeout_seconds: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> "Sandbox":
        """Changes the TTL (counted from now), idle timeout or metadata (replaced whole)."""
        body = b.drop_none(
            {
                "ttl_seconds": ttl_seconds,
                "idle_timeout_seconds": idle_timeout_seconds,
                "metadata": dict(metadata) if metadata is not None else None,
            }
        )
        self._set(self._t.json("PATCH", self._p, json=body))
        return self

    def set_timeout(self, seconds: int) -> "Sandbox":
        """The sandbox now expires ``seconds`` from now."""
        return self.update(ttl_seconds=seconds)

    # ---- snapshots and forks
    def snapshot(self) -> Snapshot:
        """Snapshots the sandbox (memory and disk); it keeps running."""
        return Snapshot.from_json(
            self._t.json("POST", f"{self._p}/snapshots", timeout=self._long())
        )

    @overload
    def fork(
        self,
        count: None = None,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        keep_snapshot: bool = False,
    ) -> "Sandbox": ...

    @overload
    def fork(
        self,
        count: int,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        keep_snapshot: bool = False,
    ) -> List["Sandbox"]: ...

    def fork(
        self,
        count: Optional[int] = None,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        keep_snapshot: bool = False,
    ) -> Union["Sandbox", List["Sandbox"]]:
        """Clones the running sandbox (memory, processes and disk) into new sandboxes.

        ``sandbox.fork()`` returns one :class:`Sandbox`; ``sandbox.fork(count=n)`` always
        returns a list of ``n`` sandboxes (also for ``n == 1``). Children share the parent's
        metadata unless ``metadata`` is given. The snapshot taken for the fork is
        ``child.snapshot_id``: the server deletes it with the last sandbox restored from it
        (the last child killed), unless ``keep_snapshot=True`` keeps it until
        ``client.snapshots.delete(id)``.
        """
        n = 1 if count is None else int(count)
        body: Dict[str, Any] = {"count": n}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if keep_snapshot:
            body["keep_snapshot"] = True
        data = self._t.json("POST", f"{self._p}/fork", json=body, timeout=self._long())
        children = [
            Sandbox(self._client, SandboxInfo.from_json(c)) for c in data.get("children", [])
        ]
        if count is None:
            return children[0]
        return children


class Sandboxes:
    """``client.sandboxes`` (alias ``client.sandbox``)."""

    def __init__(self, client: "PandaStack") -> None:
        self._client = client
        self._t = client._t

    def create(
        self,
        template: Optional[str] = None,
        *,
        ttl_seconds: Optional[int] = None,
        idle_timeout_seconds: Optional[int] = None,
        on_timeout: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        snapshot_id: Optional[str] = None,
        volumes: Optional[Sequence[b.VolumeMountLike]] = None,
        disk_mbps: Optional[int] = None,
        disk_iops: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Sandbox:
        """Creates a sandbox and returns once it is ready to exec.

        ``template`` defaults to the server's (``base``); ``snapshot_id`` starts from a
        snapshot instead. ``ttl_seconds`` bounds its life, ``idle_timeout_seconds`` its idle
        time; ``on_timeout`` is ``"kill"`` (default) or ``"hibernate"``. An ``Idempotency-Key``
        (a fresh uuid4 unless given) makes retries safe. The first create of a template bakes
        it, which can take a minute: the request timeout is at least 600 s.

        ``volumes`` mounts up to 3 volumes before the create returns: a list of
        :class:`~pandastack.VolumeMount` or dicts ``{"name": "ws", "path": "/workspace",
        "read_only": False}``. A read-write volume is mounted by one sandbox at a time (a
        second raises :class:`~pandastack.VolumeBusyError`); ``read_only`` mounts a copy as of
        now, in any number of sandboxes. Not with ``snapshot_id``.

        ``disk_mbps`` (MiB/s) and ``disk_iops`` limit its VM's disks, root disk and volumes
        together (default: the template's, else the server's; a fork or a sandbox from a
        snapshot has its source's, so not with ``snapshot_id``). The sandbox's ``disk_mbps``
        and ``disk_iops`` show what it runs with.
        """
        body = b.create_body(
            template, snapshot_id, ttl_seconds, idle_timeout_seconds, on_timeout, metadata, env,
            volumes, disk_mbps, disk_iops,
        )
        key = idempotency_key or b.new_idempotency_key()

        def run() -> Sandbox:
            data = self._t.json(
                "POST",
                "/v1/sandboxes",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(
                    request_timeout, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)
                ),
            )
            return Sandbox(self._client, SandboxInfo.from_json(data))

        return run()

    def get(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox (its state is not changed)."""
        data = self._t.json("GET", f"/v1/sandboxes/{b.seg(sandbox_id)}")
        return Sandbox(self._client, SandboxInfo.from_json(data))

    def connect(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox, woken if hibernated and resumed if paused."""
        sb = self.get(sandbox_id)
        if sb.state == "hibernated":
            sb.wake()
        elif sb.state == "paused":
            sb.resume()
        return sb

    def list(
        self,
        *,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Paginator[Sandbox]:
        """All sandboxes matching the filters, newest last, fetched ``limit`` per page
        (server default 100) as you iterate. ``metadata`` matches exact key/value pairs."""

        def fetch(c: Optional[str]) -> Page[Sandbox]:
            data = self._t.json(
                "GET", "/v1/sandboxes", params=b.list_params(limit, c, state, metadata)
            )
            return Page(
                [Sandbox(self._client, SandboxInfo.from_json(x)) for x in data.get("data", [])],
                data.get("next_cursor"),
            )

        return Paginator(fetch, cursor)

    def kill(self, sandbox_id: str) -> bool:
        """Destroys a sandbox by id. Returns ``False`` if it did not exist."""
        try:
            self._t.request(
                "DELETE",
                f"/v1/sandboxes/{b.seg(sandbox_id)}",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
            return True
        except NotFoundError:
            return False


class Snapshots:
    """``client.snapshots``."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Snapshot]:
        def fetch(c: Optional[str]) -> Page[Snapshot]:
            data = self._t.json("GET", "/v1/snapshots", params=b.list_params(limit, c))
            return Page([Snapshot.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def delete(self, snapshot_id: str) -> bool:
        """Deletes a snapshot. Returns ``False`` if it did not exist."""
        try:
            self._t.request("DELETE", f"/v1/snapshots/{b.seg(snapshot_id)}")
            return True
        except NotFoundError:
            return False


class Templates:
    """``client.templates``: the server's catalog and the workspace's own templates, built from
    an OCI image tarball or a spec with :meth:`build`."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(self) -> List[Template]:
        """The catalog's templates, then the workspace's own."""
        data = self._t.json("GET", "/v1/templates")
        return [Template.from_json(x) for x in data.get("data", [])]

    def get(self, name: str) -> Template:
        """One template: the workspace's own of that name, else the catalog's. Raises
        :class:`~pandastack.TemplateNotFoundError` if there is none."""
        try:
            return Template.from_json(self._t.json("GET", f"/v1/templates/{b.seg(name)}"))
        except NotFoundError as e:
            # A server without the single-template route answers "no such route" (`not_found`).
            if e.code != "not_found":
                raise
        for t in self.list():
            if t.name == name:
                return t
        raise TemplateNotFoundError(
            f"template {name} not found", code="template_not_found", status=404
        )

    def build(
        self,
        name: Optional[str] = None,
        *,
        tarball: Optional[b.TarballSource] = None,
        spec: Optional[str] = None,
        cpu: Optional[int] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        description: Optional[str] = None,
        wait: bool = True,
        on_log: Optional[OutputCallback] = None,
        timeout_seconds: Optional[float] = None,
    ) -> Template:
        """Builds a template on the server (a new version if ``name`` exists) and, with
        ``wait=True`` (the default), returns it once ready::

            t = client.templates.build("my-app", tarball="my-app.tar", memory_mb=1024,
                                       on_log=lambda s: print(s, end=""))
            client.sandboxes.create(template=t.name)

        Give exactly one source:

        - ``tarball``: an OCI image layout or ``docker save`` tarball (plain or gzip) as a local
          path (streamed from disk, never held in memory), ``bytes``, or a binary file object
          (streamed; sent once, so not retried). Needs ``name``; ``cpu`` (1-16, default 1),
          ``memory_mb`` (128-65536, default 512), ``disk_mb`` (default: the image plus room) and
          ``description`` shape it. The image's ``Env`` becomes the sandboxes' environment.
        - ``spec``: a template spec's TOML text (Debian packages and inline files only; the
          server refuses other fields with a 422 naming them). ``name`` defaults to the spec's.

        The build runs in the background on the server (one at a time). With ``wait=False``
        this returns the queued template at once. Otherwise it follows the build log
        (``GET …/logs?follow=1``, Server-Sent Events; reconnected if the connection breaks),
        calls ``on_log`` with each new piece of log text, and returns the template when the
        build is ``ready``. A build that ends ``failed`` raises
        :class:`~pandastack.TemplateBuildError` (``.template``, ``.error``); if
        ``timeout_seconds`` pass first (counted from the server's accepting the build),
        :class:`~pandastack.TemplateBuildTimeoutError` is raised and the build goes on.
        A build of ``name`` already under way, or a catalog template's name, raises
        :class:`~pandastack.ConflictError`; a tarball over the server's limit,
        :class:`~pandastack.InvalidArgumentError` (413).
        """
        up = b.template_upload(name, tarball, spec, cpu, memory_mb, disk_mb, description)
        timeout = b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT))
        if up.json is not None:
            data = self._t.json("POST", "/v1/templates", json=up.json, timeout=timeout)
        else:
            kw: Dict[str, Any] = {}
            if up.path is not None:
                path = up.path
                kw["content_factory"] = lambda: open(path, "rb")
            elif up.data is not None:
                kw["content"] = up.data
            else:
                # Chunks, not the file object: httpx would guess a length from fstat (0 for a
                # pipe); the length is sent when known, else the body is chunked.
                reader = up.stream.read
                kw["content"] = iter(lambda: reader(b.CHUNK_SIZE), b"")
                kw["retry"] = b.RETRY_NEVER
            data = self._t.json(
                "POST",
                "/v1/templates",
                params=up.params,
                headers=b.template_upload_headers(up),
                timeout=timeout,
                **kw,
            )
        queued = Template.from_json(data)
        if not wait:
            return queued
        return self._wait(queued, on_log, timeout_seconds)

    def _wait(
        self,
        queued: Template,
        on_log: Optional[OutputCallback],
        timeout_seconds: Optional[float],
    ) -> Template:
        f = b.BuildFollower(queued, timeout_seconds)
        while not f.done:
            if f.expired():
                latest = self._peek(f)
                if f.ended_by(latest):
                    return f.outcome(latest)
                raise f.timeout_error(latest)
            _follow_once(self._t, f, on_log)
        latest = f.queued if f.reason == "deleted" else self.get(f.name)
        return f.outcome(latest)

    def _peek(self, f: b.BuildFollower) -> Template:
        """The template's state now, or the last known one if the server does not say quickly."""
        try:
            return Template.from_json(
                self._t.json(
                    "GET",
                    f"/v1/templates/{b.seg(f.name)}",
                    timeout=b.timeout_for(None, b.BUILD_PEEK_TIMEOUT),
                    retry=b.RETRY_NEVER,
                )
            )
        except PandaStackError:
            return f.queued

    def logs(self, name: str, version: Optional[int] = None) -> str:
        """The build log of the template's newest build (or of build ``version``) so far."""
        resp = self._t.request(
            "GET",
            f"/v1/templates/{b.seg(name)}/logs",
            params=b.template_logs_params(version),
            headers={"Accept": "text/plain"},
        )
        return resp.text

    def bake(self, name: str) -> Template:
        """Re-bakes a template (a cold boot and a new snapshot; catalog templates from their
        spec, built ones from the newest ready version's image) and returns it. New sandboxes
        get the new bake; running ones keep theirs."""
        return Template.from_json(
            self._t.json(
                "POST",
                f"/v1/templates/{b.seg(name)}/bake",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def delete(self, name: str) -> bool:
        """Deletes a built template, every version (running sandboxes made from it keep
        running). Returns ``False`` if it did not exist. Catalog templates, and templates with
        a build under way, raise :class:`~pandastack.ConflictError`."""
        try:
            self._t.request(
                "DELETE",
                f"/v1/templates/{b.seg(name)}",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
            return True
        except NotFoundError:
            return False


class Volumes:
    """``client.volumes``: durable volumes that outlive sandboxes, their snapshots and their
    backups to the object store.

    A volume is mounted by naming it in ``volumes=`` of
    :meth:`~pandastack.PandaStack.sandboxes.create`; what a sandbox writes there stays when the
    sandbox is gone, for the next sandbox that mounts it::

        client.volumes.create("ws", size_gb=10)
        sb = client.sandboxes.create(volumes=[{"name": "ws", "path": "/workspace"}])
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/volumes/{b.seg(name)}{rest}"

    def create(
        self,
        name: str,
        *,
        size_gb: Optional[int] = None,
        from_snapshot: Optional[str] = None,
        from_backup: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Volume:
        """Creates a volume: empty (``size_gb`` GiB, required), or restored from a volume
        snapshot (``from_snapshot``) or a backup (``from_backup``, on any host), grown to
        ``size_gb`` when that is given and larger. ``name`` is 1-63 of ``[a-z0-9-]``.

        A name in use raises :class:`~pandastack.ConflictError`; a bad name or size
        :class:`~pandastack.InvalidArgumentError`; the workspace's quota
        :class:`~pandastack.QuotaExceededError`."""
        body = b.volume_body(name, size_gb, from_snapshot, from_backup)
        key = idempotency_key or b.new_idempotency_key()
        return Volume.from_json(
            self._t.json(
                "POST",
                "/v1/volumes",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Volume]:
        """Every volume of the workspace, fetched ``limit`` per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[Volume]:
            data = self._t.json("GET", "/v1/volumes", params=b.list_params(limit, c))
            return Page([Volume.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, name: str) -> Volume:
        """One volume; raises :class:`~pandastack.VolumeNotFoundError` if there is none."""
        return Volume.from_json(self._t.json("GET", self._p(name)))

    def grow(self, name: str, size_gb: int) -> Volume:
        """Grows a volume to ``size_gb`` GiB (never shrinks). While a sandbox has it mounted
        this raises :class:`~pandastack.VolumeBusyError`."""
        return Volume.from_json(
            self._t.json(
                "PATCH",
                self._p(name),
                json={"size_gb": int(size_gb)},
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
        )

    def delete(self, name: str) -> bool:
        """Deletes a volume (its backups stay in the object store). Returns ``False`` if it
        did not exist; raises :class:`~pandastack.VolumeBusyError` while a sandbox has it
        mounted read-write."""
        try:
            self._t.request(
                "DELETE", self._p(name), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    # ---- snapshots
    def snapshot(self, name: str) -> VolumeSnapshot:
        """Snapshots a volume (a sandbox writing to it has its file system frozen for the
        instant of the copy). Restore it with ``create(new_name, from_snapshot=snap.id)``."""
        return VolumeSnapshot.from_json(
            self._t.json(
                "POST",
                self._p(name, "/snapshots"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def snapshots(self, name: str) -> Paginator[VolumeSnapshot]:
        """The volume's snapshots."""
        path = self._p(name, "/snapshots")

        def fetch(c: Optional[str]) -> Page[VolumeSnapshot]:
            data = self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeSnapshot.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return Paginator(fetch)

    def delete_snapshot(self, name: str, snapshot_id: str) -> bool:
        """Deletes a volume snapshot. Returns ``False`` if it did not exist."""
        try:
            self._t.request("DELETE", self._p(name, f"/snapshots/{b.seg(snapshot_id)}"))
            return True
        except NotFoundError:
            return False

    # ---- backups
    def backup(
        self, name: str, *, wait: bool = False, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Backs a volume up to the object store: a snapshot is taken at once and uploaded in
        the background (only chunks no earlier backup stored). Returns the backup
        ``uploading``; with ``wait=True``, once it is ``done`` (see :meth:`wait_backup`)."""
        backup = VolumeBackup.from_json(
            self._t.json(
                "POST",
                self._p(name, "/backups"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return backup
        return self.wait_backup(name, backup.id, timeout=timeout)

    def backups(self, name: str) -> Paginator[VolumeBackup]:
        """The volume's backups, also after the volume was deleted (they live in the object
        store)."""
        path = self._p(name, "/backups")

        def fetch(c: Optional[str]) -> Page[VolumeBackup]:
            data = self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeBackup.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return Paginator(fetch)

    def get_backup(self, name: str, backup_id: str) -> VolumeBackup:
        """One backup of the volume, as it is now."""
        return VolumeBackup.from_json(
            self._t.json("GET", self._p(name, f"/backups/{b.seg(backup_id)}"))
        )

    def wait_backup(
        self, name: str, backup_id: str, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Polls a backup until its upload has ended and returns it ``done``. A backup that
        ends ``failed`` raises :class:`~pandastack.VolumeBackupError` (``.backup``,
        ``.error``); one still uploading after ``timeout`` seconds (default 3600)
        :class:`~pandastack.VolumeBackupTimeoutError` (the upload goes on)."""
        w = b.BackupWait(timeout)
        while True:
            backup = self.get_backup(name, backup_id)
            if backup.state != "uploading":
                return b.backup_outcome(name, backup)
            if w.expired():
                raise b.backup_timeout(name, backup, w.timeout)
            time.sleep(w.pause())


class Databases:
    """``client.databases``: managed PostgreSQL databases, each in a microVM of its own with its
    data on a durable volume, reached with a ``postgres://`` connection string (TLS) by any
    driver, or over HTTP with :meth:`query`::

        db = client.databases.create("app")
        client.databases.query(db.id, "create table t (id int primary key, note text)")
        client.databases.query(db.id, "insert into t values ($1, $2)", [1, "hello"])
        rows = client.databases.query(db.id, "select * from t").rows   # [[1, "hello"]]

    Every call takes the database's id or its name. A database idle for ``idle_seconds``
    hibernates; the next connection or query wakes it.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, database: str, rest: str = "") -> str:
        return f"/v1/databases/{b.seg(database)}{rest}"

    def create(
        self,
        name: str,
        *,
        version: Optional[int] = None,
        size_gb: Optional[int] = None,
        memory_mb: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Creates a database and returns it ready for connections. ``name`` (1-40 of
        ``[a-z0-9_]``, starting with a letter) names the database and its owner role;
        ``version`` is the PostgreSQL major (default and only choice today: 17); ``size_gb``
        the size of its data volume in GiB (default 1); ``memory_mb`` the memory of its VM in
        MiB (a multiple of 256 from 256 to 16384, default 1024; the first database of a size
        bakes the template at that size); ``idle_seconds`` the idle time before it hibernates
        (default 300, ``0``: never).

        The first create on a server builds and bakes the ``postgres`` template, which takes
        minutes: the request waits up to ``timeout`` seconds (default 900). A name in use
        raises :class:`~pandastack.ConflictError`; a bad name, version or size
        :class:`~pandastack.InvalidArgumentError`."""
        body = b.database_body(name, version, size_gb, idle_seconds, memory_mb)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            self._t.json(
                "POST",
                "/v1/databases",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Database]:
        """Every database of the workspace (by name), fetched ``limit`` per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[Database]:
            data = self._t.json("GET", "/v1/databases", params=b.list_params(limit, c))
            return Page([Database.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, database: str) -> Database:
        """One database, by id or name; raises :class:`~pandastack.DatabaseNotFoundError` if
        there is none."""
        return Database.from_json(self._t.json("GET", self._p(database)))

    def delete(self, database: str) -> bool:
        """Deletes a database: its VM and its data volume (its backups stay in the object
        store). Returns ``False`` if it did not exist."""
        try:
            self._t.request(
                "DELETE", self._p(database), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    def branch(
        self,
        database: str,
        name: Optional[str] = None,
        idle_seconds: Optional[int] = None,
        *,
        from_time: Optional[Union[datetime, str]] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Branches a database as of now: a new database (``parent`` set) on a copy-on-write
        copy of its data, with the same owner role, its own password and its own VM; returned
        ready. ``name`` defaults to ``<name>_<6 hex>``. Writes to either side stay there.

        With ``from_time`` (a ``datetime``, naive taken as UTC, or an RFC 3339 string) the
        branch has the data as of that time instead (point-in-time, from the database's base
        backups and archived WAL); a time outside the restore window raises
        :class:`~pandastack.InvalidArgumentError` (422) whose message names the window."""
        body = b.branch_body(name, idle_seconds, from_time)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            self._t.json(
                "POST",
                self._p(database, "/branches"),
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    def restore(
        self,
        database: str,
        to_time: Union[datetime, str],
        *,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Restores a database in place to its data as of ``to_time`` (a ``datetime``, naive
        taken as UTC, or an RFC 3339 string) and returns it ready: the same id, password and
        connection strings, on a new timeline (open connections to the old data are closed).
        The restore window runs from the oldest base backup kept to now; a time outside it
        raises :class:`~pandastack.InvalidArgumentError` (422, ``invalid_argument``) whose
        message names the window."""
        body = b.restore_body(to_time)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            self._t.json(
                "POST",
                self._p(database, "/restore"),
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    def rotate_password(self, database: str) -> Database:
        """Gives the owner role a new password and returns the database with its new
        ``connection_uri`` and ``pooled_uri``. The old password stops working at once (open
        sessions stay)."""
        return Database.from_json(
            self._t.json(
                "POST",
                self._p(database, "/password"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def query(
        self,
        database: str,
        sql: str,
        params: Optional[Sequence[Any]] = None,
        timeout_ms: Optional[int] = None,
    ) -> QueryResult:
        """Runs one SQL statement over HTTP as the database's owner role (waking the database
        first if it hibernated) and returns its :class:`~pandastack.QueryResult`.

        ``params`` fill ``$1``, ``$2``, ...: strings, numbers, booleans and ``None``; lists and
        dicts are sent as JSON text (right for ``json``, ``jsonb`` and pgvector's ``vector``;
        a PostgreSQL array takes its literal, ``"{1,2,3}"``). ``timeout_ms`` is the statement
        timeout (default 30000, at most 300000). At most 10 000 rows and 10 MiB come back;
        more raises :class:`~pandastack.InvalidArgumentError` (413).

        An error of PostgreSQL's raises :class:`~pandastack.QueryError` (its ``sqlstate``,
        ``"42601"`` for a syntax error, ...)."""
        body = b.query_body(sql, params, timeout_ms)
        return QueryResult.from_json(
            self._t.json(
                "POST",
                self._p(database, "/query"),
                json=body,
                timeout=b.query_http_timeout(timeout_ms, self._t.cfg.timeout),
            )
        )

    def extensions(self) -> DatabaseExtensions:
        """The extensions a database can load with ``CREATE EXTENSION``, per PostgreSQL
        version, and the libraries preloaded at start."""
        return DatabaseExtensions.from_json(self._t.json("GET", "/v1/databases/extensions"))

    # ---- backups
    def backup(
        self, database: str, *, wait: bool = False, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Takes a base backup of a database to the object store (where :meth:`restore` and
        point-in-time :meth:`branch` start): a copy of its data volume between
        ``pg_backup_start`` and ``pg_backup_stop`` (its file system frozen for the instant of
        the copy), uploaded in the background.
        Returns the backup ``uploading``; with ``wait=True``, once it is ``done`` (see
        :meth:`wait_backup`)."""
        backup = VolumeBackup.from_json(
            self._t.json(
                "POST",
                self._p(database, "/backups"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return backup
        return self.wait_backup(database, backup.id, timeout=timeout)

    def backups(self, database: str) -> Paginator[VolumeBackup]:
        """The database's backups, oldest first."""
        path = self._p(database, "/backups")

        def fetch(c: Optional[str]) -> Page[VolumeBackup]:
            data = self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeBackup.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return Paginator(fetch)

    def wait_backup(
        self, database: str, backup_id: str, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Polls a backup until its upload has ended and returns it ``done``. A backup that
        ends ``failed`` raises :class:`~pandastack.VolumeBackupError`; one still uploading
        after ``timeout`` seconds (default 3600) :class:`~pandastack.VolumeBackupTimeoutError`
        (the upload goes on)."""
        w = b.BackupWait(timeout)
        while True:
            backup = None
            for bk in self.backups(database):
                if bk.id == backup_id:
                    backup = bk
                    break
            if backup is None:
                raise NotFoundError(
                    f"database {database} has no backup {backup_id}", code="not_found", status=404
                )
            if backup.state != "uploading":
                return b.backup_outcome(database, backup, "database")
            if w.expired():
                raise b.backup_timeout(database, backup, w.timeout, "database")
            time.sleep(w.pause())


class Apps:
    """``client.apps``: apps deployed from git (or from a local directory), each built in a
    microVM of its own, health-checked, and served at its ``url`` (``<name>.<domain>``) by the
    server's proxy. A new deploy takes the traffic once healthy (blue-green); the version
    before stays ``standby`` for a :meth:`rollback`::

        app = client.apps.create("web", "https://github.com/me/web.git", deploy=False)
        d = client.apps.deploy("web", wait=True)         # polls until it ends
        print(d.state, app.url)                                 # live https://web.<domain>
        print(client.apps.deploy_logs("web", d.id))      # clone, plan, install, build, check
        client.apps.deploy_directory("web", "./web")      # a deploy of local files
        client.apps.rollback("web")                       # the version before is back

    Every call takes the app's name or its id. An app with ``min_instances=0`` hibernates
    after ``idle_seconds`` without requests; the next request wakes it.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, app: str, rest: str = "") -> str:
        return f"/v1/apps/{b.seg(app)}{rest}"

    def create(
        self,
        name: str,
        git: b.AppGitLike,
        *,
        ref: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        build: Optional[b.AppBuildLike] = None,
        start: Optional[b.AppStartLike] = None,
        memory_mb: Optional[int] = None,
        min_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        health_path: Optional[str] = None,
        domains: Optional[Sequence[str]] = None,
        deploy: Optional[bool] = None,
    ) -> App:
        """Creates an app and queues its first deploy (unless ``deploy=False``); returns the
        app at once (:meth:`deploys` lists the queued deploy, :meth:`wait_for_deploy` waits for
        it). ``name`` (1-40 of ``[a-z0-9-]``, starting with a letter) is also its host name.

        ``git`` is the repository: its URL (fetched by the server over the network: never a
        path or ``file://`` on the server, nor a loopback or private address unless its
        operator allows it; a local directory goes up with :meth:`deploy_directory`), an
        :class:`~pandastack.AppGit` or a dict ``{"url", "ref"}``; ``ref`` the branch,
        tag or commit to deploy (default ``main``). ``env`` is the environment of the build
        and of the running app; ``secrets`` the same, never shown by the API (only their
        names). ``build`` (:class:`~pandastack.AppBuild` or ``{"command", "output_dir"}``) and
        ``start`` (:class:`~pandastack.AppStart` or ``{"command", "port"}``) override what
        detection chose. ``memory_mb`` is the memory of its VM (a multiple of 256 from 256 to
        16384, default 1024); ``min_instances`` ``0`` (default: hibernate after
        ``idle_seconds``, default 300, without requests) or ``1`` (always running);
        ``health_path`` the path the health check asks for (default ``/``).

        ``domains`` are extra host names the app answers at, besides ``<name>.<domain>``
        (lower-case DNS names, at most 20, not under the server's own domain): point their DNS
        at the server's proxy. With TLS on the proxy each gets a certificate, from the
        operator's certificate directory or else from ACME: see ``App.domains[i].tls``
        (:class:`~pandastack.AppDomain`).

        A name in use, or a domain another app has, raises :class:`~pandastack.ConflictError`;
        a bad field :class:`~pandastack.InvalidArgumentError` naming it (``domains[i]``)."""
        config = b.app_config(
            env, secrets, build, start, memory_mb, min_instances, idle_seconds, health_path, domains
        )
        body = b.app_body(name, git, ref, deploy, config)
        return App.from_json(self._t.json("POST", "/v1/apps", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[App]:
        """Every app of the workspace (by name), fetched ``limit`` per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[App]:
            data = self._t.json("GET", "/v1/apps", params=b.list_params(limit, c))
            return Page([App.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, app: str) -> App:
        """One app, by name or id; raises :class:`~pandastack.AppNotFoundError` if there is
        none."""
        return App.from_json(self._t.json("GET", self._p(app)))

    def update(
        self,
        app: str,
        *,
        git: Optional[b.AppGitLike] = None,
        ref: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        build: Optional[b.AppBuildLike] = None,
        start: Optional[b.AppStartLike] = None,
        memory_mb: Optional[int] = None,
        min_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        health_path: Optional[str] = None,
        domains: Optional[Sequence[str]] = None,
    ) -> App:
        """Changes an app's configuration and returns the app: each argument given replaces
        the app's (``env``, ``secrets`` and ``domains`` whole, ``domains=[]`` removes them
        all; ``ref`` needs ``git``); the others stay. The next deploy builds with it;
        ``min_instances`` and ``idle_seconds`` apply to the running version at once, and
        ``domains`` to the proxy at once (extra host names the app answers at: point their DNS
        at the proxy; with TLS on the proxy each gets a certificate from files or ACME, see
        ``App.domains[i].tls``). The arguments are those of :meth:`create`."""
        config = b.app_config(
            env, secrets, build, start, memory_mb, min_instances, idle_seconds, health_path, domains
        )
        body = b.app_update_body(git, ref, config)
        return App.from_json(self._t.json("PATCH", self._p(app), json=body))

    def delete(self, app: str) -> bool:
        """Deletes an app: every version's VM, its deploys and their logs. Returns ``False``
        if it did not exist."""
        try:
            self._t.request(
                "DELETE", self._p(app), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    def rotate_deploy_key(self, app: str) -> App:
        """Replaces the app's SSH deploy key with a new ed25519 pair and returns the app, its
        ``deploy_key`` the new public key to put on the repository (as a read-only deploy
        key). Deploys from then on fetch with the new key."""
        return App.from_json(self._t.json("POST", self._p(app, "/deploy-key")))

    # ---- deploys
    def deploy(
        self,
        app: str,
        ref: Optional[str] = None,
        *,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> Deploy:
        """Deploys the app again, from its git repository: its ``git.ref``, or ``ref`` (a
        branch, tag or commit). Returns the deploy ``queued`` (one deploy runs at a time per
        host; a queued deploy a newer one overtakes ends ``superseded``); with ``wait=True``,
        once it has ended (see :meth:`wait_for_deploy`)."""
        d = Deploy.from_json(
            self._t.json("POST", self._p(app, "/deploys"), json=b.deploy_body(ref))
        )
        if not wait:
            return d
        return self.wait_for_deploy(app, d.id, timeout=timeout)

    def deploy_directory(
        self,
        app: str,
        path: Union[str, "os.PathLike[str]"],
        *,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> Deploy:
        """Deploys the content of a local directory instead of the app's git repository: it is
        packed as a gzip'd tar (in memory; ``.git`` and ``node_modules`` left out at any
        depth, symbolic links kept as links, which the server skips), uploaded, and built like
        a clone. Returns the deploy ``queued`` (its ``ref`` is ``"upload"``); with
        ``wait=True``, once it has ended (see :meth:`wait_for_deploy`). A path that is not a
        directory raises :class:`~pandastack.InvalidArgumentError`, and so does an upload over
        the server's limit (413)."""
        data = b.pack_directory(path)
        d = Deploy.from_json(
            self._t.json(
                "POST",
                self._p(app, "/deploys"),
                content=data,
                headers={"Content-Type": "application/gzip"},
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return d
        return self.wait_for_deploy(app, d.id, timeout=timeout)

    def deploys(
        self, app: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Paginator[Deploy]:
        """The app's deploys, newest first, fetched ``limit`` per page as you iterate."""
        path = self._p(app, "/deploys")

        def fetch(c: Optional[str]) -> Page[Deploy]:
            data = self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([Deploy.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get_deploy(self, app: str, deploy_id: str) -> Deploy:
        """One deploy of the app, as it is now (:class:`~pandastack.NotFoundError` if the app
        has no such deploy)."""
        return Deploy.from_json(
            self._t.json("GET", self._p(app, f"/deploys/{b.seg(deploy_id)}"))
        )

    def wait_for_deploy(
        self, app: str, deploy_id: str, timeout: Optional[float] = None
    ) -> Deploy:
        """Polls a deploy until it has ended and returns it: ``live``, ``failed`` (``error``
        says why), ``superseded``, or ``standby``. One still under way after ``timeout``
        seconds (default 1800) raises :class:`~pandastack.DeployTimeoutError` (``.deploy``;
        the deploy goes on)."""
        w = b.BackupWait(timeout, b.DEFAULT_DEPLOY_TIMEOUT, b.DEPLOY_POLL_INTERVAL)
        while True:
            d = self.get_deploy(app, deploy_id)
            if not d.active:
                return d
            if w.expired():
                raise b.deploy_timeout(app, d, w.timeout)
            time.sleep(w.pause())

    def deploy_logs(
        self,
        app: str,
        deploy_id: str,
        *,
        follow: bool = False,
        on_log: Optional[OutputCallback] = None,
    ) -> str:
        """A deploy's log (fetch, detection's plan, install and build output, start, health
        check) so far. With ``follow=True`` it is followed (Server-Sent Events, reopened if the
        connection breaks) until the deploy ends, each new piece of text passed to ``on_log``,
        and the whole log returned."""
        path = self._p(app, f"/deploys/{b.seg(deploy_id)}/logs")
        return self._log(path, f"log of deploy {deploy_id} of app {app}", follow, on_log)

    def logs(
        self,
        app: str,
        *,
        follow: bool = False,
        on_log: Optional[OutputCallback] = None,
    ) -> str:
        """The running app's own output (its server's stdout and stderr): the newest MiB.
        With ``follow=True``, all of it and then everything it writes next, each piece passed
        to ``on_log``, until its VM stops; returns the text seen. An exception raised by
        ``on_log`` stops the follow (and reaches the caller)."""
        return self._log(self._p(app, "/logs"), f"log of app {app}", follow, on_log)

    def _log(
        self, path: str, what: str, follow: bool, on_log: Optional[OutputCallback]
    ) -> str:
        if not follow:
            resp = self._t.request("GET", path, headers={"Accept": "text/plain"})
            return resp.text
        parts: List[str] = []

        def take(text: str) -> None:
            parts.append(text)
            _call(on_log, text)

        f = b.LogFollower(path, {"follow": "1"}, what)
        while not f.done:
            _follow_once(self._t, f, take)
        return "".join(parts)

    def rollback(self, app: str, deploy_id: Optional[str] = None) -> Deploy:
        """Puts an earlier version back: its hibernated VM is woken, checked and takes the
        traffic (no rebuild); the current version becomes ``standby``. ``deploy_id`` is the
        version to go back to (default: the newest ``standby`` one). Returns that deploy, now
        ``live``. With no version to go back to, or one that is not ``standby``, raises
        :class:`~pandastack.ConflictError`."""
        body = {"deploy_id": deploy_id} if deploy_id is not None else {}
        return Deploy.from_json(
            self._t.json(
                "POST",
                self._p(app, "/rollback"),
                json=body,
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.ROLLBACK_TIMEOUT)),
            )
        )


class Functions:
    """``client.functions``: handlers in Python or Node.js, each version built with its
    dependencies in a VM, baked with the handler imported (a VM snapshot), and invoked over
    HTTP: a warm instance answers at once, a new one is restored from the baked snapshot::

        # main.py: def handler(event, context): return {"hi": event}
        client.functions.create(
            "hello", "python", "main.handler",
            files={"main.py": source}, dependencies="requests",   # requirements.txt
        )
        v = client.functions.wait_for_version("hello", 1)   # live, or failed (v.error)
        r = client.functions.invoke("hello", {"name": "x"})
        print(r.status, r.result, r.cold)    # ok {'hi': {'name': 'x'}} True
        q = client.functions.submit("hello", {"name": "y"})  # queued; retried on failure
        print(client.functions.get_invocation("hello", q.id).status)
        client.functions.create_version("hello", files={"main.py": new_source}, wait=True)
        client.functions.rollback("hello")                  # the version before is back

    A handler that raises (or runs past ``timeout_seconds``) is data: the
    :class:`~pandastack.Invocation`'s ``status`` is ``error`` (or ``timeout``) and ``error``
    holds its type, message and traceback. An unknown function raises
    :class:`~pandastack.NotFoundError`.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/functions/{b.seg(name)}{rest}"

    def _v(self, name: str, version: int, rest: str = "") -> str:
        return self._p(name, f"/versions/{b.version_number(version)}{rest}")

    def create(
        self,
        name: str,
        runtime: str,
        handler: str,
        *,
        files: Optional[Mapping[str, str]] = None,
        git: Optional[b.AppGitLike] = None,
        ref: Optional[str] = None,
        dependencies: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        memory_mb: Optional[int] = None,
        timeout_seconds: Optional[int] = None,
        concurrency: Optional[int] = None,
        max_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        public: Optional[bool] = None,
    ) -> Function:
        """Creates a function and starts building its first version (version 1: wait for it
        with :meth:`wait_for_version`); returns the function at once. ``name`` is 1-37 of
        ``[a-z0-9-]``, starting with a letter (its endpoint is ``fn-<name>.<domain>``).

        ``runtime`` is ``"python"`` or ``"node"``; ``handler`` ``module.function``
        (``main.handler``: ``handler`` in ``main.py``; Node.js: ``index.handler`` is the export
        ``handler`` of ``index.js`` or ``index.mjs``). The source is ``files`` (relative path
        to UTF-8 text, at most 4 MiB in all) or a git repository (``git``, ``ref``, as for
        apps); ``dependencies`` the text of a ``requirements.txt`` (Python) or ``package.json``
        (Node.js), installed in the build. ``env`` is the environment of the build and of
        every call; ``secrets`` the same, never shown by the API. ``memory_mb`` is an
        instance's memory (multiple of 256, default 1024); ``timeout_seconds`` the per-call
        time limit (default 60, at most 900); ``concurrency`` the calls one instance serves
        at once (default 1); ``max_instances`` (default 4); ``idle_seconds`` how long a warm
        instance is kept without calls (default 300); ``public`` serves
        ``fn-<name>.<domain>`` to anyone.

        A name in use raises :class:`~pandastack.ConflictError`; a bad field
        :class:`~pandastack.InvalidArgumentError` naming it."""
        source = b.function_source(files, git, ref, dependencies)
        limits = b.function_limits(memory_mb, timeout_seconds, concurrency, max_instances, idle_seconds)
        body = b.function_body(name, runtime, handler, source, env, secrets, limits, public)
        return Function.from_json(self._t.json("POST", "/v1/functions", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Function]:
        """Every function of the workspace (by name), fetched ``limit`` per page as you
        iterate."""

        def fetch(c: Optional[str]) -> Page[Function]:
            data = self._t.json("GET", "/v1/functions", params=b.list_params(limit, c))
            return Page([Function.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, name: str) -> Function:
        """One function; raises :class:`~pandastack.NotFoundError` if there is none."""
        return Function.from_json(self._t.json("GET", self._p(name)))

    def update(
        self,
        name: str,
        *,
        timeout_seconds: Optional[int] = None,
        concurrency: Optional[int] = None,
        max_instances: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        public: Optional[bool] = None,
    ) -> Function:
        """Changes a function's limits or visibility and returns the function; each argument
        given replaces the function's (see :meth:`create`). Nothing is rebuilt: the next call
        and instance use them. New code, handler or environment is a new version
        (:meth:`create_version`)."""
        body = b.function_limits(None, timeout_seconds, concurrency, max_instances, idle_seconds)
        if public is not None:
            body["public"] = bool(public)
        return Function.from_json(self._t.json("PATCH", self._p(name), json=body))

    def delete(self, name: str) -> bool:
        """Deletes a function: its instances, its versions' snapshots and logs. Returns
        ``False`` if it did not exist."""
        try:
            self._t.request(
                "DELETE", self._p(name), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    # ---- versions
    def create_version(
        self,
        name: str,
        *,
        handler: Optional[str] = None,
        files: Optional[Mapping[str, str]] = None,
        git: Optional[b.AppGitLike] = None,
        ref: Optional[str] = None,
        dependencies: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        secrets: Optional[Mapping[str, str]] = None,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> FunctionVersion:
        """Builds a new version of the function: each argument given replaces the function's
        (``env`` and ``secrets`` whole); without ``files``, ``git`` or ``dependencies`` the
        previous version's source is built again. It goes live once built and its handler
        imports; one that fails leaves the live version serving. Returns the version
        ``queued``; with ``wait=True``, once its build has ended (see
        :meth:`wait_for_version`)."""
        body = b.version_body(handler, b.function_source(files, git, ref, dependencies), env, secrets)
        v = FunctionVersion.from_json(self._t.json("POST", self._p(name, "/versions"), json=body))
        if not wait:
            return v
        return self.wait_for_version(name, v.version, timeout=timeout)

    def versions(
        self, name: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Paginator[FunctionVersion]:
        """The function's versions, newest first, fetched ``limit`` per page as you iterate."""
        path = self._p(name, "/versions")

        def fetch(c: Optional[str]) -> Page[FunctionVersion]:
            data = self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([FunctionVersion.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get_version(self, name: str, version: int) -> FunctionVersion:
        """One version of the function, as it is now (:class:`~pandastack.NotFoundError` if
        there is no such version)."""
        return FunctionVersion.from_json(self._t.json("GET", self._v(name, version)))

    def wait_for_version(
        self, name: str, version: int, timeout: Optional[float] = None
    ) -> FunctionVersion:
        """Polls a version until its build has ended and returns it: ``live``, ``failed``
        (``error`` says why; :meth:`version_logs` says more) or ``standby``. One still being
        built after ``timeout`` seconds (default 1800) raises
        :class:`~pandastack.FunctionVersionTimeoutError` (``.version``; the build goes on)."""
        w = b.BackupWait(timeout, b.DEFAULT_VERSION_TIMEOUT, b.DEPLOY_POLL_INTERVAL)
        while True:
            v = self.get_version(name, version)
            if not v.active:
                return v
            if w.expired():
                raise b.version_timeout(name, v, w.timeout)
            time.sleep(w.pause())

    def version_logs(self, name: str, version: int) -> str:
        """A version's build log: fetch, install, the runtime's import of the handler, bake."""
        resp = self._t.request("GET", self._v(name, version, "/logs"), headers={"Accept": "text/plain"})
        return resp.text

    def rollback(self, name: str, version: Optional[int] = None) -> FunctionVersion:
        """Makes an earlier version live again (default: the one before the live one); nothing
        is rebuilt, its baked snapshot serves the next call. Returns that version, now
        ``live``. With no version to go back to raises :class:`~pandastack.ConflictError`."""
        body = {"version": b.version_number(version)} if version is not None else {}
        return FunctionVersion.from_json(self._t.json("POST", self._p(name, "/rollback"), json=body))

    # ---- calls
    def invoke(self, name: str, event: Any = None, *, timeout: Optional[float] = None) -> Invocation:
        """Calls the function's live version with ``event`` (any JSON value: a dict, a list, a
        str, a number, ``None``) and returns the outcome: ``status`` ``ok`` with ``result``
        (the handler's return value), ``error`` (the handler raised: ``error.type``,
        ``error.message``, ``error.traceback``) or ``timeout``; ``stdout``/``stderr`` (what
        it printed) and ``cold`` either way. Only what stops the call from being made raises:
        an unknown function (:class:`~pandastack.NotFoundError`), no live version
        (:class:`~pandastack.ConflictError`), an event over 6 MiB.

        ``timeout`` is the HTTP timeout in seconds (default: at least 1020, the longest a call
        may run plus the wait for an instance). Not retried once sent (the handler may have
        run)."""
        return Invocation.from_json(
            self._t.json(
                "POST",
                self._p(name, "/invoke"),
                json=event,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.INVOKE_TIMEOUT)),
            )
        )

    def submit(self, name: str, event: Any = None, *, retries: Optional[int] = None) -> Invocation:
        """Queues a call of the function with ``event`` and returns at once: the
        :class:`~pandastack.Invocation` ``queued``, with its ``id``. The call runs on the
        function's host even across a restart of the server, and is tried again up to
        ``retries`` times (server default 2, at most 10) when it ends in ``error`` or
        ``timeout``; :meth:`get_invocation` fetches its outcome (``attempts`` counts the tries)."""
        params = {"async": "1"}
        if retries is not None:
            params["retries"] = str(int(retries))
        return Invocation.from_json(
            self._t.json("POST", self._p(name, "/invoke"), params=params, json=event)
        )

    def get_invocation(self, name: str, invocation_id: str) -> Invocation:
        """A queued call (:meth:`submit`): ``queued`` or ``running`` until it ends, then its
        outcome, like :meth:`invoke`'s."""
        return Invocation.from_json(
            self._t.json("GET", self._p(name, f"/invocations/{b.seg(invocation_id)}"))
        )


class Schedules:
    """``client.schedules``: cron schedules that run a target at each due time (each due time
    once, whatever the number of server processes): a command in a fresh sandbox
    (:class:`~pandastack.SandboxExecTarget`) or a call of a function
    (:class:`~pandastack.FunctionTarget`)::

        client.schedules.create(
            "nightly", "0 3 * * *",
            SandboxExecTarget("minimal", "python3 /srv/report.py"),
            timezone="Europe/Berlin", payload={"full": True}, retries=2,
        )
        run = client.schedules.run("nightly")              # a manual run, now
        for r in client.schedules.runs("nightly"):         # newest due time first
            print(r.due_at, r.state, r.exit_code)
        client.schedules.pause("nightly")

    Every call takes the schedule's name or its id; an unknown one raises
    :class:`~pandastack.NotFoundError`.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/schedules/{b.seg(name)}{rest}"

    def create(
        self,
        name: str,
        cron: str,
        target: b.ScheduleTargetLike,
        *,
        timezone: Optional[str] = None,
        payload: Any = None,
        concurrency_policy: Optional[str] = None,
        starting_deadline_seconds: Optional[int] = None,
        retries: Optional[int] = None,
        paused: Optional[bool] = None,
    ) -> Schedule:
        """Creates a schedule and returns it (``next_run_at`` its first due time). ``name`` is
        1-63 of ``[a-z0-9-]``, starting with a letter. ``cron`` has 5 fields
        (``*/5 * * * *``), 6 with seconds first, or is ``@yearly``, ``@monthly``, ``@weekly``,
        ``@daily`` or ``@hourly``, read in ``timezone`` (IANA, default ``UTC``). ``target`` is
        what runs (:class:`~pandastack.SandboxExecTarget`, :class:`~pandastack.FunctionTarget`
        or a dict with its ``type``); ``payload`` the JSON each run gets.

        ``concurrency_policy`` (``allow``, default; ``forbid``; ``replace``) says what a due
        time does while a previous run is under way; a due time found
        ``starting_deadline_seconds`` late is recorded ``missed``; a failed run is tried
        ``retries`` more times (0 to 10); ``paused=True`` creates it paused. A name in use
        raises :class:`~pandastack.ConflictError`; a bad expression or time zone
        :class:`~pandastack.InvalidArgumentError`."""
        fields = b.schedule_fields(timezone, target, payload, concurrency_policy, starting_deadline_seconds, retries)
        body = b.schedule_body(name, cron, fields, paused)
        return Schedule.from_json(self._t.json("POST", "/v1/schedules", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Schedule]:
        """Every schedule of the workspace (by name), fetched ``limit`` per page as you
        iterate."""

        def fetch(c: Optional[str]) -> Page[Schedule]:
            data = self._t.json("GET", "/v1/schedules", params=b.list_params(limit, c))
            return Page([Schedule.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, name: str) -> Schedule:
        """One schedule, by name or id."""
        return Schedule.from_json(self._t.json("GET", self._p(name)))

    def update(
        self,
        name: str,
        *,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        target: Optional[b.ScheduleTargetLike] = None,
        payload: Any = None,
        concurrency_policy: Optional[str] = None,
        starting_deadline_seconds: Optional[int] = None,
        retries: Optional[int] = None,
    ) -> Schedule:
        """Changes a schedule and returns it: each argument given replaces the schedule's
        (``starting_deadline_seconds=0`` removes the deadline); its next due time is counted
        again from now. The arguments are those of :meth:`create`."""
        body = b.schedule_fields(timezone, target, payload, concurrency_policy, starting_deadline_seconds, retries)
        if cron is not None:
            body["cron"] = str(cron)
        return Schedule.from_json(self._t.json("PATCH", self._p(name), json=body))

    def delete(self, name: str) -> bool:
        """Deletes a schedule and its run history; runs under way are cancelled (their
        sandboxes deleted). Returns ``False`` if it did not exist."""
        try:
            self._t.request("DELETE", self._p(name))
            return True
        except NotFoundError:
            return False

    def pause(self, name: str) -> Schedule:
        """Stops the schedule from firing until :meth:`resume` (runs under way go on)."""
        return Schedule.from_json(self._t.json("POST", self._p(name, "/pause")))

    def resume(self, name: str) -> Schedule:
        """Lets a paused schedule fire again, from now on (the due times of the pause are not
        caught up)."""
        return Schedule.from_json(self._t.json("POST", self._p(name, "/resume")))

    def run(self, name: str) -> ScheduleRun:
        """Runs the schedule's target now (a ``manual`` run; the concurrency policy applies, so
        under ``forbid`` it is ``skipped`` while another run is under way). Returns the run
        (follow it with :meth:`get_run`)."""
        return ScheduleRun.from_json(self._t.json("POST", self._p(name, "/run")))

    def runs(
        self, name: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Paginator[ScheduleRun]:
        """The schedule's runs, newest due time first, fetched ``limit`` per page as you
        iterate."""
        path = self._p(name, "/runs")

        def fetch(c: Optional[str]) -> Page[ScheduleRun]:
            data = self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([ScheduleRun.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get_run(self, name: str, run_id: str) -> ScheduleRun:
        """One run of the schedule, as it is now."""
        return ScheduleRun.from_json(self._t.json("GET", self._p(name, f"/runs/{b.seg(run_id)}")))


class Keys:
    """``client.keys``: API keys of the caller's workspace."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(self) -> List[APIKey]:
        return [APIKey.from_json(x) for x in self._t.json("GET", "/v1/keys").get("data", [])]

    def create(self, name: str = "") -> CreatedAPIKey:
        return CreatedAPIKey.from_json(self._t.json("POST", "/v1/keys", json={"name": name}))

    def revoke(self, key_id: str) -> None:
        self._t.request("DELETE", f"/v1/keys/{b.seg(key_id)}")


class PandaStack:
    """The synchronous PandaStack client.

    ``PandaStack()`` reads ``PANDASTACK_API_KEY`` (or ``PANDASTACK_TOKEN``) and
    ``PANDASTACK_BASE_URL`` (default ``http://localhost:8080``). ``timeout`` is the HTTP request
    timeout in seconds (default 60; creates, forks, snapshots and wakes get at least 600 s; an
    exec gets its command timeout + 30 s). ``max_retries`` bounds retries of 429/502/503/504
    answers and connection errors, with exponential backoff and jitter, honouring
    ``Retry-After``.
    """

    def __init__(
        self,
        token: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        self._cfg = b.resolve_config(token, api_key, base_url, timeout, max_retries)
        self._t = _Transport(self._cfg, http_client, headers)
        self.sandboxes = Sandboxes(self)
        self.sandbox = self.sandboxes
        self.snapshots = Snapshots(self)
        self.templates = Templates(self)
        self.volumes = Volumes(self)
        self.databases = Databases(self)
        self.apps = Apps(self)
        self.functions = Functions(self)
        self.schedules = Schedules(self)
        self.keys = Keys(self)

    @property
    def base_url(self) -> str:
        return self._cfg.base_url

    def health(self) -> bool:
        """``True`` if the server answers ``/v1/health``."""
        try:
            return self._t.request("GET", "/v1/health").status_code == 200
        except PandaStackError:
            return False

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "PandaStack":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PandaStack(base_url={self._cfg.base_url!r})"
