//! Sandbox resources: create (with idempotency and per-workspace limits), list, get, patch,
//! delete, and lifecycle verbs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateSandboxRequest, Cursor, ErrorCode, List, MigrateRequest,
    PatchSandboxRequest,
};
use pandastack_control::Verb;
use pandastack_store::{Filter, SandboxRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::{rfc3339, ApiState};

pub(crate) fn to_wire(r: &SandboxRow, host: &str) -> wire::Sandbox {
    wire::Sandbox {
        id: r.id.clone(),
        template: r.template.clone(),
        state: r.state,
        cpu: r.vcpus as u32,
        memory_mb: r.memory_mib as u32,
        disk_mbps: r.disk_mbps.max(0) as u64,
        disk_iops: r.disk_iops.max(0) as u64,
        metadata: r.metadata.clone(),
        created_at: rfc3339(r.created_at),
        expires_at: r.expires_at.map(rfc3339),
        ttl_seconds: r.ttl_seconds.map(|v| v as u64),
        idle_timeout_seconds: r.idle_timeout_seconds.map(|v| v as u64),
        on_timeout: r.on_timeout,
        on_host_loss: r.on_host_loss,
        boot_ms: r.boot_ms as u64,
        boot_mode: r.boot_mode.clone(),
        snapshot_id: r.snapshot_id.clone(),
        host: host.to_owned(),
        volumes: r.volumes.clone(),
    }
}

/// The caller's sandbox row, or 404 (also for other workspaces' sandboxes).
pub(crate) async fn owned(app: &ApiState, caller: &Caller, id: &str) -> ApiResult<SandboxRow> {
    Ok(app.control.sandboxes.get(caller.ws(), id).await?)
}

/// The API's name for where a sandbox's VM is.
pub use pandastack_control::row_state as wire_state;

/// Create a sandbox from a template (or a snapshot); returns once it accepts commands.
///
/// Honours `Idempotency-Key`: a retry with the same key and body returns the first result.
#[utoipa::path(
    post,
    path = "/v1/sandboxes",
    operation_id = "create_sandbox",
    tag = "sandboxes",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")),
    request_body = CreateSandboxRequest,
    responses((status = 201, description = "Running sandbox", body = wire::Sandbox))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<CreateSandboxRequest>,
) -> ApiResult<impl IntoResponse> {
    req.validate()?;
    let idem =
        match idempotency::begin(&app, caller.ws(), &headers, "POST /v1/sandboxes", &req).await? {
            Begin::Replay(status, body) => return Ok((status, body)),
            Begin::Proceed(idem) => idem,
        };
    idempotency::to_completion(async move {
        let result = create_sandbox(&app, &caller, &req).await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

async fn create_sandbox(
    app: &ApiState,
    caller: &Caller,
    req: &CreateSandboxRequest,
) -> ApiResult<(StatusCode, wire::Sandbox)> {
    let row = app.control.sandboxes.create(caller.ws(), req).await?;
    Ok((
        StatusCode::CREATED,
        to_wire(&row, app.host_of(&row.host_id)),
    ))
}

/// List the workspace's sandboxes, newest last, filtered by state and metadata.
#[utoipa::path(
    get,
    path = "/v1/sandboxes",
    operation_id = "list_sandboxes",
    tag = "sandboxes",
    params(
        crate::page::PageQuery,
        ("state" = Option<wire::SandboxState>, Query, description = "Only sandboxes in this state"),
        ("metadata.{key}" = Option<String>, Query, description = "Only sandboxes whose metadata has this value for `key` (repeatable)"),
    ),
    responses((status = 200, description = "A page of sandboxes", body = List<wire::Sandbox>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Sandbox>>> {
    let page = crate::page::Page::of(&q)?;
    let state = match q.get("state") {
        Some(s) => Some(wire::SandboxState::parse(s).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidArgument,
                format!("state: unknown state {s:?}"),
            )
        })?),
        None => None,
    };
    let filter = Filter {
        state,
        metadata: q
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("metadata.")?.to_owned(), v.clone())))
            .collect(),
    };
    let mut rows = app
        .control
        .sandboxes
        .list(
            caller.ws(),
            &filter,
            page.after.clone().map(|c| (c.created_at_ms, c.id)),
            page.limit,
        )
        .await?;
    let next_cursor = page.cut(&mut rows, |r| Cursor {
        created_at_ms: r.created_at,
        id: r.id.clone(),
    });
    Ok(Json(List {
        data: rows
            .iter()
            .map(|r| to_wire(r, app.host_of(&r.host_id)))
            .collect(),
        next_cursor,
    }))
}

