"""``client.databases``: :class:`AsyncDatabases`, managed PostgreSQL databases."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, Optional, Sequence, Union

from .. import _base as b
from ..errors import NotFoundError
from ..types import Database, DatabaseExtensions, Metrics, Page, QueryResult, VolumeBackup
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncDatabases:
    """``client.databases``: managed PostgreSQL databases, each in a microVM of its own with its
    data on a durable volume, reached with a ``postgres://`` connection string (TLS) by any
    driver, or over HTTP with :meth:`query`::

        db = await client.databases.create("app")
        await client.databases.query(db.id, "create table t (id int primary key, note text)")
        await client.databases.query(db.id, "insert into t values ($1, $2)", [1, "hello"])
        rows = (await client.databases.query(db.id, "select * from t")).rows   # [[1, "hello"]]

    Every call takes the database's id or its name. A database idle for ``idle_seconds``
    hibernates; the next connection or query wakes it.
    """

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def _p(self, database: str, rest: str = "") -> str:
        return f"/v1/databases/{b.seg(database)}{rest}"

    async def create(
        self,
        name: str,
        *,
        version: Optional[int] = None,
        size_gb: Optional[int] = None,
        memory_mb: Optional[int] = None,
        idle_seconds: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Creates a database and returns it ready for connections. ``name`` (1-40 of
        ``[a-z0-9_]``, starting with a letter) names the database and its owner role;
        ``version`` is the PostgreSQL major (default and only choice today: 17); ``size_gb``
        the size of its data volume in GiB (default 1); ``memory_mb`` the memory of its VM in
        MiB (a multiple of 256 from 256 to 16384, default 1024; the first database of a size
        bakes the template at that size); ``idle_seconds`` the idle time before it hibernates
        (default 300, ``0``: never).

        The first create on a server builds and bakes the ``postgres`` template, which takes
        minutes: the request waits up to ``timeout`` seconds (default 900). A name in use
        raises :class:`~pandastack.ConflictError`; a bad name, version or size
        :class:`~pandastack.InvalidArgumentError`."""
        body = b.database_body(name, version, size_gb, idle_seconds, memory_mb)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            await self._t.json(
                "POST",
                "/v1/databases",
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> AsyncPaginator[Database]:
        """Every database of the workspace (by name), fetched ``limit`` per page as you iterate.

        Async: not a coroutine: ``async for db in client.databases.list()``."""

        async def fetch(c: Optional[str]) -> Page[Database]:
            data = await self._t.json("GET", "/v1/databases", params=b.list_params(limit, c))
            return Page([Database.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get(self, database: str) -> Database:
        """One database, by id or name; raises :class:`~pandastack.DatabaseNotFoundError` if
        there is none."""
        return Database.from_json(await self._t.json("GET", self._p(database)))

    async def delete(self, database: str) -> bool:
        """Deletes a database: its VM and its data volume (its backups stay in the object
        store). Returns ``False`` if it did not exist."""
        try:
            await self._t.request(
                "DELETE", self._p(database), timeout=b.timeout_for(None, max(self._t.cfg.timeout, 120.0))
            )
            return True
        except NotFoundError:
            return False

    async def metrics(
        self,
        database: str,
        *,
        since: Optional[Union[datetime, timedelta, str]] = None,
        step: Optional[int] = None,
    ) -> Metrics:
        """The resource use of a database's VM over time (by id or name): ``samples``, oldest first,
        ``step`` seconds apart, and its VMs one by one in ``instances``.

        ``since``: how far back, a span (``"90s"``, ``"15m"``, ``"1h"``; a ``timedelta``) or a
        time (a ``datetime`` or an RFC 3339 string); default 10 minutes, at most 6 hours.
        ``step``: seconds per point (1 to 86400, default 5). Values the server refuses raise
        :class:`~pandastack.InvalidArgumentError`."""
        params = b.metrics_params(since, step)
        return Metrics.from_json(await self._t.json("GET", self._p(database, "/metrics"), params=params))

    async def branch(
        self,
        database: str,
        name: Optional[str] = None,
        idle_seconds: Optional[int] = None,
        *,
        from_time: Optional[Union[datetime, str]] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Branches a database as of now: a new database (``parent`` set) on a copy-on-write
        copy of its data, with the same owner role, its own password and its own VM; returned
        ready. ``name`` defaults to ``<name>_<6 hex>``. Writes to either side stay there.

        With ``from_time`` (a ``datetime``, naive taken as UTC, or an RFC 3339 string) the
        branch has the data as of that time instead (point-in-time, from the database's base
        backups and archived WAL); a time outside the restore window raises
        :class:`~pandastack.InvalidArgumentError` (422) whose message names the window."""
        body = b.branch_body(name, idle_seconds, from_time)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            await self._t.json(
                "POST",
                self._p(database, "/branches"),
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    async def restore(
        self,
        database: str,
        to_time: Union[datetime, str],
        *,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Database:
        """Restores a database in place to its data as of ``to_time`` (a ``datetime``, naive
        taken as UTC, or an RFC 3339 string) and returns it ready: the same id, password and
        connection strings, on a new timeline (open connections to the old data are closed).
        The restore window runs from the oldest base backup kept to now; a time outside it
        raises :class:`~pandastack.InvalidArgumentError` (422, ``invalid_argument``) whose
        message names the window."""
        body = b.restore_body(to_time)
        key = idempotency_key or b.new_idempotency_key()
        return Database.from_json(
            await self._t.json(
                "POST",
                self._p(database, "/restore"),
                json=body,
                headers={"Idempotency-Key": key},
                retry=b.RETRY_IDEMPOTENT,
                timeout=b.timeout_for(timeout, max(self._t.cfg.timeout, b.DATABASE_CREATE_TIMEOUT)),
            )
        )

    async def rotate_password(self, database: str) -> Database:
        """Gives the owner role a new password and returns the database with its new
        ``connection_uri`` and ``pooled_uri``. The old password stops working at once (open
        sessions stay)."""
        return Database.from_json(
            await self._t.json(
                "POST",
                self._p(database, "/password"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )

    async def query(
        self,
        database: str,
        sql: str,
        params: Optional[Sequence[Any]] = None,
        timeout_ms: Optional[int] = None,
    ) -> QueryResult:
        """Runs one SQL statement over HTTP as the database's owner role (waking the database
        first if it hibernated) and returns its :class:`~pandastack.QueryResult`.

        ``params`` fill ``$1``, ``$2``, ...: strings, numbers, booleans and ``None``; lists and
        dicts are sent as JSON text (right for ``json``, ``jsonb`` and pgvector's ``vector``;
        a PostgreSQL array takes its literal, ``"{1,2,3}"``). ``timeout_ms`` is the statement
        timeout (default 30000, at most 300000). At most 10 000 rows and 10 MiB come back;
        more raises :class:`~pandastack.InvalidArgumentError` (413).

        An error of PostgreSQL's raises :class:`~pandastack.QueryError` (its ``sqlstate``,
        ``"42601"`` for a syntax error, ...)."""
        body = b.query_body(sql, params, timeout_ms)
        return QueryResult.from_json(
            await self._t.json(
                "POST",
                self._p(database, "/query"),
                json=body,
                timeout=b.query_http_timeout(timeout_ms, self._t.cfg.timeout),
            )
        )

    async def extensions(self) -> DatabaseExtensions:
        """The extensions a database can load with ``CREATE EXTENSION``, per PostgreSQL
        version, and the libraries preloaded at start."""
        return DatabaseExtensions.from_json(await self._t.json("GET", "/v1/databases/extensions"))

    # ---- backups
    async def backup(
        self, database: str, *, wait: bool = False, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Takes a base backup of a database to the object store (where :meth:`restore` and
        point-in-time :meth:`branch` start): a copy of its data volume between
        ``pg_backup_start`` and ``pg_backup_stop`` (its file system frozen for the instant of
        the copy), uploaded in the background.
        Returns the backup ``uploading``; with ``wait=True``, once it is ``done`` (see
        :meth:`wait_backup`)."""
        backup = VolumeBackup.from_json(
            await self._t.json(
                "POST",
                self._p(database, "/backups"),
                timeout=b.timeout_for(None, max(self._t.cfg.timeout, b.DEFAULT_LIFECYCLE_TIMEOUT)),
            )
        )
        if not wait:
            return backup
        return await self.wait_backup(database, backup.id, timeout=timeout)

    def backups(self, database: str) -> AsyncPaginator[VolumeBackup]:
        """The database's backups, oldest first.

        Async: not a coroutine: ``async for bk in client.databases.backups(db.id)``."""
        path = self._p(database, "/backups")

        async def fetch(c: Optional[str]) -> Page[VolumeBackup]:
            data = await self._t.json("GET", path, params=b.list_params(None, c))
            return Page(
                [VolumeBackup.from_json(x) for x in data.get("data", [])], data.get("next_cursor")
            )

        return AsyncPaginator(fetch)

    async def wait_backup(
        self, database: str, backup_id: str, timeout: Optional[float] = None
    ) -> VolumeBackup:
        """Polls a backup until its upload has ended and returns it ``done``. A backup that
        ends ``failed`` raises :class:`~pandastack.VolumeBackupError`; one still uploading
        after ``timeout`` seconds (default 3600) :class:`~pandastack.VolumeBackupTimeoutError`
        (the upload goes on)."""
        w = b.BackupWait(timeout)
        while True:
            backup = None
            async for bk in self.backups(database):
                if bk.id == backup_id:
                    backup = bk
                    break
            if backup is None:
                raise NotFoundError(
                    f"database {database} has no backup {backup_id}", code="not_found", status=404
                )
            if backup.state != "uploading":
                return b.backup_outcome(database, backup, "database")
            if w.expired():
                raise b.backup_timeout(database, backup, w.timeout, "database")
            await asyncio.sleep(w.pause())
