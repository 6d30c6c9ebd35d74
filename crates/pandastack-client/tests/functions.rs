//! The function calls against a scripted local HTTP server: the paths and bodies they send,
//! paging of functions and versions, `app_not_found` as an API error with its code, the build
//! log as text, invocations with a JSON and a text event (the handler's error and a timeout as
//! data, not as errors), queued invocations fetched by id, and `wait_for_function_version`
//! polling until the build ends or the time runs out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_client::types::{
    CreateFunctionRequest, CreateVersionRequest, DeployState, ErrorCode, FunctionRollbackRequest,
    FunctionRuntime, InvocationStatus, UpdateFunctionRequest,
};
use pandastack_client::{Client, Config, Error, RetryPolicy};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const FUNCTION: &str = r#"{"id":"app-f1","name":"hello","runtime":"python","handler":"main.handler","url":"http://fn-hello.apps.localhost:8080","public":false,"env":{"A":"1"},"secret_names":["S"],"memory_mb":1024,"timeout_seconds":60,"concurrency":1,"max_instances":4,"idle_seconds":300,"live_version":1,"warm_instances":2,"created_at":"t","updated_at":"t"}"#;

fn version(v: u64, state: &str) -> String {
    format!(
        r#"{{"id":"dep-{v}","function":"hello","version":{v},"state":"{state}","error":null,"handler":null,"phases_ms":{{"install":12}},"created_at":"t","updated_at":"t"}}"#
    )
}

fn page(items: &[String], next: Option<&str>) -> String {
    let next = next.map_or("null".to_owned(), |c| format!("\"{c}\""));
    format!(r#"{{"data":[{}],"next_cursor":{next}}}"#, items.join(","))
}

const NOT_FOUND: &str = r#"{"error":{"code":"app_not_found","message":"app function nope not found","request_id":"r1"}}"#;

/// A request the server saw.
#[derive(Debug, Clone)]
struct Seen {
    /// `METHOD /path?query`.
    line: String,
    content_type: Option<String>,
    idempotency_key: Option<String>,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// What a route answers: status, content type, body.
type Answer = (u16, &'static str, String);

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// Answers each request by `route(request line, body, how many times that line was seen)`.
async fn server(route: fn(&str, &[u8], usize) -> Answer) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let seen = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let log = seen.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 8192];
                let head_end = loop {
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&req[..head_end]).to_string();
                let header = |name: &str| {
                    head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                    })
                };
                let len: usize = header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while req.len() < head_end + len {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = req[head_end..head_end + len].to_vec();
                let mut parts = head.split_whitespace();
                let line = format!("{} {}", parts.next().unwrap(), parts.next().unwrap());
                let n = {
                    let mut log = log.lock().unwrap();
                    let n = log.iter().filter(|s| s.line == line).count();
                    log.push(Seen {
                        line: line.clone(),
                        content_type: header("content-type"),
                        idempotency_key: header("idempotency-key"),
                        body: body.clone(),
                    });
                    n
                };
                let (status, ctype, answer) = route(&line, &body, n);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = tcp.write_all(resp.as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    (url, log)
}

fn client(url: &str) -> Client {
    Client::new(Config {
        base_url: url.to_owned(),
        api_key: Some("pds_test".into()),
    })
    .unwrap()
    .with_retry(RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
    })
}

fn lines(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|s| s.line.clone()).collect()
}

fn find_all(log: &Log, line: &str) -> Vec<Seen> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| s.line == line)
        .cloned()
        .collect()
}

fn find(log: &Log, line: &str) -> Seen {
    find_all(log, line)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{line} not sent"))
}

