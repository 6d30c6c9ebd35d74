//! Snapshots and forks.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pandastack_api_types::{self as wire, Cursor, ErrorCode, ForkRequest, ForkResponse, List};
use pandastack_store::{new_id, SnapshotRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::sandboxes::{owned, to_wire};
use crate::{rfc3339, ApiState};

fn snap_wire(s: &SnapshotRow) -> wire::Snapshot {
    wire::Snapshot {
        id: s.id.clone(),
        sandbox_id: s.sandbox_id.clone(),
        template: s.template.clone(),
        created_at: rfc3339(s.created_at),
        size_bytes: s.size_bytes as u64,
        durable_at: s.durable_at.map(rfc3339),
    }
}

/// Snapshot a sandbox (memory and disk from one instant); it keeps running.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/snapshots",
    operation_id = "create_snapshot",
    tag = "snapshots",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    responses((status = 201, description = "The snapshot", body = wire::Snapshot))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let scope = format!("POST /v1/sandboxes/{id}/snapshots");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &()).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = async {
            let row = owned(&app, &caller, &id).await?;
            let (_, s) = app
                .control
                .snapshots
                .snapshot(row, &new_id("snap-"))
                .await?;
            Ok((StatusCode::CREATED, snap_wire(&s)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// Fork a sandbox into `count` running children that start from its current state (all or
/// nothing).
///
/// The children are restored from a snapshot the fork takes (`snapshot_id` in the response).
/// That snapshot is deleted, row and files, with the last sandbox restored from it, unless the
/// request sets `keep_snapshot` (the response says which).
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/fork",
    operation_id = "fork_sandbox",
    tag = "snapshots",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    request_body = ForkRequest,
    responses((status = 201, description = "The children and the snapshot they came from", body = ForkResponse))
)]
pub async fn fork(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(req): Body<ForkRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    req.validate()?;
    let scope = format!("POST /v1/sandboxes/{id}/fork");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &req).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = fork_sandbox(&app, &caller, &id, &req).await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

async fn fork_sandbox(
    app: &Arc<ApiState>,
    caller: &Caller,
    id: &str,
    req: &ForkRequest,
) -> ApiResult<(StatusCode, ForkResponse)> {
    let forked = app.control.snapshots.fork(caller.ws(), id, req).await?;
    let children = forked
        .children
        .iter()
        .map(|r| to_wire(r, app.host_of(&r.host_id)))
        .collect();
    Ok((
        StatusCode::CREATED,
        ForkResponse {
            parent_id: forked.parent.id,
            keep_snapshot: !forked.snapshot.auto_delete,
            snapshot_id: forked.snapshot.id,
            children,
        },
    ))
}

/// List the workspace's snapshots.
#[utoipa::path(
    get,
    path = "/v1/snapshots",
    operation_id = "list_snapshots",
    tag = "snapshots",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of snapshots", body = List<wire::Snapshot>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Snapshot>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .snapshots
        .list(
            caller.ws(),
            page.after.clone().map(|c| (c.created_at_ms, c.id)),
            page.limit,
        )
        .await?;
    let next_cursor = page.cut(&mut rows, |r| Cursor {
        created_at_ms: r.created_at,
        id: r.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(snap_wire).collect(),
        next_cursor,
    }))
}

/// Delete a snapshot.
#[utoipa::path(
    delete,
    path = "/v1/snapshots/{id}",
    operation_id = "delete_snapshot",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let not_found = || ApiError::not_found(ErrorCode::SnapshotNotFound, "snapshot", &id);
    if !wire::valid_name(&id, 32) {
        return Err(not_found());
    }
    match app.control.snapshots.delete(caller.ws(), &id).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(pandastack_store::StoreError::NotFound) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
