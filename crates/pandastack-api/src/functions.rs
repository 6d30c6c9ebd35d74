//! Functions: handlers built and baked into a VM snapshot, invoked over HTTP. Handlers parse,
//! call the control plane's [`pandastack_control::Functions`] (a function is stored as an app
//! of kind `function`) and map.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateFunctionRequest, CreateVersionRequest, ErrorCode, FunctionRollbackRequest,
    List, UpdateFunctionRequest,
};
use pandastack_control::apps::function::FunctionInfo;
use pandastack_control::FunctionError;
use pandastack_store::DeployRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::{rfc3339, ApiState};

/// Largest JSON body carrying a function's files (their 4 MiB, escaped, and the rest).
pub(crate) const MAX_SOURCE_BODY: usize =
    2 * pandastack_api_types::MAX_FUNCTION_SOURCE_BYTES + (1 << 20);

impl From<FunctionError> for ApiError {
    fn from(e: FunctionError) -> Self {
        match e {
            // The texts are those of the errors functions shared with apps before.
            FunctionError::NotFound(n) => {
                Self::not_found(ErrorCode::AppNotFound, "app", &format!("function {n}"))
            }
            FunctionError::VersionNotFound { name, version } => Self::not_found(
                ErrorCode::NotFound,
                "deploy",
                &format!("version {version} of {name}"),
            ),
            FunctionError::InvocationNotFound(id) => {
                Self::not_found(ErrorCode::NotFound, "deploy", &format!("invocation {id}"))
            }
            e @ (FunctionError::Exists(_) | FunctionError::Conflict(_)) => {
                Self::new(ErrorCode::Conflict, e.to_string())
            }
            e @ FunctionError::Busy(_) => Self::new(ErrorCode::Unavailable, e.to_string()),
            e @ FunctionError::BadEvent(_) => Self::new(ErrorCode::InvalidArgument, e.to_string()),
            FunctionError::Shared(e) => e.into(),
        }
    }
}

/// A version number from a path, or 404 (never axum's plain-text rejection).
fn version_of(v: &str) -> ApiResult<u64> {
    v.parse()
        .map_err(|_| ApiError::not_found(ErrorCode::NotFound, "version", v))
}

/// A function name from a path, or 404.
pub(crate) fn name_of(name: &str) -> ApiResult<&str> {
    if wire::validate_function_name("name", name).is_ok() {
        Ok(name)
    } else {
        Err(ApiError::not_found(ErrorCode::NotFound, "function", name))
    }
}

fn function_wire(app: &ApiState, f: &FunctionInfo) -> wire::Function {
    let c = &f.config;
    wire::Function {
        id: f.row.id.clone(),
        name: pandastack_control::apps::function::public_name(&f.row.name).to_owned(),
        runtime: f.function.runtime,
        handler: f.function.handler.clone(),
        url: app.control.functions.address().url(&f.row.name),
        public: f.function.public,
        env: c.env.clone(),
        secret_names: c.secrets.keys().cloned().collect(),
        memory_mb: c.memory_mb,
        timeout_seconds: f.function.timeout_seconds,
        concurrency: f.function.concurrency,
        max_instances: f.function.max_instances,
        idle_seconds: c.idle_seconds,
        live_version: f.live_version,
        warm_instances: f.warm_instances,
        created_at: rfc3339(f.row.created_at),
        updated_at: rfc3339(f.row.updated_at),
    }
}

fn version_wire(name: &str, d: &DeployRow) -> wire::FunctionVersion {
    let mut phases: BTreeMap<String, u64> =
        serde_json::from_value(d.phases.clone()).unwrap_or_default();
    phases.remove("build_total");
    wire::FunctionVersion {
        id: d.id.clone(),
        function: name.to_owned(),
        version: d.seq as u64,
        state: d.state,
        error: d.error.clone(),
        handler: None,
        phases_ms: phases,
        created_at: rfc3339(d.created_at),
        updated_at: rfc3339(d.updated_at),
    }
}

/// Create a function: its first version is built at once (follow it with
/// `GET …/versions`); it goes live when its handler has been imported and baked.
#[utoipa::path(
    post,
    path = "/v1/functions",
    operation_id = "create_function",
    tag = "functions",
    request_body = CreateFunctionRequest,
    responses((status = 201, description = "The function (its first version building)", body = wire::Function))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Body(req): Body<CreateFunctionRequest>,
) -> ApiResult<(StatusCode, Json<wire::Function>)> {
    req.validate()?;
    let (info, _version) = app
        .control
        .functions
        .create_function(caller.ws(), &req)
        .await?;
    Ok((StatusCode::CREATED, Json(function_wire(&app, &info))))
}

/// List the workspace's functions by name.
#[utoipa::path(
    get,
    path = "/v1/functions",
    operation_id = "list_functions",
    tag = "functions",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of functions", body = List<wire::Function>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Function>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .functions
        .functions(caller.ws(), page.after.clone().map(|c| c.id), page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |f| wire::Cursor {
        created_at_ms: 0,
        id: pandastack_control::apps::function::public_name(&f.row.name).to_owned(),
    });
    Ok(Json(List {
        data: rows.iter().map(|f| function_wire(&app, f)).collect(),
        next_cursor,
    }))
}

