//! `Process.Exec`: run a command (or a PTY session) and stream its output.
//!
//! Each command is its own session and process group, and — as PID 1 with cgroup v2 — its own
//! cgroup, so a timeout or a cancelled stream kills the whole tree, grandchildren included.
//! Background processes that a command leaves behind when it exits normally keep running.
//! Commands are spawned with `std::process::Command` and waited for only through
//! [`crate::reaper`] (never `tokio::process`, whose own `waitpid` would race the reaper).

mod drive;
mod env;
mod spawn;

use std::pin::Pin;

use futures::Stream;
use pandastack_guest_proto::v1::{self, exec_input::Input, exec_output::Output, process_server};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use self::drive::out;
use super::State;

pub struct ProcessService {
    state: State,
}

impl ProcessService {
    pub fn new(state: State) -> Self {
        Self { state }
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<v1::ExecOutput, Status>> + Send>>;

#[tonic::async_trait]
impl process_server::Process for ProcessService {
    type ExecStream = OutStream;

    async fn exec(
        &self,
        req: Request<Streaming<v1::ExecInput>>,
    ) -> Result<Response<OutStream>, Status> {
        let mut input = req.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no start message"))?;
        let Some(Input::Start(start)) = first.input else {
            return Err(Status::invalid_argument("first input must be start"));
        };
        let received = std::time::Instant::now();
        let (tx, rx) = mpsc::channel(32);
        match spawn::spawn(&self.state, &start)? {
            Ok(running) => {
                tokio::spawn(drive::drive(running, input, tx, start, received));
            }
            Err(e) => {
                // Not a call error: the caller gets what a shell would print and exit with.
                let (exit_code, msg) = spawn::spawn_failure(&start, &e);
                tokio::spawn(async move {
                    let _ = tx.send(out(Output::Stderr(msg.into_bytes()))).await;
                    let _ = tx
                        .send(out(Output::Exit(v1::Exited {
                            exit_code,
                            ..Default::default()
                        })))
                        .await;
                });
            }
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
