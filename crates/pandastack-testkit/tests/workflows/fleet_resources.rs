//! What a cluster's control plane owns beyond a sandbox, over the in-process fleet of
//! [`super::fleet`]: a volume is placed on an agent's host (never on the replica, which has no
//! disk of its own), the sandbox that mounts it runs there, its snapshots and the volumes made
//! from them stay there; and the replica's reaper times out sandboxes on every host.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pandastack_api_types::{CreateSandboxRequest, CreateVolumeRequest};
use pandastack_host::{Host, HostError};

use super::fleet::Cluster;

fn volume(name: &str, from_snapshot: Option<&str>) -> CreateVolumeRequest {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "size_gb": 1,
        "from_snapshot": from_snapshot,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_volume_is_placed_on_a_host_and_its_sandbox_snapshots_and_copies_follow_it() {
    let c = Cluster::start(4096).await;
    c.store.keys().set_volume_quota_all(100).await.unwrap();
    let v = c
        .control
        .volumes
        .create(&c.ws, &volume("data", None))
        .await
        .unwrap();
    let host = v.row.host_id.clone();
    assert!(
        ["h1", "h2", "h3"].contains(&host.as_str()),
        "placed on an agent's host, not the replica: {host}"
    );
    for (id, h) in &c.hosts {
        let held = h.volume(&v.row.id).await;
        if *id == host {
            held.unwrap();
        } else {
            assert!(
                matches!(held, Err(HostError::VolumeNotFound(_))),
                "{id} holds no copy"
            );
        }
    }

    let req: CreateSandboxRequest = serde_json::from_value(serde_json::json!({
        "template": "minimal",
        "volumes": [{"name": "data", "path": "/data"}],
    }))
    .unwrap();
    let s = c.control.sandboxes.create(&c.ws, &req).await.unwrap();
    assert_eq!(s.host_id, host, "a sandbox runs where its volume is");

    let snap = c.control.volumes.snapshot(&c.ws, "data").await.unwrap();
    assert_eq!(snap.host_id, host, "the snapshot is on the volume's host");
    let copy = c
        .control
        .volumes
        .create(&c.ws, &volume("copy", Some(&snap.id)))
        .await
        .unwrap();
    assert_eq!(
        copy.row.host_id, host,
        "a volume from a snapshot is made where it is"
    );

    c.control.sandboxes.delete(&s).await.unwrap();
    c.control.volumes.delete(&c.ws, "copy").await.unwrap();
    c.control.volumes.delete(&c.ws, "data").await.unwrap();
    assert!(matches!(
        c.hosts[&host].volume(&v.row.id).await,
        Err(HostError::VolumeNotFound(_))
    ));
}

#[tokio::test]
async fn a_volume_create_with_no_host_fit_writes_nothing() {
    // 256 MiB a host: no room for the sandbox a volume is placed for.
    let c = Cluster::start(256).await;
    c.store.keys().set_volume_quota_all(100).await.unwrap();
    let e = c
        .control
        .volumes
        .create(&c.ws, &volume("data", None))
        .await
        .unwrap_err();
    let text = pandastack_host::error_chain(&e);
    assert!(text.contains("MiB free"), "says why: {text}");
    assert!(c
        .control
        .volumes
        .list(&c.ws, None, 10)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn the_replicas_reaper_times_out_sandboxes_on_every_host() {
    // 512 MiB a host: two of the scripted template's 256 MiB sandboxes each, so six creates
    // use all three.
    let c = Cluster::start(512).await;
    let mut hosts = BTreeSet::new();
    let mut ids = Vec::new();
    for _ in 0..6 {
        let req: CreateSandboxRequest = serde_json::from_value(serde_json::json!({
            "template": "minimal",
            "ttl_seconds": 1,
        }))
        .unwrap();
        let s = c.control.sandboxes.create(&c.ws, &req).await.unwrap();
        hosts.insert(s.host_id.clone());
        ids.push(s.id);
    }
    assert_eq!(
        hosts.len(),
        3,
        "the creates spread over every host: {hosts:?}"
    );
    c.control.start();
    let t = Instant::now();
    loop {
        let mut left = 0;
        for h in &hosts {
            left += c.store.sandboxes().on_host(h).await.unwrap().len();
        }
        if left == 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "{left} sandboxes outlived their TTL"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, h) in &c.hosts {
        for s in &ids {
            assert!(h.get(s).await.is_err(), "{s} stopped on {id}");
        }
    }
    c.control.shutdown(false).await;
}
