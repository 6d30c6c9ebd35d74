"""Hosts (the operator routes) against a real server: an admin key (``PANDASTACK_TEST_ADMIN_KEY``,
made with ``pandastack keys create --admin``; scripts/test-clients.sh makes one) sees the
single-node server's own host, drains and undrains it and cannot forget it (it is not dead); the
workspace key the other tests use is refused every operator route."""

from __future__ import annotations

import os
from typing import Dict, Iterator

import pytest

from pandastack import ConflictError, PandaStack, PermissionDeniedError


@pytest.fixture(scope="module")
def admin(server_env: Dict[str, str]) -> Iterator[PandaStack]:
    key = os.environ.get("PANDASTACK_TEST_ADMIN_KEY")
    if not key:
        pytest.fail(
            "set PANDASTACK_TEST_ADMIN_KEY to an admin key of the server under test "
            "(`pandastack keys create --admin --data-dir DIR`), or deselect tests/test_hosts.py"
        )
    c = PandaStack(api_key=key, base_url=server_env["PANDASTACK_BASE_URL"])
    yield c
    c.close()


def test_an_admin_key_sees_drains_and_undrains_the_servers_host(admin: PandaStack, make_sandbox) -> None:
    sb = make_sandbox()
    hosts = admin.hosts.list()
    assert len(hosts) == 1, hosts
    h = hosts[0]
    # The single node's in-process host: ready, no address, no lease, the sandbox just made on it.
    assert h.state == "ready"
    assert h.epoch >= 1
    assert h.address is None
    assert h.sandboxes >= 1
    got = admin.hosts.get(h.id)
    assert (got.id, got.name, got.epoch) == (h.id, h.name, h.epoch)
    try:
        assert admin.hosts.drain(h.id).state == "draining"
        assert admin.hosts.get(h.id).state == "draining"
        # A drain is recorded, not a stop: the sandbox on it still runs.
        assert sb.exec("echo still").stdout == "still\n"
    finally:
        assert admin.hosts.undrain(h.id).state == "ready"
    with pytest.raises(ConflictError):
        admin.hosts.forget(h.id)
    assert admin.hosts.get(h.id).state == "ready"
    assert admin.hosts.forget("no-such-host") is False


def test_a_workspace_key_is_refused_the_operator_routes(client: PandaStack) -> None:
    with pytest.raises(PermissionDeniedError):
        client.hosts.list()
    with pytest.raises(PermissionDeniedError):
        client.hosts.drain("any")
