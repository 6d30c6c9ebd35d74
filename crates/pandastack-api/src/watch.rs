//! `GET /v1/sandboxes/{id}/files/watch?path=&recursive=`: the changes under a directory of a
//! sandbox, as Server-Sent Events or, with a WebSocket upgrade, as JSON text frames
//! ([`WatchFrame`]; docs/streams.md).
//!
//! The guest agent watches with inotify ([`Host::watch`](pandastack_host::Host::watch)). The
//! stream outlives the guest call it rides on: when the sandbox hibernates (or its guest session
//! is cut), the watcher waits for it to run again — it does not wake it, and a watch does not
//! keep it from idling out — then arms the watch again and says `ready` again. It ends with an
//! `error` when the sandbox is deleted or the directory is gone, and when the client goes away.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use pandastack_api_types::{ErrorCode, SandboxState, StreamErrorFrame, WatchFrame};
use pandastack_host::{BoxStream, HostError, HostResult, WatchEvent, WatchKind};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::extract::{bool_param, Caller};
use crate::workload::{guest, path_param};
use crate::ws::text;
use crate::ApiState;

/// Frames queued toward the client before the watcher waits for it (the guest's own bound
/// then drops events and says `overflow`).
const QUEUE: usize = 64;
/// How often a watcher whose sandbox is not running looks at its row again.
const ASLEEP_POLL: Duration = Duration::from_millis(500);
/// Tries to arm the watch again after a cut while the sandbox is running (a session being
/// re-established), a second apart, before the watch ends with the last error.
const REARM_TRIES: u32 = 10;

