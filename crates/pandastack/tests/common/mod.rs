//! The server fixture shared by the end-to-end tests: the real `pandastack server` binary on a
//! free port over a test data directory, killed on drop, and a small JSON client for it.

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

pub mod oci;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pandastack_testkit::within;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

pub struct Server {
    pub child: Child,
    pub url: String,
    pub key: String,
    /// The preview proxy's address (`127.0.0.1:port`); preview hosts are
    /// `<port>-<id>.localhost:<proxy port>`.
    pub proxy: String,
    /// The database front's address (`127.0.0.1:port`).
    pub db: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on, for a server this test starts, held for this test process.
///
/// Not `bind(":0")`: that hands out ports from the kernel's ephemeral range, where the
/// outgoing connections of every test running beside this one also get theirs, so the port
/// could be taken between this call and the server's bind (CI saw the database front fail
/// with "Address already in use"). Ports come from below that range (20000–32767), start at
/// a per-process offset and are never handed out twice by one test binary.
///
/// Tests run in processes of their own, side by side, and a test that kills its server and
/// starts it again on the same port leaves that port free in between: CI saw another test's
/// server take it there. So a port is also held for the whole life of the test process by
/// an exclusive `flock` on `$TMPDIR/pandastack-test-ports/<port>`, which every test process
/// skips; the kernel drops the lock when the process ends, however it ends. The test kit's
/// one: the cluster tests' processes take theirs from the same place.
pub use pandastack_testkit::cluster_kit::free_port;

/// Puts the catalog spec `templates/<name>.toml` in the test server's catalog (the directory
/// [`start_with`] passes as `--templates-dir`): its first use builds the image (cached in
/// `$PANDASTACK_CACHE`) and bakes it.
pub fn catalog(data: &Path, name: &str) {
    let dir = data.join("no-specs");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../templates/{name}.toml"));
    std::fs::copy(spec, dir.join(format!("{name}.toml"))).unwrap();
}

/// Starts the server on `data` and waits until it answers; the key is the first workspace's.
/// Test servers run side by side, so they get no network pool unless a test asks for one
/// (with its own `--net-name`/`--net-base`).
pub async fn start(data: &Path, port: u16) -> Server {
    start_with(data, port, &["--network", "off"]).await
}

/// [`start`] with extra `pandastack server` arguments (`--listen ADDR:port` replaces the
/// default `127.0.0.1:port`, `--pool-size N` the default 1).
pub async fn start_with(data: &Path, port: u16, extra: &[&str]) -> Server {
    let key_file = data.join("key");
    let templates = data.join("no-specs");
    std::fs::create_dir_all(&templates).unwrap();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["server"];
    if !extra.contains(&"--pool-size") {
        args.extend(["--pool-size", "1"]);
    }
    if !extra.contains(&"--listen") {
        args.extend(["--listen", listen.as_str()]);
    }
    // Servers run side by side: each has a preview proxy port of its own.
    let proxy_port = free_port();
    let proxy = format!("127.0.0.1:{proxy_port}");
    let preview = format!("http://localhost:{proxy_port}");
    args.extend([
        "--proxy-listen",
        proxy.as_str(),
        "--preview-url",
        preview.as_str(),
    ]);
    let db = match extra.iter().position(|a| *a == "--db-listen") {
        Some(i) => extra[i + 1].to_owned(),
        None => format!("127.0.0.1:{}", free_port()),
    };
    if !extra.contains(&"--db-listen") {
        args.extend(["--db-listen", db.as_str()]);
    }
    let child = Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .arg("--key-file")
        .arg(&key_file)
        .arg("--templates-dir")
        .arg(&templates)
        .args(extra)
        .env(
            "PANDASTACK_LOG",
            "info,pandastack_api=debug,pandastack_runtime=debug,pandastack_net=debug",
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("start server");
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::new();
    let mut child = child;
    within(Duration::from_secs(60), "server health", async {
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited before answering ({status}); its stderr is above");
            }
            // A bounded request: should something other than this server hold the port, the
            // loop still notices the server's exit instead of waiting on an unanswered request.
            let health = client
                .get(format!("{url}/v1/health"))
                .timeout(Duration::from_secs(5));
            if let Ok(r) = health.send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let key = std::fs::read_to_string(&key_file)
        .unwrap()
        .trim()
        .to_owned();
    Server {
        child,
        url,
        key,
        proxy,
        db,
    }
}

/// Runs the `pandastack` CLI (e.g. `keys …`) and returns (success, stdout, stderr).
pub fn cli(args: &[&str], data: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pandastack"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("PANDASTACK_LOG", "warn")
        .output()
        .expect("run pandastack");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub struct Api<'a> {
    pub s: &'a Server,
    pub c: Client,
}

impl Api<'_> {
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call_as(&self.s.key, method, path, body).await
    }

    /// A call with another API key.
    pub async fn call_as(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .c
            .request(m, format!("{}{path}", self.s.url))
            .bearer_auth(key)
            .timeout(Duration::from_secs(180));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        assert!(resp.headers().contains_key("x-request-id"));
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub async fn exec(&self, id: &str, cmd: &str) -> Value {
        let (st, v) = self
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({ "cmd": cmd })),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v
    }

    /// Creates a `minimal` sandbox and returns its id.
    pub async fn create(&self, body: Value) -> String {
        let (st, v) = self.call("POST", "/v1/sandboxes", Some(body)).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Hibernates sandbox `id`, asserting it is hibernated.
    pub async fn hibernate(&self, id: &str) {
        let (st, v) = self
            .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
            .await;
        assert_eq!(
            (st, v["state"].as_str()),
            (StatusCode::OK, Some("hibernated")),
            "{v}"
        );
    }
}

/// A `git daemon` serving the repositories under a directory on `127.0.0.1` (killed on
/// drop): where the tests' apps and functions fetch their sources from. A server fetches only
/// from public addresses unless told otherwise, so a test's server is started with
/// [`GitDaemon::allow_args`] — this daemon's address and no other loopback one. `git` runs
/// `git-daemon` as a child, so the daemon runs in a process group of its own, killed whole.
pub struct GitDaemon {
    child: Child,
    root: std::path::PathBuf,
    pub port: u16,
}

impl GitDaemon {
    /// Serves every repository under `root` (existing now or made later).
    pub fn start(root: &Path) -> GitDaemon {
        let port = free_port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", root.display()),
            ])
            .arg(root)
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start git daemon");
        let daemon = GitDaemon {
            child,
            root: root.to_owned(),
            port,
        };
        let t = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "git daemon on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        daemon
    }

