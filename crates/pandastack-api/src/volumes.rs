//! Volumes: durable disks, their snapshots and their backups. Handlers parse, call the control
//! plane's [`pandastack_control::Volumes`] and map.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateVolumeRequest, ErrorCode, List, PatchVolumeRequest,
};
use pandastack_control::{BackupInfo, VolumeInfo};
use pandastack_store::VolumeSnapshotRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::{rfc3339, ApiState};

fn volume_wire(v: &VolumeInfo, host: &str) -> wire::Volume {
    wire::Volume {
        id: v.row.id.clone(),
        name: v.row.name.clone(),
        state: if v.unavailable {
            wire::VolumeState::Unavailable
        } else {
            wire::VolumeState::Ready
        },
        size_gb: v.row.size_gb as u32,
        attached_to: v.writer().map(str::to_owned),
        attachments: v.mounts.clone(),
        source: v.row.source.clone(),
        host: host.to_owned(),
        created_at: rfc3339(v.row.created_at),
    }
}

fn snapshot_wire(s: &VolumeSnapshotRow, volume: &str) -> wire::VolumeSnapshot {
    wire::VolumeSnapshot {
        id: s.id.clone(),
        volume: volume.to_owned(),
        size_gb: s.size_gb as u32,
        frozen: s.frozen,
        created_at: rfc3339(s.created_at),
    }
}

pub(crate) fn backup_wire(b: &BackupInfo) -> wire::VolumeBackup {
    wire::VolumeBackup {
        id: b.id.clone(),
        volume: b.volume.clone(),
        size_gb: b.size_gb as u32,
        state: b.state,
        bytes_uploaded: b.bytes_uploaded.map(|v| v as u64),
        chunks: b.chunks.map(|v| v as u64),
        error: b.error.clone(),
        created_at: rfc3339(b.created_at),
        finished_at: b.finished_at.map(rfc3339),
    }
}

/// A volume name from a path, or 404 (a name that cannot exist is not found).
fn name_of(name: &str) -> ApiResult<&str> {
    match wire::validate_volume_name("name", name) {
        Ok(()) => Ok(name),
        Err(_) => Err(ApiError::not_found(
            ErrorCode::VolumeNotFound,
            "volume",
            name,
        )),
    }
}

fn id_of<'a>(id: &'a str, what: &str) -> ApiResult<&'a str> {
    if wire::valid_name(id, 32) {
        Ok(id)
    } else {
        Err(ApiError::not_found(ErrorCode::NotFound, what, id))
    }
}

/// Create a volume: empty (`size_gb`), or from a volume snapshot or a backup. Counts against
/// the workspace's volume quota (`quota_exceeded`, 507).
#[utoipa::path(
    post,
    path = "/v1/volumes",
    operation_id = "create_volume",
    tag = "volumes",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")),
    request_body = CreateVolumeRequest,
    responses((status = 201, description = "The volume", body = wire::Volume))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<CreateVolumeRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    req.validate()?;
    let idem =
        match idempotency::begin(&app, caller.ws(), &headers, "POST /v1/volumes", &req).await? {
            Begin::Replay(status, body) => return Ok((status, body)),
            Begin::Proceed(idem) => idem,
        };
    idempotency::to_completion(async move {
        let result = async {
            let v = app.control.volumes.create(caller.ws(), &req).await?;
            Ok((StatusCode::CREATED, volume_wire(&v, &app.host_name)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// List the workspace's volumes by name.
#[utoipa::path(
    get,
    path = "/v1/volumes",
    operation_id = "list_volumes",
    tag = "volumes",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of volumes", body = List<wire::Volume>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Volume>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .volumes
        .list(caller.ws(), page.after.clone().map(|c| c.id), page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |v| wire::Cursor {
        created_at_ms: 0,
        id: v.row.name.clone(),
    });
    Ok(Json(List {
        data: rows
            .iter()
            .map(|v| volume_wire(v, &app.host_name))
            .collect(),
        next_cursor,
    }))
}

/// One volume, with the sandboxes that have it mounted.
#[utoipa::path(
    get,
    path = "/v1/volumes/{name}",
    operation_id = "get_volume",
    tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, description = "The volume", body = wire::Volume))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Volume>> {
    let v = app
        .control
        .volumes
        .get(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(volume_wire(&v, &app.host_name)))
}

/// Grow a volume (file and file system; never shrink). Refused while a sandbox has it mounted
/// read-write (`volume_busy`).
#[utoipa::path(
    patch,
    path = "/v1/volumes/{name}",
    operation_id = "grow_volume",
    tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    request_body = PatchVolumeRequest,
    responses((status = 200, description = "The volume", body = wire::Volume))
)]
pub async fn patch(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<PatchVolumeRequest>,
) -> ApiResult<Json<wire::Volume>> {
    let name = name_of(&name)?;
    req.validate()?;
    let v = app
        .control
        .volumes
        .grow(caller.ws(), name, i64::from(req.size_gb))
        .await?;
    Ok(Json(volume_wire(&v, &app.host_name)))
}

