//! `GET /v1/usage`'s metered part over a real API and control plane whose host is the
//! [`ScriptedHost`]: readings fed to it by hand, meter passes run by hand. What the route
//! answers equals what the readings sum to (within 1%), a restarted control plane over the same
//! store neither counts a reading twice nor loses one, groups and CSV have their shapes, a bad
//! window or grouping is the caller's error naming its field, and another workspace sees
//! nothing of it.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use pandastack_control::ControlPlane;
use pandastack_host::MetricSample;
use pandastack_store::Store;
use pandastack_testkit::fake::{fake_api, fake_control};
use pandastack_testkit::script::ScriptedHost;
use serde_json::{json, Value};
use tower::ServiceExt;

/// A server (router and control plane, workers not started: the meter runs when the test
/// says) over a store and a scripted host that outlive it.
struct Server {
    control: ControlPlane,
    router: Router,
}

struct Env {
    dir: tempfile::TempDir,
    store: Store,
    host: Arc<ScriptedHost>,
    key: String,
}

impl Env {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        let (_, _, key) = store
            .keys()
            .create_workspace_with_key("metered", 50, 1000)
            .await
            .unwrap();
        Self {
            dir,
            store,
            host: Arc::new(ScriptedHost::new()),
            key,
        }
    }

    /// A server process over the env's store and host (a new one is a restart).
    fn server(&self) -> Server {
        let host: Arc<dyn pandastack_host::Host> = Arc::clone(&self.host) as _;
        let control = fake_control(self.store.clone(), host, self.dir.path());
        let app = Arc::new(fake_api(control.clone()));
        Server {
            control,
            router: pandastack_api::router(app),
        }
    }
}

