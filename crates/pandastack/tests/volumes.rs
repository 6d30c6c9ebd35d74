//! Durable volumes through the real server and real guests: create/grow/delete with their
//! errors, mounts at create (read-write: one holder; read-only: copies), data that outlives
//! its sandbox and a restart, volume snapshots, backups to the object store (incremental) and
//! restores from them — also by another host after the first one's data directory is gone.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::{runtime, within};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Bakes `minimal` with two volume slots in `rt`'s data directory (the servers of these tests
/// find no spec to bake it again from).
async fn bake_with_slots(rt: &pandastack_testkit::RuntimeGuard) {
    pandastack_testkit::bake_with_slots(rt, "minimal", 2).await;
}

fn api(s: &Server) -> Api<'_> {
    Api {
        s,
        c: Client::new(),
    }
}

/// Runs `cmd` and returns (exit code, stdout).
async fn sh(api: &Api<'_>, id: &str, cmd: &str) -> (i64, String) {
    let v = api.exec(id, cmd).await;
    (
        v["exit_code"].as_i64().unwrap(),
        v["stdout"].as_str().unwrap_or_default().to_owned(),
    )
}

/// `kill -9` of a server's process (the fixture's drop then reaps it).
fn kill9(s: &Server) {
    let st = std::process::Command::new("kill")
        .args(["-9", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

/// Waits for a backup to end and returns it (asserting it is `done`).
async fn finished_backup(api: &Api<'_>, volume: &str, id: &str) -> Value {
    within(Duration::from_secs(120), "backup done", async {
        loop {
            let (st, b) = api
                .call("GET", &format!("/v1/volumes/{volume}/backups/{id}"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{b}");
            match b["state"].as_str().unwrap() {
                "uploading" => tokio::time::sleep(Duration::from_millis(200)).await,
                "done" => return b,
                other => panic!("backup {other}: {b}"),
            }
        }
    })
    .await
}

async fn sandbox_count(api: &Api<'_>) -> usize {
    let (st, v) = api.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK);
    v["data"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_outlive_their_sandboxes() {
    let guard = runtime().await;
    bake_with_slots(&guard).await;
    let data = guard.dir.path();
    let args = ["--network", "off", "--max-volume-gb", "5"];
    let server = start_with(data, free_port(), &args).await;
    let a = api(&server);

    // Bad input: named fields, nothing written.
    for (body, field) in [
        (json!({"name": "Bad_Name", "size_gb": 1}), "name"),
        (json!({"name": "work"}), "size_gb"),
        (json!({"name": "work", "size_gb": 0}), "size_gb"),
        (
            json!({"name": "work", "size_gb": 1, "from_snapshot": "vs-1", "from_backup": "vb-1"}),
            "from_backup",
        ),
    ] {
        let (st, v) = a.call("POST", "/v1/volumes", Some(body)).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(field),
            "{v}"
        );
    }
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "big", "size_gb": 6})),
        )
        .await;
    assert_eq!((st.as_u16(), code(&v)), (507, "quota_exceeded"), "{v}");
    let (_, v) = a.call("GET", "/v1/volumes", None).await;
    assert_eq!(v["data"], json!([]), "failed creates left rows");
    assert_eq!(
        std::fs::read_dir(data.join("volumes")).unwrap().count(),
        0,
        "failed creates left files"
    );

    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "work", "size_gb": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        (v["size_gb"].as_u64(), &v["attached_to"]),
        (Some(1), &Value::Null)
    );
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "work", "size_gb": 1})),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");

    // Mounted at create, owned by the given path's user (root here), written, then the sandbox
    // goes and the data stays.
    let mounts = json!([{"name": "work", "path": "/workspace"}]);
    let (st, first) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": mounts})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{first}");
    let first_id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(
        first["volumes"],
        json!([{"name": "work", "path": "/workspace", "read_only": false}])
    );
    let (c, out) = sh(&a, &first_id, "echo kept > /workspace/note && sync && cat /workspace/note && grep -c ' /workspace ext4 rw' /proc/mounts").await;
    assert_eq!((c, out.as_str()), (0, "kept\n1\n"));
    let (_, v) = a.call("GET", "/v1/volumes/work", None).await;
    assert_eq!(v["attached_to"], json!(first_id));

    // A second read-write holder, a missing volume, too many volumes: refused before any VM.
    let before = sandbox_count(&a).await;
    let (st, v) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": mounts})),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "volume_busy"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(&first_id),
        "{v}"
    );
    let (st, v) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": [{"name": "nope", "path": "/x"}]})),
        )
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, "volume_not_found"),
        "{v}"
    );
    let (st, v) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": [{"name": "work", "path": "/"}]})),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(
        sandbox_count(&a).await,
        before,
        "a refused create left a sandbox"
    );
    let (st, v) = a.call("DELETE", "/v1/volumes/work", None).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "volume_busy"), "{v}");
    let (st, v) = a
        .call("PATCH", "/v1/volumes/work", Some(json!({"size_gb": 2})))
        .await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "volume_busy"), "{v}");

    // Read-only: a copy as of the create, while the holder keeps writing.
    let ro = json!([{"name": "work", "path": "/ro", "read_only": true}]);
    let (st, reader) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": ro})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{reader}");
    let reader_id = reader["id"].as_str().unwrap().to_owned();
    sh(&a, &first_id, "echo later > /workspace/later && sync").await;
    let (c, out) = sh(
        &a,
        &reader_id,
        "cat /ro/note; ls /ro/later 2>/dev/null; touch /ro/x 2>/dev/null || echo refused",
    )
    .await;
    assert_eq!((c, out.as_str()), (0, "kept\nrefused\n"));

    // A snapshot of the volume in use: its file system frozen for the copy.
    let (st, snap) = a.call("POST", "/v1/volumes/work/snapshots", None).await;
    assert_eq!(st, StatusCode::CREATED, "{snap}");
    assert_eq!(snap["frozen"], json!(true), "{snap}");
    let snap_id = snap["id"].as_str().unwrap().to_owned();
    sh(
        &a,
        &first_id,
        "echo after-snapshot > /workspace/after && sync",
    )
    .await;

    for id in [&first_id, &reader_id] {
        let (st, _) = a.call("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
    let (_, v) = a.call("GET", "/v1/volumes/work", None).await;
    assert_eq!(
        (&v["attached_to"], &v["attachments"]),
        (&Value::Null, &json!([])),
        "{v}"
    );
    let (st, v) = a
        .call("PATCH", "/v1/volumes/work", Some(json!({"size_gb": 2})))
        .await;
    assert_eq!(
        (st, v["size_gb"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{v}"
    );
    let (st, v) = a
        .call("PATCH", "/v1/volumes/work", Some(json!({"size_gb": 1})))
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");

    // The next sandbox finds the work, on the grown file system.
    let (st, second) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": mounts})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{second}");
    let second_id = second["id"].as_str().unwrap().to_owned();
    let (_, out) = sh(&a, &second_id, "cat /workspace/note /workspace/later /workspace/after; df -m /workspace | awk 'NR==2 {print ($2 > 1500)}'").await;
    assert_eq!(out, "kept\nlater\nafter-snapshot\n1\n");

    // A volume from the snapshot has what was there at the snapshot.
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "from-snap", "from_snapshot": snap_id})),
        )
        .await;
    assert_eq!(
        (st, v["size_gb"].as_u64()),
        (StatusCode::CREATED, Some(1)),
        "{v}"
    );
    let (_, listed) = a.call("GET", "/v1/volumes/work/snapshots", None).await;
    assert_eq!(listed["data"][0]["id"], json!(snap_id));

    // Backups: the first sends the data, the second only what changed.
    let (st, b1) = a.call("POST", "/v1/volumes/work/backups", None).await;
    assert_eq!(
        (st, b1["state"].as_str()),
        (StatusCode::ACCEPTED, Some("uploading")),
        "{b1}"
    );
    let b1 = finished_backup(&a, "work", b1["id"].as_str().unwrap()).await;
    assert!(b1["bytes_uploaded"].as_u64().unwrap() > 0, "{b1}");
    sh(
        &a,
        &second_id,
        "head -c 10485760 /dev/urandom > /workspace/ten && sync",
    )
    .await;
    let (_, b2) = a.call("POST", "/v1/volumes/work/backups", None).await;
    let b2 = finished_backup(&a, "work", b2["id"].as_str().unwrap()).await;
    let sent = b2["bytes_uploaded"].as_u64().unwrap();
    assert!(
        (10 << 20..=(20 << 20) + (4 << 20)).contains(&sent),
        "an incremental backup after 10 MiB of changes sent {sent} bytes: {b2}"
    );
    let (_, all) = a.call("GET", "/v1/volumes/work/backups", None).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 2, "{all}");

    // Restored into a new volume: the file of the second backup is there.
    let b2_id = b2["id"].as_str().unwrap();
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "restored", "from_backup": b2_id})),
        )
        .await;
    assert_eq!(
        (st, v["source"].as_str()),
        (StatusCode::CREATED, Some(b2_id)),
        "{v}"
    );
    let (st, check) = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "minimal", "volumes": [
            {"name": "restored", "path": "/r"}, {"name": "from-snap", "path": "/s"}]})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{check}");
    let check_id = check["id"].as_str().unwrap().to_owned();
    let (_, out) = sh(
        &a,
        &check_id,
        "cat /r/note; wc -c < /r/ten; cat /s/note; ls /s",
    )
    .await;
    assert_eq!(out, "kept\n10485760\nkept\nlater\nlost+found\nnote\n");

    // A restart: volumes, mounts and the data are still there.
    kill9(&server);
    drop(a);
    drop(server);
    let server = start_with(data, free_port(), &args).await;
    let a = api(&server);
    let (_, v) = a.call("GET", "/v1/volumes/work", None).await;
    assert_eq!(v["attached_to"], json!(second_id), "{v}");
    let (_, out) = sh(&a, &second_id, "cat /workspace/note").await;
    assert_eq!(out, "kept\n");
    let (st, _) = a
        .call("DELETE", &format!("/v1/sandboxes/{second_id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = a.call("DELETE", "/v1/volumes/work", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = a.call("GET", "/v1/volumes/work", None).await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "volume_not_found"));
    // The backups outlive the volume.
    let (_, all) = a.call("GET", "/v1/volumes/work/backups", None).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 2, "{all}");
}

