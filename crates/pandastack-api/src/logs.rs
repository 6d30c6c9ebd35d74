//! `GET /v1/sandboxes/{id}/logs`: the guest console (kernel messages, anything written to
//! `/dev/console`). Plain text by default; with `?follow=1` a Server-Sent Events stream of the
//! whole log so far and then of every byte appended, until the sandbox is deleted or the client
//! goes away.
//!
//! Following polls the log file (QEMU appends to it; there is no other writer to ask), every
//! [`POLL`] while nothing is new and at once while it grows.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use pandastack_agent::AgentError;
use pandastack_api_types::{LogChunk, LogEnd};
use pandastack_vm::VmDriver;

use crate::error::ApiResult;
use crate::extract::Caller;
use crate::sandboxes::owned;
use crate::utf8::Utf8Pieces;
use crate::App;

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
            (LogChunk = "text/event-stream"),
        )),
    )
)]
pub async fn logs<D: VmDriver>(
    State(app): State<Arc<App<D>>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let row = owned(&app, &caller, &id).await?;
    let path = app.agent.console_log(&row.id).await?;
    let id = row.id;
    Ok(log_response(path, &q, move || {
        let (app, id) = (Arc::clone(&app), id.clone());
        async move {
            // Deleted: the log is complete.
            matches!(
                app.agent.get(&id).await,
                Err(AgentError::SandboxNotFound(_))
            )
            .then(|| "deleted".to_owned())
        }
    })
    .await)
}

/// The log file at `path` as plain text, or with `?follow=1` (or `true`) as [`follow_sse`].
pub(crate) async fn log_response<F, Fut>(
    path: PathBuf,
    q: &BTreeMap<String, String>,
    ended: F,
) -> Response
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send + 'static,
{
    let follow = q
        .get("follow")
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if !follow {
        let bytes = tokio::fs::read(&path).await.unwrap_or_default();
        return String::from_utf8_lossy(&bytes).into_owned().into_response();
    }
    follow_sse(path, ended)
}

/// Server-Sent Events of the file at `path`: `log` events with the whole file so far and then
/// every byte appended, until `ended` gives a reason (checked whenever nothing new was read),
/// then that reason in one `end` event.
fn follow_sse<F, Fut>(path: PathBuf, ended: F) -> Response
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send + 'static,
{
    let tail = Tail {
        ended_check: ended,
        path,
        file: None,
        offset: 0,
        text: Utf8Pieces::default(),
        ended: false,
    };
    Sse::new(tail.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A follower of one log file.
struct Tail<F> {
    ended_check: F,
    path: PathBuf,
    /// The file being read and its identity (device, inode): a new file starts over.
    file: Option<(std::fs::File, (u64, u64))>,
    offset: u64,
    text: Utf8Pieces,
    ended: bool,
}

impl<F, Fut> Tail<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send + 'static,
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

    /// Waits for the next piece of log (or the end of the sandbox).
    async fn next_event(&mut self) -> Event {
        loop {
            match self.read_more() {
                Ok(Some(text)) => {
                    return Event::default()
                        .event("log")
                        .json_data(LogChunk { data: text })
                        .unwrap_or_default()
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(path = %self.path.display(), error = &e as &dyn std::error::Error, "log read")
                }
            }
            if let Some(reason) = (self.ended_check)().await {
                // Deliver what was written last, then end.
                if let Ok(Some(text)) = self.read_more() {
                    return Event::default()
                        .event("log")
                        .json_data(LogChunk { data: text })
                        .unwrap_or_default();
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
    fn read_more(&mut self) -> std::io::Result<Option<String>> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let ident = (meta.dev(), meta.ino());
        if self.file.as_ref().is_none_or(|(_, i)| *i != ident) || meta.len() < self.offset {
            // First look, a new file (a VM process restarted) or a truncated one: from the top.
            self.file = Some((std::fs::File::open(&self.path)?, ident));
            self.offset = 0;
            self.text = Utf8Pieces::default();
        }
        let Some((file, _)) = self.file.as_mut() else {
            return Ok(None);
        };
        if meta.len() <= self.offset {
            return Ok(None);
        }
        let want = (meta.len() - self.offset).min(CHUNK as u64) as usize;
        let mut buf = vec![0; want];
        file.seek(SeekFrom::Start(self.offset))?;
        let n = file.read(&mut buf)?;
        self.offset += n as u64;
        let text = self.text.push(&buf[..n]);
        Ok((!text.is_empty()).then_some(text))
    }
}
