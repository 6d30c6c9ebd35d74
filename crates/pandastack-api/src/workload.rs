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
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::StreamExt;
use pandastack_api_types::{
    self as wire, validate_guest_path, ErrorCode, ExecRequest, ExecResult, MkdirRequest,
    RenameRequest,
};
use pandastack_host::{ExecEvent, ExecSpec, FileKind, GuestErrorKind, HostError, ListPage};
use pandastack_store::SandboxRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{bool_param, Body, Caller};
use crate::sandboxes::owned;
use crate::utf8::Utf8Pieces;
use crate::{ApiState, MAX_EXEC_OUTPUT};

/// The caller's sandbox ready for work inside it (woken if it was hibernated, the row saying
/// so).
pub(crate) async fn guest(app: &ApiState, caller: &Caller, id: &str) -> ApiResult<SandboxRow> {
    let row = owned(app, caller, id).await?;
    Ok(app.control.sandboxes.awake(row).await?)
}

/// The id of the caller's sandbox, ready for work inside it.
async fn ready(app: &ApiState, caller: &Caller, id: &str) -> ApiResult<String> {
    Ok(guest(app, caller, id).await?.id)
}

/// The sandbox's environment (from create) with `extra` (a request's) over it.
pub(crate) fn guest_env(
    row: &SandboxRow,
    extra: BTreeMap<String, String>,
) -> std::collections::HashMap<String, String> {
    let mut env: std::collections::HashMap<String, String> = row.env.clone().into_iter().collect();
    env.extend(extra);
    env
}

/// What the guest runs for `req` in sandbox `row`: the sandbox's environment (from create) under
/// the request's own.
pub(crate) fn spec(req: ExecRequest, row: &SandboxRow) -> ExecSpec {
    let env = guest_env(row, req.env);
    ExecSpec {
        argv: req.argv.unwrap_or_default(),
        shell: req.cmd.unwrap_or_default(),
        env,
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

/// Run a command to completion and return its output (each stream capped at 4 MiB; `truncated`
/// says so). A non-zero exit is data, not an error. The sandbox's `env` (from create) applies under
/// the request's.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/exec",
    operation_id = "exec",
    tag = "exec",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = ExecRequest,
    responses((status = 200, description = "The command's result", body = ExecResult))
)]
pub async fn exec(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<ExecRequest>,
) -> ApiResult<Json<ExecResult>> {
    req.validate()?;
    let row = guest(&app, &caller, &id).await?;
    let out = app.control.host().exec(&row.id, spec(req, &row)).await?;
    Ok(Json(ExecResult {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        truncated: out.truncated,
        duration_ms: out.duration_ms,
    }))
}

/// Run a command and stream its output as Server-Sent Events.
///
/// `stdout`/`stderr` events `{"data": "…"}`, then `exit` `{"exit_code", …}`, or `error`.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/exec/stream",
    operation_id = "exec_stream",
    tag = "exec",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = ExecRequest,
    responses((status = 200, description = "Server-Sent Events: `stdout` and `stderr` `{\"data\": text}` as produced, then one `exit` `{\"exit_code\", \"timed_out\", \"truncated\", \"duration_ms\"}`, or `error` `{\"code\", \"message\"}` (`code` as the error envelope would carry it). Closing the stream kills the command.", content_type = "text/event-stream", body = inline(crate::schemas::ExecEvents)))
)]
pub async fn exec_stream(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<ExecRequest>,
) -> ApiResult<impl IntoResponse> {
    req.validate()?;
    let row = guest(&app, &caller, &id).await?;
    let events = app
        .control
        .host()
        .exec_stream(&row.id, spec(req, &row))
        .await?;
    // One decoder per output keeps characters cut between chunks whole.
    let (mut out, mut err) = (Utf8Pieces::default(), Utf8Pieces::default());
    let output = |name: &'static str, text: String| {
        (!text.is_empty()).then(|| {
            Event::default()
                .event(name)
                .json_data(serde_json::json!({ "data": text }))
        })
    };
    let sse = events.flat_map(move |ev| {
        let events = match ev {
            Ok(ExecEvent::Stdout(b)) => output("stdout", out.push(&b)).into_iter().collect(),
            Ok(ExecEvent::Stderr(b)) => output("stderr", err.push(&b)).into_iter().collect(),
            Ok(ExecEvent::Exit {
                exit_code,
                timed_out,
                truncated,
                duration_ms,
            }) => {
                let mut v: Vec<_> = [("stdout", out.finish()), ("stderr", err.finish())]
                    .into_iter()
                    .filter_map(|(name, rest)| output(name, rest))
                    .collect();
                v.push(Event::default().event("exit").json_data(serde_json::json!({
                    "exit_code": exit_code, "timed_out": timed_out,
                    "truncated": truncated, "duration_ms": duration_ms,
                })));
                v
            }
            Err(e) => vec![error_event(e)],
        };
        futures::stream::iter(
            events
                .into_iter()
                .map(|e| Ok::<_, Infallible>(e.unwrap_or_default())),
        )
    });
    Ok(Sse::new(sse).keep_alive(KeepAlive::default()))
}