#[tokio::test]
async fn function_calls_send_what_the_api_defines() {
    let (url, log) = server(|line, _, _| match line {
        "POST /v1/functions" => (201, JSON, FUNCTION.into()),
        "GET /v1/functions" => (200, JSON, page(&[FUNCTION.into()], Some("hello"))),
        "GET /v1/functions?cursor=hello" => (
            200,
            JSON,
            page(&[FUNCTION.replace("\"hello\"", "\"world\"")], None),
        ),
        "GET /v1/functions?limit=1" => (200, JSON, page(&[FUNCTION.into()], Some("hello"))),
        "GET /v1/functions/hello" | "PATCH /v1/functions/hello" => (200, JSON, FUNCTION.into()),
        "DELETE /v1/functions/hello" => (204, JSON, String::new()),
        "GET /v1/functions/nope"
        | "DELETE /v1/functions/nope"
        | "POST /v1/functions/nope/versions" => (404, JSON, NOT_FOUND.into()),
        "POST /v1/functions/hello/versions" => (202, JSON, version(3, "queued")),
        "GET /v1/functions/hello/versions" => (
            200,
            JSON,
            page(&[version(3, "queued"), version(2, "live")], Some("c2")),
        ),
        "GET /v1/functions/hello/versions?cursor=c2" => {
            (200, JSON, page(&[version(1, "standby")], None))
        }
        "GET /v1/functions/hello/versions?limit=1&cursor=c1" => {
            (200, JSON, page(&[version(2, "live")], None))
        }
        "GET /v1/functions/hello/versions/2" => (200, JSON, version(2, "live")),
        "GET /v1/functions/hello/versions/2/logs" => {
            (200, TEXT, "installing six\nimported main.handler\n".into())
        }
        "POST /v1/functions/hello/rollback" => (200, JSON, version(1, "live")),
        _ => (
            404,
            JSON,
            r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into(),
        ),
    })
    .await;
    let c = client(&url);
    let req = CreateFunctionRequest {
        name: "hello".into(),
        runtime: FunctionRuntime::Python,
        handler: "main.handler".into(),
        files: [(
            "main.py".to_owned(),
            "def handler(e, c): return e".to_owned(),
        )]
        .into(),
        git: None,
        dependencies: Some("six\n".into()),
        env: [("A".to_owned(), "1".to_owned())].into(),
        secrets: [("S".to_owned(), "x".to_owned())].into(),
        memory_mb: Some(512),
        timeout_seconds: Some(30),
        concurrency: None,
        max_instances: Some(2),
        idle_seconds: None,
        public: true,
    };
    let f = c.create_function(&req).await.unwrap();
    assert_eq!(
        (
            f.id.as_str(),
            f.runtime,
            f.url.as_str(),
            f.live_version,
            f.warm_instances
        ),
        (
            "app-f1",
            FunctionRuntime::Python,
            "http://fn-hello.apps.localhost:8080",
            Some(1),
            2
        )
    );
    let created = find(&log, "POST /v1/functions");
    assert!(created.idempotency_key.is_some());
    assert_eq!(created.content_type.as_deref(), Some(JSON));
    let body = created.json();
    assert_eq!(
        (&body["name"], &body["runtime"], &body["handler"]),
        (&json!("hello"), &json!("python"), &json!("main.handler"))
    );
    assert_eq!(
        body["files"],
        json!({"main.py": "def handler(e, c): return e"})
    );
    assert_eq!(
        (&body["dependencies"], &body["env"], &body["secrets"]),
        (&json!("six\n"), &json!({"A": "1"}), &json!({"S": "x"}))
    );
    assert_eq!(
        (
            &body["memory_mb"],
            &body["timeout_seconds"],
            &body["max_instances"],
            &body["public"]
        ),
        (&json!(512), &json!(30), &json!(2), &json!(true))
    );

    let all = c.list_all_functions().await.unwrap();
    assert_eq!(
        all.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["hello", "world"]
    );
    let one = c.list_functions(Some(1), None).await.unwrap();
    assert_eq!(
        (one.data.len(), one.next_cursor.as_deref()),
        (1, Some("hello"))
    );
    assert_eq!(
        c.get_function("hello").await.unwrap().handler,
        "main.handler"
    );
    let e = c.get_function("nope").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
    assert_eq!(e.status(), Some(404));
    assert!(e.is_not_found());

    c.update_function(
        "hello",
        &UpdateFunctionRequest {
            timeout_seconds: Some(120),
            public: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let patch = find(&log, "PATCH /v1/functions/hello").json();
    assert_eq!(
        (
            &patch["timeout_seconds"],
            &patch["public"],
            &patch["concurrency"]
        ),
        (&json!(120), &json!(false), &Value::Null)
    );

    let v = c
        .create_function_version(
            "hello",
            &CreateVersionRequest {
                files: [(
                    "main.py".to_owned(),
                    "def handler(e, c): return 2".to_owned(),
                )]
                .into(),
                env: Some([("B".to_owned(), "2".to_owned())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (v.id.as_str(), v.version, v.state, v.phases_ms["install"]),
        ("dep-3", 3, DeployState::Queued, 12)
    );
    c.create_function_version("hello", &CreateVersionRequest::default())
        .await
        .unwrap();
    let posted = find_all(&log, "POST /v1/functions/hello/versions");
    assert!(posted.iter().all(|s| s.idempotency_key.is_some()));
    assert_ne!(posted[0].idempotency_key, posted[1].idempotency_key);
    let first = posted[0].json();
    assert_eq!(
        (&first["files"], &first["env"], &first["handler"]),
        (
            &json!({"main.py": "def handler(e, c): return 2"}),
            &json!({"B": "2"}),
            &Value::Null
        )
    );
    assert_eq!(
        posted[1].json()["files"],
        json!({}),
        "rebuild the same source"
    );
    assert_eq!(
        c.create_function_version("nope", &CreateVersionRequest::default())
            .await
            .unwrap_err()
            .code(),
        Some(ErrorCode::AppNotFound)
    );

    let all = c.list_all_function_versions("hello").await.unwrap();
    assert_eq!(
        all.iter().map(|v| v.version).collect::<Vec<_>>(),
        [3, 2, 1],
        "newest first, every page"
    );
    let p = c
        .list_function_versions("hello", Some(1), Some("c1"))
        .await
        .unwrap();
    assert_eq!((p.data[0].version, p.next_cursor), (2, None));
    assert_eq!(
        c.get_function_version("hello", 2).await.unwrap().state,
        DeployState::Live
    );
    assert_eq!(
        c.function_version_logs("hello", 2).await.unwrap(),
        "installing six\nimported main.handler\n"
    );

    let r = c
        .rollback_function("hello", &FunctionRollbackRequest { version: Some(1) })
        .await
        .unwrap();
    assert_eq!((r.version, r.state), (1, DeployState::Live));
    c.rollback_function("hello", &FunctionRollbackRequest::default())
        .await
        .unwrap();
    let rb = find_all(&log, "POST /v1/functions/hello/rollback");
    assert_eq!(rb[0].json(), json!({"version": 1}));
    assert_eq!(rb[1].json(), json!({"version": null}));

    c.delete_function("hello").await.unwrap();
    assert_eq!(
        c.delete_function("nope").await.unwrap_err().code(),
        Some(ErrorCode::AppNotFound)
    );
    let sent = lines(&log);
    for want in [
        "GET /v1/functions?cursor=hello",
        "GET /v1/functions?limit=1",
        "GET /v1/functions/hello/versions?cursor=c2",
        "GET /v1/functions/hello/versions?limit=1&cursor=c1",
        "DELETE /v1/functions/hello",
    ] {
        assert!(sent.contains(&want.to_owned()), "{want} not in {sent:?}");
    }
    // A name is one path segment, escaped.
    let e = c.get_function("a/b").await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    assert!(lines(&log).contains(&"GET /v1/functions/a%2Fb".to_owned()));
}

#[tokio::test]
async fn invocations_are_outcomes_not_errors() {
    let (url, log) = server(|line, body, _| match line {
        "POST /v1/functions/hello/invoke" if body.starts_with(br#"{"fail""#) => (
            200,
            JSON,
            r#"{"id":null,"function":"hello","status":"error","result":null,"error":{"type":"ValueError","message":"asked to fail","traceback":"Traceback (most recent call last):\n  ...\nValueError: asked to fail\n"},"stdout":"","stderr":"","version":1,"duration_ms":0.8,"cold":false,"attempts":1,"created_at":null,"finished_at":null}"#.into(),
        ),
        "POST /v1/functions/hello/invoke" if body.starts_with(br#"{"sleep""#) => (
            200,
            JSON,
            r#"{"id":null,"function":"hello","status":"timeout","result":null,"error":{"type":"Timeout","message":"past 1s","traceback":""},"stdout":"","stderr":"","version":1,"duration_ms":1000.0,"cold":false,"attempts":1,"created_at":null,"finished_at":null}"#.into(),
        ),
        "POST /v1/functions/hello/invoke" => {
            // The server's reading of the event: JSON as sent, text as a JSON string.
            let event = serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            (
                200,
                JSON,
                format!(
                    r#"{{"id":null,"function":"hello","status":"ok","result":{{"echo":{event}}},"error":null,"stdout":"got it\n","stderr":"","version":1,"duration_ms":1.5,"cold":true,"attempts":1,"created_at":null,"finished_at":null}}"#
                ),
            )
        }
        "POST /v1/functions/hello/invoke?async=1" | "POST /v1/functions/hello/invoke?async=1&retries=5" => (
            202,
            JSON,
            r#"{"id":"inv-1","function":"hello","status":"queued","result":null,"error":null,"stdout":"","stderr":"","version":null,"duration_ms":null,"cold":false,"attempts":0,"created_at":"t","finished_at":null}"#.into(),
        ),
        "GET /v1/functions/hello/invocations/inv-1" => (
            200,
            JSON,
            r#"{"id":"inv-1","function":"hello","status":"ok","result":[1,2],"error":null,"stdout":"","stderr":"","version":1,"duration_ms":3.0,"cold":true,"attempts":1,"created_at":"t","finished_at":"t2"}"#.into(),
        ),
        "POST /v1/functions/idle/invoke" => (
            409,
            JSON,
            r#"{"error":{"code":"conflict","message":"function idle has no live version","request_id":"r"}}"#.into(),
        ),
        _ => (404, JSON, NOT_FOUND.into()),
    })
    .await;
    let c = client(&url);
    let ok = c.invoke_function("hello", &json!({"n": 1})).await.unwrap();
    assert_eq!(ok.status, InvocationStatus::Ok);
    assert_eq!(ok.result, Some(json!({"echo": {"n": 1}})));
    assert_eq!(
        (ok.stdout.as_str(), ok.cold, ok.version, ok.duration_ms),
        ("got it\n", true, Some(1), Some(1.5))
    );
    let sent = find(&log, "POST /v1/functions/hello/invoke");
    assert_eq!(sent.content_type.as_deref(), Some(JSON));
    assert_eq!(sent.json(), json!({"n": 1}));

    let text = c
        .invoke_function_text("hello", "plain words")
        .await
        .unwrap();
    assert_eq!(text.result, Some(json!({"echo": "plain words"})));
    let sent = find_all(&log, "POST /v1/functions/hello/invoke");
    assert_eq!(
        sent[1].content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(sent[1].body, b"plain words");

    let failed = c
        .invoke_function("hello", &json!({"fail": true}))
        .await
        .unwrap();
    assert_eq!(failed.status, InvocationStatus::Error);
    let err = failed.error.expect("the handler's error");
    assert_eq!(
        (err.kind.as_str(), err.message.as_str()),
        ("ValueError", "asked to fail")
    );
    assert!(err.traceback.contains("Traceback"), "{}", err.traceback);
    let slow = c
        .invoke_function("hello", &json!({"sleep": 5}))
        .await
        .unwrap();
    assert_eq!(slow.status, InvocationStatus::Timeout);

    let queued = c
        .invoke_function_async("hello", &json!({"n": 2}), None)
        .await
        .unwrap();
    assert_eq!(
        (queued.id.as_deref(), queued.status, queued.attempts),
        (Some("inv-1"), InvocationStatus::Queued, 0)
    );
    assert!(!queued.status.finished());
    assert_eq!(
        find(&log, "POST /v1/functions/hello/invoke?async=1").json(),
        json!({"n": 2})
    );
    c.invoke_function_async("hello", &json!(null), Some(5))
        .await
        .unwrap();
    let done = c.get_function_invocation("hello", "inv-1").await.unwrap();
    assert_eq!(
        (done.status, done.result, done.finished_at.as_deref()),
        (InvocationStatus::Ok, Some(json!([1, 2])), Some("t2"))
    );
    assert!(lines(&log).contains(&"POST /v1/functions/hello/invoke?async=1&retries=5".to_owned()));
    let e = c
        .get_function_invocation("hello", "nope")
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404));

    let e = c.invoke_function("idle", &json!(null)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.status()),
        (Some(ErrorCode::Conflict), Some(409))
    );
    let e = c.invoke_function("nope", &json!(null)).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
    assert_eq!(find(&log, "POST /v1/functions/idle/invoke").body, b"null");
}

#[tokio::test]
async fn wait_for_function_version_polls_until_the_build_ends() {
    let (url, log) = server(|line, _, n| match line {
        "GET /v1/functions/hello/versions/1" => {
            let state = ["queued", "building", "baking"].get(n).unwrap_or(&"failed");
            (200, JSON, version(1, state))
        }
        "GET /v1/functions/hello/versions/2" => (200, JSON, version(2, "checking")),
        _ => (404, JSON, NOT_FOUND.into()),
    })
    .await;
    let c = client(&url);
    let v = c
        .wait_for_function_version("hello", 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(v.state, DeployState::Failed);
    assert_eq!(lines(&log).len(), 4);
    let t = std::time::Instant::now();
    let e = c
        .wait_for_function_version("hello", 2, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(e.to_string().contains("still checking"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let e = c
        .wait_for_function_version("nope", 1, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
}
