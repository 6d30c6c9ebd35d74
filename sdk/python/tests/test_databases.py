"""Managed PostgreSQL against a real server with real guests: one database for the whole module
(creates are slow under emulation; the first one on a server bakes the ``postgres`` template),
deleted at the end also when a test fails. Queries over HTTP with parameters, SQL errors as
:class:`QueryError` with their SQLSTATE, a real driver (psycopg 3) through the TLS front,
the pooled connection string, a branch that sees the parent's data, a restore outside the
restore window refused, a password rotation and a backup.

Needs ``PANDASTACK_DB_FRONT`` (``host:port`` of the server's database front, printed by
``scripts/dev-server.sh``); without it the module is skipped. The connection strings name
``<id>.db.localhost``, which libc does not resolve: the driver gets ``hostaddr`` (and the port)
from ``PANDASTACK_DB_FRONT`` and keeps the host name for TLS SNI."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from typing import Iterator, List, Tuple

import pytest

from conftest import RUN_ID
from pandastack import Database, DatabaseNotFoundError, InvalidArgumentError, PandaStack, QueryError

pytestmark = pytest.mark.skipif(
    not os.environ.get("PANDASTACK_DB_FRONT"),
    reason="PANDASTACK_DB_FRONT is not set (scripts/dev-server.sh prints it)",
)

NAME = f"py_{RUN_ID}"
BRANCH = f"{NAME}_br"


def front() -> Tuple[str, str]:
    host, _, port = os.environ["PANDASTACK_DB_FRONT"].rpartition(":")
    return host, port


def connect(uri: str, **kw):
    """psycopg 3 on ``uri``, reaching the front at PANDASTACK_DB_FRONT (TLS, SNI from the host
    name in the URI)."""
    import psycopg

    host, port = front()
    return psycopg.connect(uri, hostaddr=host, port=port, connect_timeout=120, **kw)


class Shared:
    """The module's database; ``db`` is replaced when a test changes its password."""

    def __init__(self, db: Database) -> None:
        self.db = db


@pytest.fixture(scope="module")
def shared(client: PandaStack) -> Iterator[Shared]:
    names: List[str] = [BRANCH, NAME]
    try:
        db = client.databases.create(NAME, idle_seconds=0)
        yield Shared(db)
    finally:
        for n in names:  # the branch first, then its parent
            try:
                client.databases.delete(n)
            except Exception as e:  # pragma: no cover - report, do not mask the test result
                print(f"cleanup of database {n} failed: {e!r}", file=sys.stderr)


def test_created_ready_listed_and_found(client, shared):
    db = shared.db
    assert db.name == NAME and db.user == NAME and db.version == 17
    assert db.state == "ready" and db.sandbox_id and db.volume and db.host and db.created_at
    assert db.parent is None and db.size_gb == 1 and db.idle_seconds == 0
    assert db.connection_uri.startswith(f"postgres://{NAME}:") and db.connection_uri.endswith(
        f"/{NAME}?sslmode=require"
    )
    assert f"@{db.id}." in db.connection_uri and f"@{db.id}-pooler." in db.pooled_uri
    assert client.databases.get(db.id).name == NAME
    assert client.databases.get(NAME).id == db.id
    assert db.id in [d.id for d in client.databases.list()]
    with pytest.raises(DatabaseNotFoundError) as ei:
        client.databases.get(f"nope_{RUN_ID}")
    assert ei.value.status == 404 and ei.value.code == "database_not_found"
    assert "vector" in client.databases.extensions().names("17")


def test_query_with_params(client, shared):
    q = client.databases.query
    db = shared.db
    assert q(db.id, "create table notes (id int primary key, body text, tags jsonb, score float8)").command == "CREATE"
    ins = q(
        db.id,
        "insert into notes values ($1, $2, $3, $4), ($5, $6, $7, $8)",
        [1, "first", {"k": ["a"]}, 0.5, 2, "second", None, None],
    )
    assert (ins.command, ins.row_count) == ("INSERT", 2)
    r = q(db.id, "select id, body, tags, score from notes where id >= $1 order by id", [1])
    assert r.columns == ["id", "body", "tags", "score"]
    assert r.rows == [[1, "first", {"k": ["a"]}, 0.5], [2, "second", None, None]]
    assert r.row_count == 2 and r.fields[0].data_type_id == 23
    big = q(db.id, "select 9007199254740993::int8 as n, 1.10::numeric as d, $1::text is null as isnull", [None])
    assert big.rows == [["9007199254740993", "1.10", True]], "int8 and numeric keep their precision as text"