/// The `error` event that ends an exec stream: the code `POST …/exec` would answer the same
/// failure with (a command cut off by a delete is `sandbox_not_found`, by a hibernate or the VM
/// ending `sandbox_state`), the guest's own words for its errors.
fn error_event(e: HostError) -> Result<Event, axum::Error> {
    let message = e.event_message();
    let e = ApiError::from(e);
    e.log_cause();
    let code = e.code;
    Event::default()
        .event("error")
        .json_data(serde_json::json!({ "code": code, "message": message }))
}

pub(crate) fn path_param(q: &BTreeMap<String, String>, name: &str) -> ApiResult<String> {
    let p = q
        .get(name)
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, format!("{name}: required")))?;
    validate_guest_path(name, p)?;
    Ok(p.clone())
}

/// Download a guest file (streamed).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/fs",
    operation_id = "read_file",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id"), ("path" = String, Query, pattern = "^/", description = "Absolute guest path (no `..`)")),
    responses((status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = inline(crate::schemas::Bytes)))
)]
pub async fn read(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let path = path_param(&q, "path")?;
    let id = ready(&app, &caller, &id).await?;
    read_file(&app, &id, &path).await
}

/// The response of a download of `path` from sandbox `id` (awake).
pub(crate) async fn read_file(app: &ApiState, id: &str, path: &str) -> ApiResult<Response> {
    let (id, path) = (id.to_owned(), path.to_owned());
    // Stat first: a missing file or a directory is a clean 404/422 before any body is sent.
    let info = app.control.host().stat(&id, &path).await?;
    if info.kind != FileKind::File {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("path: {path} is not a regular file"),
        ));
    }
    let mut stream = app.control.host().read_file(&id, &path).await?;
    // The first chunk is read before the status line: a body that fails before its first byte
    // makes hyper close the connection with no answer at all, so a file that cannot be read
    // (`/proc/self/mem` is EIO from its first byte) gets an error answer instead. A read error
    // of a file that stat found is about the file, not the server: 422.
    let first = match stream.next().await {
        None => None,
        Some(Ok(bytes)) => Some(bytes),
        Some(Err(HostError::Guest {
            kind: GuestErrorKind::Other,
            message,
        })) => {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("path: {path} cannot be read: {message}"),
            ))
        }
        Some(Err(e)) => return Err(e.into()),
    };
    let stream = futures::stream::iter(first.map(Ok)).chain(stream);
    let body = HttpBody::from_stream(stream.map(|r| r.map_err(std::io::Error::other)));
    let mut response = ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response();
    // A file that reports no size (`/proc`, `/sys`) still has bytes (the guest reads up to
    // 1 MiB of it): no length is promised for it.
    if info.size > 0 {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, header::HeaderValue::from(info.size));
    }
    Ok(response)
}

/// Upload a guest file (streamed, any size); it is replaced atomically, parents are created.
#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/fs",
    operation_id = "write_file",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id"), ("path" = String, Query, pattern = "^/", description = "Absolute guest path (no `..`)")),
    request_body(content = inline(crate::schemas::Bytes), content_type = "application/octet-stream", description = "The file's new bytes"),
    responses((status = 200, description = "Written: `{\"path\", \"bytes_written\"}`", body = Object))
)]
pub async fn write(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    body: HttpBody,
) -> ApiResult<Json<serde_json::Value>> {
    let path = path_param(&q, "path")?;
    let id = ready(&app, &caller, &id).await?;
    write_file(&app, &id, &path, body).await
}

