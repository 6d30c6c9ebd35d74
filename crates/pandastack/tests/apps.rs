//! App hosting through the real server and real guests (the `app` template: Debian trixie with
//! Node.js 20 and Python 3): apps deployed from bare git repositories served by `git daemon` on
//! an address the server is allowed to fetch from, and from an uploaded tarball, detected, built in
//! a VM, health-checked and served at `<app>.<domain>` by the proxy; a second version switched
//! in blue-green, a rollback, a deploy that fails leaving the live version alone, the signed
//! webhook (bad signature, push, redelivery), an Express app installed with npm over the
//! sandbox network, scale to zero and wake on a request, and delete leaving nothing behind —
//! one test in named steps ([`common::step`]); the refusals that need no VM (a bad create, a
//! taken name) are fast tests in `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.
//! A second test (a server of its own) takes a WebSocket echo and a slowly streamed answer
//! through the app proxy, then plain requests on its kept-alive connections into the VM.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, start_with, step, Api, GitDaemon, Server};
use pandastack_testkit::net::NetNames;
use pandastack_testkit::runtime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Longest a deploy may take here: the first one builds and bakes the `app` template.
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(1500);

fn api(s: &Server) -> Api<'_> {
    Api {
        s,
        c: Client::new(),
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare repository `<root>/<name>.git` and a work tree `<root>/<name>` pushing to it.
fn repo(root: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let bare = root.join(format!("{name}.git"));
    let work = root.join(name);
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    git(
        &bare,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    );
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
    (bare, work)
}

/// Writes `files` into `work`, commits everything and pushes `main`.
fn commit(work: &Path, files: &[(&str, &str)], message: &str) {
    for (path, text) in files {
        let p = work.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(work, &["add", "-A"]);
    git(work, &["commit", "--quiet", "-m", message]);
    git(work, &["push", "--quiet", "origin", "main"]);
}

/// Waits until deploy `id` of `app` leaves the active states; returns it.
async fn settled(api: &Api<'_>, app: &str, id: &str) -> Value {
    let t = Instant::now();
    loop {
        let (st, v) = api
            .call("GET", &format!("/v1/apps/{app}/deploys/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let state = v["state"].as_str().unwrap().to_owned();
        if !["queued", "cloning", "building", "baking", "checking"].contains(&state.as_str()) {
            return v;
        }
        assert!(t.elapsed() < DEPLOY_TIMEOUT, "deploy {id} still {state}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The deploy's log as text.
async fn deploy_log(api: &Api<'_>, app: &str, id: &str) -> String {
    api.c
        .get(format!("{}/v1/apps/{app}/deploys/{id}/logs", api.s.url))
        .bearer_auth(&api.s.key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits for deploy `id` to go live (failing with its log if it does not).
async fn live(api: &Api<'_>, app: &str, id: &str) -> Value {
    let v = settled(api, app, id).await;
    if v["state"] != "live" {
        panic!(
            "deploy {id} is {}: {}\n{}",
            v["state"],
            v["error"],
            deploy_log(api, app, id).await
        );
    }
    v
}

/// `GET path` of app `name` through the proxy (its host name resolved to the proxy).
async fn visit(s: &Server, name: &str, path: &str) -> (StatusCode, String) {
    let port = s.proxy.rsplit_once(':').unwrap().1;
    let r = Client::new()
        .get(format!("http://{}{path}", s.proxy))
        .header("Host", format!("{name}.localhost:{port}"))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("request through the proxy");
    let st = r.status();
    (st, r.text().await.unwrap_or_default())
}

async fn deploys(api: &Api<'_>, app: &str) -> Vec<Value> {
    let (st, v) = api
        .call("GET", &format!("/v1/apps/{app}/deploys"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"].as_array().unwrap().clone()
}

fn sign(secret: &str, body: &[u8]) -> String {
    pandastack_control::apps::sign_webhook(secret, body)
}

async fn webhook(
    s: &Server,
    app: &str,
    sig: &str,
    delivery: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    let r = Client::new()
        .post(format!("{}/v1/apps/{app}/webhooks/github", s.url))
        .header("X-Hub-Signature-256", sig)
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", delivery)
        .header("Content-Type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let st = r.status();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// Apps through their life, as named steps (see [`common::step`]): each step is one behaviour
/// and a failure names it. They share one server, the git daemon and what earlier steps
/// deployed (the versions a rollback returns to, the app a delete removes), because a test of
/// their own each would build and boot its app's VMs again (minutes under TCG). Refusals that
/// need no VM (a bad create, a taken name) are in
/// `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.
#[tokio::test(flavor = "multi_thread")]
async fn apps_end_to_end() {
    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "app");
    let repos = tempfile::tempdir().unwrap();
    // Sources come from `git daemon` (the git:// protocol), as from a git host; the server may
    // fetch from its address (and no other loopback one).
    let daemon = GitDaemon::start(repos.path());
    let [allow, allowed] = daemon.allow_args();
    let names = NetNames::new("tsap");
    names.clean();
    let port = free_port();
    let server = start_with(
        data,
        port,
        &[
            "--pool-size",
            "0",
            "--network",
            "on",
            "--net-name",
            "tsap",
            "--net-base",
            "10.204.0.0/24",
            "--net-spare",
            "1",
            &allow,
            &allowed,
        ],
    )
    .await;
    let api = api(&server);

    let (bare, work) = repo(repos.path(), "site");
    let d1 = step(
        "a static site is detected, built and goes live, its log naming the plan and the check",
        async {
            commit(&work, &[("index.html", "<h1>hello v1</h1>\n")], "v1");
            let url = daemon.url(&bare);
            let (st, app) = api
                .call(
                    "POST",
                    "/v1/apps",
                    Some(json!({"name": "site", "git": {"url": url}, "idle_seconds": 3600})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{app}");
            assert!(
                app["url"]
                    .as_str()
                    .unwrap()
                    .starts_with("http://site.localhost:"),
                "{app}"
            );
            let first = deploys(&api, "site").await;
            assert_eq!(first.len(), 1);
            let d1 = first[0]["id"].as_str().unwrap().to_owned();
            let v1 = live(&api, "site", &d1).await;
            assert_eq!(v1["plan"]["framework"], "static", "{v1}");
            let log = deploy_log(&api, "site", &d1).await;
            assert!(log.contains("plan: "), "{log}");
            assert!(log.contains("health check GET /: HTTP 200"), "{log}");
            d1
        },
    )
    .await;

    step(
        "the proxy serves the live version at its host name; an unknown name is 404",
        async {
            let (st, body) = visit(&server, "site", "/").await;
            assert_eq!(st, StatusCode::OK, "{body}");
            assert!(body.contains("hello v1"), "{body}");
            let (st, _) = visit(&server, "nosuch", "/").await;
            assert_eq!(st, StatusCode::NOT_FOUND);
        },
    )
    .await;

    step(
        "a second version switches in blue-green, every phase timed; the first stays on standby",
        async {
            commit(&work, &[("index.html", "<h1>hello v2</h1>\n")], "v2");
            let (st, d) = api
                .call("POST", "/v1/apps/site/deploys", Some(json!({})))
                .await;
            assert_eq!(st, StatusCode::ACCEPTED, "{d}");
            let d2 = d["id"].as_str().unwrap().to_owned();
            let v2 = live(&api, "site", &d2).await;
            for phase in ["clone", "bake", "check", "switch"] {
                assert!(v2["phases_ms"][phase].is_u64(), "{phase}: {v2}");
            }
            let (_, body) = visit(&server, "site", "/").await;
            assert!(body.contains("hello v2"), "{body}");
            let (_, v) = api
                .call("GET", &format!("/v1/apps/site/deploys/{d1}"), None)
                .await;
            assert_eq!(v["state"], "standby", "{v}");
        },
    )
    .await;

    step(
        "a deploy that fails (nothing to detect) keeps no VM and leaves the live version serving",
        async {
            git(&work, &["rm", "--quiet", "index.html"]);
            commit(&work, &[("README.md", "nothing to serve\n")], "broken");
            let (_, d) = api
                .call("POST", "/v1/apps/site/deploys", Some(json!({})))
                .await;
            let bad = settled(&api, "site", d["id"].as_str().unwrap()).await;
            assert_eq!(bad["state"], "failed", "{bad}");
            assert!(bad["error"].as_str().unwrap().contains("detect"), "{bad}");
            assert!(bad["sandbox_id"].is_null(), "{bad}");
            let (_, body) = visit(&server, "site", "/").await;
            assert!(body.contains("hello v2"), "{body}");
        },
    )
    .await;

    step(
        "rollback: the standby version's VM wakes and takes the traffic, nothing rebuilt",
        async {
            let t = Instant::now();
            let (st, r) = api
                .call("POST", "/v1/apps/site/rollback", Some(json!({})))
                .await;
            let rollback_ms = t.elapsed().as_millis();
            assert_eq!(st, StatusCode::OK, "{r}");
            assert_eq!(r["id"], d1.as_str(), "{r}");
            let (_, body) = visit(&server, "site", "/").await;
            assert!(body.contains("hello v1"), "{body}");
            eprintln!("rollback: {rollback_ms} ms");
        },
    )
    .await;

    let push = br#"{"ref":"refs/heads/main","after":"x"}"#;
    let secret = step(
        "webhook: a bad signature is refused and deploys nothing",
        async {
            let (_, a) = api.call("GET", "/v1/apps/site", None).await;
            let secret = a["webhook_secret"].as_str().unwrap().to_owned();
            commit(&work, &[("index.html", "<h1>hello v3</h1>\n")], "v3");
            let before = deploys(&api, "site").await.len();
            let (st, v) = webhook(&server, "site", &sign("wrong", push), "d-1", push).await;
            assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
            assert_eq!(deploys(&api, "site").await.len(), before);
            secret
        },
    )
    .await;

    step(
        "webhook: a signed push of the tracked branch deploys; a redelivery is a duplicate, \
         another branch is ignored",
        async {
            let before = deploys(&api, "site").await.len();
            let (st, v) = webhook(&server, "site", &sign(&secret, push), "d-1", push).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["status"], "deployed", "{v}");
            let d3 = v["deploy_id"].as_str().unwrap().to_owned();
            let (st, v) = webhook(&server, "site", &sign(&secret, push), "d-1", push).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["status"], "duplicate", "{v}");
            assert_eq!(v["deploy_id"], d3.as_str(), "{v}");
            let other = br#"{"ref":"refs/heads/feature"}"#;
            let (_, v) = webhook(&server, "site", &sign(&secret, other), "d-2", other).await;
            assert_eq!(v["status"], "ignored", "{v}");
            assert_eq!(deploys(&api, "site").await.len(), before + 1);
            live(&api, "site", &d3).await;
            let (_, body) = visit(&server, "site", "/").await;
            assert!(body.contains("hello v3"), "{body}");
        },
    )
    .await;

    step(
        "an uploaded tarball deploys: files and directories only, the symlink skipped",
        async {
            let tarball = {
                let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
                    Vec::new(),
                    flate2::Compression::fast(),
                ));
                let page = b"<h1>hello upload</h1>\n";
                let mut h = tar::Header::new_gnu();
                h.set_size(page.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                b.append_data(&mut h, "index.html", &page[..]).unwrap();
                let mut l = tar::Header::new_gnu();
                l.set_entry_type(tar::EntryType::Symlink);
                l.set_size(0);
                b.append_link(&mut l, "leak.txt", "/etc/passwd").unwrap();
                b.into_inner().unwrap().finish().unwrap()
            };
            let r = api
                .c
                .post(format!("{}/v1/apps/site/deploys", server.url))
                .bearer_auth(&server.key)
                .header("Content-Type", "application/gzip")
                .body(tarball)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::ACCEPTED);
            let d: Value = r.json().await.unwrap();
            assert_eq!(d["ref"], "upload", "{d}");
            let up = live(&api, "site", d["id"].as_str().unwrap()).await;
            assert!(
                up["commit"].as_str().unwrap().starts_with("upload:"),
                "{up}"
            );
            let log = deploy_log(&api, "site", d["id"].as_str().unwrap()).await;
            assert!(log.contains("1 links and special files skipped"), "{log}");
            let (_, body) = visit(&server, "site", "/").await;
            assert!(body.contains("hello upload"), "{body}");
            let (st, body) = visit(&server, "site", "/leak.txt").await;
            assert_eq!(st, StatusCode::NOT_FOUND, "{body}");
        },
    )
    .await;

    step(
        "an upload that is not a gzip tarball fails its deploy, saying so",
        async {
            let r = api
                .c
                .post(format!("{}/v1/apps/site/deploys", server.url))
                .bearer_auth(&server.key)
                .header("Content-Type", "application/gzip")
                .body("not a tarball")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::ACCEPTED);
            let d: Value = r.json().await.unwrap();
            let bad = settled(&api, "site", d["id"].as_str().unwrap()).await;
            assert_eq!(bad["state"], "failed", "{bad}");
            assert!(
                bad["error"]
                    .as_str()
                    .unwrap()
                    .contains("not a gzip tarball"),
                "{bad}"
            );
        },
    )
    .await;

    let (_, work) = repo(repos.path(), "api");
    step(
        "an Express app: npm installs its dependency in the build VM over the sandbox network, \
         without an audit or a funding notice, and it serves",
        async {
            commit(
                &work,
                &[
                    (
                        "package.json",
                        r#"{"name":"api","version":"1.0.0","main":"server.js","scripts":{"start":"node server.js"},"dependencies":{"express":"^4.21.0"}}"#,
                    ),
                    (
                        "server.js",
                        "const express = require('express');\nconst app = express();\napp.get('/', (req, res) => res.json({ hello: 'express', pid: process.pid }));\napp.listen(process.env.PORT, () => console.log('listening on ' + process.env.PORT));\n",
                    ),
                ],
                "express",
            );
            let url = daemon.url(&repos.path().join("api.git"));
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/apps",
                    Some(json!({"name": "api", "git": {"url": url}, "idle_seconds": 5})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            let d = deploys(&api, "api").await[0]["id"]
                .as_str()
                .unwrap()
                .to_owned();
            let dv = live(&api, "api", &d).await;
            assert_eq!(dv["plan"]["runtime"], "node", "{dv}");
            assert!(dv["phases_ms"]["install"].is_u64(), "{dv}");
            // npm neither audits the tree nor asks for funding in a build
            // (npm_config_audit/fund).
            let log = deploy_log(&api, "api", &d).await;
            assert!(log.contains("npm"), "{log}");
            assert!(
                !log.contains("vulnerabilit") && !log.contains("funding"),
                "{log}"
            );
            let (st, body) = visit(&server, "api", "/").await;
            assert_eq!(st, StatusCode::OK, "{body}");
            assert!(body.contains("\"hello\":\"express\""), "{body}");
        },
    )
    .await;

    step("the app's own logs are its server's output", async {
        let logs = api
            .c
            .get(format!("{}/v1/apps/api/logs", server.url))
            .bearer_auth(&server.key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(logs.contains("listening on"), "{logs}");
    })
    .await;

    step(
        "a redeploy with the same dependencies unpacks the cache instead of installing",
        async {
            commit(
                &work,
                &[(
                    "server.js",
                    "const express = require('express');\nconst app = express();\napp.get('/', (req, res) => res.json({ hello: 'express v2' }));\napp.listen(process.env.PORT, () => console.log('listening on ' + process.env.PORT));\n",
                )],
                "v2",
            );
            let (_, d) = api
                .call("POST", "/v1/apps/api/deploys", Some(json!({})))
                .await;
            let d = d["id"].as_str().unwrap().to_owned();
            let dv2 = live(&api, "api", &d).await;
            assert!(dv2["phases_ms"]["deps_restore"].is_u64(), "{dv2}");
            assert!(dv2["phases_ms"]["install"].is_null(), "{dv2}");
            let log = deploy_log(&api, "api", &d).await;
            assert!(log.contains("install skipped"), "{log}");
            let (_, body) = visit(&server, "api", "/").await;
            assert!(body.contains("express v2"), "{body}");
        },
    )
    .await;

    step(
        "idle: the reaper hibernates the app; the next request wakes it and is answered",
        async {
            let t = Instant::now();
            loop {
                let (_, v) = api.call("GET", "/v1/apps/api", None).await;
                if v["instance_state"] == "hibernated" {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(120),
                    "never hibernated: {v}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let t = Instant::now();
            let (st, body) = visit(&server, "api", "/").await;
            eprintln!("wake to first answer: {} ms", t.elapsed().as_millis());
            assert_eq!(st, StatusCode::OK, "{body}");
            assert!(body.contains("express v2"), "{body}");
        },
    )
    .await;

    step(
        "delete: every VM of every version and the rows go; the host name stops answering",
        async {
            for name in ["site", "api"] {
                let (st, v) = api.call("DELETE", &format!("/v1/apps/{name}"), None).await;
                assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
                let (st, _) = api.call("GET", &format!("/v1/apps/{name}"), None).await;
                assert_eq!(st, StatusCode::NOT_FOUND);
            }
            let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
            assert_eq!(v["data"].as_array().unwrap().len(), 0, "{v}");
            let (st, _) = visit(&server, "site", "/").await;
            assert_eq!(st, StatusCode::NOT_FOUND);
        },
    )
    .await;
    drop(server);
    names.clean();
}

/// A `node:http` server with no dependencies: `/stream` writes five lines 400 ms apart (a
/// chunked answer), `/ws` is a WebSocket echo (the handshake and the frames written out here:
/// text comes back as `echo: <text>`, binary as is, a ping as a pong, a close as a close).
const LIVE_SERVER_JS: &str = r#"const http = require('node:http');
const crypto = require('node:crypto');
const server = http.createServer((req, res) => {
  if (req.url === '/stream') {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    let i = 0;
    const t = setInterval(() => {
      res.write(`chunk ${i}\n`);
      if (++i === 5) { clearInterval(t); res.end('done\n'); }
    }, 400);
    return;
  }
  res.end('ok\n');
});
function frame(socket, op, payload) {
  const n = payload.length;
  let head;
  if (n < 126) head = Buffer.from([0x80 | op, n]);
  else if (n < 65536) head = Buffer.from([0x80 | op, 126, n >> 8, n & 255]);
  else { head = Buffer.alloc(10); head[0] = 0x80 | op; head[1] = 127; head.writeBigUInt64BE(BigInt(n), 2); }
  socket.write(Buffer.concat([head, payload]));
}
server.on('upgrade', (req, socket) => {
  const accept = crypto.createHash('sha1')
    .update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11')
    .digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
  let buf = Buffer.alloc(0);
  socket.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 0x0f;
      let len = buf[1] & 0x7f, off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
      const masked = (buf[1] & 0x80) !== 0;
      const mask = masked ? buf.subarray(off, off + 4) : null;
      if (masked) off += 4;
      if (buf.length < off + len) return;
      const payload = Buffer.from(buf.subarray(off, off + len));
      buf = buf.subarray(off + len);
      if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
      if (op === 8) { frame(socket, 8, Buffer.alloc(0)); socket.end(); return; }
      if (op === 9) frame(socket, 10, payload);
      else if (op === 1) frame(socket, 1, Buffer.from('echo: ' + payload.toString()));
      else if (op === 2) frame(socket, 2, payload);
    }
  });
  socket.on('error', () => {});
});
server.listen(process.env.PORT, () => console.log('listening on ' + process.env.PORT));
"#;

/// WebSocket and a slowly streamed answer through the app proxy (issue #17): a WebSocket echo
/// round-trips at `<app>.localhost:<proxy port>`, and the chunks of a streamed answer arrive
/// as the app writes them, not when it ends. Then plain requests, sequential and concurrent,
/// on the proxy's kept-alive connections into the VM.
#[tokio::test(flavor = "multi_thread")]
async fn app_websocket_and_streaming() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "app");
    let repos = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(repos.path());
    let [allow, allowed] = daemon.allow_args();
    let names = NetNames::new("tsws");
    names.clean();
    let port = free_port();
    let server = start_with(
        data,
        port,
        &[
            "--pool-size",
            "0",
            "--network",
            "on",
            "--net-name",
            "tsws",
            "--net-base",
            "10.204.67.0/24",
            "--net-spare",
            "1",
            &allow,
            &allowed,
        ],
    )
    .await;
    let api = api(&server);
    let (bare, work) = repo(repos.path(), "live");
    commit(
        &work,
        &[
            ("Procfile", "web: node server.js\n"),
            ("server.js", LIVE_SERVER_JS),
        ],
        "v1",
    );
    let url = daemon.url(&bare);
    let (st, v) = api
        .call(
            "POST",
            "/v1/apps",
            Some(json!({"name": "live", "git": {"url": url}, "min_instances": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let d = deploys(&api, "live").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    live(&api, "live", &d).await;
    let proxy_port = server.proxy.rsplit_once(':').unwrap().1.to_owned();
    let host = format!("live.localhost:{proxy_port}");

    // A streamed answer: each line as the app writes it (400 ms apart), not all at the end.
    let t = Instant::now();
    let mut r = Client::new()
        .get(format!("http://{}/stream", server.proxy))
        .header("Host", &host)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("GET /stream through the proxy");
    assert_eq!(r.status(), StatusCode::OK);
    let mut pieces = Vec::new();
    while let Some(piece) = r.chunk().await.expect("the stream") {
        pieces.push((t.elapsed(), String::from_utf8_lossy(&piece).into_owned()));
    }
    let text: String = pieces.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        text, "chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\ndone\n",
        "{pieces:?}"
    );
    let first = pieces[0].0;
    let end = pieces.last().unwrap().0;
    assert!(
        pieces.len() >= 3 && end - first >= Duration::from_millis(1000),
        "the chunks came together, not as written: {pieces:?}"
    );
    eprintln!(
        "stream: first chunk after {first:?}, end after {end:?}, {} pieces",
        pieces.len()
    );

    // A WebSocket echo through the proxy: text, a large binary message, a ping, a close.
    let tcp = tokio::net::TcpStream::connect(&server.proxy).await.unwrap();
    let req = format!("ws://{host}/ws").into_client_request().unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("WebSocket handshake through the proxy");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    async fn next(
        ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    ) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
        tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("an answer within 30 s")
    }
    for text in ["one", "two"] {
        ws.send(Message::text(text)).await.unwrap();
        match next(&mut ws).await {
            Some(Ok(Message::Text(t))) => assert_eq!(t.as_str(), format!("echo: {text}")),
            other => panic!("{other:?}"),
        }
    }
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    match next(&mut ws).await {
        Some(Ok(Message::Binary(b))) => assert!(b[..] == big[..], "binary echo differs"),
        other => panic!("{other:?}"),
    }
    ws.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
    match next(&mut ws).await {
        Some(Ok(Message::Pong(p))) => assert_eq!(&p[..], b"p"),
        other => panic!("{other:?}"),
    }
    ws.close(None).await.unwrap();

    // Plain requests: sequential ones reuse the proxy's connection into the VM, concurrent
    // ones each get one; every answer is right.
    let c = Client::new();
    for _ in 0..20 {
        let (st, body) = visit(&server, "live", "/").await;
        assert_eq!((st, body.as_str()), (StatusCode::OK, "ok\n"));
    }
    let many = (0..16).map(|_| {
        let (c, proxy, host) = (c.clone(), server.proxy.clone(), host.clone());
        tokio::spawn(async move {
            let r = c
                .get(format!("http://{proxy}/"))
                .header("Host", host)
                .send()
                .await
                .unwrap();
            (r.status(), r.text().await.unwrap())
        })
    });
    for task in many.collect::<Vec<_>>() {
        let (st, body) = task.await.unwrap();
        assert_eq!((st, body.as_str()), (StatusCode::OK, "ok\n"));
    }

    let (st, v) = api.call("DELETE", "/v1/apps/live", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, _) = visit(&server, "live", "/").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    drop(server);
    names.clean();
}
