//! The streaming and self-describing parts of `/v1`, end to end: the OpenAPI document against the
//! routes the server answers, console logs followed over SSE, exec multiplexed over a WebSocket,
//! an interactive PTY, a file watch and the metrics history. Real binary, real HTTP, real guests under QEMU.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use common::{free_port, start_with, Api, Server};
use futures::{SinkExt, StreamExt};
use pandastack_testkit::{bake, runtime, within, RuntimeGuard};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// A server over a data dir with the `minimal` template baked (no sandbox networking: these
/// tests do not need it and must not share host network objects with other servers).
async fn server(baked: bool) -> (Server, RuntimeGuard) {
    let guard = runtime().await;
    if baked {
        bake(&guard, "minimal").await;
    }
    let server = start_with(guard.dir.path(), free_port(), &["--network", "off"]).await;
    (server, guard)
}

// ---------------------------------------------------------------------------------------------
// OpenAPI

#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_lists_every_route() {
    let (server, _guard) = server(false).await;
    let c = Client::new();
    // Public, and JSON.
    let r = c
        .get(format!("{}/v1/openapi.json", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let doc: Value = r.json().await.expect("openapi.json is JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert!(doc["components"]["schemas"]["ErrorEnvelope"].is_object());
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    // The router is built from the same table; compare with what this build registers.
    let registered: BTreeSet<(String, String)> = pandastack_api::operations()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p))
        .collect();
    assert_eq!(documented, registered);
    assert!(documented.len() >= 30, "{documented:?}");

    // And the server really answers each documented operation (not the fallback, not 405).
    let probe = |method: &str, path: &str| {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        c.request(m, format!("{}{path}", server.url))
            .bearer_auth(&server.key)
            .timeout(Duration::from_secs(60))
            .send()
    };
    let fallback = |status: StatusCode, body: &Value| {
        status == StatusCode::METHOD_NOT_ALLOWED
            || (status == StatusCode::NOT_FOUND && body["error"]["message"] == "no such route")
    };
    let r = probe("GET", "/v1/no/such/route").await.unwrap();
    let (st, body) = (r.status(), r.json::<Value>().await.unwrap());
    assert!(fallback(st, &body), "the probe must recognise the fallback");
    for (method, path) in &documented {
        // Keys are left alone: a probe must not revoke or create the test's own key.
        if path.starts_with("/v1/keys") && method != "GET" {
            continue;
        }
        let concrete = path
            .replace("{id}", "sb-0000000000000000")
            .replace("{port}", "8080");
        let r = probe(method, &concrete).await.unwrap();
        let st = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert!(!fallback(st, &body), "{method} {path}: {st} {body}");
        assert!(st.as_u16() < 500, "{method} {path}: {st} {body}");
    }
    // A WebSocket route without an upgrade says so in the envelope.
    let (st, body) = Api {
        s: &server,
        c: c.clone(),
    }
    .call("GET", "/v1/sandboxes/sb-0000000000000000/exec/ws", None)
    .await;
    assert_eq!(st, StatusCode::UPGRADE_REQUIRED, "{body}");
    assert_eq!(body["error"]["code"], "upgrade_required");
}

// ---------------------------------------------------------------------------------------------
// Console logs

/// A minimal Server-Sent Events reader.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

