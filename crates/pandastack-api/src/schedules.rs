//! Schedules (cron). Handlers parse, call the control plane's
//! [`pandastack_control::Schedules`] and map; the cron expression and time zone are parsed
//! there, and a refused one is `invalid_argument` naming the field that fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateScheduleRequest, ErrorCode, List, UpdateScheduleRequest,
};
use pandastack_control::{ScheduleError, ScheduleInfo};
use pandastack_store::RunRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::{rfc3339, ApiState};

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::NotFound(n) => Self::not_found(ErrorCode::NotFound, "schedule", &n),
            ScheduleError::RunNotFound(n) => Self::not_found(ErrorCode::NotFound, "run", &n),
            e @ ScheduleError::Exists(_) => Self::new(ErrorCode::Conflict, e.to_string()),
            e @ ScheduleError::Invalid(_) => Self::new(ErrorCode::InvalidArgument, e.to_string()),
            ScheduleError::Store(e) => e.into(),
            ScheduleError::Spec(e) => Self::internal("stored schedule", &e),
        }
    }
}

fn schedule_wire(s: &ScheduleInfo) -> wire::Schedule {
    let spec = &s.spec;
    wire::Schedule {
        id: s.row.id.clone(),
        name: s.row.name.clone(),
        cron: spec.cron.clone(),
        timezone: spec.timezone.clone(),
        target: spec.target.clone(),
        payload: spec.payload.clone(),
        concurrency_policy: spec.concurrency_policy,
        starting_deadline_seconds: spec.starting_deadline_seconds,
        retries: spec.retries,
        paused: s.row.paused,
        next_run_at: s.row.next_due_at.map(rfc3339),
        created_at: rfc3339(s.row.created_at),
        updated_at: rfc3339(s.row.updated_at),
    }
}

fn run_wire(schedule: &str, r: &RunRow) -> wire::ScheduleRun {
    wire::ScheduleRun {
        id: r.id.clone(),
        schedule: schedule.to_owned(),
        due_at: rfc3339(r.due_at),
        trigger: r.trigger,
        state: r.state,
        attempt: r.attempt.max(0) as u32,
        sandbox_id: r.sandbox_id.clone(),
        started_at: r.started_at.map(rfc3339),
        ended_at: r.ended_at.map(rfc3339),
        exit_code: r.exit_code.map(|c| c as i32),
        output: r.output.clone(),
        error: r.error.clone(),
        created_at: rfc3339(r.created_at),
    }
}

/// A schedule name from a path, or 404.
fn name_of(name: &str) -> ApiResult<&str> {
    if wire::valid_name(name, 64) {
        Ok(name)
    } else {
        Err(ApiError::not_found(ErrorCode::NotFound, "schedule", name))
    }
}

/// Create a schedule: `cron` (5 fields, 6 with seconds, or `@hourly`-style macros) in
/// `timezone` runs `target` at each due time; each due time fires once.
#[utoipa::path(
    post,
    path = "/v1/schedules",
    operation_id = "create_schedule",
    tag = "schedules",
    request_body = CreateScheduleRequest,
    responses((status = 201, description = "The schedule", body = wire::Schedule))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Body(req): Body<CreateScheduleRequest>,
) -> ApiResult<(StatusCode, Json<wire::Schedule>)> {
    req.validate()?;
    let s = app.control.schedules.create(caller.ws(), &req).await?;
    Ok((StatusCode::CREATED, Json(schedule_wire(&s))))
}

/// List the workspace's schedules by name.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    operation_id = "list_schedules",
    tag = "schedules",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of schedules", body = List<wire::Schedule>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Schedule>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .schedules
        .list(caller.ws(), page.after.clone().map(|c| c.id), page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |s| wire::Cursor {
        created_at_ms: 0,
        id: s.row.name.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(schedule_wire).collect(),
        next_cursor,
    }))
}

/// One schedule (by name or id).
#[utoipa::path(
    get,
    path = "/v1/schedules/{name}",
    operation_id = "get_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    responses((status = 200, description = "The schedule", body = wire::Schedule))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Schedule>> {
    let s = app
        .control
        .schedules
        .get(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(schedule_wire(&s)))
}

