# Generated from _async/members.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/members.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.members``: :class:`Members`, the members of the caller's workspace and their
roles."""

from __future__ import annotations

from typing import List, Optional

from .. import _base as b
from ..types import Member, Role
from .client import PandaStack


class Members:
    """``client.members``: the workspace's members. A member's keys
    (``client.keys.create(..., member_id=...)``) can do no more than the member's role allows,
    whatever their scopes say::

        dev = client.members.create("Ada", "ada@example.org", "developer")
        key = client.keys.create("ada laptop", member_id=dev.id)
        client.members.update(dev.id, role="viewer")   # every key of hers, at once
        client.members.delete(dev.id)                  # her keys are revoked

    Only owners and admins manage members (a developer's or viewer's key raises
    :class:`~pandastack.PermissionDeniedError`, naming the scope ``members:write``), and only
    an owner touches an owner. An email already taken, or removing or demoting the last owner,
    raises :class:`~pandastack.ConflictError`; an unknown member
    :class:`~pandastack.NotFoundError`; a bad argument
    :class:`~pandastack.InvalidArgumentError` before any request.
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, member_id: str) -> str:
        return f"/v1/members/{b.seg(member_id)}"

    def list(self) -> List[Member]:
        """The workspace's members, oldest first."""
        return [Member.from_json(x) for x in self._t.json("GET", "/v1/members").get("data", [])]

    def create(self, name: str, email: str, role: Role) -> Member:
        """Adds a member: ``name`` a display name (1-64 bytes), ``email`` unique in the
        workspace, ``role`` one of ``owner``, ``admin``, ``developer``, ``viewer``. Give them a
        key with ``client.keys.create(..., member_id=member.id)``."""
        body = b.member_body(name, email, role)
        return Member.from_json(self._t.json("POST", "/v1/members", json=body))

    def get(self, member_id: str) -> Member:
        """One member."""
        return Member.from_json(self._t.json("GET", self._p(member_id)))

    def update(self, member_id: str, name: Optional[str] = None, role: Optional[Role] = None) -> Member:
        """Renames a member or changes their role (what is given changes, the rest stays): what
        every key of theirs may do changes at once. The last owner keeps the owner role
        (:class:`~pandastack.ConflictError`)."""
        path = self._p(member_id)
        body = b.member_update_body(name, role)
        return Member.from_json(self._t.json("PATCH", path, json=body))

    def delete(self, member_id: str) -> None:
        """Removes a member: their keys are revoked at once. The last owner stays
        (:class:`~pandastack.ConflictError`)."""
        self._t.request("DELETE", self._p(member_id))
