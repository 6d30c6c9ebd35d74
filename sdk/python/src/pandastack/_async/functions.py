"""``client.functions``: :class:`AsyncFunctions`, functions, their versions and calls."""

from __future__ import annotations

import datetime
import asyncio
from typing import Any, Mapping, Optional, Union

from .. import _base as b
from .. import _wire
from ..errors import NotFoundError
from ..types import Function, FunctionVersion, Invocation, Metrics, Page
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncFunctions:
    """``client.functions``: handlers in Python or Node.js, each version built with its
    dependencies in a VM, baked with the handler imported (a VM snapshot), and invoked over
    HTTP: a warm instance answers at once, a new one is restored from the baked snapshot::

        # main.py: def handler(event, context): return {"hi": event}
        await client.functions.create(
            "hello", "python", "main.handler",
            files={"main.py": source}, dependencies="requests",   # requirements.txt
        )
        v = await client.functions.wait_for_version("hello", 1)   # live, or failed (v.error)
        r = await client.functions.invoke("hello", {"name": "x"})
        print(r.status, r.result, r.cold)    # ok {'hi': {'name': 'x'}} True
        q = await client.functions.submit("hello", {"name": "y"})  # queued; retried on failure
        print((await client.functions.get_invocation("hello", q.id)).status)
        await client.functions.create_version("hello", files={"main.py": new_source}, wait=True)
        await client.functions.rollback("hello")                  # the version before is back

    A handler that raises (or runs past ``timeout_seconds``) is data: the
    :class:`~pandastack.Invocation`'s ``status`` is ``error`` (or ``timeout``) and ``error``
    holds its type, message and traceback. An unknown function raises
    :class:`~pandastack.NotFoundError`.
    """

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/functions/{b.seg(name)}{rest}"

    def _v(self, name: str, version: int, rest: str = "") -> str:
        return self._p(name, f"/versions/{b.version_number(version)}{rest}")

    async def create(
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
        return Function.from_json(await self._t.json("POST", "/v1/functions", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> AsyncPaginator[Function]:
        """Every function of the workspace (by name), fetched ``limit`` per page as you
        iterate.

        Async: not a coroutine: ``async for f in client.functions.list()``."""

        async def fetch(c: Optional[str]) -> Page[Function]:
            data = await self._t.json("GET", "/v1/functions", params=b.list_params(limit, c))
            return Page([Function.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get(self, name: str) -> Function:
        """One function; raises :class:`~pandastack.NotFoundError` if there is none."""
        return Function.from_json(await self._t.json("GET", self._p(name)))

    async def metrics(
        self,
        name: str,
        *,
        since: Optional[Union[datetime.datetime, datetime.timedelta, str]] = None,
        step: Optional[int] = None,
    ) -> Metrics:
        """The resource use of a function's instances over time: ``samples`` sum them (oldest
        first, ``step`` seconds apart), each listed in ``instances``.

        ``since``: how far back, a span (``"90s"``, ``"15m"``, ``"1h"``; a ``timedelta``) or a
        time (a ``datetime`` or an RFC 3339 string); default 10 minutes, at most 6 hours.
        ``step``: seconds per point (1 to 86400, default 5). Values the server refuses raise
        :class:`~pandastack.InvalidArgumentError`."""
        params = b.metrics_params(since, step)
        return Metrics.from_json(await self._t.json("GET", self._p(name, "/metrics"), params=params))

    async def update(
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
        return Function.from_json(await self._t.json("PATCH", self._p(name), json=body))

    async def delete(self, name: str) -> bool:
        """Deletes a function: its instances, its versions' snapshots and logs. Returns
        ``False`` if it did not exist."""
        try:
            await self._t.request(
                "DELETE", self._p(name), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    # ---- versions
    async def create_version(
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
        v = FunctionVersion.from_json(await self._t.json("POST", self._p(name, "/versions"), json=body))
        if not wait:
            return v
        return await self.wait_for_version(name, v.version, timeout=timeout)

    def versions(
        self, name: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> AsyncPaginator[FunctionVersion]:
        """The function's versions, newest first, fetched ``limit`` per page as you iterate.

        Async: not a coroutine: ``async for v in client.functions.versions(name)``."""
        path = self._p(name, "/versions")

        async def fetch(c: Optional[str]) -> Page[FunctionVersion]:
            data = await self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([FunctionVersion.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get_version(self, name: str, version: int) -> FunctionVersion:
        """One version of the function, as it is now (:class:`~pandastack.NotFoundError` if
        there is no such version)."""
        return FunctionVersion.from_json(await self._t.json("GET", self._v(name, version)))

    async def wait_for_version(
        self, name: str, version: int, timeout: Optional[float] = None
    ) -> FunctionVersion:
        """Polls a version until its build has ended and returns it: ``live``, ``failed``
        (``error`` says why; :meth:`version_logs` says more) or ``standby``. One still being
        built after ``timeout`` seconds (default 1800) raises
        :class:`~pandastack.FunctionVersionTimeoutError` (``.version``; the build goes on)."""
        w = b.BackupWait(timeout, b.DEFAULT_VERSION_TIMEOUT, b.DEPLOY_POLL_INTERVAL)
        while True:
            v = await self.get_version(name, version)
            if not v.active:
                return v
            if w.expired():
                raise b.version_timeout(name, v, w.timeout)
            await asyncio.sleep(w.pause())

    async def version_logs(self, name: str, version: int) -> str:
        """A version's build log: fetch, install, the runtime's import of the handler, bake."""
        resp = await self._t.request("GET", self._v(name, version, "/logs"), headers={"Accept": "text/plain"})
        return resp.text

    async def rollback(self, name: str, version: Optional[int] = None) -> FunctionVersion:
        """Makes an earlier version live again (default: the one before the live one); nothing
        is rebuilt, its baked snapshot serves the next call. Returns that version, now
        ``live``. With no version to go back to raises :class:`~pandastack.ConflictError`."""
        body: _wire.FunctionRollbackRequest = {}
        if version is not None:
            body["version"] = b.version_number(version)
        return FunctionVersion.from_json(await self._t.json("POST", self._p(name, "/rollback"), json=body))

    # ---- calls
    async def invoke(self, name: str, event: Any = None, *, timeout: Optional[float] = None) -> Invocation:
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
            await self._t.json(
                "POST",
                self._p(name, "/invoke"),
                json=event,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.INVOKE_TIMEOUT)),
            )
        )

    async def submit(self, name: str, event: Any = None, *, retries: Optional[int] = None) -> Invocation:
        """Queues a call of the function with ``event`` and returns at once: the
        :class:`~pandastack.Invocation` ``queued``, with its ``id``. The call runs on the
        function's host even across a restart of the server, and is tried again up to
        ``retries`` times (server default 2, at most 10) when it ends in ``error`` or
        ``timeout``; :meth:`get_invocation` fetches its outcome (``attempts`` counts the tries)."""
        params = {"async": "1"}
        if retries is not None:
            params["retries"] = str(int(retries))
        return Invocation.from_json(
            await self._t.json("POST", self._p(name, "/invoke"), params=params, json=event)
        )

    async def get_invocation(self, name: str, invocation_id: str) -> Invocation:
        """A queued call (:meth:`submit`): ``queued`` or ``running`` until it ends, then its
        outcome, like :meth:`invoke`'s."""
        return Invocation.from_json(
            await self._t.json("GET", self._p(name, f"/invocations/{b.seg(invocation_id)}"))
        )
