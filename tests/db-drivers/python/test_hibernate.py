"""A hibernated database's first connection, with the driver's default timeouts (psycopg's
connect timeout of 130 s, asyncpg's 60 s): the front wakes the VM and joins the client once
PostgreSQL (or PgBouncer) answers. Run by scripts/test-db-drivers.sh after the other suites."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import psycopg

from conftest import api, database, libpq_kwargs, wait_state


def hibernate(mark: str) -> None:
    """Writes ``mark`` (over the HTTP query API), then hibernates the database's VM."""
    d = database()
    q = f"/v1/databases/{d['id']}/query"
    api("POST", q, {"sql": "create table if not exists wakes (mark text primary key)"})
    api("POST", q, {"sql": "insert into wakes values ($1)", "params": [mark]})
    api("POST", f"/v1/sandboxes/{d['sandbox_id']}/hibernate")
    assert wait_state(d["id"], "hibernated", timeout=120)["state"] == "hibernated"


def test_psycopg_wakes_it(uri, endpoint):
    mark = f"psycopg-{endpoint}"
    hibernate(mark)
    t0 = time.monotonic()
    with psycopg.connect(uri, **libpq_kwargs()) as conn:  # no connect_timeout of ours
        got = conn.execute("select mark from wakes where mark = %s", (mark,)).fetchone()
    print(f"psycopg {endpoint}: woke and answered in {time.monotonic() - t0:.1f}s")
    assert got == (mark,)
    assert database()["state"] == "ready"


def test_asyncpg_wakes_it(uri, endpoint):
    mark = f"asyncpg-{endpoint}"
    hibernate(mark)

    async def first() -> str:
        conn = await asyncpg.connect(uri)  # asyncpg's default timeout (60 s)
        try:
            return await conn.fetchval("select mark from wakes where mark = $1", mark)
        finally:
            await conn.close()

    t0 = time.monotonic()
    assert asyncio.run(first()) == mark
    print(f"asyncpg {endpoint}: woke and answered in {time.monotonic() - t0:.1f}s")
