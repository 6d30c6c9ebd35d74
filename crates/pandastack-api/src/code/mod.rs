//! The code interpreter: `POST /v1/sandboxes/{id}/code` runs code in a long-lived Python kernel
//! inside the sandbox, so variables, imports and open files survive between calls. One kernel
//! per context (`default`, or one made with `POST …/code/contexts`).
//!
//! The guest side is `kernel.py`, run with the guest's own `python3` through the ordinary exec
//! call: nothing is installed in the image, so any template with Python 3 has a code interpreter,
//! and kernels are plain guest processes that survive hibernate/wake and are copied into every
//! fork child (a fork branches the kernel's variables too). The script prints JSON lines, which
//! [`Decoder`] turns into [`CodeEvent`]s for the blocking and the SSE variant.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::Json;
use futures::StreamExt;
use pandastack_api_types::{
    self as wire, CodeContext, CodeContextRequest, CodeError, CodeOutput, CodeRequest, CodeResult,
    ErrorCode,
};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::workload::{guest, guest_env};
use crate::App;
use pandastack_host::{ExecEvent, ExecSpec, HostError};

/// The guest half, passed to `python3 -c` as an argument (see its header).
const KERNEL: &str = include_str!("kernel.py");
/// Takes the kernel's source from argv and runs it (must match `BOOT` in kernel.py).
const BOOT: &str =
    "import sys;SOURCE=sys.argv.pop(1);exec(compile(SOURCE,'<pandastack-kernel>','exec'))";
/// Cap on the kernel's event stream (results carry images, base64).
const MAX_CODE_OUTPUT: u64 = 16 << 20;
/// Extra time the host gives a run beyond its own bound (the kernel interrupts the code at the
/// bound and still has to report).
const GRACE: Duration = Duration::from_secs(30);
/// Bound on starting or stopping a context.
const CONTEXT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a run produces, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CodeEvent {
    Stdout(String),
    Stderr(String),
    Result(CodeOutput),
    Error(CodeError),
    /// Always last.
    Done {
        duration_ms: u64,
        truncated: bool,
    },
}

/// A line the guest script prints.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line {
    Stdout { text: String },
    Stderr { text: String },
    Result { data: CodeOutput },
    Error(CodeError),
    Ready,
    Done,
}

fn kernel_error(value: impl Into<String>) -> CodeEvent {
    CodeEvent::Error(CodeError {
        name: "KernelError".into(),
        value: value.into(),
        traceback: String::new(),
    })
}

/// Turns the exec events of one kernel-client run into [`CodeEvent`]s, ending with one `Done`.
#[derive(Default)]
pub(crate) struct Decoder {
    line: Vec<u8>,
    stderr: Vec<u8>,
    done: bool,
    errored: bool,
}

impl Decoder {
    pub(crate) fn feed(&mut self, ev: Result<ExecEvent, HostError>) -> Vec<CodeEvent> {
        let mut out = Vec::new();
        match ev {
            Ok(ExecEvent::Stdout(b)) => {
                self.line.extend_from_slice(&b);
                while let Some(pos) = self.line.iter().position(|&c| c == b'\n') {
                    let line: Vec<u8> = self.line.drain(..=pos).collect();
                    self.parse(&line, &mut out);
                }
            }
            Ok(ExecEvent::Stderr(b)) => {
                // The client's own complaints (a Python too old, a broken kernel): kept for the
                // error message; the code's stderr comes as events on stdout.
                if self.stderr.len() < 64 << 10 {
                    self.stderr.extend_from_slice(&b);
                }
            }
            Ok(ExecEvent::Exit {
                exit_code,
                timed_out,
                truncated,
                duration_ms,
            }) => {
                if !self.done && !self.errored {
                    out.push(if exit_code == 127 {
                        kernel_error(
                            "python3 was not found in this sandbox: the code interpreter needs a \
                             template with Python 3 (e.g. code-interpreter or base)",
                        )
                    } else if timed_out {
                        CodeEvent::Error(CodeError {
                            name: "TimeoutError".into(),
                            value: "the kernel did not answer in time".into(),
                            traceback: String::new(),
                        })
                    } else {
                        let err = String::from_utf8_lossy(&self.stderr);
                        kernel_error(if err.trim().is_empty() {
                            format!("the kernel client exited with code {exit_code}")
                        } else {
                            err.trim().to_owned()
                        })
                    });
                }
                out.push(CodeEvent::Done {
                    duration_ms,
                    truncated,
                });
            }
            Err(s) => {
                out.push(kernel_error(crate::error::event_message(&s)));
                out.push(CodeEvent::Done {
                    duration_ms: 0,
                    truncated: false,
                });
            }
        }
        out
    }

