//! Metered usage through the real server and a real guest: a running sandbox's vCPU-seconds and
//! GiB-seconds grow as the server meters its readings, stay in the ratio of its configured size
//! (within 1%), never pass its wall time, and a graceful restart of the server neither doubles
//! nor loses what was metered.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

const FLAGS: [&str; 8] = [
    "--network",
    "off",
    "--pool-size",
    "0",
    "--sample-interval-ms",
    "500",
    "--meter-interval-ms",
    "500",
];

/// The metered usage of the last day by resource (whatever month it is).
async fn totals(server: &Server) -> Value {
    let api = Api {
        s: server,
        c: Client::new(),
    };
    let from = pandastack_api::rfc3339(pandastack_store::now_ms() - 86_400_000);
    let path = format!("/v1/usage?from={from}&group_by=resource");
    let (st, v) = api.call("GET", &path, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let mut m = v["metered"].clone();
    // `from` and `to` move with the clock; the figures are what is compared.
    m["from"] = Value::Null;
    m["to"] = Value::Null;
    m
}

/// Restarts the server gracefully (SIGTERM: the meter's last pass runs) on the same data.
async fn restart(server: Server, data: &std::path::Path, port: u16) -> Server {
    let mut server = server;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = server.child.wait();
    drop(server);
    start_with(data, port, &FLAGS).await
}

/// Waits until the metered vCPU-seconds reach `at_least`.
async fn metered_until(server: &Server, at_least: f64) -> Value {
    let start = Instant::now();
    loop {
        let m = totals(server).await;
        if m["totals"]["vcpu_seconds"].as_f64().unwrap() >= at_least {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "metered usage stayed below {at_least} vCPU-seconds: {m}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_is_metered_exactly_across_a_server_restart() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let port = free_port();
    let server = start_with(data, port, &FLAGS).await;
    let created = Instant::now();
    let (st, v) = Api {
        s: &server,
        c: Client::new(),
    }
    .call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "minimal"})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (cpu, memory_mb) = (v["cpu"].as_f64().unwrap(), v["memory_mb"].as_f64().unwrap());

    metered_until(&server, 2.0 * cpu).await;
    let server = restart(server, data, port).await;
    let m = metered_until(&server, 4.0 * cpu).await;
    assert_eq!(m["totals"]["egress_bytes"], 0, "no network: {m}");

    // Deleted: its last readings are counted by the delete; nothing is added after.
    let (st, v) = Api {
        s: &server,
        c: Client::new(),
    }
    .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
    .await;
    assert!(st.is_success(), "{v}");
    let lived = created.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = totals(&server).await;
    let t = &before["totals"];
    let vcpu = t["vcpu_seconds"].as_f64().unwrap();
    let mem = t["memory_gib_seconds"].as_f64().unwrap();
    assert!(
        vcpu <= lived * cpu * 1.01,
        "{vcpu} vCPU-s in {lived} s: {before}"
    );
    let want = vcpu / cpu * memory_mb / 1024.0;
    assert!(
        (mem - want).abs() <= want * 0.01,
        "{mem} GiB-s, want {want}: {before}"
    );
    let groups = before["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{before}");
    assert_eq!(groups[0]["kind"], "sandbox");
    assert_eq!(groups[0]["resource_id"], id.as_str());

    // Another restart: exactly the same figures.
    let server = restart(server, data, port).await;
    assert_eq!(totals(&server).await, before);
}
