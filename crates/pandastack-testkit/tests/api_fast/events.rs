//! Events and webhooks through the real HTTP API of the in-process stack: lifecycle changes
//! listed and streamed (SSE, resumed exactly with `Last-Event-ID`), webhooks delivered to a
//! receiver on 127.0.0.1 in the test with Standard Webhooks signatures checked here, retried
//! until a receiver that fails three times takes the fourth, in order per resource,
//! redelivered on request, refused when their URL points inside, and a control plane
//! restarted in the middle of deliveries losing and doubling nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_control_with, fake_stack, fake_stack_with, FakeStack};
use serde_json::{json, Value};
use sha2::Sha256;
use tower::ServiceExt;

use super::{call, create};

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: Vec<u8>,
    /// The status it answered.
    status: u16,
}

/// A webhook receiver on 127.0.0.1: records every request, answers 500 to the first `fail`
/// attempts of each message, after `delay`.
#[derive(Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    url: String,
}

impl Receiver {
    async fn start(fail: usize, delay: Duration) -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let seen = Arc::clone(&got);
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let seen = Arc::clone(&seen);
                async move {
                    tokio::time::sleep(delay).await;
                    let h = |n: &str| {
                        headers
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let id = h("webhook-id");
                    let mut got = seen.lock().unwrap();
                    let before = got.iter().filter(|r| r.id == id).count();
                    let status = if before < fail { 500 } else { 200 };
                    got.push(Received {
                        id,
                        timestamp: h("webhook-timestamp"),
                        signature: h("webhook-signature"),
                        body: body.to_vec(),
                        status,
                    });
                    StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { got, url }
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Message ids answered 200, in the order they were.
    fn delivered(&self) -> Vec<String> {
        self.got()
            .into_iter()
            .filter(|r| r.status == 200)
            .map(|r| r.id)
            .collect()
    }

    async fn until_delivered(&self, n: usize, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            let d = self.delivered();
            if d.len() >= n {
                return d;
            }
            assert!(
                start.elapsed() < limit,
                "{} of {n} deliveries after {limit:?}: {:?}",
                d.len(),
                self.got()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Checks a request's signature as the Standard Webhooks specification defines it, with the
/// `hmac` crate (not the server's code): `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`
/// keyed by the base64 after `whsec_`.
fn verify(secret: &str, r: &Received) {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", r.id, r.timestamp).as_bytes());
    mac.update(&r.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert!(
        r.signature.split(' ').any(|s| s == expected),
        "signature {} is not {expected}",
        r.signature
    );
    let ts: i64 = r.timestamp.parse().unwrap();
    let now = pandastack_store::now_ms() / 1000;
    assert!((now - ts).abs() < 60, "timestamp {ts} is now ({now})");
}

/// A stack whose outbound policy allows 127.0.0.1 (the receiver), as an operator's
/// `--allow-internal-fetch 127.0.0.1` does.
async fn loopback_stack() -> FakeStack {
    fake_stack_with(Duration::from_secs(10), allow_loopback).await
}

fn allow_loopback(c: &mut pandastack_control::ControlConfig) {
    c.outbound = pandastack_outbound::OutboundPolicy::new(vec!["127.0.0.1".parse().unwrap()]);
}

/// The workspace's events of resource `id` (types in order).
async fn types_of(s: &FakeStack, id: &str) -> Vec<String> {
    let (st, v) = call(s, "GET", &format!("/v1/events?resource={id}"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// An SSE stream of `GET /v1/events` read event by event.
struct Stream {
    body: Body,
    buf: String,
}

impl Stream {
    async fn open(s: &FakeStack, query: &str, last_event_id: Option<&str>) -> Self {
        let mut req = Request::builder()
            .uri(format!("/v1/events{query}"))
            .header("authorization", format!("Bearer {}", s.key))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = s
            .router
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Self {
            body: resp.into_body(),
            buf: String::new(),
        }
    }

    /// The next event: (SSE id, SSE event name, data).
    async fn next(&mut self) -> (String, String, Value) {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut name, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if name.is_empty() {
                    continue; // a keep-alive comment
                }
                return (id, name, serde_json::from_str(&data).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("an event within 10 s")
                .expect("the stream goes on")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }

    /// No event within `d`.
    async fn quiet_for(&mut self, d: Duration) {
        if let Ok(e) = tokio::time::timeout(d, self.next()).await {
            panic!("unexpected event {e:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_changes_are_listed_and_streamed_and_a_stream_resumes_exactly() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    for verb in ["pause", "resume", "hibernate", "wake"] {
        let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/{verb}"), None).await;
        assert_eq!(st, StatusCode::OK, "{verb}: {v}");
    }
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(
        types_of(&s, &id).await,
        [
            "sandbox.created",
            "sandbox.paused",
            "sandbox.resumed",
            "sandbox.hibernated",
            "sandbox.woken",
            "sandbox.killed"
        ]
    );
    let (_, page) = call(&s, "GET", "/v1/events?limit=2", None).await;
    let first = &page["data"][0];
    assert_eq!(first["type"], "sandbox.created");
    assert_eq!(first["resource"], json!({"kind": "sandbox", "id": id}));
    assert!(first["data"]["template"].is_string(), "{first}");
    assert!(first["at"].as_str().unwrap().ends_with('Z'));
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (_, rest) = call(&s, "GET", &format!("/v1/events?cursor={cursor}"), None).await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 4);
    assert_eq!(rest["data"][0]["type"], "sandbox.resumed");
    let (_, only) = call(&s, "GET", "/v1/events?type=sandbox.killed", None).await;
    assert_eq!(only["data"].as_array().unwrap().len(), 1);

    // The stream from the start, then resumed after the second event: exactly the rest.
    let mut all = Stream::open(&s, "?cursor=0", None).await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let (sse_id, name, data) = all.next().await;
        assert_eq!(sse_id, data["id"].as_str().unwrap());
        assert_eq!(name, data["type"].as_str().unwrap());
        seen.push((sse_id, name));
    }
    assert_eq!(seen[0].1, "sandbox.created");
    assert_eq!(seen[5].1, "sandbox.killed");
    let mut resumed = Stream::open(&s, "?cursor=0", Some(&seen[1].0)).await;
    for want in &seen[2..] {
        let (sse_id, name, _) = resumed.next().await;
        assert_eq!((&sse_id, &name), (&want.0, &want.1));
    }
    resumed.quiet_for(Duration::from_millis(300)).await;

    // A stream without a cursor starts now, and gets what happens next at once.
    let mut live = Stream::open(&s, "?type=sandbox.*", None).await;
    live.quiet_for(Duration::from_millis(200)).await;
    let t = Instant::now();
    let (_, v) = create(&s).await;
    let (_, name, data) = live.next().await;
    assert_eq!(name, "sandbox.created");
    assert_eq!(data["resource"]["id"], v["id"]);
    eprintln!(
        "a create's event reached a live stream {:?} after the create began",
        t.elapsed()
    );

    // Refusals at the edge.
    for (q, what) in [
        ("?cursor=abc", "cursor"),
        ("?cursor=-1", "cursor"),
        ("?type=sandbox.melted", "type"),
        ("?type=nope.*", "type"),
        ("?limit=0", "limit"),
    ] {
        let (st, v) = call(&s, "GET", &format!("/v1/events{q}"), None).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(what),
            "{v}"
        );
    }
}

/// The receiver fails each message's first three attempts: the fourth gets it (100, 200 and
/// 400 ms later on the tests' schedule), the delivery shows four attempts, the events of the
/// one sandbox arrive in order (none before the one ahead of it is delivered), every request
/// carries a valid signature, and a redeliver sends it once more.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_fails_three_times_gets_each_event_on_the_fourth_in_order() {
    let s = loopback_stack().await;
    let rx = Receiver::start(3, Duration::ZERO).await;
    let (st, hook) = call(
        &s,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": rx.url, "events": ["sandbox.*"]})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{hook}");
    let hook_id = hook["id"].as_str().unwrap().to_owned();
    let secret = hook["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let (_, shown) = call(&s, "GET", &format!("/v1/webhooks/{hook_id}"), None).await;
    assert!(
        shown.get("secret").is_none(),
        "the secret is shown once: {shown}"
    );

    let (_, v) = create(&s).await;
    let id = v["id"].as_str().unwrap().to_owned();
    for verb in ["pause", "resume"] {
        let (st, v) = call(&s, "POST", &format!("/v1/sandboxes/{id}/{verb}"), None).await;
        assert_eq!(st, StatusCode::OK, "{verb}: {v}");
    }
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);

    let delivered = rx.until_delivered(4, Duration::from_secs(20)).await;
    let got = rx.got();
    for r in &got {
        verify(&secret, r);
    }
    let types: Vec<String> = delivered
        .iter()
        .map(|m| {
            let r = got.iter().find(|r| &r.id == m).unwrap();
            let e: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(
                e["id"].as_str(),
                Some(m.as_str()),
                "webhook-id is the event id"
            );
            e["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        types,
        [
            "sandbox.created",
            "sandbox.paused",
            "sandbox.resumed",
            "sandbox.killed"
        ]
    );
    // In order per resource: no request for an event before the one ahead was delivered.
    let mut done = 0;
    for r in &got {
        let pos = delivered.iter().position(|m| *m == r.id).unwrap();
        assert!(
            pos <= done,
            "{} sent before its predecessor was delivered",
            r.id
        );
        if r.status == 200 {
            done += 1;
        }
    }
    assert_eq!(got.len(), 16, "four attempts of each of four events");

    let (st, page) = call(
        &s,
        "GET",
        &format!("/v1/webhooks/{hook_id}/deliveries"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{page}");
    let list = page["data"].as_array().unwrap();
    assert_eq!(list.len(), 4);
    for d in list {
        assert_eq!(d["state"], "delivered", "{d}");
        assert_eq!(d["attempts"], 4, "{d}");
        assert_eq!(d["last_status"], 200, "{d}");
    }
    let first = list.last().unwrap();
    assert_eq!(first["event_type"], "sandbox.created");

    // Redeliver: the receiver gets it once more (it answers 200 now), attempts 5.
    let delivery = first["id"].as_str().unwrap();
    let (st, d) = call(
        &s,
        "POST",
        &format!("/v1/webhooks/{hook_id}/deliveries/{delivery}/redeliver"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{d}");
    assert_eq!(d["state"], "pending");
    rx.until_delivered(5, Duration::from_secs(10)).await;
    let again = rx.got().last().unwrap().clone();
    assert_eq!(again.id, first["event_id"].as_str().unwrap());
    verify(&secret, &again);
    capture(&secret, &again);
    let start = Instant::now();
    loop {
        let (_, page) = call(
            &s,
            "GET",
            &format!("/v1/webhooks/{hook_id}/deliveries"),
            None,
        )
        .await;
        let d = page["data"].as_array().unwrap().last().unwrap().clone();
        if d["attempts"] == 5 && d["state"] == "delivered" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With `PANDASTACK_WEBHOOK_CAPTURE=<file>`, writes one delivery as received (secret, headers,
/// body) for the check with the Standard Webhooks reference library
/// (`sdk/python/tests/test_webhook_signature.py`).
fn capture(secret: &str, r: &Received) {
    let Some(path) = std::env::var_os("PANDASTACK_WEBHOOK_CAPTURE") else {
        return;
    };
    let out = json!({
        "secret": secret,
        "headers": {
            "webhook-id": r.id,
            "webhook-timestamp": r.timestamp,
            "webhook-signature": r.signature,
        },
        "body": String::from_utf8(r.body.clone()).unwrap(),
    });
    std::fs::write(path, out.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_urls_inside_are_refused_unless_allowed_and_requests_are_checked() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/hook",
        "http://[::1]/hook",
        "http://[fd00:ec2::254]/",
    ] {
        let (st, v) = call(
            &s,
            "POST",
            "/v1/webhooks",
            Some(json!({"url": url, "events": ["*"]})),
        )
        .await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {v}");
        assert_eq!(v["error"]["code"], "invalid_argument", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--allow-internal-fetch"),
            "{v}"
        );
    }
    for (body, field) in [
        (
            json!({"url": "ftp://example.com/x", "events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://u:p@example.com/x", "events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://example.com/x", "events": []}),
            "events",
        ),
        (
            json!({"url": "https://example.com/x", "events": ["sandbox.melted"]}),
            "events[0]",
        ),
        (
            json!({"url": "https://example.com/x", "events": ["*"], "secret": "hunter2"}),
            "secret",
        ),
    ] {
        let (st, v) = call(&s, "POST", "/v1/webhooks", Some(body.clone())).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(field),
            "{v}"
        );
    }
    let (st, v) = call(
        &s,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": "https://example.com/x", "events": ["*"], "colour": "red"})),
    )
    .await;
    assert!(st.is_client_error(), "{v}");

    // A public address is taken (its secret as given); another workspace cannot see it.
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let (st, hook) = call(
        &s,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": "http://192.0.43.8:8080/hook", "events": ["sandbox.created", "deploy.*"], "secret": secret})),
    )
    .await;
    // 192.0.43.8 is not in a reserved range: accepted (nothing is sent until an event matches).
    assert_eq!(st, StatusCode::CREATED, "{hook}");
    assert_eq!(hook["secret"], secret);
    let hook_id = hook["id"].as_str().unwrap();
    let (_, _, other_key) = s
        .store
        .keys()
        .create_workspace_with_key("other", 10, 60)
        .await
        .unwrap();
    for (method, path) in [
        ("GET", format!("/v1/webhooks/{hook_id}")),
        ("DELETE", format!("/v1/webhooks/{hook_id}")),
        ("GET", format!("/v1/webhooks/{hook_id}/deliveries")),
        (
            "POST",
            format!("/v1/webhooks/{hook_id}/deliveries/whd_0/redeliver"),
        ),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(&path)
            .header("authorization", format!("Bearer {other_key}"))
            .body(Body::empty())
            .unwrap();
        let resp = s.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method} {path}");
    }
    // A retry with the same Idempotency-Key gets the same webhook (and secret), not a second.
    let retry = || {
        Request::builder()
            .method("POST")
            .uri("/v1/webhooks")
            .header("authorization", format!("Bearer {}", s.key))
            .header("content-type", "application/json")
            .header("idempotency-key", "hook-once")
            .body(Body::from(
                json!({"url": "http://192.0.43.8:8080/other", "events": ["*"]}).to_string(),
            ))
            .unwrap()
    };
    let mut made = Vec::new();
    for _ in 0..2 {
        let resp = s.router.clone().oneshot(retry()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        made.push((v["id"].clone(), v["secret"].clone()));
    }
    assert_eq!(made[0], made[1]);
    let again = format!("/v1/webhooks/{}", made[0].0.as_str().unwrap());
    let (st, _) = call(&s, "DELETE", &again, None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (_, mine) = call(&s, "GET", "/v1/webhooks", None).await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 1);
    let (st, _) = call(&s, "DELETE", &format!("/v1/webhooks/{hook_id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _) = call(&s, "GET", &format!("/v1/webhooks/{hook_id}"), None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // The policy is applied again at each attempt: a webhook whose URL points inside (written
    // before the policy changed, or a name that resolves inside by then) is never sent to.
    let rx = Receiver::start(0, Duration::ZERO).await;
    let ws = s
        .store
        .keys()
        .verify(&s.key)
        .await
        .unwrap()
        .unwrap()
        .workspace_id;
    s.store
        .webhooks()
        .insert(&pandastack_store::WebhookRow {
            id: "wh_inside".into(),
            workspace_id: ws,
            url: rx.url.clone(),
            events: vec!["*".into()],
            secret: secret.into(),
            disabled: false,
            created_at: pandastack_store::now_ms(),
        })
        .await
        .unwrap();
    let (st, _) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED);
    let start = Instant::now();
    let d = loop {
        let (_, page) = call(&s, "GET", "/v1/webhooks/wh_inside/deliveries", None).await;
        let d = page["data"][0].clone();
        if d["attempts"].as_u64().unwrap_or(0) >= 1 {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        d["last_error"]
            .as_str()
            .unwrap()
            .contains("outbound policy"),
        "{d}"
    );
    assert!(rx.got().is_empty(), "nothing reached the address inside");
}

/// Deliveries under way when the control plane stops (as a server's restart does) are
/// finished or left pending, and the new control plane sends what is left: the receiver
/// counts every event exactly once, in order per resource.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_in_the_middle_of_deliveries_loses_and_doubles_nothing() {
    let s = loopback_stack().await;
    let rx = Receiver::start(0, Duration::from_millis(40)).await;
    let (st, hook) = call(
        &s,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": rx.url, "events": ["*"]})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{hook}");
    let secret = hook["secret"].as_str().unwrap().to_owned();
    let ws = s
        .store
        .keys()
        .verify(&s.key)
        .await
        .unwrap()
        .unwrap()
        .workspace_id;
    let emit = |control: pandastack_control::ControlPlane, range: std::ops::Range<usize>| {
        let ws = ws.clone();
        async move {
            for i in range {
                let id = format!("sb-r{}", i % 3);
                control
                    .events
                    .emit(
                        &ws,
                        "sandbox.paused",
                        pandastack_control::ResourceKind::Sandbox,
                        &id,
                        json!({"i": i}),
                    )
                    .await;
            }
        }
    };
    emit(s.control.clone(), 0..30).await;
    rx.until_delivered(5, Duration::from_secs(10)).await;
    s.control.shutdown(false).await;
    let at_stop = rx.got().len();
    assert!(
        at_stop < 30,
        "the restart came after everything was sent ({at_stop})"
    );
    // Events written while no deliverer runs wait in the table.
    emit(s.control.clone(), 30..36).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.got().len(), at_stop, "nothing is sent while stopped");

    let control = fake_control_with(
        s.store.clone(),
        s.host.clone(),
        s.dir.path(),
        allow_loopback,
    );
    control.recover().await.unwrap();
    control.start();
    emit(control.clone(), 36..42).await;
    let delivered = rx.until_delivered(42, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = rx.got();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &got {
        verify(&secret, r);
        *counts.entry(r.id.clone()).or_default() += 1;
    }
    assert_eq!(counts.len(), 42, "every event arrived");
    assert!(counts.values().all(|n| *n == 1), "none twice: {counts:?}");
    assert_eq!(delivered.len(), 42);
    // In order per resource.
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for r in &got {
        let e: Value = serde_json::from_slice(&r.body).unwrap();
        let res = e["resource"]["id"].as_str().unwrap().to_owned();
        let id: i64 = r.id.parse().unwrap();
        let prev = last.insert(res.clone(), id).unwrap_or(0);
        assert!(id > prev, "{res}: {id} after {prev}");
    }
    control.shutdown(false).await;
}

/// What the event path adds to a create: the same creates timed, an emit alone (it queues the
/// event for the writer task), and the writer storing what was queued (per batch one
/// transaction: the counter row, the events, the deliveries of matching webhooks).
#[tokio::test(flavor = "multi_thread")]
async fn the_event_path_costs_a_create_little() {
    let s = loopback_stack().await;
    let rx = Receiver::start(0, Duration::ZERO).await;
    let (st, _) = call(
        &s,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": rx.url, "events": ["sandbox.*"]})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    let ws = s
        .store
        .keys()
        .verify(&s.key)
        .await
        .unwrap()
        .unwrap()
        .workspace_id;
    let mut creates = Vec::new();
    for _ in 0..8 {
        let t = Instant::now();
        let (st, v) = create(&s).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        creates.push(t.elapsed());
        let id = v["id"].as_str().unwrap();
        call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    }
    let mut emits = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        s.control
            .events
            .emit(
                &ws,
                "sandbox.created",
                pandastack_control::ResourceKind::Sandbox,
                &format!("sb-cost{i}"),
                json!({"template": "fake"}),
            )
            .await;
        emits.push(t.elapsed());
    }
    let t = Instant::now();
    s.control.events.flush().await;
    let drained = t.elapsed();
    // Every event queued is stored, each with its delivery.
    let (_, page) = call(
        &s,
        "GET",
        "/v1/events?type=sandbox.created&limit=1000",
        None,
    )
    .await;
    let stored = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["resource"]["id"].as_str().unwrap().starts_with("sb-cost"))
        .count();
    assert_eq!(stored, 200);
    creates.sort();
    emits.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize];
    eprintln!(
        "create over the fake driver: p50 {:?}, max {:?}; one emit (queued): p50 {:?}, p99 {:?}; the rest of 200 stored with their deliveries (SQLite) {:?} after the last",
        p(&creates, 0.5),
        p(&creates, 1.0),
        p(&emits, 0.5),
        p(&emits, 0.99),
        drained
    );
    assert!(p(&emits, 0.5) < Duration::from_millis(50));
}
