//! `GET /v1/sandboxes/{id}/logs`: the guest console (kernel messages, anything written to
//! `/dev/console`). Plain text by default; with `?follow=1` a Server-Sent Events stream of the
//! whole log so far and then of every byte appended, until the sandbox is deleted or the client
//! goes away.
//!
//! Following polls the log through the host boundary (QEMU appends to a file on the host; there
//! is no other writer to ask), every [`POLL`] while nothing is new and at once while it grows.
//! Template build logs are followed the same way from their file.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use pandastack_api_types::{LogChunk, LogEnd};
use pandastack_host::{HostError, LogPos};

use crate::error::ApiResult;
use crate::extract::{bool_param, Caller};
use crate::sandboxes::owned;
use crate::utf8::Utf8Pieces;
use crate::ApiState;

/// Pause between looks at a log that did not grow.
const POLL: Duration = Duration::from_millis(200);
/// Largest piece of log in one event.
const CHUNK: usize = 64 * 1024;

/// Read a sandbox's guest console; `?follow=1` streams it.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/logs",
    operation_id = "sandbox_logs",
    tag = "sandboxes",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("follow" = Option<bool>, Query, description = "`1`/`true`: stream as Server-Sent Events"),
        ("access_token" = Option<String>, Query, description = "API key, for clients that cannot set headers"),
    ),
    responses(
        (status = 200, description = "Without `follow`: the console output so far (text/plain). With `follow`: Server-Sent Events — `log` events `{\"data\": text}` carrying the whole log so far and then every byte appended, in order; one `end` event `{\"reason\": \"deleted\"}` when the sandbox is deleted, then the stream closes.", content(
            (String = "text/plain"),
            (inline(crate::schemas::LogEvents) = "text/event-stream"),
        )),
    )
)]
pub async fn logs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let follow = bool_param(&q, "follow")?;
    let row = owned(&app, &caller, &id).await?;
    let id = row.id;
    if !follow {
        let all = app.control.host().console(&id, None, usize::MAX).await?;
        return Ok(String::from_utf8_lossy(&all.data)
            .into_owned()
            .into_response());
    }
    let read = {
        let (app, id) = (Arc::clone(&app), id.clone());
        move |from: Option<LogPos>| {
            let (app, id) = (Arc::clone(&app), id.clone());
            async move {
                app.control
                    .host()
                    .console(&id, from, CHUNK)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    };
    let ended = move || {
        let (app, id) = (Arc::clone(&app), id.clone());
        async move {
            // Deleted: the log is complete.
            matches!(
                app.control.host().get(&id).await,
                Err(HostError::SandboxNotFound(_))
            )
            .then(|| "deleted".to_owned())
        }
    };
    Ok(follow_sse(read, ended))
}

/// One read of a log.
type LogRead =
    std::pin::Pin<Box<dyn Future<Output = Result<pandastack_host::LogChunk, String>> + Send>>;

/// Reads of the log file at `path` (a template build's), off the async threads.
fn file_reader(path: PathBuf) -> impl FnMut(Option<LogPos>) -> LogRead + Send + 'static {
    move |from| {
        let path = path.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || pandastack_host::read_log(&path, from, CHUNK))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        })
    }
}

/// The log file at `path` as plain text, or when `follow` as [`follow_sse`].
pub(crate) async fn log_response<F, Fut>(path: PathBuf, follow: bool, ended: F) -> Response
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    if !follow {
        let bytes = tokio::fs::read(&path).await.unwrap_or_default();
        return String::from_utf8_lossy(&bytes).into_owned().into_response();
    }
    follow_sse(file_reader(path), ended)
}

/// A log read in pieces with `read` as plain text (everything so far), or when `follow` as
/// [`follow_sse`].
pub(crate) async fn read_response<R, RFut, F, Fut>(mut read: R, follow: bool, ended: F) -> Response
where
    R: FnMut(Option<LogPos>) -> RFut + Send + 'static,
    RFut: Future<Output = Result<pandastack_host::LogChunk, String>> + Send + 'static,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    if follow {
        return follow_sse(read, ended);
    }
    let mut all = Vec::new();
    let mut pos = None;
    loop {
        match read(pos).await {
            Ok(c) if !c.data.is_empty() => {
                all.extend_from_slice(&c.data);
                pos = c.next;
            }
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = e.as_str(), "log read");
                break;
            }
        }
    }
    String::from_utf8_lossy(&all).into_owned().into_response()
}

/// Reads of deploy `deploy`'s log through `apps` (an app's, or a function version's).
pub(crate) fn deploy_reader(
    apps: pandastack_control::Apps,
    ws: String,
    deploy: String,
) -> impl FnMut(Option<LogPos>) -> LogRead + Send + 'static {
    move |from| {
        let (apps, ws, deploy) = (apps.clone(), ws.clone(), deploy.clone());
        Box::pin(async move { apps.read_log(&ws, &deploy, from, CHUNK).await })
    }
}

/// Server-Sent Events of a log read with `read`: `log` events with the whole log so far and then
/// every byte appended, until `ended` gives a reason (checked whenever nothing new was read),
/// then that reason in one `end` event.
fn follow_sse<R, RFut, F, Fut>(read: R, ended: F) -> Response
where
    R: FnMut(Option<LogPos>) -> RFut + Send + 'static,
    RFut: Future<Output = Result<pandastack_host::LogChunk, String>> + Send + 'static,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    let tail = Tail {
        ended_check: ended,
        read,
        pos: None,
        text: Utf8Pieces::default(),
        ended: false,
    };
    Sse::new(tail.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A follower of one log.
struct Tail<R, F> {
    ended_check: F,
    read: R,
    /// Where the next read continues.
    pos: Option<LogPos>,
    text: Utf8Pieces,
    ended: bool,
}

impl<R, RFut, F, Fut> Tail<R, F>
where
    R: FnMut(Option<LogPos>) -> RFut + Send + 'static,
    RFut: Future<Output = Result<pandastack_host::LogChunk, String>> + Send + 'static,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut t| async move {
            if t.ended {
                return None;
            }
            let event = t.next_event().await;
            Some((Ok(event), t))
        })
    }

    /// Waits for the next piece of log (or the end of what it logs).
    async fn next_event(&mut self) -> Event {
        loop {
            match self.read_more().await {
                Ok(Some(text)) => return log_event(text),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = e.as_str(), "log read"),
            }
            if let Some(reason) = (self.ended_check)().await {
                // Deliver what was written last, then end.
                if let Ok(Some(text)) = self.read_more().await {
                    return log_event(text);
                }
                self.ended = true;
                return Event::default()
                    .event("end")
                    .json_data(LogEnd { reason })
                    .unwrap_or_default();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Reads what was appended since the last call, as text (`None`: nothing new).
    async fn read_more(&mut self) -> Result<Option<String>, String> {
        let chunk = (self.read)(self.pos).await?;
        if chunk.restarted {
            // A new file (a VM process restarted) or a truncated one: from the top.
            self.text = Utf8Pieces::default();
        }
        if chunk.next.is_some() {
            self.pos = chunk.next;
        }
        let text = self.text.push(&chunk.data);
        Ok((!text.is_empty()).then_some(text))
    }
}

fn log_event(text: String) -> Event {
    Event::default()
        .event("log")
        .json_data(LogChunk { data: text })
        .unwrap_or_default()
}