impl Sse {
    /// The next event as (event name, data); `None` when the stream ends.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut event = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() {
                    continue; // keep-alive comment
                }
                return Some((
                    event,
                    serde_json::from_str(&data).expect("event data is JSON"),
                ));
            }
            let chunk = self.resp.chunk().await.expect("sse body")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads `log` events until their text contains `needle`; returns all the text read.
    async fn until(&mut self, needle: &str) -> String {
        let mut text = String::new();
        within(
            Duration::from_secs(60),
            &format!("log line {needle:?}"),
            async {
                while !text.contains(needle) {
                    let (event, data) = self.next().await.expect("stream open");
                    assert_eq!(event, "log", "{data}");
                    text.push_str(data["data"].as_str().unwrap());
                }
            },
        )
        .await;
        text
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_follow_streams_console_output() {
    let (server, _guard) = server(true).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    api.exec(&id, "echo before-the-stream > /dev/console").await;

    // SSE with the key in the query string, as a browser's EventSource would send it.
    let url = format!("{}/v1/sandboxes/{id}/logs?follow=1", server.url);
    let r = api.c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let resp = api
        .c
        .get(format!("{url}&access_token={}", server.key))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut sse = Sse {
        resp,
        buf: String::new(),
    };
    // What was there before comes first, then what is written after the stream opened.
    sse.until("before-the-stream").await;
    let marker = format!("after-the-stream-{:08x}", rand::random::<u32>());
    api.exec(&id, &format!("echo {marker} > /dev/console"))
        .await;
    sse.until(&marker).await;

    // Without follow: the plain text so far.
    let (st, text) = api
        .call("GET", &format!("/v1/sandboxes/{id}/logs"), None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert!(text.as_str().unwrap().contains(&marker));

    // Deleting the sandbox ends the stream.
    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    within(Duration::from_secs(30), "end event", async {
        loop {
            match sse.next().await {
                Some((e, data)) if e == "end" => {
                    assert_eq!(data["reason"], "deleted");
                    break;
                }
                Some(_) => {}
                None => panic!("stream closed without an end event"),
            }
        }
        assert!(sse.next().await.is_none(), "events after end");
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// WebSockets

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn ws_connect(server: &Server, path: &str) -> Ws {
    let url = format!("{}{path}", server.url.replacen("http", "ws", 1));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", server.key).parse().unwrap(),
    );
    let (ws, resp) = within(
        Duration::from_secs(60),
        "websocket connect",
        tokio_tungstenite::connect_async(req),
    )
    .await
    .expect("websocket upgrade");
    assert_eq!(resp.status(), 101);
    ws
}

/// The next data frame (pings and pongs skipped), bounded in time.
async fn recv(ws: &mut Ws) -> Message {
    within(Duration::from_secs(60), "websocket frame", async {
        loop {
            match ws.next().await.expect("socket open").expect("frame") {
                Message::Ping(_) | Message::Pong(_) => continue,
                m => return m,
            }
        }
    })
    .await
}

async fn recv_json(ws: &mut Ws) -> Value {
    match recv(ws).await {
        Message::Text(t) => serde_json::from_str(&t).expect("JSON frame"),
        m => panic!("expected a text frame, got {m:?}"),
    }
}

async fn send_json(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// What one command produced on the exec socket.
#[derive(Debug, Default)]
struct Outcome {
    stdout: String,
    stderr: String,
    exit: Option<Value>,
}

/// Reads frames until every id in `ids` has exited; returns their outcomes (and fails on an
/// error frame for them).
async fn collect(ws: &mut Ws, ids: &[&str]) -> HashMap<String, Outcome> {
    let mut out: HashMap<String, Outcome> = HashMap::new();
    while ids
        .iter()
        .any(|id| out.get(*id).is_none_or(|o| o.exit.is_none()))
    {
        let f = recv_json(ws).await;
        let id = f["id"].as_str().unwrap_or_default().to_owned();
        let o = out.entry(id).or_default();
        let data = || String::from_utf8(B64.decode(f["data"].as_str().unwrap()).unwrap()).unwrap();
        match f["type"].as_str().unwrap() {
            "stdout" => o.stdout.push_str(&data()),
            "stderr" => o.stderr.push_str(&data()),
            "exit" => o.exit = Some(f.clone()),
            _ => panic!("unexpected frame {f}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_over_websocket() {
    let (server, _guard) = server(true).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let mut ws = ws_connect(&server, &format!("/v1/sandboxes/{id}/exec/ws")).await;

    // stdin reaches the command; closing it ends `cat`.
    send_json(
        &mut ws,
        json!({"type": "start", "id": "c1", "argv": ["cat"]}),
    )
    .await;
    let data = B64.encode("hello over a socket\n");
    send_json(&mut ws, json!({"type": "stdin", "id": "c1", "data": data})).await;
    let f = recv_json(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["id"].as_str()),
        (Some("stdout"), Some("c1")),
        "{f}"
    );
    assert_eq!(
        B64.decode(f["data"].as_str().unwrap()).unwrap(),
        b"hello over a socket\n"
    );
    send_json(&mut ws, json!({"type": "stdin_close", "id": "c1"})).await;
    let o = collect(&mut ws, &["c1"]).await;
    let exit = o["c1"].exit.as_ref().unwrap();
    assert_eq!(
        (exit["exit_code"].as_i64(), exit["timed_out"].as_bool()),
        (Some(0), Some(false))
    );

    // Two commands at once on one socket, each output under its own id; exit codes pass through.
    send_json(
        &mut ws,
        json!({"type": "start", "id": "slow", "cmd": "sleep 1; echo A; echo a >&2"}),
    )
    .await;
    send_json(
        &mut ws,
        json!({"type": "start", "id": "fast", "cmd": "echo B; exit 7", "env": {"X": "1"}}),
    )
    .await;
    let o = collect(&mut ws, &["slow", "fast"]).await;
    assert_eq!(o["slow"].stdout, "A\n");
    assert_eq!(o["slow"].stderr, "a\n");
    assert_eq!(o["slow"].exit.as_ref().unwrap()["exit_code"], 0);
    assert_eq!(o["fast"].stdout, "B\n");
    assert_eq!(o["fast"].exit.as_ref().unwrap()["exit_code"], 7);

    // Kill: the whole process group dies at once (SIGKILL → 137).
    send_json(
        &mut ws,
        json!({"type": "start", "id": "k", "cmd": "sleep 100"}),
    )
    .await;
    // A second start under a running id is refused, and says which id.
    send_json(&mut ws, json!({"type": "start", "id": "k", "cmd": "true"})).await;
    let f = recv_json(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["id"].as_str(), f["code"].as_str()),
        (Some("error"), Some("k"), Some("conflict")),
        "{f}"
    );
    let t = std::time::Instant::now();
    send_json(&mut ws, json!({"type": "kill", "id": "k"})).await;
    let o = collect(&mut ws, &["k"]).await;
    assert_eq!(o["k"].exit.as_ref().unwrap()["exit_code"], 137);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // The id is free again once its exit was seen.
    send_json(
        &mut ws,
        json!({"type": "start", "id": "k", "argv": ["true"]}),
    )
    .await;
    let o = collect(&mut ws, &["k"]).await;
    assert_eq!(o["k"].exit.as_ref().unwrap()["exit_code"], 0);

    // Bad frames get error frames; the socket stays usable.
    for (frame, code) in [
        ("not json".to_owned(), "invalid_json"),
        (
            json!({"type": "explode", "id": "x"}).to_string(),
            "invalid_argument",
        ),
        (
            json!({"type": "start", "id": "x"}).to_string(),
            "invalid_argument",
        ),
        (
            json!({"type": "stdin", "id": "nope", "data": "aGk="}).to_string(),
            "not_found",
        ),
        (
            json!({"type": "stdin", "id": "k", "data": "!!"}).to_string(),
            "invalid_argument",
        ),
    ] {
        ws.send(Message::Text(frame.clone().into())).await.unwrap();
        let f = recv_json(&mut ws).await;
        assert_eq!(
            (f["type"].as_str(), f["code"].as_str()),
            (Some("error"), Some(code)),
            "{frame}: {f}"
        );
    }

    // Closing the socket kills what still runs.
    send_json(
        &mut ws,
        json!({"type": "start", "id": "orphan", "cmd": "echo $$ > /tmp/orphan.pid; exec sleep 300"}),
    )
    .await;
    let alive = "test -s /tmp/orphan.pid && test -d /proc/$(cat /tmp/orphan.pid) && echo alive";
    within(Duration::from_secs(30), "orphan started", async {
        while api.exec(&id, &format!("{alive} || true")).await["stdout"] != "alive\n" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    ws.close(None).await.unwrap();
    within(Duration::from_secs(30), "orphan killed", async {
        while api.exec(&id, &format!("{alive} || true")).await["stdout"] == "alive\n" {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    // A hibernated sandbox wakes for a socket.
    let (st, v) = api
        .call("POST", &format!("/v1/sandboxes/{id}/hibernate"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let mut ws = ws_connect(&server, &format!("/v1/sandboxes/{id}/exec/ws")).await;
    send_json(
        &mut ws,
        json!({"type": "start", "id": "w", "cmd": "echo awake"}),
    )
    .await;
    let o = collect(&mut ws, &["w"]).await;
    assert_eq!(o["w"].stdout, "awake\n");
}

/// Terminal output split into lines, `\r` and leading shell prompts (`# `) removed: the
/// terminal echoes input as it arrives, so a prompt may land before a command's output.
fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .split('\n')
        .map(|l| {
            let mut l = l.trim_end_matches('\r');
            while let Some(rest) = l.strip_prefix("# ").or_else(|| l.strip_prefix("$ ")) {
                l = rest;
            }
            l.to_owned()
        })
        .collect()
}

/// Reads terminal output until a line equals `want` (fails with what was read).
async fn until_line(ws: &mut Ws, out: &mut Vec<u8>, want: &str) {
    let read = async {
        while !lines(out).iter().any(|l| l == want) {
            match recv(ws).await {
                Message::Binary(b) => out.extend_from_slice(&b),
                Message::Text(t) => panic!("unexpected control frame {t}"),
                m => panic!("unexpected {m:?}"),
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .is_err()
    {
        panic!(
            "no terminal line {want:?} within 60s; output: {:?}",
            String::from_utf8_lossy(out)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pty_over_websocket() {
    let (server, _guard) = server(true).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let mut ws = ws_connect(
        &server,
        &format!("/v1/sandboxes/{id}/pty?cmd=sh&cols=80&rows=24"),
    )
    .await;
    let mut out = Vec::new();

    ws.send(Message::Binary(b"echo hi\n".to_vec().into()))
        .await
        .unwrap();
    until_line(&mut ws, &mut out, "hi").await;

    ws.send(Message::Binary(b"stty size\n".to_vec().into()))
        .await
        .unwrap();
    until_line(&mut ws, &mut out, "24 80").await;
    send_json(&mut ws, json!({"type": "resize", "cols": 100, "rows": 30})).await;
    ws.send(Message::Binary(b"stty size\n".to_vec().into()))
        .await
        .unwrap();
    until_line(&mut ws, &mut out, "30 100").await;

    // A bad control frame is answered, the terminal goes on.
    send_json(&mut ws, json!({"type": "resize", "cols": 1})).await;
    let f = loop {
        match recv(&mut ws).await {
            Message::Text(t) => break serde_json::from_str::<Value>(&t).unwrap(),
            Message::Binary(b) => out.extend_from_slice(&b),
            m => panic!("unexpected {m:?}"),
        }
    };
    assert_eq!(f["type"], "error", "{f}");

    ws.send(Message::Binary(b"exit 3\n".to_vec().into()))
        .await
        .unwrap();
    let exit = within(Duration::from_secs(60), "exit frame", async {
        loop {
            match recv(&mut ws).await {
                Message::Text(t) => return serde_json::from_str::<Value>(&t).unwrap(),
                Message::Binary(_) => continue,
                m => panic!("unexpected {m:?}"),
            }
        }
    })
    .await;
    assert_eq!(exit, json!({"type": "exit", "exit_code": 3}));
    match recv(&mut ws).await {
        Message::Close(_) => {}
        m => panic!("expected close, got {m:?}"),
    }

    // The key in the query string works too, and bad sizes are refused before the upgrade.
    let mut req = format!(
        "{}/v1/sandboxes/{id}/pty?cols=0",
        server.url.replacen("http", "ws", 1)
    )
    .into_client_request()
    .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", server.key).parse().unwrap(),
    );
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY.as_u16());
        }
        other => panic!("cols=0 was not refused: {other:?}"),
    }
    let url = format!(
        "{}/v1/sandboxes/{id}/pty?cmd=echo%20via-token&access_token={}",
        server.url.replacen("http", "ws", 1),
        server.key
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("upgrade");
    let mut out = Vec::new();
    until_line(&mut ws, &mut out, "via-token").await;
}

// ---------------------------------------------------------------------------------------------
// File watch

/// Watch frames until one of `kind` for `path` (that one included).
async fn until_watch(ws: &mut Ws, kind: &str, path: &str) -> Vec<Value> {
    let mut got = Vec::new();
    loop {
        let f = recv_json(ws).await;
        let done = f["type"] == kind && f["path"] == path;
        got.push(f);
        if done {
            return got;
        }
    }
}

/// A watch over a WebSocket sees what a command writes in a real guest, at every depth, and
/// arms itself again after the sandbox hibernated and woke.
#[tokio::test(flavor = "multi_thread")]
async fn files_watch_over_websocket_survives_a_hibernation() {
    let (server, _guard) = server(true).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let r = api.exec(&id, "mkdir -p /tmp/w").await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let mut ws = ws_connect(
        &server,
        &format!("/v1/sandboxes/{id}/files/watch?path=/tmp/w&recursive=true"),
    )
    .await;
    assert_eq!(
        recv_json(&mut ws).await,
        json!({"type": "ready", "path": "/tmp/w", "recursive": true})
    );

    let r = api.exec(&id, "mkdir /tmp/w/d").await;
    assert_eq!(r["exit_code"], 0, "{r}");
    // Told once the new directory is watched too (what is written in it before that is found
    // by the watcher's scan of it, but a rename out of it then looks like a create).
    let got = until_watch(&mut ws, "create", "/tmp/w/d").await;
    assert_eq!(
        got,
        [json!({"type": "create", "path": "/tmp/w/d", "dir": true})]
    );
    let r = api
        .exec(&id, "echo x > /tmp/w/d/f && mv /tmp/w/d/f /tmp/w/g")
        .await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let got = until_watch(&mut ws, "rename", "/tmp/w/g").await;
    assert!(
        got.contains(&json!({"type": "create", "path": "/tmp/w/d/f", "dir": false})),
        "{got:?}"
    );
    assert_eq!(got.last().unwrap()["from"], "/tmp/w/d/f");

    api.hibernate(&id).await;
    let r = api.exec(&id, "touch /tmp/w/after").await; // wakes it
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(recv_json(&mut ws).await["type"], "ready", "armed again");
    let r = api.exec(&id, "rm /tmp/w/g").await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let got = until_watch(&mut ws, "delete", "/tmp/w/g").await;
    // The touch raced the re-arming: told or not, nothing else is.
    let after = json!({"type": "create", "path": "/tmp/w/after", "dir": false});
    assert!(got[..got.len() - 1].iter().all(|f| *f == after), "{got:?}");
}

// ---------------------------------------------------------------------------------------------
// Metrics history

/// A guest that writes 16 MiB and then keeps its vCPU busy shows it in its metrics: the CPU
/// share of the busy seconds, the disk it used, and its own memory figures (a server reading
/// every 500 ms).
#[tokio::test(flavor = "multi_thread")]
async fn metrics_history_shows_what_a_guest_did() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start_with(
        guard.dir.path(),
        free_port(),
        &["--network", "off", "--sample-interval-ms", "500"],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    // Readings of the quiet guest first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = api
        .exec(
            &id,
            "dd if=/dev/zero of=/root/blob bs=1M count=16 conv=fsync 2>/dev/null && \
             end=$(( $(date +%s) + 3 )); while [ $(date +%s) -lt $end ]; do :; done",
        )
        .await;
    assert_eq!(r["exit_code"], 0, "{r}");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let (st, m) = api
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/metrics?since=2m&step=1"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{m}");
    let points = m["samples"].as_array().unwrap();
    assert!(points.len() >= 5, "{m}");
    let max = |k: &str| {
        points
            .iter()
            .filter_map(|p| p[k].as_f64())
            .fold(0.0, f64::max)
    };
    let min = |k: &str| {
        points
            .iter()
            .filter_map(|p| p[k].as_f64())
            .fold(f64::MAX, f64::min)
    };
    // A busy loop keeps the vCPU (and QEMU's thread running it) busy for seconds.
    assert!(max("cpu_pct") > 40.0, "{m}");
    // The 16 MiB file is on the root filesystem.
    assert!(
        max("disk_bytes") - min("disk_bytes") >= 15.0 * 1048576.0,
        "{m}"
    );
    for p in points {
        let total = p["mem_total_bytes"].as_u64().expect("the guest answers");
        assert!(p["mem_available_bytes"].as_u64().unwrap() < total, "{p}");
        assert!(p["mem_bytes"].as_u64().unwrap() > 0, "{p}");
        assert!(p["net_rx"].is_null(), "no NIC: {p}");
    }
    // Coarser steps fold the same readings.
    let (_, coarse) = api
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/metrics?since=2m&step=60"),
            None,
        )
        .await;
    assert!(coarse["samples"].as_array().unwrap().len() <= 3, "{coarse}");
}
