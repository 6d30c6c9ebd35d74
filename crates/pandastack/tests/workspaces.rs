//! Tenancy and hygiene, end to end: a second workspace made with `pandastack keys create` sees
//! none of the first one's objects and loses access when its key is revoked; a sandbox's TTL
//! removes it with its VM and files; and no request body, however malformed, gets a 5xx or
//! brings the server down (property-based). Real binary, real HTTP, real guests under QEMU.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{cli, free_port, start_with, Api, Server};
use pandastack_testkit::{bake, runtime, within, RuntimeGuard};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

async fn server() -> (Server, RuntimeGuard) {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start_with(guard.dir.path(), free_port(), &["--network", "off"]).await;
    (server, guard)
}

/// `pandastack keys …` that must succeed; returns stdout.
fn keys_ok(args: &[&str], data: &Path) -> String {
    let mut all = vec!["keys"];
    all.extend_from_slice(args);
    let (ok, out, err) = cli(&all, data);
    assert!(ok, "pandastack {all:?} failed: {err}");
    out
}

/// `pandastack keys …` that must fail; returns stderr.
fn keys_err(args: &[&str], data: &Path) -> String {
    let mut all = vec!["keys"];
    all.extend_from_slice(args);
    let (ok, out, err) = cli(&all, data);
    assert!(!ok, "pandastack {all:?} succeeded: {out}");
    err
}

