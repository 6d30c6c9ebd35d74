"""``client.snapshots``: :class:`AsyncSnapshots`, the sandbox snapshots of the workspace."""

from __future__ import annotations

from typing import Optional

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, Snapshot
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncSnapshots:
    """``client.snapshots``."""

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> AsyncPaginator[Snapshot]:
        async def fetch(c: Optional[str]) -> Page[Snapshot]:
            data = await self._t.json("GET", "/v1/snapshots", params=b.list_params(limit, c))
            return Page([Snapshot.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def delete(self, snapshot_id: str) -> bool:
        """Deletes a snapshot. Returns ``False`` if it did not exist."""
        try:
            await self._t.request("DELETE", f"/v1/snapshots/{b.seg(snapshot_id)}")
            return True
        except NotFoundError:
            return False
