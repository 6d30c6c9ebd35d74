"""Apps, functions and schedules pages in a real browser, against real guests.

The app is deployed from a repository served by `git daemon` on 127.0.0.1:$PANDASTACK_CONSOLE_GIT_PORT
(default 18439). The server fetches from loopback only where the operator allows it, so it
must run with `--allow-internal-fetch 127.0.0.1:<that port>` (scripts/test-console.sh passes it).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

GIT_PORT = int(os.environ.get("PANDASTACK_CONSOLE_GIT_PORT", "18439"))
PAGE_TEXT = "hello from the console test"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=console", "-c", "user.email=console@test", *args],
        cwd=cwd, check=True, capture_output=True,
    )


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory):
    """A bare repository with a static site (index.html), served over git:// on GIT_PORT;
    yields its URL."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("repos")
    bare = root / "site.git"
    work = root / "work"
    _git(root, "init", "-q", "--bare", str(bare))
    _git(root, "init", "-q", "-b", "main", str(work))
    (work / "index.html").write_text(f"<!doctype html><title>site</title><h1>{PAGE_TEXT}</h1>\n")
    _git(work, "add", ".")
    _git(work, "commit", "-qm", "v1")
    _git(work, "push", "-q", str(bare), "main")
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1", f"--port={GIT_PORT}",
         f"--base-path={root}", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", GIT_PORT), timeout=1).close()
                break
            except OSError:
                assert daemon.poll() is None, f"git daemon on {GIT_PORT} exited (port taken?)"
                assert time.monotonic() < deadline, f"git daemon on {GIT_PORT} did not listen"
                time.sleep(0.1)
        yield f"git://127.0.0.1:{GIT_PORT}/site.git"
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


def _accept_dialogs(page):
    page.on("dialog", lambda d: d.accept())


def test_an_app_deploys_from_the_page_with_its_log_streamed_and_serves(page, api, git_repo, shot):
    name = f"con-{secrets.token_hex(3)}"
    _accept_dialogs(page)
    page.goto(page.url.split("#")[0] + "#/apps")
    try:
        page.get_by_label("Name (its host name)").fill(name)
        page.get_by_label("Git repository URL").fill(git_repo)
        page.get_by_label("Branch, tag or commit").fill("main")
        page.get_by_label("Environment (KEY=VALUE lines)").fill("GREETING=hi")
        page.get_by_label("Secrets (KEY=VALUE lines)").fill("TOKEN=s3cret-value")
        page.get_by_role("button", name="Create and deploy").click()
        page.wait_for_url(re.compile(rf"#/apps/{name}$"))
        page.get_by_role("heading", name=f"App {name}").wait_for()

        # The build log arrives while the deploy runs (the VM's boot and the bake take
        # seconds after the clone), then the stream ends with the deploy live.
        log = page.get_by_role("log", name="Build log of deploy #1")
        log.wait_for()
        page.wait_for_function(
            "() => (document.querySelector('[role=log]')?.textContent || '').includes('clone:')", timeout=60_000,
        )
        status = page.locator(".followed-log [role=status]")
        assert "Following" in status.inner_text(), "the log should stream before the deploy ends"
        status.filter(has_text="Log complete (live)").wait_for(timeout=150_000)
        text = log.inner_text()
        assert "health check GET /: HTTP 200" in text, text
        assert "plan: framework: static" in text, text

        st, deploys = api("GET", f"/v1/apps/{name}/deploys")
        assert st == 200 and deploys["data"][0]["state"] == "live", deploys
        d = deploys["data"][0]
        # The phases as a timeline, one row per phase with its duration.
        timeline = page.get_by_role("list", name=re.compile(r"Phases of deploy #1"))
        for phase in ("clone", "vm", "bake", "check"):
            row = timeline.locator(f'li[data-phase="{phase}"]')
            assert row.count() == 1, phase
            assert re.search(r"\d+(\.\d)? (ms|s)", row.inner_text()), row.inner_text()
        # The VM links to its sandbox page; the secret shows by name only.
        assert page.locator(f'a[href="#/sandboxes/{d["sandbox_id"]}"]').count() >= 1
        shot(page, "app-deploy")
        page.get_by_role("tab", name="Settings").click()
        assert "TOKEN" in page.locator("main").inner_text()
        assert "s3cret-value" not in page.content()

        # The URL on the page serves the site.
        st, app = api("GET", f"/v1/apps/{name}")
        with page.expect_popup() as popup:
            page.locator("dl.kv").get_by_role("link", name=app["url"]).click()
        site = popup.value
        site.wait_for_load_state()
        assert PAGE_TEXT in site.locator("h1").inner_text()
        site.close()

        page.goto(page.url.split("#")[0] + "#/apps")
        row = page.locator(f'tr[data-key="{name}"]')
        row.wait_for()
        assert "#1" in row.inner_text() and re.search(r"running|live|hibernated", row.inner_text()), row.inner_text()
        shot(page, "apps")

        # Delete from the app's page (after a confirmation).
        page.get_by_role("link", name=name, exact=True).click()
        page.get_by_role("heading", name=f"App {name}").wait_for()
        page.get_by_role("button", name="Delete app", exact=True).click()
        page.wait_for_url(re.compile(r"#/apps$"))
        assert api("GET", f"/v1/apps/{name}")[0] == 404
    finally:
        api("DELETE", f"/v1/apps/{name}")


