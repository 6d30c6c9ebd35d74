"""Scoped keys against a real server: a read-only key (``scopes=["*:read"]``) lists sandboxes,
but a create is refused with :class:`~pandastack.PermissionDeniedError` (403 ``forbidden``)
naming the scope it lacked, ``sandboxes:write``."""

from __future__ import annotations

import time
from typing import Dict

import pytest

from pandastack import PandaStack, PermissionDeniedError


def test_a_read_only_key_lists_but_cannot_create(
    client: PandaStack, server_env: Dict[str, str], template: str, tags: Dict[str, str]
) -> None:
    key = client.keys.create("pysdk-read-only", scopes=["*:read"])
    try:
        assert key.scopes == ["*:read"] and key.secret
        with PandaStack(api_key=key.secret, base_url=server_env["PANDASTACK_BASE_URL"], max_retries=0) as ro:
            assert isinstance(list(ro.sandboxes.list(metadata=tags)), list)
            with pytest.raises(PermissionDeniedError) as e:
                ro.sandboxes.create(template=template, metadata=tags, ttl_seconds=60)
            assert e.value.status == 403 and e.value.code == "forbidden"
            assert "sandboxes:write" in str(e.value)
        # The server records a key's use off the request's path: wait a little for it.
        for _ in range(50):
            listed = {k.id: k for k in client.keys.list()}
            if listed[key.id].last_used_at is not None:
                break
            time.sleep(0.1)
        assert listed[key.id].last_used_at is not None, "the key's use is recorded"
    finally:
        client.keys.revoke(key.id)
