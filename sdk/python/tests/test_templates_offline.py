"""Template builds against a fake local HTTP server (no PandaStack server needed): what
``templates.build`` sends (tarball query parameters, content type, streamed bodies; spec JSON),
how it follows a build (log pieces, reconnects, failure, timeout), and the small calls."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import time
from urllib.parse import parse_qs

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    ConflictError,
    InvalidArgumentError,
    PandaStack,
    PandaStackError,
    Template,
    TemplateBuildError,
    TemplateBuildTimeoutError,
    TemplateNotFoundError,
)

pytestmark = pytest.mark.offline

SSE = {"Content-Type": "text/event-stream"}


def tpl(**kw):
    t = {
        "name": "bb",
        "description": "",
        "cpu": 1,
        "memory_mb": 512,
        "disk_mb": 0,
        "state": "queued",
        "bake_ms": None,
        "source": "oci",
        "version": 1,
        "created_at": "2026-01-01T00:00:00Z",
    }
    t.update(kw)
    return t


def sse(*events):
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"], keep_blank_values=True).items()}


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer, **kw) -> PandaStack:
    c = PandaStack(api_key="pds_test", base_url=fake.url, **kw)
    c._cfg.initial_backoff = 0.01
    return c


def test_tarball_path_is_streamed_with_query_and_content_type(fake, tmp_path):
    data = b"not really a tar" * 4096
    src = tmp_path / "image.tar"
    src.write_bytes(data)
    fake.on("POST", "/v1/templates", reply(202, tpl()))
    with make(fake) as c:
        t = c.templates.build(
            "bb", tarball=src, cpu=2, memory_mb=256, disk_mb=1024, description="busy box",
            wait=False,
        )
        c.templates.build("bb", tarball=str(src), wait=False)
    assert isinstance(t, Template) and (t.name, t.state, t.version, t.source) == ("bb", "queued", 1, "oci")
    first, second = fake.calls("POST", "/v1/templates")
    assert query(first) == {
        "name": "bb", "cpu": "2", "memory_mb": "256", "disk_mb": "1024", "description": "busy box",
    }
    assert query(second) == {"name": "bb"}
    for rec in (first, second):
        assert rec["headers"]["content-type"] == "application/x-tar"
        assert rec["headers"]["content-length"] == str(len(data))
        assert rec["body"] == data


def test_tarball_bytes_gzip_file_objects_and_pipes(fake, tmp_path):
    gz = gzip.compress(b"layer" * 100)
    fake.on("POST", "/v1/templates", reply(202, tpl()))
    src = tmp_path / "image.tar.gz"
    src.write_bytes(gz)
    with make(fake) as c:
        c.templates.build("bb", tarball=gz, wait=False)
        c.templates.build("bb", tarball=bytearray(b"plain tar bytes"), wait=False)
        with open(src, "rb") as f:
            f.read(1)  # a file object is sent from where it stands
            c.templates.build("bb", tarball=f, wait=False)
        r, w = os.pipe()
        os.write(w, b"from a pipe")
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            c.templates.build("bb", tarball=pipe, wait=False)
    calls = fake.calls("POST", "/v1/templates")
    assert [x["headers"]["content-type"] for x in calls] == [
        "application/gzip", "application/x-tar", "application/x-tar", "application/x-tar",
    ]
    assert [x["body"] for x in calls] == [gz, b"plain tar bytes", gz[1:], b"from a pipe"]
    assert calls[2]["headers"]["content-length"] == str(len(gz) - 1)
    assert calls[3]["headers"].get("transfer-encoding") == "chunked"


def test_spec_body_and_argument_checks(fake):
    spec = 'name = "tools"\npackages = ["curl"]\n'
    fake.on("POST", "/v1/templates", reply(202, tpl(name="tools", source="spec")))
    with make(fake) as c:
        t = c.templates.build(spec=spec, wait=False)
        c.templates.build("tools", spec=spec, wait=False)
        assert t.source == "spec"
        with pytest.raises(InvalidArgumentError, match="exactly one"):
            c.templates.build("x", wait=False)
        with pytest.raises(InvalidArgumentError, match="exactly one"):
            c.templates.build("x", tarball=b"t", spec=spec, wait=False)
        with pytest.raises(InvalidArgumentError, match="needs the template's name"):
            c.templates.build(tarball=b"t", wait=False)
        with pytest.raises(InvalidArgumentError, match="cpu, memory_mb: only for tarball"):
            c.templates.build(spec=spec, cpu=2, memory_mb=256, wait=False)
    calls = fake.calls("POST", "/v1/templates")
    assert len(calls) == 2  # the refused ones never reached the server
    assert calls[0]["headers"]["content-type"] == "application/json"
    assert json.loads(calls[0]["body"]) == {"spec": spec}
    assert json.loads(calls[1]["body"]) == {"name": "tools", "spec": spec}
    assert calls[0]["query"] == ""


def test_server_refusals_are_typed(fake):
    fake.on(
        "POST",
        "/v1/templates",
        error(422, "invalid_argument", "spec: `setup` is not accepted over the API"),
        error(409, "conflict", "a build of template bb is under way; wait for it to finish"),
        error(413, "payload_too_large", "image tarball larger than this server's limit"),
    )
    with make(fake, max_retries=0) as c:
        with pytest.raises(InvalidArgumentError, match="`setup`"):
            c.templates.build(spec='name = "s"\nsetup = ["id"]\n')
        with pytest.raises(ConflictError, match="under way"):
            c.templates.build("bb", tarball=b"x")
        with pytest.raises(InvalidArgumentError) as ei:
            c.templates.build("bb", tarball=b"x")
    assert ei.value.status == 413
    assert len(fake.calls("POST", "/v1/templates")) == 3
    assert not fake.calls("GET", "/v1/templates/bb/logs")


def test_wait_follows_the_log_and_returns_the_ready_template(fake):
    fake.on("POST", "/v1/templates", reply(202, tpl(version=3)))
    fake.on(
        "GET",
        "/v1/templates/bb/logs",
        reply(200, b": keep-alive\n\n" + sse(
            ("log", {"data": "queued\n"}),
            ("log", {"data": "building \u2713\n"}),
            ("end", {"reason": "ready"}),
        ), SSE),
    )
    ready = tpl(state="ready", version=3, ready_version=3, bake_ms=900, build_ms=1200, image_bytes=4096)
    fake.on("GET", "/v1/templates/bb", reply(200, ready))
    seen = []
    with make(fake) as c:
        t = c.templates.build("bb", tarball=b"tar", on_log=seen.append)
    assert seen == ["queued\n", "building \u2713\n"]
    assert (t.state, t.version, t.ready_version, t.bake_ms, t.build_ms, t.image_bytes) == (
        "ready", 3, 3, 900, 1200, 4096,
    )
    assert t.created_at == "2026-01-01T00:00:00Z" and t.error is None and not t.building
    (logs,) = fake.calls("GET", "/v1/templates/bb/logs")
    assert query(logs) == {"follow": "1", "version": "3"}
    assert logs["headers"]["accept"] == "text/event-stream"


def test_failed_build_raises_template_build_error(fake):
    fake.on("POST", "/v1/templates", reply(202, tpl()))
    fake.on(
        "GET",
        "/v1/templates/bb/logs",
        reply(200, sse(("log", {"data": "failed: build: not a tarball\n"}), ("end", {"reason": "failed"})), SSE),
    )
    fake.on("GET", "/v1/templates/bb", reply(200, tpl(state="failed", error="build: not a tarball")))
    with make(fake) as c:
        with pytest.raises(TemplateBuildError) as ei:
            c.templates.build("bb", tarball=b"junk")
    e = ei.value
    assert isinstance(e, PandaStackError) and not isinstance(e, TemplateBuildTimeoutError)
    assert e.code == "template_build_failed"
    assert e.template.state == "failed" and e.error == "build: not a tarball"
    assert "bb version 1: build failed: build: not a tarball" in str(e)


def test_broken_log_stream_is_reopened_without_repeating_text(fake):
    fake.on("POST", "/v1/templates", reply(202, tpl()))
    fake.on(
        "GET",
        "/v1/templates/bb/logs",
        # cut short (no end event), then the whole log again from the top
        reply(200, sse(("log", {"data": "one\n"}), ("log", {"data": "tw"})), SSE),
        reply(200, sse(("log", {"data": "one\ntwo\n"}), ("log", {"data": "three\n"}), ("end", {"reason": "ready"})), SSE),
    )
    fake.on("GET", "/v1/templates/bb", reply(200, tpl(state="ready", ready_version=1)))
    seen = []
    with make(fake) as c:
        t0 = time.monotonic()
        t = c.templates.build("bb", tarball=b"tar", on_log=seen.append)
        assert time.monotonic() - t0 < 5
    assert "".join(seen) == "one\ntwo\nthree\n"
    assert seen == ["one\n", "tw", "o\n", "three\n"]
    assert t.state == "ready" and len(fake.calls("GET", "/v1/templates/bb/logs")) == 2


def test_timeout_raises_with_the_latest_state(fake):
    def slow_log(rec):
        time.sleep(3)
        return reply(200, sse(("end", {"reason": "ready"})), SSE)

    fake.on("POST", "/v1/templates", reply(202, tpl()))
    fake.on_call("GET", "/v1/templates/bb/logs", slow_log)
    fake.on("GET", "/v1/templates/bb", reply(200, tpl(state="building")))
    with make(fake) as c:
        t0 = time.monotonic()
        with pytest.raises(TemplateBuildTimeoutError) as ei:
            c.templates.build("bb", tarball=b"tar", timeout_seconds=0.5)
        assert time.monotonic() - t0 < 1.5
    e = ei.value
    assert isinstance(e, TemplateBuildError) and e.code == "template_build_timeout"
    assert e.template.state == "building" and "timeout_seconds=0.5" in str(e)


def test_get_logs_bake_delete(fake):
    fake.on("GET", "/v1/templates/bb", reply(200, tpl(state="ready")))
    fake.on("GET", "/v1/templates/nope", error(404, "template_not_found", "template nope not found"))
    fake.on("GET", "/v1/templates/bb/logs", reply(200, b"[ 0.0s] queued\n", {"Content-Type": "text/plain"}))
    fake.on("POST", "/v1/templates/bb/bake", reply(200, tpl(state="ready", bake_ms=1500)))
    fake.on("DELETE", "/v1/templates/bb", reply(204))
    fake.on("DELETE", "/v1/templates/nope", error(404, "template_not_found", "template nope not found"))
    fake.on("DELETE", "/v1/templates/minimal", error(409, "conflict", "minimal is a catalog template"))
    fake.on("GET", "/v1/templates", reply(200, {"data": [
        {"name": "minimal", "description": "d", "cpu": 1, "memory_mb": 512, "disk_mb": 2048, "state": "available", "bake_ms": None},
        tpl(state="ready"),
    ], "next_cursor": None}))
    with make(fake) as c:
        assert c.templates.get("bb").state == "ready"
        with pytest.raises(TemplateNotFoundError):
            c.templates.get("nope")
        assert not fake.calls("GET", "/v1/templates")  # a real GET, not a scan of the list
        cat, built = c.templates.list()
        assert (cat.source, cat.version, built.source, built.version) == ("catalog", None, "oci", 1)
        assert c.templates.logs("bb") == "[ 0.0s] queued\n"
        c.templates.logs("bb", version=2)
        assert c.templates.bake("bb").bake_ms == 1500
        assert c.templates.delete("bb") is True
        assert c.templates.delete("nope") is False
        with pytest.raises(ConflictError):
            c.templates.delete("minimal")
    assert [query(r) for r in fake.calls("GET", "/v1/templates/bb/logs")] == [{}, {"version": "2"}]
    assert len(fake.calls("DELETE", "/v1/templates/nope")) == 1


def test_async_build_wait_failure_and_delete(fake, tmp_path):
    src = tmp_path / "image.tar"
    src.write_bytes(b"tar" * 1000)
    fake.on("POST", "/v1/templates", reply(202, tpl()))
    fake.on(
        "GET",
        "/v1/templates/bb/logs",
        reply(200, sse(("log", {"data": "a"}), ("log", {"data": "b"}), ("end", {"reason": "ready"})), SSE),
        reply(200, sse(("log", {"data": "boom"}), ("end", {"reason": "failed"})), SSE),
    )
    fake.on(
        "GET",
        "/v1/templates/bb",
        reply(200, tpl(state="ready", ready_version=1)),
        reply(200, tpl(state="failed", error="bake: guest did not answer")),
    )
    fake.on("DELETE", "/v1/templates/bb", error(404, "template_not_found", "gone"))

    async def main():
        seen = []

        async def on_log(text):
            seen.append(text)

        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url) as c:
            t = await c.templates.build("bb", tarball=src, memory_mb=256, on_log=on_log)
            with pytest.raises(TemplateBuildError) as ei:
                await c.templates.build("bb", tarball=io.BytesIO(b"junk"), on_log=seen.append)
            return t, ei.value, seen, await c.templates.delete("bb")

    t, err, seen, deleted = asyncio.run(main())
    assert t.state == "ready" and seen == ["a", "b", "boom"]
    assert err.error == "bake: guest did not answer" and deleted is False
    first, second = fake.calls("POST", "/v1/templates")
    assert query(first) == {"name": "bb", "memory_mb": "256"}
    assert first["body"] == b"tar" * 1000 and first["headers"]["content-length"] == "3000"
    assert second["body"] == b"junk" and second["headers"]["content-length"] == "4"


def test_a_build_that_ended_at_the_deadline_is_not_a_timeout(fake):
    def slow_log(rec):
        time.sleep(2)
        return reply(200, b"", SSE)

    fake.on("POST", "/v1/templates", reply(202, tpl(version=2)))
    fake.on_call("GET", "/v1/templates/bb/logs", slow_log)
    fake.on(
        "GET",
        "/v1/templates/bb",
        reply(200, tpl(version=2, state="ready", ready_version=2)),
        reply(200, tpl(version=2, state="failed", ready_version=1, error="bake: no answer")),
    )
    with make(fake) as c:
        t = c.templates.build("bb", tarball=b"tar", timeout_seconds=0.3)
        assert (t.state, t.ready_version) == ("ready", 2)
        with pytest.raises(TemplateBuildError) as ei:
            c.templates.build("bb", tarball=b"tar", timeout_seconds=0.3)
    assert not isinstance(ei.value, TemplateBuildTimeoutError)
    assert ei.value.error == "bake: no answer"