/// Delete a volume and its snapshots (its backups stay in the object store). Refused while a
/// sandbox has it mounted read-write (`volume_busy`, naming the sandbox).
#[utoipa::path(
    delete,
    path = "/v1/volumes/{name}",
    operation_id = "delete_volume",
    tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .volumes
        .delete(caller.ws(), name_of(&name)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Snapshot a volume: instant (a reflink), crash-consistent — a running sandbox that has it
/// mounted read-write has its file system frozen for the moment of the copy.
#[utoipa::path(
    post,
    path = "/v1/volumes/{name}/snapshots",
    operation_id = "create_volume_snapshot",
    tag = "volumes",
    params(
        ("name" = String, Path, description = "Volume name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    responses((status = 201, description = "The snapshot", body = wire::VolumeSnapshot))
)]
pub async fn snapshot(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    name_of(&name)?;
    let scope = format!("POST /v1/volumes/{name}/snapshots");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &()).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = async {
            let s = app.control.volumes.snapshot(caller.ws(), &name).await?;
            Ok((StatusCode::CREATED, snapshot_wire(&s, &name)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// A volume's snapshots, oldest first.
#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/snapshots",
    operation_id = "list_volume_snapshots",
    tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, description = "The volume's snapshots (one page)", body = List<wire::VolumeSnapshot>))
)]
pub async fn snapshots(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<List<wire::VolumeSnapshot>>> {
    let rows = app
        .control
        .volumes
        .snapshots(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(List {
        data: rows.iter().map(|s| snapshot_wire(s, &name)).collect(),
        next_cursor: None,
    }))
}

/// Delete a volume snapshot.
#[utoipa::path(
    delete,
    path = "/v1/volumes/{name}/snapshots/{id}",
    operation_id = "delete_volume_snapshot",
    tag = "volumes",
    params(
        ("name" = String, Path, description = "Volume name"),
        ("id" = String, Path, description = "Volume snapshot id"),
    ),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete_snapshot(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let name = name_of(&name)?;
    let id = id_of(&id, "volume snapshot")?;
    app.control
        .volumes
        .delete_snapshot(caller.ws(), name, id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Back a volume up to the object store: a snapshot now, uploaded in the background (only the
/// chunks the store does not have yet). Poll `GET …/backups/{id}` until `done`.
#[utoipa::path(
    post,
    path = "/v1/volumes/{name}/backups",
    operation_id = "create_volume_backup",
    tag = "volumes",
    params(
        ("name" = String, Path, description = "Volume name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    responses((status = 202, description = "The backup, uploading", body = wire::VolumeBackup))
)]
pub async fn backup(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    name_of(&name)?;
    let scope = format!("POST /v1/volumes/{name}/backups");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &()).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = async {
            let b = app.control.volumes.backup(caller.ws(), &name).await?;
            Ok((StatusCode::ACCEPTED, backup_wire(&b)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// Backups of the volume of this name, oldest first — from the object store too, so they are
/// listed after the volume (or this host's data) is gone.
#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/backups",
    operation_id = "list_volume_backups",
    tag = "volumes",
    params(("name" = String, Path, description = "Volume name")),
    responses((status = 200, description = "The backups (one page)", body = List<wire::VolumeBackup>))
)]
pub async fn backups(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<List<wire::VolumeBackup>>> {
    let rows = app
        .control
        .volumes
        .backups(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(List {
        data: rows.iter().map(backup_wire).collect(),
        next_cursor: None,
    }))
}

/// One backup.
#[utoipa::path(
    get,
    path = "/v1/volumes/{name}/backups/{id}",
    operation_id = "get_volume_backup",
    tag = "volumes",
    params(
        ("name" = String, Path, description = "Volume name"),
        ("id" = String, Path, description = "Backup id"),
    ),
    responses((status = 200, description = "The backup", body = wire::VolumeBackup))
)]
pub async fn get_backup(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Json<wire::VolumeBackup>> {
    let name = name_of(&name)?;
    let id = id_of(&id, "backup")?;
    let b = app
        .control
        .volumes
        .get_backup(caller.ws(), name, id)
        .await?;
    Ok(Json(backup_wire(&b)))
}
