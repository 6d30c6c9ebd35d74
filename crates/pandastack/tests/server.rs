//! `pandastack server` end to end: the real binary, real HTTP, real guests under QEMU. One
//! sandbox's life in named steps ([`common::step`]): a failure names the behaviour, and the
//! steps share the server start and the guests a test of their own each would boot again. The
//! refusals that need no VM (auth, a bad create, a body over the limit, an unknown sandbox, a
//! fork of too many) are fast tests in `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.
//! Also: traces exported to an OTLP collector (a stand-in decoding what it receives with the
//! OpenTelemetry protocol's own types).

mod common;

use common::{free_port, start, step, Api};
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_lifecycle_over_http() {
    // The data dir starts with a baked `minimal` template (baking from specs is covered by the
    // image and runtime tests; here it would only cost time).
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path().to_owned();
    let port = free_port();
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    let id = step(
        "a create with an Idempotency-Key makes one sandbox",
        async {
            let body = json!({"template": "minimal", "metadata": {"task": "e2e"}});
            let r = api
                .c
                .post(format!("{}/v1/sandboxes", server.url))
                .bearer_auth(&server.key)
                .header("Idempotency-Key", "create-1")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::CREATED);
            let sb: Value = r.json().await.unwrap();
            let id = sb["id"].as_str().unwrap().to_owned();
            assert_eq!(sb["state"], "running");
            let again: Value = api
                .c
                .post(format!("{}/v1/sandboxes", server.url))
                .bearer_auth(&server.key)
                .header("Idempotency-Key", "create-1")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                again["id"], sb["id"],
                "idempotent create made a second sandbox"
            );
            id
        },
    )
    .await;

    step("exec: output and exit codes are data", async {
        let v = api.exec(&id, "echo hi; echo err >&2; exit 3").await;
        assert_eq!(
            (
                v["stdout"].as_str(),
                v["stderr"].as_str(),
                v["exit_code"].as_i64()
            ),
            (Some("hi\n"), Some("err\n"), Some(3))
        );
        let (st, v) = api
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"argv": ["/no/such/binary"]})),
            )
            .await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(v["exit_code"], 127);
    })
    .await;

    step(
        "files: a binary round trip, listing, path confinement, the root not renamed",
        async {
            let mut blob = vec![0u8; 1 << 20];
            rand::fill(&mut blob[..]);
            let r = api
                .c
                .put(format!(
                    "{}/v1/sandboxes/{id}/fs?path=/root/blob.bin",
                    server.url
                ))
                .bearer_auth(&server.key)
                .body(blob.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let got = api
                .c
                .get(format!(
                    "{}/v1/sandboxes/{id}/fs?path=/root/blob.bin",
                    server.url
                ))
                .bearer_auth(&server.key)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert!(got[..] == blob[..], "file round trip differs");
            let (st, _) = api
                .call(
                    "GET",
                    &format!("/v1/sandboxes/{id}/fs?path=/tmp/../etc/shadow"),
                    None,
                )
                .await;
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
            let (st, v) = api
                .call(
                    "GET",
                    &format!("/v1/sandboxes/{id}/fs/list?path=/root"),
                    None,
                )
                .await;
            assert_eq!(st, StatusCode::OK);
            assert!(v["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == "blob.bin"));
            // Renaming the root (a mount point: EXDEV in the guest) is the caller's error, not
            // a 500.
            let (st, v) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{id}/fs/rename"),
                    Some(json!({"from": "/", "to": "/tmp/x"})),
                )
                .await;
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
            assert_eq!(v["error"]["code"], "invalid_argument");
        },
    )
    .await;

    step("the list filters by metadata", async {
        let (_, v) = api
            .call("GET", "/v1/sandboxes?metadata.task=e2e", None)
            .await;
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        let (_, v) = api
            .call("GET", "/v1/sandboxes?metadata.task=other", None)
            .await;
        assert!(v["data"].as_array().unwrap().is_empty());
    })
    .await;

    step(
        "hibernate keeps memory (/dev/shm) and an exec wakes the sandbox",
        async {
            api.exec(&id, "echo kept > /dev/shm/state").await;
            let (st, v) = api
                .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["state"], "hibernated");
            let v = api.exec(&id, "cat /dev/shm/state").await;
            assert_eq!(v["stdout"], "kept\n");
            let (_, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
            assert_eq!(v["state"], "running");
        },
    )
    .await;

    let kids = step("fork: children see the parent's memory", async {
        let (st, v) = api
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/fork"),
                Some(json!({"count": 2})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        let kids: Vec<String> = v["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(kids.len(), 2);
        for k in &kids {
            assert_eq!(api.exec(k, "cat /dev/shm/state").await["stdout"], "kept\n");
        }
        kids
    })
    .await;

    // A retried fork with the same Idempotency-Key replays the first answer (no new child);
    // the same key with another request is a conflict.
    step(
        "a retried fork with its Idempotency-Key replays; another body with the key conflicts",
        async {
            let fork_with_key = |count: u32| {
                api.c
                    .post(format!("{}/v1/sandboxes/{id}/fork", server.url))
                    .bearer_auth(&server.key)
                    .header("Idempotency-Key", "fork-1")
                    .json(&json!({ "count": count }))
                    .send()
            };
            let first: Value = fork_with_key(1).await.unwrap().json().await.unwrap();
            let again = fork_with_key(1).await.unwrap();
            assert_eq!(again.status(), StatusCode::CREATED);
            let again: Value = again.json().await.unwrap();
            assert_eq!(first["children"][0]["id"], again["children"][0]["id"]);
            assert_eq!(
                fork_with_key(2).await.unwrap().status(),
                StatusCode::CONFLICT
            );
            let child = first["children"][0]["id"].as_str().unwrap().to_owned();
            let (st, _) = api
                .call("DELETE", &format!("/v1/sandboxes/{child}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        },
    )
    .await;

    let from_snap = step(
        "a sandbox from a snapshot has the memory it was taken with",
        async {
            let (st, snap) = api
                .call("POST", &format!("/v1/sandboxes/{id}/snapshots"), None)
                .await;
            assert_eq!(st, StatusCode::CREATED, "{snap}");
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/sandboxes",
                    Some(json!({"snapshot_id": snap["id"]})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            let from_snap = v["id"].as_str().unwrap().to_owned();
            assert_eq!(
                api.exec(&from_snap, "cat /dev/shm/state").await["stdout"],
                "kept\n"
            );
            from_snap
        },
    )
    .await;

    // The server restarts (graceful, then kill -9): sandboxes keep running and are re-attached.
    drop(api);
    let mut server = server;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = server.child.wait();
    drop(server);
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    step(
        "after a graceful server restart a sandbox runs on, memory kept",
        async {
            assert_eq!(
                api.exec(&id, "cat /dev/shm/state").await["stdout"],
                "kept\n"
            );
        },
    )
    .await;
    drop(api);
    let mut server = server;
    server.child.kill().unwrap();
    let _ = server.child.wait();
    drop(server);
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    step(
        "after a kill -9 of the server every sandbox is re-attached",
        async {
            let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
            assert_eq!(v["data"].as_array().unwrap().len(), 4, "{v}");
            assert_eq!(
                api.exec(&kids[0], "hostname").await["stdout"],
                format!("{}\n", kids[0])
            );
        },
    )
    .await;

    step("deletes leave nothing behind", async {
        for sb in [&id, &kids[0], &kids[1], &from_snap] {
            let (st, _) = api
                .call("DELETE", &format!("/v1/sandboxes/{sb}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        }
        let (st, _) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        let left: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".pool-"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Traces

/// One span as a collector received it.
#[derive(Debug, Clone)]
struct Received {
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    service: String,
}

/// An OTLP/HTTP collector stand-in on loopback: it decodes each `POST /v1/traces` body as the
/// protocol's `ExportTraceServiceRequest` and keeps the spans.
async fn collector() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = std::sync::Arc::clone(&got);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let keep = std::sync::Arc::clone(&keep);
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                let mut spans = keep.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| r.attributes.iter())
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            spans.push(Received {
                                trace: s.trace_id,
                                id: s.span_id,
                                parent: s.parent_span_id,
                                name: s.name,
                                service: service.clone(),
                            });
                        }
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, got)
}

/// A database of its own on the test PostgreSQL server (`None`: PostgreSQL skipped).
fn postgres_database() -> Option<String> {
    let admin = match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
        Ok("skip") => return None,
        Ok(u) => u.to_owned(),
        Err(_) => panic!(
            "PANDASTACK_TEST_POSTGRES is not set: run `eval \"$(scripts/test-postgres.sh start)\"`"
        ),
    };
    let name = format!("pst_{:016x}", rand::random::<u64>());
    let out = std::process::Command::new("psql")
        .args([admin.as_str(), "-qc", &format!("CREATE DATABASE {name}")])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Some(format!("{base}/{name}"))
}

/// A create's trace reaches the collector: its request span is the root, and under it (at any
/// depth) the placement, the VM create, the restore, the guest's post-restore call and — on a
/// PostgreSQL store, whose statements run on the request's own task — the store's statements.
#[tokio::test(flavor = "multi_thread")]
async fn a_creates_trace_reaches_an_otlp_collector() {
    let (addr, got) = collector().await;
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let endpoint = format!("http://{addr}");
    let state = postgres_database();
    let mut args = vec!["--network", "off", "--otlp-endpoint", endpoint.as_str()];
    if let Some(db) = &state {
        args.extend(["--state", db.as_str()]);
    }
    let server = common::start_with(guard.dir.path(), free_port(), &args).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    // The batch exporter sends every few seconds.
    let root = pandastack_testkit::within(
        std::time::Duration::from_secs(30),
        "the create's span",
        async {
            loop {
                let found = got
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|s| s.name == "POST /v1/sandboxes")
                    .cloned();
                if let Some(r) = found {
                    return r;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    assert!(
        root.parent.is_empty(),
        "the request is the trace's root: {root:?}"
    );
    assert!(root.service.contains("pandastack-server"), "{root:?}");
    let mut want = vec!["placement", "vm.create", "restore", "guest.post_restore"];
    if state.is_some() {
        want.push("store.query");
    }
    // Every wanted span of the trace, each with a chain of parents up to the root.
    pandastack_testkit::within(
        std::time::Duration::from_secs(30),
        "the create's child spans",
        async {
            loop {
                let spans: Vec<Received> = got
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| s.trace == root.trace)
                    .cloned()
                    .collect();
                let under_root = |s: &Received| {
                    let mut at = s.clone();
                    for _ in 0..16 {
                        if at.parent == root.id {
                            return true;
                        }
                        match spans.iter().find(|p| p.id == at.parent) {
                            Some(p) => at = p.clone(),
                            None => return false,
                        }
                    }
                    false
                };
                let missing: Vec<&str> = want
                    .iter()
                    .copied()
                    .filter(|n| !spans.iter().any(|s| s.name == *n && under_root(s)))
                    .collect();
                if missing.is_empty() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert!(st.is_success());
}
