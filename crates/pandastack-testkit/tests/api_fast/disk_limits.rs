//! Issue #36 item 3: a sandbox's disk limits (MiB/s and IOPS of its VM, root disk and volumes
//! together) — the server's default, a create's own (validated at the edge), shown with its
//! shape, asked of the driver at every start, kept by a hibernate and wake and inherited by a
//! fork.

use std::time::Duration;

use axum::http::StatusCode;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use pandastack_vm::DiskLimits;
use serde_json::{json, Value};

use super::{call, create, rows};

/// The disk limits of the VM starts the driver saw for sandbox `id`.
fn started(s: &FakeStack, id: &str) -> Vec<Option<DiskLimits>> {
    s.faults
        .disk_limits
        .lock()
        .unwrap()
        .iter()
        .filter(|(i, _)| i == id)
        .map(|(_, d)| *d)
        .collect()
}

fn limits(v: &Value) -> (u64, u64) {
    (
        v["disk_mbps"].as_u64().unwrap(),
        v["disk_iops"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxs_disk_limits_are_its_creates_or_the_default_and_stay_with_it() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let default = DiskLimits::DEFAULT;

    // No limits named: the default, shown with the shape.
    let (st, plain) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{plain}");
    assert_eq!(limits(&plain), (128, 4096), "{plain}");
    assert!(plain["cpu"].is_u64() && plain["memory_mb"].is_u64());

    // Refused at the edge, naming the field; nothing is created.
    let before = rows(&s).await;
    for (body, field) in [
        (json!({"template": "fake", "disk_mbps": 0}), "disk_mbps"),
        (json!({"template": "fake", "disk_iops": 0}), "disk_iops"),
        (json!({"template": "fake", "disk_mbps": 4097}), "disk_mbps"),
        (
            json!({"template": "fake", "disk_iops": 1_000_001}),
            "disk_iops",
        ),
        // Not an unsigned integer: the body does not parse (the message quotes the value).
        (json!({"template": "fake", "disk_mbps": -1}), "-1"),
        (json!({"template": "fake", "disk_iops": 1.5}), "1.5"),
        (
            json!({"template": "fake", "snapshot_id": "snap-x", "disk_mbps": 8}),
            "disk_mbps",
        ),
    ] {
        let (st, v) = call(&s, "POST", "/v1/sandboxes", Some(body.clone())).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_argument")),
            "{body}: {v}"
        );
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    assert_eq!(rows(&s).await, before);

    // A create's own: what it names, the default for the rest; the driver is asked for it.
    let (st, own) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake", "disk_mbps": 10})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{own}");
    assert_eq!(limits(&own), (10, 4096), "{own}");
    let id = own["id"].as_str().unwrap().to_owned();
    let ten = DiskLimits {
        bytes_per_sec: 10 << 20,
        iops: default.iops,
    };
    assert_eq!(started(&s, &id), [Some(ten)]);
    let (_, got) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(limits(&got), (10, 4096), "{got}");
    let plain_id = plain["id"].as_str().unwrap();
    assert_eq!(
        started(&s, plain_id).last().copied().flatten(),
        Some(default),
        "a sandbox without limits of its own keeps the default it started with"
    );

    // A hibernate and wake keep them (the VM starts again with the same limits).
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/wake"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(limits(&v), (10, 4096), "{v}");
    assert_eq!(started(&s, &id), [Some(ten), Some(ten)]);

    // A fork's children have their parent's.
    let (st, f) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(json!({"count": 2})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{f}");
    for child in f["children"].as_array().unwrap() {
        assert_eq!(limits(child), (10, 4096), "{child}");
        let cid = child["id"].as_str().unwrap();
        assert_eq!(started(&s, cid), [Some(ten)], "{cid}");
    }
}
