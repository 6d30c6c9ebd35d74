//! Calls inside a sandbox whose VM goes away under them — a delete, a hibernate, the VM process
//! ending on its own (a guest power-off, a crash) — answer what the sandbox's state says, as
//! the next call would: `404 sandbox_not_found` once it is deleted, `409 sandbox_state` naming
//! the state otherwise; never `500 internal`, and nothing is logged as an error. Blocking exec
//! answers the status; the exec event stream and the exec WebSocket carry the same code in their
//! error event or frame.
//!
//! Each test runs on a current-thread runtime: the whole stack (handlers, host agent, the
//! WebSocket server) then logs on the test's thread, where [`ErrorLog`] listens.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use futures::{SinkExt, StreamExt};
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tracing_subscriber::layer::SubscriberExt;

use super::{call, create, sse};

/// What takes the sandbox's VM away while a command runs in it.
#[derive(Debug, Clone, Copy)]
enum Cause {
    Delete,
    Hibernate,
    /// The VM process ends on its own (a guest power-off, a crash, a kill from outside).
    VmExit,
}

/// How the command runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    /// `POST …/exec`.
    Blocking,
    /// `POST …/exec/stream` (Server-Sent Events).
    Events,
    /// `GET …/exec/ws`.
    WebSocket,
}

const VIAS: [Via; 3] = [Via::Blocking, Via::Events, Via::WebSocket];

/// How a cut-off call failed: the error's code and message, and the HTTP status when it had one
/// (the streams' errors come after their `200`/`101`).
#[derive(Debug)]
struct Failure {
    status: Option<StatusCode>,
    code: String,
    message: String,
}

/// ERROR events logged on this thread while it lives.
#[derive(Default, Clone)]
struct ErrorLog(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ErrorLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::ERROR {
            return;
        }
        let mut line = event.metadata().target().to_owned();
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                let _ = write!(line, " {}={value:?}", field.name());
            },
        );
        self.0.lock().unwrap().push(line);
    }
}

