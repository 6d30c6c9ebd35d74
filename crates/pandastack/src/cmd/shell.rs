//! `pandastack sandbox shell ID`: an interactive terminal over the PTY WebSocket. The local
//! terminal is put in raw mode (restored on every way out), keystrokes go to the guest as they
//! are typed, window size changes (SIGWINCH) are sent as `resize`, and the process exits with
//! the remote program's exit code.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use pandastack_client::{Client, PtyEvent, PtyOptions};
use rustix::termios::{self, OptionalActions, Termios};
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// Sandbox id.
    id: String,
    /// Run this shell command line instead of a login shell.
    #[arg(long, short = 'c', value_name = "CMD")]
    cmd: Option<String>,
}

/// Raw mode on standard input while alive; the saved settings come back on drop.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<Self> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).context("cannot read the terminal settings")?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(&stdin, OptionalActions::Now, &raw)
            .context("cannot put the terminal in raw mode")?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// The local terminal's size, if standard input is one.
fn window_size() -> Option<(u16, u16)> {
    let ws = termios::tcgetwinsize(std::io::stdin()).ok()?;
    (ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

pub async fn run(c: &Client, a: ShellArgs) -> anyhow::Result<ExitCode> {
    run_command(c, &a.id, a.cmd).await
}

/// A terminal on sandbox `id` running the shell command line `cmd` (a login shell without one);
/// exits with the remote program's exit code.
pub async fn run_command(c: &Client, id: &str, cmd: Option<String>) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdin().is_terminal();
    let size = if tty { window_size() } else { None };
    let opts = PtyOptions {
        cols: size.map(|s| s.0),
        rows: size.map(|s| s.1),
        cmd,
    };
    let (mut tx, mut rx) = c.pty(id, &opts).await?;
    let raw = if tty { Some(RawMode::enter()?) } else { None };

    // Standard input is read on a plain thread: a blocked read must not keep the runtime (and
    // so the process) from ending.
    let (in_tx, mut in_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if in_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut winch = signal(SignalKind::window_change()).context("cannot watch SIGWINCH")?;
    let mut stdin_open = true;
    let mut exit_code: Option<i32> = None;
    let result: anyhow::Result<()> = async {
        loop {
            tokio::select! {
                input = in_rx.recv(), if stdin_open => match input {
                    Some(bytes) => tx.input(&bytes).await?,
                    None => stdin_open = false,
                },
                _ = winch.recv() => {
                    if let Some((cols, rows)) = window_size() {
                        tx.resize(cols, rows).await?;
                    }
                }
                ev = rx.next() => match ev? {
                    Some(PtyEvent::Output(bytes)) => {
                        let mut out = std::io::stdout().lock();
                        out.write_all(&bytes)?;
                        out.flush()?;
                    }
                    Some(PtyEvent::Exit(code)) => exit_code = Some(code),
                    Some(PtyEvent::Error { code, message }) => {
                        eprint!("\r\npandastack: {message} ({code:?})\r\n");
                    }
                    None => return Ok(()),
                },
            }
        }
    }
    .await;
    drop(raw);
    result?;
    let code = exit_code.context("the terminal session ended without an exit status")?;
    Ok(u8::try_from(code)
        .map(ExitCode::from)
        .unwrap_or(ExitCode::FAILURE))
}
