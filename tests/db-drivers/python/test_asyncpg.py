"""asyncpg with its statement cache on (the default): every query is a named server-side
statement, parsed once per connection and reused; on the pooled endpoint PgBouncer has to carry
them from one server connection to the next."""

from __future__ import annotations

import asyncio

import asyncpg

from conftest import table
from holders import occupy


def test_statement_cache_in_and_across_transactions(uri, endpoint):
    asyncio.run(_cache(uri, endpoint))


async def _cache(uri: str, endpoint: str) -> None:
    t = table("apg", endpoint)
    conn = await asyncpg.connect(uri)
    try:
        await conn.execute(f"drop table if exists {t}")
        await conn.execute(f"create table {t} (id int primary key, score float8)")
        async with conn.transaction():
            for i in range(100):
                await conn.execute(f"insert into {t} values ($1, $2)", i, i / 2)
            n = await conn.fetchval(
                "select count(*) from pg_prepared_statements where statement like $1",
                f"insert into {t} %",
            )
            assert n == 1, "the cache parsed the insert once"
            pid = await conn.fetchval("select pg_backend_pid()")
        # Across transactions (each statement its own), the last server connection held.
        with occupy(uri, pid) if endpoint == "pooled" else _null():
            got = [await conn.fetchval(f"select score from {t} where id = $1", i) for i in range(60)]
            assert got == [i / 2 for i in range(60)]
            stmt = await conn.prepare(f"select count(*) from {t} where score >= $1")
            assert [await stmt.fetchval(float(k)) for k in (0, 10, 49.5)] == [100, 80, 1]
            if endpoint == "pooled":
                assert await conn.fetchval("select pg_backend_pid()") != pid
        rows = await conn.fetch(f"select id, score from {t} where id = any($1::int[]) order by id", [3, 7])
        assert [(r["id"], r["score"]) for r in rows] == [(3, 1.5), (7, 3.5)]
    finally:
        await conn.close()


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
