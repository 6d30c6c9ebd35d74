//! Work inside a sandbox: exec (blocking and as Server-Sent Events) and files. Any call on a
//! hibernated sandbox wakes it first.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as HttpBody;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use pandastack_api_types::{
    self as wire, validate_guest_path, ErrorCode, ExecRequest, ExecResult, MkdirRequest,
    RenameRequest,
};
use pandastack_guest_proto::v1::{self, files_client::FilesClient};
use pandastack_vm::VmDriver;
use tonic::transport::Channel;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::guest::{self, ExecEvent, ExecSpec};
use crate::sandboxes::{owned, record};
use crate::{App, MAX_EXEC_OUTPUT};

/// The guest channel of the caller's sandbox, waking it if needed.
async fn channel<D: VmDriver>(app: &App<D>, caller: &Caller, id: &str) -> ApiResult<Channel> {
    let row = owned(app, caller, id).await?;
    let ch = app.agent.channel(&row.id).await?;
    let view = app.agent.get(&row.id).await?;
    record(app, row, &view).await?;
    Ok(ch)
}

fn spec(req: ExecRequest) -> ExecSpec {
    ExecSpec {
        argv: req.argv.unwrap_or_default(),
        shell: req.cmd.unwrap_or_default(),
        env: req.env.into_iter().collect(),
        cwd: req.cwd.unwrap_or_default(),
        user: req.user.unwrap_or_default(),
        stdin: req.stdin.map(String::into_bytes),
        timeout: Duration::from_secs(
            req.timeout_seconds
                .unwrap_or(wire::DEFAULT_EXEC_TIMEOUT_SECONDS),
        ),
        max_output_bytes: MAX_EXEC_OUTPUT,
    }
}

pub async fn exec<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<ExecRequest>,
) -> ApiResult<Json<ExecResult>> {
    req.validate()?;
    let ch = channel(&app, &caller, &id).await?;
    let out = guest::exec(ch, spec(req)).await?;
    Ok(Json(ExecResult {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        truncated: out.truncated,
        duration_ms: out.duration_ms,
    }))
}

/// SSE: `stdout`/`stderr` events `{"data": "…"}`, then `exit` `{"exit_code", …}`, or `error`.
pub async fn exec_stream<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<ExecRequest>,
) -> ApiResult<impl IntoResponse> {
    req.validate()?;
    let ch = channel(&app, &caller, &id).await?;
    let events = guest::exec_stream(ch, spec(req)).await?;
    let sse = events.map(|ev| {
        let event = match ev {
            Ok(ExecEvent::Stdout(b)) => Event::default()
                .event("stdout")
                .json_data(serde_json::json!({ "data": String::from_utf8_lossy(&b) })),
            Ok(ExecEvent::Stderr(b)) => Event::default()
                .event("stderr")
                .json_data(serde_json::json!({ "data": String::from_utf8_lossy(&b) })),
            Ok(ExecEvent::Exit {
                exit_code,
                timed_out,
                truncated,
                duration_ms,
            }) => Event::default().event("exit").json_data(serde_json::json!({
                "exit_code": exit_code, "timed_out": timed_out,
                "truncated": truncated, "duration_ms": duration_ms,
            })),
            Err(s) => Event::default()
                .event("error")
                .json_data(serde_json::json!({ "message": s.message() })),
        };
        Ok::<_, Infallible>(event.unwrap_or_default())
    });
    Ok(Sse::new(sse).keep_alive(KeepAlive::default()))
}

fn path_param(q: &BTreeMap<String, String>, name: &str) -> ApiResult<String> {
    let p = q
        .get(name)
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, format!("{name}: required")))?;
    validate_guest_path(name, p)?;
    Ok(p.clone())
}

pub async fn read<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let path = path_param(&q, "path")?;
    let ch = channel(&app, &caller, &id).await?;
    // Stat first: a missing file or a directory is a clean 404/422 before any body is sent.
    let info = FilesClient::new(ch.clone())
        .stat(v1::PathRequest { path: path.clone() })
        .await?
        .into_inner();
    if info.r#type != v1::FileType::File as i32 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("path: {path} is not a regular file"),
        ));
    }
    let stream = guest::read_file(ch, path).await?;
    let body = HttpBody::from_stream(stream.map(|r| r.map_err(std::io::Error::other)));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, info.size.to_string()),
        ],
        body,
    )
        .into_response())
}

pub async fn write<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    body: HttpBody,
) -> ApiResult<Json<serde_json::Value>> {
    let path = path_param(&q, "path")?;
    let ch = channel(&app, &caller, &id).await?;
    let n = guest::write_file(ch, path.clone(), body.into_data_stream()).await?;
    Ok(Json(
        serde_json::json!({ "path": path, "bytes_written": n }),
    ))
}

pub async fn remove<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<StatusCode> {
    let path = path_param(&q, "path")?;
    if path == "/" {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "path: refusing to remove /",
        ));
    }
    let recursive = q.get("recursive").is_some_and(|v| v == "true" || v == "1");
    let ch = channel(&app, &caller, &id).await?;
    FilesClient::new(ch)
        .remove(v1::RemoveRequest { path, recursive })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn file_info(f: v1::FileInfo) -> wire::FileInfo {
    let kind = match v1::FileType::try_from(f.r#type) {
        Ok(v1::FileType::File) => "file",
        Ok(v1::FileType::Dir) => "dir",
        Ok(v1::FileType::Symlink) => "symlink",
        _ => "other",
    };
    wire::FileInfo {
        name: f.name,
        path: f.path,
        kind: kind.into(),
        size: f.size,
        mode: f.mode,
        mtime_ms: f.mtime_ms,
        symlink_target: (!f.symlink_target.is_empty()).then_some(f.symlink_target),
    }
}

pub async fn list<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::List<wire::FileInfo>>> {
    let path = path_param(&q, "path")?;
    let depth = match q.get("depth") {
        Some(d) => d
            .parse::<u32>()
            .ok()
            .filter(|d| (1..=10).contains(d))
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, "depth: 1 to 10"))?,
        None => 1,
    };
    let ch = channel(&app, &caller, &id).await?;
    let entries = FilesClient::new(ch)
        .list(v1::ListRequest { path, depth })
        .await?
        .into_inner()
        .entries;
    Ok(Json(wire::List {
        data: entries.into_iter().map(file_info).collect(),
        next_cursor: None,
    }))
}

pub async fn stat<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::FileInfo>> {
    let path = path_param(&q, "path")?;
    let ch = channel(&app, &caller, &id).await?;
    let info = FilesClient::new(ch)
        .stat(v1::PathRequest { path })
        .await?
        .into_inner();
    Ok(Json(file_info(info)))
}

pub async fn mkdir<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<MkdirRequest>,
) -> ApiResult<StatusCode> {
    validate_guest_path("path", &req.path)?;
    let ch = channel(&app, &caller, &id).await?;
    FilesClient::new(ch)
        .mkdir(v1::MkdirRequest {
            path: req.path,
            parents: req.parents,
            mode: 0,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<RenameRequest>,
) -> ApiResult<StatusCode> {
    validate_guest_path("from", &req.from)?;
    validate_guest_path("to", &req.to)?;
    let ch = channel(&app, &caller, &id).await?;
    FilesClient::new(ch)
        .rename(v1::RenameRequest {
            from: req.from,
            to: req.to,
            overwrite: req.overwrite,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