/// One function.
#[utoipa::path(
    get,
    path = "/v1/functions/{name}",
    operation_id = "get_function",
    tag = "functions",
    params(("name" = String, Path, description = "Function name")),
    responses((status = 200, description = "The function", body = wire::Function))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Function>> {
    let f = app
        .control
        .functions
        .function(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(function_wire(&app, &f)))
}

/// Change a function's limits or visibility (no rebuild; the next call uses them).
#[utoipa::path(
    patch,
    path = "/v1/functions/{name}",
    operation_id = "update_function",
    tag = "functions",
    params(("name" = String, Path, description = "Function name")),
    request_body = UpdateFunctionRequest,
    responses((status = 200, description = "The function", body = wire::Function))
)]
pub async fn update(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<UpdateFunctionRequest>,
) -> ApiResult<Json<wire::Function>> {
    name_of(&name)?;
    req.validate()?;
    let f = app
        .control
        .functions
        .update_function(caller.ws(), &name, &req)
        .await?;
    Ok(Json(function_wire(&app, &f)))
}

/// Delete a function: its instances, its versions' snapshots and logs.
#[utoipa::path(
    delete,
    path = "/v1/functions/{name}",
    operation_id = "delete_function",
    tag = "functions",
    params(("name" = String, Path, description = "Function name")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .functions
        .delete_function(caller.ws(), name_of(&name)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Build a new version (new files, handler or environment; the rest as before). It goes
/// live once its handler imports; a version that fails leaves the live one serving. A body
/// with `Content-Type: application/gzip` is a gzip tarball of the function's files instead
/// (regular files and directories only, at most 512 MiB).
#[utoipa::path(
    post,
    path = "/v1/functions/{name}/versions",
    operation_id = "create_function_version",
    tag = "functions",
    params(("name" = String, Path, description = "Function name")),
    request_body(content(
        (CreateVersionRequest = "application/json"),
        (Vec<u8> = "application/gzip"),
    )),
    responses((status = 202, description = "The version, building", body = wire::FunctionVersion))
)]
pub async fn create_version(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    req: Request,
) -> ApiResult<(StatusCode, Json<wire::FunctionVersion>)> {
    let ctype = crate::extract::media_type(req.headers());
    let d = match ctype.as_str() {
        "application/gzip" | "application/x-gzip" | "application/x-tar+gzip" => {
            let upload = req.into_body().into_data_stream();
            if let Err(e) = name_of(&name) {
                pandastack_control::drain_upload(upload).await;
                return Err(e);
            }
            app.control
                .functions
                .create_version_upload(caller.ws(), &name, upload)
                .await?
        }
        "" | "application/json" => {
            let bytes = axum::body::to_bytes(req.into_body(), MAX_SOURCE_BODY)
                .await
                .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, "request body too large"))?;
            let body: CreateVersionRequest = if bytes.is_empty() {
                CreateVersionRequest::default()
            } else {
                crate::extract::json(&bytes)?
            };
            name_of(&name)?;
            body.validate()?;
            app.control
                .functions
                .create_version(caller.ws(), &name, &body)
                .await?
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "Content-Type {other}: send application/json (files, handler, env…) or \
                     application/gzip (a tarball of the function's files)"
                ),
            ))
        }
    };
    Ok((StatusCode::ACCEPTED, Json(version_wire(&name, &d))))
}

/// A function's versions, newest first.
#[utoipa::path(
    get,
    path = "/v1/functions/{name}/versions",
    operation_id = "list_function_versions",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        crate::page::PageQuery,
    ),
    responses((status = 200, description = "A page of versions", body = List<wire::FunctionVersion>))
)]
pub async fn versions(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::FunctionVersion>>> {
    let page = crate::page::Page::of(&q)?;
    let before = page.after.as_ref().map(|c| c.created_at_ms);
    let mut rows = app
        .control
        .functions
        .versions(caller.ws(), name_of(&name)?, before, page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |d| wire::Cursor {
        created_at_ms: d.seq,
        id: d.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|d| version_wire(&name, d)).collect(),
        next_cursor,
    }))
}

/// One version.
#[utoipa::path(
    get,
    path = "/v1/functions/{name}/versions/{version}",
    operation_id = "get_function_version",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        ("version" = u64, Path, description = "Version number"),
    ),
    responses((status = 200, description = "The version", body = wire::FunctionVersion))
)]
pub async fn get_version(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Json<wire::FunctionVersion>> {
    let d = app
        .control
        .functions
        .version(caller.ws(), name_of(&name)?, version_of(&version)?)
        .await?;
    Ok(Json(version_wire(&name, &d)))
}

/// A version's build log (plain text: fetch, install, the runtime's import, bake).
#[utoipa::path(
    get,
    path = "/v1/functions/{name}/versions/{version}/logs",
    operation_id = "function_version_logs",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        ("version" = u64, Path, description = "Version number"),
    ),
    responses((status = 200, description = "The build log", content_type = "text/plain", body = String))
)]
pub async fn version_logs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    let d = app
        .control
        .functions
        .version(caller.ws(), name_of(&name)?, version_of(&version)?)
        .await?;
    // The same deploys' logs as apps' (a function's version is a deploy).
    let read = crate::logs::deploy_reader(app.control.apps.clone(), caller.ws().to_owned(), d.id);
    // Plain text (`text/plain; charset=utf-8`), as the log so far.
    Ok(crate::logs::read_response(read, false, || async { None }).await)
}

