//! `GET /v1/sandboxes/{id}/exec/ws`: several commands at once over one WebSocket, each with its
//! own stdin, kill, output and exit, told apart by a client-chosen id. Protocol: JSON text frames
//! ([`ExecClientFrame`] in, [`ExecServerFrame`] out; docs/streams.md).
//!
//! ```text
//!  client frames ─► session loop ──start──► command task (one guest Exec call each)
//!                        │  stdin/stdin_close/kill ─► that task's input channel ─► guest
//!  client ◄─ writer task ◄─┴────────── out channel ◄─ stdout/stderr/exit/error of every task
//! ```
//!
//! The session loop alone reads the socket and a writer task alone writes it, so waiting on one
//! command (a wake, a full stdin queue) never holds up the others' output. A command task ends
//! after its `exit` (or `error`) frame; closing the socket aborts every task, which cancels their
//! guest calls, and the guest kills those commands' process trees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{Path, State};
use axum::response::Response;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use futures::{SinkExt, StreamExt};
use pandastack_api_types::{
    ErrorCode, ExecClientFrame, ExecExitFrame, ExecOutputFrame, ExecServerFrame, ExecStartFrame,
    StreamErrorFrame, MAX_STREAM_COMMANDS,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, Upgrade};
use crate::workload::{guest, spec};
use crate::ws::{error_frame, parse_error, text, touch, ACTIVITY_EVERY};
use crate::ApiState;
use pandastack_host::{ExecEvent, ExecInput, HostError, SessionStart};

/// Frames queued for the socket before command output waits (backpressure to the guest).
const OUT_QUEUE: usize = 64;
/// Inputs queued for one command before the session loop waits for the guest to take them.
const IN_QUEUE: usize = 64;
/// SIGKILL's number (the guest protocol carries signal numbers; Linux numbering).
const SIGKILL: i32 = 9;

/// Run commands with stdin and kill over a WebSocket (multiplexed by command id).
///
/// Client → server text frames (JSON):
/// `{"type":"start","id":"c1","cmd":"…"|"argv":[…],"env":{},"cwd":"/…","user":"…","timeout_seconds":n}`,
/// `{"type":"stdin","id":"c1","data":"<base64>"}`, `{"type":"stdin_close","id":"c1"}`,
/// `{"type":"kill","id":"c1"}`. Server → client: `{"type":"stdout"|"stderr","id","data":"<base64>"}`,
/// `{"type":"exit","id","exit_code","timed_out","duration_ms"}` (last frame of a command),
/// `{"type":"error","id"?,"code","message"}`. Stdin stays open until `stdin_close`; without
/// `timeout_seconds` a command runs until it exits, is killed, or the socket closes (which kills
/// every command still running). See docs/streams.md.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/exec/ws",
    operation_id = "exec_websocket",
    tag = "exec",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("access_token" = Option<String>, Query, description = "API key, for clients that cannot set headers"),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol; frames: ExecClientFrame in, ExecServerFrame out"),
    )
)]
pub async fn exec_ws(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Upgrade(ws): Upgrade,
) -> ApiResult<Response> {
    // Ownership and wake-up before the upgrade: those errors are plain HTTP errors.
    let row = guest(&app, &caller, &id).await?;
    Ok(ws.on_upgrade(move |socket| {
        Session {
            app,
            caller,
            sandbox: row.id,
            commands: Arc::default(),
            tasks: JoinSet::new(),
        }
        .run(socket)
    }))
}

/// The running commands of one socket: id → their input channel.
type Commands = Arc<Mutex<HashMap<String, mpsc::Sender<ExecInput>>>>;

struct Session {
    app: Arc<ApiState>,
    caller: Caller,
    sandbox: String,
    commands: Commands,
    /// Command tasks; dropped (aborted) with the session.
    tasks: JoinSet<()>,
}

impl Session {
    async fn run(mut self, socket: WebSocket) {
        let (mut sink, mut stream) = socket.split();
        let (out_tx, mut out_rx) = mpsc::channel::<ExecServerFrame>(OUT_QUEUE);
        // The writer drains every frame to the socket, so a session waiting on one command
        // (a wake, a full stdin queue) never stalls the others' output.
        let writer = tokio::spawn(async move {
            while let Some(frame) = out_rx.recv().await {
                if sink.send(text(&frame)).await.is_err() {
                    break;
                }
            }
        });
        let mut activity = tokio::time::interval(ACTIVITY_EVERY);
        loop {
            tokio::select! {
                msg = stream.next() => {
                    let reply = match msg {
                        Some(Ok(Message::Text(t))) => self.handle(t.as_str(), &out_tx).await,
                        Some(Ok(Message::Binary(_))) => Some(StreamErrorFrame {
                            id: None,
                            code: ErrorCode::InvalidArgument,
                            message: "this socket takes JSON text frames".into(),
                        }),
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                        Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    };
                    if let Some(e) = reply {
                        if out_tx.send(ExecServerFrame::Error(e)).await.is_err() {
                            break;
                        }
                    }
                }
                // Reap finished tasks (their entries are already gone from `commands`).
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                _ = activity.tick() => touch(&self.app, &self.sandbox).await,
            }
        }
        // Dropping the tasks cancels their guest calls: the guest kills what still runs.
        self.tasks.abort_all();
        writer.abort();
    }

