//! Sandbox resources: create (with idempotency and per-workspace limits), list, get, patch,
//! delete, and lifecycle verbs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateSandboxRequest, Cursor, ErrorCode, List, PatchSandboxRequest,
};
use pandastack_control::{Source, Verb};
use pandastack_host::VmView as SandboxView;
use pandastack_store::{now_ms, Filter, MountClaim, SandboxRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::{rfc3339, App};

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
        boot_ms: r.boot_ms as u64,
        boot_mode: r.boot_mode.clone(),
        snapshot_id: r.snapshot_id.clone(),
        host: host.to_owned(),
        volumes: r.volumes.clone(),
    }
}

/// The caller's sandbox row, or 404 (also for other workspaces' sandboxes).
pub(crate) async fn owned(app: &App, caller: &Caller, id: &str) -> ApiResult<SandboxRow> {
    if !wire::valid_name(id, 32) {
        return Err(ApiError::not_found(
            ErrorCode::SandboxNotFound,
            "sandbox",
            id,
        ));
    }
    match app.store.sandboxes().get(caller.ws(), id).await {
        Ok(r) => Ok(r),
        Err(pandastack_store::StoreError::NotFound) => Err(ApiError::not_found(
            ErrorCode::SandboxNotFound,
            "sandbox",
            id,
        )),
        Err(e) => Err(e.into()),
    }
}

/// Records the host's view of a sandbox (state after an operation) and API activity.
pub(crate) async fn record(
    app: &App,
    row: SandboxRow,
    view: &SandboxView,
) -> ApiResult<SandboxRow> {
    Ok(app.sandboxes.record(row, view).await?)
}

/// Enforces the workspace's create-rate limit (the limit on running sandboxes is checked as
/// their rows go in: [`pandastack_store::Sandboxes::insert_within_limit`]).
pub(crate) async fn check_rate(app: &App, ws: &str, adding: i64) -> ApiResult<()> {
    let limits = app.store.keys().workspace(ws).await?;
    let mut rate = app.rate.lock().unwrap_or_else(|p| p.into_inner());
    let entry = rate.entry(ws.to_owned()).or_insert((Instant::now(), 0));
    if entry.0.elapsed() >= Duration::from_secs(60) {
        *entry = (Instant::now(), 0);
    }
    if entry.1 + adding > limits.creates_per_minute {
        let wait = 60u64.saturating_sub(entry.0.elapsed().as_secs()).max(1);
        let mut e = ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "workspace create rate of {} per minute reached",
                limits.creates_per_minute
            ),
        );
        e.retry_after = Some(wait);
        return Err(e);
    }
    entry.1 += adding;
    Ok(())
}

/// The API's name for where a sandbox's VM is.
pub use pandastack_control::row_state as wire_state;

pub(crate) fn new_row(
    host_id: &str,
    ws: &str,
    id: &str,
    req: &CreateSandboxRequest,
    view_template: &str,
    now: i64,
) -> SandboxRow {
    SandboxRow {
        id: id.to_owned(),
        workspace_id: ws.to_owned(),
        host_id: host_id.to_owned(),
        template: view_template.to_owned(),
        state: wire::SandboxState::Starting,
        vcpus: 0,
        memory_mib: 0,
        // What the create asks for until it finishes (then what its VM runs with).
        disk_mbps: req.disk_mbps.map_or(0, |v| v as i64),
        disk_iops: req.disk_iops.map_or(0, |v| v as i64),
        metadata: req.metadata.clone(),
        env: req.env.clone(),
        ttl_seconds: req.ttl_seconds.map(|v| v as i64),
        idle_timeout_seconds: req.idle_timeout_seconds.map(|v| v as i64),
        on_timeout: req.on_timeout,
        created_at: now,
        expires_at: req.ttl_seconds.map(|t| now + t as i64 * 1000),
        last_activity_at: now,
        boot_ms: 0,
        boot_mode: "restore".into(),
        snapshot_id: req.snapshot_id.clone(),
        parent_id: None,
        access_token: pandastack_store::new_token(),
        public_ports: Default::default(),
        volumes: req.volumes.clone(),
    }
}

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
    State(app): State<Arc<App>>,
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
    app: &App,
    caller: &Caller,
    req: &CreateSandboxRequest,
) -> ApiResult<(StatusCode, wire::Sandbox)> {
    app.disk_max.check(req)?;
    if let Some(snap) = &req.snapshot_id {
        if app.store.snapshots().get(caller.ws(), snap).await.is_err() {
            return Err(ApiError::not_found(
                ErrorCode::SnapshotNotFound,
                "snapshot",
                snap,
            ));
        }
    }
    // A template of the workspace's own, else the catalog's.
    let resolved = match &req.snapshot_id {
        Some(_) => None,
        None => Some(app.templates.resolve(caller.ws(), &req.template).await?),
    };
    check_rate(app, caller.ws(), 1).await?;
    let id = pandastack_store::new_id("sb-");
    let mut row = new_row(&app.host_id, caller.ws(), &id, req, &req.template, now_ms());
    if let Some(r) = &resolved {
        // The image's environment, under the caller's.
        let mut env = r.env.clone();
        env.extend(std::mem::take(&mut row.env));
        row.env = env;
    }
    let source = match (&req.snapshot_id, &resolved) {
        (Some(snap), _) => Source::Snapshot(snap.clone()),
        (None, Some(r)) => Source::Template(r.baked.clone()),
        (None, None) => Source::Template(req.template.clone()),
    };
    let row = match source {
        Source::Template(t) if !req.volumes.is_empty() => {
            let claims: Vec<MountClaim> = req
                .volumes
                .iter()
                .map(|v| MountClaim {
                    name: v.name.clone(),
                    path: v.path.clone(),
                    read_only: v.read_only,
                })
                .collect();
            app.sandboxes
                .create_with_volumes(row, &t, &claims, &app.volumes)
                .await?
        }
        source => app.sandboxes.create(row, source).await?,
    };
    Ok((StatusCode::CREATED, to_wire(&row, &app.host_name)))
}