    /// The `git://` URL of the repository at `repo` (under the daemon's root).
    pub fn url(&self, repo: &Path) -> String {
        let rel = repo
            .strip_prefix(&self.root)
            .expect("a repository under the root");
        format!("git://127.0.0.1:{}/{}", self.port, rel.display())
    }

    /// `pandastack server` arguments that let it fetch from this daemon.
    pub fn allow_args(&self) -> [String; 2] {
        [
            "--allow-internal-fetch".into(),
            format!("127.0.0.1:{}", self.port),
        ]
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Runs one named behaviour of a longer end-to-end test: a failure inside it (a panic, an
/// `assert!`, a [`within`] timeout) fails the test as `step "<name>" failed: <message>`, so a
/// red run names the behaviour that broke rather than only the test, without the server start
/// and guest boots a test of its own would cost. Logs when the step starts and how long it took.
pub async fn step<T>(name: &str, fut: impl std::future::Future<Output = T>) -> T {
    use futures::FutureExt;
    eprintln!("--- step {name:?}");
    let t = std::time::Instant::now();
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(v) => {
            eprintln!("--- step {name:?} passed in {:.1?}", t.elapsed());
            v
        }
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(a panic without a message)");
            panic!("step {name:?} failed after {:.1?}: {msg}", t.elapsed());
        }
    }
}
