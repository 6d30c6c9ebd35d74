//! Routes about the API itself: health and the OpenAPI document. Neither needs a key. They take the
//! (unused) state only so that the route table can treat every handler alike.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::ApiState;

/// Liveness: `ok` while the server answers.
#[utoipa::path(
    get,
    path = "/v1/health",
    operation_id = "health",
    tag = "meta",
    responses((status = 200, description = "The server is up", body = String, content_type = "text/plain"))
)]
pub async fn health(_: State<Arc<ApiState>>) -> &'static str {
    "ok"
}

/// This document (OpenAPI 3.1, generated from the server's code).
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn openapi_json(_: State<Arc<ApiState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document_json(),
    )
}