def test_a_function_is_created_and_invoked_from_the_page(page, api, shot):
    name = f"cf-{secrets.token_hex(3)}"
    _accept_dialogs(page)
    page.goto(page.url.split("#")[0] + "#/functions")
    try:
        page.get_by_label("Name", exact=True).fill(name)
        assert page.get_by_label("Runtime").input_value() == "python"
        assert "def handler" in page.get_by_label("Handler file").input_value()
        page.get_by_role("button", name="Create function").click()
        page.wait_for_url(re.compile(rf"#/functions/{name}$"))
        # The version goes live (a `function.version_live` event re-reads the page).
        page.locator('tr[data-key="1"]').filter(has_text="live").wait_for(timeout=120_000)
        page.locator("dl.kv dd", has_text=re.compile(r"^v1$")).wait_for()

        body = page.get_by_label("Event (JSON body)")
        body.fill('{"name": ')
        assert page.get_by_role("button", name="Invoke").is_disabled()
        assert body.get_attribute("aria-invalid") == "true"
        body.fill('{"name": "browser"}')
        page.get_by_role("button", name="Invoke").click()
        outcome = page.locator(".outcome")
        outcome.get_by_role("heading", name=re.compile("Outcome")).wait_for(timeout=60_000)
        assert "ok" in outcome.locator("h3").inner_text()
        result = outcome.get_by_label("Result").inner_text()
        assert '"greeting": "hello browser"' in result, result
        assert re.search(r"[\d.]+ ms in the handler", outcome.inner_text())
        # What the handler printed is shown too, and the call is listed.
        assert "called with" in outcome.inner_text()
        assert page.get_by_role("table", name="Calls made from this page").locator("tbody tr").count() == 1
        shot(page, "function-invoke")

        page.goto(page.url.split("#")[0] + "#/functions")
        row = page.locator(f'tr[data-key="{name}"]')
        row.wait_for()
        assert "v1" in row.inner_text() and "python" in row.inner_text()
        shot(page, "functions")
    finally:
        api("DELETE", f"/v1/functions/{name}")


def test_a_schedule_is_created_run_paused_and_deleted_from_the_page(page, api, shot):
    name = f"cs-{secrets.token_hex(3)}"
    _accept_dialogs(page)
    page.goto(page.url.split("#")[0] + "#/schedules")
    try:
        page.get_by_label("Name", exact=True).fill(name)
        page.get_by_label("Cron expression").fill("0 3 * * *")
        page.get_by_label("Time zone (IANA)").fill("Europe/Berlin")
        page.get_by_label("Target").select_option("sandbox_exec")
        page.get_by_label("Template").fill("minimal")
        page.get_by_label(re.compile("^Command")).fill('echo "payload=$PANDASTACK_PAYLOAD"')
        page.get_by_label("Payload (JSON)").fill('{"from": "console"}')
        page.get_by_role("button", name="Create", exact=True).click()
        row = page.locator(f'tr[data-key="{name}"]')
        row.wait_for()
        st, s = api("GET", f"/v1/schedules/{name}")
        assert st == 200 and s["timezone"] == "Europe/Berlin" and s["payload"] == {"from": "console"}, s
        assert "0 3 * * *" in row.inner_text() and "Europe/Berlin" in row.inner_text()

        # Run now: the history opens and follows the run to its end.
        row.get_by_role("button", name=f"Run {name} now").click()
        history = page.get_by_role("region", name=f"History of {name}")
        history.wait_for()
        history.locator("tbody tr").filter(has_text="succeeded").wait_for(timeout=120_000)
        assert "manual" in history.inner_text()
        # The run's output is behind a <details> (its text is there, shown or not).
        output = history.locator("tbody tr").first.locator("details pre").text_content()
        assert 'payload={"from":"console"}' in output, output
        row.filter(has_text="succeeded").wait_for()
        shot(page, "schedules")

        row.get_by_role("button", name=f"Pause {name}").click()
        row.filter(has_text="paused").wait_for()
        assert api("GET", f"/v1/schedules/{name}")[1]["paused"] is True
        row.get_by_role("button", name=f"Resume {name}").click()
        row.get_by_role("button", name=f"Pause {name}").wait_for()
        assert api("GET", f"/v1/schedules/{name}")[1]["paused"] is False

        row.get_by_role("button", name=f"Delete schedule {name}").click()
        row.wait_for(state="detached")
        assert api("GET", f"/v1/schedules/{name}")[0] == 404
    finally:
        api("DELETE", f"/v1/schedules/{name}")
