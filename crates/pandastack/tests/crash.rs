//! `kill -9` of the server in the middle of a create: after a restart nothing of that create is
//! left — no row, no sandbox directory, no VM process, no network slot held.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, start_with, Api};
use pandastack_testkit::{bake, runtime, within};
use reqwest::{Client, StatusCode};
use serde_json::json;

/// Sandbox directories (not the warm pool's) under `sandboxes`.
fn sandbox_dirs(sandboxes: &Path) -> Vec<String> {
    std::fs::read_dir(sandboxes)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Processes whose working directory is below `dir` (QEMU runs in its run directory).
fn processes_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(dir)))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_create_leaves_nothing_after_restart() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let sandboxes = data.join("sandboxes");
    // No warm pool: a create then restores from scratch (hundreds of ms), a window to kill in.
    let args = ["--network", "off", "--pool-size", "0"];
    let port = free_port();
    let mut server = start_with(data, port, &args).await;
    let (url, key) = (server.url.clone(), server.key.clone());
    let create = tokio::spawn(async move {
        Client::new()
            .post(format!("{url}/v1/sandboxes"))
            .bearer_auth(key)
            .json(&json!({"template": "minimal"}))
            .send()
            .await
    });
    // Kill the server once the create has started its VM process (its row and directory came
    // first) but before it answered.
    within(Duration::from_secs(30), "create starts its VM", async {
        loop {
            let started = sandbox_dirs(&sandboxes)
                .iter()
                .any(|d| sandboxes.join(d).join("qemu.pid").is_file());
            if started {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    assert!(create.await.unwrap().is_err(), "the create was cut off");
    let left_behind = sandbox_dirs(&sandboxes);
    assert_eq!(
        left_behind.len(),
        1,
        "the half-made sandbox is there before the restart"
    );
    drop(server);

    // Restart on the same data directory: the reconcile removes the half-made create.
    let server = start_with(data, port, &args).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let (st, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["data"].as_array().unwrap().len(), 0, "no row left: {v}");
    assert!(sandbox_dirs(&sandboxes).is_empty(), "no directory left");
    assert_eq!(processes_under(&sandboxes), 0, "no VM process left");
    // And the server works normally.
    let id = api.create(json!({"template": "minimal"})).await;
    assert_eq!(api.exec(&id, "echo ok").await["stdout"], "ok\n");
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}

/// A client that gives up in the middle of a create (timeout, ^C) does not cut the create off
/// half done: it completes, the sandbox is listed and works, and deleting it leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn client_leaving_mid_create_leaves_a_whole_sandbox() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let sandboxes = data.join("sandboxes");
    // No warm pool: the create restores from scratch and takes far longer than the client waits.
    let server = start_with(data, free_port(), &["--network", "off", "--pool-size", "0"]).await;
    let gave_up = Client::new()
        .post(format!("{}/v1/sandboxes", server.url))
        .bearer_auth(&server.key)
        .json(&json!({"template": "minimal"}))
        .timeout(Duration::from_millis(30))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client left before the answer");
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = within(Duration::from_secs(120), "the create finishes", async {
        loop {
            let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
            if let Some(sb) = v["data"].as_array().and_then(|a| a.first()) {
                if sb["state"] == "running" {
                    return sb["id"].as_str().unwrap().to_owned();
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(api.exec(&id, "echo ok").await["stdout"], "ok\n");
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert!(sandbox_dirs(&sandboxes).is_empty(), "no directory left");
    assert_eq!(processes_under(&sandboxes), 0, "no VM process left");
}

/// A VM that ends without being stopped — its guest powers itself off, reboots (`-no-reboot`
/// makes that an exit), or its process is killed from outside — is `failed` in the API within
/// seconds (never `running`); exec, files, snapshot, fork, hibernate, wake and pause on it are
/// refused with a clear 409; a delete removes its row, directory and process. The other sandboxes carry on.
#[tokio::test(flavor = "multi_thread")]
async fn vms_that_exit_on_their_own_are_failed_and_deleted_whole() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let sandboxes = data.join("sandboxes");
    // No warm pool: its VMs would be processes under `sandboxes/` too.
    let server = start_with(data, free_port(), &["--network", "off", "--pool-size", "0"]).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(api.create(json!({"template": "minimal"})).await);
    }
    let (off, reboot, killed, healthy) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    // reboot(2) from inside the guest: the exec that makes the call never answers (its VM is
    // gone), so it is sent without waiting for it.
    for (id, how) in [(off, "0x4321FEDC"), (reboot, "0x01234567")] {
        // RB_POWER_OFF, RB_AUTOBOOT
        let req = api
            .c
            .post(format!("{}/v1/sandboxes/{id}/exec", server.url))
            .bearer_auth(&server.key)
            .timeout(Duration::from_secs(10))
            .json(&json!({
                "cmd": format!("python3 -c 'import ctypes; ctypes.CDLL(None).reboot({how})'")
            }));
        tokio::spawn(async move {
            let _ = req.send().await;
        });
    }
    let pid: i32 = std::fs::read_to_string(sandboxes.join(killed).join("qemu.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    for id in [off, reboot, killed] {
        within(Duration::from_secs(20), "the API reports the exit", async {
            loop {
                let (st, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
                assert_eq!(st, StatusCode::OK, "{v}");
                if v["state"] == "failed" {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        let refused = [
            (
                "POST",
                format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"cmd": "true"})),
            ),
            (
                "GET",
                format!("/v1/sandboxes/{id}/fs?path=/etc/hostname"),
                None,
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/snapshots"),
                Some(json!({})),
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/fork"),
                Some(json!({"count": 1})),
            ),
            ("POST", format!("/v1/sandboxes/{id}/hibernate"), None),
            ("POST", format!("/v1/sandboxes/{id}/wake"), None),
            ("POST", format!("/v1/sandboxes/{id}/pause"), None),
        ];
        for (method, path, body) in refused {
            let (st, v) = api.call(method, &path, body).await;
            assert_eq!(st, StatusCode::CONFLICT, "{method} {path}: {v}");
            assert_eq!(v["error"]["code"], "sandbox_state", "{method} {path}: {v}");
        }
        let (st, v) = api
            .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        let (st, _) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        assert!(!sandboxes.join(id).exists(), "{id}'s directory is gone");
    }
    // The healthy one is untouched and still the only one.
    assert_eq!(api.exec(healthy, "echo ok").await["stdout"], "ok\n");
    let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
    let listed: Vec<_> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(listed, vec![json!(healthy)]);
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{healthy}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert!(sandbox_dirs(&sandboxes).is_empty(), "no directory left");
    assert_eq!(processes_under(&sandboxes), 0, "no VM process left");
}
