//! The API, control plane, host agent and runtime in one process over the fake VM driver
//! ([`pandastack_testkit::fake`]): real routes called with `oneshot`, a real guest agent per
//! sandbox, no QEMU — so each test takes well under a few seconds. What needs a real VM (memory
//! surviving snapshots, the guest kernel, networking) stays in the real-guest suites.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack, Kernels};
use serde_json::{json, Value};
use tower::ServiceExt;

#[path = "api_fast/code_languages.rs"]
mod code_languages;
#[path = "api_fast/console.rs"]
mod console;
#[path = "api_fast/cut_off.rs"]
mod cut_off;
#[path = "api_fast/disk_limits.rs"]
mod disk_limits;
#[path = "api_fast/events.rs"]
mod events;
#[path = "api_fast/file_urls.rs"]
mod file_urls;
#[path = "api_fast/fork_snapshots.rs"]
mod fork_snapshots;
#[path = "api_fast/front_door.rs"]
mod front_door;
#[path = "api_fast/hardening.rs"]
mod hardening;
#[path = "api_fast/hosts.rs"]
mod hosts;
#[path = "api_fast/isolation.rs"]
mod isolation;
#[path = "api_fast/list_pages.rs"]
mod list_pages;
#[path = "api_fast/metrics.rs"]
mod metrics;
#[path = "api_fast/no_vm_refusals.rs"]
mod no_vm_refusals;
#[path = "api_fast/operator_metrics.rs"]
mod operator_metrics;
#[path = "api_fast/scoped_keys.rs"]
mod scoped_keys;
#[path = "api_fast/team.rs"]
mod team;
#[path = "api_fast/usage.rs"]
mod usage;
#[path = "api_fast/watch.rs"]
mod watch;

/// A request with API key `key` and, if given, a JSON body.
fn keyed(key: &str, method: &str, path: &str, body: Option<Value>) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"));
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    req.body(body).unwrap()
}

/// `call` with another key.
async fn as_key(
    s: &FakeStack,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    answer(s, keyed(key, method, path, body)).await
}

async fn call(s: &FakeStack, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    send(s, method, path, body.map(|b| b.to_string())).await
}

/// `call` with the body as sent, byte for byte (`application/json`, whatever it holds).
async fn send(
    s: &FakeStack,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {}", s.key));
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b)
        }
        None => Body::empty(),
    };
    answer(s, req.body(body).unwrap()).await
}