/// Get a sandbox.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}",
    operation_id = "get_sandbox",
    tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, description = "The sandbox", body = wire::Sandbox))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Sandbox>> {
    let row = owned(&app, &caller, &id).await?;
    Ok(Json(to_wire(&row, app.host_of(&row.host_id))))
}

/// Change a sandbox's TTL (counted from now), idle timeout or metadata (replaced whole).
#[utoipa::path(
    patch,
    path = "/v1/sandboxes/{id}",
    operation_id = "update_sandbox",
    tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = PatchSandboxRequest,
    responses((status = 200, description = "The updated sandbox", body = wire::Sandbox))
)]
pub async fn patch(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<PatchSandboxRequest>,
) -> ApiResult<Json<wire::Sandbox>> {
    req.validate()?;
    let row = app.control.sandboxes.update(caller.ws(), &id, &req).await?;
    Ok(Json(to_wire(&row, app.host_of(&row.host_id))))
}

/// Stop a sandbox and delete its files.
#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}",
    operation_id = "delete_sandbox",
    tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    idempotency::to_completion(async move {
        let row = owned(&app, &caller, &id).await?;
        app.control.sandboxes.delete(&row).await?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

macro_rules! verb {
    ($name:ident, $verb:expr, $path:literal, $op_id:literal, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(
            post,
            path = $path,
            operation_id = $op_id,
            tag = "sandboxes",
            params(("id" = String, Path, description = "Sandbox id")),
            responses((status = 200, description = "The sandbox in its new state", body = wire::Sandbox))
        )]
        pub async fn $name(
            State(app): State<Arc<ApiState>>,
            caller: Caller,
            Path(id): Path<String>,
        ) -> ApiResult<Json<wire::Sandbox>> {
            // A state change runs to the end even if the client leaves (see `to_completion`).
            idempotency::to_completion(async move {
                let row = owned(&app, &caller, &id).await?;
                let row = app.control.sandboxes.requested(row, $verb).await?;
                Ok(Json(to_wire(&row, app.host_of(&row.host_id))))
            })
            .await
        }
    };
}

verb!(
    pause,
    Verb::Pause,
    "/v1/sandboxes/{id}/pause",
    "pause_sandbox",
    "Freeze a sandbox's vCPUs in place (memory stays resident)."
);
verb!(
    resume,
    Verb::Resume,
    "/v1/sandboxes/{id}/resume",
    "resume_sandbox",
    "Resume a paused sandbox (or wake a hibernated one)."
);
verb!(
    hibernate,
    Verb::Hibernate,
    "/v1/sandboxes/{id}/hibernate",
    "hibernate_sandbox",
    "Save a sandbox to disk and stop its VM; any later call on it wakes it. Idempotent."
);
verb!(
    wake,
    Verb::Wake,
    "/v1/sandboxes/{id}/wake",
    "wake_sandbox",
    "Restore a hibernated sandbox. Idempotent."
);

/// Move a sandbox to another host of a cluster, with its memory, processes, files, id, preview
/// URL and metadata; returns it there, running if it was running (or paused), else hibernated.
///
/// A running sandbox is hibernated, its image copied through the object store to a host with
/// the same compatibility key, and woken there; calls on it meanwhile wait for the move to end.
/// 409 `conflict` when it cannot move (a single-host server, a sandbox that is starting or has
/// volumes, the host named is its own); 503 `unavailable` when no host has room. On failure the
/// sandbox stays where it was, as it was.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/migrate",
    operation_id = "migrate_sandbox",
    tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = MigrateRequest,
    responses((status = 200, description = "The sandbox on its new host", body = wire::Sandbox))
)]
pub async fn migrate(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<MigrateRequest>,
) -> ApiResult<Json<wire::Sandbox>> {
    req.validate()?;
    // A move runs to the end even if the client leaves (see `to_completion`).
    idempotency::to_completion(async move {
        let row = owned(&app, &caller, &id).await?;
        let row = app
            .control
            .sandboxes
            .migrate(row, req.host.as_deref())
            .await?;
        Ok(Json(to_wire(&row, app.host_of(&row.host_id))))
    })
    .await
}
