//! `GET …/metrics`: the host's readings of a sandbox's VM (its sampler run by hand here) come
//! back as points of the asked step, with the guest's own figures; they outlive a hibernation;
//! a bad `since` or `step` is the caller's error (422); an app's or a database's route answers for
//! its VMs only to its own workspace.

use std::time::Duration;

use axum::http::StatusCode;
use pandastack_testkit::fake::fake_stack;

use super::{call, create};

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxs_readings_come_back_as_points_and_outlive_a_hibernation() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/sandboxes/{id}/metrics");

    // Nothing read yet: the figures of now, no points.
    let (st, v) = call(&s, "GET", &path, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "running");
    assert!(v["host_rss_bytes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["step"], 5);
    assert_eq!(v["samples"], serde_json::json!([]));

    for _ in 0..3 {
        s.agent.sample_once().await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let (st, v) = call(&s, "GET", &format!("{path}?since=1m&step=1"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["step"], 1);
    let points = v["samples"].as_array().unwrap();
    assert_eq!(points.len(), 3, "{v}");
    for p in points {
        assert!(p["mem_bytes"].as_u64().unwrap() > 0, "{p}");
        assert!(p["vcpus"].as_u64().unwrap() >= 1, "{p}");
        assert!(p["cpu_pct"].as_f64().unwrap() >= 0.0, "{p}");
        // The fake VM's guest agent runs on this host and tells of its memory and disk.
        let total = p["mem_total_bytes"].as_u64().unwrap();
        assert!(p["mem_available_bytes"].as_u64().unwrap() <= total, "{p}");
        let disk = p["disk_total_bytes"].as_u64().unwrap();
        assert!(p["disk_bytes"].as_u64().unwrap() <= disk, "{p}");
        // No network slot in the fake stack: no network figures.
        assert!(p["net_rx"].is_null(), "{p}");
    }
    assert!(points[0]["t"].as_str().unwrap() < points[2]["t"].as_str().unwrap());
    // A minute's step folds them into one point (or two across a minute's edge).
    let (_, v) = call(&s, "GET", &format!("{path}?since=1m&step=60"), None).await;
    let n = v["samples"].as_array().unwrap().len();
    assert!((1..=2).contains(&n), "{v}");

    // Hibernated: no figures of now, the readings stay.
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.agent.sample_once().await;
    let (st, v) = call(&s, "GET", &format!("{path}?since=1m&step=1"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "hibernated");
    assert!(v.get("host_rss_bytes").is_none(), "{v}");
    assert_eq!(v["samples"].as_array().unwrap().len(), 3, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_window_is_the_callers_error() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    for (q, field) in [
        ("step=0", "step"),
        ("step=abc", "step"),
        ("step=100000", "step"),
        ("since=7h", "since"),
        ("since=yesterday", "since"),
    ] {
        let (st, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}/metrics?{q}"), None).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(field), "{q}: {msg}");
    }
    let (st, _) = call(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/metrics?since=2026-01-01T00:00:00Z&step=30"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    for path in [
        "/v1/sandboxes/sb-nope/metrics",
        "/v1/apps/nope/metrics",
        "/v1/functions/nope/metrics",
        "/v1/databases/nope/metrics",
    ] {
        let (st, v) = call(&s, "GET", path, None).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{path}: {v}");
    }
}
