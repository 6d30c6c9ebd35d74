//! The operator routes: every host of the platform, its drain and undrain, and forgetting a dead
//! one. Hosts belong to no workspace, so these take an admin key ([`Admin`]: 401 without a
//! valid key, 403 for a key that is not an admin's) and see every host and every workspace's
//! sandboxes on it. The rules (a dead host is neither drained nor undrained; only a dead host
//! that nothing lives on is forgotten) are the store's (`pandastack_store::Hosts`); a handler
//! calls it and maps.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api_types::{self as wire, ErrorCode, List};
use pandastack_store::{HostRow, HostState, StoreError};

use crate::error::{ApiError, ApiResult};
use crate::extract::Admin;
use crate::{rfc3339, ApiState};

fn state_wire(s: HostState) -> wire::HostState {
    match s {
        HostState::Ready => wire::HostState::Ready,
        HostState::Draining => wire::HostState::Draining,
        HostState::Dead => wire::HostState::Dead,
    }
}

fn host_wire(h: &HostRow, sandboxes: i64) -> wire::Host {
    let n = |v: i64| v.max(0) as u64;
    wire::Host {
        id: h.id.clone(),
        name: h.name.clone(),
        address: h.address.clone(),
        state: state_wire(h.state),
        epoch: n(h.epoch),
        lease_expires_at: (h.lease_until > 0).then(|| rfc3339(h.lease_until)),
        capacity: wire::HostCapacity {
            vcpus: n(h.capacity.vcpus),
            memory_mib: n(h.capacity.memory_mib),
            disk_bytes: n(h.capacity.disk_bytes),
            free_slots: n(h.capacity.free_slots),
            creates_in_flight: n(h.capacity.creates_in_flight),
            slots: n(h.capacity.slots),
        },
        compat_key: h.compat_key.clone(),
        templates: h.templates.clone(),
        sandboxes: n(sandboxes),
        created_at: rfc3339(h.created_at),
        last_seen_at: rfc3339(h.last_seen_at),
    }
}

/// What a refusal of the store about host `id` answers: 404 for a host it does not know, 409
/// with the store's reason for one in the wrong state or still holding rows.
fn host_error(id: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found(ErrorCode::HostNotFound, "host", id),
        e @ StoreError::HostDead { .. } => ApiError::new(
            ErrorCode::Conflict,
            format!("{e}: only its agent joining again makes it ready"),
        ),
        e @ StoreError::HostNotDead { .. } => ApiError::new(
            ErrorCode::Conflict,
            format!("{e}: only a dead host (its lease lapsed) can be forgotten"),
        ),
        e @ StoreError::HostInUse { .. } => ApiError::new(
            ErrorCode::Conflict,
            format!("{e}: it can be forgotten once nothing lives on it"),
        ),
        e => e.into(),
    }
}

/// Host `h` as answered, with the number of sandboxes on it.
async fn answer(app: &ApiState, h: &HostRow) -> ApiResult<wire::Host> {
    let counts = app.store.sandboxes().count_by_host().await?;
    Ok(host_wire(h, counts.get(&h.id).copied().unwrap_or(0)))
}

/// List every host.
///
/// Admin keys only. Every host of the platform by id, with the sandboxes (of every workspace)
/// on it.
#[utoipa::path(
    get,
    path = "/v1/hosts",
    operation_id = "list_hosts",
    tag = "hosts",
    responses((status = 200, description = "Every host, by id (one page)", body = List<wire::Host>))
)]
pub async fn list(State(app): State<Arc<ApiState>>, _: Admin) -> ApiResult<Json<List<wire::Host>>> {
    let hosts = app.store.hosts().list().await?;
    let counts = app.store.sandboxes().count_by_host().await?;
    Ok(Json(List {
        data: hosts
            .iter()
            .map(|h| host_wire(h, counts.get(&h.id).copied().unwrap_or(0)))
            .collect(),
        next_cursor: None,
    }))
}

/// Get one host.
///
/// Admin keys only.
#[utoipa::path(
    get,
    path = "/v1/hosts/{id}",
    operation_id = "get_host",
    tag = "hosts",
    params(("id" = String, Path, description = "Host id")),
    responses((status = 200, description = "The host", body = wire::Host))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Host>> {
    let h = app
        .store
        .hosts()
        .get(&id)
        .await
        .map_err(|e| host_error(&id, e))?;
    Ok(Json(answer(&app, &h).await?))
}

/// Drain a host.
///
/// Admin keys only. The host takes nothing new, and what it holds moves to other hosts in the
/// background, one at a time: its databases (stopped cleanly and their volumes copied, so no
/// commit is lost; clients reconnect), its hibernated sandboxes (every workspace's) and its
/// apps' VMs (`sandboxes` in `GET /v1/hosts/{id}` counts down; a drain asked again moves what
/// is left). Other running sandboxes and volumes stay until they end. A restart of its agent
/// does not undo it. 409 `conflict` for a
/// dead host.
#[utoipa::path(
    post,
    path = "/v1/hosts/{id}/drain",
    operation_id = "drain_host",
    tag = "hosts",
    params(("id" = String, Path, description = "Host id")),
    responses((status = 200, description = "The host, draining", body = wire::Host))
)]
pub async fn drain(
    State(app): State<Arc<ApiState>>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Host>> {
    let h = app
        .store
        .hosts()
        .drain(&id)
        .await
        .map_err(|e| host_error(&id, e))?;
    let (control, host) = (app.control.clone(), id.clone());
    tokio::spawn(async move { control.move_off(&host).await });
    Ok(Json(answer(&app, &h).await?))
}

/// Undrain a host.
///
/// Admin keys only. The host takes work again. 409 `conflict` for a dead host: only its agent
/// joining again makes it ready.
#[utoipa::path(
    post,
    path = "/v1/hosts/{id}/undrain",
    operation_id = "undrain_host",
    tag = "hosts",
    params(("id" = String, Path, description = "Host id")),
    responses((status = 200, description = "The host, ready", body = wire::Host))
)]
pub async fn undrain(
    State(app): State<Arc<ApiState>>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Host>> {
    let h = app
        .store
        .hosts()
        .undrain(&id)
        .await
        .map_err(|e| host_error(&id, e))?;
    Ok(Json(answer(&app, &h).await?))
}

/// Forget a dead host.
///
/// Admin keys only. The host's row goes; its agent joining again later makes it a host anew,
/// with a larger epoch. 409 `conflict` with the reason for a host that is not dead, or on which
/// a sandbox, snapshot, volume or database still lives.
#[utoipa::path(
    delete,
    path = "/v1/hosts/{id}",
    operation_id = "forget_host",
    tag = "hosts",
    params(("id" = String, Path, description = "Host id")),
    responses((status = 204, description = "Forgotten"))
)]
pub async fn forget(
    State(app): State<Arc<ApiState>>,
    _: Admin,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    app.store
        .hosts()
        .forget(&id)
        .await
        .map_err(|e| host_error(&id, e))?;
    Ok(StatusCode::NO_CONTENT)
}
