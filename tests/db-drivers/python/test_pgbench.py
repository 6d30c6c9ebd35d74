"""The host's pgbench (Debian's postgresql-client) on both endpoints: the tables made with
``-i`` through the pooler (COPY and VACUUM through PgBouncer), then select-only and TPC-B for
5 s each, TPC-B also with ``-M prepared`` (Parse once per connection, then Bind/Execute on
whichever server connection the pooler gives each transaction). Each run must process
transactions and fail none. Four clients: with two, PgBouncer kept handing each client the
same server connection and ``-M prepared`` passed even without ``max_prepared_statements``."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import front

pytestmark = pytest.mark.skipif(not shutil.which("pgbench"), reason="pgbench is not installed")

MODES = {
    "select-only": ["-S"],
    "tpcb": [],
    "tpcb-prepared": ["-M", "prepared"],
}


def conninfo(uri: str) -> str:
    host, port = front()
    return f"{uri}&hostaddr={host}&port={port}"


def pgbench(*args: str, timeout: float = 300) -> str:
    p = subprocess.run(["pgbench", *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"pgbench {' '.join(args[:-1])} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def initialized(db) -> None:
    pgbench("-i", "-s", "1", "-q", conninfo(db["pooled_uri"]))


@pytest.mark.parametrize("mode", MODES)
def test_pgbench(initialized, uri, endpoint, mode):
    out = pgbench("-T", "5", "-c", "4", "-j", "1", "-n", *MODES[mode], conninfo(uri))
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    assert done and int(done.group(1)) > 0, out
    assert failed and int(failed.group(1)) == 0, out
    tps = re.search(r"tps = ([\d.]+)", out)
    print(f"pgbench {mode} {endpoint}: {done.group(1)} transactions, tps {tps.group(1) if tps else '?'}")