/// Watch a directory inside a sandbox: its files' creates, modifies, deletes and renames.
///
/// Server-Sent Events (or, with a WebSocket upgrade, JSON text frames), each a [`WatchFrame`]:
/// `ready` once armed, then `create`/`modify`/`delete`/`rename` `{path, dir}` (`rename` with
/// `from`), `overflow` when changes were dropped, and `error` `{code, message}` as the last one.
/// A hibernated sandbox is woken to arm the watch; when it hibernates later the watch waits for
/// it to run again, arms itself again and says `ready` again (what changed meanwhile is not
/// told). Closing the stream ends the watch.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files/watch",
    operation_id = "watch_files",
    tag = "files",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("path" = String, Query, pattern = "^/", description = "Absolute guest path of a directory (no `..`)"),
        ("recursive" = Option<bool>, Query, description = "Its subdirectories too, at every depth (default false)"),
        ("access_token" = Option<String>, Query, description = "API key, for clients that cannot set headers (EventSource, browsers' WebSocket)"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events named by each frame's `type`, the frame as data", content_type = "text/event-stream", body = inline(crate::schemas::WatchEvents)),
        (status = 101, description = "Switching to the WebSocket protocol; server frames are WatchFrame"),
    )
)]
pub async fn watch(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let path = path_param(&q, "path")?;
    let recursive = bool_param(&q, "recursive")?;
    // A request that asks for an upgrade gets one or a clear refusal; any other is SSE.
    let ws = match ws {
        Ok(ws) => Some(ws),
        Err(e) if headers.contains_key(axum::http::header::UPGRADE) => {
            return Err(ApiError::new(
                ErrorCode::UpgradeRequired,
                format!("a WebSocket upgrade of this route: {}", e.body_text()),
            ))
        }
        Err(_) => None,
    };
    let row = guest(&app, &caller, &id).await?;
    // Armed before the answer: a missing directory is a plain HTTP error.
    let first = app.control.host().watch(&row.id, &path, recursive).await?;
    let watcher = Watcher {
        app,
        workspace: row.workspace_id,
        sandbox: row.id,
        path,
        recursive,
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(watcher.run(first, tx));
    Ok(match ws {
        Some(ws) => ws.on_upgrade(move |socket| to_socket(socket, rx)),
        None => {
            let events = ReceiverStream::new(rx).map(|f| {
                Ok::<_, Infallible>(
                    Event::default()
                        .event(f.kind())
                        .json_data(&f)
                        .unwrap_or_default(),
                )
            });
            Sse::new(events)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
    })
}

/// Frames to the socket until the watch ends or the client closes it.
async fn to_socket(socket: WebSocket, mut rx: mpsc::Receiver<WatchFrame>) {
    let (mut sink, mut stream) = socket.split();
    loop {
        tokio::select! {
            frame = rx.recv() => match frame {
                Some(f) => {
                    if sink.send(text(&f)).await.is_err() {
                        return;
                    }
                }
                None => break,
            },
            msg = stream.next() => match msg {
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {} // the client has nothing to say
            },
        }
    }
    let _ = sink.send(Message::Close(None)).await;
}

/// One watch, from its first arming to its end.
struct Watcher {
    app: Arc<ApiState>,
    workspace: String,
    sandbox: String,
    path: String,
    recursive: bool,
}

type Batches = BoxStream<HostResult<Vec<WatchEvent>>>;

impl Watcher {
    async fn run(self, mut events: Batches, tx: mpsc::Sender<WatchFrame>) {
        let ready = || WatchFrame::Ready {
            path: self.path.clone(),
            recursive: self.recursive,
        };
        if tx.send(ready()).await.is_err() {
            return;
        }
        loop {
            let cut = loop {
                let batch = tokio::select! {
                    () = tx.closed() => return,
                    b = events.next() => b,
                };
                match batch {
                    Some(Ok(batch)) => {
                        for e in batch {
                            if tx.send(frame(e)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Some(Err(e)) => break Some(e),
                    // The guest ended it: its directory went away (or the sandbox stopped).
                    None => break None,
                }
            };
            match self.rearm(&tx, cut).await {
                Ok(Some(again)) => {
                    events = again;
                    if tx.send(ready()).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return, // the client left
                Err(e) => {
                    e.log_cause();
                    let _ = tx
                        .send(WatchFrame::Error(StreamErrorFrame {
                            id: None,
                            code: e.code,
                            message: e.message.clone(),
                        }))
                        .await;
                    return;
                }
            }
        }
    }

    /// The watch armed again after its guest call ended (`cut`: with this error, or by the
    /// guest), once the sandbox runs; `Ok(None)` when the client left meanwhile, `Err` when the
    /// watch is over. A cut is not logged: a hibernation or a delete makes one.
    async fn rearm(
        &self,
        tx: &mpsc::Sender<WatchFrame>,
        mut cut: Option<HostError>,
    ) -> Result<Option<Batches>, ApiError> {
        let mut tries = 0;
        loop {
            let row = self
                .app
                .control
                .sandboxes
                .get(&self.workspace, &self.sandbox)
                .await?;
            match row.state {
                SandboxState::Running => {
                    // Armed again (a guest that ended the watch itself lost its directory: arming
                    // it again says so, in the guest's words, unless one was made again there).
                    if tries >= REARM_TRIES {
                        return Err(cut.map(ApiError::from).unwrap_or_else(|| {
                            ApiError::new(ErrorCode::Unavailable, "the watch was cut")
                        }));
                    }
                    tries += 1;
                    match self
                        .app
                        .control
                        .host()
                        .watch(&self.sandbox, &self.path, self.recursive)
                        .await
                    {
                        Ok(s) => return Ok(Some(s)),
                        // What the guest says of the path (gone, not a directory) is final.
                        Err(e @ HostError::Guest { .. }) => return Err(e.into()),
                        Err(e) => cut = Some(e),
                    }
                }
                SandboxState::Starting | SandboxState::Paused | SandboxState::Hibernated => {
                    // Asleep (or on its way back): armed again once it runs.
                    tries = 0;
                }
                state => {
                    return Err(ApiError::new(
                        ErrorCode::SandboxState,
                        format!(
                            "sandbox {} is {}: the watch ended",
                            self.sandbox,
                            state.as_str()
                        ),
                    ))
                }
            }
            let wait = if tries > 0 {
                Duration::from_secs(1)
            } else {
                ASLEEP_POLL
            };
            tokio::select! {
                () = tx.closed() => return Ok(None),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

fn frame(e: WatchEvent) -> WatchFrame {
    let (path, dir) = (e.path, e.dir);
    match e.kind {
        WatchKind::Create => WatchFrame::Create { path, dir },
        WatchKind::Modify => WatchFrame::Modify { path, dir },
        WatchKind::Delete => WatchFrame::Delete { path, dir },
        WatchKind::Rename => WatchFrame::Rename {
            path,
            from: e.from.unwrap_or_default(),
            dir,
        },
        WatchKind::Overflow => WatchFrame::Overflow { path },
    }
}