#[tokio::test(flavor = "multi_thread")]
async fn workspaces_are_isolated_and_keys_revocable() {
    let (server, guard) = server().await;
    let data = guard.dir.path();
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let a = api
        .create(json!({"template": "minimal", "metadata": {"owner": "one"}}))
        .await;
    let (st, snap) = api
        .call("POST", &format!("/v1/sandboxes/{a}/snapshots"), None)
        .await;
    assert_eq!(st, StatusCode::CREATED, "{snap}");
    let snap = snap["id"].as_str().unwrap().to_owned();

    // The first workspace is the one the server made at first start.
    let listed: Value = serde_json::from_str(&keys_ok(&["list", "--json"], data)).unwrap();
    let ws1 = listed[0]["workspace_id"].as_str().unwrap().to_owned();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // A second workspace, made by the CLI while the server runs.
    let created: Value = serde_json::from_str(&keys_ok(
        &[
            "create",
            "--new-workspace",
            "other",
            "--name",
            "ci",
            "--json",
        ],
        data,
    ))
    .unwrap();
    let key2 = created["secret"].as_str().unwrap().to_owned();
    let key2_id = created["id"].as_str().unwrap().to_owned();
    let ws2 = created["workspace_id"].as_str().unwrap().to_owned();
    assert!(key2.starts_with("pds_"), "{created}");
    assert_ne!(ws1, ws2);
    assert_eq!(created["name"], "ci");

    // It sees nothing of the first workspace: lists are empty, every object is 404.
    let (st, v) = api.call_as(&key2, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["data"], json!([]), "{v}");
    let (st, v) = api.call_as(&key2, "GET", "/v1/snapshots", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["data"], json!([]), "{v}");
    let sb = format!("/v1/sandboxes/{a}");
    for (method, path, body) in [
        ("GET", sb.clone(), None),
        (
            "PATCH",
            sb.clone(),
            Some(json!({"metadata": {"owner": "two"}})),
        ),
        ("POST", format!("{sb}/exec"), Some(json!({"cmd": "true"}))),
        (
            "POST",
            format!("{sb}/exec/stream"),
            Some(json!({"cmd": "true"})),
        ),
        ("GET", format!("{sb}/fs?path=/etc/hostname"), None),
        ("GET", format!("{sb}/logs"), None),
        ("GET", format!("{sb}/metrics"), None),
        ("POST", format!("{sb}/fork"), Some(json!({"count": 1}))),
        ("POST", format!("{sb}/snapshots"), None),
        ("POST", format!("{sb}/hibernate"), None),
        ("POST", format!("{sb}/pause"), None),
        ("DELETE", sb.clone(), None),
    ] {
        let (st, v) = api.call_as(&key2, method, &path, body).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "sandbox_not_found", "{method} {path}");
    }
    let (st, v) = api
        .call_as(&key2, "DELETE", &format!("/v1/snapshots/{snap}"), None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    // WebSocket routes refuse before the upgrade, with the same 404.
    let r = api
        .c
        .get(format!("{}{sb}/exec/ws", server.url))
        .bearer_auth(&key2)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Keys of the first workspace are not the second's to see or revoke.
    let (_, v) = api.call_as(&key2, "GET", "/v1/keys", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    let key1_id = listed[0]["id"].as_str().unwrap();
    let (st, _) = api
        .call_as(&key2, "DELETE", &format!("/v1/keys/{key1_id}"), None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // The first workspace still has everything.
    let (_, v) = api
        .call("GET", "/v1/sandboxes?metadata.owner=one", None)
        .await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(api.exec(&a, "echo still").await["stdout"], "still\n");
    let (_, v) = api.call("GET", "/v1/snapshots", None).await;
    assert_eq!(v["data"][0]["id"], snap.as_str());

    // The second workspace works on its own objects.
    let (st, v) = api
        .call_as(
            &key2,
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let b = v["id"].as_str().unwrap().to_owned();
    let (_, v) = api.call("GET", &format!("/v1/sandboxes/{b}"), None).await;
    assert_eq!(
        v["error"]["code"], "sandbox_not_found",
        "workspace one sees two's sandbox"
    );

    // Listing keys never shows a secret.
    let all = keys_ok(&["list"], data);
    assert!(!all.contains(&key2) && !all.contains(&server.key), "{all}");
    assert!(all.contains(&key2_id) && all.contains(key1_id), "{all}");
    let only2: Value =
        serde_json::from_str(&keys_ok(&["list", "--workspace", &ws2, "--json"], data)).unwrap();
    assert_eq!(only2.as_array().unwrap().len(), 1, "{only2}");
    assert!(only2[0].get("secret").is_none());

    // Clear errors.
    assert!(keys_err(&["revoke", "key-doesnotexist"], data).contains("no key key-doesnotexist"));
    assert!(keys_err(&["create", "--workspace", "ws-nope"], data).contains("no workspace ws-nope"));
    assert!(keys_err(&["create"], data).contains("several workspaces"));
    let missing = guard.dir.path().join("not-a-data-dir");
    assert!(keys_err(&["list"], &missing).contains("no server database"));

    // A second key for the first workspace works there.
    let key1b = keys_ok(&["create", "--workspace", &ws1, "--name", "second"], data);
    let (st, _) = api
        .call_as(key1b.trim(), "GET", &format!("/v1/sandboxes/{a}"), None)
        .await;
    assert_eq!(st, StatusCode::OK);

    // Revoked: 401 from the next call on, for every route.
    keys_ok(&["revoke", &key2_id], data);
    for path in ["/v1/sandboxes", &format!("/v1/sandboxes/{b}")] {
        let (st, v) = api.call_as(&key2, "GET", path, None).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED, "{path}: {v}");
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    assert!(keys_err(&["revoke", &key2_id], data).contains("already revoked"));
    let listed: Value =
        serde_json::from_str(&keys_ok(&["list", "--workspace", &ws2, "--json"], data)).unwrap();
    assert_eq!(listed[0]["revoked"], true);
}

/// Pids of processes whose working directory is `dir` (QEMU runs in its run directory and names
/// its files relative to it, so its command line does not carry the path).
fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn ttl_expiry_removes_sandbox_vm_and_files() {
    let (server, guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api
        .create(json!({"template": "minimal", "ttl_seconds": 2}))
        .await;
    let run_dir = guard.dir.path().join("sandboxes").join(&id);
    let pid: i32 = std::fs::read_to_string(run_dir.join("qemu.pid"))
        .expect("qemu.pid")
        .trim()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(processes_in(&run_dir), vec![pid]);
    let t = std::time::Instant::now();
    within(Duration::from_secs(20), "ttl expiry", async {
        loop {
            let (st, _) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
            if st == StatusCode::NOT_FOUND {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    assert!(t.elapsed() >= Duration::from_secs(1), "expired early");
    // The VM and the files went with the row.
    within(Duration::from_secs(10), "vm and files gone", async {
        while Path::new(&format!("/proc/{pid}")).exists() || run_dir.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(processes_in(&run_dir).is_empty());
    let out = std::process::Command::new("pgrep")
        .arg("-f")
        .arg(&id)
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "processes still name {id}");
    let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(v["data"], json!([]), "{v}");
}

/// Idle means no API calls *and* no guest work: a sandbox whose guest keeps a CPU busy outlives
/// its idle timeout; once the work stops, the idle timeout takes it.
#[tokio::test(flavor = "multi_thread")]
async fn busy_guest_is_not_idle() {
    let (server, _guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api
        .create(json!({"template": "minimal", "idle_timeout_seconds": 6}))
        .await;
    api.exec(
        &id,
        "setsid sh -c 'while [ ! -e /tmp/stop ]; do :; done' </dev/null >/dev/null 2>&1 &",
    )
    .await;
    // Listing does not count as activity on the sandbox; only the guest's work keeps it.
    let listed = |v: &serde_json::Value| {
        v["data"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["id"] == id.as_str()))
    };
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
        assert!(listed(&v), "a busy sandbox was reaped as idle: {v}");
    }
    api.exec(&id, "touch /tmp/stop").await;
    within(
        Duration::from_secs(60),
        "idle once the work stopped",
        async {
            loop {
                let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
                if !listed(&v) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Property: malformed requests are 4xx, never 5xx, never a crash.

/// Any JSON value, with strings that matter to the API among the leaves.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
        guest_path().prop_map(Value::from),
        // No existing template name: a valid create must not start VMs here.
        prop::sample::select(vec![
            "",
            "a\u{0}b",
            "base",
            "kill",
            "hibernate",
            "-1",
            "0",
            "1e400",
            "sb-0000000000000000",
            "snap-0000000000000000",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_.]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Guest paths: mostly absolute (so requests get past validation to the guest), some not.
fn guest_path() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "/",
            "/tmp",
            "/tmp/",
            "/tmp/x",
            "/tmp/../etc",
            "/root/\u{e9}",
            "/proc/self/mem",
            "/dev/null",
            "/tmp/a/b/c",
            "//tmp",
            "/tmp/x/.",
            "relative",
            "",
        ])
        .prop_map(str::to_owned),
        "/tmp/[a-z./]{0,16}",
        ".{0,16}",
    ]
}

/// A value of the type `field` expects (often valid, sometimes at or past a limit).
fn typed(field: &'static str) -> BoxedStrategy<Value> {
    let name_map = || {
        prop::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,6}|.{0,4}", ".{0,8}", 0..3)
            .prop_map(|m| json!(m))
    };
    match field {
        "path" | "from" | "to" | "cwd" => guest_path().prop_map(Value::from).boxed(),
        "cmd" | "stdin" => ".{0,10}".prop_map(Value::from).boxed(),
        "argv" => prop::collection::vec(".{0,6}", 0..3)
            .prop_map(|v| json!(v))
            .boxed(),
        "env" | "metadata" => name_map().boxed(),
        "ttl_seconds" | "idle_timeout_seconds" | "timeout_seconds" | "count" => {
            prop_oneof![0..20u64, Just(604_801u64), any::<u64>()]
                .prop_map(Value::from)
                .boxed()
        }
        "parents" | "overwrite" => any::<bool>().prop_map(Value::from).boxed(),
        "on_timeout" => prop::sample::select(vec!["kill", "hibernate", "explode"])
            .prop_map(Value::from)
            .boxed(),
        "user" => prop::sample::select(vec!["", "root", "nobody", "99999", "no-such-user"])
            .prop_map(Value::from)
            .boxed(),
        // Template and snapshot names that do not exist here (no VM may start).
        _ => "[a-z0-9-]{0,6}x".prop_map(Value::from).boxed(),
    }
}

/// Routes with JSON bodies and the fields each knows (generated objects use them, so they come
/// close to valid requests). `real`: the route may act on the live sandbox (only where nothing
/// generated can run a command, change its lifetime or start VMs).
const BODY_ROUTES: &[(&str, &str, bool, &[&str])] = &[
    (
        "POST",
        "/v1/sandboxes",
        false,
        &[
            "template",
            "snapshot_id",
            "ttl_seconds",
            "idle_timeout_seconds",
            "on_timeout",
            "metadata",
            "env",
            "volumes",
        ],
    ),
    (
        "PATCH",
        "/v1/sandboxes/{id}",
        false,
        &["ttl_seconds", "idle_timeout_seconds", "metadata"],
    ),
    (
        "POST",
        "/v1/sandboxes/{id}/exec",
        false,
        &[
            "cmd",
            "argv",
            "env",
            "cwd",
            "user",
            "stdin",
            "timeout_seconds",
        ],
    ),
    (
        "POST",
        "/v1/sandboxes/{id}/exec/stream",
        false,
        &[
            "cmd",
            "argv",
            "env",
            "cwd",
            "user",
            "stdin",
            "timeout_seconds",
        ],
    ),
    (
        "POST",
        "/v1/sandboxes/{id}/fork",
        false,
        &["count", "metadata"],
    ),
    (
        "POST",
        "/v1/sandboxes/{id}/fs/mkdir",
        true,
        &["path", "parents"],
    ),
    (
        "POST",
        "/v1/sandboxes/{id}/fs/rename",
        true,
        &["from", "to", "overwrite"],
    ),
];

/// One generated request.
#[derive(Debug, Clone)]
enum Case {
    /// A body to one of [`BODY_ROUTES`], on the live sandbox or an unknown one.
    Body {
        route: usize,
        real: bool,
        body: Vec<u8>,
    },
    /// A file route on the live sandbox: `op` 0 upload, 1 download, 2 list, 3 stat.
    Files { op: u8, path: String, body: Vec<u8> },
}

fn case() -> impl Strategy<Value = Case> {
    let body_case = (0..BODY_ROUTES.len()).prop_flat_map(|route| {
        let fields: Vec<&'static str> = BODY_ROUTES[route].3.to_vec();
        let field_value = prop::sample::select(fields)
            .prop_flat_map(|f| (Just(f), prop_oneof![3 => typed(f), 1 => json_value()]));
        let near = prop::collection::vec(field_value, 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
        let body = prop_oneof![
            3 => near.prop_map(|v| v.to_string().into_bytes()),
            2 => json_value().prop_map(|v| v.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ];
        (Just(route), any::<bool>(), body).prop_map(|(route, real, body)| Case::Body {
            route,
            real,
            body,
        })
    });
    let files_case = (
        0..4u8,
        guest_path(),
        prop::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(op, path, body)| Case::Files { op, path, body });
    prop_oneof![3 => body_case, 1 => files_case]
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_never_get_a_5xx() {
    let (mut server, _guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let real = api.create(json!({"template": "minimal"})).await;
    let fake = "sb-0000000000000000".to_owned();
    let handle = tokio::runtime::Handle::current();
    let (url, key, c) = (server.url.clone(), server.key.clone(), api.c.clone());
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let result = tokio::task::block_in_place(|| {
        runner.run(&case(), |case| {
            handle.block_on(async {
                let req = match &case {
                    Case::Body {
                        route,
                        real: on_real,
                        body,
                    } => {
                        let (method, path, may_be_real, _) = BODY_ROUTES[*route];
                        let id = if may_be_real && *on_real {
                            &real
                        } else {
                            &fake
                        };
                        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                        c.request(m, format!("{url}{}", path.replace("{id}", id)))
                            .header("content-type", "application/json")
                            .body(body.clone())
                    }
                    Case::Files { op, path, body } => {
                        let base = format!("{url}/v1/sandboxes/{real}/fs");
                        match op {
                            0 => c.put(&base).body(body.clone()),
                            1 => c.get(&base),
                            2 => c.get(format!("{base}/list")),
                            _ => c.get(format!("{base}/stat")),
                        }
                        .query(&[("path", path.as_str())])
                    }
                };
                let resp = req
                    .bearer_auth(&key)
                    .timeout(Duration::from_secs(120))
                    .send()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("no response: {e}")))?;
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                prop_assert!(status.as_u16() < 500, "{status} for {case:?}: {text}");
                Ok(())
            })
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The live sandbox and the server survived all of it.
    assert_eq!(api.exec(&real, "echo ok").await["stdout"], "ok\n");
    drop(api);
    assert!(server.child.try_wait().unwrap().is_none(), "server exited");
}

/// `on_timeout: hibernate`: the expired sandbox is hibernated, a call wakes it, and the used-up
/// TTL does not hibernate it again at once.
#[tokio::test(flavor = "multi_thread")]
async fn ttl_hibernate_then_wake_stays_awake() {
    let (server, _guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api
        .create(json!({"template": "minimal", "ttl_seconds": 2, "on_timeout": "hibernate"}))
        .await;
    api.exec(&id, "echo before > /dev/shm/mark").await;
    within(Duration::from_secs(20), "ttl hibernate", async {
        loop {
            let (_, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
            if v["state"] == "hibernated" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    // Auto-wake with memory intact, then it stays running past several reaper rounds.
    assert_eq!(
        api.exec(&id, "cat /dev/shm/mark").await["stdout"],
        "before\n"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (st, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(api.exec(&id, "echo awake").await["stdout"], "awake\n");
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}
