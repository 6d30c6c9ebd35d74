"""Apps against a fake local HTTP server (no PandaStack server needed): what each call of
``client.apps`` sends and how it reads the answers (the nested ``git``, ``build`` and ``start``),
paging of apps and deploys, the gzip'd tar of ``deploy_directory`` (its files, without ``.git``
and ``node_modules``), plain and followed logs, waiting for a deploy and its timeout, and the
``app_not_found`` error class. Sync and async."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import tarfile
from urllib.parse import parse_qs

import httpx
import pytest

from fakeserver import FakeServer, error, reply
from pandastack import (
    App,
    AppBuild,
    AppDomain,
    AppGit,
    AppNotFoundError,
    AppStart,
    AsyncPandaStack,
    ConflictError,
    Deploy,
    DeployTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PandaStack,
    PandaStackError,
)

pytestmark = pytest.mark.offline


def app(**kw):
    a = {
        "id": "app-1",
        "name": "web",
        "url": "http://web.apps.localhost:8080",
        "git": {"url": "https://git.example/web.git", "ref": "main"},
        "env": {"NODE_ENV": "production"},
        "secret_names": ["DB_PASSWORD"],
        "build": {"command": "npm run build", "output_dir": None},
        "start": {"command": None, "port": 3000},
        "memory_mb": 1024,
        "min_instances": 0,
        "idle_seconds": 300,
        "health_path": "/healthz",
        "webhook_secret": "whsec-s3cret",
        "deploy_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 pandastack-app-web",
        "live_deploy": None,
        "instance_state": None,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    a.update(kw)
    return a


def deploy(state="queued", **kw):
    d = {
        "id": "dep-1",
        "app": "web",
        "number": 1,
        "ref": "main",
        "commit": None,
        "state": state,
        "error": None,
        "plan": None,
        "phases_ms": {},
        "sandbox_id": None,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    d.update(kw)
    return d


def body(rec):
    return json.loads(rec["body"]) if rec["body"] else None


def query(rec):
    return {k: v[0] for k, v in parse_qs(rec["query"]).items()}


def sse(*events):
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


def sse_reply(data: bytes):
    return reply(200, data, {"Content-Type": "text/event-stream"})


@pytest.fixture
def fake():
    with FakeServer() as s:
        yield s


def make(fake: FakeServer) -> PandaStack:
    return PandaStack(api_key="pds_test", base_url=fake.url, max_retries=0)


def test_create_sends_only_what_was_given_and_reads_the_app(fake):
    fake.on_call("POST", "/v1/apps", lambda r: reply(201, app(name=body(r)["name"])))
    with make(fake) as c:
        a = c.apps.create("web", "https://git.example/web.git")
        assert isinstance(a, App)
        assert (a.id, a.name, a.url) == ("app-1", "web", "http://web.apps.localhost:8080")
        assert a.git == AppGit("https://git.example/web.git", "main")
        assert a.build == AppBuild(command="npm run build") and a.start == AppStart(port=3000)
        assert (a.env, a.secret_names) == ({"NODE_ENV": "production"}, ["DB_PASSWORD"])
        assert (a.memory_mb, a.min_instances, a.idle_seconds, a.health_path) == (1024, 0, 300, "/healthz")
        assert (a.live_deploy, a.instance_state, a.webhook_secret) == (None, None, "whsec-s3cret")
        assert a.deploy_key == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 pandastack-app-web"
        assert a.created_at and a.updated_at and a.raw["id"] == "app-1"
        assert "s3cret" not in repr(a), "the webhook secret stays out of reprs"
        c.apps.create(
            "full",
            AppGit("https://git.example/full.git", "v1"),
            env={"A": "1", "N": 2},  # type: ignore[dict-item]
            secrets={"TOKEN": "t"},
            build=AppBuild(command="make", output_dir="dist"),
            start={"command": "node server.js", "port": 8080},
            memory_mb=2048,
            min_instances=1,
            idle_seconds=60,
            health_path="/up",
            root_dir="services/web",
            deploy=False,
        )
        c.apps.create("dict", {"url": "/srv/git/dict.git"}, ref="dev", start=AppStart(port=5000), deploy=True)
        for bad in (
            lambda: c.apps.create("", "https://x"),
            lambda: c.apps.create("x", ""),
            lambda: c.apps.create("x", {"ref": "main"}),
            lambda: c.apps.create("x", {"url": "u", "branch": "b"}),
            lambda: c.apps.create("x", 42),  # type: ignore[arg-type]
            lambda: c.apps.create("x", "u", build={"cmd": "make"}),
            lambda: c.apps.create("x", "u", start={"port": 0}),
            lambda: c.apps.create("x", "u", start="node"),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidArgumentError):
                bad()
    calls = fake.calls("POST", "/v1/apps")
    assert [body(r) for r in calls] == [
        {"name": "web", "git": {"url": "https://git.example/web.git"}},
        {
            "name": "full",
            "git": {"url": "https://git.example/full.git", "ref": "v1"},
            "env": {"A": "1", "N": "2"},
            "secrets": {"TOKEN": "t"},
            "build": {"command": "make", "output_dir": "dist"},
            "start": {"command": "node server.js", "port": 8080},
            "memory_mb": 2048,
            "min_instances": 1,
            "idle_seconds": 60,
            "health_path": "/up",
            "root_dir": "services/web",
            "deploy": False,
        },
        {"name": "dict", "git": {"url": "/srv/git/dict.git", "ref": "dev"}, "start": {"port": 5000}, "deploy": True},
    ]
    assert calls[0]["headers"]["content-type"] == "application/json"


def test_list_follows_cursors_get_update_and_delete(fake):
    fake.on_call(
        "GET",
        "/v1/apps",
        lambda r: reply(200, {"data": [app(id="app-2", name="b")], "next_cursor": None})
        if query(r).get("cursor") == "a"
        else reply(200, {"data": [app(name="a")], "next_cursor": "a"}),
    )
    fake.on("GET", "/v1/apps/web", reply(200, app(live_deploy="dep-1", instance_state="running")))
    fake.on_call("PATCH", "/v1/apps/web", lambda r: reply(200, app(**{k: v for k, v in body(r).items() if k != "secrets"})))
    fake.on("DELETE", "/v1/apps/web", reply(204), error(404, "app_not_found", "app web not found"))
    new_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2 pandastack-app-web"
    fake.on("POST", "/v1/apps/web/deploy-key", reply(200, app(deploy_key=new_key)))
    with make(fake) as c:
        assert [a.name for a in c.apps.list(limit=1)] == ["a", "b"]
        assert [query(r) for r in fake.calls("GET", "/v1/apps")] == [{"limit": "1"}, {"limit": "1", "cursor": "a"}]
        page = c.apps.list(cursor="a").first_page()
        assert [a.id for a in page.data] == ["app-2"] and page.next_cursor is None
        got = c.apps.get("web")
        assert (got.live_deploy, got.instance_state) == ("dep-1", "running")
        u = c.apps.update("web", env={"NODE_ENV": "staging"}, min_instances=1)
        assert u.env == {"NODE_ENV": "staging"} and u.min_instances == 1
        c.apps.update("web", git="https://git.example/other.git", ref="release", secrets={}, idle_seconds=30)
        c.apps.update("web", build={"output_dir": "out"}, start=AppStart(command="serve"), memory_mb=512, health_path="/")
        c.apps.update("web", env={})
        with pytest.raises(InvalidArgumentError):
            c.apps.update("web", ref="main")  # a ref alone cannot be sent: git is replaced whole
        assert c.apps.rotate_deploy_key("web").deploy_key == new_key
        assert [body(r) for r in fake.calls("POST", "/v1/apps/web/deploy-key")] == [None]
        assert c.apps.delete("web") is True
        assert c.apps.delete("web") is False
    assert [body(r) for r in fake.calls("PATCH", "/v1/apps/web")] == [
        {"env": {"NODE_ENV": "staging"}, "min_instances": 1},
        {"git": {"url": "https://git.example/other.git", "ref": "release"}, "secrets": {}, "idle_seconds": 30},
        {"build": {"output_dir": "out"}, "start": {"command": "serve"}, "memory_mb": 512, "health_path": "/"},
        {"env": {}},
    ]


def with_domains(req_body):
    """An app as the server returns it after a request: its ``domains`` those the request
    named, each without TLS (the client suite's server has no TLS listener)."""
    names = (req_body or {}).get("domains", [])
    return app(domains=[{"name": n, "tls": "none", "tls_expires_at": None, "tls_error": None} for n in names])


def test_domains_are_sent_when_given_and_read_back(fake):
    fake.on_call("POST", "/v1/apps", lambda r: reply(201, with_domains(body(r))))
    fake.on_call("PATCH", "/v1/apps/web", lambda r: reply(200, with_domains(body(r))))
    with make(fake) as c:
        a = c.apps.create("web", "https://git.example/web.git", domains=["shop.example.com", "www.example.com"])
        assert a.domains == [AppDomain("shop.example.com", "none"), AppDomain("www.example.com", "none")]
        assert c.apps.create("web", "https://git.example/web.git").domains == []
        assert c.apps.update("web", domains=("shop.example.com",)).domains == [AppDomain("shop.example.com")]
        assert c.apps.update("web", domains=[]).domains == []
        c.apps.update("web", min_instances=1)
        for bad in (
            lambda: c.apps.create("x", "u", domains="shop.example.com"),  # a str, not a list of them
            lambda: c.apps.create("x", "u", domains=[""]),
            lambda: c.apps.update("web", domains=["ok.example.com", 42]),  # type: ignore[list-item]
            lambda: c.apps.update("web", domains={"shop.example.com": 1}),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidArgumentError):
                bad()
    assert [body(r) for r in fake.calls("POST", "/v1/apps")] == [
        {"name": "web", "git": {"url": "https://git.example/web.git"}, "domains": ["shop.example.com", "www.example.com"]},
        {"name": "web", "git": {"url": "https://git.example/web.git"}},
    ]
    assert [body(r) for r in fake.calls("PATCH", "/v1/apps/web")] == [
        {"domains": ["shop.example.com"]},
        {"domains": []},  # [] is sent: it removes them all
        {"min_instances": 1},  # not given: left out, the domains stay
    ]


def test_app_reads_domains_and_their_tls():
    a = App.from_json(
        app(
            domains=[
                {"name": "shop.example.com", "tls": "issued", "tls_expires_at": "2026-04-01T00:00:00Z", "tls_error": None},
                {"name": "www.example.com", "tls": "failed", "tls_error": "dns: NXDOMAIN", "since": "unknown field"},
                {"name": "files.example.com", "tls": "files"},
                "not an object",
            ]
        )
    )
    assert a.domains == [
        AppDomain("shop.example.com", "issued", "2026-04-01T00:00:00Z", None),
        AppDomain("www.example.com", "failed", None, "dns: NXDOMAIN"),
        AppDomain("files.example.com", "files"),
    ]
    assert App.from_json(app()).domains == [] and App.from_json(app(domains=None)).domains == []
    assert AppDomain.from_json({"name": "x.example.com"}) == AppDomain("x.example.com", "none")


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (404, "app_not_found", AppNotFoundError),
        (404, "not_found", NotFoundError),
        (409, "conflict", ConflictError),
        (422, "invalid_argument", InvalidArgumentError),
    ],
)
def test_app_error_codes_map_to_classes(fake, status, code, cls):
    fake.on("GET", "/v1/apps/nope", error(status, code, f"{code} here"))
    fake.on("POST", "/v1/apps/nope/deploys", error(status, code, f"{code} here"))
    with make(fake) as c:
        with pytest.raises(cls) as ei:
            c.apps.get("nope")
        with pytest.raises(cls):
            c.apps.deploy("nope")
    assert ei.value.code == code and ei.value.status == status
    if cls is AppNotFoundError:
        assert isinstance(ei.value, NotFoundError)
    if code == "not_found":
        assert not isinstance(ei.value, AppNotFoundError)


