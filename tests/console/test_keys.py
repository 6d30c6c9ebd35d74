"""API keys and usage pages in a real browser: a key made on the page shows its secret once,
revoking a key (the session's own signs the browser out), CSRF refusals, usage bars."""

from __future__ import annotations

import secrets

from conftest import sign_in


def _key(api, name, **extra):
    st, k = api("POST", "/v1/keys", {"name": name, **extra})
    assert st == 201, k
    return k


def _listed(api, key_id):
    st, keys = api("GET", "/v1/keys")
    assert st == 200, keys
    return next((k for k in keys["data"] if k["id"] == key_id), None)


def test_a_key_made_on_the_page_shows_its_secret_once_and_another_is_revoked(page, api, base_url, shot):
    tag = secrets.token_hex(3)
    other = _key(api, f"other-{tag}")
    page.on("dialog", lambda d: d.accept())
    page.goto(base_url + "/#/keys")
    page.locator(f'tr[data-key="{other["id"]}"]').wait_for()

    name = f"from-page-{tag}"
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("group", name="apps").get_by_label("read").check()
    page.get_by_role("group", name="functions").get_by_label("read").check()
    page.get_by_role("group", name="functions").get_by_label("exec").check()
    page.get_by_role("button", name="Create key").click()
    once = page.get_by_role("region", name=f"Key {name} created")
    once.wait_for()
    assert "shown only this once" in once.get_by_role("alert").inner_text()
    secret = once.locator("code").inner_text()
    assert secret.startswith("pds_"), secret
    assert once.get_by_role("button", name=f"Secret of key {name}: copy to the clipboard").is_visible()
    shot(page, "keys")

    # The key is what the form asked for, and the secret works with exactly those scopes.
    st, keys = api("GET", "/v1/keys")
    made = next(k for k in keys["data"] if k["name"] == name)
    assert sorted(made["scopes"]) == ["apps:read", "functions:exec", "functions:read"], made
    assert api("GET", "/v1/apps", key=secret)[0] == 200
    assert api("GET", "/v1/sandboxes", key=secret)[0] == 403
    page.locator(f'tr[data-key="{made["id"]}"]').wait_for()

    # "Done" forgets it, and nothing brings it back.
    once.get_by_role("button", name="Done: I have copied it").click()
    once.wait_for(state="detached")
    assert secret not in page.content()
    page.reload()
    page.locator(f'tr[data-key="{made["id"]}"]').wait_for()
    assert secret not in page.content()
    assert made["prefix"] in page.locator(f'tr[data-key="{made["id"]}"]').inner_text()

    # Revoke the other key from its row.
    row = page.locator(f'tr[data-key="{other["id"]}"]')
    row.get_by_role("button", name=f"Revoke key other-{tag}").click()
    row.filter(has_text="revoked").wait_for()
    assert _listed(api, other["id"])["revoked"] is True
    assert api("GET", "/v1/apps", key=other["secret"])[0] == 401
    assert _listed(api, made["id"])["revoked"] is False
    api("DELETE", f"/v1/keys/{made['id']}")


def test_revoking_the_key_of_the_session_signs_the_browser_out(browser, api, base_url):
    k = _key(api, f"session-{secrets.token_hex(3)}")
    ctx = browser.new_context()
    ctx.set_default_timeout(30_000)
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("dialog", lambda d: d.accept())
    try:
        sign_in(pg, base_url, k["secret"])
        assert k["name"] in pg.locator("#who").inner_text()
        pg.goto(base_url + "/#/keys")
        row = pg.locator(f'tr[data-key="{k["id"]}"]')
        row.wait_for()
        assert "this session's key" in row.inner_text()
        row.get_by_role("button", name=f"Revoke key {k['name']}").click()
        # The next read is 401: the page reloads to the sign-in form.
        pg.get_by_label("API key").wait_for()
        pg.get_by_role("button", name="Sign in").wait_for()
        assert pg.locator("nav#nav").is_hidden()
        assert _listed(api, k["id"])["revoked"] is True
        st = pg.evaluate("async () => (await fetch('/console/session')).status")
        assert st == 401
        assert not errors, errors
    finally:
        ctx.close()


def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(page, api, base_url):
    victim = _key(api, f"victim-{secrets.token_hex(3)}")
    name = f"csrf-{secrets.token_hex(3)}"
    page.goto(base_url + "/#/keys")
    page.locator(f'tr[data-key="{victim["id"]}"]').wait_for()
    # The page's own origin and session cookie, but no X-CSRF-Token.
    made = page.evaluate(
        """async (name) => {
            const r = await fetch('/v1/keys', {method: 'POST', credentials: 'same-origin',
              headers: {'Content-Type': 'application/json'}, body: JSON.stringify({name})});
            return {status: r.status, body: await r.text()};
        }""",
        name,
    )
    assert made["status"] == 403, made
    assert "X-CSRF-Token" in made["body"] or "csrf" in made["body"].lower(), made
    revoked = page.evaluate(
        "async (id) => (await fetch('/v1/keys/' + id, {method: 'DELETE', credentials: 'same-origin'})).status",
        victim["id"],
    )
    assert revoked == 403
    wrong = page.evaluate(
        """async (id) => (await fetch('/v1/keys/' + id, {method: 'DELETE', credentials: 'same-origin',
             headers: {'X-CSRF-Token': 'not-the-token'}})).status""",
        victim["id"],
    )
    assert wrong == 403
    # Nothing changed.
    st, keys = api("GET", "/v1/keys")
    assert not any(k["name"] == name for k in keys["data"])
    assert _listed(api, victim["id"])["revoked"] is False
    # A read needs no token.
    assert page.evaluate("async () => (await fetch('/v1/keys')).status") == 200
    api("DELETE", f"/v1/keys/{victim['id']}")


def test_the_usage_page_shows_bars_against_the_limits_and_metered_usage(page, api, base_url, shot):
    page.goto(base_url + "/#/usage")
    meters = page.get_by_role("meter")
    meters.first.wait_for()
    assert meters.count() == 6
    st, u = api("GET", "/v1/usage")
    assert st == 200
    running = page.get_by_role("meter", name="Sandboxes running")
    assert running.get_attribute("aria-valuemax") == str(u["sandboxes"]["limit"])
    # The bar's width is set from its share (the page's policy refuses inline style attributes).
    width = page.locator(".bar-fill").first.evaluate("el => el.style.width")
    assert width.endswith("%"), width
    assert f"of {u['snapshots']['limit']}" in page.locator(".bar-row", has_text="Snapshots").inner_text()
    table = page.get_by_role("table", name="Metered usage")
    assert "Total" in table.locator("tfoot").inner_text()
    # Another window and grouping reads again.
    page.get_by_label("Group by").select_option("kind")
    page.get_by_role("button", name="Show").click()
    table.locator("thead").get_by_text("Kind").wait_for()
    assert page.get_by_role("link", name="Download as CSV").get_attribute("href").startswith("/v1/usage?")
    shot(page, "usage")
