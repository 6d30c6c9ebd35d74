"""Fixtures of the console's browser tests: Debian's Chromium driven by Playwright against a
real `pandastack server` with real guests (scripts/test-console.sh starts it and exports
PANDASTACK_BASE_URL and PANDASTACK_API_KEY).

- `base_url`, `api_key`: the server and a workspace key.
- `api(method, path, json=None, key=None, headers=None)` → `(status, body)`: the REST API with
  a key (Bearer), for setting things up and checking what the browser did.
- `browser`: one Chromium for the whole run (`PANDASTACK_CHROMIUM`, default /usr/bin/chromium).
- `page`: a fresh browser context signed in through the sign-in form, at `#/sandboxes`; page
  errors and console errors fail the test at teardown (a test expecting an error response
  clears `page.console_errors`).
- `shot(page, name)`: saves a full-page screenshot `<name>.png` in `$PANDASTACK_CONSOLE_SHOTS`
  (default /tmp/console-shots); `scripts/test-console.sh --update-screenshots` copies them to
  docs/console/.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright


@pytest.fixture(scope="session")
def base_url() -> str:
    return os.environ["PANDASTACK_BASE_URL"].rstrip("/")


@pytest.fixture(scope="session")
def api_key() -> str:
    return os.environ["PANDASTACK_API_KEY"]


@pytest.fixture(scope="session")
def api(base_url: str, api_key: str):
    def call(method: str, path: str, json_body=None, key: str | None = None, headers=None, timeout=300):
        data = None if json_body is None else json.dumps(json_body).encode()
        req = urllib.request.Request(base_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {key or api_key}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw = e.read()
            status = e.code
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        return status, body

    return call


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=os.environ.get("PANDASTACK_CHROMIUM", "/usr/bin/chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        yield b
        b.close()


def sign_in(page: Page, base_url: str, key: str) -> None:
    page.goto(base_url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("nav#nav:not([hidden])")


@pytest.fixture
def page(browser, base_url: str, api_key: str):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))

    def on_console(m):
        # A failed request is the browser's note, not the app's: the app shows API errors on the
        # page (the tests read them there), and some are by design (the first GET
        # /console/session is a 401; re-reading a sandbox just deleted is a 404).
        if m.type == "error" and not m.text.startswith("Failed to load resource"):
            errors.append(f"console {m.type}: {m.text}")

    pg.on("console", on_console)
    pg.console_errors = errors
    sign_in(pg, base_url, api_key)
    yield pg
    ctx.close()
    assert not errors, "\n".join(errors)


@pytest.fixture
def shot():
    out = Path(os.environ.get("PANDASTACK_CONSOLE_SHOTS", "/tmp/console-shots"))
    out.mkdir(parents=True, exist_ok=True)

    def take(pg: Page, name: str) -> Path:
        path = out / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        return path

    return take
