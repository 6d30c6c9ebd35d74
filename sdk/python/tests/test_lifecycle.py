"""Sandbox lifecycle against a real server."""

from __future__ import annotations

import os
import time

import pytest

from conftest import CREATED
from pandastack import (
    AuthenticationError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    Sandbox,
    SandboxNotFoundError,
    SandboxStateError,
    SnapshotNotFoundError,
    TemplateNotFoundError,
)


def test_create_exec_get_list_kill(client, make_sandbox, tags):
    sb = make_sandbox(metadata={"case": "lifecycle"}, env={"GREETING": "hi"}, idle_timeout_seconds=600)
    assert isinstance(sb, Sandbox)
    assert sb.id.startswith("sb-") and sb.state == "running"
    assert sb.template == make_sandbox.template
    assert sb.metadata["case"] == "lifecycle" and sb.metadata["run"] == tags["run"]
    assert sb.data.ttl_seconds == 900 and sb.data.idle_timeout_seconds == 600
    assert sb.expires_at and sb.data.cpu >= 1 and sb.data.memory_mb > 0

    r = sb.exec("echo $GREETING")
    assert (r.stdout, r.exit_code) == ("hi\n", 0)

    got = client.sandboxes.get(sb.id)
    assert got == sb and got.state == "running" and got.metadata == sb.metadata
    assert sb.info().state == "running" and sb.is_running()

    listed = [s.id for s in client.sandboxes.list(metadata={"run": tags["run"], "case": "lifecycle"})]
    assert listed == [sb.id]
    assert sb.id in {s.id for s in client.sandbox.list(state="running", metadata=tags)}

    assert sb.kill() is True
    with pytest.raises(SandboxNotFoundError) as ei:
        client.sandboxes.get(sb.id)
    assert ei.value.status == 404 and ei.value.code == "sandbox_not_found" and ei.value.request_id
    assert sb.kill() is False
    assert client.sandboxes.kill(sb.id) is False


def test_context_manager_kills_on_exit(client, template, tags):
    with client.sandboxes.create(template=template, ttl_seconds=300, metadata=tags) as sb:
        assert sb.exec("true").exit_code == 0
        sid = sb.id
    with pytest.raises(NotFoundError):
        client.sandboxes.get(sid)

    # also when the block raises
    with pytest.raises(RuntimeError):
        with client.sandboxes.create(template=template, ttl_seconds=300, metadata=tags) as sb:
            sid = sb.id
            raise RuntimeError("boom")
    with pytest.raises(NotFoundError):
        client.sandboxes.get(sid)


def test_api_contract_snippet(server_env, template, tags):
    """The snippet from the API contract, unchanged except for the template and cleanup."""
    from pandastack import PandaStack

    client = PandaStack(token=os.environ["PANDASTACK_API_KEY"])  # or PandaStack() from env
    sandbox = client.sandboxes.create(template=template, ttl_seconds=600, metadata={"task": "x", **tags})
    CREATED.add(sandbox.id)
    try:
        result = sandbox.exec("python3 -c 'print(2 ** 10)'", timeout_seconds=30)  # result.stdout == "1024\n"
        assert result.stdout == "1024\n"
        sandbox.filesystem.write("/tmp/notes.txt", "hello"); assert sandbox.filesystem.read("/tmp/notes.txt") == "hello"  # noqa: E702
        branch = sandbox.fork(); snap = sandbox.snapshot(); sandbox.hibernate(); sandbox.wake()  # noqa: E702
        try:
            assert isinstance(branch, Sandbox) and branch.id != sandbox.id
            assert branch.files.read("/tmp/notes.txt") == "hello"
            assert snap.sandbox_id == sandbox.id and snap.id.startswith("snap-")
            assert sandbox.state == "running"
            assert sandbox.exec("cat /tmp/notes.txt").stdout == "hello"
        finally:
            branch.kill()
            client.snapshots.delete(snap.id)
            client.snapshots.delete(branch.snapshot_id)
    finally:
        sandbox.kill()
        client.close()


def test_update_set_timeout_logs_metrics(client, make_sandbox):
    sb = make_sandbox(ttl_seconds=3600)
    before = sb.expires_at
    sb.set_timeout(120)
    assert sb.data.ttl_seconds == 120 and sb.expires_at < before
    sb.update(metadata={**sb.metadata, "phase": "two"}, idle_timeout_seconds=300)
    fresh = client.sandboxes.get(sb.id)
    assert fresh.metadata["phase"] == "two" and fresh.data.idle_timeout_seconds == 300
    assert fresh.data.ttl_seconds == 120
    with pytest.raises(InvalidArgumentError):
        sb.set_timeout(0)

    logs = sb.logs()
    assert isinstance(logs, str)
    m = sb.metrics()
    assert m.state == "running" and m.host_rss_bytes and m.cpu_time_ms is not None


