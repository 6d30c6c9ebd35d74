"""Retries, error mapping, configuration and SSE decoding against a fake local HTTP server (no
PandaStack server needed)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from fakeserver import SANDBOX, FakeServer, error, reply
from pandastack import (
    APIConnectionError,
    AsyncPandaStack,
    AuthenticationError,
    CodeContext,
    CommandExitError,
    CommandTimeoutError,
    ConflictError,
    Execution,
    ExecutionError,
    ExitEvent,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    PandaStackError,
    LimitReachedError,
    RateLimitError,
    Result,
    SandboxNotFoundError,
    SandboxStateError,
    ServerError,
    StderrEvent,
    StdoutEvent,
    StreamError,
)
from pandastack._base import SSEDecoder, parse_retry_after

pytestmark = pytest.mark.offline


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer, **kw) -> PandaStack:
    c = PandaStack(api_key="pds_test", base_url=fake.url, **kw)
    c._cfg.initial_backoff = 0.01
    return c


def test_503_with_retry_after_zero_is_retried(fake):
    fake.on(
        "GET",
        "/v1/sandboxes/sb-fake",
        error(503, "unavailable", "busy", {"Retry-After": "0"}),
        reply(200, SANDBOX),
    )
    with make(fake) as c:
        t = time.monotonic()
        sb = c.sandboxes.get("sb-fake")
        assert time.monotonic() - t < 2
    assert sb.id == "sb-fake" and sb.state == "running"
    assert len(fake.calls("GET", "/v1/sandboxes/sb-fake")) == 2
    assert fake.requests[0]["headers"]["authorization"] == "Bearer pds_test"


def test_create_retry_reuses_idempotency_key(fake):
    fake.on(
        "POST",
        "/v1/sandboxes",
        error(503, "unavailable", "busy", {"Retry-After": "0"}),
        error(502, "bad_gateway", "proxy"),
        reply(201, SANDBOX),
    )
    with make(fake) as c:
        sb = c.sandboxes.create(template="minimal", metadata={"a": "b"}, ttl_seconds=60)
    calls = fake.calls("POST", "/v1/sandboxes")
    assert sb.id == "sb-fake" and len(calls) == 3
    keys = {r["headers"].get("idempotency-key") for r in calls}
    assert len(keys) == 1 and None not in keys and len(keys.pop()) == 36
    assert json.loads(calls[0]["body"]) == {
        "template": "minimal",
        "ttl_seconds": 60,
        "metadata": {"a": "b"},
    }


def test_create_sends_disk_limits_and_the_sandbox_shows_them(fake):
    fake.on(
        "POST",
        "/v1/sandboxes",
        reply(201, {**SANDBOX, "disk_mbps": 10, "disk_iops": 4096}),
    )
    with make(fake) as c:
        sb = c.sandboxes.create(template="minimal", disk_mbps=10)
    (call,) = fake.calls("POST", "/v1/sandboxes")
    assert json.loads(call["body"]) == {"template": "minimal", "disk_mbps": 10}
    assert (sb._info.disk_mbps, sb._info.disk_iops) == (10, 4096)


def test_each_create_gets_a_fresh_idempotency_key(fake):
    fake.on("POST", "/v1/sandboxes", reply(201, SANDBOX))
    with make(fake) as c:
        c.sandboxes.create()
        c.sandboxes.create(idempotency_key="mine")
    k1, k2 = (r["headers"]["idempotency-key"] for r in fake.calls("POST", "/v1/sandboxes"))
    assert k1 != "mine" and k2 == "mine"


def test_429_maps_to_rate_limit_error_after_retries(fake):
    fake.on(
        "POST",
        "/v1/sandboxes",
        error(429, "rate_limited", "workspace create rate reached", {"Retry-After": "0"}),
    )
    with make(fake, max_retries=2) as c:
        with pytest.raises(RateLimitError) as ei:
            c.sandboxes.create()
    e = ei.value
    assert isinstance(e, PandaStackError)
    assert e.status == 429 and e.code == "rate_limited" and e.retry_after == 0
    assert e.request_id == "req_fake_429" and "create rate" in e.message
    assert len(fake.calls("POST", "/v1/sandboxes")) == 3


def test_limit_reached_is_a_rate_limit_error_and_not_retried(fake):
    p = "/v1/sandboxes/sb-fake/snapshots"
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", p, error(429, "limit_reached", "workspace limit of 2 snapshots reached"))
    with make(fake, max_retries=2) as c:
        sb = c.sandboxes.get("sb-fake")
        with pytest.raises(LimitReachedError) as ei:
            sb.snapshot()
    assert isinstance(ei.value, RateLimitError)
    assert ei.value.code == "limit_reached" and "2 snapshots" in ei.value.message
    # It lasts until something is deleted: asked once.
    assert len(fake.calls("POST", p)) == 1


def test_long_retry_after_is_not_waited_for(fake):
    fake.on("GET", "/v1/sandboxes", error(429, "rate_limited", "slow down", {"Retry-After": "3600"}))
    with make(fake) as c:
        t = time.monotonic()
        with pytest.raises(RateLimitError) as ei:
            c.sandboxes.list().to_list()
        assert time.monotonic() - t < 2
    assert ei.value.retry_after == 3600
    assert len(fake.calls("GET", "/v1/sandboxes")) == 1


def test_429_on_exec_is_retried_but_503_is_not(fake):
    p = "/v1/sandboxes/sb-fake/exec"
    ok = {"stdout": "hi\n", "stderr": "", "exit_code": 0, "timed_out": False, "truncated": False, "duration_ms": 3}
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", p, error(429, "rate_limited", "later", {"Retry-After": "0"}), reply(200, ok))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        assert sb.exec("echo hi").stdout == "hi\n"
        assert len(fake.calls("POST", p)) == 2
        fake.on("POST", p, error(503, "unavailable", "guest: gone", {"Retry-After": "0"}), reply(200, ok))
        with pytest.raises(ServerError) as ei:
            sb.exec("echo hi")
        assert ei.value.status == 503
        # The command may have run: never re-sent.
        assert len(fake.calls("POST", p)) == 3


def test_backoff_grows_without_retry_after(fake):
    fake.on("GET", "/v1/templates", error(503, "unavailable", "x"), error(503, "unavailable", "x"), reply(200, {"data": [], "next_cursor": None}))
    c = PandaStack(api_key="pds_test", base_url=fake.url)
    c._cfg.initial_backoff = 0.2
    t = time.monotonic()
    assert c.templates.list() == []
    # 0.1-0.2 s then 0.2-0.4 s
    assert 0.3 <= time.monotonic() - t < 3
    c.close()


def test_connection_refused_is_retried_then_raised():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = PandaStack(api_key="pds_test", base_url=f"http://127.0.0.1:{port}", max_retries=2)
    c._cfg.initial_backoff = 0.01
    with pytest.raises(APIConnectionError) as ei:
        c.sandboxes.get("sb-x")
    assert ei.value.code == "connection_error" and ei.value.status is None
    assert c.health() is False


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (401, "unauthorized", AuthenticationError),
        (404, "sandbox_not_found", SandboxNotFoundError),
        (404, "not_found", NotFoundError),
        (409, "sandbox_state", SandboxStateError),
        (409, "conflict", ConflictError),
        (400, "invalid_json", InvalidArgumentError),
        (413, "payload_too_large", InvalidArgumentError),
        (422, "invalid_argument", InvalidArgumentError),
        (500, "internal", ServerError),
    ],
)
def test_error_envelope_mapping(fake, status, code, cls):
    fake.on("GET", "/v1/sandboxes/sb-fake", error(status, code, f"msg {code}"))
    with make(fake, max_retries=0) as c:
        with pytest.raises(cls) as ei:
            c.sandboxes.get("sb-fake")
    e = ei.value
    assert (e.status, e.code, e.message, e.request_id) == (status, code, f"msg {code}", f"req_fake_{status}")
    assert code in str(e) and f"req_fake_{status}" in str(e)


def test_non_json_error_body(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(502, b"<html>bad gateway</html>", {"X-Request-Id": "r1"}))
    with make(fake, max_retries=0) as c:
        with pytest.raises(ServerError) as ei:
            c.sandboxes.get("sb-fake")
    assert ei.value.code == "http_502" and "bad gateway" in ei.value.message and ei.value.request_id == "r1"


def test_config_from_env(monkeypatch, fake):
    monkeypatch.delenv("PANDASTACK_API_KEY", raising=False)
    monkeypatch.setenv("PANDASTACK_TOKEN", "pds_from_token_env")
    monkeypatch.setenv("PANDASTACK_BASE_URL", fake.url + "/")
    fake.on("GET", "/v1/health", reply(200, b"ok"))
    c = PandaStack()
    assert c.base_url == fake.url and c.health()
    assert fake.requests[-1]["headers"]["authorization"] == "Bearer pds_from_token_env"
    monkeypatch.setenv("PANDASTACK_API_KEY", "pds_key_env")
    PandaStack().health()
    assert fake.requests[-1]["headers"]["authorization"] == "Bearer pds_key_env"
    assert PandaStack(token="pds_explicit")._cfg.api_key == "pds_explicit"


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("PANDASTACK_API_KEY", raising=False)
    monkeypatch.delenv("PANDASTACK_TOKEN", raising=False)
    with pytest.raises(AuthenticationError, match="PANDASTACK_API_KEY"):
        PandaStack()
    monkeypatch.delenv("PANDASTACK_BASE_URL", raising=False)
    assert PandaStack(api_key="pds_x").base_url == "http://localhost:8080"


def test_list_pagination_follows_cursors(fake):
    pages = {
        "": {"data": [dict(SANDBOX, id="sb-1")], "next_cursor": "c1"},
        "c1": {"data": [dict(SANDBOX, id="sb-2")], "next_cursor": "c2"},
        "c2": {"data": [dict(SANDBOX, id="sb-3")], "next_cursor": None},
    }

    def page(rec):
        q = dict(kv.split("=", 1) for kv in rec["query"].split("&") if kv)
        assert q["limit"] == "1" and q["metadata.task"] == "x" and q["state"] == "running"
        return reply(200, pages[q.get("cursor", "")])

    fake.on_call("GET", "/v1/sandboxes", page)
    with make(fake) as c:
        it = c.sandboxes.list(limit=1, metadata={"task": "x"}, state="running")
        assert [s.id for s in it] == ["sb-1", "sb-2", "sb-3"]
        assert [len(p.data) for p in it.pages()] == [1, 1, 1]


SSE = (
    b": keep-alive\n\n"
    b"event: stdout\ndata: {\"data\":\"hel\"}\n\n"
    b"event: stderr\r\ndata: {\"data\":\"oops\\n\"}\r\n\r\n"
    b"event: stdout\ndata: {\"data\":\"lo\\n\"}\n\n"
    b"event: exit\ndata: {\"exit_code\":3,\"timed_out\":false,\"truncated\":false,\"duration_ms\":12}\n\n"
)


def test_exec_stream_events_and_callbacks(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", "/v1/sandboxes/sb-fake/exec/stream", reply(200, SSE, {"Content-Type": "text/event-stream"}))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        events = list(sb.exec_stream("x"))
        assert events == [
            StdoutEvent("hel"), StderrEvent("oops\n"), StdoutEvent("lo\n"),
            ExitEvent(exit_code=3, duration_ms=12),
        ]
        out, err = [], []
        r = sb.exec("x", on_stdout=out.append, on_stderr=err.append)
        assert (r.stdout, r.stderr, r.exit_code, out, err) == ("hello\n", "oops\n", 3, ["hel", "lo\n"], ["oops\n"])
        with pytest.raises(CommandExitError) as ei:
            sb.exec("x", on_stdout=lambda s: None, check=True)
        assert ei.value.exit_code == 3 and ei.value.result.stdout == "hello\n"


def test_exec_stream_error_and_truncated_stream(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on(
        "POST",
        "/v1/sandboxes/sb-fake/exec/stream",
        reply(200, b"event: stdout\ndata: {\"data\":\"a\"}\n\nevent: error\ndata: {\"message\":\"guest went away\"}\n\n"),
        reply(200, b"event: stdout\ndata: {\"data\":\"a\"}\n\n"),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        with pytest.raises(StreamError, match="guest went away"):
            list(sb.exec_stream("x"))
        with pytest.raises(StreamError, match="without an exit"):
            sb.exec("x", on_stdout=print)


def test_timed_out_result_and_check(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    res = {"stdout": "", "stderr": "", "exit_code": -1, "timed_out": True, "truncated": False, "duration_ms": 1000}
    fake.on("POST", "/v1/sandboxes/sb-fake/exec", reply(200, res))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        r = sb.exec(["sleep", "5"], timeout_seconds=1)
        assert r.timed_out and not r.ok
        with pytest.raises(CommandTimeoutError) as ei:
            sb.exec(["sleep", "5"], timeout_seconds=1, check=True)
        assert ei.value.result is not None and ei.value.result.timed_out
    body = json.loads(fake.calls("POST", "/v1/sandboxes/sb-fake/exec")[0]["body"])
    assert body == {"argv": ["sleep", "5"], "timeout_seconds": 1}


def test_http_timeout_of_exec_is_command_timeout(fake):
    def slow(rec):
        time.sleep(1.5)
        return reply(200, {"stdout": "", "stderr": "", "exit_code": 0})

    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on_call("POST", "/v1/sandboxes/sb-fake/exec", slow)
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        with pytest.raises(CommandTimeoutError):
            sb.exec("sleep 100", request_timeout=0.5)
    assert len(fake.calls("POST", "/v1/sandboxes/sb-fake/exec")) == 1


def test_sse_decoder_multiline_and_comments():
    d = SSEDecoder()
    out = [d.feed(x) for x in [": c", "event: a", "data: 1", "data: 2", "", "data: x", ""]]
    assert [o for o in out if o] == [("a", "1\n2"), ("message", "x")]
    assert parse_retry_after("2") == 2 and parse_retry_after("junk") is None
    assert 0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.0


def test_async_retry_and_errors(fake):
    fake.on(
        "GET",
        "/v1/sandboxes/sb-fake",
        error(503, "unavailable", "busy", {"Retry-After": "0"}),
        reply(200, SANDBOX),
    )
    fake.on("POST", "/v1/sandboxes/sb-fake/exec/stream", reply(200, SSE))
    fake.on("DELETE", "/v1/sandboxes/sb-fake", error(404, "sandbox_not_found", "gone"))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as c:
            c._cfg.initial_backoff = 0.01
            sb = await c.sandboxes.get("sb-fake")
            seen = []

            async def cb(s):
                seen.append(s)

            r = await sb.exec("x", on_stdout=cb)
            evs = [e async for e in sb.exec_stream("x")]
            assert await sb.kill() is False
            return sb, r, seen, evs

    sb, r, seen, evs = asyncio.run(main())
    assert sb.id == "sb-fake" and len(fake.calls("GET", "/v1/sandboxes/sb-fake")) == 2
    assert r.stdout == "hello\n" and r.exit_code == 3 and seen == ["hel", "lo\n"]
    assert evs[-1] == ExitEvent(exit_code=3, duration_ms=12)


def test_upload_is_retried_with_a_fresh_file_but_streams_are_not(fake, tmp_path):
    p = "/v1/sandboxes/sb-fake/fs"
    data = bytes(range(256)) * 1000
    src = tmp_path / "f.bin"
    src.write_bytes(data)
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on(
        "PUT",
        p,
        error(503, "unavailable", "busy", {"Retry-After": "0"}),
        reply(200, {"path": "/tmp/f.bin", "bytes_written": len(data)}),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        assert sb.files.upload(src, "/tmp/f.bin").bytes_written == len(data)
        puts = fake.calls("PUT", p)
        assert len(puts) == 2 and puts[0]["body"] == data and puts[1]["body"] == data
        assert puts[1]["query"] == "path=%2Ftmp%2Ff.bin"
        assert puts[1]["headers"]["content-length"] == str(len(data))
        fake.on(
            "PUT",
            p,
            error(503, "unavailable", "busy", {"Retry-After": "0"}),
            reply(200, {"path": "/tmp/g", "bytes_written": 3}),
        )
        with pytest.raises(ServerError):
            sb.files.write("/tmp/g", iter([b"a", b"bc"]))
        assert len(fake.calls("PUT", p)) == 3


def test_logs_plain_and_follow(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))

    def logs(rec):
        if "follow=1" in rec["query"]:
            return reply(200, (
                b"event: log\ndata: {\"data\":\"boot \\u2713\\n\"}\n\n: keep-alive\n\n"
                b"event: log\ndata: {\"data\":\"more\"}\n\n"
                b"event: end\ndata: {\"reason\":\"deleted\"}\n\n"
            ), {"Content-Type": "text/event-stream"})
        return reply(200, b"boot \xe2\x9c\x93\nmore", {"Content-Type": "text/plain"})

    fake.on_call("GET", "/v1/sandboxes/sb-fake/logs", logs)
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        assert sb.logs() == "boot ✓\nmore"
        assert list(sb.logs_stream()) == ["boot ✓\n", "more"]

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as ac:
            asb = await ac.sandboxes.get("sb-fake")
            return [x async for x in asb.logs_stream()]

    assert asyncio.run(main()) == ["boot ✓\n", "more"]


# ---------------------------------------------------------------- code interpreter

CODE_RESULT = {
    "stdout": "hi\n",
    "stderr": "",
    "results": [{"text": "<Chart>", "html": "<b>c</b>", "png": "iVBORw0KGgo=", "json": {"a": [1]}}, {"text": "42"}],
    "error": None,
    "truncated": False,
    "duration_ms": 7,
}

CODE_SSE = (
    b": keep-alive\n\n"
    b"event: stdout\ndata: {\"data\":\"hel\"}\n\n"
    b"event: stderr\r\ndata: {\"data\":\"warn\\n\"}\r\n\r\n"
    b"event: stdout\ndata: {\"data\":\"lo\\n\"}\n\n"
    b"event: result\ndata: {\"text\":\"42\"}\n\n"
    b"event: error\ndata: {\"name\":\"ValueError\",\"value\":\"bad\",\"traceback\":\"tb\"}\n\n"
    b"event: brand_new\ndata: {}\n\n"
    b"event: done\ndata: {\"duration_ms\":12,\"truncated\":true}\n\n"
)


def test_run_code_blocking_body_and_result(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", "/v1/sandboxes/sb-fake/code", reply(200, CODE_RESULT))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        r = sb.run_code("x")
        r2 = sb.run_code("y", context=CodeContext(id="ctx-1"), env={"A": 1}, timeout_seconds=1.5)
        sb.run_code("z", context="ctx-2", language=None)
        sb.run_code("echo hi", language="bash")
        with pytest.raises(InvalidArgumentError):
            sb.run_code("z", context=3)  # type: ignore[arg-type]
    assert isinstance(r, Execution) and r == r2
    assert (r.stdout, r.text, r.duration_ms, r.truncated, r.error) == ("hi\n", "42", 7, False, None)
    first = r.results[0]
    assert isinstance(first, Result)
    assert (first.html, first.json, first.svg) == ("<b>c</b>", {"a": [1]}, None)
    assert first.png_bytes() == b"\x89PNG\r\n\x1a\n"
    bodies = [json.loads(x["body"]) for x in fake.calls("POST", "/v1/sandboxes/sb-fake/code")]
    assert bodies == [
        {"code": "x"},
        {"code": "y", "context_id": "ctx-1", "env": {"A": "1"}, "timeout_seconds": 2},
        {"code": "z", "context_id": "ctx-2"},
        {"code": "echo hi", "language": "bash"},
    ]
    assert Execution.from_json({"results": [], "error": {"name": "E"}}).error == ExecutionError("E")
    assert Execution.from_json({}).text is None


def test_run_code_streams_to_callbacks(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on(
        "POST",
        "/v1/sandboxes/sb-fake/code/stream",
        reply(200, CODE_SSE, {"Content-Type": "text/event-stream"}),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        seen = []
        r = sb.run_code(
            "x",
            on_stdout=lambda s: seen.append(("out", s)),
            on_stderr=lambda s: seen.append(("err", s)),
            on_result=lambda x: seen.append(("result", x.text)),
            on_error=lambda e: seen.append(("error", e.name)),
        )
        only_result = []
        r2 = sb.run_code("x", on_result=only_result.append)
    assert seen == [("out", "hel"), ("err", "warn\n"), ("out", "lo\n"), ("result", "42"), ("error", "ValueError")]
    assert (r.stdout, r.stderr, r.text, r.truncated, r.duration_ms) == ("hello\n", "warn\n", "42", True, 12)
    assert r.error == ExecutionError("ValueError", "bad", "tb")
    assert r2 == r and [x.text for x in only_result] == ["42"]
    assert fake.requests[-1]["headers"]["accept"] == "text/event-stream"


def test_run_code_missing_context_and_broken_stream(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", "/v1/sandboxes/sb-fake/code", error(404, "not_found", "code context ctx-x not found"))
    fake.on(
        "POST",
        "/v1/sandboxes/sb-fake/code/stream",
        reply(200, b"event: error\ndata: {\"name\":\"ContextNotFound\",\"value\":\"ctx-x\",\"traceback\":\"\"}\n\nevent: done\ndata: {}\n\n"),
        reply(200, b"event: stdout\ndata: {\"data\":\"a\"}\n\n"),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        with pytest.raises(NotFoundError, match="ctx-x"):
            sb.run_code("1", context="ctx-x")
        with pytest.raises(NotFoundError, match="ctx-x") as ei:
            sb.run_code("1", context="ctx-x", on_stdout=print)
        assert ei.value.code == "not_found"
        with pytest.raises(StreamError, match="without a done"):
            sb.run_code("1", on_stdout=lambda s: None)
        # A run is not retried on 503 (the code may have run), like exec.
        fake.on("POST", "/v1/sandboxes/sb-fake/code", error(503, "unavailable", "guest"), reply(200, CODE_RESULT))
        with pytest.raises(ServerError):
            sb.run_code("1")
    assert len(fake.calls("POST", "/v1/sandboxes/sb-fake/code")) == 2


def test_code_contexts_and_async_run_code(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("POST", "/v1/sandboxes/sb-fake/code/contexts", reply(201, {"id": "ctx-9", "language": "python"}))
    fake.on("DELETE", "/v1/sandboxes/sb-fake/code/contexts/ctx-9", reply(204))
    fake.on("POST", "/v1/sandboxes/sb-fake/code", reply(200, CODE_RESULT))
    fake.on("POST", "/v1/sandboxes/sb-fake/code/stream", reply(200, CODE_SSE))
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        ctx = sb.create_code_context(env={"K": "v"})
        assert ctx == CodeContext(id="ctx-9", language="python")
        sb.delete_code_context(ctx)
        sb.delete_code_context("ctx-9")
    assert json.loads(fake.calls("POST", "/v1/sandboxes/sb-fake/code/contexts")[0]["body"]) == {
        "language": "python",
        "env": {"K": "v"},
    }
    assert len(fake.calls("DELETE", "/v1/sandboxes/sb-fake/code/contexts/ctx-9")) == 2

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as ac:
            asb = await ac.sandboxes.get("sb-fake")
            actx = await asb.create_code_context()
            r = await asb.run_code("x", context=actx)
            seen = []

            async def on_result(x):
                seen.append(x.text)

            streamed = await asb.run_code("x", on_result=on_result, on_stdout=seen.append)
            await asb.delete_code_context(actx)
            return actx, r, streamed, seen

    actx, r, streamed, seen = asyncio.run(main())
    assert actx.id == "ctx-9" and r.text == "42"
    assert streamed.stdout == "hello\n" and seen == ["hel", "lo\n", "42"]


# ---------------------------------------------------------------- WebSocket routes

from fakews import FakeWS  # noqa: E402
from pandastack import AsyncSandbox, Sandbox, SandboxInfo  # noqa: E402


def _b64(s: bytes) -> str:
    import base64

    return base64.b64encode(s).decode()


def _proc_server(conn):
    start = conn.recv_json()
    assert start == {"type": "start", "id": "c1", "argv": ["cat"], "env": {"A": "1"}}, start
    stdin = conn.recv_json()
    assert stdin["type"] == "stdin"
    data = __import__("base64").b64decode(stdin["data"])
    conn.send(9, b"ping!")  # the client must answer pings and carry on
    assert conn.recv() == (0xA, b"ping!")
    # "é" split across two frames; a fragmented text message
    conn.send_json({"type": "stdout", "id": "c1", "data": _b64(data + b"\xc3")})
    frame = json.dumps({"type": "stdout", "id": "c1", "data": _b64(b"\xa9!")}).encode()
    conn.send(1, frame[:10], fin=False)
    conn.send(0, frame[10:])
    conn.send_json({"type": "stderr", "id": "other", "data": _b64(b"not mine")})
    assert conn.recv_json() == {"type": "stdin_close", "id": "c1"}
    conn.send_json({"type": "stderr", "id": "c1", "data": _b64(b"x" * 70000)})
    assert conn.recv_json() == {"type": "kill", "id": "c1"}
    conn.send_json({"type": "exit", "id": "c1", "exit_code": 137, "timed_out": False, "duration_ms": 9})
    op, _ = conn.recv()
    assert op == 8  # the client closes after the exit


def test_spawn_process_over_websocket():
    with FakeWS(_proc_server) as ws:
        c = PandaStack(api_key="pds_ws", base_url=ws.url)
        sb = Sandbox(c, SandboxInfo.from_json(SANDBOX))
        with sb.spawn(["cat"], env={"A": "1"}) as p:
            p.send_stdin("hi ")
            first = next(p)
            assert first == StdoutEvent("hi ")
            assert next(p) == StdoutEvent("é!")
            p.close_stdin()
            assert next(p) == StderrEvent("x" * 70000)
            p.kill()
            res = p.wait()
        assert (res.stdout, res.exit_code, p.exit_code) == ("hi é!", 137, 137)
    assert "GET /v1/sandboxes/sb-fake/exec/ws HTTP/1.1" in ws.requests[0]
    assert "Authorization: Bearer pds_ws" in ws.requests[0]


def test_websocket_handshake_errors_use_the_envelope():
    body = json.dumps({"error": {"code": "sandbox_state", "message": "paused", "request_id": "req_ws"}}).encode()
    with FakeWS(lambda c: None, reject=(409, body)) as ws:
        c = PandaStack(api_key="pds_ws", base_url=ws.url)
        sb = Sandbox(c, SandboxInfo.from_json(SANDBOX))
        with pytest.raises(SandboxStateError) as ei:
            sb.spawn("true")
    assert ei.value.request_id == "req_ws" and ei.value.status == 409


def test_pty_over_websocket():
    def server(conn):
        assert "GET /v1/sandboxes/sb-fake/pty?cols=100&rows=30&cmd=bash HTTP/1.1" in conn.request
        conn.send(2, b"$ ")
        op, data = conn.recv()
        assert (op, data) == (2, b"echo hi\r")
        assert conn.recv_json() == {"type": "resize", "cols": 120, "rows": 40}
        conn.send(2, b"hi\r\n")
        conn.send_json({"type": "exit", "exit_code": 0})
        conn.close()

    with FakeWS(server) as ws:
        c = PandaStack(api_key="pds_ws", base_url=ws.url)
        sb = Sandbox(c, SandboxInfo.from_json(SANDBOX))
        with sb.pty(cols=100, rows=30, cmd="bash") as term:
            assert term.read() == b"$ "
            term.write("echo hi\r")
            term.resize(120, 40)
            assert b"".join(term) == b"hi\r\n"
            assert term.exit_code == 0 and term.wait() == 0


def test_async_spawn_and_pty():
    def server(conn):
        start = conn.recv_json()
        assert start["cmd"] == "cat" and start["timeout_seconds"] == 5
        conn.send_json({"type": "stdout", "id": "c1", "data": _b64(b"out")})
        conn.send_json({"type": "error", "id": "c1", "code": "unavailable", "message": "guest gone"})

    async def main(url):
        async with AsyncPandaStack(api_key="pds_ws", base_url=url) as c:
            sb = AsyncSandbox(c, SandboxInfo.from_json(SANDBOX))
            p = await sb.spawn("cat", timeout_seconds=5)
            ev = await p.__anext__()
            assert ev == StdoutEvent("out")
            with pytest.raises(StreamError, match="guest gone") as ei:
                await p.wait()
            assert ei.value.code == "unavailable"

    with FakeWS(server) as ws:
        asyncio.run(main(ws.url))

    def pty_server(conn):
        conn.send(2, b"ready")
        assert conn.recv() == (2, b"exit\n")
        conn.send_json({"type": "exit", "exit_code": 3})
        conn.close()

    async def pty_main(url):
        async with AsyncPandaStack(api_key="pds_ws", base_url=url) as c:
            sb = AsyncSandbox(c, SandboxInfo.from_json(SANDBOX))
            async with await sb.pty() as term:
                assert await term.read() == b"ready"
                await term.write(b"exit\n")
                return await term.wait()

    with FakeWS(pty_server) as ws:
        assert asyncio.run(pty_main(ws.url)) == 3


PORT_URL = {
    "url": "http://8000-sb-fake.localhost:8081",
    "port": 8000,
    "public": False,
    "token": "0123456789abcdef0123456789abcdef",
}


def test_preview_urls_sync(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("GET", "/v1/sandboxes/sb-fake/ports/8000/url", reply(200, PORT_URL))
    fake.on(
        "PATCH",
        "/v1/sandboxes/sb-fake/ports/8000",
        reply(200, {**PORT_URL, "public": True}),
    )
    sb = make(fake).sandboxes.get("sb-fake")
    assert sb.get_url(8000) == "http://8000-sb-fake.localhost:8081"
    p = sb.get_port(8000)
    assert (p.port, p.public, p.token) == (8000, False, PORT_URL["token"])
    assert sb.set_port_public(8000).public is True
    patch = fake.calls("PATCH", "/v1/sandboxes/sb-fake/ports/8000")[-1]
    assert json.loads(patch["body"]) == {"public": True}
    sb.set_port_public(8000, False)
    assert json.loads(fake.calls("PATCH", "/v1/sandboxes/sb-fake/ports/8000")[-1]["body"]) == {
        "public": False
    }
    # A bad port is refused before any request.
    before = len(fake.requests)
    for bad in (0, 65536, -1, "80", True, 80.0):
        with pytest.raises(InvalidArgumentError):
            sb.get_url(bad)
        with pytest.raises(InvalidArgumentError):
            sb.set_port_public(bad)
    assert len(fake.requests) == before


def test_preview_urls_async(fake):
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on("GET", "/v1/sandboxes/sb-fake/ports/3000/url", reply(200, {**PORT_URL, "port": 3000}))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as c:
            sb = await c.sandboxes.get("sb-fake")
            p = await sb.get_port(3000)
            assert p.port == 3000 and p.url.startswith("http://")
            with pytest.raises(InvalidArgumentError):
                await sb.get_url(0)

    asyncio.run(main())


def test_fork_sends_keep_snapshot_only_when_asked(fake):
    child = {**SANDBOX, "id": "sb-kid", "snapshot_id": "snap-1"}
    fake.on("GET", "/v1/sandboxes/sb-fake", reply(200, SANDBOX))
    fake.on(
        "POST",
        "/v1/sandboxes/sb-fake/fork",
        reply(
            201,
            {"parent_id": "sb-fake", "snapshot_id": "snap-1", "keep_snapshot": False, "children": [child]},
        ),
    )
    with make(fake) as c:
        sb = c.sandboxes.get("sb-fake")
        kid = sb.fork()
        kids = sb.fork(count=1, metadata={"a": "b"}, keep_snapshot=True)
    assert (kid.id, kid.snapshot_id) == ("sb-kid", "snap-1")
    assert [k.id for k in kids] == ["sb-kid"]
    bodies = [json.loads(r["body"]) for r in fake.calls("POST", "/v1/sandboxes/sb-fake/fork")]
    assert bodies == [{"count": 1}, {"count": 1, "metadata": {"a": "b"}, "keep_snapshot": True}]