def test_deploy_deploys_get_deploy_and_rollback(fake):
    fake.on_call("POST", "/v1/apps/web/deploys", lambda r: reply(202, deploy(ref=(body(r) or {}).get("ref", "main"))))
    fake.on_call(
        "GET",
        "/v1/apps/web/deploys",
        lambda r: reply(200, {"data": [deploy("standby", id="dep-1")], "next_cursor": None})
        if query(r).get("cursor") == "c2"
        else reply(200, {"data": [deploy("live", id="dep-2", number=2)], "next_cursor": "c2"}),
    )
    live = deploy(
        "live",
        id="dep-2",
        number=2,
        commit="abc123",
        plan={"framework": "next", "port": 3000},
        phases_ms={"clone": 120, "build": 9000},
        sandbox_id="sb-7",
    )
    fake.on("GET", "/v1/apps/web/deploys/dep-2", reply(200, live))
    fake.on("GET", "/v1/apps/web/deploys/nope", error(404, "not_found", "deploy nope not found"))
    fake.on("POST", "/v1/apps/web/rollback", reply(200, deploy("live", id="dep-1")))
    with make(fake) as c:
        d = c.apps.deploy("web")
        assert isinstance(d, Deploy) and (d.id, d.state, d.ref, d.active) == ("dep-1", "queued", "main", True)
        assert c.apps.deploy("web", "feature-x").ref == "feature-x"
        assert [(x.id, x.number, x.state) for x in c.apps.deploys("web", limit=1)] == [
            ("dep-2", 2, "live"),
            ("dep-1", 1, "standby"),
        ]
        assert query(fake.calls("GET", "/v1/apps/web/deploys")[0]) == {"limit": "1"}
        g = c.apps.get_deploy("web", "dep-2")
        assert (g.commit, g.plan, g.phases_ms, g.sandbox_id, g.active) == (
            "abc123",
            {"framework": "next", "port": 3000},
            {"clone": 120, "build": 9000},
            "sb-7",
            False,
        )
        with pytest.raises(NotFoundError):
            c.apps.get_deploy("web", "nope")
        assert c.apps.rollback("web").id == "dep-1"
        c.apps.rollback("web", "dep-1")
    assert [body(r) for r in fake.calls("POST", "/v1/apps/web/deploys")] == [{}, {"ref": "feature-x"}]
    assert [body(r) for r in fake.calls("POST", "/v1/apps/web/rollback")] == [{}, {"deploy_id": "dep-1"}]


