"""psycopg 3 on both endpoints with server-side prepared statements from the first execute
(``prepare_threshold=0``), in a transaction, across transactions while the pooler's previous
server connection is taken by another client, in pipeline mode; and libpq's own
Parse-then-Describe-later (what pgJDBC does when it asks a named statement for its metadata): a
Describe and Binds of a statement the server connection of the moment never parsed."""

from __future__ import annotations

import psycopg
from psycopg import pq

from conftest import libpq_kwargs, table
from holders import backend_pid, occupy


def prepared_count(conn, text_prefix: str) -> int:
    (n,) = conn.execute(
        "select count(*) from pg_prepared_statements where not from_sql and statement like %s",
        (text_prefix + "%",),
    ).fetchone()
    return n


def test_prepared_from_the_first_execute(uri, endpoint):
    t = table("pg3", endpoint)
    with psycopg.connect(uri, prepare_threshold=0, **libpq_kwargs()) as conn:
        assert conn.info.pgconn.ssl_in_use, "the front speaks TLS"
        conn.execute(f"drop table if exists {t}")
        conn.execute(f"create table {t} (id int primary key, v text)")
        conn.commit()
        # One transaction: the insert is parsed once and bound 100 times.
        for i in range(100):
            conn.execute(f"insert into {t} (id, v) values (%s, %s)", (i, f"v{i}"))
        assert prepared_count(conn, f"insert into {t} ") == 1, "one server-side statement"
        pid = backend_pid(conn)
        conn.commit()
        # Across transactions, the previous server connection held by another client: each
        # commit lets the pooler move this client; the statement must follow it.
        with occupy(uri, pid) if endpoint == "pooled" else _null():
            for i in range(100, 150):
                conn.execute(f"insert into {t} (id, v) values (%s, %s)", (i, f"v{i}"))
                conn.commit()
            if endpoint == "pooled":
                assert backend_pid(conn) != pid, "ran on another server connection"
                conn.commit()
        # Pipeline mode: 50 prepared executions sent before the first result is read.
        with conn.pipeline():
            curs = [conn.execute(f"select v from {t} where id = %s", (i,)) for i in range(50)]
        assert [c.fetchone()[0] for c in curs] == [f"v{i}" for i in range(50)]
        assert conn.execute(f"select count(*), sum(id) from {t}").fetchone() == (150, sum(range(150)))
        conn.commit()


def test_describe_of_a_statement_parsed_elsewhere(uri, endpoint):
    with psycopg.connect(uri, autocommit=True, **libpq_kwargs()) as conn:
        pg = conn.pgconn
        r = pg.prepare(b"drv_s1", b"select $1::int4 * 2 as doubled, $2::text as label")
        assert r.status == pq.ExecStatus.COMMAND_OK, r.error_message
        pid = backend_pid(conn)
        with occupy(uri, pid) if endpoint == "pooled" else _null():
            d = pg.describe_prepared(b"drv_s1")
            assert d.status == pq.ExecStatus.COMMAND_OK, d.error_message
            assert (d.nparams, d.param_type(0), d.param_type(1)) == (2, 23, 25)
            assert (d.nfields, d.fname(0), d.fname(1), d.ftype(0)) == (2, b"doubled", b"label", 23)
            for i in range(20):
                r = pg.exec_prepared(b"drv_s1", [str(i).encode(), f"n{i}".encode()])
                assert r.status == pq.ExecStatus.TUPLES_OK, r.error_message
                assert (r.get_value(0, 0), r.get_value(0, 1)) == (str(2 * i).encode(), f"n{i}".encode())
            if endpoint == "pooled":
                assert backend_pid(conn) != pid


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_without_sni_by_the_endpoint_option(db, endpoint):
    """A client that sends no server name (an IP address as host) names the database with
    Neon's ``options=endpoint=<id>`` (``<id>-pooler`` for the pooler)."""
    from conftest import front

    host, port = front()
    label = db["id"] + ("-pooler" if endpoint == "pooled" else "")
    password = db["connection_uri"].split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    with psycopg.connect(
        host=host, port=port, dbname=db["name"], user=db["user"], password=password,
        sslmode="require", options=f"endpoint={label}", prepare_threshold=None,
    ) as conn:
        assert conn.execute("select current_database(), 6 * 7").fetchone() == (db["name"], 42)
