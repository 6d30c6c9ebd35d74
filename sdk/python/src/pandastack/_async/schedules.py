"""``client.schedules``: :class:`AsyncSchedules`, cron schedules and their runs."""

from __future__ import annotations

from typing import Any, Optional

from .. import _base as b
from ..errors import NotFoundError
from ..types import Page, Schedule, ScheduleRun
from .client import AsyncPandaStack
from .pagination import AsyncPaginator


class AsyncSchedules:
    """``client.schedules``: cron schedules that run a target at each due time (each due time
    once, whatever the number of server processes): a command in a fresh sandbox
    (:class:`~pandastack.SandboxExecTarget`) or a call of a function
    (:class:`~pandastack.FunctionTarget`)::

        await client.schedules.create(
            "nightly", "0 3 * * *",
            SandboxExecTarget("minimal", "python3 /srv/report.py"),
            timezone="Europe/Berlin", payload={"full": True}, retries=2,
        )
        run = await client.schedules.run("nightly")              # a manual run, now
        async for r in client.schedules.runs("nightly"):         # newest due time first
            print(r.due_at, r.state, r.exit_code)
        await client.schedules.pause("nightly")

    Every call takes the schedule's name or its id; an unknown one raises
    :class:`~pandastack.NotFoundError`.
    """

    def __init__(self, client: "AsyncPandaStack") -> None:
        self._t = client._t

    def _p(self, name: str, rest: str = "") -> str:
        return f"/v1/schedules/{b.seg(name)}{rest}"

    async def create(
        self,
        name: str,
        cron: str,
        target: b.ScheduleTargetLike,
        *,
        timezone: Optional[str] = None,
        payload: Any = None,
        concurrency_policy: Optional[str] = None,
        starting_deadline_seconds: Optional[int] = None,
        retries: Optional[int] = None,
        paused: Optional[bool] = None,
    ) -> Schedule:
        """Creates a schedule and returns it (``next_run_at`` its first due time). ``name`` is
        1-63 of ``[a-z0-9-]``, starting with a letter. ``cron`` has 5 fields
        (``*/5 * * * *``), 6 with seconds first, or is ``@yearly``, ``@monthly``, ``@weekly``,
        ``@daily`` or ``@hourly``, read in ``timezone`` (IANA, default ``UTC``). ``target`` is
        what runs (:class:`~pandastack.SandboxExecTarget`, :class:`~pandastack.FunctionTarget`
        or a dict with its ``type``); ``payload`` the JSON each run gets.

        ``concurrency_policy`` (``allow``, default; ``forbid``; ``replace``) says what a due
        time does while a previous run is under way; a due time found
        ``starting_deadline_seconds`` late is recorded ``missed``; a failed run is tried
        ``retries`` more times (0 to 10); ``paused=True`` creates it paused. A name in use
        raises :class:`~pandastack.ConflictError`; a bad expression or time zone
        :class:`~pandastack.InvalidArgumentError`."""
        fields = b.schedule_fields(timezone, target, payload, concurrency_policy, starting_deadline_seconds, retries)
        body = b.schedule_body(name, cron, fields, paused)
        return Schedule.from_json(await self._t.json("POST", "/v1/schedules", json=body))

    def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> AsyncPaginator[Schedule]:
        """Every schedule of the workspace (by name), fetched ``limit`` per page as you
        iterate.

        Async: not a coroutine: ``async for s in client.schedules.list()``."""

        async def fetch(c: Optional[str]) -> Page[Schedule]:
            data = await self._t.json("GET", "/v1/schedules", params=b.list_params(limit, c))
            return Page([Schedule.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get(self, name: str) -> Schedule:
        """One schedule, by name or id."""
        return Schedule.from_json(await self._t.json("GET", self._p(name)))

    async def update(
        self,
        name: str,
        *,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        target: Optional[b.ScheduleTargetLike] = None,
        payload: Any = None,
        concurrency_policy: Optional[str] = None,
        starting_deadline_seconds: Optional[int] = None,
        retries: Optional[int] = None,
    ) -> Schedule:
        """Changes a schedule and returns it: each argument given replaces the schedule's
        (``starting_deadline_seconds=0`` removes the deadline); its next due time is counted
        again from now. The arguments are those of :meth:`create`."""
        body = b.schedule_fields(timezone, target, payload, concurrency_policy, starting_deadline_seconds, retries)
        if cron is not None:
            body["cron"] = str(cron)
        return Schedule.from_json(await self._t.json("PATCH", self._p(name), json=body))

    async def delete(self, name: str) -> bool:
        """Deletes a schedule and its run history; runs under way are cancelled (their
        sandboxes deleted). Returns ``False`` if it did not exist."""
        try:
            await self._t.request("DELETE", self._p(name))
            return True
        except NotFoundError:
            return False

    async def pause(self, name: str) -> Schedule:
        """Stops the schedule from firing until :meth:`resume` (runs under way go on)."""
        return Schedule.from_json(await self._t.json("POST", self._p(name, "/pause")))

    async def resume(self, name: str) -> Schedule:
        """Lets a paused schedule fire again, from now on (the due times of the pause are not
        caught up)."""
        return Schedule.from_json(await self._t.json("POST", self._p(name, "/resume")))

    async def run(self, name: str) -> ScheduleRun:
        """Runs the schedule's target now (a ``manual`` run; the concurrency policy applies, so
        under ``forbid`` it is ``skipped`` while another run is under way). Returns the run
        (follow it with :meth:`get_run`)."""
        return ScheduleRun.from_json(await self._t.json("POST", self._p(name, "/run")))

    def runs(
        self, name: str, *, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> AsyncPaginator[ScheduleRun]:
        """The schedule's runs, newest due time first, fetched ``limit`` per page as you
        iterate.

        Async: not a coroutine: ``async for r in client.schedules.runs(name)``."""
        path = self._p(name, "/runs")

        async def fetch(c: Optional[str]) -> Page[ScheduleRun]:
            data = await self._t.json("GET", path, params=b.list_params(limit, c))
            return Page([ScheduleRun.from_json(x) for x in data.get("data", [])], data.get("next_cursor"))

        return AsyncPaginator(fetch, cursor)

    async def get_run(self, name: str, run_id: str) -> ScheduleRun:
        """One run of the schedule, as it is now."""
        return ScheduleRun.from_json(await self._t.json("GET", self._p(name, f"/runs/{b.seg(run_id)}")))
