//! Frames of the streaming routes: the multiplexed exec WebSocket (`GET …/exec/ws`), the PTY
//! WebSocket (`GET …/pty`) and the console-log event stream (`GET …/logs?follow=1`). The full
//! protocol, with examples, is in `docs/streams.md`.
//!
//! Client frames are strict (unknown fields and unknown `type`s are rejected with an `error`
//! frame); clients should ignore server frame fields and `type`s they do not know.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, ErrorCode, ExecRequest, FieldError};

/// Longest command id a client may choose on the exec WebSocket.
pub const MAX_STREAM_ID: usize = 64;
/// Commands that may run at once on one exec WebSocket.
pub const MAX_STREAM_COMMANDS: usize = 64;

/// A client → server text frame on `GET …/exec/ws` (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecClientFrame {
    /// Start a command under a client-chosen id (unique among the socket's running commands).
    Start(ExecStartFrame),
    /// Bytes for the command's standard input.
    Stdin(ExecStdinFrame),
    /// Close the command's standard input (end of file).
    StdinClose(ExecIdFrame),
    /// Kill the command's whole process group (SIGKILL); its `exit` frame follows.
    Kill(ExecIdFrame),
}

/// `{"type":"start","id":"c1","cmd":"…"}`: the fields of `POST …/exec` less `stdin`, plus `id`.
/// Standard input stays open until `stdin_close`. Without `timeout_seconds` the command runs
/// until it exits, is killed, or the socket closes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecStartFrame {
    pub id: String,
    /// A shell command line (`/bin/sh -c`).
    #[serde(default)]
    pub cmd: Option<String>,
    /// Program and arguments, no shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

impl ExecStartFrame {
    /// Checks the id and the command, as `POST …/exec` would.
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_stream_id(&self.id)?;
        self.to_request().validate()
    }

    /// The same command as an [`ExecRequest`] (no stdin text: stdin comes in frames).
    pub fn to_request(&self) -> ExecRequest {
        ExecRequest {
            cmd: self.cmd.clone(),
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            user: self.user.clone(),
            stdin: None,
            timeout_seconds: self.timeout_seconds,
        }
    }
}

/// `{"type":"stdin","id":"c1","data":"<base64>"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecStdinFrame {
    pub id: String,
    /// Standard base64 (with padding).
    pub data: String,
}

/// A frame that names only a command: `stdin_close`, `kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecIdFrame {
    pub id: String,
}

/// Command ids on the exec WebSocket: 1–64 printable ASCII characters.
pub fn validate_stream_id(id: &str) -> Result<(), FieldError> {
    if id.is_empty() || id.len() > MAX_STREAM_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(field_error(
            "id",
            format!("1-{MAX_STREAM_ID} printable ASCII characters"),
        ));
    }
    Ok(())
}

/// A server → client text frame on `GET …/exec/ws` (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecServerFrame {
    /// Output on the command's standard output.
    Stdout(ExecOutputFrame),
    /// Output on the command's standard error.
    Stderr(ExecOutputFrame),
    /// The command ended; the last frame for its id (the id may be reused afterwards).
    Exit(ExecExitFrame),
    /// A frame could not be honoured (`id` names the command when there is one), or a command
    /// failed without an exit status (then no `exit` frame follows for it).
    Error(StreamErrorFrame),
}

/// `{"type":"stdout"|"stderr","id":"c1","data":"<base64>"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecOutputFrame {
    pub id: String,
    /// Standard base64 (with padding) of the bytes, in the order produced.
    pub data: String,
}

/// `{"type":"exit","id":"c1","exit_code":0,"timed_out":false,"duration_ms":12}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecExitFrame {
    pub id: String,
    /// Exit status, or 128 + signal number when killed by a signal (137 after `kill`).
    pub exit_code: i32,
    pub timed_out: bool,
    pub duration_ms: u64,
}

/// `{"type":"error","id":"c1","code":"invalid_argument","message":"…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamErrorFrame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub code: ErrorCode,
    pub message: String,
}

/// A client → server text frame on `GET …/pty` (binary frames are terminal input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PtyClientFrame {
    /// `{"type":"resize","cols":120,"rows":40}`: new terminal size.
    Resize { cols: u16, rows: u16 },
}

/// A server → client text frame on `GET …/pty` (binary frames are terminal output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyServerFrame {
    /// `{"type":"exit","exit_code":0}`: the program ended; the server closes the socket next.
    Exit { exit_code: i32 },
    /// A control frame could not be honoured, or the session failed.
    Error(StreamErrorFrame),
}

/// Query of `GET …/pty`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PtyQuery {
    /// Terminal columns (default 80).
    pub cols: Option<u16>,
    /// Terminal rows (default 24).
    pub rows: Option<u16>,
    /// Shell command line to run (default: the user's login shell, bash if present, else sh).
    pub cmd: Option<String>,
}

