"""The client: :class:`AsyncPandaStack`, one attribute per resource (``client.sandboxes``,
``client.volumes``, ...)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Optional, Sequence, Union

import httpx

from .. import _base as b
from .. import _wire
from ..errors import PandaStackError
from .transport import _AsyncTransport


class AsyncPandaStack:
    """The asynchronous PandaStack client.

    ``AsyncPandaStack()`` reads ``PANDASTACK_API_KEY`` (or ``PANDASTACK_TOKEN``) and
    ``PANDASTACK_BASE_URL`` (default ``http://localhost:8080``). ``timeout`` is the HTTP request
    timeout in seconds (default 60; creates, forks, snapshots and wakes get at least 600 s; an
    exec gets its command timeout + 30 s). ``max_retries`` bounds retries of 429/502/503/504
    answers and connection errors, with exponential backoff and jitter, honouring
    ``Retry-After``.

    Async: use ``async with AsyncPandaStack() as client:`` or ``await client.close()``.
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
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._cfg = b.resolve_config(token, api_key, base_url, timeout, max_retries)
        self._t = _AsyncTransport(self._cfg, http_client, headers)
        self.sandboxes = AsyncSandboxes(self)
        self.sandbox = self.sandboxes
        self.snapshots = AsyncSnapshots(self)
        self.templates = AsyncTemplates(self)
        self.volumes = AsyncVolumes(self)
        self.databases = AsyncDatabases(self)
        self.apps = AsyncApps(self)
        self.functions = AsyncFunctions(self)
        self.schedules = AsyncSchedules(self)
        self.keys = AsyncKeys(self)
        self.events = AsyncEvents(self)
        self.webhooks = AsyncWebhooks(self)
        self.hosts = AsyncHosts(self)
        self.members = AsyncMembers(self)
        self.audit = AsyncAudit(self)

    @property
    def base_url(self) -> str:
        return self._cfg.base_url

    async def health(self) -> bool:
        """``True`` if the server answers ``/v1/health``."""
        try:
            return (await self._t.request("GET", "/v1/health")).status_code == 200
        except PandaStackError:
            return False

    async def usage(
        self,
        *,
        from_: Union[str, _dt.datetime, None] = None,
        to: Union[str, _dt.datetime, None] = None,
        group_by: Union[str, Sequence[str], None] = None,
    ) -> "_wire.Usage":
        """The workspace's usage against its limits and, in ``["metered"]``, what it used over
        ``[from_, to)`` (default: this calendar month, UTC, to now): vCPU-seconds, GiB-seconds
        of memory, storage GiB-hours, egress bytes, function invocations, database seconds.
        ``from_`` and ``to`` are RFC 3339 strings or aware ``datetime``; ``group_by`` is
        ``"none"`` or some of ``"kind"``, ``"resource"``, ``"day"``/``"hour"`` (a list or a
        comma string)."""
        return await self._t.json("GET", "/v1/usage", params=b.usage_params(from_, to, group_by))

    async def usage_csv(
        self,
        *,
        from_: Union[str, _dt.datetime, None] = None,
        to: Union[str, _dt.datetime, None] = None,
        group_by: Union[str, Sequence[str], None] = None,
    ) -> str:
        """The metered part of :meth:`usage` as CSV text (a header row, then a row per group)."""
        params = b.usage_params(from_, to, group_by)
        params["format"] = "csv"
        return (await self._t.request("GET", "/v1/usage", params=params)).text

    async def close(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> "AsyncPandaStack":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncPandaStack(base_url={self._cfg.base_url!r})"


# The resources import this module (for their ``client`` argument's type), so they come after
# AsyncPandaStack is defined.
from .apps import AsyncApps  # noqa: E402
from .audit import AsyncAudit  # noqa: E402
from .databases import AsyncDatabases  # noqa: E402
from .events import AsyncEvents  # noqa: E402
from .functions import AsyncFunctions  # noqa: E402
from .hosts import AsyncHosts  # noqa: E402
from .keys import AsyncKeys  # noqa: E402
from .members import AsyncMembers  # noqa: E402
from .sandboxes import AsyncSandboxes  # noqa: E402
from .schedules import AsyncSchedules  # noqa: E402
from .snapshots import AsyncSnapshots  # noqa: E402
from .templates import AsyncTemplates  # noqa: E402
from .volumes import AsyncVolumes  # noqa: E402
from .webhooks import AsyncWebhooks  # noqa: E402
