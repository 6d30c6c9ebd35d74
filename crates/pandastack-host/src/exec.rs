//! Commands inside a sandbox: what to run, what it sends back, and what a session feeds it.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

/// One command to run.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// argv (argv[0] looked up in PATH); or empty and `shell` set.
    pub argv: Vec<String>,
    /// A shell string run with `/bin/sh -c`.
    pub shell: String,
    pub env: HashMap<String, String>,
    /// Working directory; empty means the user's home directory.
    pub cwd: String,
    /// User name or numeric uid; empty means root.
    pub user: String,
    /// All of stdin at once (`None`: stdin is `/dev/null`). Sessions feed stdin as inputs.
    pub stdin: Option<Vec<u8>>,
    /// The guest kills the command's process group after this long; zero means no timeout.
    pub timeout: Duration,
    /// Cap on stdout and on stderr, each; zero means unlimited.
    pub max_output_bytes: u64,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtySize {
    pub rows: u32,
    pub cols: u32,
}

/// How an interactive session runs its command.
#[derive(Debug, Clone, Default)]
pub struct SessionStart {
    /// The command (its `stdin` field is ignored: stdin comes as [`ExecInput::Stdin`]).
    pub spec: ExecSpec,
    /// Stdin is a pipe fed by inputs (else `/dev/null`).
    pub stdin: bool,
    /// Run on a terminal of this size.
    pub pty: Option<PtySize>,
}

/// What a session sends its running command.
#[derive(Debug, Clone)]
pub enum ExecInput {
    Stdin(Bytes),
    /// Close stdin (EOF for the process).
    StdinEof,
    /// A signal (number) for the process group.
    Signal(i32),
    /// The terminal's new size.
    Resize(PtySize),
}

/// An event of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    Exit {
        exit_code: i32,
        timed_out: bool,
        truncated: bool,
        duration_ms: u64,
    },
}

/// What a finished command produced.
#[derive(Debug, Clone, Default)]
pub struct ExecOutcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
    pub timed_out: bool,
    pub truncated: bool,
    pub duration_ms: u64,
}
