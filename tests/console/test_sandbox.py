"""The sandbox page in a real browser: its terminal (PTY WebSocket), files, logs, fork, metrics,
pause/resume and delete, against a real server with real guests."""

from __future__ import annotations

import re
import time
import uuid

import pytest


@pytest.fixture(scope="module")
def sandbox(api):
    status, sb = api("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"test": "console-sandbox"}})
    assert status == 201, sb
    yield sb
    api("DELETE", f"/v1/sandboxes/{sb['id']}")


def open_sandbox(page, base_url, sb_id):
    """Opens a running sandbox's page and waits for its terminal (the first tab) to connect:
    a handshake cut short by what a test does next would be the browser's console error."""
    page.goto(f"{base_url}/#/sandboxes/{sb_id}")
    page.get_by_role("heading", level=1, name=f"Sandbox {sb_id}").wait_for()
    page.locator(".sb-facts .state").wait_for()
    panel(page, "Terminal").get_by_role("status").filter(has_text="Connected.").wait_for()


def panel(page, tab):
    return page.get_by_role("tabpanel", name=tab)


def test_terminal_runs_a_command(page, base_url, sandbox, shot):
    open_sandbox(page, base_url, sandbox["id"])
    assert page.get_by_role("tab", name="Terminal").get_attribute("aria-selected") == "true"
    panel(page, "Terminal").get_by_role("status").filter(has_text="Connected.").wait_for()
    page.locator(".xterm-rows").filter(has_text="#").wait_for()  # the shell's prompt
    page.get_by_label("Terminal input").focus()
    page.keyboard.type("echo hello\n")
    # A row that is exactly the output (the typed command's row also holds "hello").
    rows = page.locator(".xterm-rows > div")
    deadline = time.time() + 30
    while time.time() < deadline:
        if "hello" in [r.strip() for r in rows.all_inner_texts()]:
            break
        page.wait_for_timeout(200)
    else:
        pytest.fail("no output row 'hello' in: " + page.locator(".xterm-rows").inner_text())
    shot(page, "sandbox-terminal")
    # The program's end is told, and Reconnect starts a new shell.
    page.keyboard.type("exit 3\n")
    panel(page, "Terminal").get_by_role("status").filter(has_text="exited with code 3").wait_for()
    page.get_by_role("button", name="Reconnect").click()
    panel(page, "Terminal").get_by_role("status").filter(has_text="Connected.").wait_for()
    # Keyboard: Shift+Escape leaves the terminal for its tab.
    page.get_by_label("Terminal input").focus()
    page.keyboard.press("Shift+Escape")
    assert page.evaluate("document.activeElement.getAttribute('role')") == "tab"
    assert page.evaluate("document.activeElement.textContent") == "Terminal"
    # The terminal follows the theme toggle.
    before = page.locator(".xterm-scrollable-element").evaluate("e => getComputedStyle(e).backgroundColor")
    page.locator("#theme").click()
    page.wait_for_function(
        "b => getComputedStyle(document.querySelector('.xterm-scrollable-element')).backgroundColor !== b", arg=before
    )


def test_files_upload_list_download_delete(page, base_url, api, sandbox, shot):
    sb_id = sandbox["id"]
    open_sandbox(page, base_url, sb_id)
    page.get_by_role("tab", name="Files").click()
    page.get_by_role("navigation", name="Folder").filter(has_text="root").wait_for()
    name = f"up-{uuid.uuid4().hex[:8]}.txt"
    content = b"uploaded from the browser\n\xe2\x9c\x93 bytes kept\n"
    page.get_by_label("Files to upload into this folder").set_input_files(
        {"name": name, "mimeType": "text/plain", "buffer": content}
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    row = page.locator(f'tr[data-key="/root/{name}"]')
    row.wait_for()
    assert f"{len(content)} B" in row.inner_text()
    assert "-rw-" in row.inner_text()
    status, body = api("GET", f"/v1/sandboxes/{sb_id}/fs?path=/root/{name}")
    assert status == 200
    assert body == content.decode()
    shot(page, "sandbox-files")

    # Download: the browser saves the file's bytes.
    with page.expect_download() as dl:
        row.get_by_role("button", name=f"Download {name}").click()
    assert dl.value.suggested_filename == name
    assert open(dl.value.path(), "rb").read() == content

    # A folder, entered and left by the breadcrumbs.
    page.get_by_label("Folder name").fill("made-here")
    page.get_by_role("button", name="Make", exact=True).click()
    page.get_by_role("button", name="Open folder made-here").click()
    page.get_by_role("navigation", name="Folder").filter(has_text="made-here").wait_for()
    page.get_by_text("This folder is empty.").wait_for()
    page.get_by_role("navigation", name="Folder").get_by_role("button", name="root").click()

    page.once("dialog", lambda d: d.accept())
    page.locator(f'tr[data-key="/root/{name}"]').get_by_role("button", name=f"Delete {name}").click()
    page.locator(f'tr[data-key="/root/{name}"]').wait_for(state="detached")
    status, _ = api("GET", f"/v1/sandboxes/{sb_id}/fs/stat?path=/root/{name}")
    assert status == 404
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Delete made-here").click()
    page.locator('tr[data-key="/root/made-here"]').wait_for(state="detached")


def test_logs_follow_the_guest_console(page, base_url, api, sandbox):
    open_sandbox(page, base_url, sandbox["id"])
    page.get_by_role("tab", name="Logs").click()
    panel(page, "Logs").get_by_role("status").filter(has_text="Following.").wait_for()
    marker = f"console-marker-{uuid.uuid4().hex[:8]}"
    status, r = api("POST", f"/v1/sandboxes/{sandbox['id']}/exec", {"cmd": f"echo {marker} > /dev/console"})
    assert status == 200 and r["exit_code"] == 0, r
    log = page.get_by_role("log", name="Guest console log")
    log.filter(has_text=marker).wait_for()
    # Paused, new output is held back; resumed, it is shown.
    page.get_by_role("button", name="Pause following").click()
    held = f"held-marker-{uuid.uuid4().hex[:8]}"
    api("POST", f"/v1/sandboxes/{sandbox['id']}/exec", {"cmd": f"echo {held} > /dev/console"})
    panel(page, "Logs").get_by_role("status").filter(has_text="new output is held").wait_for()
    assert held not in log.inner_text()
    page.get_by_role("button", name="Resume following").click()
    log.filter(has_text=held).wait_for()


def test_metrics_show_charts(page, base_url, api, sandbox, shot):
    # Some CPU for the chart to show (the readings come every 5 s).
    api(
        "POST",
        f"/v1/sandboxes/{sandbox['id']}/exec",
        {"cmd": "(timeout 20 sh -c 'while :; do :; done') >/dev/null 2>&1 &"},
    )
    open_sandbox(page, base_url, sandbox["id"])
    page.get_by_role("tab", name="Metrics").click()
    # The chart redraws every 5 s: wait for three readings and a CPU peak above zero, read from
    # the chart's own text summary.
    page.wait_for_function(
        """() => {
            const fig = [...document.querySelectorAll("figure.chart")]
                .find(f => f.textContent.includes("CPU (% of the vCPUs)"));
            const d = fig?.querySelector("path.chart-line")?.getAttribute("d") || "";
            const peak = /peak ([\\d.]+) %/.exec(fig?.textContent || "");
            return (d.match(/L/g) || []).length >= 2 && peak && Number(peak[1]) > 0;
        }""",
        timeout=90_000,
    )
    cpu = page.locator("figure.chart").filter(has_text="CPU (% of the vCPUs)")
    # "attached", not visible: a constant series is a flat line, which has no height.
    cpu.locator("path.chart-line").first.wait_for(state="attached", timeout=60_000)
    mem = page.locator("figure.chart").filter(has_text="Guest memory")
    mem.locator("path.chart-line").first.wait_for(state="attached")
    assert re.search(r"used [\d.]+ MiB", mem.inner_text())
    assert page.get_by_label("Since").input_value() == "1h"
    shot(page, "sandbox-metrics")


def test_pause_resume_and_snapshot(page, base_url, api, sandbox, shot):
    sb_id = sandbox["id"]
    open_sandbox(page, base_url, sb_id)
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator(".sb-facts .state").filter(has_text="paused").wait_for()
    assert api("GET", f"/v1/sandboxes/{sb_id}")[1]["state"] == "paused"
    assert page.get_by_role("button", name="Snapshot").count() == 0
    # Opened while paused, the terminal says so and waits to be asked.
    page.reload()
    term = panel(page, "Terminal").get_by_role("status")
    term.filter(has_text="The sandbox is paused").wait_for()
    page.get_by_role("button", name="Resume").click()
    page.locator(".sb-facts .state").filter(has_text="running").wait_for()
    page.get_by_role("button", name="Connect", exact=True).click()
    term.filter(has_text="Connected.").wait_for()

    page.get_by_role("button", name="Snapshot").click()
    notice = page.locator(".notice").filter(has_text="Snapshot")
    notice.wait_for(timeout=60_000)
    snap_id = re.search(r"Snapshot (\S+) made", notice.inner_text()).group(1)
    try:
        page.get_by_role("tab", name="Snapshots").click()
        page.locator(f'tr[data-key="{snap_id}"]').wait_for()
        shot(page, "sandbox-snapshots")
        # A new sandbox from it: its page is shown.
        page.get_by_role("button", name=f"New sandbox from snapshot {snap_id}").click()
        page.wait_for_url(re.compile(r"#/sandboxes/(?!" + re.escape(sb_id) + r")[^/]+$"))
        new_id = page.url.rsplit("/", 1)[1]
        try:
            page.get_by_role("heading", level=1, name=f"Sandbox {new_id}").wait_for()
            page.locator(".sb-facts").filter(has_text=snap_id).wait_for()
            panel(page, "Terminal").get_by_role("status").filter(has_text="Connected.").wait_for()
            assert api("GET", f"/v1/sandboxes/{new_id}")[1]["snapshot_id"] == snap_id
            page.goto(f"{base_url}/#/sandboxes")
        finally:
            api("DELETE", f"/v1/sandboxes/{new_id}")
        open_sandbox(page, base_url, sb_id)
        page.get_by_role("tab", name="Snapshots").click()
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name=f"Delete snapshot {snap_id}").click()
        page.locator(f'tr[data-key="{snap_id}"]').wait_for(state="detached")
        snaps = api("GET", "/v1/snapshots?limit=200")[1]["data"]
        assert snap_id not in [s["id"] for s in snaps]
    finally:
        api("DELETE", f"/v1/snapshots/{snap_id}")


def test_port_preview_url_public_and_private(page, base_url, api, sandbox):
    sb_id = sandbox["id"]
    open_sandbox(page, base_url, sb_id)
    page.get_by_role("tab", name="Ports").click()
    page.get_by_role("spinbutton", name="Port").fill("8123")
    page.get_by_role("button", name="Show URL").click()
    card = page.locator(".card").filter(has=page.get_by_role("heading", name="Port 8123"))
    card.wait_for()
    assert f"8123-{sb_id}" in card.inner_text()
    assert "private" in card.inner_text()
    token = api("GET", f"/v1/sandboxes/{sb_id}/ports/8123/url")[1]["token"]
    assert token in card.get_by_role("link", name="Open port 8123").get_attribute("href")
    card.get_by_role("button", name="Make public").click()
    card.get_by_role("button", name="Make private").wait_for()
    assert api("GET", f"/v1/sandboxes/{sb_id}/ports/8123/url")[1]["public"] is True
    card.get_by_role("button", name="Make private").click()
    card.get_by_role("button", name="Make public").wait_for()
    assert api("GET", f"/v1/sandboxes/{sb_id}/ports/8123/url")[1]["public"] is False


def test_hibernate_and_wake(page, base_url, api, sandbox):
    sb_id = sandbox["id"]
    open_sandbox(page, base_url, sb_id)
    page.get_by_role("button", name="Hibernate").click()
    state = page.locator(".sb-facts .state")
    state.filter(has_text="hibernated").wait_for(timeout=90_000)
    assert api("GET", f"/v1/sandboxes/{sb_id}")[1]["state"] == "hibernated"
    page.get_by_role("button", name="Wake").click()
    state.filter(has_text="running").wait_for(timeout=90_000)
    assert page.get_by_role("button", name="Wake").count() == 0


def test_fork_links_to_the_child(page, base_url, api, sandbox):
    sb_id = sandbox["id"]
    open_sandbox(page, base_url, sb_id)
    page.get_by_label("Copies").fill("1")
    page.get_by_role("button", name="Fork", exact=True).click()
    result = page.locator(".fork-result")
    result.get_by_role("link").first.wait_for(timeout=120_000)
    children = result.get_by_role("link").all_inner_texts()
    try:
        assert len(children) == 1
        status, child = api("GET", f"/v1/sandboxes/{children[0]}")
        assert status == 200 and child["state"] == "running", child
        result.get_by_role("link", name=children[0]).click()
        page.get_by_role("heading", level=1, name=f"Sandbox {children[0]}").wait_for()
        panel(page, "Terminal").get_by_role("status").filter(has_text="Connected.").wait_for()
        page.get_by_role("link", name="Sandboxes", exact=True).first.click()
        page.get_by_role("heading", level=1, name="Sandboxes").wait_for()
    finally:
        for c in children:
            api("DELETE", f"/v1/sandboxes/{c}")


def test_delete_goes_back_to_the_list(page, base_url, api):
    status, sb = api("POST", "/v1/sandboxes", {"template": "minimal"})
    assert status == 201, sb
    try:
        open_sandbox(page, base_url, sb["id"])
        page.once("dialog", lambda d: d.dismiss())
        page.get_by_role("button", name="Delete", exact=True).click()
        assert api("GET", f"/v1/sandboxes/{sb['id']}")[0] == 200  # not confirmed: kept
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Delete", exact=True).click()
        page.wait_for_url(re.compile(r"#/sandboxes$"))
        page.get_by_role("heading", level=1, name="Sandboxes").wait_for()
        assert api("GET", f"/v1/sandboxes/{sb['id']}")[0] == 404
    finally:
        api("DELETE", f"/v1/sandboxes/{sb['id']}")
