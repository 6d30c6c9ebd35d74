"""Templates, volumes and databases in a real browser: a database made from its form, the SQL
console (a result table, a write checked through the API, an error shown), delete; a volume
made, snapshotted and deleted; the template catalog."""

from __future__ import annotations

import re
import secrets

from playwright.sync_api import expect


def _accept_dialogs(page):
    page.on("dialog", lambda d: d.accept())


def test_database_from_the_form_and_its_sql_console(page, api, base_url, shot):
    name = "t_" + secrets.token_hex(4)
    _accept_dialogs(page)
    page.goto(base_url + "/#/databases")
    form = page.get_by_role("form", name="New database")
    form.get_by_label("Name").fill(name)
    form.get_by_label("Disk (GiB)").fill("1")
    form.get_by_role("button", name="Create").click()
    db_id = None
    try:
        # The POST answers once the database accepts connections (tens of seconds under TCG).
        expect(form.get_by_role("status")).to_have_text(f"Database {name} is ready.", timeout=150_000)
        status, listed = api("GET", "/v1/databases")
        assert status == 200, listed
        (db,) = [d for d in listed["data"] if d["name"] == name]
        db_id = db["id"]
        assert db["state"] == "ready"
        row = page.locator(f'tr[data-key="{db_id}"]')
        expect(row).to_contain_text("ready")
        expect(row).to_contain_text("17")
        shot(page, "databases")

        row.get_by_role("link", name=name).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(name)
        # The password is masked until shown; the copy button copies it whole.
        conn = page.locator("dd", has_text="sslmode=require").first
        expect(conn).to_contain_text("••••••••")
        conn.get_by_role("button", name=re.compile("Show the password")).click()
        expect(conn).not_to_contain_text("••••")

        sql = page.get_by_role("textbox", name="SQL", exact=True)
        sql.fill("select 41 + 1 as answer")
        sql.press("Control+Enter")
        result = page.locator(".sql-result table")
        expect(result.locator("th")).to_have_text(["answer"])
        expect(result.locator("td")).to_have_text(["42"])
        expect(page.get_by_role("tabpanel").get_by_role("status")).to_contain_text("1 row")

        sql.fill("create table notes (id int primary key, body text)")
        page.get_by_role("button", name="Run").click()
        expect(page.get_by_role("tabpanel").get_by_role("status")).to_contain_text("CREATE")
        sql.fill("insert into notes values (1, 'from the console'), (2, 'twice')")
        page.get_by_role("button", name="Run").click()
        expect(page.get_by_role("tabpanel").get_by_role("status")).to_contain_text("INSERT · 2 rows")
        status, r = api("POST", f"/v1/databases/{db_id}/query", {"sql": "select body from notes order by id"})
        assert status == 200, r
        assert r["rows"] == [["from the console"], ["twice"]]

        # A bad statement shows PostgreSQL's message from the API's envelope.
        sql.fill("select * from no_such_table")
        page.get_by_role("button", name="Run").click()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text('relation "no_such_table" does not exist')
        expect(alert).to_contain_text("query_failed")
        expect(page.locator(".sql-result table")).to_have_count(0)
        # The last queries are kept: the first one is one click away.
        page.get_by_role("button", name="select 41 + 1 as answer").click()
        expect(sql).to_have_value("select 41 + 1 as answer")
        sql.press("Control+Enter")
        expect(page.locator(".sql-result td")).to_have_text(["42"])
        shot(page, "database-sql")

        # Delete (confirmed) goes back to the list and the database is gone.
        page.locator("main > section > .head .actions").get_by_role("button", name="Delete").click()
        page.wait_for_url(re.compile(r"#/databases$"))
        expect(page.locator(f'tr[data-key="{db_id}"]')).to_have_count(0)
        assert api("GET", f"/v1/databases/{db_id}")[0] == 404
        db_id = None
    finally:
        if db_id:
            api("DELETE", f"/v1/databases/{db_id}")
        else:
            # A create that failed half-way may have left a row.
            status, listed = api("GET", "/v1/databases")
            for d in (listed or {}).get("data", []) if status == 200 else []:
                if d["name"] == name:
                    api("DELETE", f"/v1/databases/{d['id']}")


def test_volume_create_snapshot_and_delete(page, api, base_url, shot):
    name = "tv-" + secrets.token_hex(4)
    _accept_dialogs(page)
    page.goto(base_url + "/#/volumes")
    form = page.get_by_role("form", name="New volume")
    form.get_by_label("Name").fill(name)
    form.get_by_label("Size (GiB)").fill("1")
    form.get_by_role("button", name="Create").click()
    try:
        row = page.locator(f'tr[data-key="{name}"]')
        expect(row).to_contain_text("1 GiB")
        expect(row).to_contain_text("not mounted")
        status, v = api("GET", f"/v1/volumes/{name}")
        assert status == 200 and v["size_gb"] == 1, v

        row.get_by_role("button", name=f"Snapshots and backups of volume {name}").click()
        card = page.get_by_role("region", name=f"Volume {name}")
        card.get_by_role("button", name="Take snapshot").click()
        snaps = card.get_by_role("table", name=f"Snapshots of volume {name}")
        expect(snaps.locator("tbody tr")).to_have_count(1)
        status, listed = api("GET", f"/v1/volumes/{name}/snapshots")
        assert status == 200 and len(listed["data"]) == 1, listed
        expect(snaps).to_contain_text(listed["data"][0]["id"])
        # Grow it (nothing has it mounted).
        card.get_by_label("New size (GiB)").fill("2")
        card.get_by_role("button", name="Grow").click()
        expect(row).to_contain_text("2 GiB")
        assert api("GET", f"/v1/volumes/{name}")[1]["size_gb"] == 2
        shot(page, "volumes")

        page.locator(f'tr[data-key="{name}"]').get_by_role("button", name=f"Delete volume {name}").click()
        expect(page.locator(f'tr[data-key="{name}"]')).to_have_count(0)
        expect(card).to_have_count(0)
        assert api("GET", f"/v1/volumes/{name}")[0] == 404
    finally:
        api("DELETE", f"/v1/volumes/{name}")


def test_templates_page_lists_minimal_and_writes_a_spec(page, base_url, shot):
    page.goto(base_url + "/#/templates")
    row = page.locator('tr[data-key="minimal"]')
    expect(row).to_contain_text("catalog")
    expect(row).to_contain_text("512 MiB")
    row.get_by_role("button", name="Details and builds of template minimal").click()
    card = page.get_by_role("region", name="Template minimal")
    expect(card).to_contain_text("1 vCPU, 512 MiB memory")

    # The spec builder writes the catalog's TOML and refuses what the server would.
    page.get_by_text("Build a template from a spec").click()
    builder = page.get_by_role("form", name="Build from a spec")
    builder.get_by_label("Name").fill("my-tools")
    builder.get_by_label("pip packages").fill("requests")
    expect(builder.get_by_role("status")).to_contain_text("need python3-pip")
    builder.get_by_label("Debian packages").fill("python3 python3-pip jq")
    expect(builder.get_by_role("status")).to_have_text("")
    builder.get_by_text("Spec (TOML)").click()
    spec = builder.get_by_label("The spec that will be sent (TOML)")
    expect(spec).to_contain_text('name = "my-tools"')
    expect(spec).to_contain_text('packages = ["python3", "python3-pip", "jq"]')
    expect(spec).to_contain_text('[pip]\npackages = ["requests"]')
    builder.get_by_label("Name").fill("Bad Name")
    expect(builder.get_by_role("status")).to_contain_text("Name: 1-40")
    builder.get_by_label("Name").fill("my-tools")
    shot(page, "templates")
