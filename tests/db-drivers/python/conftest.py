"""Shared fixtures of the Python driver suite (scripts/test-db-drivers.sh): the run's one
database (made by the script, named by ``PANDASTACK_DBDRIVERS_ID``) and its two endpoints.

The connection strings name ``<id>.db.localhost`` and ``<id>-pooler.db.localhost``, which libc
does not resolve. libpq-based drivers (psycopg, SQLAlchemy over psycopg) get ``hostaddr`` and the
port from ``PANDASTACK_DB_FRONT`` and keep the host name for TLS SNI, as a user on one machine
would. Drivers that resolve names themselves (asyncpg) see ``*.db.localhost`` resolved to the
front by a patched ``socket.getaddrinfo``: the name still goes out as SNI, as with a wildcard DNS
record in production."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from typing import Any, Dict, Tuple
from urllib.parse import urlsplit

import pytest

ENDPOINTS = ("direct", "pooled")


def api(method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        os.environ["PANDASTACK_BASE_URL"] + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['PANDASTACK_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def front() -> Tuple[str, int]:
    host, _, port = os.environ["PANDASTACK_DB_FRONT"].rpartition(":")
    return host, int(port)


def database() -> Dict[str, Any]:
    return api("GET", f"/v1/databases/{os.environ['PANDASTACK_DBDRIVERS_ID']}")


_real_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, port, *args, **kwargs):
    if isinstance(host, bytes):
        host = host.decode()
    if isinstance(host, str) and host.endswith(".db.localhost"):
        host, port = front()
    return _real_getaddrinfo(host, port, *args, **kwargs)


socket.getaddrinfo = _getaddrinfo


@pytest.fixture(scope="session")
def db() -> Dict[str, Any]:
    d = database()
    assert d["state"] == "ready", d
    return d


@pytest.fixture(params=ENDPOINTS)
def endpoint(request) -> str:
    return request.param


@pytest.fixture
def uri(db, endpoint) -> str:
    return db["connection_uri" if endpoint == "direct" else "pooled_uri"]


def libpq_kwargs() -> Dict[str, Any]:
    host, port = front()
    return {"hostaddr": host, "port": port}


def table(prefix: str, endpoint: str) -> str:
    """A table name of this test and endpoint (both endpoints reach one cluster)."""
    return f"{prefix}_{endpoint}"


def wait_state(db_id: str, state: str, timeout: float = 180) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        d = api("GET", f"/v1/databases/{db_id}")
        if d["state"] == state:
            return d
        if time.monotonic() > deadline:
            raise AssertionError(f"database {db_id} is {d['state']}, not {state}, after {timeout}s")
        time.sleep(0.5)


def sni_host(uri: str) -> str:
    return urlsplit(uri).hostname or ""