def _tree(root):
    os.makedirs(os.path.join(root, "src", "lib"))
    os.makedirs(os.path.join(root, ".git", "objects"))
    os.makedirs(os.path.join(root, "node_modules", "left-pad"))
    os.makedirs(os.path.join(root, "src", "node_modules", "x"))
    files = {
        "package.json": '{"name": "web"}',
        "src/index.js": "console.log('hi')",
        "src/lib/util.js": "export {}",
        ".env.example": "A=1",
        ".git/HEAD": "ref: refs/heads/main",
        ".git/objects/ab": "blob",
        "node_modules/left-pad/index.js": "module.exports = 1",
        "src/node_modules/x/i.js": "x",
    }
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    os.chmod(os.path.join(root, "src", "index.js"), 0o755)


def _members(data: bytes):
    assert data[:2] == b"\x1f\x8b", "gzip"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


def test_deploy_directory_uploads_a_gzip_tar_without_git_and_node_modules(fake, tmp_path):
    _tree(str(tmp_path))
    fake.on("POST", "/v1/apps/web/deploys", reply(202, deploy(ref="upload")))
    with make(fake) as c:
        d = c.apps.deploy_directory("web", tmp_path)
        assert d.ref == "upload" and d.state == "queued"
        c.apps.deploy_directory("web", str(tmp_path))
        with pytest.raises(InvalidArgumentError):
            c.apps.deploy_directory("web", tmp_path / "package.json")
        with pytest.raises(InvalidArgumentError):
            c.apps.deploy_directory("web", tmp_path / "missing")
    first, second = fake.calls("POST", "/v1/apps/web/deploys")
    assert first["headers"]["content-type"] == "application/gzip"
    assert first["body"] == second["body"], "the same tree packs to the same bytes"
    members = _members(first["body"])
    assert sorted(members) == [".env.example", "package.json", "src", "src/index.js", "src/lib", "src/lib/util.js"]
    assert members["package.json"][1] == b'{"name": "web"}'
    assert members["src/lib/util.js"][1] == b"export {}"
    assert members["src"][0].isdir() and members["src/index.js"][0].mode & 0o111
    assert all(m.uname == "" and m.uid == 0 for m, _ in members.values())