/// List the workspace's sandboxes, newest last, filtered by state and metadata.
#[utoipa::path(
    get,
    path = "/v1/sandboxes",
    operation_id = "list_sandboxes",
    tag = "sandboxes",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("state" = Option<wire::SandboxState>, Query, description = "Only sandboxes in this state"),
        ("metadata.{key}" = Option<String>, Query, description = "Only sandboxes whose metadata has this value for `key` (repeatable)"),
    ),
    responses((status = 200, description = "A page of sandboxes", body = List<wire::Sandbox>))
)]
pub async fn list(
    State(app): State<Arc<App>>,
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
        .store
        .sandboxes()
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
        data: rows.iter().map(|r| to_wire(r, &app.host_name)).collect(),
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Sandbox>> {
    let row = owned(&app, &caller, &id).await?;
    Ok(Json(to_wire(&row, &app.host_name)))
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<PatchSandboxRequest>,
) -> ApiResult<Json<wire::Sandbox>> {
    req.validate()?;
    let mut row = owned(&app, &caller, &id).await?;
    if let Some(t) = req.ttl_seconds {
        row.ttl_seconds = Some(t as i64);
        row.expires_at = Some(now_ms() + t as i64 * 1000);
    }
    if let Some(t) = req.idle_timeout_seconds {
        row.idle_timeout_seconds = Some(t as i64);
    }
    if let Some(m) = req.metadata {
        row.metadata = m;
    }
    app.store.sandboxes().update(&row).await?;
    Ok(Json(to_wire(&row, &app.host_name)))
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    idempotency::to_completion(async move {
        let row = owned(&app, &caller, &id).await?;
        app.sandboxes.delete(&row).await?;
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
            State(app): State<Arc<App>>,
            caller: Caller,
            Path(id): Path<String>,
        ) -> ApiResult<Json<wire::Sandbox>> {
            // A state change runs to the end even if the client leaves (see `to_completion`).
            idempotency::to_completion(async move {
                let row = owned(&app, &caller, &id).await?;
                let row = app.sandboxes.requested(row, $verb).await?;
                Ok(Json(to_wire(&row, &app.host_name)))
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

/// Host-side resource use of a sandbox's VM: `state`, and while it runs `host_rss_bytes`,
/// `host_pss_bytes`, `cpu_time_ms`.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/metrics",
    operation_id = "sandbox_metrics",
    tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, description = "Resource use", body = Object))
)]
pub async fn metrics(
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let row = owned(&app, &caller, &id).await?;
    let stats = app.host.stats(&row.id).await?;
    Ok(Json(match stats {
        Some(s) => serde_json::json!({
            "state": row.state,
            "host_rss_bytes": s.rss_bytes,
            "host_pss_bytes": s.pss_bytes,
            "cpu_time_ms": s.cpu_time.as_millis() as u64,
        }),
        None => serde_json::json!({ "state": row.state }),
    }))
}
