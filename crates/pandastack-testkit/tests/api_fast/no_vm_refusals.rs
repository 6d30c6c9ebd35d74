//! The refusals and empty answers the real-guest end-to-end tests used to check on a server they
//! had started and booted guests for — none of them needs a VM: `databases.rs` (a bad create
//! names its field and makes nothing, an unknown database is `database_not_found`, the
//! extension list) and `server.rs` (no or a wrong key, a bad create, a body over the limit, an
//! unknown sandbox, a fork of too many children) and `functions.rs` (a bad function create, a
//! schedule of a function by a bad name) and `apps.rs` (a bad app create, a taken app name).
//! Here they take milliseconds over the fake stack.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{call, create};

fn code(v: &Value) -> Option<&str> {
    v["error"]["code"].as_str()
}

/// Databases, sandboxes and volumes of the workspace: how many of each are listed.
async fn counts(s: &FakeStack) -> (usize, usize, usize) {
    let mut out = Vec::new();
    for path in ["/v1/databases", "/v1/sandboxes", "/v1/volumes"] {
        let (st, v) = call(s, "GET", path, None).await;
        assert_eq!(st, StatusCode::OK, "{path}: {v}");
        out.push(v["data"].as_array().unwrap().len());
    }
    (out[0], out[1], out[2])
}

/// A database create with a bad field is a 422 naming that field, and makes nothing (from
/// `databases.rs::databases_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_database_create_names_its_field_and_makes_nothing() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for (body, field) in [
        (json!({"name": "Bad-Name"}), "name"),
        (json!({"name": "postgres"}), "name"),
        (json!({"name": "app", "version": 15}), "version"),
        (json!({"name": "app", "size_gb": 0}), "size_gb"),
        (json!({"name": "app", "memory_mb": 100}), "memory_mb"),
        (json!({"name": "app", "memory_mb": 1000}), "memory_mb"),
    ] {
        let (st, v) = call(&s, "POST", "/v1/databases", Some(body.clone())).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{body}: {v}"
        );
    }
    assert_eq!(counts(&s).await, (0, 0, 0));
}

/// An id no database has is `404 database_not_found` (from `databases_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_database_is_not_found() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = call(&s, "GET", "/v1/databases/db-nope", None).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, Some("database_not_found")),
        "{v}"
    );
}

/// The extension list is the `postgres` template's, PostgreSQL 17's with pgvector and the
/// usual contrib ones (from `databases_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn database_extensions_are_the_templates() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, ext) = call(&s, "GET", "/v1/databases/extensions", None).await;
    assert_eq!(st, StatusCode::OK, "{ext}");
    let names: Vec<&str> = ext["versions"]["17"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for want in ["vector", "pg_stat_statements", "pgcrypto", "pg_cron"] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
}

/// No key, or a key that is no key: `401 unauthorized` with a request id (from
/// `server.rs::sandbox_lifecycle_over_http`).
#[tokio::test(flavor = "multi_thread")]
async fn calls_without_a_valid_key_are_unauthorized() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for auth in [None, Some("Bearer pds_0000")] {
        let mut req = Request::builder().method("GET").uri("/v1/sandboxes");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = s
            .router
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(code(&v), Some("unauthorized"), "{auth:?}: {v}");
        assert!(
            v["error"]["request_id"]
                .as_str()
                .unwrap()
                .starts_with("req_"),
            "{v}"
        );
    }
}

/// A bad sandbox create — an unknown template, an unknown field, a body over the 1 MiB limit —
/// is refused with the error envelope and makes nothing; an unknown sandbox is not found (from
/// `sandbox_lifecycle_over_http`).
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_sandbox_create_is_refused_and_makes_nothing() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = call(
        &s,
        "POST",
        "/v1/sandboxes",
        Some(json!({"template": "nope"})),
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, Some("template_not_found")),
        "{v}"
    );
    let (st, v) = call(&s, "POST", "/v1/sandboxes", Some(json!({"bogus": 1}))).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("bogus"),
        "{v}"
    );
    // A JSON body over the 1 MiB limit: 413 with the error envelope. The unread rest of the body
    // makes the connection unusable, so the answer must say it closes it (or the client's next
    // request on it fails: seen in CI as IncompleteMessage).
    let huge = json!({"template": "fake", "metadata": {"k": "x".repeat(2 << 20)}});
    let req = Request::builder()
        .method("POST")
        .uri("/v1/sandboxes")
        .header("authorization", format!("Bearer {}", s.key))
        .header("content-type", "application/json")
        .body(Body::from(huge.to_string()))
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(resp.headers()["connection"], "close");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(code(&v), Some("payload_too_large"), "{v}");

    let (st, v) = call(&s, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(v["data"].as_array().unwrap().is_empty(), "{v}");
    assert!(s.host.list().await.is_empty());
    let (st, v) = call(&s, "GET", "/v1/sandboxes/sb-doesnotexist", None).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::NOT_FOUND, Some("sandbox_not_found")),
        "{v}"
    );
}

