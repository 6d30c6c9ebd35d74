"""Members and the audit log against a real server: the workspace key adds an admin member; the
admin's key adds a developer and a viewer, each with a key of their own
(``keys.create(..., member_id=...)``, which carries the member's id and role). The developer's
key lists sandboxes but is refused the audit log (:class:`~pandastack.PermissionDeniedError`
naming ``audit:read``); the viewer's key is refused adding a member; the admin's key finds the
developer's creation in the audit log (``create_member``, resource ``members/<id>``). A role
change reaches the member's keys; a removed member's key stops working (401). Nothing here
boots a VM."""

from __future__ import annotations

import time
from typing import Dict, Iterator, List, Tuple

import pytest

from conftest import RUN_ID
from pandastack import (
    AuthenticationError,
    CreatedAPIKey,
    Member,
    NotFoundError,
    PandaStack,
    PermissionDeniedError,
)


@pytest.fixture
def members(client: PandaStack) -> Iterator[List[str]]:
    """Ids of the members a test makes: removed when it ends (one already gone is fine)."""
    made: List[str] = []
    yield made
    for member_id in made:
        try:
            client.members.delete(member_id)
        except NotFoundError:
            pass


def _member_with_key(
    by: PandaStack, base_url: str, role: str, made: List[str]
) -> Tuple[Member, CreatedAPIKey, PandaStack]:
    email = f"pysdk-{role}-{RUN_ID}@example.org"
    m = by.members.create(f"pysdk {role}", email, role)  # type: ignore[arg-type]
    made.append(m.id)
    assert (m.email, m.role, m.active_keys) == (email, role, 0)
    key = by.keys.create(f"pysdk-{role}", member_id=m.id)
    assert (key.member_id, key.role) == (m.id, role) and key.secret
    return m, key, PandaStack(api_key=key.secret, base_url=base_url, max_retries=0)


def test_members_keys_do_what_their_roles_allow_and_the_audit_log_says_who(
    client: PandaStack, server_env: Dict[str, str], tags: Dict[str, str], members: List[str]
) -> None:
    url = server_env["PANDASTACK_BASE_URL"]
    admin_m, admin_k, admin = _member_with_key(client, url, "admin", members)
    dev_m, dev_k, dev = _member_with_key(admin, url, "developer", members)
    viewer_m, viewer_k, viewer = _member_with_key(admin, url, "viewer", members)
    try:
        assert client.members.get(dev_m.id).active_keys == 1
        mine = [m for m in client.members.list() if m.id in members]
        assert sorted(m.role for m in mine) == ["admin", "developer", "viewer"]
        assert {k.id: k for k in client.keys.list()}[dev_k.id].role == "developer"

        # A developer uses resources but may not read the audit log.
        assert isinstance(list(dev.sandboxes.list(metadata=tags)), list)
        with pytest.raises(PermissionDeniedError) as e:
            dev.audit.list().first_page()
        assert e.value.status == 403 and "audit:read" in str(e.value)
        # A viewer may not manage members.
        with pytest.raises(PermissionDeniedError):
            viewer.members.create("nope", f"pysdk-nope-{RUN_ID}@example.org", "viewer")

        # The admin's key reads the audit log; a call is recorded off its request's path.
        row = None
        for _ in range(50):
            rows = admin.audit.list(action="create_member", resource_id=dev_m.id).first_page().data
            row = next((r for r in rows if r.resource == f"members/{dev_m.id}"), None)
            if row is not None:
                break
            time.sleep(0.1)
        assert row is not None, "the developer's creation is in the audit log"
        assert (row.action, row.result, row.status, row.method) == ("create_member", "ok", 201, "POST")
        assert (row.key_id, row.member_id) == (admin_k.id, admin_m.id)
        assert row.at and row.request_id

        # A role change reaches the member's keys; removing a member revokes them.
        assert client.members.update(viewer_m.id, role="developer").role == "developer"
        assert {k.id: k for k in client.keys.list()}[viewer_k.id].role == "developer"
        client.members.delete(dev_m.id)
        with pytest.raises(AuthenticationError):
            dev.sandboxes.list().first_page()
        with pytest.raises(NotFoundError):
            client.members.get(dev_m.id)
    finally:
        for c in (admin, dev, viewer):
            c.close()
