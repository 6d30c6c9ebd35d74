"""The sync client is generated from the async one (scripts/gen-sync-client.py): the committed
_sync.py is what the script makes, and its --check catches a stale copy. Offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.offline

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "gen-sync-client.py")
PKG = os.path.join(ROOT, "sdk", "python", "src", "pandastack")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def test_committed_sync_client_is_generated() -> None:
    r = run("--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_fails_on_drift_and_the_script_repairs_it(tmp_path) -> None:
    src, dst = tmp_path / "_async.py", tmp_path / "_sync.py"
    shutil.copy(os.path.join(PKG, "_async.py"), src)
    shutil.copy(os.path.join(PKG, "_sync.py"), dst)
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 0
    # A method added to the async client only.
    text = src.read_text(encoding="utf-8")
    text = text.replace(
        "    async def metrics(self)",
        "    async def drifted(self) -> int:\n        return 1\n\n    async def metrics(self)",
        1,
    )
    src.write_text(text, encoding="utf-8")
    r = run("--check", "--source", str(src), "--target", str(dst))
    assert r.returncode == 1 and "+    def drifted(self) -> int:" in r.stdout, r.stdout + r.stderr
    # A hand edit of the sync client.
    assert run("--source", str(src), "--target", str(dst)).returncode == 0
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 0
    dst.write_text(dst.read_text(encoding="utf-8") + "\n# edited by hand\n", encoding="utf-8")
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 1
