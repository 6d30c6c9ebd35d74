# Generated from _async/client.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/client.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""The client: :class:`PandaStack`, one attribute per resource (``client.sandboxes``,
``client.volumes``, ...)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Optional, Sequence, Union

import httpx

from .. import _base as b
from .. import _wire
from ..errors import PandaStackError
from .transport import _Transport


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
        self.events = Events(self)
        self.webhooks = Webhooks(self)
        self.hosts = Hosts(self)
        self.members = Members(self)
        self.audit = Audit(self)

    @property
    def base_url(self) -> str:
        return self._cfg.base_url

    def health(self) -> bool:
        """``True`` if the server answers ``/v1/health``."""
        try:
            return self._t.request("GET", "/v1/health").status_code == 200
        except PandaStackError:
            return False

    def usage(
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
        return self._t.json("GET", "/v1/usage", params=b.usage_params(from_, to, group_by))

    def usage_csv(
        self,
        *,
        from_: Union[str, _dt.datetime, None] = None,
        to: Union[str, _dt.datetime, None] = None,
        group_by: Union[str, Sequence[str], None] = None,
    ) -> str:
        """The metered part of :meth:`usage` as CSV text (a header row, then a row per group)."""
        params = b.usage_params(from_, to, group_by)
        params["format"] = "csv"
        return self._t.request("GET", "/v1/usage", params=params).text

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "PandaStack":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PandaStack(base_url={self._cfg.base_url!r})"


# The resources import this module (for their ``client`` argument's type), so they come after
# PandaStack is defined.
from .apps import Apps  # noqa: E402
from .audit import Audit  # noqa: E402
from .databases import Databases  # noqa: E402
from .events import Events  # noqa: E402
from .functions import Functions  # noqa: E402
from .hosts import Hosts  # noqa: E402
from .keys import Keys  # noqa: E402
from .members import Members  # noqa: E402
from .sandboxes import Sandboxes  # noqa: E402
from .schedules import Schedules  # noqa: E402
from .snapshots import Snapshots  # noqa: E402
from .templates import Templates  # noqa: E402
from .volumes import Volumes  # noqa: E402
from .webhooks import Webhooks  # noqa: E402
