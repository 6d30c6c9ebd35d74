# Generated from _async/volumes.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/volumes.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""``client.volumes``: :class:`Volumes`, durable volumes, their snapshots and backups."""

from __future__ import annotations

import time
from typing import Optional

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, Volume, VolumeBackup, VolumeSnapshot
from .client import PandaStack
from .pagination import Paginator


class Volumes:
    """``client.volumes``: durable volumes that outlive sandboxes, their snapshots and their
    backups to the object store.

    A volume is mounted by naming it in ``volumes=`` of
    :meth:`~pandastack.PandaStack.sandboxes.create`; what a sandbox writes there stays when the
    sandbox is gone, for the next sandbox that mounts it::

        client.volumes.create("ws", size_gb=10)
        sb = client.sandboxes.create(volumes=[{"name": "ws", "path": "/workspace"}])
    """

    def __init__(self, client: "PandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/volumes/{b.seg(name)}{rest}"

    def create(
        self,
        name: str,
        *,
        size_gb: Optional[int] = None,
        from_snapshot: Optional[str] = None,
        from_backup: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Volume:
        """Creates a volume: empty (``size_gb`` GiB, required), or restored from a volume
        snapshot (``from_snapshot``) or a backup (``from_backup``, on any host), grown to
        ``size_gb`` when that is given and larger. ``name`` is 1-63 of ``[a-z0-9-]``.

        A name in use raises :class:`~pandastack.ConflictError`; a bad name or size
        :class:`~pandastack.InvalidArgumentError`; the workspace's quota
        :class:`~pandastack.QuotaExceededError`."""
        body = b.volume_body(name, size_gb, from_snapshot, from_backup)
        key = idempotency_key or b.new_idempotency_key()
        return Volume.from_json(
            self._t.json(
                "POST",
                "/v1/volumes",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Paginator[Volume]:
        """Every volume of the workspace, fetched ``limit`` per page as you iterate."""

        def fetch(c: Optional[str]) -> Page[Volume]:
            data = self._t.json("GET", "/v1/volumes", params=b.list_params(limit, c))
            return Page([Volume.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return Paginator(fetch, cursor)

    def get(self, name: str) -> Volume:
        """One volume; raises :class:`~pandastack.VolumeNotFoundError` if there is none."""
        return Volume.from_json(self._t.json("GET", self._p(name)))

    def grow(self, name: str, size_gb: int) -> Volume:
        """Grows a volume to ``size_gb`` GiB (never shrinks). While a sandbox has it mounted
        this raises :class:`~pandastack.VolumeBusyError`."""
        return Volume.from_json(
            self._t.json(
                "PATCH",
                self._p(name),
                json={"size_gb": int(size_gb)},
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0)),
            )
        )

    def delete(self, name: str) -> bool:
        """Deletes a volume (its backups stay in the object store). Returns ``False`` if it
        did not exist; raises :class:`~pandastack.VolumeBusyError` while a sandbox has it
        mounted read-write."""
        try:
            self._t.request(
                "DELETE", self._p(name), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    # ---- snapshots
    def snapshot(self, name: str) -> VolumeSnapshot:
        """Snapshots a volume (a sandbox writing to it has its file system frozen for the
        instant of the copy). Restore it with ``create(new_name, from_snapshot=snap.id)``."""
        return VolumeSnapshot.from_json(
            self._t.json(
                "POST",
                self._p(name, "/snapshots"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    def snapshots(self, name: str) -> Paginator[VolumeSnapshot]:
        """The volume's snapshots."""
        path = self._p(name, "/snapshots")

        def fetch(c: Optional[str]) -> Page[VolumeSnapshot]:
            data = self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeSnapshot.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return Paginator(fetch)

    def delete_snapshot(self, name: str, snapshot_id: str) -> bool:
        """Deletes a volume snapshot. Returns ``False`` if it did not exist."""
        try:
            self._t.request("DELETE", self._p(name, f"/snapshots/{b.seg(snapshot_id)}"))
            return True
        except NotFoundError:
            return False

    # ---- backups
    def backup(
        self, name: str, *, wait: bool = False, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Backs a volume up to the object store: a snapshot is taken at once and uploaded in
        the background (only chunks no earlier backup stored). Returns the backup
        ``uploading``; with ``wait=True``, once it is ``done`` (see :meth:`wait_backup`)."""
        backup = VolumeBackup.from_json(
            self._t.json(
                "POST",
                self._p(name, "/backups"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return backup
        return self.wait_backup(name, backup.id, timeout=timeout)

    def backups(self, name: str) -> Paginator[VolumeBackup]:
        """The volume's backups, also after the volume was deleted (they live in the object
        store)."""
        path = self._p(name, "/backups")

        def fetch(c: Optional[str]) -> Page[VolumeBackup]:
            data = self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeBackup.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return Paginator(fetch)

    def get_backup(self, name: str, backup_id: str) -> VolumeBackup:
        """One backup of the volume, as it is now."""
        return VolumeBackup.from_json(
            self._t.json("GET", self._p(name, f"/backups/{b.seg(backup_id)}"))
        )

    def wait_backup(
        self, name: str, backup_id: str, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Polls a backup until its upload has ended and returns it ``done``. A backup that
        ends ``failed`` raises :class:`~pandastack.VolumeBackupError` (``.backup``,
        ``.error``); one still uploading after ``timeout`` seconds (default 3600)
        :class:`~pandastack.VolumeBackupTimeoutError` (the upload goes on)."""
        w = b.BackupWait(timeout)
        while True:
            backup = self.get_backup(name, backup_id)
            if backup.state != "uploading":
                return b.backup_outcome(name, backup)
            if w.expired():
                raise b.backup_timeout(name, backup, w.timeout)
            time.sleep(w.pause())
