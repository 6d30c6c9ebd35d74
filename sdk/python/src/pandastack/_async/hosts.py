"""``client.hosts``: :class:`AsyncHosts`, the hosts of the platform (the operator routes, admin
keys only)."""

from __future__ import annotations

from typing import List

from .. import _base as b
from ..errors import NotFoundError
from ..types import Host
from .client import AsyncPandaStack


class AsyncHosts:
    """``client.hosts``: every host of the platform, its drain and undrain, and forgetting a
    dead one::

        for h in await client.hosts.list():
            print(h.id, h.state, h.sandboxes, h.capacity.free_slots)
        await client.hosts.drain("host-1")     # keeps what it runs, takes nothing new
        await client.hosts.undrain("host-1")

    These are the operator routes: they take an admin key (``pandastack keys create --admin``
    on the server; the API does not make one). A workspace's key raises
    :class:`~pandastack.PermissionDeniedError`; an unknown host
    :class:`~pandastack.NotFoundError`; a call the host's state forbids (draining a dead host,
    forgetting one that is not dead) :class:`~pandastack.ConflictError` with the server's
    reason.
    """

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def _p(self, host_id: str, rest: str = "") -> str:
        return f"/v1/hosts/{b.seg(host_id)}{rest}"

    async def list(self) -> List[Host]:
        """Every host, by id, with the sandboxes (of every workspace) on each."""
        return [Host.from_json(x) for x in (await self._t.json("GET", "/v1/hosts")).get("data", [])]

    async def get(self, host_id: str) -> Host:
        """One host."""
        return Host.from_json(await self._t.json("GET", self._p(host_id)))

    async def drain(self, host_id: str) -> Host:
        """Drains a host: it keeps what it runs and takes nothing new (a restart of its agent
        does not undo it). Returns the host, ``draining``; a dead host raises
        :class:`~pandastack.ConflictError`."""
        return Host.from_json(await self._t.json("POST", self._p(host_id, "/drain")))

    async def undrain(self, host_id: str) -> Host:
        """Undrains a host: it takes work again. Returns the host, ``ready``; a dead host
        raises :class:`~pandastack.ConflictError` (only its agent joining again makes it
        ready)."""
        return Host.from_json(await self._t.json("POST", self._p(host_id, "/undrain")))

    async def forget(self, host_id: str) -> bool:
        """Forgets a dead host: its row goes (its agent joining again later makes it a host
        anew). Returns ``False`` if there was no such host; a host that is not dead, or on
        which a sandbox, snapshot, volume or database still lives, raises
        :class:`~pandastack.ConflictError` with the reason."""
        try:
            await self._t.request("DELETE", self._p(host_id))
            return True
        except NotFoundError:
            return False
