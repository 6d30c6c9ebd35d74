//! Template builds through the API, end to end on a real server with real guests: an OCI
//! (`docker save`) tarball made here from the host's static busybox, its layers' whiteouts
//! applied, its `Env` given to sandboxes; versions (a rebuild serves new sandboxes, older ones keep
//! theirs); the build log (plain and followed); re-bake; delete; bad input refused with nothing
//! left behind; a spec build; another workspace sees none of it.

mod common;

use std::time::Duration;

use common::oci::docker_save;
use common::{cli, free_port, start, Api};
use pandastack_testkit::{runtime, within};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

async fn upload(api: &Api<'_>, key: &str, query: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let r = api
        .c
        .post(format!("{}/v1/templates?{query}", api.s.url))
        .bearer_auth(key)
        .header("content-type", "application/x-tar")
        .body(body)
        .send()
        .await
        .unwrap();
    let st = r.status();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// Polls the template until its newest build has finished; returns it.
async fn wait_built(api: &Api<'_>, name: &str) -> Value {
    within(Duration::from_secs(900), "template build", async {
        loop {
            let (st, v) = api
                .call("GET", &format!("/v1/templates/{name}"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            match v["state"].as_str().unwrap() {
                "queued" | "building" | "baking" => {}
                _ => return v,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
}

async fn sh(api: &Api<'_>, id: &str, cmd: &str) -> Value {
    let (st, v) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({ "argv": ["/bin/sh", "-c", cmd] })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn oci_tarball_builds_versions_and_deletes() {
    let guard = runtime().await;
    let data = guard.dir.path();
    let server = start(data, free_port()).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let key = server.key.clone();

    // Bad input: refused at the edge, nothing recorded.
    let (st, v) = upload(&api, &key, "name=Bad_Name", docker_save("x")).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = upload(&api, &key, "name=bb&memory_mb=64", docker_save("x")).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory_mb"),
        "{v}"
    );
    let (st, v) = upload(&api, &key, "name=bb", Vec::new()).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = api
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"spec": "name = \"s\"\n[debian]\nmirror = \"http://evil.example/\"\n"})),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`debian.mirror`"),
        "{v}"
    );
    let (_, v) = api.call("GET", "/v1/templates", None).await;
    assert!(v["data"].as_array().unwrap().is_empty(), "{v}");

    // A garbage tarball is accepted, fails, says why, and leaves only its log.
    let (st, v) = upload(&api, &key, "name=junk", b"not a tarball at all".repeat(100)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let v = wait_built(&api, "junk").await;
    assert_eq!(v["state"], "failed", "{v}");
    assert!(!v["error"].as_str().unwrap().is_empty(), "{v}");
    let (st, v) = api
        .call("POST", "/v1/sandboxes", Some(json!({"template": "junk"})))
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");

    // Version 1.
    let (st, v) = upload(
        &api,
        &key,
        "name=bb&description=busybox&memory_mb=256",
        docker_save("version one\n"),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["state"], "queued", "{v}");
    assert_eq!(v["version"], 1, "{v}");
    assert_eq!(v["source"], "oci", "{v}");
    // The log, followed: every line, then the end of the build.
    let r = api
        .c
        .get(format!("{}/v1/templates/bb/logs?follow=1", server.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let sse = within(Duration::from_secs(900), "followed build log", r.text())
        .await
        .unwrap();
    assert!(sse.contains("event: end"), "{sse}");
    assert!(sse.contains("\"reason\":\"ready\""), "{sse}");
    let v = wait_built(&api, "bb").await;
    assert_eq!(v["state"], "ready", "{v}");
    assert_eq!(v["ready_version"], 1, "{v}");
    assert_eq!(v["memory_mb"], 256, "{v}");
    assert!(v["bake_ms"].as_u64().unwrap() > 0, "{v}");
    // The disk is sized from the unpacked tree (at least 256 MiB), and recorded.
    assert!(v["disk_mb"].as_u64().unwrap() >= 256, "{v}");
    let (st, log) = api.call("GET", "/v1/templates/bb/logs", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(log.as_str().unwrap().contains("ready"), "{log}");

    // A sandbox of it: the layers as the image says, the image's environment.
    let old = api.create(json!({"template": "bb"})).await;
    let (_, sb) = api.call("GET", &format!("/v1/sandboxes/{old}"), None).await;
    let baked_v1 = sb["template"].as_str().unwrap().to_owned();
    assert!(baked_v1.starts_with("bb-v1-"), "{sb}");
    assert_eq!(sb["memory_mb"], 256, "{sb}");
    let r = sh(
        &api,
        &old,
        "cat /data/keep /data/marker; ls /data; stat -c '%u %a' /data/marker; echo \"$GREETING\"",
    )
    .await;
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(
        r["stdout"], "from layer one\nversion one\nkeep\nmarker\n1000 600\nhello from the image\n",
        "{r}"
    );

    // Another build in flight blocks a third; version 2 serves new sandboxes, the old keeps v1.
    let (st, v) = upload(&api, &key, "name=bb", docker_save("version two\n")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["version"], 2, "{v}");
    let (st, v) = upload(&api, &key, "name=bb", docker_save("three\n")).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let v = wait_built(&api, "bb").await;
    assert_eq!(v["state"], "ready", "{v}");
    assert_eq!(v["ready_version"], 2, "{v}");
    let new = api.create(json!({"template": "bb"})).await;
    assert_eq!(
        sh(&api, &new, "cat /data/marker").await["stdout"],
        "version two\n"
    );
    assert_eq!(
        sh(&api, &old, "cat /data/marker").await["stdout"],
        "version one\n"
    );

    // Re-bake: a new bake of version 2, still serving.
    let (st, v) = api.call("POST", "/v1/templates/bb/bake", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "ready", "{v}");
    let again = api.create(json!({"template": "bb"})).await;
    assert_eq!(
        sh(&api, &again, "cat /data/marker").await["stdout"],
        "version two\n"
    );

    // Another workspace sees none of it, not even by the host name of a version.
    let (ok, out, err) = cli(
        &["keys", "create", "--new-workspace", "other", "--json"],
        data,
    );
    assert!(ok, "{err}");
    let other: Value = serde_json::from_str(&out).unwrap();
    let key2 = other["secret"].as_str().unwrap();
    let (st, _) = api.call_as(key2, "GET", "/v1/templates/bb", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    for t in ["bb", baked_v1.as_str()] {
        let (st, v) = api
            .call_as(key2, "POST", "/v1/sandboxes", Some(json!({"template": t})))
            .await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{t}: {v}");
    }
    let (st, v) = api.call_as(key2, "DELETE", "/v1/templates/bb", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");

    // Delete: gone for new sandboxes, its files gone, running sandboxes unaffected.
    let (st, v) = api.call("DELETE", "/v1/templates/bb", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, _) = api
        .call("POST", "/v1/sandboxes", Some(json!({"template": "bb"})))
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(
        sh(&api, &old, "cat /data/keep").await["stdout"],
        "from layer one\n"
    );
    let (st, _) = api.call("DELETE", "/v1/templates/junk", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let leftovers: Vec<_> = std::fs::read_dir(data.join("builds"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let baked: Vec<String> = std::fs::read_dir(data.join("templates"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bb-"))
        .collect();
    assert!(baked.is_empty(), "{baked:?}");
    let (st, _) = api.call("DELETE", "/v1/templates/minimal", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    for id in [old, new, again] {
        let (st, _) = api
            .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn spec_builds_debian_packages_and_files() {
    let guard = runtime().await;
    let server = start(guard.dir.path(), free_port()).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let spec = r#"
name = "from-spec"
description = "minbase and one file"
setup = [
  "useradd --create-home builder",
  "echo \"built in $(hostname) as $(id -un)\" > /etc/built-in-vm",
]

[debian]
packages = ["procps"]

[[files]]
dest = "/etc/from-spec.txt"
content = "written by the spec\n"
mode = "0640"

[vm]
memory_mb = 256
disk_mb = 1024
"#;
    // The request's name must match the spec's.
    let (st, v) = api
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "other", "spec": spec})),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = api
        .call("POST", "/v1/templates", Some(json!({ "spec": spec })))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["source"], "spec", "{v}");
    assert_eq!(v["memory_mb"], 256, "{v}");
    let v = wait_built(&api, "from-spec").await;
    assert_eq!(v["state"], "ready", "{v}");
    let (_, log) = api.call("GET", "/v1/templates/from-spec/logs", None).await;
    let log = log.as_str().unwrap().to_owned();
    assert!(log.contains("builder VM"), "{log}");
    assert!(log.contains("step: setup[0]"), "{log}");
    assert!(log.contains("baked"), "{log}");
    let id = api.create(json!({"template": "from-spec"})).await;
    let r = sh(
        &api,
        &id,
        "cat /etc/from-spec.txt; stat -c '%a' /etc/from-spec.txt; command -v ps; \
         cat /etc/built-in-vm; id -u builder >/dev/null && echo has-builder",
    )
    .await;
    // The setup commands ran in the builder VM (named after the build), not on the host.
    let out = r["stdout"].as_str().unwrap();
    let (head, tail) = out
        .split_once("built in from-spec-v1-")
        .expect("builder VM hostname");
    assert_eq!(head, "written by the spec\n640\n/usr/bin/ps\n", "{r}");
    assert!(tail.ends_with("-s as root\nhas-builder\n"), "{r}");
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = api.call("DELETE", "/v1/templates/from-spec", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);

    // A failing step fails the build, names the step, and leaves no builder VM or template.
    let bad = spec
        .replace("from-spec", "bad-step")
        .replace("useradd --create-home builder", "exit 3");
    let (st, v) = api
        .call("POST", "/v1/templates", Some(json!({ "spec": bad })))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let v = wait_built(&api, "bad-step").await;
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["error"].as_str().unwrap().contains("setup[0]"), "{v}");
    let leftovers: Vec<String> = ["templates", "sandboxes"]
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(guard.dir.path().join(d))
                .unwrap()
                .flatten()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("bad-step") || n.starts_with("from-spec"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A build is a durable job: the server killed (`kill -9`) in the middle of it runs it again
/// from the start after a restart, and the template becomes ready.
#[tokio::test(flavor = "multi_thread")]
async fn a_build_cut_off_by_a_server_kill_runs_again_after_restart() {
    let guard = runtime().await;
    let data = guard.dir.path();
    let port = free_port();
    let mut server = start(data, port).await;
    let key = server.key.clone();
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let (st, v) = upload(&api, &key, "name=durable", docker_save("built twice\n")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    // Kill it once the build is under way (building or baking), before it is ready.
    let seen = within(Duration::from_secs(300), "build under way", async {
        loop {
            let (_, v) = api.call("GET", "/v1/templates/durable", None).await;
            let state = v["state"].as_str().unwrap_or_default().to_owned();
            if state == "building" || state == "baking" {
                return state;
            }
            assert_eq!(state, "queued", "{v}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    drop(api);
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    drop(server);

    let server = start(data, port).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let v = wait_built(&api, "durable").await;
    assert_eq!(v["state"], "ready", "killed while {seen}: {v}");
    assert_eq!(v["version"], 1, "{v}");
    let (st, log) = api.call("GET", "/v1/templates/durable/logs", None).await;
    assert_eq!(st, StatusCode::OK);
    let log = log
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| log.to_string());
    assert_eq!(
        log.matches(": queued").count(),
        2,
        "two attempts in the log: {log}"
    );
    let id = api.create(json!({"template": "durable"})).await;
    assert_eq!(
        sh(&api, &id, "cat /data/marker").await["stdout"],
        "built twice\n"
    );
}
