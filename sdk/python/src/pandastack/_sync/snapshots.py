# Generated from _async/snapshots.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/snapshots.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.snapshots``: :class:`Snapshots`, the sandbox snapshots of the workspace."""

from __future__ import annotations

from typing import Optional

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, Snapshot
from .client import PandaStack
from .pagination import Paginator


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