impl ErrorLog {
    /// Listens on this thread until the guard is dropped.
    fn listen(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Serves the stack's API on a loopback port (the WebSocket route needs a real connection).
async fn serve(s: &FakeStack) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = s.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// Runs `cmd` in sandbox `id` through `via` and returns how it failed (it must fail).
async fn run(s: &FakeStack, addr: std::net::SocketAddr, id: &str, via: Via, cmd: &str) -> Failure {
    let body = json!({ "cmd": cmd });
    match via {
        Via::Blocking => {
            let (st, v) = call(s, "POST", &format!("/v1/sandboxes/{id}/exec"), Some(body)).await;
            Failure {
                status: Some(st),
                code: v["error"]["code"].as_str().unwrap_or_default().to_owned(),
                message: v.to_string(),
            }
        }
        Via::Events => {
            let (st, events) = sse(s, &format!("/v1/sandboxes/{id}/exec/stream"), body).await;
            assert_eq!(st, StatusCode::OK, "{events:?}");
            let (name, data) = events.last().expect("an event").clone();
            assert_eq!(name, "error", "{events:?}");
            Failure {
                status: None,
                code: data["code"].as_str().unwrap_or_default().to_owned(),
                message: data["message"].as_str().unwrap_or_default().to_owned(),
            }
        }
        Via::WebSocket => {
            let mut req = format!("ws://{addr}/v1/sandboxes/{id}/exec/ws")
                .into_client_request()
                .unwrap();
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {}", s.key).parse().unwrap(),
            );
            let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
            let start = json!({"type": "start", "id": "c1", "cmd": cmd});
            ws.send(Message::Text(start.to_string().into()))
                .await
                .unwrap();
            loop {
                let msg = ws.next().await.expect("a frame").unwrap();
                let Message::Text(t) = msg else { continue };
                let f: Value = serde_json::from_str(t.as_str()).unwrap();
                match f["type"].as_str() {
                    Some("stdout" | "stderr") => continue,
                    Some("error") => {
                        assert_eq!(f["id"], "c1", "{f}");
                        break Failure {
                            status: None,
                            code: f["code"].as_str().unwrap_or_default().to_owned(),
                            message: f["message"].as_str().unwrap_or_default().to_owned(),
                        };
                    }
                    _ => panic!("unexpected frame {f}"),
                }
            }
        }
    }
}

/// Waits until `path` exists (the command started).
async fn started(path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::path::Path::new(path).exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Takes the VM of sandbox `id` away by `cause`.
async fn take_away(s: &FakeStack, id: &str, cause: Cause) {
    match cause {
        Cause::Delete => {
            let (st, v) = call(s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
            assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        }
        Cause::Hibernate => {
            let (st, v) = call(s, "POST", &format!("/v1/sandboxes/{id}/hibernate"), None).await;
            assert_eq!(
                (st, v["state"].as_str()),
                (StatusCode::OK, Some("hibernated")),
                "{v}"
            );
        }
        Cause::VmExit => s.end_vm(id).await,
    }
}

/// A new sandbox running a long command through `via`, its VM taken away by `cause` once the
/// command runs: the sandbox and how the command failed. The failure comes well before the
/// command would have ended.
async fn cut_off(
    s: &FakeStack,
    addr: std::net::SocketAddr,
    via: Via,
    cause: Cause,
) -> (String, Failure) {
    let (st, v) = create(s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    // Fake VMs run commands on this host: the marker says the command is under way.
    let marker = format!("/tmp/pandastack-cut-off-{id}");
    let cmd = format!("touch {marker}; exec sleep 30");
    let t = Instant::now();
    let (failure, ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(run(s, addr, &id, via, &cmd), async {
            started(&marker).await;
            take_away(s, &id, cause).await;
        })
    })
    .await
    .unwrap_or_else(|_| panic!("{via:?} cut off by {cause:?}: no answer"));
    let _ = std::fs::remove_file(&marker);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    (id, failure)
}

#[tokio::test]
async fn an_exec_whose_sandbox_is_deleted_answers_sandbox_not_found() {
    let log = ErrorLog::default();
    let _listen = log.listen();
    let s = fake_stack(Duration::from_secs(10)).await;
    let addr = serve(&s).await;
    for via in VIAS {
        let (id, f) = cut_off(&s, addr, via, Cause::Delete).await;
        assert_eq!(f.code, "sandbox_not_found", "{via:?}: {f:?}");
        if via == Via::Blocking {
            assert_eq!(f.status, Some(StatusCode::NOT_FOUND), "{f:?}");
        }
        assert!(f.message.contains(&id), "{via:?}: {f:?}");
    }
    assert!(s.host.list().await.is_empty());
    assert_eq!(log.lines(), Vec::<String>::new());
}

#[tokio::test]
async fn an_exec_whose_sandbox_is_hibernated_answers_its_state() {
    let log = ErrorLog::default();
    let _listen = log.listen();
    let s = fake_stack(Duration::from_secs(10)).await;
    let addr = serve(&s).await;
    for via in VIAS {
        let (id, f) = cut_off(&s, addr, via, Cause::Hibernate).await;
        assert_eq!(f.code, "sandbox_state", "{via:?}: {f:?}");
        if via == Via::Blocking {
            assert_eq!(f.status, Some(StatusCode::CONFLICT), "{f:?}");
        }
        assert!(f.message.contains("hibernated"), "{via:?}: {f:?}");
        // The hibernation stands; the next call wakes the sandbox as usual.
        let (_, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(v["state"], "hibernated", "{v}");
        super::exec_true(&s, &id).await;
    }
    assert_eq!(log.lines(), Vec::<String>::new());
}

#[tokio::test]
async fn an_exec_whose_vm_exits_answers_its_state() {
    let log = ErrorLog::default();
    let _listen = log.listen();
    let s = fake_stack(Duration::from_secs(10)).await;
    let addr = serve(&s).await;
    for via in VIAS {
        let (id, f) = cut_off(&s, addr, via, Cause::VmExit).await;
        assert_eq!(f.code, "sandbox_state", "{via:?}: {f:?}");
        if via == Via::Blocking {
            assert_eq!(f.status, Some(StatusCode::CONFLICT), "{f:?}");
        }
        assert!(f.message.contains("exited"), "{via:?}: {f:?}");
        // Only a delete is left to do, and it works.
        let (st, v) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    assert_eq!(log.lines(), Vec::<String>::new());
}

#[tokio::test]
async fn metrics_of_an_exited_vm_answer_its_state() {
    let log = ErrorLog::default();
    let _listen = log.listen();
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}/metrics"), None).await;
    assert_eq!(
        (st, v["state"].as_str()),
        (StatusCode::OK, Some("running")),
        "{v}"
    );
    s.end_vm(&id).await;
    // As every other call on it answers: exec, hibernate.
    for (method, path, body) in [
        ("GET", "metrics", None),
        ("POST", "exec", Some(json!({"argv": ["true"]}))),
        ("POST", "hibernate", None),
    ] {
        let (st, v) = call(&s, method, &format!("/v1/sandboxes/{id}/{path}"), body).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::CONFLICT, Some("sandbox_state")),
            "{path}: {v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains("exited"),
            "{v}"
        );
    }
    assert_eq!(log.lines(), Vec::<String>::new());
}
