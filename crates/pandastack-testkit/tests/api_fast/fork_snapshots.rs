//! Hardening 2, item 4: a fork's snapshot goes, row and files, with the last sandbox restored
//! from it — its children, and sandboxes created from it since — unless the fork asked to keep
//! it (`keep_snapshot`). "Last" is read from the store: it holds for a delete after a restart
//! and for concurrent deletes (one of them deletes the snapshot, both answer 204). Explicit
//! snapshots are never deleted with their sandboxes.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

use super::{call, create};

/// Forks `parent` into `count` children; returns the response.
async fn fork(s: &FakeStack, parent: &str, body: Value) -> Value {
    let (st, f) = call(
        s,
        "POST",
        &format!("/v1/sandboxes/{parent}/fork"),
        Some(body),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{f}");
    f
}

fn ids(f: &Value) -> Vec<String> {
    f["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn delete(s: &FakeStack, id: &str) {
    let (st, v) = call(s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{id}: {v}");
}

/// Ids of the workspace's snapshots.
async fn listed(s: &FakeStack) -> Vec<String> {
    let (st, v) = call(s, "GET", "/v1/snapshots", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_owned())
        .collect()
}

fn files(s: &FakeStack, snapshot: &str) -> bool {
    s.dir.path().join("data/snapshots").join(snapshot).exists()
}

/// Snapshot count and bytes in `GET /v1/usage`.
async fn usage(s: &FakeStack) -> (u64, u64) {
    let (st, u) = call(s, "GET", "/v1/usage", None).await;
    assert_eq!(st, StatusCode::OK, "{u}");
    assert_eq!(
        u["snapshots"]["bytes"], u["storage"]["snapshot_bytes"],
        "{u}"
    );
    (
        u["snapshots"]["count"].as_u64().unwrap(),
        u["snapshots"]["bytes"].as_u64().unwrap(),
    )
}

/// The snapshot is gone everywhere: list, delete, create from it, usage, data directory.
async fn assert_gone(s: &FakeStack, snapshot: &str) {
    assert!(
        !listed(s).await.contains(&snapshot.to_owned()),
        "{snapshot}"
    );
    let (st, v) = call(s, "DELETE", &format!("/v1/snapshots/{snapshot}"), None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, v) = call(
        s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"snapshot_id": snapshot})),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("snapshot_not_found")),
        "{v}"
    );
    assert!(!files(s, snapshot), "{snapshot}: files left");
}

