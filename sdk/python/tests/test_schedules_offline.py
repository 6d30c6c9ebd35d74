"""Schedules against a fake local HTTP server (no PandaStack server needed): what each call of
``client.schedules`` sends (the tagged ``target``: a command in a sandbox or a function call)
and how it reads the answers, paging of schedules and runs, pause, resume, a manual run, and
the errors. Sync and async."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    AsyncPandaStack,
    ConflictError,
    FunctionTarget,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    SandboxExecTarget,
    Schedule,
    ScheduleRun,
)

pytestmark = pytest.mark.offline

TARGET = {"type": "sandbox_exec", "template": "minimal", "command": "echo hi", "env": {}, "timeout_seconds": 300}


def schedule(**kw):
    s = {
        "id": "sch-1",
        "name": "nightly",
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "target": TARGET,
        "payload": None,
        "concurrency_policy": "allow",
        "starting_deadline_seconds": None,
        "retries": 0,
        "paused": False,
        "next_run_at": "2026-01-02T03:00:00Z",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    s.update(kw)
    return s


def run(state="queued", **kw):
    r = {
        "id": "run-1",
        "schedule": "nightly",
        "due_at": "2026-01-02T03:00:00Z",
        "trigger": "scheduled",
        "state": state,
        "attempt": 1,
        "sandbox_id": None,
        "started_at": None,
        "ended_at": None,
        "exit_code": None,
        "output": None,
        "error": None,
        "created_at": "2026-01-02T03:00:00Z",
    }
    r.update(kw)
    return r


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


def test_create_sends_the_target_and_reads_the_schedule(fake):
    fake.on_call("POST", "/v1/schedules", lambda r: reply(201, schedule(**{k: v for k, v in body(r).items() if k != "paused"})))
    with make(fake) as c:
        s = c.schedules.create("nightly", "0 3 * * *", SandboxExecTarget("minimal", "echo hi"))
        assert isinstance(s, Schedule)
        assert (s.id, s.name, s.cron, s.timezone, s.concurrency_policy) == ("sch-1", "nightly", "0 3 * * *", "UTC", "allow")
        assert s.target == SandboxExecTarget("minimal", "echo hi", {}, 300)
        assert (s.payload, s.retries, s.paused, s.next_run_at) == (None, 0, False, "2026-01-02T03:00:00Z")
        assert s.raw["id"] == "sch-1"
        full = c.schedules.create(
            "every-5",
            "*/5 * * * *",
            SandboxExecTarget("minimal", "python3 job.py", env={"MODE": "full"}, timeout_seconds=60),
            timezone="Europe/Berlin",
            payload={"full": True},
            concurrency_policy="forbid",
            starting_deadline_seconds=120,
            retries=2,
            paused=True,
        )
        assert (full.timezone, full.payload, full.concurrency_policy, full.starting_deadline_seconds, full.retries) == (
            "Europe/Berlin",
            {"full": True},
            "forbid",
            120,
            2,
        )
        f = c.schedules.create("calls", "@hourly", FunctionTarget("hello"), payload=[1, 2])
        assert f.target == FunctionTarget("hello")
        c.schedules.create("dict", "@daily", {"type": "sandbox_exec", "template": "minimal", "command": "true"})
        for bad in (
            lambda: c.schedules.create("", "@daily", FunctionTarget("f")),
            lambda: c.schedules.create("x", " ", FunctionTarget("f")),
            lambda: c.schedules.create("x", "@daily", {"template": "minimal", "command": "true"}),  # no type
            lambda: c.schedules.create("x", "@daily", "echo hi"),  # type: ignore[arg-type]
            lambda: c.schedules.create("x", "@daily", FunctionTarget("f"), concurrency_policy="queue"),
        ):
            with pytest.raises(InvalidArgumentError):
                bad()
    assert [body(r) for r in fake.calls("POST", "/v1/schedules")] == [
        {"name": "nightly", "cron": "0 3 * * *", "target": TARGET},
        {
            "name": "every-5",
            "cron": "*/5 * * * *",
            "timezone": "Europe/Berlin",
            "target": {
                "type": "sandbox_exec",
                "template": "minimal",
                "command": "python3 job.py",
                "env": {"MODE": "full"},
                "timeout_seconds": 60,
            },
            "payload": {"full": True},
            "concurrency_policy": "forbid",
            "starting_deadline_seconds": 120,
            "retries": 2,
            "paused": True,
        },
        {"name": "calls", "cron": "@hourly", "target": {"type": "function", "name": "hello"}, "payload": [1, 2]},
        {"name": "dict", "cron": "@daily", "target": {"type": "sandbox_exec", "template": "minimal", "command": "true"}},
    ]


def test_schedule_reads_targets_it_knows_and_keeps_others_raw():
    assert Schedule.from_json(schedule(target={"type": "function", "name": "f"})).target == FunctionTarget("f")
    other = Schedule.from_json(schedule(target={"type": "webhook", "url": "https://x"}))
    assert other.target is None and other.raw["target"]["type"] == "webhook"
    assert SandboxExecTarget.from_json({"template": "t", "command": "c"}) == SandboxExecTarget("t", "c")


def test_list_get_update_pause_resume_and_delete(fake):
    fake.on_call(
        "GET",
        "/v1/schedules",
        lambda r: reply(200, {"data": [schedule(id="sch-2", name="b")], "next_cursor": None})
        if query(r).get("cursor") == "a"
        else reply(200, {"data": [schedule(name="a")], "next_cursor": "a"}),
    )
    fake.on("GET", "/v1/schedules/nightly", reply(200, schedule()))
    fake.on_call("PATCH", "/v1/schedules/nightly", lambda r: reply(200, schedule(**body(r))))
    fake.on("POST", "/v1/schedules/nightly/pause", reply(200, schedule(paused=True, next_run_at=None)))
    fake.on("POST", "/v1/schedules/nightly/resume", reply(200, schedule()))
    fake.on("DELETE", "/v1/schedules/nightly", reply(204), error(404, "not_found", "schedule nightly not found"))
    fake.on("GET", "/v1/schedules/nope", error(404, "not_found", "schedule nope not found"))
    with make(fake) as c:
        assert [s.name for s in c.schedules.list(limit=1)] == ["a", "b"]
        assert [query(r) for r in fake.calls("GET", "/v1/schedules")] == [{"limit": "1"}, {"limit": "1", "cursor": "a"}]
        assert c.schedules.get("nightly").cron == "0 3 * * *"
        with pytest.raises(NotFoundError):
            c.schedules.get("nope")
        u = c.schedules.update("nightly", cron="0 4 * * *", timezone="Asia/Tokyo", retries=1)
        assert (u.cron, u.timezone, u.retries) == ("0 4 * * *", "Asia/Tokyo", 1)
        c.schedules.update("nightly", target=FunctionTarget("hello"), payload={"n": 1}, starting_deadline_seconds=0)
        c.schedules.update("nightly", concurrency_policy="replace")
        p = c.schedules.pause("nightly")
        assert (p.paused, p.next_run_at) == (True, None)
        assert c.schedules.resume("nightly").paused is False
        assert c.schedules.delete("nightly") is True
        assert c.schedules.delete("nightly") is False
    assert [body(r) for r in fake.calls("PATCH", "/v1/schedules/nightly")] == [
        {"timezone": "Asia/Tokyo", "retries": 1, "cron": "0 4 * * *"},
        {"target": {"type": "function", "name": "hello"}, "payload": {"n": 1}, "starting_deadline_seconds": 0},
        {"concurrency_policy": "replace"},
    ]
    assert [body(r) for r in fake.calls("POST", "/v1/schedules/nightly/pause")] == [None]


def test_run_runs_and_get_run(fake):
    fake.on("POST", "/v1/schedules/nightly/run", reply(202, run("queued", id="run-9", trigger="manual")))
    fake.on_call(
        "GET",
        "/v1/schedules/nightly/runs",
        lambda r: reply(200, {"data": [run("missed", id="run-1")], "next_cursor": None})
        if query(r).get("cursor") == "c2"
        else reply(200, {"data": [run("running", id="run-2", sandbox_id="sb-7")], "next_cursor": "c2"}),
    )
    done = run("failed", id="run-2", attempt=3, exit_code=2, output="boom\n", error="exit 2", started_at="s", ended_at="e")
    fake.on("GET", "/v1/schedules/nightly/runs/run-2", reply(200, done))
    fake.on("POST", "/v1/schedules/busy/run", error(409, "conflict", "busy"))
    with make(fake) as c:
        r = c.schedules.run("nightly")
        assert isinstance(r, ScheduleRun) and (r.id, r.state, r.trigger, r.active) == ("run-9", "queued", "manual", True)
        assert [(x.id, x.state) for x in c.schedules.runs("nightly", limit=1)] == [("run-2", "running"), ("run-1", "missed")]
        g = c.schedules.get_run("nightly", "run-2")
        assert (g.state, g.attempt, g.exit_code, g.output, g.error, g.started_at, g.ended_at, g.active) == (
            "failed",
            3,
            2,
            "boom\n",
            "exit 2",
            "s",
            "e",
            False,
        )
        with pytest.raises(ConflictError):
            c.schedules.run("busy")
        with pytest.raises(InvalidArgumentError):
            c.schedules.get_run("nightly", "")
    assert query(fake.calls("GET", "/v1/schedules/nightly/runs")[0]) == {"limit": "1"}


def test_async_schedules(fake):
    fake.on("POST", "/v1/schedules", reply(201, schedule()))
    fake.on("GET", "/v1/schedules", reply(200, {"data": [schedule()], "next_cursor": None}))
    fake.on("PATCH", "/v1/schedules/nightly", reply(200, schedule(retries=3)))
    fake.on("POST", "/v1/schedules/nightly/pause", reply(200, schedule(paused=True)))
    fake.on("POST", "/v1/schedules/nightly/run", reply(202, run(trigger="manual")))
    fake.on("GET", "/v1/schedules/nightly/runs", reply(200, {"data": [run()], "next_cursor": None}))
    fake.on("GET", "/v1/schedules/nightly/runs/run-1", reply(200, run("succeeded", exit_code=0)))
    fake.on("DELETE", "/v1/schedules/nightly", reply(204))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            s = await c.schedules.create("nightly", "0 3 * * *", SandboxExecTarget("minimal", "echo hi"))
            assert s.name == "nightly"
            assert [x.name async for x in c.schedules.list()] == ["nightly"]
            assert (await c.schedules.update("nightly", retries=3)).retries == 3
            assert (await c.schedules.pause("nightly")).paused is True
            assert (await c.schedules.run("nightly")).trigger == "manual"
            assert [x.id async for x in c.schedules.runs("nightly")] == ["run-1"]
            assert (await c.schedules.get_run("nightly", "run-1")).exit_code == 0
            assert await c.schedules.delete("nightly") is True

    asyncio.run(main())
    assert body(fake.calls("POST", "/v1/schedules")[0])["target"] == TARGET
