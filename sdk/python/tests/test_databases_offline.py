"""Databases against a fake local HTTP server (no PandaStack server needed): what each call of
``client.databases`` sends and how it reads the answers, the error classes of
``database_not_found`` and ``query_failed`` (with the SQLSTATE parsed), query parameters, the
long HTTP timeouts of creates and queries, the times of restore and point-in-time branches,
and waiting for a backup. Sync and async."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import uuid
from urllib.parse import parse_qs

import httpx
import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    ConflictError,
    Database,
    DatabaseExtensions,
    DatabaseNotFoundError,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    QueryError,
    QueryResult,
    ServerError,
    VolumeBackup,
    VolumeBackupError,
    VolumeBackupTimeoutError,
)

pytestmark = pytest.mark.offline

URI = "postgres://app:s3cret@db-1.db.localhost:5432/app?sslmode=require"


def db(**kw):
    d = {
        "id": "db-1",
        "name": "app",
        "version": 17,
        "state": "ready",
        "user": "app",
        "connection_uri": URI,
        "pooled_uri": URI.replace("db-1.", "db-1-pooler."),
        "http_url": "http://127.0.0.1:8080/v1/databases/db-1",
        "size_gb": 1,
        "memory_mb": 1024,
        "idle_seconds": 300,
        "parent": None,
        "sandbox_id": "sb-9",
        "volume": "pgdata-db-1",
        "host": "local",
        "created_at": "2026-01-01T00:00:00Z",
    }
    d.update(kw)
    return d


def backup(state="uploading", **kw):
    bk = {
        "id": "vb-1",
        "volume": "pgdata-db-1",
        "size_gb": 1,
        "state": state,
        "bytes_uploaded": None,
        "chunks": None,
        "error": None,
        "created_at": "2026-01-01T00:00:00Z",
        "finished_at": None,
    }
    bk.update(kw)
    return bk


RESULT = {
    "command": "SELECT",
    "row_count": 2,
    "fields": [{"name": "id", "data_type_id": 23}, {"name": "note", "data_type_id": 25}],
    "rows": [[1, "one"], [2, None]],
}


def body(rec):
    return json.loads(rec["body"]) if rec["body"] else None


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)


def test_create_sends_only_what_was_given_and_reads_the_database(fake):
    fake.on("POST", "/v1/databases", reply(201, db()))
    with make(fake) as c:
        d = c.databases.create("app")
        assert isinstance(d, Database)
        assert (d.id, d.name, d.version, d.state, d.user) == ("db-1", "app", 17, "ready", "app")
        assert d.connection_uri == URI and "-pooler." in d.pooled_uri
        assert (d.size_gb, d.memory_mb, d.idle_seconds, d.parent, d.sandbox_id, d.volume) == (
            1,
            1024,
            300,
            None,
            "sb-9",
            "pgdata-db-1",
        )
        assert d.http_url.endswith("/v1/databases/db-1") and d.host == "local" and d.created_at
        assert "s3cret" not in repr(d), "the password stays out of reprs"
        c.databases.create("big", version=17, size_gb=4, memory_mb=2048, idle_seconds=0, idempotency_key="k-1")
        with pytest.raises(InvalidArgumentError):
            c.databases.create("")
    calls = fake.calls("POST", "/v1/databases")
    assert [body(r) for r in calls] == [
        {"name": "app"},
        {"name": "big", "version": 17, "size_gb": 4, "memory_mb": 2048, "idle_seconds": 0},
    ]
    assert calls[0]["headers"].get("idempotency-key")
    assert calls[1]["headers"].get("idempotency-key") == "k-1"


def test_list_follows_cursors_get_and_delete(fake):
    fake.on_call(
        "GET",
        "/v1/databases",
        lambda r: reply(200, {"data": [db(id="db-2", name="b")], "next_cursor": None})
        if query(r).get("cursor") == "a"
        else reply(200, {"data": [db(name="a")], "next_cursor": "a"}),
    )
    fake.on("GET", "/v1/databases/app", reply(200, db()))
    fake.on("DELETE", "/v1/databases/db-1", reply(204), error(404, "database_not_found", "no database db-1"))
    with make(fake) as c:
        assert [d.name for d in c.databases.list(limit=1)] == ["a", "b"]
        assert query(fake.calls("GET", "/v1/databases")[0]) == {"limit": "1"}
        assert c.databases.get("app").id == "db-1"
        assert c.databases.delete("db-1") is True
        assert c.databases.delete("db-1") is False


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (404, "database_not_found", DatabaseNotFoundError),
        (409, "conflict", ConflictError),
        (422, "invalid_argument", InvalidArgumentError),
        (503, "unavailable", ServerError),
    ],
)
def test_database_error_codes_map_to_classes(fake, status, code, cls):
    fake.on("GET", "/v1/databases/nope", error(status, code, f"{code} here"))
    with make(fake) as c:
        with pytest.raises(cls) as ei:
            c.databases.get("nope")
    assert ei.value.code == code and ei.value.status == status
    if cls is DatabaseNotFoundError:
        assert isinstance(ei.value, NotFoundError)


def test_query_sends_sql_params_and_reads_the_result(fake):
    fake.on("POST", "/v1/databases/db-1/query", reply(200, RESULT))
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with make(fake) as c:
        r = c.databases.query("db-1", "select id, note from t where id = any($1)", ["{1,2}"])
        assert isinstance(r, QueryResult)
        assert (r.command, r.row_count, r.columns) == ("SELECT", 2, ["id", "note"])
        assert [f.data_type_id for f in r.fields] == [23, 25]
        assert r.rows == [[1, "one"], [2, None]]
        assert r.dicts() == [{"id": 1, "note": "one"}, {"id": 2, "note": None}]
        assert r.scalar() == 1
        c.databases.query(
            "db-1",
            "insert into t values ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            (7, 1.5, True, None, "x", [0.1, 0.2, 0.3], {"a": 1}, when, decimal.Decimal("1.10")),
            timeout_ms=5000,
        )
        c.databases.query("db-1", "select $1, $2", [u, b"\x00\xff"])
        c.databases.query("db-1", "select 1")
        for bad in ("not a list", {"a": 1}):
            with pytest.raises(InvalidArgumentError):
                c.databases.query("db-1", "select $1", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            c.databases.query("db-1", "select $1", [object()])
        with pytest.raises(InvalidArgumentError):
            c.databases.query("db-1", "  ")
    sent = [body(r) for r in fake.calls("POST", "/v1/databases/db-1/query")]
    assert sent == [
        {"sql": "select id, note from t where id = any($1)", "params": ["{1,2}"]},
        {
            "sql": "insert into t values ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            "params": [7, 1.5, True, None, "x", "[0.1,0.2,0.3]", '{"a":1}', "2026-01-02T03:04:05+00:00", "1.10"],
            "timeout_ms": 5000,
        },
        {"sql": "select $1, $2", "params": [str(u), "\\x00ff"]},
        {"sql": "select 1"},
    ]


def test_query_failed_is_a_query_error_with_the_sqlstate(fake):
    fake.on(
        "POST",
        "/v1/databases/db-1/query",
        error(400, "query_failed", 'ERROR 42601: syntax error at or near "selec"'),
        error(400, "query_failed", "something else"),
        error(413, "payload_too_large", "more than 10000 rows"),
    )
    with make(fake) as c:
        with pytest.raises(QueryError) as ei:
            c.databases.query("db-1", "selec 1")
        e = ei.value
        assert (e.status, e.code, e.sqlstate, e.severity) == (400, "query_failed", "42601", "ERROR")
        assert e.pg_message == 'syntax error at or near "selec"'
        assert e.request_id == "req_fake_400" and "42601" in str(e)
        assert not isinstance(e, InvalidArgumentError)
        with pytest.raises(QueryError) as ei:
            c.databases.query("db-1", "select 1")
        assert ei.value.sqlstate is None and ei.value.pg_message == "something else"
        with pytest.raises(InvalidArgumentError) as ei2:
            c.databases.query("db-1", "select generate_series(1, 100000)")
        assert ei2.value.status == 413


def test_branch_password_extensions(fake):
    fake.on("POST", "/v1/databases/db-1/branches", reply(201, db(id="db-2", name="app_abc123", parent="db-1")))
    fake.on("POST", "/v1/databases/db-1/password", reply(200, db(connection_uri=URI.replace("s3cret", "n3w"))))
    fake.on(
        "GET",
        "/v1/databases/extensions",
        reply(
            200,
            {
                "versions": {"17": [{"name": "vector", "default_version": "0.8.0"}, {"name": "pg_trgm", "default_version": "1.6"}]},
                "preloaded": ["pg_stat_statements"],
            },
        ),
    )
    with make(fake) as c:
        br = c.databases.branch("db-1")
        assert br.parent == "db-1" and br.id == "db-2"
        c.databases.branch("db-1", "feature_x", idle_seconds=60)
        assert "n3w" in c.databases.rotate_password("db-1").connection_uri
        ext = c.databases.extensions()
        assert isinstance(ext, DatabaseExtensions)
        assert ext.names() == ["vector", "pg_trgm"] == ext.names(17)
        assert ext.versions["17"][0].default_version == "0.8.0"
        assert ext.preloaded == ["pg_stat_statements"]
    calls = fake.calls("POST", "/v1/databases/db-1/branches")
    assert [body(r) for r in calls] == [{}, {"name": "feature_x", "idle_seconds": 60}]
    assert all(r["headers"].get("idempotency-key") for r in calls)


def test_restore_and_point_in_time_branch_send_rfc3339_times(fake):
    window = "database db-1: 2001-01-01T00:00:00Z is outside the restore window (from 2026-01-01T00:00:00Z to 2026-01-02T00:00:00Z)"
    fake.on("POST", "/v1/databases/db-1/restore", reply(200, db()), error(422, "invalid_argument", window))
    fake.on("POST", "/v1/databases/db-1/branches", reply(201, db(id="db-2", parent="db-1")))
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    with make(fake) as c:
        d = c.databases.restore("db-1", datetime.datetime(2026, 1, 1, 12, 30))  # naive: UTC
        assert isinstance(d, Database) and d.id == "db-1" and d.connection_uri == URI
        with pytest.raises(InvalidArgumentError) as ei:
            c.databases.restore("db-1", "2001-01-01T00:00:00Z")
        assert ei.value.status == 422 and ei.value.code == "invalid_argument"
        assert "restore window" in str(ei.value)
        with pytest.raises(InvalidArgumentError):
            c.databases.restore("db-1", datetime.date(2026, 1, 1))  # type: ignore[arg-type]
        c.databases.branch("db-1", "pitr", from_time=datetime.datetime(2026, 1, 1, 14, 30, 0, 250000, tzinfo=plus2))
    calls = fake.calls("POST", "/v1/databases/db-1/restore")
    assert [body(r) for r in calls] == [{"to_time": "2026-01-01T12:30:00+00:00"}, {"to_time": "2001-01-01T00:00:00Z"}]
    assert all(r["headers"].get("idempotency-key") for r in calls)
    assert [body(r) for r in fake.calls("POST", "/v1/databases/db-1/branches")] == [
        {"name": "pitr", "from_time": "2026-01-01T14:30:00.250000+02:00"}
    ]


def test_backup_wait_polls_the_list_until_done(fake):
    fake.on("POST", "/v1/databases/db-1/backups", reply(202, backup()))
    fake.on(
        "GET",
        "/v1/databases/db-1/backups",
        reply(200, {"data": [backup()], "next_cursor": None}),
        reply(200, {"data": [backup("done", id="vb-0"), backup("done", bytes_uploaded=10, finished_at="t2")], "next_cursor": None}),
    )
    with make(fake) as c:
        bk = c.databases.backup("db-1")
        assert isinstance(bk, VolumeBackup) and bk.state == "uploading"
        done = c.databases.wait_backup("db-1", bk.id, timeout=30)
        assert (done.id, done.state, done.bytes_uploaded, done.finished_at) == ("vb-1", "done", 10, "t2")
        assert [x.id for x in c.databases.backups("db-1")] == ["vb-0", "vb-1"]
        with pytest.raises(NotFoundError):
            c.databases.wait_backup("db-1", "vb-nope", timeout=30)


def test_backup_failure_and_timeout(fake):
    fake.on("POST", "/v1/databases/db-1/backups", reply(202, backup()))
    fake.on(
        "GET",
        "/v1/databases/db-1/backups",
        reply(200, {"data": [backup("failed", error="s3 said no")], "next_cursor": None}),
        reply(200, {"data": [backup()], "next_cursor": None}),
    )
    with make(fake) as c:
        with pytest.raises(VolumeBackupError) as ei:
            c.databases.backup("db-1", wait=True)
        assert ei.value.error == "s3 said no" and "database db-1" in str(ei.value)
        with pytest.raises(VolumeBackupTimeoutError):
            c.databases.wait_backup("db-1", "vb-1", timeout=0.3)


def test_creates_and_queries_get_long_http_timeouts():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = request.extensions["timeout"]["read"]
        if request.url.path.endswith("/query"):
            return httpx.Response(200, json=RESULT)
        return httpx.Response(201, json=db())

    http = httpx.Client(transport=httpx.MockTransport(handler))
    with PandaStack(api_key="pds_test", base_url="http://fake", http_client=http, max_retries=0) as c:
        c.databases.create("app")
        c.databases.branch("db-1")
        c.databases.restore("db-1", "2026-01-01T00:00:00Z")
        c.databases.query("db-1", "select 1", timeout_ms=120_000)
    assert seen["/v1/databases"] >= 900, "the first create bakes the postgres template: minutes"
    assert seen["/v1/databases/db-1/branches"] >= 900
    assert seen["/v1/databases/db-1/restore"] >= 900, "a restore replays WAL and starts a VM"
    assert seen["/v1/databases/db-1/query"] >= 120 + 60, "the statement timeout plus a wake"


def test_async_databases(fake):
    fake.on("POST", "/v1/databases", reply(201, db()))
    fake.on("GET", "/v1/databases", reply(200, {"data": [db()], "next_cursor": None}))
    fake.on("POST", "/v1/databases/db-1/query", reply(200, RESULT), error(400, "query_failed", "ERROR 23505: duplicate key"))
    fake.on("POST", "/v1/databases/db-1/backups", reply(202, backup()))
    fake.on("GET", "/v1/databases/db-1/backups", reply(200, {"data": [backup("done")], "next_cursor": None}))
    fake.on("GET", "/v1/databases/gone", error(404, "database_not_found", "no database gone"))
    fake.on("DELETE", "/v1/databases/db-1", reply(204))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            d = await c.databases.create("app", size_gb=1)
            assert d.name == "app"
            assert [x.id async for x in c.databases.list()] == ["db-1"]
            r = await c.databases.query(d.id, "select 1", [1])
            assert r.rows[0] == [1, "one"]
            with pytest.raises(QueryError) as ei:
                await c.databases.query(d.id, "insert into t values (1)")
            assert ei.value.sqlstate == "23505"
            assert (await c.databases.backup(d.id, wait=True, timeout=30)).state == "done"
            with pytest.raises(DatabaseNotFoundError):
                await c.databases.get("gone")
            assert await c.databases.delete(d.id) is True

    asyncio.run(main())
