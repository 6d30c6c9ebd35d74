//! Git sources the way git hosts serve them, through the real server and real guests: a static
//! site fetched over smart HTTP from `git http-backend` (run as CGI by a small HTTP server in
//! this test), and one fetched over SSH from a throwaway `sshd` that knows only the app's own
//! deploy key (the `deploy_key` the API shows). An app whose key the server does not know fails
//! its deploy at the clone with ssh's reason and leaves nothing running; a rotated key is the
//! one the next deploy uses; the private key never appears in the API.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::net::NetNames;
use pandastack_testkit::runtime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Longest a deploy may take here: the first one builds and bakes the `app` template.
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(1500);

fn run(program: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn git(dir: &Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@example.com"];
    all.extend_from_slice(args);
    run("git", &all, dir);
}

/// A bare repository `<root>/<name>.git` holding one commit of `files` on `main`.
fn repo(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let bare = root.join(format!("{name}.git"));
    let work = root.join(name);
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    git(
        &bare,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    );
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    for (path, text) in files {
        std::fs::write(work.join(path), text).unwrap();
    }
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "--quiet", "-m", "v1"]);
    git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
    bare
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

/// The newest deploy of `app`.
async fn newest_deploy(api: &Api<'_>, app: &str) -> String {
    let (st, v) = api
        .call("GET", &format!("/v1/apps/{app}/deploys?limit=1"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"][0]["id"].as_str().unwrap().to_owned()
}

/// Queues a deploy of `app`; its id.
async fn redeploy(api: &Api<'_>, app: &str) -> String {
    let (st, d) = api
        .call("POST", &format!("/v1/apps/{app}/deploys"), Some(json!({})))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{d}");
    d["id"].as_str().unwrap().to_owned()
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

/// `GET /v1/apps/{name}`, checked to carry the public deploy key and never the private one.
async fn app_json(api: &Api<'_>, name: &str) -> Value {
    let (st, v) = api.call("GET", &format!("/v1/apps/{name}"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let text = v.to_string();
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    assert!(!text.contains("b3BlbnNzaC1rZXktdjE"), "{text}"); // "openssh-key-v1", base64'd
    let key = v["deploy_key"].as_str().unwrap();
    assert!(key.starts_with("ssh-ed25519 AAAA"), "{v}");
    assert!(key.ends_with(&format!(" pandastack-app-{name}")), "{v}");
    v
}

// ---- smart HTTP: `git http-backend` as CGI ------------------------------------------------------

/// Request lines the CGI runner served (`GET /site.git/info/refs?service=…`).
type Seen = Arc<Mutex<Vec<String>>>;

/// Serves `git http-backend` over HTTP/1.1 on `listener`: each request runs the CGI program
/// with the request's method, path, query, headers and body, and its answer (a `Status:`
/// header, other headers, a body) goes back as the HTTP response; one request a connection.
async fn http_backend(listener: tokio::net::TcpListener, root: PathBuf, seen: Seen) {
    loop {
        let Ok((conn, peer)) = listener.accept().await else {
            return;
        };
        let (root, seen) = (root.clone(), Arc::clone(&seen));
        tokio::spawn(async move {
            if let Err(e) = cgi(conn, peer, &root, &seen).await {
                eprintln!("http-backend runner: {e}");
            }
        });
    }
}

async fn cgi(
    conn: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    root: &Path,
    seen: &Seen,
) -> std::io::Result<()> {
    let mut conn = BufReader::new(conn);
    let mut line = String::new();
    conn.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    seen.lock().unwrap().push(format!("{method} {target}"));
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    // The body: by length, or chunked (git sends large requests chunked).
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            line.clear();
            conn.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(std::io::Error::other)?;
            if size == 0 {
                // Trailers, then the blank line.
                loop {
                    line.clear();
                    conn.read_line(&mut line).await?;
                    if line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            conn.read_exact(&mut body[start..]).await?;
            line.clear();
            conn.read_line(&mut line).await?;
        }
    } else if let Some(n) = headers.get("content-length") {
        body.resize(n.parse().map_err(std::io::Error::other)?, 0);
        conn.read_exact(&mut body).await?;
    }
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_ADDR", peer.ip().to_string())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "CONTENT_TYPE",
            headers.get("content-type").cloned().unwrap_or_default(),
        );
    for (k, v) in &headers {
        if k != "content-type" && k != "content-length" {
            cmd.env(
                format!("HTTP_{}", k.to_ascii_uppercase().replace('-', "_")),
                v,
            );
        }
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await?;
    let _ = feed.await;
    // CGI answer: headers (`Status:` among them), a blank line, the body.
    let out = out.stdout;
    let (head, rest) = match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&out[..i], &out[i + 4..]),
        None => match out.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&out[..i], &out[i + 2..]),
            None => (&out[..], &[][..]),
        },
    };
    let mut status = "200 OK".to_owned();
    let mut response = Vec::new();
    for h in String::from_utf8_lossy(head).lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            Some(_) => response.extend_from_slice(format!("{h}\r\n").as_bytes()),
            None => {}
        }
    }
    let mut conn = conn.into_inner();
    conn.write_all(format!("HTTP/1.1 {status}\r\n").as_bytes())
        .await?;
    conn.write_all(&response).await?;
    conn.write_all(
        format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            rest.len()
        )
        .as_bytes(),
    )
    .await?;
    conn.write_all(rest).await?;
    conn.shutdown().await
}