/// `data` of the `log` event of `GET …/logs?follow=1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogChunk {
    /// Console output (UTF-8; invalid sequences replaced), in order, without gaps.
    pub data: String,
}

/// `data` of the `end` event of `GET …/logs?follow=1`, the last event of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogEnd {
    /// Why the stream ended: `deleted` (the sandbox is gone).
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(json: &str) -> Result<ExecClientFrame, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn exec_client_frames() {
        let f = client(r#"{"type":"start","id":"c1","argv":["cat"]}"#).unwrap();
        let ExecClientFrame::Start(s) = &f else {
            panic!("{f:?}")
        };
        assert_eq!(s.argv.as_deref(), Some(&["cat".to_owned()][..]));
        assert!(s.validate().is_ok());
        assert_eq!(
            client(r#"{"type":"stdin","id":"c1","data":"aGk="}"#).unwrap(),
            ExecClientFrame::Stdin(ExecStdinFrame {
                id: "c1".into(),
                data: "aGk=".into()
            })
        );
        assert_eq!(
            client(r#"{"type":"stdin_close","id":"c1"}"#).unwrap(),
            ExecClientFrame::StdinClose(ExecIdFrame { id: "c1".into() })
        );
        assert!(client(r#"{"type":"kill","id":"c1","bogus":1}"#)
            .unwrap_err()
            .contains("bogus"));
        assert!(client(r#"{"type":"start","id":"c1","cmd":"x","stdin":"y"}"#).is_err());
        assert!(client(r#"{"type":"explode","id":"c1"}"#).is_err());
        assert!(client(r#"{"id":"c1"}"#).is_err());
        let ExecClientFrame::Start(s) = client(r#"{"type":"start","id":"","cmd":"x"}"#).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(s.validate().unwrap_err().field, "id");
        let ExecClientFrame::Start(s) = client(r#"{"type":"start","id":"a"}"#).unwrap() else {
            unreachable!()
        };
        assert_eq!(s.validate().unwrap_err().field, "cmd");
    }

    #[test]
    fn server_frames_are_flat_json() {
        let v = serde_json::to_value(ExecServerFrame::Exit(ExecExitFrame {
            id: "c1".into(),
            exit_code: 3,
            timed_out: false,
            duration_ms: 5,
        }))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"exit","id":"c1","exit_code":3,"timed_out":false,"duration_ms":5})
        );
        let v = serde_json::to_value(ExecServerFrame::Error(StreamErrorFrame {
            id: None,
            code: ErrorCode::InvalidJson,
            message: "x".into(),
        }))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"error","code":"invalid_json","message":"x"})
        );
        let v = serde_json::to_value(PtyServerFrame::Exit { exit_code: 3 }).unwrap();
        assert_eq!(v, serde_json::json!({"type":"exit","exit_code":3}));
    }

    #[test]
    fn pty_control_frames() {
        let f: PtyClientFrame =
            serde_json::from_str(r#"{"type":"resize","cols":100,"rows":30}"#).unwrap();
        assert_eq!(
            f,
            PtyClientFrame::Resize {
                cols: 100,
                rows: 30
            }
        );
        assert!(serde_json::from_str::<PtyClientFrame>(r#"{"type":"resize","cols":1}"#).is_err());
        assert!(serde_json::from_str::<PtyClientFrame>(
            r#"{"type":"resize","cols":1,"rows":1,"x":1}"#
        )
        .is_err());
    }
}

/// One message of `GET …/files/watch` (an SSE event named by its `type`, or a WebSocket text
/// frame). Paths are absolute guest paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchFrame {
    /// The watch is armed: every change after this is told. Sent again after the sandbox woke
    /// from a hibernation (the watch re-armed): changes while it slept are not told.
    Ready { path: String, recursive: bool },
    /// A file or directory appeared (made, or moved in from outside the watched tree).
    Create { path: String, dir: bool },
    /// A file's contents changed (repeated writes close together are told once).
    Modify { path: String, dir: bool },
    /// A file or directory went away (deleted, or moved out of the watched tree).
    Delete { path: String, dir: bool },
    /// `from` was renamed to `path`, both in the watched tree.
    Rename {
        path: String,
        from: String,
        dir: bool,
    },
    /// Changes were dropped (too many at once for the watcher or its reader): what is under
    /// `path` may have changed in ways not told; list it again if that matters.
    Overflow { path: String },
    /// The watch ended with an error (the directory went away, the sandbox was deleted); the
    /// last message.
    Error(StreamErrorFrame),
}

impl WatchFrame {
    /// The frame's `type`, the SSE event's name.
    pub fn kind(&self) -> &'static str {
        match self {
            WatchFrame::Ready { .. } => "ready",
            WatchFrame::Create { .. } => "create",
            WatchFrame::Modify { .. } => "modify",
            WatchFrame::Delete { .. } => "delete",
            WatchFrame::Rename { .. } => "rename",
            WatchFrame::Overflow { .. } => "overflow",
            WatchFrame::Error(_) => "error",
        }
    }
}