def test_metrics_history(make_sandbox):
    # The server reads every running VM every 5 s: within a few seconds of its create a sandbox
    # has a point with the host's view (RSS) and the guest's (its memory).
    sb = make_sandbox()
    deadline = time.monotonic() + 25
    while True:
        m = sb.metrics(since="1m", step=1)
        points = [p for p in m.samples if p.mem_bytes > 0 and (p.mem_total_bytes or 0) > 0]
        if points or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert m.step == 1 and m.state == "running" and m.host_rss_bytes
    assert points, f"no point with the VM's and the guest's memory in {m.raw}"
    p = points[-1]
    assert p.t.endswith("Z") or "+" in p.t
    assert p.vcpus >= 1 and p.pss_bytes > 0 and p.cpu_pct >= 0
    assert (p.mem_available_bytes or 0) <= (p.mem_total_bytes or 0)
    with pytest.raises(InvalidArgumentError):
        sb.metrics(step=0)
    with pytest.raises(InvalidArgumentError):
        sb.metrics(since="7h")


def test_pause_resume_and_state_errors(client, make_sandbox):
    sb = make_sandbox()
    sb.exec("echo before > /tmp/p")
    assert sb.pause().state == "paused"
    assert client.sandboxes.get(sb.id).state == "paused"
    with pytest.raises(SandboxStateError) as ei:
        sb.exec("true")
    assert isinstance(ei.value, ConflictError) and ei.value.status == 409
    assert sb.resume().state == "running"
    assert sb.exec("cat /tmp/p").stdout == "before\n"
    # connect() resumes a paused sandbox
    sb.pause()
    again = client.sandboxes.connect(sb.id)
    assert again.state == "running" and again.exec("echo ok").stdout == "ok\n"
    # A single-host server has nowhere to move a sandbox: 409, and it stays as it was.
    with pytest.raises(ConflictError) as ei:
        sb.migrate()
    assert ei.value.status == 409 and "single host" in str(ei.value)
    assert sb.exec("cat /tmp/p").stdout == "before\n"


def test_templates(client, template):
    names = [t.name for t in client.templates.list()]
    assert template in names
    t = client.templates.get(template)
    assert t.name == template and t.memory_mb > 0 and t.state in ("ready", "available")
    with pytest.raises(TemplateNotFoundError):
        client.templates.get("no-such-template")


def test_error_mapping(client, server_env, template, make_sandbox):
    bad = PandaStack(api_key="pds_not_a_real_key", base_url=server_env["PANDASTACK_BASE_URL"])
    with pytest.raises(AuthenticationError) as ei:
        bad.sandboxes.list().to_list()
    assert ei.value.status == 401 and ei.value.code == "unauthorized" and ei.value.request_id
    bad.close()

    with pytest.raises(SandboxNotFoundError):
        client.sandboxes.get("sb-doesnotexist")
    with pytest.raises(NotFoundError):
        client.sandboxes.get("not/a valid id")
    with pytest.raises(TemplateNotFoundError) as ei2:
        client.sandboxes.create(template="no-such-template", ttl_seconds=60)
    assert ei2.value.status == 404 and ei2.value.code == "template_not_found"
    with pytest.raises(InvalidArgumentError) as ei3:
        client.sandboxes.create(template="../etc", ttl_seconds=60)
    assert ei3.value.status == 422 and "template" in ei3.value.message
    with pytest.raises(InvalidArgumentError) as ei4:
        client.sandboxes.create(template=template, ttl_seconds=0)
    assert "ttl_seconds" in ei4.value.message
    with pytest.raises(InvalidArgumentError):
        client.sandboxes.create(template=template, on_timeout="explode")
    with pytest.raises(InvalidArgumentError):
        client.sandboxes.create(template=template, env={"1BAD": "x"})
    with pytest.raises(InvalidArgumentError):
        client.sandboxes.list(state="bogus").to_list()
    with pytest.raises(SnapshotNotFoundError):
        client.sandboxes.create(snapshot_id="snap-doesnotexist")
    assert client.snapshots.delete("snap-doesnotexist") is False

    sb = make_sandbox()
    with pytest.raises(InvalidArgumentError) as ei5:
        sb.exec("true", timeout_seconds=99999)
    assert "timeout_seconds" in ei5.value.message
    with pytest.raises(InvalidArgumentError):
        sb.exec("true", cwd="relative/dir")
    with pytest.raises(InvalidArgumentError):
        sb.fork(count=17)


def test_idempotent_create(client, template, tags, make_sandbox):
    key = f"pysdk-{tags['run']}-idem"
    a = client.sandboxes.create(template=template, ttl_seconds=300, metadata=tags, idempotency_key=key)
    make_sandbox.track(a)
    b = client.sandboxes.create(template=template, ttl_seconds=300, metadata=tags, idempotency_key=key)
    assert a.id == b.id
    with pytest.raises(ConflictError):
        client.sandboxes.create(template=template, ttl_seconds=301, metadata=tags, idempotency_key=key)


def test_create_with_hibernate_on_timeout(client, make_sandbox):
    sb = make_sandbox(on_timeout="hibernate", ttl_seconds=600)
    assert sb.data.on_timeout == "hibernate"
