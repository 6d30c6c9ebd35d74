//! The operator routes (`/v1/hosts`, issue #38): only an admin key reaches them — no key or a
//! bad one is 401, a workspace's key 403 `forbidden` before anything about the host is looked at
//! (nothing changes); the list shows the server's own host (registered as `pandastack server`
//! registers it) and an agent's with their leases, capacity and sandboxes; drain and undrain
//! change a host's state (404 for an unknown host, 409 for a dead one); forget refuses a live
//! host and a dead one that still holds rows, with the store's reason, and removes a dead empty
//! one (then 404).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use pandastack_store::{HostCapacity, Joining, SandboxRow, SandboxState};
use pandastack_testkit::fake::{fake_stack_without_workers as fake_stack, FakeStack};
use serde_json::Value;

use super::answer;

/// `method path` with `key` as the API key (none when `None`).
async fn as_key(s: &FakeStack, key: Option<&str>, method: &str, path: &str) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    answer(s, req.body(Body::empty()).unwrap()).await
}

/// The server's own host registered as `pandastack server` registers it at start, and an
/// admin key in the stack's workspace (made as `pandastack keys create --admin` makes it).
async fn operator(s: &FakeStack) -> String {
    s.store
        .hosts()
        .register(s.control.host_id(), "fake-box")
        .await
        .unwrap();
    let ws = s.store.keys().workspaces().await.unwrap().remove(0);
    let (row, secret) = s.store.keys().create_admin(&ws.id, "ops").await.unwrap();
    assert!(row.admin);
    secret
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// An agent's host `id` as it joins.
fn joining(id: &str) -> Joining {
    Joining {
        id: id.into(),
        name: format!("box-{id}"),
        address: format!("{id}.cluster:7443"),
        capacity: HostCapacity {
            vcpus: 16,
            memory_mib: 65_536,
            disk_bytes: 1 << 40,
            free_slots: 100,
            creates_in_flight: 0,
            slots: 128,
        },
        compat_key: "qemu-7.2/linux-6.12/x86-64-v3".into(),
        templates: vec!["python".into(), "base".into()],
    }
}

/// Host `id` joined a minute ago with an 8 s lease and was reaped: dead.
async fn dead_host(s: &FakeStack, id: &str) {
    let then = now_ms() - 60_000;
    s.store
        .hosts()
        .join(&joining(id), 8_000, then)
        .await
        .unwrap();
    s.store.hosts().reap(now_ms()).await.unwrap();
    assert_eq!(
        s.store.hosts().get(id).await.unwrap().state,
        pandastack_store::HostState::Dead
    );
}

fn assert_error(got: &(StatusCode, Value), status: StatusCode, code: &str, what: &str) {
    assert_eq!(
        (got.0, got.1["error"]["code"].as_str()),
        (status, Some(code)),
        "{what}: {}",
        got.1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_admin_key_reaches_the_operator_routes() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let admin = operator(&s).await;
    let own = s.control.host_id().to_owned();
    let routes = [
        ("GET", "/v1/hosts".to_owned()),
        ("GET", format!("/v1/hosts/{own}")),
        ("POST", format!("/v1/hosts/{own}/drain")),
        ("POST", format!("/v1/hosts/{own}/undrain")),
        ("DELETE", format!("/v1/hosts/{own}")),
        // Refused before the host is looked up: a workspace's key learns nothing of it.
        ("POST", "/v1/hosts/host-nope/drain".to_owned()),
        ("DELETE", "/v1/hosts/host-nope".to_owned()),
    ];
    let wrong = format!("pds_{}", "0".repeat(64));
    for (method, path) in &routes {
        let what = format!("{method} {path}");
        let r = as_key(&s, None, method, path).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized", &what);
        let r = as_key(&s, Some(&wrong), method, path).await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized", &what);
        let r = as_key(&s, Some(&s.key), method, path).await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden", &what);
        let message = r.1["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("admin key") && message.contains("pandastack keys create --admin"),
            "{what}: {message}"
        );
        assert!(r.1["error"]["request_id"].as_str().is_some(), "{what}");
    }
    // Nothing the refused calls named changed.
    let (st, v) = as_key(&s, Some(&admin), "GET", &format!("/v1/hosts/{own}")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "ready", "{v}");

    // The admin key is a key of its workspace like any other, and its list says which it is.
    let (st, v) = as_key(&s, Some(&admin), "GET", "/v1/keys").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let mut keys: Vec<(String, bool)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["admin"].as_bool().unwrap(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [("default".to_owned(), false), ("ops".to_owned(), true)]
    );
    // A key made through the API is never an admin's.
    let (st, v) = as_key(&s, Some(&admin), "POST", "/v1/keys").await;
    assert_eq!(
        (st, &v["admin"]),
        (StatusCode::CREATED, &Value::Bool(false))
    );
    let made = v["secret"].as_str().unwrap().to_owned();
    let r = as_key(&s, Some(&made), "GET", "/v1/hosts").await;
    assert_error(
        &r,
        StatusCode::FORBIDDEN,
        "forbidden",
        "a key made by an admin key",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_list_shows_every_host_and_drain_changes_its_state() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let admin = operator(&s).await;
    let own = s.control.host_id().to_owned();
    let (st, v) = super::create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let before = now_ms();
    s.store
        .hosts()
        .join(&joining("host-agent"), 8_000, before)
        .await
        .unwrap();

    let (st, v) = as_key(&s, Some(&admin), "GET", "/v1/hosts").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let hosts = v["data"].as_array().unwrap();
    let ids: Vec<&str> = hosts.iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["host-agent", own.as_str()], "{v}");
    // The server's own host: no address, no lease, nothing reported; the sandbox just made.
    let h = &hosts[1];
    assert_eq!(
        (
            &h["name"],
            &h["state"],
            &h["address"],
            &h["lease_expires_at"]
        ),
        (
            &Value::from("fake-box"),
            &Value::from("ready"),
            &Value::Null,
            &Value::Null
        ),
        "{h}"
    );
    assert_eq!(
        (&h["epoch"], &h["sandboxes"]),
        (&1.into(), &1.into()),
        "{h}"
    );
    assert_eq!(
        (
            &h["capacity"]["vcpus"],
            &h["capacity"]["slots"],
            &h["templates"]
        ),
        (&0.into(), &0.into(), &serde_json::json!([])),
        "{h}"
    );
    // An agent's host: where it is, its lease (RFC 3339), what it offers.
    let h = &hosts[0];
    assert_eq!(
        (&h["address"], &h["compat_key"], &h["sandboxes"]),
        (
            &Value::from("host-agent.cluster:7443"),
            &Value::from("qemu-7.2/linux-6.12/x86-64-v3"),
            &0.into()
        ),
        "{h}"
    );
    assert_eq!(
        (
            &h["capacity"]["vcpus"],
            &h["capacity"]["memory_mib"],
            &h["capacity"]["free_slots"],
            &h["capacity"]["slots"]
        ),
        (&16.into(), &65_536.into(), &100.into(), &128.into()),
        "{h}"
    );
    assert_eq!(h["templates"], serde_json::json!(["base", "python"]), "{h}");
    let lease = h["lease_expires_at"].as_str().unwrap();
    assert_eq!(lease, pandastack_api::rfc3339(before + 8_000), "{h}");
    assert_eq!(h["epoch"], before, "{h}");

    // Drain and undrain: the answer is the host, and the store says the same.
    for (verb, state) in [
        ("drain", "draining"),
        ("drain", "draining"),
        ("undrain", "ready"),
    ] {
        let (st, v) = as_key(&s, Some(&admin), "POST", &format!("/v1/hosts/{own}/{verb}")).await;
        assert_eq!(
            (st, v["state"].as_str()),
            (StatusCode::OK, Some(state)),
            "{verb}: {v}"
        );
        assert_eq!(v["id"], own.as_str());
        assert_eq!(v["sandboxes"], 1, "{v}");
        let (_, v) = as_key(&s, Some(&admin), "GET", &format!("/v1/hosts/{own}")).await;
        assert_eq!(v["state"], state, "{verb}: {v}");
        assert_eq!(
            s.store.hosts().get(&own).await.unwrap().state.as_str(),
            state
        );
    }

    // Unknown hosts are 404 on every route that names one.
    for (method, path) in [
        ("GET", "/v1/hosts/host-nope"),
        ("POST", "/v1/hosts/host-nope/drain"),
        ("POST", "/v1/hosts/host-nope/undrain"),
        ("DELETE", "/v1/hosts/host-nope"),
    ] {
        let r = as_key(&s, Some(&admin), method, path).await;
        assert_error(&r, StatusCode::NOT_FOUND, "host_not_found", path);
        assert_eq!(r.1["error"]["message"], "host host-nope not found");
    }

    // A dead host is neither drained nor undrained: only its agent joining again revives it.
    dead_host(&s, "host-agent").await;
    for verb in ["drain", "undrain"] {
        let r = as_key(
            &s,
            Some(&admin),
            "POST",
            &format!("/v1/hosts/host-agent/{verb}"),
        )
        .await;
        assert_error(&r, StatusCode::CONFLICT, "conflict", verb);
        assert!(
            r.1["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("host host-agent is dead"),
            "{}",
            r.1
        );
    }
    let (_, v) = as_key(&s, Some(&admin), "GET", "/v1/hosts/host-agent").await;
    assert_eq!(v["state"], "dead", "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn forget_takes_only_a_dead_host_nothing_lives_on() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let admin = operator(&s).await;
    let own = s.control.host_id().to_owned();

    // A live host: refused with the store's reason, and still there.
    let r = as_key(&s, Some(&admin), "DELETE", &format!("/v1/hosts/{own}")).await;
    assert_error(&r, StatusCode::CONFLICT, "conflict", "forget a ready host");
    let message = r.1["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("host {own} is ready, not dead")),
        "{message}"
    );
    let (st, _) = as_key(&s, Some(&admin), "GET", &format!("/v1/hosts/{own}")).await;
    assert_eq!(st, StatusCode::OK);

    // A dead host with a sandbox row left on it: refused, naming what is left.
    dead_host(&s, "host-gone").await;
    let ws = s.store.keys().workspaces().await.unwrap().remove(0);
    let mut row = SandboxRow::service(&ws.id, "host-gone", "fake", Default::default());
    row.state = SandboxState::Running;
    s.store.sandboxes().insert(&row).await.unwrap();
    let r = as_key(&s, Some(&admin), "DELETE", "/v1/hosts/host-gone").await;
    assert_error(
        &r,
        StatusCode::CONFLICT,
        "conflict",
        "forget a host with rows",
    );
    let message = r.1["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("host host-gone still has 1 sandboxes"),
        "{message}"
    );
    let (_, v) = as_key(&s, Some(&admin), "GET", "/v1/hosts/host-gone").await;
    assert_eq!(
        (&v["state"], &v["sandboxes"]),
        (&"dead".into(), &1.into()),
        "{v}"
    );

    // Empty, it is forgotten: 204, then unknown.
    s.store.sandboxes().delete(&row.id).await.unwrap();
    let (st, v) = as_key(&s, Some(&admin), "DELETE", "/v1/hosts/host-gone").await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    for method in ["GET", "DELETE"] {
        let r = as_key(&s, Some(&admin), method, "/v1/hosts/host-gone").await;
        assert_error(&r, StatusCode::NOT_FOUND, "host_not_found", method);
    }
    let (_, v) = as_key(&s, Some(&admin), "GET", "/v1/hosts").await;
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [own.as_str()], "{v}");
}
