"""A nightly schedule that runs an agent task in a fresh sandbox.

Every night at 03:00 Berlin time the server creates a sandbox of the template, runs the task
with the schedule's payload in ``$PANDASTACK_PAYLOAD`` (JSON), keeps its exit code and output
in the run's history, and deletes the sandbox. Each due time runs once, even across server
restarts; a failed run is tried again ``retries`` times. Here the task is a small "agent" that
reads its instructions from the payload and writes a report; the example does not wait for
03:00: it runs the schedule once now (``run``), reads the run's output, and deletes the
schedule.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/nightly_agent_schedule.py
"""

import os
import time
import uuid

from pandastack import PandaStack, SandboxExecTarget

TASK = r"""
python3 - <<'PY'
import json, os, platform
job = json.loads(os.environ["PANDASTACK_PAYLOAD"])
print(f"agent task: {job['task']}")
checked = [f"{name}: ok" for name in job["checks"]]
print("report: " + "; ".join(checked))
print(f"ran on {platform.node()} with Python {platform.python_version()}")
PY
"""

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
template = os.environ.get("PANDASTACK_TEMPLATE", "base")
name = f"nightly-{uuid.uuid4().hex[:6]}"

schedule = client.schedules.create(
    name,
    "0 3 * * *",
    SandboxExecTarget(template=template, command=TASK, timeout_seconds=600),
    timezone="Europe/Berlin",
    payload={"task": "nightly dependency audit", "checks": ["lockfile", "licenses", "tests"]},
    concurrency_policy="forbid",
    retries=1,
)
print(f"schedule {schedule.name}: '{schedule.cron}' in {schedule.timezone}, next at {schedule.next_run_at}")
try:
    run = client.schedules.run(name)  # once now, as 03:00 would
    deadline = time.monotonic() + 600
    while run.state in ("queued", "running"):
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run.id} still {run.state}")
        time.sleep(1)
        run = client.schedules.get_run(name, run.id)
    print(f"run {run.id} ({run.trigger}): {run.state}, exit {run.exit_code}")
    for line in (run.output or "").splitlines():
        print(f"  {line}")
    history = list(client.schedules.runs(name))
    print(f"history: {len(history)} run(s)")
finally:
    client.schedules.delete(name)
print("schedule deleted")
print("done")
