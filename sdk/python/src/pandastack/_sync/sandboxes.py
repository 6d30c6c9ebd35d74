# Generated from _async/sandboxes.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/sandboxes.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.sandboxes``: :class:`Sandboxes` creates, finds, lists and kills sandboxes."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, SandboxInfo
from .client import PandaStack
from .pagination import Paginator
from .sandbox import Sandbox


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
        on_host_loss: Optional[str] = None,
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

        ``on_host_loss`` says what becomes of it if its host is lost (a cluster's host
        declared dead): ``"lost"`` (default: it waits, ``lost``, for its host) or
        ``"restore"`` (it runs again on another host, same id and preview URL, from its newest
        durable snapshot, else from its template). Not with ``volumes``.
        """
        body = b.create_body(
            template, snapshot_id, ttl_seconds, idle_timeout_seconds, on_timeout, metadata, env,
            volumes, disk_mbps, disk_iops, on_host_loss,
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