/// Sends `req` through the router; its status and body (JSON, or the text as a JSON string).
async fn answer(s: &FakeStack, req: Request<Body>) -> (StatusCode, Value) {
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

async fn create(s: &FakeStack) -> (StatusCode, Value) {
    call(
        s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake"})),
    )
    .await
}

/// Rows the store has for the only workspace.
async fn rows(s: &FakeStack) -> usize {
    let (st, v) = call(s, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"].as_array().unwrap().len()
}

/// Directories of sandboxes in the data dir.
fn sandbox_dirs(s: &FakeStack) -> Vec<String> {
    std::fs::read_dir(s.dir.path().join("data/sandboxes"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_exec_files_hibernate_and_delete_in_process() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let t = Instant::now();
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["state"], "running");
    eprintln!("create over the fake driver: {:?}", t.elapsed());

    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "echo hi; hostname; exit 3"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // The fake VM has a UTS namespace of its own with the sandbox's hostname.
    assert_eq!(v["stdout"], format!("hi\n{id}\n"));
    assert_eq!(v["exit_code"], 3);

    let path = format!("/tmp/pandastack-fast-{id}/f.txt");
    let put = Request::builder()
        .method("PUT")
        .uri(format!("/v1/sandboxes/{id}/fs?path={path}"))
        .header("authorization", format!("Bearer {}", s.key))
        .body(Body::from("hello"))
        .unwrap();
    assert_eq!(
        s.router.clone().oneshot(put).await.unwrap().status(),
        StatusCode::OK
    );
    let (st, v) = call(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/fs?path={path}"),
        None,
    )
    .await;
    assert_eq!((st, v), (StatusCode::OK, Value::String("hello".into())));
    let _ = std::fs::remove_dir_all(format!("/tmp/pandastack-fast-{id}"));

    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(
        (st, v["state"].as_str()),
        (StatusCode::OK, Some("hibernated")),
        "{v}"
    );
    assert!(s.agent.get(&id).await.unwrap().state == pandastack_agent::VmState::Hibernated);
    // Any call wakes it; the row says so.
    exec_true(&s, &id).await;
    let (_, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(v["state"], "running");

    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert!(s.host.list().await.is_empty());
    assert_eq!(rows(&s).await, 0);
    assert!(sandbox_dirs(&s).is_empty(), "{:?}", sandbox_dirs(&s));
    let (st, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("sandbox_not_found"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_restore_leaves_no_row_vm_or_files() {
    let s = fake_stack(Duration::from_secs(10)).await;
    s.faults
        .fail_restore
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    assert_eq!(v["error"]["code"], "internal");
    assert_eq!(rows(&s).await, 0);
    assert!(s.host.list().await.is_empty());
    assert!(sandbox_dirs(&s).is_empty(), "{:?}", sandbox_dirs(&s));
    // The fault gone, the same host creates again.
    s.faults
        .fail_restore
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(rows(&s).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_never_answers_fails_the_create_within_its_bound() {
    let bound = Duration::from_secs(2);
    let s = fake_stack(bound).await;
    s.faults
        .hang_restore
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let t = Instant::now();
    let (st, v) = create(&s).await;
    let took = t.elapsed();
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    assert!(
        took >= bound && took < bound * 5,
        "create failed after {took:?}"
    );
    assert_eq!(rows(&s).await, 0);
    assert!(s.host.list().await.is_empty());
    assert!(sandbox_dirs(&s).is_empty(), "{:?}", sandbox_dirs(&s));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preview_proxy_checks_access_and_forwards() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    // A web server on the loopback: the fake VM shares this host's network.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/who",
            axum::routing::get(|h: axum::http::HeaderMap| async move {
                format!(
                    "token={} auth={}",
                    h.contains_key("x-pandastack-access-token"),
                    h.contains_key("authorization")
                )
            }),
        );
        axum::serve(listener, app).await.unwrap();
    });
    let (st, p) = call(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/ports/{port}/url"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{p}");
    let host = p["url"]
        .as_str()
        .unwrap()
        .split("://")
        .nth(1)
        .unwrap()
        .to_owned();
    let token = p["token"].as_str().unwrap().to_owned();
    let get = |headers: Vec<(&'static str, String)>| {
        let mut r = Request::builder().uri("/who").header("host", host.clone());
        for (k, v) in headers {
            r = r.header(k, v);
        }
        s.proxy.clone().oneshot(r.body(Body::empty()).unwrap())
    };
    let r = get(vec![]).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = get(vec![("x-pandastack-access-token", "f".repeat(32))])
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    for creds in [
        ("x-pandastack-access-token", token.clone()),
        ("authorization", format!("Bearer {}", s.key)),
    ] {
        let r = get(vec![creds]).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"token=false auth=false");
    }
    // Another workspace's key does not open it.
    let (_, _, other) = s
        .store
        .keys()
        .create_workspace_with_key("other", 5, 60)
        .await
        .unwrap();
    let r = get(vec![("authorization", format!("Bearer {other}"))])
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Public: no credentials needed.
    let (st, _) = call(
        &s,
        "PATCH",
        &format!("/v1/sandboxes/{id}/ports/{port}"),
        Some(json!({"public": true})),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(get(vec![]).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_leaves_during_a_wake_does_not_lose_the_sandbox() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, _) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK);
    // Wakes take 600 ms; the client gives up after 150, half-way through one.
    s.faults
        .restore_delay_ms
        .store(600, std::sync::atomic::Ordering::SeqCst);
    let exec = Request::builder()
        .method("POST")
        .uri(format!("/v1/sandboxes/{id}/exec"))
        .header("authorization", format!("Bearer {}", s.key))
        .header("content-type", "application/json")
        .body(Body::from(json!({"argv": ["true"]}).to_string()))
        .unwrap();
    let gave_up =
        tokio::time::timeout(Duration::from_millis(150), s.router.clone().oneshot(exec)).await;
    assert!(gave_up.is_err(), "the exec should still have been waking");
    s.faults
        .restore_delay_ms
        .store(0, std::sync::atomic::Ordering::SeqCst);
    // The wake went on without the client: the sandbox is there and works.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "echo still here"})),
    )
    .await;
    assert_eq!(
        (st, v["stdout"].as_str()),
        (StatusCode::OK, Some("still here\n")),
        "{v}"
    );
    assert_eq!(
        s.agent.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Running
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_and_fork_through_the_snapshot_service() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, snap) = call(&s, "POST", &format!("/v1/sandboxes/{id}/snapshots"), None).await;
    assert_eq!(st, StatusCode::CREATED, "{snap}");
    assert_eq!(snap["sandbox_id"], id.as_str());
    let (st, f) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(json!({"count": 2, "metadata": {"branch": "b"}})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{f}");
    let kids = f["children"].as_array().unwrap();
    assert_eq!(kids.len(), 2);
    for k in kids {
        assert_eq!(
            (k["state"].as_str(), k["metadata"]["branch"].as_str()),
            (Some("running"), Some("b"))
        );
        let (st, v) = call(
            &s,
            "POST",
            &format!("/v1/sandboxes/{}/exec", k["id"].as_str().unwrap()),
            Some(json!({"cmd": "hostname"})),
        )
        .await;
        assert_eq!(
            (st, v["stdout"].as_str()),
            (
                StatusCode::OK,
                Some(format!("{}\n", k["id"].as_str().unwrap()).as_str())
            )
        );
    }
    assert_eq!(rows(&s).await, 3);
    let (_, list) = call(&s, "GET", "/v1/snapshots", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2, "{list}");
    // A failing fork leaves no child rows.
    s.faults
        .fail_restore
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(json!({"count": 2})),
    )
    .await;
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    assert_eq!(rows(&s).await, 3);
    assert_eq!(s.host.list().await.len(), 3);
    s.faults
        .fail_restore
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let snap_id = snap["id"].as_str().unwrap();
    let (st, _) = call(&s, "DELETE", &format!("/v1/snapshots/{snap_id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = call(&s, "DELETE", &format!("/v1/snapshots/{snap_id}"), None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(!s.dir.path().join("data/snapshots").join(snap_id).exists());
}

/// A sandbox whose code kernels keep to a directory of their own (killed when the guard drops).
async fn kernel_sandbox(s: &FakeStack) -> (String, Kernels) {
    let kernels = s.dir.path().join("kernels");
    let guard = Kernels(kernels.clone());
    let (st, v) = call(
        s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake", "env": {"PANDASTACK_KERNEL_DIR": kernels}})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    (v["id"].as_str().unwrap().to_owned(), guard)
}

/// `true` runs in sandbox `id` (waking it if it sleeps).
async fn exec_true(s: &FakeStack, id: &str) {
    let (st, v) = call(
        s,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["true"]})),
    )
    .await;
    assert_eq!(
        (st, v["exit_code"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
}

/// The events of a Server-Sent Events response: (name, data).
async fn sse(s: &FakeStack, path: &str, body: Value) -> (StatusCode, Vec<(String, Value)>) {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header("authorization", format!("Bearer {}", s.key))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let (mut name, mut data) = (String::new(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if !name.is_empty() {
            events.push((name, serde_json::from_str(&data).unwrap()));
        }
    }
    if status == StatusCode::OK {
        documented_events(path, &events);
    }
    (status, events)
}

/// The served OpenAPI document.
fn document() -> Value {
    serde_json::from_str(pandastack_api::openapi::document_json()).unwrap()
}

/// Checks events of `POST path` against the document: each event's name is one it lists for the
/// route's `text/event-stream`, and its data conforms to that event's `contentSchema`.
fn documented_events(path: &str, events: &[(String, Value)]) {
    let doc = document();
    let concrete: Vec<&str> = path.split('?').next().unwrap().split('/').collect();
    let (_, item) = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(t, _)| {
            let t: Vec<&str> = t.split('/').collect();
            t.len() == concrete.len()
                && t.iter()
                    .zip(&concrete)
                    .all(|(t, c)| t.starts_with('{') || t == c)
        })
        .unwrap_or_else(|| panic!("{path} is not in the document"));
    let schema = &item["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"];
    for (name, data) in events {
        let alt = schema["oneOf"]
            .as_array()
            .unwrap_or_else(|| panic!("{path}: events are not documented: {schema}"))
            .iter()
            .find(|a| a["properties"]["event"]["enum"][0] == name.as_str())
            .unwrap_or_else(|| panic!("{path}: event {name} is not documented"));
        assert_eq!(
            alt["properties"]["data"]["contentMediaType"],
            "application/json"
        );
        if let Err(e) = conforms(&doc, &alt["properties"]["data"]["contentSchema"], data) {
            panic!("{path}: event {name} {data}: {e}");
        }
    }
}

/// `v` against the part of JSON Schema the document's payloads use: `$ref`, `type`, `required`,
/// `properties`, `items`.
fn conforms(doc: &Value, schema: &Value, v: &Value) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let target = r
            .trim_start_matches("#/")
            .split('/')
            .fold(doc, |d, k| &d[k]);
        return conforms(doc, target, v);
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let is = |t: &str| match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => true,
    };
    if !types.is_empty() && !types.iter().any(|t| is(t)) {
        return Err(format!("{v} is not {types:?}"));
    }
    for k in schema["required"].as_array().into_iter().flatten() {
        if v.get(k.as_str().unwrap()).is_none() {
            return Err(format!("{k} is missing"));
        }
    }
    for (k, sub) in schema["properties"].as_object().into_iter().flatten() {
        if let Some(field) = v.get(k) {
            conforms(doc, sub, field).map_err(|e| format!("{k}: {e}"))?;
        }
    }
    for item in v.as_array().into_iter().flatten() {
        conforms(doc, &schema["items"], item)?;
    }
    Ok(())
}

/// The blocking result's fields (`stdout`, `stderr`, `results`, `error`) from a run's events;
/// checks that they end with one `done`.
fn fold(events: &[(String, Value)]) -> Value {
    let (mut stdout, mut stderr, mut results, mut error) =
        (String::new(), String::new(), vec![], Value::Null);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "done").count(),
        1,
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    for (name, data) in events {
        match name.as_str() {
            "stdout" => stdout.push_str(data["data"].as_str().unwrap()),
            "stderr" => stderr.push_str(data["data"].as_str().unwrap()),
            "result" => results.push(data.clone()),
            "error" => error = data.clone(),
            "done" => assert!(data["duration_ms"].is_u64() && data["truncated"] == false),
            other => panic!("unexpected event {other}"),
        }
    }
    json!({"stdout": stdout, "stderr": stderr, "results": results, "error": error})
}

/// `v` as text without the cell numbers of tracebacks (`<cell-3>`: each run is a new cell).
fn uncell(v: &Value) -> String {
    let text = v.to_string();
    let mut parts = text.split("<cell-");
    let mut out = parts.next().unwrap_or_default().to_owned();
    for p in parts {
        out.push_str("<cell-");
        out.push_str(p.trim_start_matches(|c: char| c.is_ascii_digit()));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn code_contexts_keep_state_apart_and_stream_what_they_return() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (id, _kernels) = kernel_sandbox(&s).await;
    let code = format!("/v1/sandboxes/{id}/code");
    let run = |body: Value| call(&s, "POST", &code, Some(body));

    // The default context keeps its variables between runs; a final expression is a result.
    let (st, v) = run(json!({"code": "x = 2**10"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["results"].as_array().map(Vec::len), &v["error"]),
        (Some(0), &Value::Null),
        "{v}"
    );
    let (st, v) = run(json!({"code": "x"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["results"], json!([{"text": "1024"}]), "{v}");

    // A second context has variables of its own: an exception is data, not an HTTP error.
    let (st, c) = call(&s, "POST", &format!("{code}/contexts"), Some(json!({}))).await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    assert_eq!(c["language"], "python");
    let ctx = c["id"].as_str().unwrap().to_owned();
    assert!(ctx.starts_with("ctx-"), "{ctx}");
    let (st, v) = run(json!({"code": "x", "context_id": ctx})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["error"]["name"], "NameError", "{v}");
    assert_eq!(v["error"]["value"], "name 'x' is not defined");

    // Output of both streams, and a traceback with the user's frames only.
    let printing = json!({"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx = 7\nx * 6", "context_id": ctx});
    let (st, v) = run(printing.clone()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["stdout"], &v["stderr"], &v["results"], &v["error"]),
        (
            &json!("out\n"),
            &json!("err\n"),
            &json!([{"text": "42"}]),
            &Value::Null
        ),
        "{v}"
    );
    let failing = json!({"code": "def f():\n    return 1 / 0\n\nf()", "context_id": ctx});
    let (st, v) = run(failing.clone()).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let e = &v["error"];
    assert_eq!(
        (e["name"].as_str(), e["value"].as_str()),
        (Some("ZeroDivisionError"), Some("division by zero")),
        "{v}"
    );
    let tb = e["traceback"].as_str().unwrap();
    assert!(
        tb.starts_with("Traceback (most recent call last):\n")
            && tb.contains(", in f\n")
            && tb.ends_with("ZeroDivisionError: division by zero\n")
            && !tb.contains("pandastack-kernel"),
        "{tb}"
    );

    // The streamed variant yields the same, ending with one `done`.
    let stream = format!("{code}/stream");
    for body in [printing, failing] {
        let (st, blocking) = run(body.clone()).await;
        assert_eq!(st, StatusCode::OK, "{blocking}");
        let (st, events) = sse(&s, &stream, body).await;
        assert_eq!(st, StatusCode::OK);
        let want = json!({
            "stdout": blocking["stdout"], "stderr": blocking["stderr"],
            "results": blocking["results"], "error": blocking["error"],
        });
        assert_eq!(uncell(&fold(&events)), uncell(&want), "{events:?}");
    }

    // A deleted context is gone: a 404 for a blocking run, an error event in a stream.
    let (st, _) = call(&s, "DELETE", &format!("{code}/contexts/{ctx}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = run(json!({"code": "1", "context_id": ctx})).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
    assert_eq!(
        v["error"]["message"],
        format!("code context {ctx} not found (create it with POST …/code/contexts)")
    );
    let (st, events) = sse(&s, &stream, json!({"code": "1", "context_id": ctx})).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        fold(&events)["error"],
        json!({"name": "ContextNotFound", "value": ctx, "traceback": ""})
    );
    // Deleting `default` resets it: the next run starts a fresh kernel.
    let (st, _) = call(&s, "DELETE", &format!("{code}/contexts/default"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (_, v) = run(json!({"code": "x"})).await;
    assert_eq!(v["error"]["name"], "NameError", "{v}");
    let (st, _) = call(&s, "DELETE", &format!("{code}/contexts/default"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}

/// Findings of the API fuzzing (scripts/fuzz-api.sh) that need no sandbox: answers and
/// refusals as the document says.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_follow_the_document() {
    let s = fake_stack(Duration::from_secs(10)).await;

    // A method a path does not serve: 405 in the error envelope, with `Allow`, key or not.
    let req = Request::builder()
        .method("PUT")
        .uri("/v1/health")
        .body(Body::empty())
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.headers()["allow"], "GET,HEAD");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).expect("an error envelope");
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");

    // serde reads a struct from an array of its fields: `["x"]` was a key named x.
    let (st, v) = call(&s, "POST", "/v1/keys", Some(json!(["x"]))).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["code"], "invalid_argument");
    let (st, v) = call(&s, "GET", "/v1/keys", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["name"] != "x"),
        "{v}"
    );

    // A bad PTY query is 422 before a plain call is refused with 426.
    let (st, v) = call(&s, "GET", "/v1/sandboxes/sb-none/pty?rows=99999", None).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_argument")),
        "{v}"
    );

    // Build versions are positive.
    let (st, v) = call(&s, "GET", "/v1/templates/fake/logs?version=0", None).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");

    // Bodies the document lists as optional are: an empty one reads as `{}`.
    let doc = document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap();
            let optional = op["requestBody"]["required"] == false;
            assert_eq!(
                optional,
                pandastack_api::openapi::OPTIONAL_BODIES.contains(&id),
                "{method} {path}"
            );
        }
    }
    let (st, v) = call(&s, "POST", "/v1/keys", None).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    // Whitespace alone is not an empty body but malformed JSON, and makes nothing.
    let (_, before) = call(&s, "GET", "/v1/keys", None).await;
    for body in ["\t", " ", "\r\n"] {
        let (st, v) = send(&s, "POST", "/v1/keys", Some(body.to_owned())).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_json")),
            "{body:?}: {v}"
        );
    }
    let (_, after) = call(&s, "GET", "/v1/keys", None).await;
    assert_eq!(before["data"], after["data"]);
}

/// Findings of the API fuzzing on a sandbox: boolean query parameters are strict (`follow=null`
/// streamed nothing and answered the plain log), a JSON array is not a patch, and the exec
/// stream's events are the documented ones.
#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_refuses_what_the_document_does() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();

    for bad in [
        format!("/v1/sandboxes/{id}/logs?follow=null"),
        format!("/v1/sandboxes/{id}/logs?follow=yes"),
    ] {
        let (st, v) = call(&s, "GET", &bad, None).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument");
    }
    let (st, _) = call(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/logs?follow=false"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let dir = format!("/tmp/pandastack-fast-{id}");
    let (st, v) = call(
        &s,
        "DELETE",
        &format!("/v1/sandboxes/{id}/fs?path={dir}&recursive=maybe"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");

    let (st, v) = call(
        &s,
        "PATCH",
        &format!("/v1/sandboxes/{id}"),
        Some(json!([null, null])),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["code"], "invalid_argument");

    // `sse` checks every event against the document.
    let stream = format!("/v1/sandboxes/{id}/exec/stream");
    let (st, events) = sse(
        &s,
        &stream,
        json!({"cmd": "echo out; echo err >&2; exit 2"}),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(events.last().unwrap().0, "exit", "{events:?}");
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}

/// `GET /v1/usage` counts what the workspace holds against its limits, and a create asking for
/// more volumes than its template has slots (the fake template has none) is refused with the
/// field named, leaving no row and no mount.
#[tokio::test(flavor = "multi_thread")]
async fn usage_counts_sandboxes_volumes_and_snapshots() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, u) = call(&s, "GET", "/v1/usage", None).await;
    assert_eq!(st, StatusCode::OK, "{u}");
    assert_eq!(u["sandboxes"]["running"], json!(0));
    assert_eq!(u["sandboxes"]["limit"], json!(50));
    assert_eq!(u["volumes"]["quota_gb"], json!(100));
    let (st, v) = call(
        &s,
        "POST",
        "/v1/volumes",
        Some(json!({"name": "v", "size_gb": 2})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake", "volumes": [{"name": "v", "path": "/v"}]})),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("volumes:"),
        "{v}"
    );
    assert_eq!(rows(&s).await, 0);
    let (_, vol) = call(&s, "GET", "/v1/volumes/v", None).await;
    assert_eq!(vol["attachments"], json!([]), "{vol}");

    let (st, a) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{a}");
    let (st, b) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let b = b["id"].as_str().unwrap();
    let (st, _) = call(&s, "POST", &format!("/v1/sandboxes/{b}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK);
    let (st, snap) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{}/snapshots", a["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{snap}");
    let (st, vs) = call(&s, "POST", "/v1/volumes/v/snapshots", None).await;
    assert_eq!(st, StatusCode::CREATED, "{vs}");
    let (_, u) = call(&s, "GET", "/v1/usage", None).await;
    assert_eq!(
        (&u["sandboxes"]["running"], &u["sandboxes"]["hibernated"]),
        (&json!(1), &json!(1)),
        "{u}"
    );
    assert_eq!(
        (
            &u["volumes"]["count"],
            &u["volumes"]["size_gb"],
            &u["volumes"]["snapshots"]
        ),
        (&json!(1), &json!(2), &json!(1)),
        "{u}"
    );
    assert_eq!(u["snapshots"]["count"], json!(1), "{u}");
    assert!(u["snapshots"]["bytes"].as_u64().unwrap() > 0, "{u}");
}

/// Hardening 2, item 0: a git source on the server's own disk (`file://` or a path — here a
/// root-only repository) or on its loopback, link-local or private addresses is refused at the
/// request with a 422 naming `git.url`, for apps, functions and their updates; nothing is made
/// and nothing is fetched (the loopback listener is never reached). A name that resolves to
/// such an address, and redirects, are refused where the fetch connects (the control plane's
/// `apps::source` tests and the real-guest `app_git` test).
#[tokio::test(flavor = "multi_thread")]
async fn git_sources_the_server_would_read_for_a_user_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let s = fake_stack(Duration::from_secs(10)).await;
    let secret = s.dir.path().join("private").join("site.git");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(
        secret.parent().unwrap(),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let out = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&secret)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let local = [
        format!("file://{}", secret.display()),
        secret.display().to_string(),
        format!("http://127.0.0.1:{port}/site.git"),
        format!("http://localhost:{port}/site.git"),
        format!("https://[::1]:{port}/site.git"),
        format!("git://127.0.0.1:{port}/site.git"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "ssh://git@10.0.0.1/srv/site.git".to_owned(),
        "git@192.168.1.1:site.git".to_owned(),
        "https://100.64.0.1/site.git".to_owned(),
    ];
    let refused = |st: StatusCode, v: &Value, what: &str| {
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument", "{what}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("git.url"),
            "{what}: {v}"
        );
    };
    for url in &local {
        let (st, v) = call(
            &s,
            "POST",
            "/v1/apps",
            Some(json!({"name": "thief", "git": {"url": url}})),
        )
        .await;
        refused(st, &v, url);
        let (st, v) = call(
            &s,
            "POST",
            "/v1/functions",
            Some(
                json!({"name": "thief", "runtime": "python", "handler": "main.handler",
                        "git": {"url": url}}),
            ),
        )
        .await;
        refused(st, &v, url);
    }
    // Updates are held to the same rule, and change nothing when refused.
    let public = "https://git.example.com/site.git";
    let (st, v) = call(
        &s,
        "POST",
        "/v1/apps",
        Some(json!({"name": "web", "git": {"url": public}, "deploy": false})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = call(
        &s,
        "POST",
        "/v1/functions",
        Some(
            json!({"name": "fn", "runtime": "python", "handler": "main.handler",
                    "files": {"main.py": "def handler(event):\n    return 1\n"}}),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    for url in &local[..3] {
        let (st, v) = call(
            &s,
            "PATCH",
            "/v1/apps/web",
            Some(json!({"git": {"url": url}})),
        )
        .await;
        refused(st, &v, url);
        let (st, v) = call(
            &s,
            "POST",
            "/v1/functions/fn/versions",
            Some(json!({"git": {"url": url}})),
        )
        .await;
        refused(st, &v, url);
    }
    let (_, v) = call(&s, "GET", "/v1/apps/web", None).await;
    assert_eq!(v["git"]["url"], public, "{v}");
    let (_, v) = call(&s, "GET", "/v1/apps", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    let (st, v) = call(&s, "GET", "/v1/functions/thief", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert!(
        listener.accept().is_err(),
        "nothing connected to the loopback listener"
    );
}
