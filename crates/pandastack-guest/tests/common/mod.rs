//! Shared helpers: the agent binary in `serve --unix` mode behind a kill-on-drop guard.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use tonic::transport::Channel;

pub struct Agent {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_pandastack-guest"))
        .args(["serve", "--unix"])
        .arg(&socket)
        .spawn()
        .expect("start agent");
    Agent { child, dir, socket }
}

pub async fn connect(a: &Agent) -> Channel {
    pandastack_guest_proto::host::connect(a.socket.clone(), Duration::from_secs(10))
        .await
        .expect("connect")
}

#[derive(Debug, Default)]
pub struct Out {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<v1::Exited>,
    /// Output chunks that arrived before the exit message.
    pub chunks_before_exit: usize,
}

impl Out {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn code(&self) -> i32 {
        self.exit.as_ref().expect("exit").exit_code
    }
}

pub fn start_msg(s: v1::ExecStart) -> v1::ExecInput {
    v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(s)),
    }
}

/// Runs an exec with the given inputs (first must be start) and collects everything.
pub async fn run(ch: &Channel, inputs: Vec<v1::ExecInput>) -> Out {
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter(inputs))
        .await
        .expect("exec")
        .into_inner();
    let mut out = Out::default();
    while let Some(m) = s.message().await.expect("stream") {
        match m.output {
            Some(v1::exec_output::Output::Stdout(b)) => {
                out.stdout.extend(b);
                out.chunks_before_exit += 1;
            }
            Some(v1::exec_output::Output::Stderr(b)) => out.stderr.extend(b),
            Some(v1::exec_output::Output::Exit(e)) => out.exit = Some(e),
            _ => {}
        }
    }
    out
}

pub async fn sh(ch: &Channel, cmd: &str) -> Out {
    run(
        ch,
        vec![start_msg(v1::ExecStart {
            shell: cmd.into(),
            ..Default::default()
        })],
    )
    .await
}