/// A new API over the same database file and host, as after a server restart: nothing of the
/// first one's memory.
async fn restarted(s: &FakeStack) -> axum::Router {
    let store = pandastack_store::Store::open(&s.dir.path().join("state.db"))
        .await
        .expect("store");
    let control = pandastack_testkit::fake::fake_control(store, Arc::clone(&s.host), s.dir.path());
    pandastack_api::router(Arc::new(pandastack_testkit::fake::fake_api(control)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_snapshot_goes_with_the_last_sandbox_restored_from_it() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let parent = v["id"].as_str().unwrap().to_owned();
    let f = fork(&s, &parent, json!({"count": 2})).await;
    let snap = f["snapshot_id"].as_str().unwrap().to_owned();
    assert_eq!(f["keep_snapshot"], json!(false), "{f}");
    let kids = ids(&f);
    assert!(f["children"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["snapshot_id"] == snap.as_str()));
    assert_eq!(listed(&s).await, std::slice::from_ref(&snap));
    let (count, bytes) = usage(&s).await;
    assert_eq!(count, 1);
    assert!(bytes > 0);
    assert!(files(&s, &snap));

    // A sandbox created from it uses it too; a hibernated child still does.
    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"snapshot_id": snap})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let restored = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{}/hibernate", kids[1]),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    delete(&s, &parent).await;
    delete(&s, &kids[0]).await;
    delete(&s, &restored).await;
    assert_eq!(listed(&s).await, std::slice::from_ref(&snap));
    assert!(files(&s, &snap));
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{}/exec", kids[1]),
        Some(json!({"cmd": "hostname"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    // The last one, deleted through a restarted server.
    let router = restarted(&s).await;
    let resp = router
        .oneshot(
            Request::builder()
                .method("DELETE")
                .uri(format!("/v1/sandboxes/{}", kids[1]))
                .header("authorization", format!("Bearer {}", s.key))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
    assert_gone(&s, &snap).await;
    assert_eq!(usage(&s).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_fork_snapshot_and_explicit_snapshots_outlive_their_sandboxes() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let parent = v["id"].as_str().unwrap().to_owned();
    let f = fork(&s, &parent, json!({"count": 2, "keep_snapshot": true})).await;
    assert_eq!(f["keep_snapshot"], json!(true), "{f}");
    let kept = f["snapshot_id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{parent}/snapshots"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let explicit = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"snapshot_id": explicit})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let restored = v["id"].as_str().unwrap().to_owned();
    for id in ids(&f).iter().chain([&parent, &restored]) {
        delete(&s, id).await;
    }
    let mut both = vec![kept.clone(), explicit.clone()];
    both.sort();
    let mut now = listed(&s).await;
    now.sort();
    assert_eq!(now, both);
    assert!(files(&s, &kept) && files(&s, &explicit));
    assert_eq!(usage(&s).await.0, 2);
    for id in [&kept, &explicit] {
        let (st, v) = call(&s, "DELETE", &format!("/v1/snapshots/{id}"), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        assert_gone(&s, id).await;
    }
    assert_eq!(usage(&s).await, (0, 0));
}

/// Records the stack's warnings and its "fork snapshot deleted" events, on the thread that
/// listens (the test's: a current-thread runtime runs the whole stack there).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Log {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut line = format!("{}", event.metadata().level());
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                let _ = write!(line, " {}={value:?}", field.name());
            },
        );
        if *event.metadata().level() <= tracing::Level::WARN || line.contains(RELEASED) {
            self.0.lock().unwrap().push(line);
        }
    }
}

/// What the snapshot service logs when a fork's snapshot goes with its last sandbox.
const RELEASED: &str = "fork snapshot deleted with its last sandbox";

#[tokio::test(flavor = "current_thread")]
async fn concurrent_deletes_of_the_last_children_delete_their_snapshot_once() {
    let log = Log::default();
    let _listen =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(log.clone()));
    // While one dispatcher exists, tracing-core decides whether a log line is wanted by asking
    // the default of the thread that first reaches it, and keeps the answer: a test running
    // beside this one without a subscriber would switch those lines off here too. With two it
    // asks each dispatcher.
    let _second = tracing::Dispatch::new(tracing_subscriber::registry());
    let s = fake_stack(Duration::from_secs(10)).await;
    let (_, v) = create(&s).await;
    let parent = v["id"].as_str().unwrap().to_owned();
    // What setting up said (a data dir without reflinks, say) is not this test's.
    log.0.lock().unwrap().clear();
    for _ in 0..3 {
        let f = fork(&s, &parent, json!({"count": 2})).await;
        let snap = f["snapshot_id"].as_str().unwrap().to_owned();
        let kids = ids(&f);
        let [a, b] = [0, 1].map(|i| format!("/v1/sandboxes/{}", kids[i]));
        let (a, b) = tokio::join!(call(&s, "DELETE", &a, None), call(&s, "DELETE", &b, None));
        assert_eq!((a.0, b.0), (StatusCode::NO_CONTENT, StatusCode::NO_CONTENT));
        assert_gone(&s, &snap).await;
        let lines = log.0.lock().unwrap().drain(..).collect::<Vec<_>>();
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains(RELEASED) && l.contains(&snap))
                .count(),
            1,
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| l.starts_with("DEBUG")), "{lines:#?}");
    }
    assert_eq!(usage(&s).await, (0, 0));
    // The parent was never restored from them and is untouched.
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{parent}/exec"),
        Some(json!({"cmd": "true"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}
