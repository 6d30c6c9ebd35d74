//! What the WebSocket routes (`exec_ws`, `pty`) share: error frames from API errors, JSON text
//! frames, and keeping the sandbox marked active while a socket is open.
//!
//! Both routes check the key, the workspace and the sandbox (waking it if hibernated) *before*
//! the upgrade, so those failures are ordinary HTTP errors in the error envelope.

use std::time::Duration;

use axum::extract::ws::Message;
use pandastack_api_types::{ErrorCode, StreamErrorFrame};
use serde::Serialize;

use crate::error::ApiError;
use crate::ApiState;

/// How often an open socket refreshes the sandbox's last activity (idle timeouts count from it).
pub(crate) const ACTIVITY_EVERY: Duration = Duration::from_secs(30);

/// An error frame for an API error (the code and message the HTTP error would carry).
pub(crate) fn error_frame(id: Option<&str>, e: ApiError) -> StreamErrorFrame {
    e.log_cause();
    StreamErrorFrame {
        id: id.map(str::to_owned),
        code: e.code,
        message: e.message,
    }
}

/// An error frame for a frame that did not parse.
pub(crate) fn parse_error(id: Option<&str>, e: &serde_json::Error) -> StreamErrorFrame {
    let code = if e.is_data() {
        ErrorCode::InvalidArgument
    } else {
        ErrorCode::InvalidJson
    };
    StreamErrorFrame {
        id: id.map(str::to_owned),
        code,
        message: format!("frame: {e}"),
    }
}

/// A JSON text frame.
pub(crate) fn text<T: Serialize>(frame: &T) -> Message {
    // Frames are plain structs of strings and numbers: serializing cannot fail.
    Message::Text(serde_json::to_string(frame).unwrap_or_default().into())
}

/// Marks the sandbox active now (a failure only delays idle accounting, so it is logged).
pub(crate) async fn touch(app: &ApiState, sandbox: &str) {
    if let Err(e) = app.control.sandboxes.touch(sandbox).await {
        tracing::warn!(
            sandbox,
            error = &e as &dyn std::error::Error,
            "mark sandbox active"
        );
    }
}
