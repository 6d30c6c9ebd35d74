"""``client.sandboxes``: :class:`AsyncSandboxes` creates, finds, lists and kills sandboxes."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, Mapping, Optional, Sequence

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, SandboxInfo
from .client import AsyncPandaStack
from .pagination import AsyncPaginator
from .sandbox import AsyncSandbox


# unasync: async-only
class _CreateCall:
    """What ``AsyncSandboxes.create`` returns: ``await`` it for the sandbox, or use it directly
    as ``async with client.sandboxes.create(...) as sandbox:`` (killed on exit)."""

    def __init__(self, coro_fn: Callable[[], Awaitable[AsyncSandbox]]) -> None:
        self._coro_fn = coro_fn
        self._sandbox: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._coro_fn().__await__()

    async def __aenter__(self) -> AsyncSandbox:
        self._sandbox = await self._coro_fn()
        return self._sandbox

    async def __aexit__(self, *exc: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.kill()


# unasync: end
class AsyncSandboxes:
    """``client.sandboxes`` (alias ``client.sandbox``)."""

    def __init__(self, client: "AsyncPandaStack") -> None:
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
        on_host_loss: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> _CreateCall:  # unasync: sync: ) -> Sandbox:
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

        ``on_host_loss`` says what becomes of it if its host is lost (a cluster's host
        declared dead): ``"lost"`` (default: it waits, ``lost``, for its host) or
        ``"restore"`` (it runs again on another host, same id and preview URL, from its newest
        durable snapshot, else from its template). Not with ``volumes``.

        Async: not a coroutine: ``await`` the result, or use it directly as ``async with
        client.sandboxes.create(...) as sandbox:`` (killed on exit).
        """
        body = b.create_body(
            template, snapshot_id, ttl_seconds, idle_timeout_seconds, on_timeout, metadata, env,
            volumes, disk_mbps, disk_iops, on_host_loss,
        )
        key = idempotency_key or b.new_idempotency_key()

        async def run() -> AsyncSandbox:
            data = await self._t.json(
                "POST",
                "/v1/sandboxes",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(
                    request_timeout, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)
                ),
            )
            return AsyncSandbox(self._client, SandboxInfo.from_json(data))

        return _CreateCall(run)  # unasync: sync: return run()

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox (its state is not changed)."""
        data = await self._t.json("GET", f"/v1/sandboxes/{b.seg(sandbox_id)}")
        return AsyncSandbox(self._client, SandboxInfo.from_json(data))

    async def connect(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox, woken if hibernated and resumed if paused."""
        sb = await self.get(sandbox_id)
        if sb.state == "hibernated":
            await sb.wake()
        elif sb.state == "paused":
            await sb.resume()
        return sb

    def list(
        self,
        *,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> AsyncPaginator[AsyncSandbox]:
        """All sandboxes matching the filters, newest last, fetched ``limit`` per page
        (server default 100) as you iterate. ``metadata`` matches exact key/value pairs.

        Async: not a coroutine: ``async for sandbox in client.sandboxes.list(...)``."""

        async def fetch(c: Optional[str]) -> Page[AsyncSandbox]:
            data = await self._t.json(
                "GET", "/v1/sandboxes", params=b.list_params(limit, c, state, metadata)
            )
            return Page(
                [AsyncSandbox(self._client, SandboxInfo.from_json(x)) for x in data.get("data", [])],
                data.get("next_cursor"),
            )

        return AsyncPaginator(fetch, cursor)

    async def kill(self, sandbox_id: str) -> bool:
        """Destroys a sandbox by id. Returns ``False`` if it did not exist."""
        try:
            await self._t.request(
                "DELETE",
                f"/v1/sandboxes/{b.seg(sandbox_id)}",
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
            return True
        except NotFoundError:
            return False
