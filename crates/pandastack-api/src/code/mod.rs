//! The code interpreter's routes: `POST /v1/sandboxes/{id}/code` runs code in a long-lived
//! kernel inside the sandbox (Python, JavaScript, TypeScript or Bash), so variables, imports and
//! open files survive between calls. One kernel per context (each language's default one, or one
//! made with `POST …/code/contexts`). The handlers
//! check the caller, wake the sandbox and call [`pandastack_control::CodeContexts`], which owns
//! the kernels; here the results become JSON or Server-Sent Events.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures::StreamExt;
use pandastack_api_types::{
    self as wire, CodeContext, CodeContextRequest, CodeRequest, CodeResult,
};
use pandastack_control::CodeEvent;

use crate::error::ApiResult;
use crate::extract::{Body, Caller};
use crate::workload::guest;
use crate::ApiState;

/// Run code in the sandbox's kernel and return what it printed and produced. An exception in the
/// code is data (`error`), not an HTTP error; the value of a final expression, `display(…)`
/// calls and matplotlib figures come back in `results`. A context of another language than
/// `language` is a 422.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/code",
    operation_id = "run_code",
    tag = "code",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = CodeRequest,
    responses((status = 200, description = "The run's output, results and error", body = CodeResult))
)]
pub async fn run(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeRequest>,
) -> ApiResult<Json<CodeResult>> {
    req.validate()?;
    let row = guest(&app, &caller, &id).await?;
    Ok(Json(
        app.control.code.run_to_end(&row.id, &row.env, req).await?,
    ))
}

/// Run code and stream its output as Server-Sent Events.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/code/stream",
    operation_id = "run_code_stream",
    tag = "code",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = CodeRequest,
    responses((status = 200, description = "Server-Sent Events: `stdout`/`stderr` `{\"data\": text}` as printed, `result` (a result object), `error` `{\"name\", \"value\", \"traceback\"}` (an exception in the code, or `KernelError`/`ContextNotFound`/`WrongLanguage`), then one `done` `{\"duration_ms\", \"truncated\"}`. Closing the stream stops waiting; the kernel interrupts the code.", content_type = "text/event-stream", body = inline(crate::schemas::CodeEvents)))
)]
pub async fn run_stream(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeRequest>,
) -> ApiResult<impl IntoResponse> {
    req.validate()?;
    let row = guest(&app, &caller, &id).await?;
    let events = app.control.code.run(&row.id, &row.env, req).await?;
    let sse = events.map(|ev| {
        let e = Event::default();
        let e = match ev {
            CodeEvent::Stdout(s) => e.event("stdout").json_data(serde_json::json!({"data": s})),
            CodeEvent::Stderr(s) => e.event("stderr").json_data(serde_json::json!({"data": s})),
            CodeEvent::Result(r) => e.event("result").json_data(r),
            CodeEvent::Error(err) => e.event("error").json_data(err),
            CodeEvent::Done {
                duration_ms,
                truncated,
            } => e
                .event("done")
                .json_data(serde_json::json!({"duration_ms": duration_ms, "truncated": truncated})),
        };
        Ok::<_, Infallible>(e.unwrap_or_default())
    });
    Ok(Sse::new(sse).keep_alive(KeepAlive::default()))
}

/// Create a code context: a kernel of its own, with its own variables.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/code/contexts",
    operation_id = "create_code_context",
    tag = "code",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = CodeContextRequest,
    responses((status = 201, description = "The context, its kernel running", body = CodeContext))
)]
pub async fn create_context(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeContextRequest>,
) -> ApiResult<(StatusCode, Json<CodeContext>)> {
    req.validate()?;
    let row = guest(&app, &caller, &id).await?;
    let ctx = app
        .control
        .code
        .create_context(&row.id, &row.env, req)
        .await?;
    Ok((StatusCode::CREATED, Json(ctx)))
}

/// Delete a code context and stop its kernel (its variables are gone). Deleting `default`
/// resets it: the next run starts a fresh kernel. Any other context must exist: one never
/// created or already deleted is `404 not_found`.
#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/code/contexts/{context_id}",
    operation_id = "delete_code_context",
    tag = "code",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("context_id" = String, Path, description = "Context id"),
    ),
    responses(
        (status = 204, description = "Deleted (`default`: reset)"),
        (status = 404, description = "No such code context (code `not_found`), or no such sandbox (`sandbox_not_found`)", body = wire::ErrorEnvelope),
    )
)]
pub async fn delete_context(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((id, context_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    wire::validate_context_id(&context_id)?;
    let row = guest(&app, &caller, &id).await?;
    app.control
        .code
        .delete_context(&row.id, &row.env, &context_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
