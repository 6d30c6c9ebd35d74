# Generated from _async/sandbox.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/sandbox.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""One sandbox: :class:`Sandbox` (state, exec, code interpreter, lifecycle, forks)."""

from __future__ import annotations

import datetime
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

import httpx

from .. import _base as b
from .. import _wire
from .. import _ws
from ..errors import APIError, CommandTimeoutError, RequestTimeoutError
from ..types import (
    CodeContext,
    ExecResult,
    Execution,
    Metrics,
    PortUrl,
    SandboxInfo,
    Snapshot,
    StderrEvent,
    StdoutEvent,
    VolumeMount,
)
from .client import PandaStack
from .follow import ErrorCallback, OutputCallback, ResultCallback, _call


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
        #: Git in the sandbox: clone, status, add, commit, push, pull, branches (see
        #: :class:`Git`).
        self.git = Git(self)

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

    def metrics(
        self,
        *,
        since: Optional[Union[datetime.datetime, datetime.timedelta, str]] = None,
        step: Optional[int] = None,
    ) -> Metrics:
        """The sandbox's resource use over time, and its host-side figures now.

        ``since``: how far back, a span (``"90s"``, ``"15m"``, ``"1h"``; a ``timedelta``) or a
        time (a ``datetime`` or an RFC 3339 string); default 10 minutes, at most 6 hours.
        ``step``: seconds per point (1 to 86400, default 5; the server reads every VM every 5
        s). ``metrics().samples`` are :class:`~pandastack.MetricPoint` s, oldest first; ``state``,
        ``host_rss_bytes``, ``host_pss_bytes`` and ``cpu_time_ms`` are the VM's now. Values
        the server refuses raise :class:`~pandastack.InvalidArgumentError`."""
        params = b.metrics_params(since, step)
        return Metrics.from_json(self._t.json("GET", f"{self._p}/metrics", params=params))

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
        body: _wire.PortUpdate = {"public": bool(public)}
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
            stream = ExecStream(self, dict(body), b.exec_stream_timeout(request_timeout))
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
        return ExecStream(self, dict(body), b.exec_stream_timeout(request_timeout))

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
        return Process(ws, dict(body))

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
        language: Optional[str] = None,
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

        The code runs in a long-lived kernel, so variables, imports and open files stay for
        the next call in the same context. ``language`` is ``"python"`` (the default),
        ``"javascript"``, ``"typescript"`` or ``"bash"`` (every language needs ``python3`` in
        the template; JavaScript and TypeScript Node.js 20.12+ with Debian's ``node-acorn``
        and ``node-typescript``, as the ``app`` and ``code-interpreter`` templates have).
        JavaScript and TypeScript allow top-level ``await`` and ``import`` and return the
        final expression's value; Bash keeps its working directory, variables and functions,
        and a failing last command is an ``ExitStatus`` error.
        ``context`` is a :class:`~pandastack.CodeContext` from :meth:`create_code_context` (or
        its id), whose language is used; without it the language's default context is used
        (``default`` for Python, ``default-javascript`` and so on). ``env`` applies when
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
        (``language``: ``"python"``, ``"javascript"``, ``"typescript"`` or ``"bash"``;
        ``env`` is its environment). Pass it as ``context=`` to :meth:`run_code`; delete it
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

    def migrate(self, host: Optional[str] = None) -> "Sandbox":
        """Moves the sandbox to another host of a cluster (``host``, or the one placement
        chooses) with its memory, processes and files; it comes back running if it was running,
        else hibernated. Raises :class:`~pandastack.ConflictError` on a single-host server."""
        body: _wire.MigrateRequest = {}
        if host is not None:
            body["host"] = host
        self._set(
            self._t.json("POST", f"{self._p}/migrate", json=body, timeout=self._long())
        )
        return self

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
        body: _wire.PatchSandboxRequest = {}
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if idle_timeout_seconds is not None:
            body["idle_timeout_seconds"] = idle_timeout_seconds
        if metadata is not None:
            body["metadata"] = dict(metadata)
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
        spread: bool = False,
    ) -> "Sandbox": ...

    @overload
    def fork(
        self,
        count: int,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        keep_snapshot: bool = False,
        spread: bool = False,
    ) -> List["Sandbox"]: ...

    def fork(
        self,
        count: Optional[int] = None,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        keep_snapshot: bool = False,
        spread: bool = False,
    ) -> Union["Sandbox", List["Sandbox"]]:
        """Clones the running sandbox (memory, processes and disk) into new sandboxes.

        ``sandbox.fork()`` returns one :class:`Sandbox`; ``sandbox.fork(count=n)`` always
        returns a list of ``n`` sandboxes (also for ``n == 1``). Children share the parent's
        metadata unless ``metadata`` is given. The snapshot taken for the fork is
        ``child.snapshot_id``: the server deletes it with the last sandbox restored from it
        (the last child killed), unless ``keep_snapshot=True`` keeps it until
        ``client.snapshots.delete(id)``. In a cluster, ``spread=True`` puts the children on
        other hosts than the parent's (``child.host`` says where each went).
        """
        n = 1 if count is None else int(count)
        body: _wire.ForkRequest = {"count": n}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if keep_snapshot:
            body["keep_snapshot"] = True
        if spread:
            body["spread"] = True
        data = self._t.json("POST", f"{self._p}/fork", json=body, timeout=self._long())
        children = [
            Sandbox(self._client, SandboxInfo.from_json(c)) for c in data.get("children", [])
        ]
        if count is None:
            return children[0]
        return children


# These modules import this one (for their ``sandbox`` argument's type), so they come after
# Sandbox is defined.
from .exec import ExecStream, Process, Pty  # noqa: E402
from .filesystem import Filesystem  # noqa: E402
from .git import Git  # noqa: E402
