//! The volume calls against a scripted local HTTP server: the paths and bodies they send, the
//! typed answers, `volume_busy` as an API error with its code, and `wait_volume_backup` polling
//! until the upload ends (or giving up with [`Error::Timeout`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_client::types::{BackupState, CreateVolumeRequest, ErrorCode};
use pandastack_client::{Client, Config, Error};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Log = Arc<Mutex<Vec<String>>>;

const VOLUME: &str = r#"{"id":"vol-1","name":"ws","size_gb":2,"attached_to":null,"attachments":[{"sandbox_id":"sb-1","path":"/w","read_only":true}],"source":null,"host":"local","created_at":"t"}"#;

fn backup(state: &str) -> String {
    format!(
        r#"{{"id":"vb-1","volume":"ws","size_gb":2,"state":"{state}","bytes_uploaded":5,"chunks":1,"error":null,"created_at":"t","finished_at":null}}"#
    )
}

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
async fn volume_calls_send_what_the_api_defines() {
    let (url, log) = server(|line, _, n| match line {
        "POST /v1/volumes" => (201, VOLUME.into()),
        "GET /v1/volumes" if n == 0 => (
            200,
            format!(r#"{{"data":[{VOLUME}],"next_cursor":"c1"}}"#),
        ),
        "GET /v1/volumes" | "GET /v1/volumes?cursor=c1" => {
            (200, format!(r#"{{"data":[{VOLUME}],"next_cursor":null}}"#))
        }
        "PATCH /v1/volumes/ws" => (200, VOLUME.into()),
        "DELETE /v1/volumes/ws" => (
            409,
            r#"{"error":{"code":"volume_busy","message":"volume ws is mounted by sb-1","request_id":"r1"}}"#.into(),
        ),
        "POST /v1/volumes/ws/snapshots" => (
            201,
            r#"{"id":"vs-1","volume":"ws","size_gb":2,"frozen":true,"created_at":"t"}"#.into(),
        ),
        "GET /v1/volumes/ws/backups" => (200, format!(r#"{{"data":[{}],"next_cursor":null}}"#, backup("done"))),
        _ => (404, r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into()),
    })
    .await;
    let c = client(&url);
    let v = c
        .create_volume(&CreateVolumeRequest {
            name: "ws".into(),
            size_gb: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((v.name.as_str(), v.size_gb), ("ws", 2));
    assert!(v.attachments[0].read_only);
    assert_eq!(c.list_all_volumes().await.unwrap().len(), 2);
    c.grow_volume("ws", 4).await.unwrap();
    let e = c.delete_volume("ws").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::VolumeBusy));
    assert_eq!(e.status(), Some(409));
    assert!(c.create_volume_snapshot("ws").await.unwrap().frozen);
    assert_eq!(
        c.list_volume_backups("ws").await.unwrap()[0].state,
        BackupState::Done
    );
    let log = log.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|l| l.starts_with(r#"POST /v1/volumes {"name":"ws","size_gb":2"#)),
        "{log:?}"
    );
    assert!(
        log.contains(&"GET /v1/volumes?cursor=c1".to_owned()),
        "{log:?}"
    );
    assert!(
        log.contains(&r#"PATCH /v1/volumes/ws {"size_gb":4}"#.to_owned()),
        "{log:?}"
    );
}

#[tokio::test]
async fn wait_volume_backup_polls_until_the_upload_ends() {
    let (url, log) = server(|line, _, n| match line {
        "GET /v1/volumes/ws/backups/vb-1" if n < 2 => (200, backup("uploading")),
        "GET /v1/volumes/ws/backups/vb-1" => (200, backup("done")),
        "GET /v1/volumes/slow/backups/vb-1" => (200, backup("uploading")),
        _ => (
            404,
            r#"{"error":{"code":"not_found","message":"no route","request_id":"r"}}"#.into(),
        ),
    })
    .await;
    let c = client(&url);
    let b = c
        .wait_volume_backup("ws", "vb-1", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(b.state, BackupState::Done);
    assert_eq!(log.lock().unwrap().len(), 3);
    let e = c
        .wait_volume_backup("slow", "vb-1", Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
}
