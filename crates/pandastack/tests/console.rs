//! A guest flooding its serial console cannot fill the host's disk: the server keeps each
//! sandbox's `console.log` near `--console-log-max-kb`, and `GET …/logs` returns the newest part.
//! The VM process's own log (`qemu.log`) stays near `--vm-log-max-kb`.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, start_with, Api};
use pandastack_testkit::{bake, runtime};
use reqwest::Client;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_flooded_console_stays_bounded_and_keeps_its_newest_part() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path().to_owned();
    let server = start_with(
        &data,
        free_port(),
        &[
            "--network",
            "off",
            "--console-log-max-kb",
            "64",
            "--vm-log-max-kb",
            "4",
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    // 1 MB (16 times the bound) to the serial console, then a marker.
    let v = api
        .exec(
            &id,
            "head -c 1000000 /dev/zero | tr '\\0' A > /dev/ttyS0; echo END-OF-FLOOD > /dev/ttyS0",
        )
        .await;
    assert_eq!(v["exit_code"], 0, "{v}");
    let log = data.join("sandboxes").join(&id).join("console.log");
    // The trimmer runs every second: within a few, the file is back under the bound.
    let t = Instant::now();
    let len = loop {
        let len = std::fs::metadata(&log).unwrap().len();
        if len <= 64 << 10 || t.elapsed() > Duration::from_secs(15) {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(len <= 64 << 10, "console.log is {len} bytes");
    let r = api
        .c
        .get(format!("{}/v1/sandboxes/{id}/logs", server.url))
        .bearer_auth(&server.key)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let text = r.text().await.unwrap();
    assert!(text.len() <= 64 << 10, "{} bytes of log", text.len());
    assert!(
        text.trim_end().ends_with("END-OF-FLOOD"),
        "the newest part is kept: …{:?}",
        &text[text.len().saturating_sub(80)..]
    );
    // The sandbox carries on.
    let v = api.exec(&id, "echo alive").await;
    assert_eq!(v["stdout"], "alive\n", "{v}");

    // The VM process's own log is bounded by the same trimmer. Since guests of a template no
    // longer report free pages (which made QEMU write a line per report), nothing a guest does
    // makes QEMU write much; the test appends to `qemu.log` itself as QEMU would (O_APPEND), 16
    // times `--vm-log-max-kb`.
    let qemu_log = data.join("sandboxes").join(&id).join("qemu.log");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&qemu_log)
            .unwrap();
        for i in 0..640 {
            writeln!(f, "qemu-test-line {i:05} {}", "q".repeat(80)).unwrap();
        }
    }
    let t = Instant::now();
    let len = loop {
        let len = std::fs::metadata(&qemu_log).unwrap().len();
        if len <= 4 << 10 || t.elapsed() > Duration::from_secs(15) {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(len <= 4 << 10, "qemu.log is {len} bytes");
    // It was over its bound (the trimmer counts what it cut), so the bound did the work.
    let cut = String::from_utf8(
        xattr_of(&qemu_log, "user.pandastack.trimmed").expect("qemu.log was trimmed"),
    )
    .unwrap();
    assert!(cut.parse::<u64>().unwrap() > 0, "{cut}");
    let v = api.exec(&id, "echo alive").await;
    assert_eq!(v["stdout"], "alive\n", "{v}");
}

/// An extended attribute of `path`, if it has one.
fn xattr_of(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    let n = rustix::fs::getxattr(path, name, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}
