"""Sign-in and the sandbox list in a real browser."""

from __future__ import annotations

from conftest import sign_in


def test_signed_in_page_lists_a_sandbox_created_through_the_api(page, api, shot):
    status, sb = api("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"from": "api"}})
    assert status == 201, sb
    try:
        # The row may first come from a list read while the create ran ("starting"); the
        # event stream brings it to "running".
        row = page.locator(f'tr[data-key="{sb["id"]}"]')
        row.filter(has_text="running").wait_for()
        shot(page, "sandboxes")
    finally:
        api("DELETE", f"/v1/sandboxes/{sb['id']}")
    # The delete reaches the page through the event stream.
    page.locator(f'tr[data-key="{sb["id"]}"]').wait_for(state="detached")


def test_a_wrong_key_is_refused(browser, base_url):
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.goto(base_url + "/")
    pg.get_by_label("API key").fill("pds_" + "0" * 64)
    pg.get_by_role("button", name="Sign in").click()
    alert = pg.get_by_role("alert")
    alert.wait_for()
    assert "unauthorized" in alert.inner_text()
    assert pg.get_by_label("API key").input_value() == ""
    assert pg.locator("nav#nav").is_hidden()
    ctx.close()
