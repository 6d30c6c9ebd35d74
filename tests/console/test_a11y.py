"""Accessibility of every page, checked by axe-core (npm) inside the real browser: no serious or
critical violation (names, labels, roles, contrast, landmarks) on any main page, in the light
and the dark theme, at a laptop's and a phone's width. The page is also operable from the
keyboard alone: Tab reaches the navigation, and Enter on a link opens its page."""

from __future__ import annotations

import os

import pytest

from conftest import sign_in

PAGES = [
    "sandboxes",
    "templates",
    "volumes",
    "databases",
    "apps",
    "functions",
    "schedules",
    "keys",
    "usage",
]


def axe_violations(page) -> list[str]:
    page.add_script_tag(path=os.environ["PANDASTACK_AXE"])
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return r.violations
              .filter(v => v.impact === "serious" || v.impact === "critical")
              .map(v => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", ")}`);
        }"""
    )
    return result


@pytest.mark.parametrize(
    "theme,width", [("light", 1280), ("dark", 1280), ("light", 390), ("dark", 390)]
)
def test_every_page_passes_axe(browser, base_url, api_key, theme, width, shot):
    # bypass_csp: axe is injected by the test; the console's own policy is tested elsewhere.
    ctx = browser.new_context(
        viewport={"width": width, "height": 860},
        color_scheme=theme,
        bypass_csp=True,
    )
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(pg, base_url, api_key)
    found = {}
    for name in PAGES:
        pg.goto(f"{base_url}/#/{name}")
        pg.locator("main h1").first.wait_for()
        pg.wait_for_load_state("networkidle")
        bad = axe_violations(pg)
        if bad:
            found[name] = bad
        if width < 500:
            shot(pg, f"phone-{theme}-{name}")
    ctx.close()
    assert not errors, errors
    assert not found, "\n".join(f"{k}: {v}" for k, vs in found.items() for v in vs)


def test_the_console_works_from_the_keyboard(page, base_url):
    page.goto(base_url + "/#/sandboxes")
    page.locator("main h1").first.wait_for()
    # The skip link takes focus to the content without leaving the page.
    page.locator("a.skip").focus()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    assert page.url.endswith("#/sandboxes")
    # From the content, the sections are reached backwards and opened with Enter.
    for _ in range(15):
        page.keyboard.press("Shift+Tab")
        if page.evaluate("document.activeElement.textContent") == "Templates":
            break
    else:
        pytest.fail("Shift+Tab never reached the Templates link")
    page.keyboard.press("Enter")
    page.wait_for_url("**/#/templates")
    # The router marks the section on `hashchange`, a task after the address changes.
    page.locator("nav a[aria-current=page]", has_text="Templates").wait_for()
    page.locator("main h1", has_text="Templates").wait_for()
