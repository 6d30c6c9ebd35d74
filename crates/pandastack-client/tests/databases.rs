//! The database calls against a scripted local HTTP server: the paths and bodies they send, the
//! typed answers, `query_failed`, `database_not_found` and a restore outside the window as API
//! errors with their codes, and `wait_database_backup` polling the backup list until the upload
//! ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_client::types::{
    BackupState, CreateBranchRequest, CreateDatabaseRequest, DatabaseState, ErrorCode,
    QueryRequest, RestoreDatabaseRequest,
};
use pandastack_client::{Client, Config, Error};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const DATABASE: &str = r#"{"id":"db-1","name":"app","version":17,"state":"ready","user":"app","connection_uri":"postgres://app:pw@db-1.db.localhost:5432/app?sslmode=require","pooled_uri":"postgres://app:pw@db-1-pooler.db.localhost:5432/app?sslmode=require","http_url":"http://x/v1/databases/db-1","size_gb":1,"memory_mb":1024,"idle_seconds":300,"parent":null,"sandbox_id":"sb-1","volume":"pgdata-db-1","host":"local","created_at":"t"}"#;

fn backup(state: &str) -> String {
    format!(
        r#"{{"id":"vb-1","volume":"pgdata-db-1","size_gb":1,"state":"{state}","bytes_uploaded":5,"chunks":1,"error":null,"created_at":"t","finished_at":null}}"#
    )
}

type Log = Arc<Mutex<Vec<String>>>;

