//! Scoped keys (issue #42): a read-only key reads but is refused a create with `403 forbidden`
//! naming the scope it needed, and nothing is made; a key scoped to sandboxes without `exec`
//! manages them but cannot run commands in them; a key makes only keys its own scopes cover,
//! and a key without scopes asked inherits its maker's; an expired key is `401` saying so; a
//! key's last use is recorded; bad scopes and expiries are the caller's error. Every `/v1`
//! route of the document needs a scope of a known kind.

use std::time::Duration;

use axum::http::StatusCode;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};

use super::as_key;

/// A key made through the API by `maker` with `body`; its secret.
async fn make_key(s: &FakeStack, maker: &str, body: Value) -> String {
    let (st, v) = as_key(s, maker, "POST", "/v1/keys", Some(body)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v["secret"].as_str().unwrap().to_owned()
}

fn refused(r: &(StatusCode, Value), scope: &str) {
    assert_eq!(r.0, StatusCode::FORBIDDEN, "{}", r.1);
    assert_eq!(r.1["error"]["code"], "forbidden", "{}", r.1);
    let msg = r.1["error"]["message"].as_str().unwrap();
    assert!(msg.contains(scope), "{scope} not named: {msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_does_only_what_its_scopes_allow() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = as_key(
        &s,
        &s.key,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake"})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();

    // Read-only: lists and reads, but a create is refused, naming the scope, and makes nothing.
    let reader = make_key(&s, &s.key, json!({"name": "ro", "scopes": ["*:read"]})).await;
    let (st, v) = as_key(&s, &reader, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    let r = as_key(
        &s,
        &reader,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake"})),
    )
    .await;
    refused(&r, "sandboxes:write");
    let (_, v) = as_key(&s, &s.key, "GET", "/v1/sandboxes", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "nothing made: {v}");
    let r = as_key(
        &s,
        &reader,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["true"]})),
    )
    .await;
    refused(&r, "sandboxes:exec");

    // Sandboxes' writes but no exec: a hibernate passes, a command does not.
    let manager = make_key(
        &s,
        &s.key,
        json!({"scopes": ["sandboxes:read", "sandboxes:write"]}),
    )
    .await;
    let (st, v) = as_key(
        &s,
        &manager,
        "POST",
        &format!("/v1/sandboxes/{id}/hibernate"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let r = as_key(
        &s,
        &manager,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["true"]})),
    )
    .await;
    refused(&r, "sandboxes:exec");
    let r = as_key(&s, &manager, "GET", "/v1/volumes", None).await;
    refused(&r, "volumes:read");

    // Only keys the maker's scopes cover; without scopes asked, the maker's own.
    let r = as_key(
        &s,
        &reader,
        "POST",
        "/v1/keys",
        Some(json!({"scopes": ["*:read"]})),
    )
    .await;
    refused(&r, "keys:write");
    let r = as_key(
        &s,
        &manager,
        "POST",
        "/v1/keys",
        Some(json!({"scopes": ["*"]})),
    )
    .await;
    refused(&r, "keys:write");
    let keymaker = make_key(&s, &s.key, json!({"scopes": ["keys:*", "sandboxes:read"]})).await;
    let r = as_key(
        &s,
        &keymaker,
        "POST",
        "/v1/keys",
        Some(json!({"scopes": ["sandboxes:write"]})),
    )
    .await;
    refused(&r, "sandboxes:write");
    let (st, v) = as_key(
        &s,
        &keymaker,
        "POST",
        "/v1/keys",
        Some(json!({"name": "inherits"})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["scopes"], json!(["keys:*", "sandboxes:read"]), "{v}");

    // Bad scopes and expiries name their field.
    for body in [
        json!({"scopes": []}),
        json!({"scopes": ["sandbox:read"]}),
        json!({"scopes": ["sandboxes:run"]}),
        json!({"expires_at": "tomorrow"}),
        json!({"expires_at": "2001-01-01T00:00:00Z"}),
    ] {
        let (st, v) = as_key(&s, &s.key, "POST", "/v1/keys", Some(body.clone())).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("scopes") || msg.contains("expires_at"),
            "{body}: {msg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_key_is_refused_and_a_keys_use_is_recorded() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let now = pandastack_store::now_ms();
    let at = pandastack_api::rfc3339(now + 2_000);
    let (st, v) = as_key(
        &s,
        &s.key,
        "POST",
        "/v1/keys",
        Some(json!({"name": "brief", "expires_at": at})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let expires = v["expires_at"].as_str().unwrap().to_owned();
    assert!(v["last_used_at"].is_null(), "{v}");
    let (brief, brief_id) = (
        v["secret"].as_str().unwrap().to_owned(),
        v["id"].as_str().unwrap().to_owned(),
    );
    // A key it makes cannot outlive it.
    let later = pandastack_api::rfc3339(now + 3_600_000);
    let (st, v) = as_key(
        &s,
        &brief,
        "POST",
        "/v1/keys",
        Some(json!({"expires_at": later})),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = as_key(&s, &brief, "POST", "/v1/keys", Some(json!({}))).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        v["expires_at"].as_str(),
        Some(expires.as_str()),
        "inherits: {v}"
    );

    // Used: recorded (off the request's path, so looked for a little).
    let mut used = Value::Null;
    for _ in 0..50 {
        let (_, v) = as_key(&s, &s.key, "GET", "/v1/keys", None).await;
        used = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == brief_id.as_str())
            .unwrap()["last_used_at"]
            .clone();
        if used.is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(used.is_string(), "last_used_at not recorded");

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (st, v) = as_key(&s, &brief, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expired"),
        "{v}"
    );
}

#[test]
fn every_route_needs_a_scope_of_a_known_kind() {
    let public = ["/v1/health", "/v1/openapi.json", "/metrics"];
    let mut wrong = Vec::new();
    for (method, path) in pandastack_api::operations() {
        match pandastack_api_types::needed(method.as_str(), &path) {
            None if public.contains(&path.as_str()) => {}
            None => wrong.push(format!("{method} {path}: no scope")),
            Some((kind, _)) if !pandastack_api_types::SCOPE_KINDS.contains(&kind.as_str()) => {
                wrong.push(format!("{method} {path}: kind {kind} is not a scope kind"))
            }
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
