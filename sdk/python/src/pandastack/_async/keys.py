"""``client.keys``: :class:`AsyncKeys`, the API keys of the caller's workspace."""

from __future__ import annotations

from typing import List

from .. import _base as b
from .. import _wire
from ..types import APIKey, CreatedAPIKey
from .client import AsyncPandaStack


class AsyncKeys:
    """``client.keys``: API keys of the caller's workspace."""

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    async def list(self) -> List[APIKey]:
        return [APIKey.from_json(x) for x in (await self._t.json("GET", "/v1/keys")).get("data", [])]

    async def create(self, name: str = "") -> CreatedAPIKey:
        body: _wire.CreateKeyRequest = {"name": name}
        return CreatedAPIKey.from_json(await self._t.json("POST", "/v1/keys", json=body))

    async def revoke(self, key_id: str) -> None:
        await self._t.request("DELETE", f"/v1/keys/{b.seg(key_id)}")
