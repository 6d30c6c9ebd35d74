//! The app calls against a scripted local HTTP server: the paths and bodies they send, paging,
//! `app_not_found` as an API error with its code, tarball uploads (from memory, a file and a
//! stream) as `application/gzip`, deploy logs and app output followed as Server-Sent Events,
//! and `wait_for_deploy` polling until the deploy ends or the time runs out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_client::types::{
    AppBuild, AppGit, CreateAppRequest, CreateDeployRequest, DeployState, ErrorCode,
    RollbackRequest, SandboxState, UpdateAppRequest,
};
use pandastack_client::{Client, Config, Error, LogEvent, RetryPolicy};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const APP: &str = r#"{"id":"app-1","name":"web","url":"http://web.apps.localhost:8080","git":{"url":"file:///srv/web.git","ref":"main"},"env":{"A":"1"},"secret_names":["S"],"build":{"command":null,"output_dir":null},"start":{"command":null,"port":null},"memory_mb":1024,"min_instances":0,"idle_seconds":300,"health_path":"/","webhook_secret":"whs","deploy_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK pandastack-app-web","live_deploy":"dep-1","instance_state":"running","domains":[{"name":"shop.example.com","tls":"issued","tls_expires_at":"t","tls_error":null}],"created_at":"t","updated_at":"t"}"#;

fn deploy(id: &str, number: u64, git_ref: &str, state: &str) -> String {
    format!(
        r#"{{"id":"{id}","app":"web","number":{number},"ref":"{git_ref}","commit":null,"state":"{state}","error":null,"plan":null,"phases_ms":{{"clone":12}},"sandbox_id":null,"created_at":"t","updated_at":"t"}}"#
    )
}