/// An upload of `body` to `path` of sandbox `id` (awake): `{"path", "bytes_written"}`.
pub(crate) async fn write_file(
    app: &ApiState,
    id: &str,
    path: &str,
    body: HttpBody,
) -> ApiResult<Json<serde_json::Value>> {
    let body = body
        .into_data_stream()
        .map(|r| r.map_err(|e| e.to_string()));
    let n = app
        .control
        .host()
        .write_file(id, path, Box::pin(body))
        .await?;
    Ok(Json(
        serde_json::json!({ "path": path, "bytes_written": n }),
    ))
}

/// Delete a guest file or directory.
#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/fs",
    operation_id = "remove_file",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id"), ("path" = String, Query, pattern = "^/", description = "Absolute guest path (no `..`)"), ("recursive" = Option<bool>, Query, description = "Remove a directory and its contents")),
    responses((status = 204, description = "Removed"))
)]
pub async fn remove(
    State(app): State<Arc<ApiState>>,
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
    let recursive = bool_param(&q, "recursive")?;
    let id = ready(&app, &caller, &id).await?;
    app.control.host().remove(&id, &path, recursive).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn file_info(f: pandastack_host::FileInfo) -> wire::FileInfo {
    wire::FileInfo {
        name: f.name,
        path: f.path,
        kind: f.kind.as_str().into(),
        size: f.size,
        mode: f.mode,
        mtime_ms: f.mtime_ms,
        symlink_target: f.symlink_target,
    }
}

/// Entries a listing page holds when `?limit=` is absent.
const LIST_DEFAULT_LIMIT: u32 = 1000;
/// The most entries `?limit=` may ask for (the guest holds a page to the same).
const LIST_MAX_LIMIT: u32 = 5000;
/// The longest path a listing cursor may name: a guest path is at most 4 KiB, and a listing
/// `depth` levels deep adds at most one file name (255 bytes) a level below the listed path.
const LIST_CURSOR_MAX_PATH: usize = 8192;

/// `?depth=` of a directory listing: 1 (default) to 10.
fn list_depth(q: &BTreeMap<String, String>) -> ApiResult<u32> {
    let Some(d) = q.get("depth") else {
        return Ok(1);
    };
    d.parse::<u32>()
        .ok()
        .filter(|d| (1..=10).contains(d))
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, "depth: 1 to 10"))
}

/// The longest `?pattern=` of a listing (the host's `NamePattern` bound).
const LIST_MAX_PATTERN: usize = 1024;

/// `?pattern=` of a directory listing: a glob matched against each entry's name. Its glob
/// syntax is checked by the host (the agent compiles it, an unclosed `[` is an invalid
/// argument there); here only what no name pattern can hold.
fn list_pattern(q: &BTreeMap<String, String>) -> ApiResult<Option<String>> {
    let Some(p) = q.get("pattern").filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let bad = |why: &str| ApiError::new(ErrorCode::InvalidArgument, format!("pattern: {why}"));
    if p.len() > LIST_MAX_PATTERN {
        return Err(bad(&format!("longer than {LIST_MAX_PATTERN} bytes")));
    }
    if p.contains('/') || p.contains('\0') {
        return Err(bad("matches a name: no '/' or NUL"));
    }
    Ok(Some(p.clone()))
}

/// `?limit=` of a directory listing: 1 to [`LIST_MAX_LIMIT`], [`LIST_DEFAULT_LIMIT`] when absent.
fn list_limit(q: &BTreeMap<String, String>) -> ApiResult<u32> {
    crate::page::limit(q, LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT)
}

/// The cursor of the listing page that follows the entry at `path`: the path itself, opaque to
/// clients (URL-safe base64, no padding), so a page resumes where the last one ended whatever
/// was created or removed in between.
fn list_cursor(path: &str) -> String {
    URL_SAFE_NO_PAD.encode(path)
}

/// The path `?cursor=` (a [`list_cursor`]) resumes the listing of `listed` after; `None` when
/// absent. A cursor that does not decode to a path under `listed` is the caller's error.
fn list_after(q: &BTreeMap<String, String>, listed: &str) -> ApiResult<Option<String>> {
    let Some(cursor) = q.get("cursor") else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(
            ErrorCode::InvalidArgument,
            "cursor: not a next_cursor of this listing",
        )
    };
    let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let after = String::from_utf8(raw).map_err(|_| bad())?;
    let under = format!("{}/", listed.trim_end_matches('/'));
    if after.len() > LIST_CURSOR_MAX_PATH || after.contains('\0') || !after.starts_with(&under) {
        return Err(bad());
    }
    Ok(Some(after))
}