    fn parse(&mut self, line: &[u8], out: &mut Vec<CodeEvent>) {
        match serde_json::from_slice::<Line>(line) {
            Ok(Line::Stdout { text }) => out.push(CodeEvent::Stdout(text)),
            Ok(Line::Stderr { text }) => out.push(CodeEvent::Stderr(text)),
            Ok(Line::Result { data }) => out.push(CodeEvent::Result(data)),
            Ok(Line::Error(e)) => {
                self.errored = true;
                out.push(CodeEvent::Error(e));
            }
            Ok(Line::Ready | Line::Done) => self.done = true,
            Err(e) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "unreadable line from the code kernel"
            ),
        }
    }
}

fn argv(cmd: &str, args: &[&str]) -> Vec<String> {
    ["python3", "-c", BOOT, KERNEL, cmd]
        .iter()
        .chain(args)
        .map(|s| s.to_string())
        .collect()
}

/// Starts a run of `req` in the caller's sandbox and returns its events.
async fn start_run(
    app: &App,
    caller: &Caller,
    id: &str,
    req: CodeRequest,
) -> ApiResult<impl futures::Stream<Item = CodeEvent> + Send + 'static> {
    req.validate()?;
    let row = guest(app, caller, id).await?;
    let timeout = req
        .timeout_seconds
        .unwrap_or(wire::DEFAULT_CODE_TIMEOUT_SECONDS);
    let ctx = req
        .context_id
        .unwrap_or_else(|| wire::DEFAULT_CODE_CONTEXT.to_owned());
    let spec = ExecSpec {
        argv: argv("run", &[&ctx, &timeout.to_string()]),
        env: guest_env(&row, req.env),
        stdin: Some(req.code.into_bytes()),
        timeout: Duration::from_secs(timeout) + GRACE,
        max_output_bytes: MAX_CODE_OUTPUT,
        ..ExecSpec::default()
    };
    let events = app.host.exec_stream(&row.id, spec).await?;
    let mut decoder = Decoder::default();
    Ok(events.flat_map(move |ev| futures::stream::iter(decoder.feed(ev))))
}

fn is_missing_context(e: &CodeError) -> bool {
    e.name == "ContextNotFound"
}

/// Run code in the sandbox's kernel and return what it printed and produced. An exception in the
/// code is data (`error`), not an HTTP error; the value of a final expression, `display(…)`
/// calls and matplotlib figures come back in `results`.
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeRequest>,
) -> ApiResult<Json<CodeResult>> {
    let ctx = req.context_id.clone();
    let mut events = Box::pin(start_run(&app, &caller, &id, req).await?);
    let mut out = CodeResult::default();
    while let Some(ev) = events.next().await {
        match ev {
            CodeEvent::Stdout(s) => out.stdout.push_str(&s),
            CodeEvent::Stderr(s) => out.stderr.push_str(&s),
            CodeEvent::Result(r) => out.results.push(r),
            CodeEvent::Error(e) if is_missing_context(&e) => {
                return Err(context_not_found(ctx.as_deref().unwrap_or_default()))
            }
            CodeEvent::Error(e) => out.error = Some(e),
            CodeEvent::Done {
                duration_ms,
                truncated,
            } => {
                out.duration_ms = duration_ms;
                out.truncated = truncated;
            }
        }
    }
    Ok(Json(out))
}

fn context_not_found(ctx: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("code context {ctx} not found (create it with POST …/code/contexts)"),
    )
}

