//! The files API against what a hostile guest can put at a path: a 20 GiB sparse file, a FIFO,
//! `/dev/zero`, `/proc` files, symlinks into `/proc/1/root`, the guest agent's own binary.
//! Every request ends in bounded time, the server's memory stays bounded while it streams, and
//! nothing reaches past the guest (the API acts as root inside the guest, and only there).

mod common;

use std::time::Duration;

use common::{free_port, start_with, Api};
use futures::StreamExt;
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::json;

/// The server process's peak resident memory, KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_paths_are_bounded_and_stay_in_the_guest() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start_with(
        guard.dir.path(),
        free_port(),
        &["--network", "off", "--pool-size", "0"],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let out = api
        .exec(
            &id,
            "truncate -s 20G /root/sparse && mkfifo /root/fifo && \
             ln -s /proc/1/root/etc/hostname /root/to-proc && echo ok",
        )
        .await;
    assert_eq!(out["stdout"], "ok\n", "{out}");
    let fs = |path: &str| format!("{}/v1/sandboxes/{id}/fs?path={path}", server.url);
    let get = |path: &str| api.c.get(fs(path)).bearer_auth(&server.key).send();

    // Nothing to read to an end: refused before any byte, at once. And a file whose first read
    // fails (the agent's own memory: EIO at offset 0) is an answer too — it was a connection
    // closed with none (the malformed-requests fuzz test found it).
    for path in [
        "/dev/zero",
        "/root/fifo",
        "/root/to-proc",
        "/proc/1/root",
        "/proc/self/mem",
    ] {
        let r = get(path).await.unwrap();
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
        assert_eq!(body["error"]["code"], "invalid_argument", "{path}: {body}");
    }
    // /proc reports no size: some bytes, no promised length, bounded.
    let r = get("/proc/1/status").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("content-length").is_none());
    let body = r.bytes().await.unwrap();
    assert!(body.starts_with(b"Name:") && body.len() <= 1 << 20);

    // 20 GiB of holes stream lazily: the server holds a few chunks at a time, and a client that
    // leaves ends the read.
    let pid = server.child.id();
    let peak_before = peak_rss_kib(pid);
    let r = api
        .c
        .get(fs("/root/sparse"))
        .bearer_auth(&server.key)
        .timeout(Duration::from_secs(300))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.content_length(), Some(20 << 30));
    let mut stream = r.bytes_stream();
    let mut got = 0usize;
    while got < 256 << 20 {
        let chunk = stream.next().await.expect("more bytes").unwrap();
        assert!(chunk.iter().all(|&b| b == 0));
        got += chunk.len();
    }
    drop(stream);
    let grew_mib = peak_rss_kib(pid).saturating_sub(peak_before) / 1024;
    assert!(
        grew_mib < 96,
        "streaming 256 MiB raised the server's peak memory by {grew_mib} MiB"
    );

    let put = |path: &str, body: &'static str| {
        api.c
            .put(fs(path))
            .bearer_auth(&server.key)
            .body(body)
            .send()
    };
    // A write to a FIFO's path replaces the FIFO (atomically, by a new file).
    let r = put("/root/fifo", "now a file").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let body = get("/root/fifo").await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"now a file");
    // /proc takes no new files: a clear refusal, at once.
    let r = put("/proc/sys/kernel/hostname", "x").await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    // /proc/1/root is the guest's own root: a write through it lands in the guest.
    let r = put("/proc/1/root/tmp/through-proc", "inside")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let out = api.exec(&id, "cat /tmp/through-proc").await;
    assert_eq!(out["stdout"], "inside", "{out}");
    // Replacing the agent's binary on the guest's disk does not replace the running agent
    // (PID 1 keeps the program it started with; sandboxes restore, they never boot again).
    let r = put("/usr/local/sbin/pandastack-guest", "#!/bin/sh\nexit 1\n")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let out = api.exec(&id, "echo still-here").await;
    assert_eq!(out["stdout"], "still-here\n", "{out}");
    api.hibernate(&id).await;
    let out = api.exec(&id, "echo woken").await;
    assert_eq!(out["stdout"], "woken\n", "{out}");
    let (st, v) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert!(st.is_success(), "{v}");
}
