"""Functions against a fake local HTTP server (no PandaStack server needed): what each call of
``client.functions`` sends and how it reads the answers, paging of functions and versions,
waiting for a version and its timeout, the build log as text, rollback, and invoke: any JSON
event, the handler's error and a timeout as data (not exceptions), the refusals that are
exceptions, and the long HTTP timeout of a call; queued calls (submit, get_invocation). Sync and
async."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

import httpx
import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AppNotFoundError,
    AsyncPandaStack,
    ConflictError,
    Function,
    FunctionVersion,
    FunctionVersionTimeoutError,
    InvalidArgumentError,
    Invocation,
    InvocationError,
    NotFoundError,
    PandaStack,
    PandaStackError,
)

pytestmark = pytest.mark.offline


def function(**kw):
    f = {
        "id": "app-f1",
        "name": "hello",
        "runtime": "python",
        "handler": "main.handler",
        "url": "http://fn-hello.apps.localhost:8080",
        "public": False,
        "env": {"A": "1"},
        "secret_names": ["TOKEN"],
        "memory_mb": 1024,
        "timeout_seconds": 60,
        "concurrency": 1,
        "max_instances": 4,
        "idle_seconds": 300,
        "live_version": None,
        "warm_instances": 0,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    f.update(kw)
    return f


def version(state="queued", number=1, **kw):
    v = {
        "id": f"dep-{number}",
        "function": "hello",
        "version": number,
        "state": state,
        "error": None,
        "handler": None,
        "phases_ms": {},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    v.update(kw)
    return v


def outcome(status="ok", **kw):
    o = {
        "id": None,
        "function": "hello",
        "status": status,
        "result": None,
        "error": None,
        "stdout": "",
        "stderr": "",
        "version": 1,
        "duration_ms": 1.5,
        "cold": False,
        "attempts": 1,
        "created_at": None,
        "finished_at": None,
    }
    o.update(kw)
    return o


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


MAIN_PY = "def handler(event, context):\n    return {'hi': event}\n"


def test_create_sends_only_what_was_given_and_reads_the_function(fake):
    fake.on_call("POST", "/v1/functions", lambda r: reply(201, function(name=body(r)["name"])))
    with make(fake) as c:
        f = c.functions.create("hello", "python", "main.handler", files={"main.py": MAIN_PY})
        assert isinstance(f, Function)
        assert (f.id, f.name, f.runtime, f.handler) == ("app-f1", "hello", "python", "main.handler")
        assert (f.url, f.public, f.env, f.secret_names) == (
            "http://fn-hello.apps.localhost:8080",
            False,
            {"A": "1"},
            ["TOKEN"],
        )
        assert (f.memory_mb, f.timeout_seconds, f.concurrency, f.max_instances, f.idle_seconds) == (
            1024,
            60,
            1,
            4,
            300,
        )
        assert (f.live_version, f.warm_instances) == (None, 0)
        assert f.created_at and f.raw["id"] == "app-f1"
        c.functions.create(
            "full",
            "node",
            "index.handler",
            files={"index.mjs": b"export const handler = (e) => e;\n", "lib/util.mjs": "export {}"},
            dependencies='{"dependencies": {"lodash": "4"}}',
            env={"A": "1", "N": 2},  # type: ignore[dict-item]
            secrets={"TOKEN": "t"},
            memory_mb=512,
            timeout_seconds=30,
            concurrency=4,
            max_instances=2,
            idle_seconds=60,
            public=True,
        )
        c.functions.create("fromgit", "python", "app.main", git="https://git.example/fn.git", ref="v1")
        for bad in (
            lambda: c.functions.create("", "python", "main.handler", files={"main.py": ""}),
            lambda: c.functions.create("x", "ruby", "main.handler", files={"main.rb": ""}),
            lambda: c.functions.create("x", "python", "", files={"main.py": ""}),
            lambda: c.functions.create("x", "python", "main.handler"),  # no source
            lambda: c.functions.create("x", "python", "main.handler", files={}),
            lambda: c.functions.create("x", "python", "main.handler", files={"main.py": 1}),  # type: ignore[dict-item]
            lambda: c.functions.create("x", "python", "main.handler", files={"main.py": b"\xff"}),
            lambda: c.functions.create("x", "python", "main.handler", files="main.py"),  # type: ignore[arg-type]
            lambda: c.functions.create("x", "python", "m.h", files={"m.py": ""}, git="https://g/x.git"),
            lambda: c.functions.create("x", "python", "m.h", files={"m.py": ""}, ref="main"),
        ):
            with pytest.raises(InvalidArgumentError):
                bad()
    calls = fake.calls("POST", "/v1/functions")
    assert [body(r) for r in calls] == [
        {"name": "hello", "runtime": "python", "handler": "main.handler", "files": {"main.py": MAIN_PY}},
        {
            "name": "full",
            "runtime": "node",
            "handler": "index.handler",
            "files": {"index.mjs": "export const handler = (e) => e;\n", "lib/util.mjs": "export {}"},
            "dependencies": '{"dependencies": {"lodash": "4"}}',
            "env": {"A": "1", "N": "2"},
            "secrets": {"TOKEN": "t"},
            "memory_mb": 512,
            "timeout_seconds": 30,
            "concurrency": 4,
            "max_instances": 2,
            "idle_seconds": 60,
            "public": True,
        },
        {
            "name": "fromgit",
            "runtime": "python",
            "handler": "app.main",
            "git": {"url": "https://git.example/fn.git", "ref": "v1"},
        },
    ]
    assert calls[0]["headers"]["content-type"] == "application/json"


def test_list_follows_cursors_get_update_and_delete(fake):
    fake.on_call(
        "GET",
        "/v1/functions",
        lambda r: reply(200, {"data": [function(id="app-f2", name="b")], "next_cursor": None})
        if query(r).get("cursor") == "a"
        else reply(200, {"data": [function(name="a")], "next_cursor": "a"}),
    )
    fake.on("GET", "/v1/functions/hello", reply(200, function(live_version=2, warm_instances=1)))
    fake.on_call("PATCH", "/v1/functions/hello", lambda r: reply(200, function(**body(r))))
    fake.on("DELETE", "/v1/functions/hello", reply(204), error(404, "app_not_found", "app function hello not found"))
    with make(fake) as c:
        assert [f.name for f in c.functions.list(limit=1)] == ["a", "b"]
        assert [query(r) for r in fake.calls("GET", "/v1/functions")] == [{"limit": "1"}, {"limit": "1", "cursor": "a"}]
        page = c.functions.list(cursor="a").first_page()
        assert [f.id for f in page.data] == ["app-f2"] and page.next_cursor is None
        got = c.functions.get("hello")
        assert (got.live_version, got.warm_instances) == (2, 1)
        u = c.functions.update("hello", timeout_seconds=120, public=True)
        assert (u.timeout_seconds, u.public) == (120, True)
        c.functions.update("hello", concurrency=8, max_instances=2, idle_seconds=30)
        c.functions.update("hello", public=False)
        assert c.functions.delete("hello") is True
        assert c.functions.delete("hello") is False
    assert [body(r) for r in fake.calls("PATCH", "/v1/functions/hello")] == [
        {"timeout_seconds": 120, "public": True},
        {"concurrency": 8, "max_instances": 2, "idle_seconds": 30},
        {"public": False},
    ]


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (404, "app_not_found", AppNotFoundError),
        (404, "not_found", NotFoundError),
        (409, "conflict", ConflictError),
        (422, "invalid_argument", InvalidArgumentError),
    ],
)
def test_function_error_codes_map_to_classes(fake, status, code, cls):
    fake.on("GET", "/v1/functions/nope", error(status, code, f"{code} here"))
    fake.on("POST", "/v1/functions/nope/invoke", error(status, code, f"{code} here"))
    with make(fake) as c:
        with pytest.raises(cls) as ei:
            c.functions.get("nope")
        with pytest.raises(cls):
            c.functions.invoke("nope", {})
    assert ei.value.code == code and ei.value.status == status
    if status == 404:
        assert isinstance(ei.value, NotFoundError)


def test_versions_get_version_logs_and_rollback(fake):
    fake.on_call(
        "POST", "/v1/functions/hello/versions", lambda r: reply(202, version("queued", 3, handler=(body(r) or {}).get("handler")))
    )
    fake.on_call(
        "GET",
        "/v1/functions/hello/versions",
        lambda r: reply(200, {"data": [version("standby", 1)], "next_cursor": None})
        if query(r).get("cursor") == "c2"
        else reply(200, {"data": [version("live", 2)], "next_cursor": "c2"}),
    )
    fake.on("GET", "/v1/functions/hello/versions/2", reply(200, version("live", 2, phases_ms={"install": 900, "bake": 1200})))
    fake.on("GET", "/v1/functions/hello/versions/9", error(404, "not_found", "version 9 of hello not found"))
    fake.on(
        "GET", "/v1/functions/hello/versions/2/logs", reply(200, b"installing six\nimported main.handler\n", {"Content-Type": "text/plain"})
    )
    fake.on("POST", "/v1/functions/hello/rollback", reply(200, version("live", 1)))
    with make(fake) as c:
        v = c.functions.create_version("hello", files={"main.py": MAIN_PY}, dependencies="six\n", env={"B": "2"})
        assert isinstance(v, FunctionVersion) and (v.version, v.state, v.active) == (3, "queued", True)
        assert c.functions.create_version("hello", handler="main.other").handler == "main.other"
        c.functions.create_version("hello")  # the same source again
        c.functions.create_version("hello", git={"url": "https://git.example/fn.git"}, secrets={})
        with pytest.raises(InvalidArgumentError):
            c.functions.create_version("hello", ref="main")
        assert [(x.version, x.state) for x in c.functions.versions("hello", limit=1)] == [(2, "live"), (1, "standby")]
        assert query(fake.calls("GET", "/v1/functions/hello/versions")[0]) == {"limit": "1"}
        g = c.functions.get_version("hello", 2)
        assert (g.state, g.phases_ms, g.active) == ("live", {"install": 900, "bake": 1200}, False)
        with pytest.raises(NotFoundError):
            c.functions.get_version("hello", 9)
        for bad in (0, -1, "2", True):
            with pytest.raises(InvalidArgumentError):
                c.functions.get_version("hello", bad)  # type: ignore[arg-type]
        assert c.functions.version_logs("hello", 2) == "installing six\nimported main.handler\n"
        assert c.functions.rollback("hello").version == 1
        c.functions.rollback("hello", 1)
    assert [body(r) for r in fake.calls("POST", "/v1/functions/hello/versions")] == [
        {"files": {"main.py": MAIN_PY}, "dependencies": "six\n", "env": {"B": "2"}},
        {"handler": "main.other"},
        {},
        {"git": {"url": "https://git.example/fn.git"}, "secrets": {}},
    ]
    logs = fake.calls("GET", "/v1/functions/hello/versions/2/logs")[0]
    assert "text/plain" in logs["headers"]["accept"]
    assert [body(r) for r in fake.calls("POST", "/v1/functions/hello/rollback")] == [{}, {"version": 1}]


def test_wait_for_version_polls_until_the_build_ends_and_times_out(fake):
    fake.on("POST", "/v1/functions/hello/versions", reply(202, version("queued", 2)))
    fake.on(
        "GET",
        "/v1/functions/hello/versions/2",
        reply(200, version("building", 2)),
        reply(200, version("baking", 2)),
        reply(200, version("failed", 2, error="ModuleNotFoundError: No module named 'six'")),
    )
    fake.on("GET", "/v1/functions/hello/versions/3", reply(200, version("checking", 3)))
    with make(fake) as c:
        v = c.functions.create_version("hello", files={"main.py": MAIN_PY}, wait=True, timeout=30)
        assert (v.state, v.error, v.active) == ("failed", "ModuleNotFoundError: No module named 'six'", False)
        assert len(fake.calls("GET", "/v1/functions/hello/versions/2")) == 3
        assert c.functions.wait_for_version("hello", 2).state == "failed"
        with pytest.raises(FunctionVersionTimeoutError) as ei:
            c.functions.wait_for_version("hello", 3, timeout=0.3)
    e = ei.value
    assert isinstance(e, PandaStackError) and e.code == "function_version_timeout"
    assert e.version.version == 3 and e.version.state == "checking"
    assert "version 3 of function hello" in str(e)


def test_invoke_sends_any_json_event_and_returns_errors_as_data(fake):
    def answer(r):
        event = json.loads(r["body"]) if r["body"] else None
        if isinstance(event, dict) and event.get("fail"):
            return reply(
                200,
                outcome(
                    "error",
                    error={"type": "ValueError", "message": "asked to fail", "traceback": "Traceback ...\nValueError: asked to fail\n"},
                    stderr="oops\n",
                ),
            )
        if isinstance(event, dict) and event.get("sleep"):
            return reply(200, outcome("timeout", error={"type": "Timeout", "message": "past 1 s", "traceback": ""}))
        return reply(200, outcome(result={"echo": event}, stdout="got it\n", cold=True, duration_ms=2))

    fake.on_call("POST", "/v1/functions/hello/invoke", answer)
    fake.on("POST", "/v1/functions/idle/invoke", error(409, "conflict", "function idle has no live version"))
    with make(fake) as c:
        r = c.functions.invoke("hello", {"name": "x"})
        assert isinstance(r, Invocation) and r.ok
        assert (r.status, r.result, r.error, r.stdout, r.cold, r.version, r.duration_ms) == (
            "ok",
            {"echo": {"name": "x"}},
            None,
            "got it\n",
            True,
            1,
            2.0,
        )
        assert isinstance(r.duration_ms, float)
        assert c.functions.invoke("hello", [1, 2]).result == {"echo": [1, 2]}
        assert c.functions.invoke("hello", "plain words").result == {"echo": "plain words"}
        assert c.functions.invoke("hello", 42).result == {"echo": 42}
        assert c.functions.invoke("hello").result == {"echo": None}
        failed = c.functions.invoke("hello", {"fail": True})
        assert not failed.ok and failed.status == "error" and failed.result is None
        assert failed.error == InvocationError("ValueError", "asked to fail", "Traceback ...\nValueError: asked to fail\n")
        assert failed.stderr == "oops\n"
        slow = c.functions.invoke("hello", {"sleep": 5})
        assert (slow.status, slow.error.type) == ("timeout", "Timeout")  # type: ignore[union-attr]
        with pytest.raises(ConflictError):
            c.functions.invoke("idle", {})
    sent = fake.calls("POST", "/v1/functions/hello/invoke")
    assert [body(r) for r in sent[:4]] == [{"name": "x"}, [1, 2], "plain words", 42]
    assert sent[0]["headers"]["content-type"] == "application/json"
    assert sent[4]["body"] == b"", "no event: no body (the server reads it as null)"


def test_submit_queues_a_call_and_get_invocation_fetches_it(fake):
    fake.on_call(
        "POST",
        "/v1/functions/hello/invoke",
        lambda r: reply(202, outcome("queued", id="inv-1", version=None, duration_ms=None, attempts=0, created_at="t")),
    )
    fake.on(
        "GET",
        "/v1/functions/hello/invocations/inv-1",
        reply(200, outcome("running", id="inv-1", attempts=1)),
        reply(200, outcome("ok", id="inv-1", result=[1, 2], attempts=2, finished_at="t2")),
    )
    fake.on("GET", "/v1/functions/hello/invocations/nope", error(404, "not_found", "invocation nope not found"))
    with make(fake) as c:
        q = c.functions.submit("hello", {"n": 1})
        assert (q.id, q.status, q.ok, q.attempts, q.version) == ("inv-1", "queued", False, 0, None)
        c.functions.submit("hello", retries=5)
        assert c.functions.get_invocation("hello", "inv-1").status == "running"
        done = c.functions.get_invocation("hello", "inv-1")
        assert (done.ok, done.result, done.attempts, done.finished_at) == (True, [1, 2], 2, "t2")
        with pytest.raises(NotFoundError):
            c.functions.get_invocation("hello", "nope")
        with pytest.raises(InvalidArgumentError):
            c.functions.get_invocation("hello", "")
    first, second = fake.calls("POST", "/v1/functions/hello/invoke")
    assert (query(first), body(first)) == ({"async": "1"}, {"n": 1})
    assert (query(second), second["body"]) == ({"async": "1", "retries": "5"}, b"")


def test_invoke_is_not_retried_after_a_502_but_after_a_429(fake):
    fake.on(
        "POST",
        "/v1/functions/hello/invoke",
        error(429, "rate_limited", "slow down", {"Retry-After": "0"}),
        error(502, "bad_gateway", "the instance went away"),
        reply(200, outcome(result=1)),
    )
    with PandaStack(api_key="pds_test", base_url=fake.url, max_retries=3) as c:
        with pytest.raises(PandaStackError) as ei:
            c.functions.invoke("hello", {})
    assert ei.value.status == 502
    assert len(fake.calls("POST", "/v1/functions/hello/invoke")) == 2, "429 retried, 502 not: the handler may have run"


def test_invoke_and_deletes_get_long_http_timeouts():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[(request.method, request.url.path)] = request.extensions["timeout"]["read"]
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json=outcome())

    http = httpx.Client(transport=httpx.MockTransport(handler))
    with PandaStack(api_key="pds_test", base_url="http://fake", http_client=http, max_retries=0) as c:
        c.functions.invoke("hello", {})
        c.functions.invoke("quick", {}, timeout=5)
        c.functions.delete("hello")
    assert seen[("POST", "/v1/functions/hello/invoke")] >= 900, "a call may run 900 s"
    assert seen[("POST", "/v1/functions/quick/invoke")] == 5
    assert seen[("DELETE", "/v1/functions/hello")] >= 120


def test_async_functions(fake):
    fake.on("POST", "/v1/functions", reply(201, function()))
    fake.on("GET", "/v1/functions", reply(200, {"data": [function()], "next_cursor": None}))
    fake.on("PATCH", "/v1/functions/hello", reply(200, function(public=True)))
    fake.on("POST", "/v1/functions/hello/versions", reply(202, version("queued", 2)))
    fake.on("GET", "/v1/functions/hello/versions", reply(200, {"data": [version("queued", 2)], "next_cursor": None}))
    fake.on("GET", "/v1/functions/hello/versions/2", reply(200, version("building", 2)), reply(200, version("live", 2)))
    fake.on("GET", "/v1/functions/hello/versions/2/logs", reply(200, b"built\n", {"Content-Type": "text/plain"}))
    fake.on("POST", "/v1/functions/hello/rollback", reply(200, version("live", 1)))
    fake.on("POST", "/v1/functions/hello/invoke", reply(200, outcome(result={"n": 1})))
    fake.on("GET", "/v1/functions/gone", error(404, "app_not_found", "app function gone not found"))
    fake.on("DELETE", "/v1/functions/hello", reply(204))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            f = await c.functions.create("hello", "python", "main.handler", files={"main.py": MAIN_PY})
            assert f.name == "hello"
            with pytest.raises(InvalidArgumentError):
                await c.functions.create("hello", "python", "main.handler")
            assert [x.name async for x in c.functions.list()] == ["hello"]
            assert (await c.functions.update("hello", public=True)).public is True
            v = await c.functions.create_version("hello", files={"main.py": MAIN_PY}, wait=True, timeout=30)
            assert v.state == "live"
            assert [x.version async for x in c.functions.versions("hello")] == [2]
            assert await c.functions.version_logs("hello", 2) == "built\n"
            assert (await c.functions.rollback("hello")).version == 1
            r = await c.functions.invoke("hello", {"n": 1})
            assert r.ok and r.result == {"n": 1}
            assert (await c.functions.submit("hello", {"n": 1})).ok
            with pytest.raises(AppNotFoundError):
                await c.functions.get("gone")
            assert await c.functions.delete("hello") is True

    asyncio.run(main())
    assert body(fake.calls("POST", "/v1/functions/hello/invoke")[0]) == {"n": 1}