    /// Acts on one client frame; returns an error frame to send, if any.
    async fn handle(
        &mut self,
        text: &str,
        out: &mpsc::Sender<ExecServerFrame>,
    ) -> Option<StreamErrorFrame> {
        let frame = match serde_json::from_str::<ExecClientFrame>(text) {
            Ok(f) => f,
            Err(e) => {
                // Name the command in the error when the frame at least had an id.
                let id = serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|v| v.get("id")?.as_str().map(str::to_owned));
                return Some(parse_error(id.as_deref(), &e));
            }
        };
        let (id, input) = match frame {
            ExecClientFrame::Start(start) => return self.start(start, out).await,
            ExecClientFrame::Stdin(f) => match B64.decode(f.data.as_bytes()) {
                Ok(bytes) => (f.id, ExecInput::Stdin(bytes.into())),
                Err(e) => {
                    let e = ApiError::new(ErrorCode::InvalidArgument, format!("data: {e}"));
                    return Some(error_frame(Some(&f.id), e));
                }
            },
            ExecClientFrame::StdinClose(f) => (f.id, ExecInput::StdinEof),
            ExecClientFrame::Kill(f) => (f.id, ExecInput::Signal(SIGKILL)),
        };
        let tx = self.lock().get(&id).cloned();
        let sent = match tx {
            Some(tx) => tx.send(input).await.is_ok(),
            None => false,
        };
        (!sent).then(|| {
            let e = ApiError::new(ErrorCode::NotFound, format!("no running command {id:?}"));
            error_frame(Some(&id), e)
        })
    }

    /// Starts a command; returns an error frame if it cannot start.
    async fn start(
        &mut self,
        start: ExecStartFrame,
        out: &mpsc::Sender<ExecServerFrame>,
    ) -> Option<StreamErrorFrame> {
        let id = start.id.clone();
        let fail = |e: ApiError| Some(error_frame(Some(&id), e));
        if let Err(e) = start.validate() {
            return fail(e.into());
        }
        {
            let commands = self.lock();
            if commands.contains_key(&id) {
                return fail(ApiError::new(
                    ErrorCode::Conflict,
                    format!("command {id:?} is still running"),
                ));
            }
            if commands.len() >= MAX_STREAM_COMMANDS {
                return fail(ApiError::new(
                    ErrorCode::RateLimited,
                    format!("at most {MAX_STREAM_COMMANDS} commands at once on one socket"),
                ));
            }
        }
        // Looked up again for every command: the sandbox may have been hibernated (this wakes
        // it) or deleted since the socket opened.
        let row = match guest(&self.app, &self.caller, &self.sandbox).await {
            Ok(g) => g,
            Err(e) => return fail(e),
        };
        let mut spec = spec(start.to_request(), &row);
        if start.timeout_seconds.is_none() {
            spec.timeout = Duration::ZERO;
        }
        spec.max_output_bytes = 0;
        let (in_tx, in_rx) = mpsc::channel(IN_QUEUE);
        let start = SessionStart {
            spec,
            stdin: true,
            pty: None,
        };
        let events = match self
            .app
            .control
            .host()
            .exec_session(&row.id, start, Box::pin(ReceiverStream::new(in_rx)))
            .await
        {
            Ok(ev) => ev,
            Err(s) => return fail(s.into()),
        };
        self.lock().insert(id.clone(), in_tx);
        let commands = Arc::clone(&self.commands);
        let out = out.clone();
        self.tasks.spawn(forward(id, events, commands, out));
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<ExecInput>>> {
        self.commands.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Forwards one command's events as frames; its entry leaves `commands` before its last frame
/// is queued, so a client may reuse the id as soon as it sees `exit`.
async fn forward<S>(
    id: String,
    mut events: S,
    commands: Commands,
    out: mpsc::Sender<ExecServerFrame>,
) where
    S: futures::Stream<Item = Result<ExecEvent, HostError>> + Unpin,
{
    let done = |commands: &Commands| {
        commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    };
    let last = loop {
        let frame = match events.next().await {
            Some(Ok(ExecEvent::Stdout(b))) => ExecServerFrame::Stdout(ExecOutputFrame {
                id: id.clone(),
                data: B64.encode(&b),
            }),
            Some(Ok(ExecEvent::Stderr(b))) => ExecServerFrame::Stderr(ExecOutputFrame {
                id: id.clone(),
                data: B64.encode(&b),
            }),
            Some(Ok(ExecEvent::Exit {
                exit_code,
                timed_out,
                duration_ms,
                ..
            })) => {
                break ExecServerFrame::Exit(ExecExitFrame {
                    id: id.clone(),
                    exit_code,
                    timed_out,
                    duration_ms,
                })
            }
            Some(Err(s)) => break ExecServerFrame::Error(error_frame(Some(&id), s.into())),
            None => {
                let e = ApiError::new(
                    ErrorCode::Unavailable,
                    "the guest ended the command without an exit status",
                );
                break ExecServerFrame::Error(error_frame(Some(&id), e));
            }
        };
        if out.send(frame).await.is_err() {
            done(&commands);
            return;
        }
    };
    done(&commands);
    let _ = out.send(last).await;
}
