//! Preview URLs end to end: a real HTTP server inside a real guest, reached through the server's
//! preview proxy at the URL the API hands out — access control (token header, cookie, API key,
//! public ports), streamed bodies both ways, WebSocket, HTTP/2 from the client, a port nobody
//! listens on, and a hibernated sandbox woken by a request with the mapping intact; with
//! sandbox networking, the proxy's connections over the sandbox's network (and through the
//! agent to servers on the guest's loopback), ended with the VM.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{free_port, start_with, Api, Server};
use futures::{SinkExt, StreamExt};
use pandastack_testkit::net::{net_pool, NetNames};
use pandastack_testkit::{bake, runtime, runtime_with_network, within, RuntimeGuard};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const TOKEN_HEADER: &str = "x-pandastack-access-token";
const APP_PORT: u16 = 8000;

/// The app inside the guest: hello, request headers as JSON, a streamed download, the sha256
/// of an upload, and a WebSocket echo (written out here: `minimal` has only the standard
/// library).
const APP: &str = r#"
import base64, hashlib, http.server, json, os, socketserver, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/hello":
            return self.reply(200, b"hello from " + os.uname().nodename.encode())
        if self.path == "/headers":
            h = {k.lower(): v for k, v in self.headers.items()}
            return self.reply(200, json.dumps(h).encode(), "application/json")
        if self.path.startswith("/big/"):
            n = int(self.path[5:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(range(256)) * 256
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
            return
        if self.path == "/ws":
            return self.websocket()
        self.reply(404, b"no such page")

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        h = hashlib.sha256()
        while n > 0:
            b = self.rfile.read(min(n, 65536))
            if not b:
                break
            h.update(b)
            n -= len(b)
        self.reply(200, h.hexdigest().encode())

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = int.from_bytes(r.read(2), "big")
            elif n == 127:
                n = int.from_bytes(r.read(8), "big")
            mask = r.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x00")
                w.flush()
                return
            if op in (1, 2):
                n = len(data)
                if n < 126:
                    head = bytes([0x80 | op, n])
                elif n < 65536:
                    head = bytes([0x80 | op, 126]) + n.to_bytes(2, "big")
                else:
                    head = bytes([0x80 | op, 127]) + n.to_bytes(8, "big")
                w.write(head + data)
                w.flush()

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

async fn server() -> (Server, RuntimeGuard) {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start_with(guard.dir.path(), free_port(), &["--network", "off"]).await;
    (server, guard)
}

/// A client that sends every preview host to the proxy (what DNS does for `*.localhost`).
fn preview_client(server: &Server, url: &str, http2: bool) -> Client {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap();
    let proxy: SocketAddr = server.proxy.parse().unwrap();
    let mut b = Client::builder()
        .resolve(host, proxy)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120));
    if http2 {
        b = b.http2_prior_knowledge();
    }
    b.build().unwrap()
}

