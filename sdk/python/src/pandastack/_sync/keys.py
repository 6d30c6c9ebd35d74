# Generated from _async/keys.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/keys.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.keys``: :class:`Keys`, the API keys of the caller's workspace."""

from __future__ import annotations

from typing import List

from .. import _base as b
from .. import _wire
from ..types import APIKey, CreatedAPIKey
from .client import PandaStack


class Keys:
    """``client.keys``: API keys of the caller's workspace."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(self) -> List[APIKey]:
        return [APIKey.from_json(x) for x in self._t.json("GET", "/v1/keys").get("data", [])]

    def create(self, name: str = "") -> CreatedAPIKey:
        body: _wire.CreateKeyRequest = {"name": name}
        return CreatedAPIKey.from_json(self._t.json("POST", "/v1/keys", json=body))

    def revoke(self, key_id: str) -> None:
        self._t.request("DELETE", f"/v1/keys/{b.seg(key_id)}")