/// Removes every volume backup row from the state database (as if it had been lost), so only
/// the object store knows the backups.
fn forget_backup_rows(state: &Path) {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('DELETE FROM volume_backups'); c.commit()")
        .arg(state)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A backup is restored by another host after the first host's data directory is gone (and
/// the database has no row of it): the object store (S3 on loopback in CI, else a directory)
/// is all it needs.
#[tokio::test(flavor = "multi_thread")]
async fn backups_restore_on_another_host_after_its_data_is_gone() {
    let first = runtime().await;
    bake_with_slots(&first).await;
    let shared = tempfile::tempdir().unwrap();
    let state = shared.path().join("state.db");
    let objects = match std::env::var("PANDASTACK_TEST_S3") {
        Ok(url) => format!(
            "{}/volumes-{:08x}",
            url.trim_end_matches('/'),
            rand::random::<u32>()
        ),
        Err(_) => format!("file://{}", shared.path().join("objects").display()),
    };
    let state_arg = state.to_str().unwrap().to_owned();
    let args = |host: &'static str| {
        vec![
            "--network".to_owned(),
            "off".into(),
            "--state".into(),
            state_arg.clone(),
            "--objects".into(),
            objects.clone(),
            "--host-id".into(),
            host.into(),
        ]
    };
    let first_args = args("host-one");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let server = start_with(first.dir.path(), free_port(), &first_args).await;
    let key = server.key.clone();
    let a = api(&server);
    let (st, _) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "data", "size_gb": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let sb = a
        .create(json!({"template": "minimal", "volumes": [{"name": "data", "path": "/data"}]}))
        .await;
    sh(&a, &sb, "seq 1 100000 > /data/numbers && sync").await;
    let (_, b) = a.call("POST", "/v1/volumes/data/backups", None).await;
    let b = finished_backup(&a, "data", b["id"].as_str().unwrap()).await;
    let backup_id = b["id"].as_str().unwrap().to_owned();
    kill9(&server);
    drop(a);
    drop(server);
    // The first host is gone with everything on it.
    let first_dir = first.dir.path().to_owned();
    drop(first);
    assert!(!first_dir.exists());
    forget_backup_rows(&state);

    let second = runtime().await;
    bake_with_slots(&second).await;
    // Same database, same workspace and key (written by the first start only).
    std::fs::write(second.dir.path().join("key"), &key).unwrap();
    let second_args = args("host-two");
    let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let server = start_with(second.dir.path(), free_port(), &second_args).await;
    let a = Api {
        s: &server,
        c: Client::new(),
    };
    let (_, all) = a.call("GET", "/v1/volumes/data/backups", None).await;
    assert_eq!(all["data"][0]["id"], json!(backup_id), "{all}");
    assert_eq!(all["data"][0]["state"], json!("done"), "{all}");
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "data-again", "from_backup": backup_id})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let sb = a
        .create(
            json!({"template": "minimal", "volumes": [{"name": "data-again", "path": "/data"}]}),
        )
        .await;
    let (_, out) = sh(&a, &sb, "tail -n 1 /data/numbers; wc -l < /data/numbers").await;
    assert_eq!(out, "100000\n100000\n");
}

