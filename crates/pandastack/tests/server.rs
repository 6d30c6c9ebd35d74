//! `pandastack server` end to end: the real binary, real HTTP, real guests under QEMU. One
//! sandbox's life in named steps ([`common::step`]): a failure names the behaviour, and the
//! steps share the server start and the guests a test of their own each would boot again. The
//! refusals that need no VM (auth, a bad create, a body over the limit, an unknown sandbox, a
//! fork of too many) are fast tests in `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.

mod common;

use common::{free_port, start, step, Api};
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_lifecycle_over_http() {
    // The data dir starts with a baked `minimal` template (baking from specs is covered by the
    // image and runtime tests; here it would only cost time).
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path().to_owned();
    let port = free_port();
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    let id = step(
        "a create with an Idempotency-Key makes one sandbox",
        async {
            let body = json!({"template": "minimal", "metadata": {"task": "e2e"}});
            let r = api
                .c
                .post(format!("{}/v1/sandboxes", server.url))
                .bearer_auth(&server.key)
                .header("Idempotency-Key", "create-1")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::CREATED);
            let sb: Value = r.json().await.unwrap();
            let id = sb["id"].as_str().unwrap().to_owned();
            assert_eq!(sb["state"], "running");
            let again: Value = api
                .c
                .post(format!("{}/v1/sandboxes", server.url))
                .bearer_auth(&server.key)
                .header("Idempotency-Key", "create-1")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                again["id"], sb["id"],
                "idempotent create made a second sandbox"
            );
            id
        },
    )
    .await;

    step("exec: output and exit codes are data", async {
        let v = api.exec(&id, "echo hi; echo err >&2; exit 3").await;
        assert_eq!(
            (
                v["stdout"].as_str(),
                v["stderr"].as_str(),
                v["exit_code"].as_i64()
            ),
            (Some("hi\n"), Some("err\n"), Some(3))
        );
        let (st, v) = api
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"argv": ["/no/such/binary"]})),
            )
            .await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(v["exit_code"], 127);
    })
    .await;

    step(
        "files: a binary round trip, listing, path confinement, the root not renamed",
        async {
            let mut blob = vec![0u8; 1 << 20];
            rand::fill(&mut blob[..]);
            let r = api
                .c
                .put(format!(
                    "{}/v1/sandboxes/{id}/fs?path=/root/blob.bin",
                    server.url
                ))
                .bearer_auth(&server.key)
                .body(blob.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let got = api
                .c
                .get(format!(
                    "{}/v1/sandboxes/{id}/fs?path=/root/blob.bin",
                    server.url
                ))
                .bearer_auth(&server.key)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert!(got[..] == blob[..], "file round trip differs");
            let (st, _) = api
                .call(
                    "GET",
                    &format!("/v1/sandboxes/{id}/fs?path=/tmp/../etc/shadow"),
                    None,
                )
                .await;
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
            let (st, v) = api
                .call(
                    "GET",
                    &format!("/v1/sandboxes/{id}/fs/list?path=/root"),
                    None,
                )
                .await;
            assert_eq!(st, StatusCode::OK);
            assert!(v["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == "blob.bin"));
            // Renaming the root (a mount point: EXDEV in the guest) is the caller's error, not
            // a 500.
            let (st, v) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{id}/fs/rename"),
                    Some(json!({"from": "/", "to": "/tmp/x"})),
                )
                .await;
            assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
            assert_eq!(v["error"]["code"], "invalid_argument");
        },
    )
    .await;

    step("the list filters by metadata", async {
        let (_, v) = api
            .call("GET", "/v1/sandboxes?metadata.task=e2e", None)
            .await;
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        let (_, v) = api
            .call("GET", "/v1/sandboxes?metadata.task=other", None)
            .await;
        assert!(v["data"].as_array().unwrap().is_empty());
    })
    .await;

    step(
        "hibernate keeps memory (/dev/shm) and an exec wakes the sandbox",
        async {
            api.exec(&id, "echo kept > /dev/shm/state").await;
            let (st, v) = api
                .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["state"], "hibernated");
            let v = api.exec(&id, "cat /dev/shm/state").await;
            assert_eq!(v["stdout"], "kept\n");
            let (_, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
            assert_eq!(v["state"], "running");
        },
    )
    .await;

    let kids = step("fork: children see the parent's memory", async {
        let (st, v) = api
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/fork"),
                Some(json!({"count": 2})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        let kids: Vec<String> = v["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(kids.len(), 2);
        for k in &kids {
            assert_eq!(api.exec(k, "cat /dev/shm/state").await["stdout"], "kept\n");
        }
        kids
    })
    .await;

    // A retried fork with the same Idempotency-Key replays the first answer (no new child);
    // the same key with another request is a conflict.
    step(
        "a retried fork with its Idempotency-Key replays; another body with the key conflicts",
        async {
            let fork_with_key = |count: u32| {
                api.c
                    .post(format!("{}/v1/sandboxes/{id}/fork", server.url))
                    .bearer_auth(&server.key)
                    .header("Idempotency-Key", "fork-1")
                    .json(&json!({ "count": count }))
                    .send()
            };
            let first: Value = fork_with_key(1).await.unwrap().json().await.unwrap();
            let again = fork_with_key(1).await.unwrap();
            assert_eq!(again.status(), StatusCode::CREATED);
            let again: Value = again.json().await.unwrap();
            assert_eq!(first["children"][0]["id"], again["children"][0]["id"]);
            assert_eq!(
                fork_with_key(2).await.unwrap().status(),
                StatusCode::CONFLICT
            );
            let child = first["children"][0]["id"].as_str().unwrap().to_owned();
            let (st, _) = api
                .call("DELETE", &format!("/v1/sandboxes/{child}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        },
    )
    .await;

    let from_snap = step(
        "a sandbox from a snapshot has the memory it was taken with",
        async {
            let (st, snap) = api
                .call("POST", &format!("/v1/sandboxes/{id}/snapshots"), None)
                .await;
            assert_eq!(st, StatusCode::CREATED, "{snap}");
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/sandboxes",
                    Some(json!({"snapshot_id": snap["id"]})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            let from_snap = v["id"].as_str().unwrap().to_owned();
            assert_eq!(
                api.exec(&from_snap, "cat /dev/shm/state").await["stdout"],
                "kept\n"
            );
            from_snap
        },
    )
    .await;

    // The server restarts (graceful, then kill -9): sandboxes keep running and are re-attached.
    drop(api);
    let mut server = server;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = server.child.wait();
    drop(server);
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    step(
        "after a graceful server restart a sandbox runs on, memory kept",
        async {
            assert_eq!(
                api.exec(&id, "cat /dev/shm/state").await["stdout"],
                "kept\n"
            );
        },
    )
    .await;
    drop(api);
    let mut server = server;
    server.child.kill().unwrap();
    let _ = server.child.wait();
    drop(server);
    let server = start(&data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    step(
        "after a kill -9 of the server every sandbox is re-attached",
        async {
            let (_, v) = api.call("GET", "/v1/sandboxes", None).await;
            assert_eq!(v["data"].as_array().unwrap().len(), 4, "{v}");
            assert_eq!(
                api.exec(&kids[0], "hostname").await["stdout"],
                format!("{}\n", kids[0])
            );
        },
    )
    .await;

    step("deletes leave nothing behind", async {
        for sb in [&id, &kids[0], &kids[1], &from_snap] {
            let (st, _) = api
                .call("DELETE", &format!("/v1/sandboxes/{sb}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        }
        let (st, _) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        let left: Vec<_> = std::fs::read_dir(data.join("sandboxes"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".pool-"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    })
    .await;
}
