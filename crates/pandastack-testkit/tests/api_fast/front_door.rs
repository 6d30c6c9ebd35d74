//! Issue #37 item 1: the control plane's front door. The create rate is the store's, so two API
//! replicas over one store share each workspace's window (a create and a fork's children count
//! alike, and the refusal says when the window ends); `shutdown(true)` hibernates every
//! sandbox of the host and the rows say so.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_api, fake_control, fake_stack};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{call, create};

/// `method path` with `key` through `router`: status, `Retry-After` and body.
async fn call_as(
    router: &axum::Router,
    key: &str,
    method: &str,
    path: &str,
    body: Value,
) -> (StatusCode, Option<u64>, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, retry, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_a_workspaces_create_rate() {
    let s = fake_stack(Duration::from_secs(10)).await;
    // A workspace allowed four creates a minute, and a second API over the same store (another
    // replica: a process of its own would share nothing else either).
    let (_, _, key) = s
        .store
        .keys()
        .create_workspace_with_key("slow", 50, 4)
        .await
        .unwrap();
    let other = pandastack_api::router(Arc::new(fake_api(fake_control(
        s.store.clone(),
        Arc::clone(&s.host),
        s.dir.path(),
    ))));
    let body = json!({"template": "fake"});
    let (st, _, a) = call_as(&s.router, &key, "POST", "/v1/sandboxes", body.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{a}");
    let (st, _, b) = call_as(&other, &key, "POST", "/v1/sandboxes", body.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    // A fork of three would be the fifth, sixth and seventh: refused whole, nothing made.
    let fork = format!("/v1/sandboxes/{}/fork", a["id"].as_str().unwrap());
    let (st, retry, v) = call_as(&other, &key, "POST", &fork, json!({"count": 3})).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")),
        "{v}"
    );
    assert!(retry.is_some_and(|r| (1..=60).contains(&r)), "{retry:?}");
    // Two more fit, through either replica; the next is refused by both.
    let (st, _, v) = call_as(&s.router, &key, "POST", &fork, json!({"count": 1})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, _, v) = call_as(&other, &key, "POST", "/v1/sandboxes", body.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    for router in [&s.router, &other] {
        let (st, retry, v) = call_as(router, &key, "POST", "/v1/sandboxes", body.clone()).await;
        assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("create rate of 4 per minute"),
            "{v}"
        );
        assert!(retry.is_some(), "{v}");
    }
    // The refusals made nothing: four sandboxes in the workspace.
    let (_, _, l) = call_as(&s.router, &key, "GET", "/v1/sandboxes", Value::Null).await;
    assert_eq!(l["data"].as_array().unwrap().len(), 4, "{l}");
    // Another workspace has a window of its own.
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_with_hibernate_hibernates_every_sandbox_of_the_host() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (st, v) = create(&s).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{}/pause", ids[1]), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.control.shutdown(true).await;
    for v in s.host.list().await {
        assert_eq!(v.state, pandastack_host::VmState::Hibernated, "{}", v.id);
    }
    for id in &ids {
        let (st, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(
            (st, v["state"].as_str()),
            (StatusCode::OK, Some("hibernated")),
            "{v}"
        );
    }
    // And they wake.
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{}/wake", ids[0]), None).await;
    assert_eq!(
        (st, v["state"].as_str()),
        (StatusCode::OK, Some("running")),
        "{v}"
    );
}