def test_wait_for_deploy_polls_until_it_ends_and_times_out(fake):
    fake.on("POST", "/v1/apps/web/deploys", reply(202, deploy()))
    fake.on(
        "GET",
        "/v1/apps/web/deploys/dep-1",
        reply(200, deploy("cloning")),
        reply(200, deploy("building")),
        reply(200, deploy("failed", error="build: npm ERR!")),
    )
    fake.on("GET", "/v1/apps/web/deploys/dep-9", reply(200, deploy("checking", id="dep-9")))
    with make(fake) as c:
        d = c.apps.deploy("web", wait=True, timeout=30)
        assert (d.state, d.error, d.active) == ("failed", "build: npm ERR!", False)
        assert len(fake.calls("GET", "/v1/apps/web/deploys/dep-1")) == 3
        assert c.apps.wait_for_deploy("web", "dep-1").state == "failed"
        with pytest.raises(DeployTimeoutError) as ei:
            c.apps.wait_for_deploy("web", "dep-9", timeout=0.3)
    e = ei.value
    assert isinstance(e, PandaStackError) and e.code == "deploy_timeout"
    assert e.deploy.id == "dep-9" and e.deploy.state == "checking"
    assert "dep-9" in str(e) and "web" in str(e)


def test_logs_plain_and_followed(fake):
    fake.on("GET", "/v1/apps/web/deploys/dep-1/logs", reply(200, b"clone\nbuild\n", {"Content-Type": "text/plain"}))
    fake.on("GET", "/v1/apps/web/logs", reply(200, b"listening on 3000\n", {"Content-Type": "text/plain"}))
    with make(fake) as c:
        assert c.apps.deploy_logs("web", "dep-1") == "clone\nbuild\n"
        assert c.apps.logs("web") == "listening on 3000\n"
    assert [query(r) for r in fake.requests] == [{}, {}]
    assert all("text/plain" in r["headers"]["accept"] for r in fake.requests)

    # Followed: the first connection breaks mid-log; the second sends the log from the top
    # again, and only what is new is passed on.
    fake.on(
        "GET",
        "/v1/apps/web/deploys/dep-1/logs",
        sse_reply(b":\n\n" + sse(("log", {"data": "clone\n"}), ("log", {"data": "bui"}))),
        sse_reply(sse(("log", {"data": "clone\nbuild\n"}), ("log", {"data": "live\n"}), ("end", {"reason": "live"}))),
    )
    fake.on(
        "GET",
        "/v1/apps/web/logs",
        sse_reply(sse(("log", {"data": "GET / 200\n"}), ("end", {"reason": "stopped"}))),
    )
    seen = []
    with make(fake) as c:
        text = c.apps.deploy_logs("web", "dep-1", follow=True, on_log=seen.append)
        assert seen == ["clone\n", "bui", "ld\n", "live\n"]
        assert text == "clone\nbuild\nlive\n"
        assert c.apps.logs("web", follow=True) == "GET / 200\n"
    followed = [r for r in fake.requests if query(r)]
    assert [query(r) for r in followed] == [{"follow": "1"}] * 3
    assert all("text/event-stream" in r["headers"]["accept"] for r in followed)


