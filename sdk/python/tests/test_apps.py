"""Apps against a real server, only what needs no VM: an app created without its first deploy
(``deploy=False``), read back by name and by id, listed, updated (environment and scaling),
refused for a bad field or a name in use, with no deploys; deploys (from git and uploaded) to
an unknown app refused; custom domains set, refused (bad, or another app's) and removed; then
deleted, after which it is :class:`AppNotFoundError`. Builds and deploys need the ``app`` template and minutes of VM time:
the server's own end-to-end tests cover them."""

from __future__ import annotations

import sys
from typing import Iterator

import pytest

from conftest import RUN_ID
from pandastack import (
    App,
    AppBuild,
    AppDomain,
    AppGit,
    AppNotFoundError,
    AppStart,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
)

NAME = f"py-{RUN_ID}"
GIT = "https://git.example.invalid/pandastack/web.git"


@pytest.fixture(scope="module")
def created(client: PandaStack) -> Iterator[App]:
    try:
        yield client.apps.create(
            NAME,
            GIT,
            ref="main",
            env={"GREETING": "hello"},
            secrets={"API_TOKEN": "t0ken"},
            start={"port": 3000},
            deploy=False,
        )
    finally:
        try:
            client.apps.delete(NAME)
        except Exception as e:  # pragma: no cover - report, do not mask the test result
            print(f"cleanup of app {NAME} failed: {e!r}", file=sys.stderr)


def test_created_without_a_deploy(client, created):
    a = created
    assert a.name == NAME and a.id and a.url and NAME in a.url
    assert a.git == AppGit(GIT, "main")
    assert a.env == {"GREETING": "hello"} and a.secret_names == ["API_TOKEN"]
    assert "t0ken" not in str(a.raw), "secret values are never shown"
    assert a.start == AppStart(port=3000) and a.build == AppBuild()
    assert a.memory_mb == 1024 and a.min_instances == 0 and a.idle_seconds == 300
    assert a.health_path == "/" and a.webhook_secret and a.created_at and a.updated_at
    assert a.live_deploy is None and a.instance_state is None
    assert list(client.apps.deploys(NAME)) == []


def test_get_by_name_and_id_and_list(client, created):
    assert client.apps.get(NAME).id == created.id
    assert client.apps.get(created.id).name == NAME
    assert NAME in [a.name for a in client.apps.list()]
    assert NAME in [a.name for a in client.apps.list(limit=1)], "found across pages"


def test_update_env_and_scaling(client, created):
    u = client.apps.update(NAME, env={"GREETING": "hi", "MODE": "test"}, min_instances=1, idle_seconds=60)
    assert u.env == {"GREETING": "hi", "MODE": "test"}
    assert (u.min_instances, u.idle_seconds) == (1, 60)
    assert u.secret_names == ["API_TOKEN"] and u.git == created.git, "what was not given stays"
    again = client.apps.get(NAME)
    assert (again.env, again.min_instances) == (u.env, 1)
    back = client.apps.update(NAME, min_instances=0, build=AppBuild(command="npm run build"))
    assert back.min_instances == 0 and back.build.command == "npm run build"


def test_refusals(client, created, tmp_path):
    with pytest.raises(ConflictError):
        client.apps.create(NAME, GIT, deploy=False)
    with pytest.raises(InvalidArgumentError) as ei:
        client.apps.update(NAME, memory_mb=100)
    assert ei.value.status == 422 and "memory_mb" in str(ei.value)
    with pytest.raises(InvalidArgumentError):
        client.apps.create(f"py-{RUN_ID}-bad", "ftp://example/x.git", deploy=False)
    with pytest.raises(AppNotFoundError) as nf:
        client.apps.get(f"nope-{RUN_ID}")
    assert nf.value.status == 404 and nf.value.code == "app_not_found"
    with pytest.raises(AppNotFoundError):
        client.apps.deploy(f"nope-{RUN_ID}")
    (tmp_path / "index.html").write_text("hello")
    with pytest.raises(AppNotFoundError):
        client.apps.deploy_directory(f"nope-{RUN_ID}", tmp_path)  # the upload is read and dropped


def test_custom_domains(client):
    name, other = f"py-{RUN_ID}-dom", f"py-{RUN_ID}-dom2"
    domain = f"{name}.example.test"
    try:
        a = client.apps.create(name, GIT, deploy=False, domains=[domain])
        # The client suite's server has no TLS listener: no certificate, and no error.
        assert a.domains == [AppDomain(domain, "none", None, None)]
        assert client.apps.get(name).domains == a.domains
        with pytest.raises(ConflictError) as taken:
            client.apps.create(other, GIT, deploy=False, domains=[domain])
        assert taken.value.status == 409
        with pytest.raises(AppNotFoundError):
            client.apps.get(other)  # a refused domain refuses the app: nothing left behind
        with pytest.raises(InvalidArgumentError) as bad:
            client.apps.update(name, domains=[f"ok-{domain}", "Not A Domain"])
        assert bad.value.status == 422 and "domains[1]" in str(bad.value)
        assert client.apps.get(name).domains == a.domains, "a refused update changes nothing"
        assert client.apps.update(name, min_instances=0).domains == a.domains, "not given: they stay"
        assert client.apps.update(name, domains=[]).domains == []
        assert client.apps.get(name).domains == []
        b = client.apps.create(other, GIT, deploy=False, domains=[domain])  # free again
        assert [d.name for d in b.domains] == [domain]
    finally:
        for n in (name, other):
            try:
                client.apps.delete(n)
            except Exception as e:  # pragma: no cover - report, do not mask the test result
                print(f"cleanup of app {n} failed: {e!r}", file=sys.stderr)


def test_delete_then_gone(client, created):
    assert client.apps.delete(NAME) is True
    with pytest.raises(AppNotFoundError) as ei:
        client.apps.get(NAME)
    assert isinstance(ei.value, NotFoundError) and ei.value.code == "app_not_found"
    assert client.apps.delete(NAME) is False