/// Run code and stream its output as Server-Sent Events.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/code/stream",
    operation_id = "run_code_stream",
    tag = "code",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = CodeRequest,
    responses((status = 200, description = "Server-Sent Events: `stdout`/`stderr` `{\"data\": text}` as printed, `result` (a result object), `error` `{\"name\", \"value\", \"traceback\"}` (an exception in the code, or `KernelError`/`ContextNotFound`), then one `done` `{\"duration_ms\", \"truncated\"}`. Closing the stream stops waiting; the kernel interrupts the code.", content_type = "text/event-stream", body = String))
)]
pub async fn run_stream(
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeRequest>,
) -> ApiResult<impl IntoResponse> {
    let events = start_run(&app, &caller, &id, req).await?;
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

/// Runs a context command (`start`/`stop`) and returns its error, if any.
async fn context_cmd(
    app: &App,
    caller: &Caller,
    id: &str,
    cmd: &str,
    ctx: &str,
    extra_env: &std::collections::BTreeMap<String, String>,
) -> ApiResult<()> {
    let row = guest(app, caller, id).await?;
    let spec = ExecSpec {
        argv: argv(cmd, &[ctx]),
        env: guest_env(&row, extra_env.clone()),
        timeout: CONTEXT_TIMEOUT,
        max_output_bytes: 1 << 20,
        ..ExecSpec::default()
    };
    let mut events = Box::pin(app.host.exec_stream(&row.id, spec).await?);
    let mut decoder = Decoder::default();
    while let Some(ev) = events.next().await {
        for e in decoder.feed(ev) {
            if let CodeEvent::Error(e) = e {
                return Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!("{}: {}", e.name, e.value),
                ));
            }
        }
    }
    Ok(())
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<CodeContextRequest>,
) -> ApiResult<(StatusCode, Json<CodeContext>)> {
    req.validate()?;
    let ctx = pandastack_store::new_id("ctx-");
    context_cmd(&app, &caller, &id, "start", &ctx, &req.env).await?;
    Ok((
        StatusCode::CREATED,
        Json(CodeContext {
            id: ctx,
            language: req.language.unwrap_or_else(|| "python".into()),
        }),
    ))
}

/// Delete a code context and stop its kernel (its variables are gone). Deleting `default`
/// resets it: the next run starts a fresh kernel.
#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/code/contexts/{context_id}",
    operation_id = "delete_code_context",
    tag = "code",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("context_id" = String, Path, description = "Context id"),
    ),
    responses((status = 204, description = "Deleted (also when there was no such context)"))
)]
pub async fn delete_context(
    State(app): State<Arc<App>>,
    caller: Caller,
    Path((id, context_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    wire::validate_context_id(&context_id)?;
    context_cmd(&app, &caller, &id, "stop", &context_id, &Default::default()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn out(s: &str) -> Result<ExecEvent, HostError> {
        Ok(ExecEvent::Stdout(Bytes::from(s.to_owned())))
    }

    fn exit(code: i32, timed_out: bool) -> Result<ExecEvent, HostError> {
        Ok(ExecEvent::Exit {
            exit_code: code,
            timed_out,
            truncated: false,
            duration_ms: 5,
        })
    }

    #[test]
    fn lines_split_across_chunks_decode_in_order() {
        let mut d = Decoder::default();
        let mut got = d.feed(out("{\"type\": \"stdout\", \"te"));
        assert!(got.is_empty());
        got.extend(d.feed(out(
            "xt\": \"hi\\n\"}\n{\"type\": \"result\", \"data\": {\"text\": \"2\"}}\n",
        )));
        got.extend(d.feed(out("{\"type\": \"done\"}\n")));
        got.extend(d.feed(exit(0, false)));
        assert_eq!(
            got,
            vec![
                CodeEvent::Stdout("hi\n".into()),
                CodeEvent::Result(CodeOutput {
                    text: "2".into(),
                    ..Default::default()
                }),
                CodeEvent::Done {
                    duration_ms: 5,
                    truncated: false
                },
            ]
        );
    }

    #[test]
    fn missing_python_and_silent_exits_are_kernel_errors() {
        let mut d = Decoder::default();
        let got = d.feed(exit(127, false));
        assert!(matches!(&got[0], CodeEvent::Error(e) if e.value.contains("python3")));
        let mut d = Decoder::default();
        d.feed(Ok(ExecEvent::Stderr(Bytes::from_static(b"boom\n"))));
        let got = d.feed(exit(1, false));
        assert!(
            matches!(&got[0], CodeEvent::Error(e) if e.name == "KernelError" && e.value == "boom")
        );
        let mut d = Decoder::default();
        let got = d.feed(exit(-1, true));
        assert!(matches!(&got[0], CodeEvent::Error(e) if e.name == "TimeoutError"));
        assert!(matches!(got[1], CodeEvent::Done { .. }));
    }

    #[test]
    fn boot_matches_the_script() {
        assert!(KERNEL.contains(&format!("BOOT = {BOOT:?}").replace("\\'", "'")));
    }
}