/// A fork of more children than the limit (16) is a 422 (from `sandbox_lifecycle_over_http`).
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_of_too_many_children_is_refused() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &s,
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(json!({"count": 17})),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = call(&s, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "no child: {v}");
}

/// A bad function create — an unknown runtime, a handler without its function, no files, a file
/// outside the function, a bad name — is refused naming what is wrong, and makes nothing (from
/// `functions.rs::functions_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_function_create_names_its_field_and_makes_nothing() {
    let s = fake_stack(Duration::from_secs(10)).await;
    for (body, field) in [
        (
            json!({"name": "x", "runtime": "ruby", "handler": "a.b", "files": {"a.rb": ""}}),
            "body",
        ),
        (
            json!({"name": "x", "runtime": "python", "handler": "main", "files": {"main.py": ""}}),
            "handler",
        ),
        (
            json!({"name": "x", "runtime": "python", "handler": "main.h"}),
            "files",
        ),
        (
            json!({"name": "x", "runtime": "python", "handler": "main.h", "files": {"../a.py": ""}}),
            "files",
        ),
        (
            json!({"name": "Bad", "runtime": "python", "handler": "main.h", "files": {"main.py": ""}}),
            "name",
        ),
    ] {
        let (st, v) = call(&s, "POST", "/v1/functions", Some(body.clone())).await;
        assert!(
            st == StatusCode::UNPROCESSABLE_ENTITY || st == StatusCode::BAD_REQUEST,
            "{body}: {st} {v}"
        );
        if field != "body" {
            assert!(
                v["error"]["message"].as_str().unwrap().contains(field),
                "{body}: {v}"
            );
        }
    }
    let (st, list) = call(&s, "GET", "/v1/functions", None).await;
    assert_eq!(st, StatusCode::OK, "{list}");
    assert_eq!(list["data"], json!([]));
}

/// A schedule whose target function name is no name is a 422 (from `functions_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_of_a_function_by_a_bad_name_is_refused() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = call(
        &s,
        "POST",
        "/v1/schedules",
        Some(json!({"name": "bad", "cron": "* * * * *",
                    "target": {"type": "function", "name": "Not A Name"}})),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = call(&s, "GET", "/v1/schedules", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["data"], json!([]), "nothing made: {v}");
}

/// An app create with a bad field — a name, a git URL or ref that could pass for an option,
/// more instances or memory than allowed — is a 422 naming that field, and makes nothing (from
/// `apps.rs::apps_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_app_create_names_its_field_and_makes_nothing() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let git = "https://git.example.com/x.git";
    for (body, field) in [
        (json!({"name": "Bad_Name", "git": {"url": git}}), "name"),
        (
            json!({"name": "ok", "git": {"url": "--upload-pack=x"}}),
            "git.url",
        ),
        (
            json!({"name": "ok", "git": {"url": git, "ref": "-x"}}),
            "git.ref",
        ),
        (
            json!({"name": "ok", "git": {"url": git}, "min_instances": 2}),
            "min_instances",
        ),
        (
            json!({"name": "ok", "git": {"url": git}, "memory_mb": 1000}),
            "memory_mb",
        ),
    ] {
        let (st, v) = call(&s, "POST", "/v1/apps", Some(body.clone())).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{body}: {v}"
        );
    }
    let (st, v) = call(&s, "GET", "/v1/apps", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["data"], json!([]), "{v}");
    assert_eq!(counts(&s).await, (0, 0, 0));
}

/// A second app of a name taken is a 409, and leaves the first as it was (from
/// `apps_end_to_end`).
#[tokio::test(flavor = "multi_thread")]
async fn a_second_app_of_a_taken_name_is_a_conflict() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let first = json!({"name": "site", "git": {"url": "https://git.example.com/site.git"},
                       "deploy": false});
    let (st, v) = call(&s, "POST", "/v1/apps", Some(first)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let again = json!({"name": "site", "git": {"url": "https://git.example.com/x.git"},
                       "deploy": false});
    let (st, v) = call(&s, "POST", "/v1/apps", Some(again)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, Some("conflict")),
        "{v}"
    );
    let (_, v) = call(&s, "GET", "/v1/apps", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    let (_, v) = call(&s, "GET", "/v1/apps/site", None).await;
    assert_eq!(v["git"]["url"], "https://git.example.com/site.git", "{v}");
}