def test_a_log_follow_stops_when_the_callback_raises(fake):
    fake.on("GET", "/v1/apps/web/logs", sse_reply(sse(("log", {"data": "one\n"}), ("log", {"data": "two\n"}))))

    def stop(text):
        raise KeyError(text)

    with make(fake) as c:
        with pytest.raises(KeyError):
            c.apps.logs("web", follow=True, on_log=stop)
    assert len(fake.calls("GET", "/v1/apps/web/logs")) == 1


def test_uploads_and_rollbacks_get_long_http_timeouts(tmp_path):
    (tmp_path / "index.html").write_text("hi")
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[(request.method, request.url.path)] = request.extensions["timeout"]["read"]
        return httpx.Response(202 if request.url.path.endswith("/deploys") else 200, json=deploy())

    http = httpx.Client(transport=httpx.MockTransport(handler))
    with PandaStack(api_key="pds_test", base_url="http://fake", http_client=http, max_retries=0) as c:
        c.apps.deploy_directory("web", tmp_path)
        c.apps.rollback("web")
    assert seen[("POST", "/v1/apps/web/deploys")] >= 600, "an upload of a large tree takes a while"
    assert seen[("POST", "/v1/apps/web/rollback")] >= 600, "a rollback wakes and checks a VM"


def test_async_apps(fake, tmp_path):
    _tree(str(tmp_path))
    fake.on("POST", "/v1/apps", reply(201, app()))
    fake.on("GET", "/v1/apps", reply(200, {"data": [app()], "next_cursor": None}))
    fake.on("PATCH", "/v1/apps/web", reply(200, app(min_instances=1)))
    fake.on("POST", "/v1/apps/web/deploys", reply(202, deploy(ref="upload")))
    fake.on("GET", "/v1/apps/web/deploys", reply(200, {"data": [deploy()], "next_cursor": None}))
    fake.on("GET", "/v1/apps/web/deploys/dep-1", reply(200, deploy("building")), reply(200, deploy("live")))
    fake.on(
        "GET",
        "/v1/apps/web/deploys/dep-1/logs",
        sse_reply(sse(("log", {"data": "a"}), ("log", {"data": "b"}), ("end", {"reason": "live"}))),
    )
    fake.on("GET", "/v1/apps/gone", error(404, "app_not_found", "app gone not found"))
    fake.on("DELETE", "/v1/apps/web", reply(204))

    async def main():
        async with AsyncPandaStack(api_key="pds_test", base_url=fake.url, max_retries=0) as c:
            a = await c.apps.create("web", "https://git.example/web.git", deploy=False, domains=["shop.example.com"])
            assert a.name == "web" and a.git.ref == "main"
            with pytest.raises(InvalidArgumentError):
                await c.apps.update("web", domains=[None])  # type: ignore[list-item]
            assert [x.name async for x in c.apps.list()] == ["web"]
            assert (await c.apps.update("web", min_instances=1)).min_instances == 1
            d = await c.apps.deploy_directory("web", tmp_path, wait=True, timeout=30)
            assert d.state == "live"
            assert [x.id async for x in c.apps.deploys("web")] == ["dep-1"]
            pieces = []

            async def on_log(text):
                pieces.append(text)

            assert await c.apps.deploy_logs("web", "dep-1", follow=True, on_log=on_log) == "ab"
            assert pieces == ["a", "b"]
            with pytest.raises(AppNotFoundError):
                await c.apps.get("gone")
            assert await c.apps.delete("web") is True

    asyncio.run(main())
    assert body(fake.calls("POST", "/v1/apps")[0])["domains"] == ["shop.example.com"]
    upload = fake.calls("POST", "/v1/apps/web/deploys")[0]
    assert upload["headers"]["content-type"] == "application/gzip"
    assert ".git/HEAD" not in _members(upload["body"]) and "src/index.js" in _members(upload["body"])