/// Change a schedule; its next due time is counted again from now.
#[utoipa::path(
    patch,
    path = "/v1/schedules/{name}",
    operation_id = "update_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    request_body = UpdateScheduleRequest,
    responses((status = 200, description = "The schedule", body = wire::Schedule))
)]
pub async fn update(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<UpdateScheduleRequest>,
) -> ApiResult<Json<wire::Schedule>> {
    name_of(&name)?;
    req.validate()?;
    let s = app
        .control
        .schedules
        .update(caller.ws(), &name, &req)
        .await?;
    Ok(Json(schedule_wire(&s)))
}

/// Delete a schedule: runs under way are cancelled (their sandboxes deleted), and its run
/// history goes with it.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{name}",
    operation_id = "delete_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .schedules
        .delete(caller.ws(), name_of(&name)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pause a schedule: no due time fires until it is resumed (runs under way go on).
#[utoipa::path(
    post,
    path = "/v1/schedules/{name}/pause",
    operation_id = "pause_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    responses((status = 200, description = "The schedule", body = wire::Schedule))
)]
pub async fn pause(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Schedule>> {
    let s = app
        .control
        .schedules
        .set_paused(caller.ws(), name_of(&name)?, true)
        .await?;
    Ok(Json(schedule_wire(&s)))
}

/// Resume a paused schedule: due times from now on fire (those of the pause are not caught
/// up).
#[utoipa::path(
    post,
    path = "/v1/schedules/{name}/resume",
    operation_id = "resume_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    responses((status = 200, description = "The schedule", body = wire::Schedule))
)]
pub async fn resume(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Schedule>> {
    let s = app
        .control
        .schedules
        .set_paused(caller.ws(), name_of(&name)?, false)
        .await?;
    Ok(Json(schedule_wire(&s)))
}

/// Run a schedule's target now (a `manual` run; the concurrency policy applies, so under
/// `forbid` it is `skipped` while another run is under way). Follow it with `GET …/runs/{id}`.
#[utoipa::path(
    post,
    path = "/v1/schedules/{name}/run",
    operation_id = "run_schedule",
    tag = "schedules",
    params(("name" = String, Path, description = "Schedule name or id")),
    responses((status = 202, description = "The run (queued, or skipped)", body = wire::ScheduleRun))
)]
pub async fn run_now(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<wire::ScheduleRun>)> {
    let s = app
        .control
        .schedules
        .get(caller.ws(), name_of(&name)?)
        .await?;
    let r = app
        .control
        .schedules
        .run_now(caller.ws(), &s.row.id)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(run_wire(&s.row.name, &r))))
}

/// A schedule's runs, newest due time first.
#[utoipa::path(
    get,
    path = "/v1/schedules/{name}/runs",
    operation_id = "list_schedule_runs",
    tag = "schedules",
    params(
        ("name" = String, Path, description = "Schedule name or id"),
        crate::page::PageQuery,
    ),
    responses((status = 200, description = "A page of runs", body = List<wire::ScheduleRun>))
)]
pub async fn runs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::ScheduleRun>>> {
    let page = crate::page::Page::of(&q)?;
    let before = page.after.as_ref().map(|c| c.created_at_ms);
    let (row, mut rows) = app
        .control
        .schedules
        .runs(caller.ws(), name_of(&name)?, before, page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |r| wire::Cursor {
        created_at_ms: r.due_at,
        id: r.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|r| run_wire(&row.name, r)).collect(),
        next_cursor,
    }))
}

/// One run of a schedule.
#[utoipa::path(
    get,
    path = "/v1/schedules/{name}/runs/{id}",
    operation_id = "get_schedule_run",
    tag = "schedules",
    params(
        ("name" = String, Path, description = "Schedule name or id"),
        ("id" = String, Path, description = "Run id"),
    ),
    responses((status = 200, description = "The run", body = wire::ScheduleRun))
)]
pub async fn get_run(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Json<wire::ScheduleRun>> {
    let (row, r) = app
        .control
        .schedules
        .run(caller.ws(), name_of(&name)?, &id)
        .await?;
    Ok(Json(run_wire(&row.name, &r)))
}