/// Make an earlier version live again (default: the one before the live one); nothing is
/// rebuilt, its baked snapshot serves the next call.
#[utoipa::path(
    post,
    path = "/v1/functions/{name}/rollback",
    operation_id = "rollback_function",
    tag = "functions",
    params(("name" = String, Path, description = "Function name")),
    request_body = FunctionRollbackRequest,
    responses((status = 200, description = "The version now live", body = wire::FunctionVersion))
)]
pub async fn rollback(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<FunctionRollbackRequest>,
) -> ApiResult<Json<wire::FunctionVersion>> {
    name_of(&name)?;
    let d = app
        .control
        .functions
        .rollback_function(caller.ws(), &name, &req)
        .await?;
    Ok(Json(version_wire(&name, &d)))
}

/// Call the function. The body is the event: JSON (any value) with a JSON or no
/// `Content-Type`, else the body as a string (UTF-8). The answer is the outcome: the
/// handler's return value, or its error with the traceback, what it printed, and whether a
/// new instance was restored for it (`cold`). A call past the function's `timeout_seconds`
/// ends with status `timeout` and its instance is discarded.
///
/// With `async=1` the call is queued (202, its `id`): it runs on the function's host even
/// across a restart, is tried again up to `retries` times (default 2) when it ends in `error`
/// or `timeout`, and its outcome is fetched with `GET …/invocations/{id}`.
#[utoipa::path(
    post,
    path = "/v1/functions/{name}/invoke",
    operation_id = "invoke_function",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        ("async" = Option<bool>, Query, description = "Queue the call and answer at once (202)"),
        ("retries" = Option<u32>, Query, minimum = 0, maximum = 10, description = "Asynchronous: further attempts after a failed one (default 2)"),
    ),
    request_body(content(
        (Object = "application/json"),
        (String = "text/plain"),
    )),
    responses(
        (status = 200, description = "The outcome", body = wire::Invocation),
        (status = 202, description = "Queued (async=1)", body = wire::Invocation),
    )
)]
pub async fn invoke(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<wire::Invocation>)> {
    name_of(&name)?;
    let run_async = crate::extract::bool_param(&q, "async")?;
    let retries = match q.get("retries") {
        None => wire::DEFAULT_ASYNC_RETRIES,
        Some(r) => r
            .parse()
            .ok()
            .filter(|r| *r <= 10)
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, "retries: 0 to 10"))?,
    };
    let event = event_of(&headers, body)?;
    if run_async {
        let inv = app
            .control
            .functions
            .invoke_async(caller.ws(), &name, event, retries)
            .await?;
        return Ok((StatusCode::ACCEPTED, Json(inv)));
    }
    let inv = app
        .control
        .functions
        .invoke(caller.ws(), &name, event, None)
        .await?;
    Ok((StatusCode::OK, Json(inv)))
}

/// An asynchronous call: `queued`/`running` until it ends, then its outcome.
#[utoipa::path(
    get,
    path = "/v1/functions/{name}/invocations/{id}",
    operation_id = "get_invocation",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        ("id" = String, Path, description = "Invocation id"),
    ),
    responses((status = 200, description = "The invocation", body = wire::Invocation))
)]
pub async fn invocation(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Json<wire::Invocation>> {
    let inv = app
        .control
        .functions
        .invocation(caller.ws(), name_of(&name)?, &id)
        .await?;
    Ok(Json(inv))
}

/// The event a request body makes: JSON as sent, anything else as a JSON string.
fn event_of(headers: &HeaderMap, body: Bytes) -> ApiResult<Bytes> {
    let ctype = crate::extract::media_type(headers);
    let json_body = ctype.is_empty() || ctype == "application/json" || ctype.ends_with("+json");
    if body.len() > wire::MAX_INVOKE_PAYLOAD_BYTES {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            "an event is at most 6 MiB",
        ));
    }
    if json_body {
        if body.is_empty() {
            return Ok(Bytes::from_static(b"null"));
        }
        serde_json::from_slice::<serde::de::IgnoredAny>(&body).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("the event is not JSON: {e}"),
            )
        })?;
        return Ok(body);
    }
    let text = std::str::from_utf8(&body).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidArgument,
            "a non-JSON event must be UTF-8 text (send JSON, e.g. base64 in a string, for bytes)",
        )
    })?;
    Ok(Bytes::from(serde_json::to_vec(text).unwrap_or_default()))
}