/// Chunk files in a `file://` object store.
fn chunk_files(objects: &Path) -> usize {
    fn walk(p: &Path, n: &mut usize) {
        if let Ok(d) = std::fs::read_dir(p) {
            for e in d.flatten() {
                let path = e.path();
                if path.is_dir() {
                    walk(&path, n);
                } else if path.components().any(|c| c.as_os_str() == "chunks") {
                    *n += 1;
                }
            }
        }
    }
    let mut n = 0;
    walk(objects, &mut n);
    n
}

/// `kill -9` of the server in the middle of a backup's upload and of a create that mounts a
/// volume: after a restart the backup finishes by sending only what was missing, the volume
/// has no mount left by the cut-off create, and nothing of that create is left.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_a_backup_and_a_create_with_a_volume() {
    let guard = runtime().await;
    bake_with_slots(&guard).await;
    let data = guard.dir.path();
    let objects = data.join("objects");
    let args = ["--network", "off", "--pool-size", "0"];
    let server = start_with(data, free_port(), &args).await;
    let a = api(&server);
    a.call(
        "POST",
        "/v1/volumes",
        Some(json!({"name": "big", "size_gb": 1})),
    )
    .await;
    let sb = a
        .create(json!({"template": "minimal", "volumes": [{"name": "big", "path": "/big"}]}))
        .await;
    sh(
        &a,
        &sb,
        "head -c 314572800 /dev/urandom > /big/random && sync",
    )
    .await;
    let (st, b) = a.call("POST", "/v1/volumes/big/backups", None).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let backup = b["id"].as_str().unwrap().to_owned();
    within(Duration::from_secs(60), "upload under way", async {
        while chunk_files(&objects) < 10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    kill9(&server);
    drop(a);
    drop(server);
    let partial = chunk_files(&objects);

    let server = start_with(data, free_port(), &args).await;
    let a = api(&server);
    let done = finished_backup(&a, "big", &backup).await;
    let sent = done["bytes_uploaded"].as_u64().unwrap();
    let total = done["chunks"].as_u64().unwrap();
    assert!(
        total > partial as u64,
        "the upload was cut before it ended ({partial} of {total} chunks)"
    );
    assert!(
        sent < 300 << 20,
        "the retried upload sent {sent} bytes: the chunks stored before the kill were sent again"
    );
    // No object is half-written: every stored chunk reads back whole (restore verifies each).
    let (st, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "big-again", "from_backup": backup})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    // A create with a volume cut off by a kill: no mount survives it.
    let (st, _) = a.call("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (url, key) = (server.url.clone(), server.key.clone());
    let create = tokio::spawn(async move {
        Client::new()
            .post(format!("{url}/v1/sandboxes"))
            .bearer_auth(key)
            .json(&json!({"template": "minimal", "volumes": [{"name": "big", "path": "/big"}]}))
            .send()
            .await
    });
    let sandboxes = data.join("sandboxes");
    within(Duration::from_secs(30), "create starts its VM", async {
        loop {
            let started = std::fs::read_dir(&sandboxes).unwrap().flatten().any(|e| {
                !e.file_name().to_string_lossy().starts_with('.')
                    && e.path().join("qemu.pid").is_file()
            });
            if started {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    kill9(&server);
    let _ = create.await;
    drop(a);
    drop(server);
    let server = start_with(data, free_port(), &args).await;
    let a = api(&server);
    let (_, v) = a.call("GET", "/v1/volumes/big", None).await;
    assert_eq!(
        v["attachments"],
        json!([]),
        "a cut-off create left a mount: {v}"
    );
    assert_eq!(sandbox_count(&a).await, 0);
    let sb = a
        .create(json!({"template": "minimal", "volumes": [{"name": "big", "path": "/big"}]}))
        .await;
    let (_, out) = sh(&a, &sb, "wc -c < /big/random").await;
    assert_eq!(out, "314572800\n");
}
