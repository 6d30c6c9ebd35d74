"""Files against a fake local HTTP server (no PandaStack server needed): ``filesystem.list``
follows ``next_cursor`` page after page and returns every entry once. Sync and async."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

import pytest

from fakeserver import SANDBOX, FakeServer, reply
from pandastack import AsyncPandaStack, PandaStack

pytestmark = pytest.mark.offline

LIST = "/v1/sandboxes/sb-fake/fs/list"


def entry(name: str) -> dict:
    return {
        "name": name,
        "path": f"/d/{name}",
        "type": "file",
        "size": 1,
        "mode": 0o644,
        "mtime_ms": 0,
    }


#: Three pages, keyed by the cursor that asks for each.
PAGES = {
    None: {"data": [entry("a"), entry("b")], "next_cursor": "L2QvYg"},
    "L2QvYg": {"data": [entry("c")], "next_cursor": "L2QvYw"},
    "L2QvYw": {"data": [entry("d")], "next_cursor": None},
}


@pytest.fixture
def fake():
    with FakeServer() as s:
        s.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))

        def page(rec):
            q = {k: v[0] for k, v in parse_qs(rec["query"]).items()}
            assert (q["path"], q["depth"], q["limit"]) == ("/d", "2", "5000"), q
            return reply(200, PAGES[q.get("cursor")])

        s.on_call("GET", LIST, page)
        yield s


def test_list_follows_next_cursor(fake):
    with PandaStack(api_key="pds_test", base_url=fake.url) as c:
        sb = c.sandboxes.get("sb-fake")
        entries = sb.filesystem.list("/d", depth=2)
    assert [e.path for e in entries] == ["/d/a", "/d/b", "/d/c", "/d/d"]
    assert len(fake.calls("GET", LIST)) == 3


def test_async_list_follows_next_cursor(fake):
    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as c:
            sb = await c.sandboxes.get("sb-fake")
            return await sb.filesystem.list("/d", depth=2)

    entries = asyncio.run(main())
    assert [e.name for e in entries] == ["a", "b", "c", "d"]


def test_a_cursor_that_does_not_move_on_ends_the_listing(fake):
    stuck = {"data": [entry("a")], "next_cursor": "same"}
    fake.on("GET", LIST, reply(200, stuck))
    with PandaStack(api_key="pds_test", base_url=fake.url) as c:
        entries = c.sandboxes.get("sb-fake").filesystem.list("/d")
    assert [e.name for e in entries] == ["a", "a"]
    assert len(fake.calls("GET", LIST)) == 2