/// Answers each request by `route(method and path, body, how many times that line was seen)`;
/// logs `METHOD /path body` lines.
async fn server(route: fn(&str, &str, usize) -> (u16, String)) -> (String, Log) {
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
                let mut buf = [0u8; 4096];
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
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while req.len() < head_end + len {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = String::from_utf8_lossy(&req[head_end..]).to_string();
                let mut parts = head.split_whitespace();
                let line = format!("{} {}", parts.next().unwrap(), parts.next().unwrap());
                let n = {
                    let mut log = log.lock().unwrap();
                    let n = log.iter().filter(|l| l.starts_with(&line)).count();
                    log.push(format!("{line} {body}").trim_end().to_owned());
                    n
                };
                let (status, answer) = route(&line, &body, n);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
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
}

#[tokio::test]
async fn database_calls_send_what_the_api_defines() {
    let (url, log) = server(|line, _, n| match line {
        "POST /v1/databases" => (201, DATABASE.into()),
        "GET /v1/databases" if n == 0 => (
            200,
            format!(r#"{{"data":[{DATABASE}],"next_cursor":"app"}}"#),
        ),
        "GET /v1/databases?cursor=app" => {
            (200, format!(r#"{{"data":[{DATABASE}],"next_cursor":null}}"#))
        }
        "GET /v1/databases/app" => (200, DATABASE.into()),
        "GET /v1/databases/nope" | "DELETE /v1/databases/nope" => (
            404,
            r#"{"error":{"code":"database_not_found","message":"database nope not found","request_id":"r1"}}"#.into(),
        ),
        "DELETE /v1/databases/db-1" => (204, String::new()),
        "POST /v1/databases/db-1/branches" => (201, DATABASE.replace(r#""parent":null"#, r#""parent":"db-1""#)),
        "POST /v1/databases/db-1/password" => (200, DATABASE.replace(":pw@", ":new@")),
        "POST /v1/databases/db-1/restore" if n == 0 => (200, DATABASE.into()),
        "POST /v1/databases/db-1/restore" => (
            422,
            r#"{"error":{"code":"invalid_argument","message":"2001-01-01T00:00:00Z is outside the restore window of database db-1 (from 2026-01-01T00:00:00Z to 2026-01-02T00:00:00Z)","request_id":"r3"}}"#.into(),
        ),
        "POST /v1/databases/db-1/query" if n == 0 => (
            200,
            r#"{"command":"SELECT","row_count":1,"fields":[{"name":"n","data_type_id":23}],"rows":[[1]]}"#.into(),
        ),
        "POST /v1/databases/db-1/query" => (
            400,
            r#"{"error":{"code":"query_failed","message":"ERROR 42601: syntax error at or near \"selec\"","request_id":"r2"}}"#.into(),
        ),
        "GET /v1/databases/extensions" => (
            200,
            r#"{"versions":{"17":[{"name":"vector","default_version":"0.8.0"}]},"preloaded":["pg_stat_statements"]}"#.into(),
        ),
        "POST /v1/databases/db-1/backups" => (202, backup("uploading")),
        _ => (404, r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into()),
    })
    .await;
    let c = client(&url);
    let d = c
        .create_database(&CreateDatabaseRequest {
            name: "app".into(),
            memory_mb: Some(512),
            idle_seconds: Some(0),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (d.id.as_str(), d.version, d.state, d.memory_mb),
        ("db-1", 17, DatabaseState::Ready, 1024)
    );
    assert_eq!(c.list_all_databases().await.unwrap().len(), 2);
    assert_eq!(c.get_database("app").await.unwrap().id, "db-1");
    let e = c.get_database("nope").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::DatabaseNotFound));
    assert_eq!(e.status(), Some(404));
    let b = c
        .branch_database("db-1", &CreateBranchRequest::default())
        .await
        .unwrap();
    assert_eq!(b.parent.as_deref(), Some("db-1"));
    c.branch_database(
        "db-1",
        &CreateBranchRequest {
            from_time: Some("2026-01-01T12:00:00Z".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let restore = |t: &str| RestoreDatabaseRequest { to_time: t.into() };
    let d = c
        .restore_database("db-1", &restore("2026-01-01T12:30:00Z"))
        .await
        .unwrap();
    assert_eq!(d.id, "db-1");
    let e = c
        .restore_database("db-1", &restore("2001-01-01T00:00:00Z"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(e.status(), Some(422));
    assert!(e.to_string().contains("restore window"), "{e}");
    assert!(c
        .rotate_database_password("db-1")
        .await
        .unwrap()
        .connection_uri
        .contains(":new@"));
    let q = QueryRequest {
        sql: "select $1::int as n".into(),
        params: vec![serde_json::json!(1)],
        timeout_ms: Some(5000),
    };
    let r = c.query_database("db-1", &q).await.unwrap();
    assert_eq!((r.command.as_str(), r.row_count), ("SELECT", Some(1)));
    assert_eq!(r.rows, vec![vec![serde_json::json!(1)]]);
    let e = c.query_database("db-1", &q).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::QueryFailed));
    assert_eq!(e.status(), Some(400));
    assert!(e.to_string().starts_with("ERROR 42601: "), "{e}");
    let x = c.database_extensions().await.unwrap();
    assert_eq!(x.versions["17"][0].name, "vector");
    assert_eq!(
        c.create_database_backup("db-1").await.unwrap().state,
        BackupState::Uploading
    );
    c.delete_database("db-1").await.unwrap();
    assert_eq!(
        c.delete_database("nope").await.unwrap_err().code(),
        Some(ErrorCode::DatabaseNotFound)
    );
    let log = log.lock().unwrap().clone();
    for want in [
        r#"POST /v1/databases {"name":"app","version":null,"size_gb":null,"memory_mb":512,"idle_seconds":0}"#,
        "GET /v1/databases?cursor=app",
        r#"POST /v1/databases/db-1/branches {"name":null,"from_time":"2026-01-01T12:00:00Z","idle_seconds":null}"#,
        r#"POST /v1/databases/db-1/restore {"to_time":"2026-01-01T12:30:00Z"}"#,
        r#"POST /v1/databases/db-1/query {"sql":"select $1::int as n","params":[1],"timeout_ms":5000}"#,
    ] {
        assert!(log.contains(&want.to_owned()), "{want} not in {log:?}");
    }
}

#[tokio::test]
async fn wait_database_backup_polls_the_list_until_the_upload_ends() {
    let (url, log) = server(|line, _, n| match line {
        "GET /v1/databases/db-1/backups" if n < 2 => (
            200,
            format!(r#"{{"data":[{}],"next_cursor":null}}"#, backup("uploading")),
        ),
        "GET /v1/databases/db-1/backups" => (
            200,
            format!(r#"{{"data":[{}],"next_cursor":null}}"#, backup("done")),
        ),
        "GET /v1/databases/slow/backups" => (
            200,
            format!(r#"{{"data":[{}],"next_cursor":null}}"#, backup("uploading")),
        ),
        _ => (
            404,
            r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into(),
        ),
    })
    .await;
    let c = client(&url);
    let b = c
        .wait_database_backup("db-1", "vb-1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(b.state, BackupState::Done);
    assert_eq!(log.lock().unwrap().len(), 3);
    let e = c
        .wait_database_backup("slow", "vb-1", Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    let e = c
        .wait_database_backup("db-1", "vb-nope", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404));
}
