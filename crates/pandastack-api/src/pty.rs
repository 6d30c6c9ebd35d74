//! `GET /v1/sandboxes/{id}/pty`: an interactive terminal over a WebSocket. Binary frames carry
//! raw terminal bytes both ways; client text frames are JSON control ([`PtyClientFrame`]); the
//! server ends with a text frame `{"type":"exit","exit_code":n}` and closes (docs/streams.md).
//!
//! One guest `Exec` call with `pty` set backs the session; closing the socket cancels it and the
//! guest kills the terminal's process group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use futures::{Stream, StreamExt};
use pandastack_api_types::{
    ErrorCode, ExecRequest, PtyClientFrame, PtyServerFrame, StreamErrorFrame,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, Upgrade};
use crate::workload::{guest, spec};
use crate::ws::{error_frame, parse_error, text, touch, ACTIVITY_EVERY};
use crate::ApiState;
use pandastack_host::{ExecEvent, ExecInput, HostError, PtySize, SessionStart};

/// Terminal size when the client gives none.
const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// Largest terminal side accepted.
const MAX_SIDE: u16 = 4096;
/// What runs when the client names no command: the login shell, bash if there is one.
const DEFAULT_SHELL: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";

/// Open an interactive terminal (PTY) over a WebSocket.
///
/// Binary frames are raw terminal bytes both ways (client: keyboard input; server: terminal
/// output). Client text frames are JSON control: `{"type":"resize","cols":120,"rows":40}`. When
/// the program ends the server sends the text frame `{"type":"exit","exit_code":n}` and closes;
/// closing the socket first kills the program. Errors arrive as
/// `{"type":"error","code","message"}` text frames. See docs/streams.md.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/pty",
    operation_id = "pty_websocket",
    tag = "exec",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("cols" = Option<u16>, Query, minimum = 1, maximum = 4096, description = "Terminal columns (default 80)"),
        ("rows" = Option<u16>, Query, minimum = 1, maximum = 4096, description = "Terminal rows (default 24)"),
        ("cmd" = Option<String>, Query, description = "Shell command line to run (default: a login shell, bash if present)"),
        ("access_token" = Option<String>, Query, description = "API key, for clients that cannot set headers"),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol; binary frames are terminal bytes, text frames PtyClientFrame in and PtyServerFrame out"),
    )
)]
pub async fn pty(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    upgrade: Result<Upgrade, ApiError>,
) -> ApiResult<Response> {
    let side = |name: &str, default: u16| -> ApiResult<u16> {
        match q.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=MAX_SIDE).contains(n))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidArgument,
                        format!("{name}: 1 to {MAX_SIDE}"),
                    )
                }),
        }
    };
    let cols = side("cols", DEFAULT_SIZE.0)?;
    let rows = side("rows", DEFAULT_SIZE.1)?;
    let req = ExecRequest {
        cmd: Some(
            q.get("cmd")
                .cloned()
                .unwrap_or_else(|| DEFAULT_SHELL.into()),
        ),
        ..Default::default()
    };
    req.validate()?;
    // A bad query is 422 whether or not the request upgrades; only then 426 for a plain call.
    let Upgrade(ws) = upgrade?;
    let row = guest(&app, &caller, &id).await?;
    let mut spec = spec(req, &row);
    spec.timeout = Duration::ZERO;
    spec.max_output_bytes = 0;
    let start = SessionStart {
        spec,
        stdin: true,
        pty: Some(PtySize {
            rows: u32::from(rows),
            cols: u32::from(cols),
        }),
    };
    let (in_tx, in_rx) = mpsc::channel(64);
    // Started before the upgrade: a guest that cannot run it is an HTTP error, not a dead socket.
    let events = app
        .control
        .host()
        .exec_session(&row.id, start, Box::pin(ReceiverStream::new(in_rx)))
        .await?;
    let sandbox = row.id;
    Ok(ws.on_upgrade(move |socket| session(app, sandbox, socket, events, in_tx)))
}

/// Shuttles bytes until the program exits or the client goes away.
async fn session<S>(
    app: Arc<ApiState>,
    sandbox: String,
    mut socket: WebSocket,
    mut events: S,
    input: mpsc::Sender<ExecInput>,
) where
    S: Stream<Item = Result<ExecEvent, HostError>> + Unpin,
{
    let mut activity = tokio::time::interval(ACTIVITY_EVERY);
    let send_input = |i: ExecInput| {
        let input = input.clone();
        async move { input.send(i).await.is_ok() }
    };
    loop {
        tokio::select! {
            msg = socket.recv() => {
                let reply = match msg {
                    Some(Ok(Message::Binary(b))) => {
                        send_input(ExecInput::Stdin(b)).await;
                        None
                    }
                    Some(Ok(Message::Text(t))) => match serde_json::from_str::<PtyClientFrame>(&t) {
                        Ok(PtyClientFrame::Resize { cols, rows }) => {
                            let size = PtySize {
                                rows: u32::from(rows.clamp(1, MAX_SIDE)),
                                cols: u32::from(cols.clamp(1, MAX_SIDE)),
                            };
                            send_input(ExecInput::Resize(size)).await;
                            None
                        }
                        Err(e) => Some(parse_error(None, &e)),
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                    // Gone: dropping the call makes the guest kill the terminal's processes.
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                };
                if let Some(e) = reply {
                    if socket.send(text(&PtyServerFrame::Error(e))).await.is_err() {
                        return;
                    }
                }
            }
            ev = events.next() => {
                let last = match ev {
                    Some(Ok(ExecEvent::Stdout(b) | ExecEvent::Stderr(b))) => {
                        if socket.send(Message::Binary(b)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Some(Ok(ExecEvent::Exit { exit_code, .. })) => PtyServerFrame::Exit { exit_code },
                    Some(Err(s)) => PtyServerFrame::Error(error_frame(None, s.into())),
                    None => PtyServerFrame::Error(StreamErrorFrame {
                        id: None,
                        code: ErrorCode::Unavailable,
                        message: "the guest ended the terminal without an exit status".into(),
                    }),
                };
                let _ = socket.send(text(&last)).await;
                let _ = socket
                    .send(Message::Close(Some(CloseFrame {
                        code: axum::extract::ws::close_code::NORMAL,
                        reason: "".into(),
                    })))
                    .await;
                return;
            }
            _ = activity.tick() => touch(&app, &sandbox).await,
        }
    }
}
