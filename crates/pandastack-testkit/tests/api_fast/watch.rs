//! `GET …/files/watch`: a directory's changes made by a command in the sandbox come as Server-
//! Sent Events (creates at every depth, a modify, a rename, a delete); the watch survives a
//! hibernation by arming itself again once the sandbox runs; it ends with an error when the
//! sandbox is deleted; a path that is not a directory is the caller's error.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{call, create};

/// The events of one watch's SSE body, as `(event name, data)`.
struct Events {
    body: Body,
    buf: String,
}

impl Events {
    async fn open(s: &FakeStack, id: &str, path: &str, recursive: bool) -> Events {
        let req = Request::builder()
            .uri(format!(
                "/v1/sandboxes/{id}/files/watch?path={path}&recursive={recursive}"
            ))
            .header("authorization", format!("Bearer {}", s.key))
            .body(Body::empty())
            .unwrap();
        let resp = s.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Events {
            body: resp.into_body(),
            buf: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped); `None` when the stream ended.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut name, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if name.is_empty() {
                    continue;
                }
                return Some((name, serde_json::from_str(&data).unwrap()));
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("an event within 10 s");
            match frame {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
                _ => return None,
            }
        }
    }

    /// Events until one named `name` for `path` came (that one included).
    async fn until(&mut self, name: &str, path: &str) -> Vec<(String, Value)> {
        let mut got = Vec::new();
        loop {
            let ev = self
                .next()
                .await
                .unwrap_or_else(|| panic!("ended: {got:?}"));
            let done = ev.0 == name && ev.1["path"] == path;
            got.push(ev);
            if done {
                return got;
            }
        }
    }
}

async fn exec(s: &FakeStack, id: &str, cmd: &str) {
    let (st, v) = call(
        s,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({ "cmd": cmd })),
    )
    .await;
    assert_eq!((st, &v["exit_code"]), (StatusCode::OK, &json!(0)), "{v}");
}

fn has(events: &[(String, Value)], name: &str, path: &str) -> bool {
    events.iter().any(|(n, v)| n == name && v["path"] == path)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_tells_what_a_command_changes_and_outlives_a_hibernation() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    // The fake VM's guest agent runs on this host: it sees the test's own directory.
    let root = s.dir.path().join("watched");
    std::fs::create_dir(&root).unwrap();
    let r = root.to_string_lossy().into_owned();

    let mut w = Events::open(&s, &id, &r, true).await;
    let (name, data) = w.next().await.unwrap();
    assert_eq!(
        (name.as_str(), &data),
        (
            "ready",
            &json!({"type": "ready", "path": r, "recursive": true})
        )
    );

    exec(&s, &id, &format!("mkdir -p {r}/a/b")).await;
    // `b` is made before the watcher could watch `a`: found by its scan of `a`. Once told,
    // both are watched (a rename inside a directory not yet watched would look like a create).
    let got = w.until("create", &format!("{r}/a/b")).await;
    assert!(has(&got, "create", &format!("{r}/a")), "{got:?}");
    exec(
        &s,
        &id,
        &format!("cd {r} && echo one > a/b/f && mv a/b/f a/b/g && rm a/b/g"),
    )
    .await;
    let got = w.until("delete", &format!("{r}/a/b/g")).await;
    assert!(has(&got, "create", &format!("{r}/a/b/f")), "{got:?}");
    assert!(has(&got, "modify", &format!("{r}/a/b/f")), "{got:?}");
    let renamed = got.iter().find(|(n, _)| n == "rename").expect("a rename");
    assert_eq!(
        renamed.1,
        json!({"type": "rename", "path": format!("{r}/a/b/g"), "from": format!("{r}/a/b/f"), "dir": false})
    );
    assert_eq!(got.last().unwrap().1["dir"], false);

    // Hibernated: the watch waits, and arms itself again once a call wakes the sandbox.
    let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    exec(&s, &id, "true").await;
    let (name, _) = w.next().await.unwrap();
    assert_eq!(name, "ready", "armed again after the wake");
    exec(&s, &id, &format!("touch {r}/after-wake")).await;
    let got = w.until("create", &format!("{r}/after-wake")).await;
    assert_eq!(got.len(), 1, "{got:?}");

    // The watched directory removed: the watch ends with the guest's `not_found`.
    let sub = s.dir.path().join("watched/a");
    let sub = sub.to_string_lossy().into_owned();
    let mut w2 = Events::open(&s, &id, &sub, false).await;
    assert_eq!(w2.next().await.unwrap().0, "ready");
    exec(&s, &id, &format!("rm -r {sub}")).await;
    let got = w2.until("delete", &sub).await;
    assert!(got.len() <= 2, "{got:?}"); // `b`'s delete, then the directory's own
    let (name, data) = w2.next().await.unwrap();
    assert_eq!(
        (name.as_str(), &data["code"]),
        ("error", &json!("not_found")),
        "{data}"
    );
    assert!(w2.next().await.is_none());
    // The first watch, of the tree above, goes on.
    w.until("delete", &sub).await;

    // Deleted: the watch ends with an error.
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (name, data) = w.next().await.unwrap();
    assert_eq!(name, "error", "{data}");
    assert_eq!(data["code"], "sandbox_not_found", "{data}");
    assert!(w.next().await.is_none(), "the stream ends after its error");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_of_what_is_not_a_directory_is_refused() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    let file = s.dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let cases = [
        (
            s.dir.path().join("missing").to_string_lossy().into_owned(),
            StatusCode::NOT_FOUND,
        ),
        (
            file.to_string_lossy().into_owned(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("relative".to_owned(), StatusCode::UNPROCESSABLE_ENTITY),
        ("/a/../etc".to_owned(), StatusCode::UNPROCESSABLE_ENTITY),
    ];
    for (path, want) in cases {
        let (st, v) = call(
            &s,
            "GET",
            &format!("/v1/sandboxes/{id}/files/watch?path={path}"),
            None,
        )
        .await;
        assert_eq!(st, want, "{path}: {v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    let (st, v) = call(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/files/watch?path=/tmp&recursive=maybe"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
}
