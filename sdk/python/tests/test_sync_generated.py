"""The sync client is generated from the async one (scripts/gen-sync-client.py): the committed
_sync/ package is what the script makes of _async/, and its --check catches a stale copy.
Offline."""

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
    src, dst = tmp_path / "_async", tmp_path / "_sync"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(os.path.join(PKG, "_async"), src, ignore=ignore)
    shutil.copytree(os.path.join(PKG, "_sync"), dst, ignore=ignore)
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 0
    # A method added to the async client only.
    sandbox = src / "sandbox.py"
    text = sandbox.read_text(encoding="utf-8")
    text = text.replace(
        "    async def logs(self)",
        "    async def drifted(self) -> int:\n        return 1\n\n    async def logs(self)",
        1,
    )
    sandbox.write_text(text, encoding="utf-8")
    r = run("--check", "--source", str(src), "--target", str(dst))
    assert r.returncode == 1 and "+    def drifted(self) -> int:" in r.stdout, r.stdout + r.stderr
    assert "_sync/sandbox.py" in r.stderr and "_sync/apps.py" not in r.stderr, r.stderr
    # A hand edit of the sync client.
    assert run("--source", str(src), "--target", str(dst)).returncode == 0
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 0
    apps = dst / "apps.py"
    apps.write_text(apps.read_text(encoding="utf-8") + "\n# edited by hand\n", encoding="utf-8")
    assert run("--check", "--source", str(src), "--target", str(dst)).returncode == 1
    # A new async module gets its twin; a module removed from the async client takes its twin
    # along (a module of _sync/ that was never generated is left alone, and an error).
    (src / "extra.py").write_text('"""An extra module."""\n\nasync def f() -> None:\n    pass\n')
    assert run("--source", str(src), "--target", str(dst)).returncode == 0
    assert (dst / "extra.py").read_text(encoding="utf-8").endswith("def f() -> None:\n    pass\n")
    (src / "extra.py").unlink()
    r = run("--check", "--source", str(src), "--target", str(dst))
    assert r.returncode == 1 and "-def f() -> None:" in r.stdout, r.stdout + r.stderr
    assert run("--source", str(src), "--target", str(dst)).returncode == 0
    assert not (dst / "extra.py").exists()
    (dst / "by_hand.py").write_text("x = 1\n", encoding="utf-8")
    r = run("--source", str(src), "--target", str(dst))
    assert r.returncode == 2 and "by_hand.py" in r.stderr and (dst / "by_hand.py").exists(), r.stderr
