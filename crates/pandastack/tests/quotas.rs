//! Per-workspace storage quotas through the real server and API: snapshots, forks and
//! hibernations past their counts get 429 `limit_reached` and leave nothing behind; an idle
//! timeout's hibernation waits (the sandbox keeps running) until there is room; once the storage
//! quota is reached, snapshots, hibernations and template builds get 507 `quota_exceeded`; and
//! `GET /v1/usage` shows each count, limit and byte total.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::{bake, runtime, within};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

fn api(server: &Server) -> Api<'_> {
    Api {
        s: server,
        c: Client::new(),
    }
}

async fn usage(api: &Api<'_>) -> Value {
    let (st, v) = api.call("GET", "/v1/usage", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

async fn state(api: &Api<'_>, id: &str) -> String {
    let (st, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["state"].as_str().unwrap().to_owned()
}

/// Asserts an error answer: its status and code, and that the message names `words`.
fn refused(got: (StatusCode, Value), status: StatusCode, code: &str, words: &str) {
    let (st, v) = got;
    assert_eq!(st, status, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(words), "{msg:?} should name {words:?}");
}

fn snapshot_dirs(data: &Path) -> usize {
    std::fs::read_dir(data.join("snapshots"))
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_quotas_refuse_with_clear_codes_and_usage_shows_them() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let base = ["--network", "off", "--pool-size", "0"];
    let mut flags = base.to_vec();
    flags.extend(["--max-snapshots", "2", "--max-hibernated", "1"]);
    let server = start_with(data, free_port(), &flags).await;
    let api = api(&server);

    let u = usage(&api).await;
    assert_eq!(u["snapshots"]["limit"], 2, "{u}");
    assert_eq!(u["sandboxes"]["hibernated_limit"], 1, "{u}");
    assert_eq!(u["templates"]["limit"], 100, "{u}");
    assert_eq!(u["storage"]["quota_gb"], 500, "{u}");
    assert_eq!(u["storage"]["bytes"], 0, "{u}");

    // Two snapshots: one taken, one a fork's.
    let a = api
        .create(
            json!({"template": "minimal", "idle_timeout_seconds": 3600, "on_timeout": "hibernate"}),
        )
        .await;
    let (st, snap) = api
        .call("POST", &format!("/v1/sandboxes/{a}/snapshots"), None)
        .await;
    assert_eq!(st, StatusCode::CREATED, "{snap}");
    let (st, fork) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{a}/fork"),
            Some(json!({"count": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{fork}");
    let c = fork["children"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(snapshot_dirs(data), 2);

    // A third is refused either way, with nothing made: no row, no files, no child.
    refused(
        api.call("POST", &format!("/v1/sandboxes/{a}/snapshots"), None)
            .await,
        StatusCode::TOO_MANY_REQUESTS,
        "limit_reached",
        "2 snapshots",
    );
    refused(
        api.call(
            "POST",
            &format!("/v1/sandboxes/{a}/fork"),
            Some(json!({"count": 1})),
        )
        .await,
        StatusCode::TOO_MANY_REQUESTS,
        "limit_reached",
        "2 snapshots",
    );
    let (_, list) = api.call("GET", "/v1/snapshots", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2, "{list}");
    assert_eq!(snapshot_dirs(data), 2);
    let (_, sandboxes) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(
        sandboxes["data"].as_array().unwrap().len(),
        2,
        "{sandboxes}"
    );

    let u = usage(&api).await;
    let snap_bytes: u64 = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["size_bytes"].as_u64().unwrap())
        .sum();
    assert!(snap_bytes > 0);
    assert_eq!(u["snapshots"]["count"], 2, "{u}");
    assert_eq!(u["storage"]["snapshot_bytes"], snap_bytes, "{u}");
    assert_eq!(u["storage"]["bytes"], snap_bytes, "{u}");

    // One hibernated sandbox may be kept; its files count as storage.
    api.hibernate(&a).await;
    let u = usage(&api).await;
    assert_eq!(u["sandboxes"]["hibernated"], 1, "{u}");
    let image = u["storage"]["hibernated_bytes"].as_u64().unwrap();
    assert!(image > 1 << 20, "a hibernation image of {image} bytes: {u}");
    assert_eq!(u["storage"]["bytes"], snap_bytes + image, "{u}");
    refused(
        api.call("POST", &format!("/v1/sandboxes/{c}/hibernate"), None)
            .await,
        StatusCode::TOO_MANY_REQUESTS,
        "limit_reached",
        "1 hibernated sandboxes",
    );
    assert_eq!(state(&api, &c).await, "running");
    assert_eq!(api.exec(&c, "echo up").await["stdout"], "up\n");

    // An idle timeout does not pass the limit either: the sandbox keeps running until there
    // is room, then hibernates.
    let (st, v) = api
        .call(
            "PATCH",
            &format!("/v1/sandboxes/{c}"),
            Some(json!({"idle_timeout_seconds": 2})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(state(&api, &c).await, "running");
    let (st, v) = api
        .call("DELETE", &format!("/v1/sandboxes/{a}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    within(
        Duration::from_secs(60),
        "idle hibernation once there is room",
        async {
            while state(&api, &c).await != "hibernated" {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        },
    )
    .await;

    // A deleted snapshot makes room for one more.
    let first = snap["id"].as_str().unwrap();
    let (st, v) = api
        .call("DELETE", &format!("/v1/snapshots/{first}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let b = api.create(json!({"template": "minimal"})).await;
    let (st, v) = api
        .call("POST", &format!("/v1/sandboxes/{b}/snapshots"), None)
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    // The storage quota: at 0 GiB everything that adds storage is refused, with what fills it.
    drop(server);
    let mut flags = base.to_vec();
    flags.extend(["--max-storage-gb", "0"]);
    let server = start_with(data, free_port(), &flags).await;
    let api = self::api(&server);
    let u = usage(&api).await;
    assert_eq!(u["storage"]["quota_gb"], 0, "{u}");
    assert_eq!(u["snapshots"]["limit"], 500, "{u}");
    let before = snapshot_dirs(data);
    refused(
        api.call("POST", &format!("/v1/sandboxes/{b}/snapshots"), None)
            .await,
        StatusCode::INSUFFICIENT_STORAGE,
        "quota_exceeded",
        "storage quota of 0 GiB",
    );
    refused(
        api.call(
            "POST",
            &format!("/v1/sandboxes/{b}/fork"),
            Some(json!({"count": 1})),
        )
        .await,
        StatusCode::INSUFFICIENT_STORAGE,
        "quota_exceeded",
        "storage quota",
    );
    refused(
        api.call("POST", &format!("/v1/sandboxes/{b}/hibernate"), None)
            .await,
        StatusCode::INSUFFICIENT_STORAGE,
        "quota_exceeded",
        "storage quota",
    );
    refused(
        api.call(
            "POST",
            "/v1/templates",
            Some(json!({"spec": "name = \"mine\"\n[debian]\npackages = [\"python3\"]\n"})),
        )
        .await,
        StatusCode::INSUFFICIENT_STORAGE,
        "quota_exceeded",
        "storage quota",
    );
    assert_eq!(snapshot_dirs(data), before);
    assert_eq!(state(&api, &b).await, "running");
    let (_, t) = api.call("GET", "/v1/templates", None).await;
    assert!(
        !t.to_string().contains("\"mine\""),
        "no build row is left: {t}"
    );
}