async fn call(
    s: &Server,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"));
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let resp = s
        .router
        .clone()
        .oneshot(req.body(body).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn json_of(s: &Server, key: &str, path: &str) -> Value {
    let (st, body) = call(s, key, "GET", path, None).await;
    assert_eq!(st, StatusCode::OK, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

const HOUR: i64 = 3_600_000;

/// Readings of one VM every 5 s from `start`: `n` of process `run`, its counters growing by
/// varying amounts from `tx0`.
fn readings(start: i64, run: u32, n: usize, tx0: u64) -> Vec<MetricSample> {
    (0..n)
        .map(|i| MetricSample {
            at_ms: start + i as i64 * 5_000,
            run,
            vcpus: 2,
            net_tx_bytes: Some(tx0 + (i as u64 * i as u64) * 1_000 + i as u64 * 77),
            net_rx_bytes: Some(tx0 / 2 + i as u64 * 500),
            ..Default::default()
        })
        .collect()
}

/// What readings sum to, computed here independently of the meter: (vCPU-seconds,
/// GiB-seconds at `memory_mib`, egress bytes). Consecutive readings of one process count their
/// time and counter growth; a new process's counters count from zero.
fn sum(v: &[MetricSample], memory_mib: f64) -> (f64, f64, u64) {
    let (mut vcpu, mut mem, mut tx) = (0.0, 0.0, 0);
    for (i, s) in v.iter().enumerate() {
        match i.checked_sub(1).map(|j| &v[j]).filter(|p| p.run == s.run) {
            Some(p) => {
                let dt = (s.at_ms - p.at_ms) as f64 / 1e3;
                vcpu += f64::from(s.vcpus) * dt;
                mem += memory_mib / 1024.0 * dt;
                tx += s.net_tx_bytes.unwrap() - p.net_tx_bytes.unwrap();
            }
            None => tx += s.net_tx_bytes.unwrap(),
        }
    }
    (vcpu, mem, tx)
}

fn close(got: f64, want: f64, what: &str) {
    assert!(want > 0.0, "{what}: nothing expected");
    assert!(
        (got - want).abs() <= want * 0.01,
        "{what}: {got} is not within 1% of {want}"
    );
}

fn window(from: i64, to: i64) -> String {
    format!(
        "from={}&to={}",
        pandastack_api::rfc3339(from),
        pandastack_api::rfc3339(to)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_is_the_sum_of_the_readings_across_a_restart() {
    let env = Env::new().await;
    let a = env.server();
    let (st, body) = call(
        &a,
        &env.key,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "base"})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let memory_mib = env.store.sandboxes().by_id(&id).await.unwrap().memory_mib as f64;
    assert!(memory_mib > 0.0);

    // Three quarters of an hour of one process across an hour's edge, then a restarted one.
    let now = pandastack_store::now_ms();
    let start = (now - 2 * HOUR) / HOUR * HOUR + HOUR / 2;
    let mut all = readings(start, 1, 540, 0);
    all.extend(readings(start + 2_710_000, 2, 60, 3_000));
    let q = format!("/v1/usage?{}", window(start - HOUR, now + HOUR));

    // Half of them, a pass; the rest, a pass.
    env.host.record_samples(&id, all[..300].to_vec());
    assert_eq!(a.control.meter_once().await.readings, 300);
    env.host.record_samples(&id, all[300..].to_vec());
    let r = a.control.meter_once().await;
    assert_eq!((r.readings, r.failed), (300, 0), "{r:?}");
    let (vcpu, mem, tx) = sum(&all, memory_mib);
    let check = |v: &Value| {
        let t = &v["metered"]["totals"];
        close(t["vcpu_seconds"].as_f64().unwrap(), vcpu, "vcpu_seconds");
        close(
            t["memory_gib_seconds"].as_f64().unwrap(),
            mem,
            "memory_gib_seconds",
        );
        close(
            t["egress_bytes"].as_f64().unwrap(),
            tx as f64,
            "egress_bytes",
        );
    };
    let before = json_of(&a, &env.key, &q).await;
    check(&before);
    // The old answer's fields are all still there.
    assert!(
        before["sandboxes"]["running"].as_u64().unwrap() >= 1,
        "{before}"
    );

    // A pass again, and a restarted server's passes: the same readings add nothing.
    a.control.meter_once().await;
    let b = env.server();
    assert_eq!(b.control.meter_once().await.readings, 0);
    assert_eq!(
        json_of(&b, &env.key, &q).await["metered"]["totals"],
        before["metered"]["totals"]
    );

    // New readings after the restart count, once, whichever server counts them.
    let more = readings(
        start + 2_710_000 + 300_000,
        2,
        20,
        3_000 + 59 * 59 * 1_000 + 59 * 77,
    );
    env.host.record_samples(&id, more.clone());
    all.extend(more);
    let (x, y) = tokio::join!(b.control.meter_once(), a.control.meter_once());
    assert_eq!(x.readings + y.readings, 20, "{x:?} {y:?}");
    let (vcpu, mem, tx) = sum(&all, memory_mib);
    let after = json_of(&b, &env.key, &q).await;
    let t = &after["metered"]["totals"];
    close(t["vcpu_seconds"].as_f64().unwrap(), vcpu, "vcpu_seconds");
    close(
        t["memory_gib_seconds"].as_f64().unwrap(),
        mem,
        "memory_gib_seconds",
    );
    close(
        t["egress_bytes"].as_f64().unwrap(),
        tx as f64,
        "egress_bytes",
    );

    // By hour: the hours the readings fell in, in order, summing to the totals.
    let v = json_of(&b, &env.key, &format!("{q}&group_by=hour")).await;
    let groups = v["metered"]["groups"].as_array().unwrap();
    assert!(groups.len() >= 2, "{v}");
    assert!(groups
        .windows(2)
        .all(|w| w[0]["start"].as_str() < w[1]["start"].as_str()));
    let by_hour: f64 = groups
        .iter()
        .map(|g| g["usage"]["vcpu_seconds"].as_f64().unwrap())
        .sum();
    close(by_hour, vcpu, "vcpu_seconds by hour");
    // By resource: the one sandbox.
    let v = json_of(&b, &env.key, &format!("{q}&group_by=resource")).await;
    assert_eq!(v["metered"]["group_by"], json!(["kind", "resource"]));
    let groups = v["metered"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{v}");
    assert_eq!(groups[0]["kind"], "sandbox");
    assert_eq!(groups[0]["resource_id"], id.as_str());

    // CSV: a header row, a row per group.
    let (st, text) = call(
        &b,
        &env.key,
        "GET",
        &format!("{q}&group_by=kind&format=csv"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("from,to,kind,resource_id,start,vcpu_seconds,"),
        "{text}"
    );
    assert_eq!(lines.len(), 2, "{text}");
    let cells: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(cells[2], "sandbox");
    close(cells[5].parse().unwrap(), vcpu, "vcpu_seconds in CSV");

    // Another workspace sees none of it.
    let (_, _, other) = env
        .store
        .keys()
        .create_workspace_with_key("other", 5, 60)
        .await
        .unwrap();
    let v = json_of(&b, &other, &q).await;
    assert_eq!(v["metered"]["totals"]["vcpu_seconds"], 0.0, "{v}");
    assert_eq!(v["metered"]["totals"]["egress_bytes"], 0, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_is_counted_over_time() {
    let env = Env::new().await;
    let s = env.server();
    let (st, body) = call(
        &s,
        &env.key,
        "POST",
        "/v1/volumes",
        Some(json!({"name": "data", "size_gb": 2})),
    )
    .await;
    assert!(st.is_success(), "{body}");
    let t0 = std::time::Instant::now();
    // The first pass starts the clock; the second counts what is kept since.
    s.control.meter_once().await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    s.control.meter_once().await;
    let most = t0.elapsed().as_secs_f64();
    let v = json_of(&s, &env.key, "/v1/usage?group_by=kind").await;
    let got = v["metered"]["totals"]["storage_gib_hours"]
        .as_f64()
        .unwrap();
    assert!(got >= 2.0 * 0.4 / 3600.0 * 0.99, "{v}");
    assert!(got <= 2.0 * most / 3600.0, "{v}");
    assert_eq!(v["metered"]["groups"][0]["kind"], "volume", "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_window_or_grouping_names_its_field() {
    let env = Env::new().await;
    let s = env.server();
    for (q, field) in [
        ("from=yesterday", "from"),
        ("to=2026-02-30T00:00:00Z", "to"),
        ("from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z", "from"),
        ("from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "to"),
        ("group_by=week", "group_by"),
        ("group_by=day,hour", "group_by"),
        ("format=xml", "format"),
        ("since=1h", "since"),
    ] {
        let (st, body) = call(&s, &env.key, "GET", &format!("/v1/usage?{q}"), None).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{q}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(field), "{q}: {msg}");
    }
    // No window: this month so far, nothing grouped.
    let v = json_of(&s, &env.key, "/v1/usage").await;
    assert_eq!(v["metered"]["group_by"], json!([]));
    assert!(
        v["metered"]["from"]
            .as_str()
            .unwrap()
            .ends_with("-01T00:00:00Z"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_sandboxs_last_readings_are_counted() {
    let env = Env::new().await;
    let s = env.server();
    let (st, body) = call(
        &s,
        &env.key,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "base"})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let memory_mib = env.store.sandboxes().by_id(&id).await.unwrap().memory_mib as f64;
    let now = pandastack_store::now_ms();
    let v = readings(now - 600_000, 1, 100, 0);
    env.host.record_samples(&id, v.clone());
    // No pass before the delete: the delete counts them.
    let (st, body) = call(&s, &env.key, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert!(st.is_success(), "{body}");
    assert_eq!(s.control.meter_once().await.readings, 0);
    let q = format!(
        "/v1/usage?{}&group_by=resource",
        window(now - HOUR, now + HOUR)
    );
    let u = json_of(&s, &env.key, &q).await;
    let (vcpu, _, tx) = sum(&v, memory_mib);
    let g = &u["metered"]["groups"][0];
    assert_eq!(g["resource_id"], id.as_str(), "{u}");
    close(
        g["usage"]["vcpu_seconds"].as_f64().unwrap(),
        vcpu,
        "vcpu_seconds",
    );
    close(
        g["usage"]["egress_bytes"].as_f64().unwrap(),
        tx as f64,
        "egress_bytes",
    );
}
