//! `GET /metrics`: only an admin key reads it; after a create, an exec and a delete it holds
//! the sandboxes by state, the VM operations with their latency, the API requests by route
//! template, the hosts and the jobs — and no sandbox id (label sets stay bounded).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::json;
use tower::ServiceExt;

use super::{call, create};

async fn scrape(s: &FakeStack, key: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::builder().uri("/metrics");
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let resp = s
        .router
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}

/// The value of the first sample line starting with `series` (name and labels as written).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_admin_key_reads_the_metrics_and_they_tell_what_happened() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, _, _) = scrape(&s, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _, body) = scrape(&s, Some(&s.key)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");

    s.store
        .hosts()
        .register(s.control.host_id(), "fake-box")
        .await
        .unwrap();
    let ws = s.store.keys().workspaces().await.unwrap().remove(0);
    let (_, admin) = s.store.keys().create_admin(&ws.id, "ops").await.unwrap();

    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["true"]})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, _) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK);

    let (st, ct, text) = scrape(&s, Some(&admin)).await;
    assert_eq!(st, StatusCode::OK, "{text}");
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    for family in [
        "# TYPE pandastack_vms gauge",
        "# TYPE pandastack_hosts gauge",
        "# TYPE pandastack_vm_operations counter",
        "# TYPE pandastack_vm_operation_seconds histogram",
        "# TYPE pandastack_http_requests counter",
        "# TYPE pandastack_jobs gauge",
        "# TYPE pandastack_pool_vms gauge",
        "# TYPE pandastack_store_query_seconds histogram",
        "# TYPE pandastack_object_store_bytes counter",
        "# TYPE pandastack_proxy_requests counter",
        "# TYPE pandastack_database_wal_archive_lag_seconds gauge",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    // This stack's sandbox is hibernated (other tests of this process may add more).
    assert!(
        value(&text, "pandastack_vms{state=\"hibernated\"}").unwrap() >= 1.0,
        "{text}"
    );
    assert!(
        value(&text, "pandastack_hosts{state=\"ready\"}").unwrap() >= 1.0,
        "{text}"
    );
    for op in ["create", "hibernate"] {
        let series = format!("pandastack_vm_operations_total{{op=\"{op}\",result=\"ok\"}}");
        assert!(value(&text, &series).unwrap() >= 1.0, "{series}:\n{text}");
        let count = format!("pandastack_vm_operation_seconds_count{{op=\"{op}\"}}");
        assert!(value(&text, &count).unwrap() >= 1.0, "{count}:\n{text}");
    }
    let created =
        "pandastack_http_requests_total{method=\"POST\",route=\"/v1/sandboxes\",status=\"201\"}";
    assert!(value(&text, created).unwrap() >= 1.0, "{text}");
    let exec = "pandastack_http_requests_total{method=\"POST\",route=\"/v1/sandboxes/{id}/exec\",status=\"200\"}";
    assert!(value(&text, exec).unwrap() >= 1.0, "{text}");
    // Bounded labels: no sandbox id anywhere.
    assert!(!text.contains(&id), "{text}");
}