// ---- SSH: a throwaway sshd --------------------------------------------------------------------

/// An `sshd` on 127.0.0.1, killed when dropped. It lets in the keys of its `authorized_keys`
/// (for the current user, password logins off) and logs to `sshd.log` beside its config.
struct Sshd {
    child: std::process::Child,
    port: u16,
    authorized_keys: PathBuf,
    log: PathBuf,
}

impl Sshd {
    fn start(dir: &Path, user: &str) -> Sshd {
        std::fs::create_dir_all(dir).unwrap();
        let host_key = dir.join("host_ed25519");
        run(
            "ssh-keygen",
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-f",
                host_key.to_str().unwrap(),
            ],
            dir,
        );
        // sshd running as root wants its privilege-separation directory (Debian's service
        // makes it at start).
        if run("id", &["-u"], dir) == "0" {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let port = free_port();
        let authorized_keys = dir.join("authorized_keys");
        std::fs::write(&authorized_keys, "").unwrap();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\n\
                 AuthorizedKeysFile {}\nStrictModes no\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nAllowUsers {user}\nLogLevel VERBOSE\n",
                host_key.display(),
                dir.join("sshd.pid").display(),
                authorized_keys.display(),
            ),
        )
        .unwrap();
        let log = dir.join("sshd.log");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start sshd");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "sshd did not listen: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Sshd {
            child,
            port,
            authorized_keys,
            log,
        }
    }

    /// Lets in exactly `keys` (sshd reads the file at each login).
    fn authorize(&self, keys: &[&str]) {
        let text: String = keys.iter().map(|k| format!("{k}\n")).collect();
        std::fs::write(&self.authorized_keys, text).unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sandboxes whose metadata names app `name`.
async fn vms_of(api: &Api<'_>, name: &str) -> Vec<Value> {
    let (st, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["metadata"]["pandastack.app"] == name)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn apps_from_smart_http_and_ssh() {
    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "app");
    let repos = tempfile::tempdir().unwrap();
    // The git servers listen on loopback before the server starts: it may fetch from their two
    // addresses (`--allow-internal-fetch`) and no other loopback one.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_port = listener.local_addr().unwrap().port();
    let user = run("id", &["-un"], repos.path());
    let sshd = Sshd::start(&repos.path().join("sshd"), &user);
    // An allowed address whose server redirects to a loopback one that is not allowed.
    let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirect_port = redirector.local_addr().unwrap().port();
    let allowed = format!(
        "127.0.0.1:{http_port},127.0.0.1:{},127.0.0.1:{redirect_port}",
        sshd.port
    );
    let names = NetNames::new("tsgt");
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
            "tsgt",
            "--net-base",
            "10.204.66.0/24",
            "--net-spare",
            "1",
            "--allow-internal-fetch",
            &allowed,
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    // An scp-like URL is accepted; one that would hand ssh an option is not.
    for (url, ok) in [
        ("git@git.example.com:org/site.git", true),
        ("-oProxyCommand=x:repo", false),
        ("git@-oProxyCommand=x:repo", false),
        ("git@host:a b", false),
    ] {
        let (st, v) = api
            .call(
                "POST",
                "/v1/apps",
                Some(json!({"name": "scp", "git": {"url": url}, "deploy": false})),
            )
            .await;
        if ok {
            assert_eq!(st, StatusCode::CREATED, "{url}: {v}");
            app_json(&api, "scp").await;
            let (st, _) = api.call("DELETE", "/v1/apps/scp", None).await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        } else {
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().contains("git.url"));
        }
    }

    // ---- (a) smart HTTP from `git http-backend`.
    repo(
        repos.path(),
        "site",
        &[("index.html", "<h1>hello over smart http</h1>\n")],
    );
    let seen: Seen = Arc::default();
    let backend = tokio::spawn(http_backend(
        listener,
        repos.path().to_owned(),
        Arc::clone(&seen),
    ));
    let url = format!("http://127.0.0.1:{http_port}/site.git");
    let (st, a) = api
        .call(
            "POST",
            "/v1/apps",
            Some(json!({"name": "web-http", "git": {"url": url}, "idle_seconds": 3600})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{a}");
    assert!(!a.to_string().contains("PRIVATE KEY"), "{a}");
    let d = newest_deploy(&api, "web-http").await;
    let v = live(&api, "web-http", &d).await;
    assert_eq!(v["plan"]["framework"], "static", "{v}");
    let (st, body) = visit(&server, "web-http", "/").await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.contains("hello over smart http"), "{body}");
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .any(|r| r == "GET /site.git/info/refs?service=git-upload-pack"),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r == "POST /site.git/git-upload-pack"),
        "{requests:?}"
    );
    let log = deploy_log(&api, "web-http", &d).await;
    assert!(!log.contains("ssh:"), "no key for an http fetch: {log}");

    // ---- (a') A redirect from an allowed address to a loopback one that is not allowed:
    // the fetch is refused where the redirect is followed, the deploy fails saying why, and
    // the redirect's target is never reached.
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let trap_port = trap.local_addr().unwrap().port();
    let trapped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Arc::clone(&trapped);
    let trapping = tokio::spawn(async move {
        while let Ok(_conn) = trap.accept().await {
            t.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let redirects = tokio::spawn(async move {
        while let Ok((mut c, _)) = redirector.accept().await {
            let mut buf = vec![0; 4096];
            let _ = c.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{trap_port}/site.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = c.write_all(reply.as_bytes()).await;
        }
    });
    let url = format!("http://127.0.0.1:{redirect_port}/site.git");
    let (st, v) = api
        .call(
            "POST",
            "/v1/apps",
            Some(json!({"name": "web-redirect", "git": {"url": url}})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let d = newest_deploy(&api, "web-redirect").await;
    let bad = settled(&api, "web-redirect", &d).await;
    assert_eq!(bad["state"], "failed", "{bad}");
    let error = bad["error"].as_str().unwrap();
    assert!(error.contains("a loopback address"), "{bad}");
    assert!(bad["sandbox_id"].is_null(), "{bad}");
    assert_eq!(trapped.load(std::sync::atomic::Ordering::SeqCst), 0);
    trapping.abort();
    redirects.abort();
    backend.abort();

    // ---- (b) SSH with the app's deploy key.
    let bare = repo(
        repos.path(),
        "ssh-site",
        &[("index.html", "<h1>hello over ssh</h1>\n")],
    );
    let url = format!("ssh://{user}@127.0.0.1:{}{}", sshd.port, bare.display());
    let create = |name: &str| json!({"name": name, "git": {"url": url}, "idle_seconds": 3600, "deploy": false});
    let (st, a) = api.call("POST", "/v1/apps", Some(create("web-ssh"))).await;
    assert_eq!(st, StatusCode::CREATED, "{a}");
    let app = app_json(&api, "web-ssh").await;
    let key = app["deploy_key"].as_str().unwrap().to_owned();
    assert_eq!(a["deploy_key"], key.as_str(), "the key stays the app's");
    let (_, list) = api.call("GET", "/v1/apps", None).await;
    assert!(!list.to_string().contains("PRIVATE KEY"), "{list}");
    sshd.authorize(&[&key]);
    let d = redeploy(&api, "web-ssh").await;
    let v = settled(&api, "web-ssh", &d).await;
    if v["state"] != "live" {
        panic!(
            "ssh deploy is {}: {}\n{}\nsshd:\n{}",
            v["state"],
            v["error"],
            deploy_log(&api, "web-ssh", &d).await,
            sshd.log()
        );
    }
    let (st, body) = visit(&server, "web-ssh", "/").await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.contains("hello over ssh"), "{body}");
    let log = deploy_log(&api, "web-ssh", &d).await;
    assert!(
        log.contains("ssh: with the app's deploy key (SHA256:"),
        "{log}"
    );
    // The key file was there for the fetch only; the host key is the app's to trust now.
    assert!(!data.join("deploys").join(&d).join("deploy_key").exists());
    let app_id = app["id"].as_str().unwrap();
    let known = data.join("app-known-hosts").join(app_id);
    let found = run(
        "ssh-keygen",
        &[
            "-F",
            &format!("[127.0.0.1]:{}", sshd.port),
            "-f",
            known.to_str().unwrap(),
        ],
        data,
    );
    assert!(found.contains("ssh-ed25519"), "{found}");
    assert!(sshd.log().contains("Accepted publickey"), "{}", sshd.log());

    // An app whose key the server does not know: the clone fails with ssh's reason, and
    // nothing of it runs.
    let (st, other) = api
        .call("POST", "/v1/apps", Some(create("web-nokey")))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{other}");
    assert_ne!(
        other["deploy_key"],
        key.as_str(),
        "every app has a key of its own"
    );
    let d = redeploy(&api, "web-nokey").await;
    let bad = settled(&api, "web-nokey", &d).await;
    assert_eq!(bad["state"], "failed", "{bad}");
    let error = bad["error"].as_str().unwrap();
    assert!(error.contains("git fetch"), "{bad}");
    assert!(error.contains("Permission denied (publickey)"), "{bad}");
    assert!(bad["sandbox_id"].is_null(), "{bad}");
    assert!(bad["phases_ms"]["clone"].is_null(), "{bad}");
    let log = deploy_log(&api, "web-nokey", &d).await;
    assert!(log.contains("failed: git fetch"), "{log}");
    assert!(vms_of(&api, "web-nokey").await.is_empty());
    assert!(!data.join("deploys").join(&d).join("deploy_key").exists());
    let (_, v) = api.call("GET", "/v1/apps/web-nokey", None).await;
    assert!(v["live_deploy"].is_null(), "{v}");
    assert!(v["instance_state"].is_null(), "{v}");

    // Rotation: a new pair; the next deploy fetches with it, so it fails until the new public
    // key is on the server, and the live version serves meanwhile.
    let (st, rotated) = api.call("POST", "/v1/apps/web-ssh/deploy-key", None).await;
    assert_eq!(st, StatusCode::OK, "{rotated}");
    let new_key = rotated["deploy_key"].as_str().unwrap().to_owned();
    assert_ne!(new_key, key);
    assert_eq!(
        app_json(&api, "web-ssh").await["deploy_key"],
        new_key.as_str()
    );
    let d = redeploy(&api, "web-ssh").await;
    let bad = settled(&api, "web-ssh", &d).await;
    assert_eq!(bad["state"], "failed", "{bad}");
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("Permission denied (publickey)"),
        "{bad}"
    );
    let (_, body) = visit(&server, "web-ssh", "/").await;
    assert!(body.contains("hello over ssh"), "{body}");
    sshd.authorize(&[&new_key]);
    let d = redeploy(&api, "web-ssh").await;
    live(&api, "web-ssh", &d).await;
    assert_eq!(vms_of(&api, "web-ssh").await.len(), 2, "live and standby");

    // Delete: the app's known_hosts goes with it.
    for name in ["web-http", "web-redirect", "web-ssh", "web-nokey"] {
        let (st, v) = api.call("DELETE", &format!("/v1/apps/{name}"), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    assert!(!known.exists());
    let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 0, "{v}");
    drop(sshd);
    drop(server);
    names.clean();
}