def test_query_errors_carry_the_sqlstate(client, shared):
    with pytest.raises(QueryError) as ei:
        client.databases.query(shared.db.id, "selec 1")
    e = ei.value
    assert (e.status, e.code, e.sqlstate, e.severity) == (400, "query_failed", "42601", "ERROR")
    assert "syntax error" in e.pg_message
    with pytest.raises(QueryError) as ei:
        client.databases.query(shared.db.id, "insert into notes values ($1, $2)", [1, "dup"])
    assert ei.value.sqlstate == "23505"
    with pytest.raises(QueryError) as ei:
        client.databases.query(shared.db.id, "select * from no_such_table")
    assert ei.value.sqlstate == "42P01"


def test_psycopg_through_the_tls_front(client, shared):
    db = shared.db
    with connect(db.connection_uri) as conn:
        assert conn.info.pgconn.ssl_in_use, "the front speaks TLS"
        with conn.cursor() as cur:
            cur.execute("select body from notes where id = %s", (1,))
            assert cur.fetchone() == ("first",)
            cur.execute("insert into notes (id, body) values (%s, %s)", (3, "from psycopg"))
            cur.execute("select current_user, current_database(), current_setting('server_version_num')::int / 10000")
            assert cur.fetchone() == (NAME, NAME, 17)
        conn.commit()
    seen = client.databases.query(db.id, "select body from notes where id = 3")
    assert seen.rows == [["from psycopg"]], "what the driver wrote, the HTTP query sees"


def test_pooled_connection(shared):
    with connect(shared.db.pooled_uri, prepare_threshold=None) as conn:
        assert conn.execute("select count(*) from notes").fetchone() == (3,)


def test_branch_sees_the_data_and_diverges(client, shared):
    db = shared.db
    br = client.databases.branch(db.id, BRANCH)
    assert br.name == BRANCH and br.parent == db.id and br.id != db.id
    assert br.state == "ready" and br.user == db.user
    assert client.databases.query(br.id, "select id, body from notes order by id").rows == [
        [1, "first"],
        [2, "second"],
        [3, "from psycopg"],
    ]
    client.databases.query(br.id, "insert into notes (id, body) values (4, 'branch only')")
    assert client.databases.query(br.id, "select count(*)::int from notes").scalar() == 4
    assert client.databases.query(db.id, "select count(*)::int from notes").scalar() == 3
    with connect(br.connection_uri) as conn:
        assert conn.execute("select body from notes where id = 4").fetchone() == ("branch only",)
    assert client.databases.delete(br.id) is True
    with pytest.raises(DatabaseNotFoundError):
        client.databases.get(br.id)


def test_restore_outside_the_window_names_it(client, shared):
    """No archive needed: 2001 is before any base backup, so the server refuses it (422)."""
    with pytest.raises(InvalidArgumentError) as ei:
        client.databases.restore(shared.db.id, datetime(2001, 1, 1, tzinfo=timezone.utc))
    assert ei.value.status == 422 and ei.value.code == "invalid_argument"
    assert "window" in str(ei.value) or "base backup" in str(ei.value), str(ei.value)


def test_rotate_password(client, shared):
    import psycopg

    old = shared.db
    new = client.databases.rotate_password(old.id)
    shared.db = new
    assert new.id == old.id and new.connection_uri != old.connection_uri
    with pytest.raises(psycopg.OperationalError):
        connect(old.connection_uri).close()
    with connect(new.connection_uri) as conn:
        assert conn.execute("select count(*) from notes").fetchone() == (3,)
    assert client.databases.get(old.id).connection_uri == new.connection_uri
    assert client.databases.query(old.id, "select 1").scalar() == 1, "the API needs no password"


def test_backup(client, shared):
    db = shared.db
    started = client.databases.backup(db.id)
    assert started.id and started.state in ("uploading", "done")
    done = client.databases.wait_backup(db.id, started.id, timeout=600)
    assert done.state == "done" and done.error is None and done.finished_at
    assert done.id in [bk.id for bk in client.databases.backups(db.id)]
