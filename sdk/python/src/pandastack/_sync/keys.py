# Generated from _async/keys.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/keys.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.keys``: :class:`Keys`, the API keys of the caller's workspace."""

from __future__ import annotations

import datetime as _dt
from typing import List, Optional, Sequence, Union

from .. import _base as b
from .. import _wire
from ..errors import InvalidArgumentError
from ..types import APIKey, CreatedAPIKey
from .client import PandaStack


class Keys:
    """``client.keys``: API keys of the caller's workspace."""

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def list(self) -> List[APIKey]:
        return [APIKey.from_json(x) for x in self._t.json("GET", "/v1/keys").get("data", [])]

    def create(
        self,
        name: str = "",
        *,
        scopes: Optional[Sequence[str]] = None,
        expires_at: Union[str, _dt.datetime, None] = None,
        member_id: Optional[str] = None,
    ) -> CreatedAPIKey:
        """A new key of the workspace; its ``secret`` is in this answer only. ``scopes``
        (default: the calling key's) must be covered by the calling key's own, e.g.
        ``["*:read"]`` for a read-only key or ``["sandboxes:*"]``; ``expires_at`` (an RFC 3339
        string or an aware ``datetime``) may not be after the calling key's own expiry.
        ``member_id`` makes it a key of that member (``client.members``): it can do no more
        than the member's role allows; only an owner or admin names another member (default:
        the calling key's member, if any)."""
        body: _wire.CreateKeyRequest = {"name": name}
        if scopes is not None:
            if isinstance(scopes, str):
                raise TypeError("scopes: a list of scope strings, not one string")
            body["scopes"] = list(scopes)
        if expires_at is not None:
            if isinstance(expires_at, _dt.datetime):
                if expires_at.tzinfo is None:
                    raise ValueError("expires_at: an aware datetime (with a time zone)")
                expires_at = expires_at.isoformat()
            body["expires_at"] = expires_at
        if member_id is not None:
            if not isinstance(member_id, str) or not member_id:
                raise InvalidArgumentError(f"member_id: a member id, got {member_id!r}", code="invalid_argument")
            body["member_id"] = member_id
        return CreatedAPIKey.from_json(self._t.json("POST", "/v1/keys", json=body))

    def revoke(self, key_id: str) -> None:
        self._t.request("DELETE", f"/v1/keys/{b.seg(key_id)}")
