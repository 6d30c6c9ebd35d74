//! Hardening 2, item 7: where an API key is read from (`?access_token=` only on the streams a
//! browser opens without headers; the `Bearer` scheme in any case), a 404 for deleting a code
//! context that is not there, and metadata without control characters.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};

use super::{answer, call, create, document, kernel_sandbox, rows};

/// `method path` with `authorization` as the only credential (none when `None`).
async fn call_as(
    s: &FakeStack,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    answer(s, req.body(body).unwrap()).await
}

/// Hardening: `?access_token=` counts only where a browser cannot send a header (a `GET` of an
/// SSE log or a WebSocket route), so keys of calls that can send one stay out of access logs. A
/// streaming `POST` with the key in its URL only is unauthenticated.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_in_the_url_counts_only_on_streams_a_browser_opens() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let token = format!("access_token={}", s.key);

    for (path, body) in [
        (
            format!("/v1/sandboxes/{id}/exec/stream?{token}"),
            json!({"cmd": "true"}),
        ),
        (
            format!("/v1/sandboxes/{id}/code/stream?{token}"),
            json!({"code": "1"}),
        ),
        (
            format!("/v1/sandboxes/{id}/exec?{token}"),
            json!({"cmd": "true"}),
        ),
    ] {
        let (st, v) = call_as(&s, "POST", &path, None, Some(body)).await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized")),
            "POST {path}: {v}"
        );
        assert!(v["error"]["request_id"].is_string(), "{v}");
    }
    // The SSE log, which a browser's EventSource opens, still takes it.
    let (st, v) = call_as(
        &s,
        "GET",
        &format!("/v1/sandboxes/{id}/logs?follow=false&{token}"),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}

/// Hardening: the `Bearer` scheme is case-insensitive (RFC 7235), any other scheme is not a key.
#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_case_insensitive() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} {}", s.key);
        let (st, v) = call_as(&s, "GET", "/v1/sandboxes", Some(&auth), None).await;
        assert_eq!(st, StatusCode::OK, "{scheme}: {v}");
    }
    let auth = format!("Basic {}", s.key);
    let (st, v) = call_as(&s, "GET", "/v1/sandboxes", Some(&auth), None).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized")),
        "{v}"
    );
}

/// Hardening: deleting a code context that is not there (never made, or deleted already) is a
/// 404, as the document says; `default` always exists, so deleting it (a reset) is a 204.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_code_context_that_is_not_there_is_not_found() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (id, _kernels) = kernel_sandbox(&s).await;
    let contexts = format!("/v1/sandboxes/{id}/code/contexts");
    let not_found = |st: StatusCode, v: &Value, ctx: &str| {
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{ctx}: {v}"
        );
        assert_eq!(
            v["error"]["message"],
            format!("code context {ctx} not found (create it with POST …/code/contexts)")
        );
    };

    let (st, v) = call(&s, "DELETE", &format!("{contexts}/ctx-none"), None).await;
    not_found(st, &v, "ctx-none");
    let (st, c) = call(&s, "POST", &contexts, Some(json!({}))).await;
    assert_eq!(st, StatusCode::CREATED, "{c}");
    let ctx = c["id"].as_str().unwrap();
    let (st, v) = call(&s, "DELETE", &format!("{contexts}/{ctx}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, v) = call(&s, "DELETE", &format!("{contexts}/{ctx}"), None).await;
    not_found(st, &v, ctx);
    let (st, v) = call(&s, "DELETE", &format!("{contexts}/default"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");

    let doc = document();
    let responses =
        &doc["paths"]["/v1/sandboxes/{id}/code/contexts/{context_id}"]["delete"]["responses"];
    assert!(responses["404"].is_object(), "{responses}");
}

/// Hardening: metadata keys with control characters (NUL, newline, …) and values with a NUL
/// are refused with the field named, on create and on patch, and change nothing.
#[tokio::test(flavor = "multi_thread")]
async fn metadata_with_control_characters_is_refused() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for (metadata, field) in [
        (json!({"a\nb": "v"}), "metadata"),
        (json!({"a\u{0}b": "v"}), "metadata"),
        (json!({"a\rb": "v"}), "metadata"),
        (json!({"k": "a\u{0}b"}), "metadata.k"),
    ] {
        let (st, v) = call(
            &s,
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "fake", "metadata": metadata})),
        )
        .await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_argument")),
            "{metadata}: {v}"
        );
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{message}");
    }
    assert_eq!(rows(&s).await, 0);

    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "fake", "metadata": {"team": "a\nb"}})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "PATCH",
        &format!("/v1/sandboxes/{id}"),
        Some(json!({"metadata": {"x\ny": "v"}})),
    )
    .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_argument")),
        "{v}"
    );
    let (_, v) = call(&s, "GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(v["metadata"], json!({"team": "a\nb"}), "{v}");
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}
