//! `/v1/templates` through the router over the fake stack, with no build worker running (a
//! queued build stays queued): the HTTP codes and messages the template service's refusals
//! are answered with. Builds themselves need a real builder VM: `crates/pandastack/tests`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack_without_workers as fake_stack, FakeStack};
use serde_json::{json, Value};
use tower::ServiceExt;

async fn send(s: &FakeStack, req: axum::http::request::Builder, body: Body) -> (StatusCode, Value) {
    let req = req
        .header("authorization", format!("Bearer {}", s.key))
        .body(body)
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

async fn call(s: &FakeStack, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    send(s, req, body).await
}

fn error(v: &Value) -> (&str, &str) {
    (
        v["error"]["code"].as_str().unwrap_or_default(),
        v["error"]["message"].as_str().unwrap_or_default(),
    )
}

const SPEC: &str = "name = \"app\"\n[debian]\npackages = [\"python3\"]\n";

#[tokio::test(flavor = "multi_thread")]
async fn template_refusals_keep_their_codes_and_messages() {
    let s = fake_stack(Duration::from_secs(10)).await;

    let (st, v) = call(&s, "POST", "/v1/templates", Some(json!({ "spec": SPEC }))).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        (v["name"].as_str(), v["state"].as_str()),
        (Some("app"), Some("queued"))
    );
    assert_eq!(v["version"], 1);

    let (st, v) = call(&s, "POST", "/v1/templates", Some(json!({ "spec": SPEC }))).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        error(&v),
        (
            "conflict",
            "a build of template app is under way; wait for it to finish"
        )
    );
    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "app"})),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        error(&v).1,
        "template app has no ready version yet (build 1 is queued)"
    );
    let (st, v) = call(&s, "DELETE", "/v1/templates/app", None).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        error(&v).1,
        "build 1 of app is queued; delete it once it has finished"
    );
    let (st, v) = call(&s, "DELETE", "/v1/templates/nothing", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(
        error(&v),
        ("template_not_found", "template nothing not found")
    );
    let (st, v) = call(&s, "GET", "/v1/templates/app/logs?version=x", None).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = call(&s, "GET", "/v1/templates/app/logs?version=2", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");

    let (st, v) = call(
        &s,
        "POST",
        "/v1/templates",
        Some(json!({ "name": "other", "spec": SPEC })),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(
        error(&v).1,
        "name \"other\" differs from the spec's name \"app\""
    );
    let mirror = "name = \"s\"\n[debian]\nmirror = \"http://evil.example/\"\n";
    let (st, v) = call(&s, "POST", "/v1/templates", Some(json!({ "spec": mirror }))).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(error(&v).1.contains("`debian.mirror`"), "{v}");

    // Tarballs: the shape, then the announced size, are refused before the upload is read.
    let tar = |q: &str| {
        Request::builder()
            .method("POST")
            .uri(format!("/v1/templates?{q}"))
            .header("content-type", "application/x-tar")
    };
    let (st, v) = send(&s, tar("name=t&cpu=17"), Body::from(vec![0u8; 512])).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(error(&v).1, "cpu: must be 1-16");
    let (st, v) = send(&s, tar("name=t&bogus=1"), Body::from(vec![0u8; 512])).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = send(
        &s,
        tar("name=t").header("content-length", (2u64 << 20).to_string()),
        Body::from(vec![0u8; 2 << 20]),
    )
    .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(
        error(&v),
        (
            "payload_too_large",
            "image tarball larger than this server's limit of 1 MiB"
        )
    );
    let (st, v) = send(&s, tar("name=t"), Body::empty()).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(error(&v).1, "empty body: send the image tarball");
    let (st, v) = send(
        &s,
        Request::builder()
            .method("POST")
            .uri("/v1/templates")
            .header("content-type", "text/plain"),
        Body::from("x"),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");

    // A refused tarball build leaves nothing: the workspace has the queued `app` only.
    let (st, v) = call(&s, "GET", "/v1/templates", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["app"], "{v}");
}
