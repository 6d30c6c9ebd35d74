"""``client.audit``: :class:`AsyncAudit`, the audit log of the caller's workspace."""

from __future__ import annotations

import datetime as _dt
from typing import Optional, Union

from .. import _base as b
from ..types import AuditEntry, Page
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncAudit:
    """``client.audit``: the workspace's audit log, newest first: every state-changing call with
    who made it (key and member), the operation, the resource, the result and the caller's
    address, refused calls too (reads are not recorded)::

        async for row in client.audit.list(action="create_member", since=yesterday):
            print(row.at, row.key_name, row.action, row.resource, row.result)
        page = await client.audit.list(limit=50).first_page()   # page.data, page.next_cursor

    Reading it needs the scope ``audit:read`` (owners' and admins' keys, and workspace keys
    with ``*``); another key raises :class:`~pandastack.PermissionDeniedError` naming it. Rows
    are kept for the server's retention (90 days unless its operator says otherwise). A call is
    recorded off its request's path: its row may show up a moment after the call returned."""

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def list(
        self,
        *,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        key_id: Optional[str] = None,
        resource_id: Optional[str] = None,
        action: Optional[str] = None,
        since: Union[str, _dt.datetime, None] = None,
    ) -> AsyncPaginator[AuditEntry]:
        """The audit rows, newest first, ``limit`` (1-1000, default 100) per page as you
        iterate; ``first_page()`` for one page with its ``next_cursor``. Filters: ``key_id``
        (calls made with that key), ``resource_id`` (calls on the resource with that id or
        name), ``action`` (one operation, as the OpenAPI document names it:
        ``create_sandbox``), ``since`` (calls at or after a time: a ``datetime``, a naive one
        taken as UTC, or an RFC 3339 string).

        Async: not a coroutine: ``async for row in client.audit.list()``."""
        # A bad `since` raises here, not when the iteration starts.
        since_wire = None if since is None else b.rfc3339("since", since)

        async def fetch(c: Optional[str]) -> Page[AuditEntry]:
            params = b.audit_params(limit, c, key_id, resource_id, action, since_wire)
            data = await self._t.json("GET", "/v1/audit", params=params)
            return Page([AuditEntry.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)
