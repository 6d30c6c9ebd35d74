"""Fixtures for tests against a real PandaStack server.

Needs PANDASTACK_BASE_URL, PANDASTACK_API_KEY and PANDASTACK_TEST_TEMPLATE (use ``minimal``).
If one is missing, the run stops with a message: nothing is skipped silently. Tests marked
``offline`` (fake local HTTP servers) run without them.

Every sandbox made here carries the metadata ``{"suite": "pysdk", "run": RUN_ID}``; besides
each test's own cleanup, the session ends by killing whatever is left with that tag.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Dict, Iterator, List

import pytest

try:
    import pandastack  # noqa: F401  (the installed package, when there is one)
except ImportError:  # run from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from pandastack import PandaStack, Sandbox  # noqa: E402

REQUIRED = ("PANDASTACK_BASE_URL", "PANDASTACK_API_KEY", "PANDASTACK_TEST_TEMPLATE")
RUN_ID = uuid.uuid4().hex[:12]
#: Ids of every sandbox this run created (snapshots of them are deleted at the end).
CREATED: set = set()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "offline: runs against a fake local HTTP server only")


def _require_env() -> None:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if missing:
        pytest.exit(
            "pandastack SDK tests need a real server: set "
            + ", ".join(missing)
            + " (e.g. eval \"$(scripts/dev-server.sh start pysdk 18181)\" and "
            "PANDASTACK_TEST_TEMPLATE=minimal), or select only offline tests with -m offline",
            returncode=2,
        )


@pytest.fixture(scope="session")
def server_env() -> Dict[str, str]:
    _require_env()
    return {k: os.environ[k] for k in REQUIRED}


@pytest.fixture(scope="session")
def template(server_env: Dict[str, str]) -> str:
    return server_env["PANDASTACK_TEST_TEMPLATE"]


@pytest.fixture(scope="session")
def tags() -> Dict[str, str]:
    return {"suite": "pysdk", "run": RUN_ID}


@pytest.fixture(scope="session")
def client(server_env: Dict[str, str], tags: Dict[str, str]) -> Iterator[PandaStack]:
    c = PandaStack(api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"])
    yield c
    # Safety net: nothing this run created may outlive it.
    leftovers = list(c.sandboxes.list(metadata=tags))
    for sb in leftovers:
        sb.kill()
    for snap in list(c.snapshots.list()):
        if snap.sandbox_id in CREATED:
            c.snapshots.delete(snap.id)
    c.close()
    if leftovers:
        print(f"\nconftest: killed {len(leftovers)} leftover sandbox(es)", file=sys.stderr)


class Factory:
    """Creates tagged sandboxes and kills them at teardown."""

    def __init__(self, client: PandaStack, template: str, tags: Dict[str, str]) -> None:
        self.client = client
        self.template = template
        self.tags = tags
        self.made: List[Sandbox] = []

    def __call__(self, **kw) -> Sandbox:
        meta = dict(self.tags)
        meta.update(kw.pop("metadata", {}) or {})
        kw.setdefault("template", self.template)
        kw.setdefault("ttl_seconds", 900)
        sb = self.client.sandboxes.create(metadata=meta, **kw)
        self.track(sb)
        return sb

    def track(self, *sbs: Sandbox) -> None:
        self.made.extend(sbs)
        CREATED.update(sb.id for sb in sbs)

    def cleanup(self) -> None:
        for sb in self.made:
            try:
                sb.kill()
            except Exception as e:  # pragma: no cover - report, do not mask the test result
                print(f"cleanup of {sb.id} failed: {e!r}", file=sys.stderr)


@pytest.fixture
def make_sandbox(client: PandaStack, template: str, tags: Dict[str, str]) -> Iterator[Factory]:
    f = Factory(client, template, tags)
    yield f
    f.cleanup()


@pytest.fixture(scope="module")
def shared_sandbox(client: PandaStack, template: str, tags: Dict[str, str]) -> Iterator[Sandbox]:
    """One sandbox per test module for tests that only exec and touch files."""
    f = Factory(client, template, tags)
    sb = f(metadata={"kind": "shared"})
    yield sb
    f.cleanup()