/// List a guest directory, a page at a time (sorted by path).
///
/// `next_cursor` is set while more entries remain: pass it as `cursor` for the next page.
/// With `pattern`, only entries whose name matches it are listed, at every depth: a search by
/// name (`?path=/app&depth=10&pattern=*.py`).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/fs/list",
    operation_id = "list_files",
    tag = "files",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("path" = String, Query, pattern = "^/", description = "Absolute guest path (no `..`)"),
        ("depth" = Option<u32>, Query, minimum = 1, maximum = 10, description = "1 (default) to 10 levels"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "Most entries on this page: 1 to 5000 (default 1000); a page of very long names can hold fewer"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("pattern" = Option<String>, Query, description = "Only entries whose name matches this glob (`*`, `?`, `[abc]`, `[!abc]`; a name, no `/`); directories are still searched to `depth`. A page can then hold fewer entries than `limit` with more to come"),
    ),
    responses((status = 200, description = "A page of entries, sorted by path", body = wire::List<wire::FileInfo>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::List<wire::FileInfo>>> {
    let path = path_param(&q, "path")?;
    let depth = list_depth(&q)?;
    let page = ListPage {
        limit: list_limit(&q)?,
        after: list_after(&q, &path)?,
        pattern: list_pattern(&q)?,
    };
    let id = ready(&app, &caller, &id).await?;
    let page = app.control.host().list_dir(&id, &path, depth, page).await?;
    Ok(Json(wire::List {
        data: page.entries.into_iter().map(file_info).collect(),
        next_cursor: page.next_after.as_deref().map(list_cursor),
    }))
}

/// Metadata of a guest path.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/fs/stat",
    operation_id = "stat_file",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id"), ("path" = String, Query, pattern = "^/", description = "Absolute guest path (no `..`)")),
    responses((status = 200, description = "File metadata", body = wire::FileInfo))
)]
pub async fn stat(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::FileInfo>> {
    let path = path_param(&q, "path")?;
    let id = ready(&app, &caller, &id).await?;
    let info = app.control.host().stat(&id, &path).await?;
    Ok(Json(file_info(info)))
}

/// Create a guest directory.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/fs/mkdir",
    operation_id = "make_directory",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = MkdirRequest,
    responses((status = 204, description = "Created"))
)]
pub async fn mkdir(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<MkdirRequest>,
) -> ApiResult<StatusCode> {
    validate_guest_path("path", &req.path)?;
    let id = ready(&app, &caller, &id).await?;
    app.control
        .host()
        .mkdir(&id, &req.path, req.parents)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Rename (move) a guest path.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/fs/rename",
    operation_id = "rename_file",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = RenameRequest,
    responses((status = 204, description = "Renamed"))
)]
pub async fn rename(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<RenameRequest>,
) -> ApiResult<StatusCode> {
    validate_guest_path("from", &req.from)?;
    validate_guest_path("to", &req.to)?;
    let id = ready(&app, &caller, &id).await?;
    app.control
        .host()
        .rename(&id, &req.from, &req.to, req.overwrite)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn list_cursors_round_trip_and_stay_in_their_listing() {
        let c = list_cursor("/srv/data/a b+é");
        assert!(c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        let q = query(&[("cursor", &c)]);
        assert_eq!(
            list_after(&q, "/srv/data").unwrap().as_deref(),
            Some("/srv/data/a b+é")
        );
        assert!(list_after(&q, "/srv/data/").is_ok());
        assert!(list_after(&q, "/").is_ok());
        assert_eq!(list_after(&query(&[]), "/srv").unwrap(), None);
        // Not base64, not UTF-8, another listing's, a sibling with a longer name.
        let latin1 = URL_SAFE_NO_PAD.encode([b'/', 0xff]);
        for bad in [
            "!!",
            "%2F",
            &latin1,
            &list_cursor("/etc/x"),
            &list_cursor("/srv/database"),
        ] {
            let e = list_after(&query(&[("cursor", bad)]), "/srv/data").unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn list_limits() {
        assert_eq!(list_limit(&query(&[])).unwrap(), LIST_DEFAULT_LIMIT);
        assert_eq!(list_limit(&query(&[("limit", "5000")])).unwrap(), 5000);
        for bad in ["0", "5001", "-1", "x", ""] {
            assert!(list_limit(&query(&[("limit", bad)])).is_err(), "{bad}");
        }
    }
}