/// Starts the app on `port` in sandbox `id` and waits until the proxy reaches it.
async fn start_app(api: &Api<'_>, id: &str, port: u16) {
    let r = api
        .c
        .put(format!(
            "{}/v1/sandboxes/{id}/fs?path=/srv/app.py",
            api.s.url
        ))
        .bearer_auth(&api.s.key)
        .body(APP)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    api.exec(
        id,
        &format!("setsid python3 /srv/app.py {port} </dev/null >/tmp/app.log 2>&1 &"),
    )
    .await;
    within(Duration::from_secs(60), "app listening", async {
        loop {
            let r = api
                .exec(id, &format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\""))
                .await;
            if r["exit_code"] == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

async fn port_url(api: &Api<'_>, id: &str, port: u16) -> Value {
    let (st, v) = api
        .call("GET", &format!("/v1/sandboxes/{id}/ports/{port}/url"), None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn preview_urls_reach_a_port_with_access_control_and_every_protocol() {
    let (server, _guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    start_app(&api, &id, APP_PORT).await;

    let p = port_url(&api, &id, APP_PORT).await;
    let url = p["url"].as_str().unwrap().to_owned();
    let proxy_port = server.proxy.rsplit(':').next().unwrap();
    assert_eq!(
        url,
        format!("http://{APP_PORT}-{id}.localhost:{proxy_port}")
    );
    assert_eq!(
        (p["port"].as_u64(), p["public"].as_bool()),
        (Some(8000), Some(false))
    );
    let token = p["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 32);
    // The same token every time.
    assert_eq!(port_url(&api, &id, 3000).await["token"], token.as_str());
    let c = preview_client(&server, &url, false);

    // Private by default: nothing, a wrong token or another workspace's key get 401.
    let r = c.get(format!("{url}/hello")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains(TOKEN_HEADER));
    let r = c
        .get(format!("{url}/hello"))
        .header(TOKEN_HEADER, "0".repeat(32))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // The token opens it; the app never sees the token or the key.
    let r = get_with_token(&c, &format!("{url}/hello"), &token).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().starts_with("hello from "));
    for (name, value) in [
        (TOKEN_HEADER, token.clone()),
        ("authorization", format!("Bearer {}", server.key)),
    ] {
        let r = c
            .get(format!("{url}/headers"))
            .header(name, &value)
            .header("cookie", "theirs=1")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{name}");
        let seen: Value = r.json().await.unwrap();
        assert!(seen.get(TOKEN_HEADER).is_none(), "{seen}");
        assert!(seen.get("authorization").is_none(), "{seen}");
        assert_eq!(seen["cookie"], "theirs=1", "{seen}");
        assert!(seen["host"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{APP_PORT}-{id}.")));
    }

    // A browser's first visit: the token in the query becomes a cookie and goes away.
    let r = c
        .get(format!("{url}/hello?a=1&pandastack_access={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert_eq!(r.headers()["location"], "/hello?a=1");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.starts_with(&format!("pandastack_access={token};")),
        "{cookie}"
    );
    let r = c
        .get(format!("{url}/hello"))
        .header("cookie", format!("pandastack_access={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // Streamed bodies, both ways.
    let n: usize = 24 << 20;
    let r = get_with_token(&c, &format!("{url}/big/{n}"), &token).await;
    assert_eq!(r.status(), StatusCode::OK);
    let mut got = 0usize;
    let mut want = Sha256::new();
    let mut have = Sha256::new();
    let chunk: Vec<u8> = (0..=255u8).cycle().take(65536).collect();
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        want.update(&chunk[..k]);
        left -= k;
    }
    let mut stream = r.bytes_stream();
    while let Some(b) = stream.next().await {
        let b = b.unwrap();
        got += b.len();
        have.update(&b);
    }
    assert_eq!((got, have.finalize()), (n, want.finalize()));
    let upload: Vec<u8> = (0..(16usize << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let r = c
        .post(format!("{url}/sha256"))
        .header(TOKEN_HEADER, &token)
        .body(upload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), hex(&Sha256::digest(&upload)));

    // HTTP/2 from the client, HTTP/1.1 to the app.
    let h2 = preview_client(&server, &url, true);
    let r = get_with_token(&h2, &format!("{url}/hello"), &token).await;
    assert_eq!(
        (r.version(), r.status()),
        (reqwest::Version::HTTP_2, StatusCode::OK)
    );
    assert!(r.text().await.unwrap().starts_with("hello from "));

    // WebSocket through the proxy.
    let mut ws = ws_connect(&server, &id, &token).await;
    for text in ["one", "two", &"x".repeat(70_000)] {
        ws_echo(&mut ws, text).await;
    }
    ws.close(None).await.unwrap();

    // Public: no token needed; private again: 401 again.
    let (st, v) = api
        .call(
            "PATCH",
            &format!("/v1/sandboxes/{id}/ports/{APP_PORT}"),
            Some(json!({"public": true})),
        )
        .await;
    assert_eq!(
        (st, v["public"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    assert_eq!(port_url(&api, &id, APP_PORT).await["public"], true);
    let r = c.get(format!("{url}/hello")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    api.call(
        "PATCH",
        &format!("/v1/sandboxes/{id}/ports/{APP_PORT}"),
        Some(json!({"public": false})),
    )
    .await;
    let r = c.get(format!("{url}/hello")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // A port nobody listens on: 502 naming the port, at once.
    let closed = port_url(&api, &id, 9).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = preview_client(&server, &closed, false)
        .get(format!("{closed}/"))
        .header(TOKEN_HEADER, &token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "port_not_listening", "{body}");

    // Bad input at the edge.
    for (path, code) in [
        (
            format!("/v1/sandboxes/{id}/ports/0/url"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("/v1/sandboxes/{id}/ports/65536/url"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "/v1/sandboxes/sb-nope/ports/80/url".into(),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(api.call("GET", &path, None).await.0, code, "{path}");
    }
    // An unknown sandbox, and a host that is no preview host.
    let raw = Client::new()
        .get(format!("http://{}/", server.proxy))
        .header(
            "host",
            format!("80-sb-0000000000000000.localhost:{proxy_port}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::NOT_FOUND);
    let raw = Client::new()
        .get(format!("http://{}/", server.proxy))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_wakes_a_hibernated_sandbox_and_counts_as_activity() {
    let (server, _guard) = server().await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api
        .create(
            json!({"template": "minimal", "idle_timeout_seconds": 8, "on_timeout": "hibernate"}),
        )
        .await;
    start_app(&api, &id, APP_PORT).await;
    let p = port_url(&api, &id, APP_PORT).await;
    let (url, token) = (
        p["url"].as_str().unwrap().to_owned(),
        p["token"].as_str().unwrap().to_owned(),
    );
    let c = preview_client(&server, &url, false);
    let hello = || async {
        let r = get_with_token(&c, &format!("{url}/hello"), &token).await;
        (r.status(), r.text().await.unwrap())
    };
    let state = || async {
        let (_, v) = api.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
        v["state"].as_str().unwrap().to_owned()
    };

    // The VM process's CPU time: it only grows while the same process runs; a hibernation and
    // wake in between (a new process) would show as a drop.
    let cpu_ms = || async {
        let (_, v) = api
            .call("GET", &format!("/v1/sandboxes/{id}/metrics"), None)
            .await;
        v["cpu_time_ms"].as_u64()
    };
    // Proxied traffic alone keeps it awake past its idle timeout (an idle Python server uses
    // no CPU, so nothing else counts as activity).
    let mut last = 0;
    for _ in 0..14 {
        let (st, body) = hello().await;
        assert_eq!(st, StatusCode::OK, "{body}");
        assert_eq!(state().await, "running");
        let cpu = cpu_ms().await.expect("a running VM has CPU time");
        assert!(
            cpu >= last,
            "CPU time fell from {last} to {cpu} ms: the VM was replaced"
        );
        last = cpu;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Without it, the idle timeout hibernates it.
    within(Duration::from_secs(60), "idle hibernation", async {
        while state().await != "hibernated" {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;

    // A request wakes it, waits for it, and reaches the same app (its process was hibernated
    // with it) through a new network slot.
    let (st, body) = hello().await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.starts_with("hello from "), "{body}");
    assert_eq!(state().await, "running");

    // Explicit hibernate, then a WebSocket as the first request.
    api.hibernate(&id).await;
    let mut ws = ws_connect(&server, &id, &token).await;
    ws_echo(&mut ws, "after wake").await;
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A WebSocket to the app's `/ws` through the proxy, with the sandbox's token.
async fn ws_connect(server: &Server, id: &str, token: &str) -> Ws {
    let proxy_port = server.proxy.rsplit(':').next().unwrap();
    let tcp = tokio::net::TcpStream::connect(&server.proxy).await.unwrap();
    let mut req = format!("ws://{APP_PORT}-{id}.localhost:{proxy_port}/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert(TOKEN_HEADER, token.parse().unwrap());
    let (ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    ws
}

/// Sends `text` and expects it back.
async fn ws_echo(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.unwrap();
    match within(Duration::from_secs(30), "ws echo", ws.next()).await {
        Some(Ok(Message::Text(t))) => assert_eq!(t.as_str(), text),
        other => panic!("{other:?}"),
    }
}

/// Hibernates sandbox `id` through the API.
/// GET `url` with the sandbox's token.
async fn get_with_token(c: &Client, url: &str, token: &str) -> reqwest::Response {
    c.get(url).header(TOKEN_HEADER, token).send().await.unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A server that answers every GET with the address and port its client connected from, over
/// HTTP/1.1 keep-alive (one connection, one port).
const WHO: &str = r#"
import http.server, socketserver, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = f"{self.client_address[0]} {self.client_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

class S(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True

S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn with_networking_the_proxy_connects_over_the_sandbox_network_and_the_vm_ends_it() {
    // Bake with a NIC (a short-lived pool of its own), then serve with the server's own pool.
    let bake_net = net_pool("tspb", "10.203.6.0/24").await;
    let guard = runtime_with_network(&bake_net).await;
    assert!(bake(&guard, "minimal").await.network);
    drop(bake_net);
    let names = NetNames::new("tspx");
    names.clean();
    let server = start_with(
        guard.dir.path(),
        free_port(),
        &[
            "--network",
            "on",
            "--net-name",
            "tspx",
            "--net-base",
            "10.203.5.0/24",
            "--net-spare",
            "2",
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;
    let r = api
        .c
        .put(format!(
            "{}/v1/sandboxes/{id}/fs?path=/srv/who.py",
            server.url
        ))
        .bearer_auth(&server.key)
        .body(WHO)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // One server on every address of the guest, one on its loopback only.
    for (addr, port) in [("0.0.0.0", 8000), ("127.0.0.1", 8001)] {
        api.exec(
            &id,
            &format!(
                "setsid python3 /srv/who.py {addr} {port} </dev/null >/tmp/who{port}.log 2>&1 &"
            ),
        )
        .await;
    }
    within(Duration::from_secs(60), "servers listening", async {
        loop {
            let r = api
                .exec(&id, "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p)) for p in (8000, 8001)]\"")
                .await;
            if r["exit_code"] == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;

    let who = |port: u16| {
        let api = &api;
        let server = &server;
        let id = id.clone();
        async move {
            let p = port_url(api, &id, port).await;
            let (url, token) = (p["url"].as_str().unwrap(), p["token"].as_str().unwrap());
            let c = preview_client(server, url, false);
            let r = tokio::time::timeout(
                Duration::from_secs(20),
                get_with_token(&c, &format!("{url}/"), token),
            )
            .await
            .unwrap_or_else(|_| panic!("GET port {port} through the proxy: no answer in 20 s"));
            assert_eq!(r.status(), StatusCode::OK);
            r.text().await.unwrap()
        }
    };
    // The server on every address is reached over the sandbox's network: its client is the
    // guest's gateway, the slot's end of the TAP. The one on the loopback refuses that and is
    // reached through the guest agent, from the guest's own loopback.
    let first = who(8000).await;
    assert!(first.starts_with("10.88.0.1 "), "{first}");
    let looped = who(8001).await;
    assert!(looped.starts_with("127.0.0.1 "), "{looped}");
    // The proxy keeps the connection for the next request.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(who(8000).await, first);

    // A hibernation ends it (the proxy would otherwise keep it for seconds, and its next request
    // would go to a VM process that is gone, through a slot that another sandbox may hold): after
    // a wake, the next request comes on a new connection and is answered at once.
    api.hibernate(&id).await;
    assert_eq!(api.exec(&id, "true").await["exit_code"], 0);
    let after = who(8000).await;
    assert!(after.starts_with("10.88.0.1 ") && after != first, "{after}");

    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    drop(server);
    drop(guard);
    names.clean();
}
