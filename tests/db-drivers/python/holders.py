"""Forcing a transaction pooler onto another server connection.

PgBouncer in transaction mode hands a client whichever server connection is free at the start
of each transaction, most recently used first. A driver that prepared a statement in one
transaction and uses it in the next one may land on a server that never saw it; PgBouncer
(``max_prepared_statements``) then has to prepare it there itself. With one client the pooler
would keep handing back the same server and such a test would prove nothing, so
:func:`occupy` keeps other clients in open transactions until one of them holds the server
connection (backend pid) the client under test used last: its next transaction must run on
another one."""

from __future__ import annotations

import contextlib
from typing import Iterator, List

import psycopg

from conftest import libpq_kwargs


@contextlib.contextmanager
def occupy(uri: str, pid: int, tries: int = 6) -> Iterator[List[int]]:
    """Holds backend ``pid`` in another client's open transaction for the duration; yields the
    pids held. On a direct endpoint every connection has its own backend: nothing to hold."""
    held: List[psycopg.Connection] = []
    pids: List[int] = []
    try:
        for _ in range(tries):
            c = psycopg.connect(uri, prepare_threshold=None, **libpq_kwargs())
            held.append(c)
            (p,) = c.execute("select pg_backend_pid()").fetchone()  # opens a transaction
            pids.append(p)
            if p == pid:
                break
        else:
            raise AssertionError(f"no other client got backend {pid} (got {pids})")
        yield pids
    finally:
        for c in held:
            c.close()


def backend_pid(conn) -> int:
    (p,) = conn.execute("select pg_backend_pid()").fetchone()
    return p