fn page(items: &[String], next: Option<&str>) -> String {
    let next = next.map_or("null".to_owned(), |c| format!("\"{c}\""));
    format!(r#"{{"data":[{}],"next_cursor":{next}}}"#, items.join(","))
}

const NOT_FOUND: &str =
    r#"{"error":{"code":"app_not_found","message":"app nope not found","request_id":"r1"}}"#;

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
const SSE: &str = "text/event-stream";
const TEXT: &str = "text/plain; charset=utf-8";

/// Answers each request by `route(request line, body, how many times that line was seen)`;
/// reads bodies with a `Content-Length` or chunked.
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
                let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                let body = if chunked {
                    while !req[head_end..].ends_with(b"0\r\n\r\n") {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    dechunk(&req[head_end..])
                } else {
                    let len: usize = header("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while req.len() < head_end + len {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    req[head_end..head_end + len].to_vec()
                };
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

/// The payload of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[i + 2 + size + 2..];
    }
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

fn find(log: &Log, line: &str) -> Seen {
    log.lock()
        .unwrap()
        .iter()
        .find(|s| s.line == line)
        .cloned()
        .unwrap_or_else(|| panic!("{line} not sent"))
}

#[tokio::test]
async fn app_calls_send_what_the_api_defines() {
    let (url, log) = server(|line, _, n| match line {
        "POST /v1/apps" => (201, JSON, APP.into()),
        "GET /v1/apps" => (200, JSON, page(&[APP.into()], Some("web"))),
        "GET /v1/apps?cursor=web" => (200, JSON, page(&[APP.replace("app-1", "app-2")], None)),
        "GET /v1/apps?limit=1" => (200, JSON, page(&[APP.into()], Some("web"))),
        "GET /v1/apps/web" | "PATCH /v1/apps/web" => (200, JSON, APP.into()),
        "DELETE /v1/apps/web" => (204, JSON, String::new()),
        "GET /v1/apps/nope" | "DELETE /v1/apps/nope" | "POST /v1/apps/nope/deploys" => {
            (404, JSON, NOT_FOUND.into())
        }
        "POST /v1/apps/web/deploys" => (
            202,
            JSON,
            deploy("dep-3", 3, if n == 0 { "v2" } else { "main" }, "queued"),
        ),
        "GET /v1/apps/web/deploys" => (
            200,
            JSON,
            page(
                &[
                    deploy("dep-3", 3, "main", "queued"),
                    deploy("dep-2", 2, "main", "live"),
                ],
                Some("c2"),
            ),
        ),
        "GET /v1/apps/web/deploys?cursor=c2" => (
            200,
            JSON,
            page(&[deploy("dep-1", 1, "main", "standby")], None),
        ),
        "GET /v1/apps/web/deploys?limit=1&cursor=c1" => {
            (200, JSON, page(&[deploy("dep-2", 2, "main", "live")], None))
        }
        "GET /v1/apps/web/deploys/dep-2" => (200, JSON, deploy("dep-2", 2, "main", "live")),
        "GET /v1/apps/web/deploys/dep-2/logs" => (200, TEXT, "cloning…\nbuilding\n".into()),
        "GET /v1/apps/web/logs" => (200, TEXT, "listening on 3000\n".into()),
        "POST /v1/apps/web/rollback" => (200, JSON, deploy("dep-1", 1, "main", "live")),
        "POST /v1/apps/web/deploy-key" => (200, JSON, APP.into()),
        _ => (
            404,
            JSON,
            r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into(),
        ),
    })
    .await;
    let c = client(&url);
    let req = CreateAppRequest {
        name: "web".into(),
        git: AppGit {
            url: "file:///srv/web.git".into(),
            git_ref: Some("main".into()),
        },
        env: [("A".to_owned(), "1".to_owned())].into(),
        secrets: [("S".to_owned(), "x".to_owned())].into(),
        build: Some(AppBuild {
            command: Some("npm run build".into()),
            output_dir: None,
        }),
        start: None,
        root_dir: Some("apps/web".into()),
        memory_mb: Some(512),
        min_instances: Some(1),
        idle_seconds: None,
        health_path: Some("/healthz".into()),
        domains: vec!["shop.example.com".into()],
        deploy: Some(false),
    };
    let a = c.create_app(&req).await.unwrap();
    assert_eq!(
        (a.id.as_str(), a.url.as_str(), a.instance_state),
        (
            "app-1",
            "http://web.apps.localhost:8080",
            Some(SandboxState::Running)
        )
    );
    let created = find(&log, "POST /v1/apps");
    assert!(created.idempotency_key.is_some());
    let body = created.json();
    assert_eq!(body["domains"], json!(["shop.example.com"]));
    assert_eq!(
        (a.domains[0].name.as_str(), a.domains[0].tls),
        (
            "shop.example.com",
            pandastack_client::types::DomainTls::Issued
        )
    );
    assert_eq!(
        body["git"],
        json!({"url": "file:///srv/web.git", "ref": "main"})
    );
    assert_eq!(body["env"], json!({"A": "1"}));
    assert_eq!(body["secrets"], json!({"S": "x"}));
    assert_eq!(body["build"]["command"], "npm run build");
    assert_eq!(
        (&body["memory_mb"], &body["min_instances"], &body["deploy"]),
        (&json!(512), &json!(1), &json!(false))
    );

    let all = c.list_all_apps().await.unwrap();
    assert_eq!(
        all.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["app-1", "app-2"]
    );
    let one = c.list_apps(Some(1), None).await.unwrap();
    assert_eq!(
        (one.data.len(), one.next_cursor.as_deref()),
        (1, Some("web"))
    );
    assert_eq!(c.get_app("web").await.unwrap().name, "web");
    let e = c.get_app("nope").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
    assert_eq!(e.status(), Some(404));
    assert!(e.is_not_found());
    assert_eq!(e.to_string(), "app nope not found");

    c.update_app(
        "web",
        &UpdateAppRequest {
            min_instances: Some(0),
            env: Some([("B".to_owned(), "2".to_owned())].into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let patch = find(&log, "PATCH /v1/apps/web").json();
    assert_eq!(
        (&patch["min_instances"], &patch["env"], &patch["git"]),
        (&json!(0), &json!({"B": "2"}), &Value::Null)
    );

    let d = c
        .deploy_app(
            "web",
            &CreateDeployRequest {
                git_ref: Some("v2".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (d.id.as_str(), d.number, d.git_ref.as_str(), d.state),
        ("dep-3", 3, "v2", DeployState::Queued)
    );
    assert_eq!(d.phases_ms["clone"], 12);
    c.deploy_app("web", &CreateDeployRequest::default())
        .await
        .unwrap();
    let deploys: Vec<Seen> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.line == "POST /v1/apps/web/deploys")
        .cloned()
        .collect();
    assert_eq!(deploys[0].json(), json!({"ref": "v2"}));
    assert_eq!(deploys[1].json(), json!({"ref": null}));
    assert_eq!(deploys[0].content_type.as_deref(), Some(JSON));
    assert_eq!(
        c.deploy_app("nope", &CreateDeployRequest::default())
            .await
            .unwrap_err()
            .code(),
        Some(ErrorCode::AppNotFound)
    );

    let all = c.list_all_deploys("web").await.unwrap();
    assert_eq!(
        all.iter().map(|d| d.number).collect::<Vec<_>>(),
        [3, 2, 1],
        "newest first, every page"
    );
    let p = c.list_deploys("web", Some(1), Some("c1")).await.unwrap();
    assert_eq!((p.data[0].number, p.next_cursor), (2, None));
    assert_eq!(
        c.get_deploy("web", "dep-2").await.unwrap().state,
        DeployState::Live
    );
    assert_eq!(
        c.deploy_logs("web", "dep-2").await.unwrap(),
        "cloning…\nbuilding\n"
    );
    assert_eq!(c.app_logs("web").await.unwrap(), "listening on 3000\n");

    let r = c
        .rollback_app(
            "web",
            &RollbackRequest {
                deploy_id: Some("dep-1".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!((r.id.as_str(), r.state), ("dep-1", DeployState::Live));
    assert_eq!(
        find(&log, "POST /v1/apps/web/rollback").json(),
        json!({"deploy_id": "dep-1"})
    );

    let a = c.rotate_app_deploy_key("web").await.unwrap();
    assert!(a.deploy_key.starts_with("ssh-ed25519 "), "{a:?}");
    find(&log, "POST /v1/apps/web/deploy-key");

    c.delete_app("web").await.unwrap();
    assert_eq!(
        c.delete_app("nope").await.unwrap_err().code(),
        Some(ErrorCode::AppNotFound)
    );
    let sent = lines(&log);
    assert!(!sent.iter().any(|l| l.contains("no route")), "{sent:?}");
    for want in [
        "GET /v1/apps?cursor=web",
        "GET /v1/apps?limit=1",
        "GET /v1/apps/web/deploys?cursor=c2",
        "GET /v1/apps/web/deploys?limit=1&cursor=c1",
    ] {
        assert!(sent.contains(&want.to_owned()), "{want} not in {sent:?}");
    }
}

#[tokio::test]
async fn tarballs_are_uploaded_as_gzip() {
    let (url, log) = server(|line, body, n| match line {
        // The first upload is answered 503 once: retried with the same body and key.
        "POST /v1/apps/web/deploys" if n == 0 => (
            503,
            JSON,
            r#"{"error":{"code":"unavailable","message":"busy","request_id":"r"}}"#.into(),
        ),
        "POST /v1/apps/web/deploys" if body.starts_with(&[0x1f, 0x8b]) => {
            (202, JSON, deploy("dep-9", 9, "upload", "queued"))
        }
        "POST /v1/apps/busy/deploys" => (
            503,
            JSON,
            r#"{"error":{"code":"unavailable","message":"busy","request_id":"r"}}"#.into(),
        ),
        "POST /v1/apps/nope/deploys" => (404, JSON, NOT_FOUND.into()),
        _ => (
            400,
            JSON,
            r#"{"error":{"code":"invalid_argument","message":"not gzip","request_id":"r"}}"#.into(),
        ),
    })
    .await;
    let c = client(&url);
    let tarball: Vec<u8> = [0x1f, 0x8b, 8, 0].into_iter().chain(0..200u8).collect();

    let d = c.deploy_app_tarball("web", tarball.clone()).await.unwrap();
    assert_eq!(
        (d.git_ref.as_str(), d.state),
        ("upload", DeployState::Queued)
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &tarball).unwrap();
    c.deploy_app_tarball_file("web", file.path()).await.unwrap();
    let chunks = tarball
        .chunks(64)
        .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    c.deploy_app_tarball_stream("web", futures::stream::iter(chunks))
        .await
        .unwrap();

    let seen: Vec<Seen> = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    for s in &seen {
        assert_eq!(s.line, "POST /v1/apps/web/deploys");
        assert_eq!(s.content_type.as_deref(), Some("application/gzip"));
        assert_eq!(s.body, tarball);
        assert!(s.idempotency_key.is_some());
    }
    assert_eq!(
        seen[0].idempotency_key, seen[1].idempotency_key,
        "a retry is the same request"
    );
    assert_ne!(seen[1].idempotency_key, seen[2].idempotency_key);

    // A stream is sent once: a 503 is the answer, not a retry.
    let one = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))]);
    let e = c.deploy_app_tarball_stream("busy", one).await.unwrap_err();
    assert_eq!(e.status(), Some(503));
    let busy = lines(&log).iter().filter(|l| l.contains("/busy/")).count();
    assert_eq!(busy, 1);
    // Bytes are retried as the policy says (3 attempts).
    let e = c
        .deploy_app_tarball("busy", vec![0x1f, 0x8b])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unavailable));
    let busy = lines(&log).iter().filter(|l| l.contains("/busy/")).count();
    assert_eq!(busy, 4);
    let e = c
        .deploy_app_tarball("nope", vec![0x1f, 0x8b])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
    let e = c
        .deploy_app_tarball_file("web", std::path::Path::new("/nonexistent/x.tar.gz"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
}

#[tokio::test]
async fn logs_are_followed_as_server_sent_events() {
    let (url, log) = server(|line, _, _| match line {
        "GET /v1/apps/web/deploys/dep-2/logs?follow=1" => (
            200,
            SSE,
            ": keep-alive\n\nevent: log\ndata: {\"data\":\"cloning\\n\"}\n\nevent: log\r\ndata: {\"data\":\"built\"}\r\n\r\nevent: end\ndata: {\"reason\":\"live\"}\n\n".into(),
        ),
        "GET /v1/apps/web/logs?follow=1" => (
            200,
            SSE,
            "event: log\ndata: {\"data\":\"GET / 200\\n\"}\n\nevent: end\ndata: {\"reason\":\"stopped\"}\n\n".into(),
        ),
        "GET /v1/apps/cut/logs?follow=1" => (200, SSE, "event: log\ndata: {\"data\":\"a\"}\n\n".into()),
        "GET /v1/apps/bad/logs?follow=1" => (200, SSE, "event: log\ndata: nope\n\n".into()),
        _ => (404, JSON, NOT_FOUND.into()),
    })
    .await;
    let c = client(&url);
    let mut s = c.follow_deploy_logs("web", "dep-2").await.unwrap();
    let mut got = Vec::new();
    while let Some(ev) = s.next().await.unwrap() {
        got.push(ev);
    }
    assert_eq!(
        got,
        [
            LogEvent::Log("cloning\n".into()),
            LogEvent::Log("built".into()),
            LogEvent::End("live".into())
        ]
    );
    let mut s = c.follow_app_logs("web").await.unwrap();
    assert_eq!(
        s.next().await.unwrap(),
        Some(LogEvent::Log("GET / 200\n".into()))
    );
    assert_eq!(
        s.next().await.unwrap(),
        Some(LogEvent::End("stopped".into()))
    );
    assert_eq!(s.next().await.unwrap(), None);
    // A stream cut short ends without `End`.
    let mut s = c.follow_app_logs("cut").await.unwrap();
    assert_eq!(s.next().await.unwrap(), Some(LogEvent::Log("a".into())));
    assert_eq!(s.next().await.unwrap(), None);
    let mut s = c.follow_app_logs("bad").await.unwrap();
    assert!(matches!(s.next().await.unwrap_err(), Error::Decode { .. }));
    let e = c.follow_deploy_logs("nope", "dep-1").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
    assert!(lines(&log).contains(&"GET /v1/apps/web/logs?follow=1".to_owned()));
}

#[tokio::test]
async fn wait_for_deploy_polls_until_the_deploy_ends() {
    let (url, log) = server(|line, _, n| match line {
        "GET /v1/apps/web/deploys/dep-1" => {
            let state = ["queued", "cloning", "building"]
                .get(n)
                .unwrap_or(&"failed");
            (200, JSON, deploy("dep-1", 1, "main", state))
        }
        "GET /v1/apps/web/deploys/slow" => (200, JSON, deploy("slow", 2, "main", "baking")),
        _ => (404, JSON, NOT_FOUND.into()),
    })
    .await;
    let c = client(&url);
    let d = c
        .wait_for_deploy("web", "dep-1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(d.state, DeployState::Failed);
    assert_eq!(lines(&log).len(), 4);
    let t = std::time::Instant::now();
    let e = c
        .wait_for_deploy("web", "slow", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(e.to_string().contains("still baking"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let e = c
        .wait_for_deploy("nope", "dep-1", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AppNotFound));
}
