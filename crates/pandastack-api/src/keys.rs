//! API keys of the caller's workspace.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api_types::{self as wire, CreateKeyRequest, CreatedKey, ErrorCode, List};
use pandastack_store::KeyRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::{rfc3339, App};

fn key_wire(k: &KeyRow) -> wire::Key {
    wire::Key {
        id: k.id.clone(),
        name: k.name.clone(),
        prefix: k.prefix.clone(),
        created_at: rfc3339(k.created_at),
        revoked: k.revoked_at.is_some(),
    }
}

/// List the workspace's API keys (never their secrets).
#[utoipa::path(
    get,
    path = "/v1/keys",
    operation_id = "list_keys",
    tag = "keys",
    responses((status = 200, description = "Keys", body = List<wire::Key>))
)]
pub async fn list(State(app): State<Arc<App>>, caller: Caller) -> ApiResult<Json<List<wire::Key>>> {
    let keys = app.store.keys().list(caller.ws()).await?;
    Ok(Json(List {
        data: keys.iter().map(key_wire).collect(),
        next_cursor: None,
    }))
}

/// Create an API key in the caller's workspace; the secret is in this response only.
#[utoipa::path(
    post,
    path = "/v1/keys",
    operation_id = "create_key",
    tag = "keys",
    request_body = CreateKeyRequest,
    responses((status = 201, description = "The key with its secret", body = CreatedKey))
)]
pub async fn create(
    State(app): State<Arc<App>>,
    caller: Caller,
    Body(req): Body<CreateKeyRequest>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    if req.name.len() > 64 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "name: at most 64 bytes",
        ));
    }
    let (row, secret) = app.store.keys().create(caller.ws(), &req.name).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            key: key_wire(&row),
            secret,
        }),
    ))
}

/// Revoke an API key of the caller's workspace; it stops working at once.
#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    operation_id = "revoke_key",
    tag = "keys",
    params(("id" = String, Path, description = "Key id")),
    responses((status = 204, description = "Revoked"))
)]
pub async fn revoke(
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    match app.store.keys().revoke(caller.ws(), &id).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(pandastack_store::StoreError::NotFound) => {
            Err(ApiError::not_found(ErrorCode::KeyNotFound, "key", &id))
        }
        Err(e) => Err(e.into()),
    }
}
