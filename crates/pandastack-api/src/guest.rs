//! Calls into a sandbox's guest agent on behalf of HTTP handlers: bounded blocking exec, streamed
//! exec events, and file transfer as byte streams. Nothing here knows HTTP; handlers map the
//! results onto wire types.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use pandastack_guest_proto::v1::{
    self, exec_input, exec_output, files_client::FilesClient, process_client::ProcessClient,
    write_input,
};
use tonic::transport::Channel;
use tonic::Status;

/// One command to run.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub shell: String,
    pub env: HashMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    /// Cap on stdout and on stderr, each.
    pub max_output_bytes: u64,
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

/// An event of a streamed command.
#[derive(Debug, Clone)]
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

fn start(spec: ExecSpec) -> Vec<v1::ExecInput> {
    let has_stdin = spec.stdin.is_some();
    let mut inputs = vec![v1::ExecInput {
        input: Some(exec_input::Input::Start(v1::ExecStart {
            argv: spec.argv,
            shell: spec.shell,
            env: spec.env,
            cwd: spec.cwd,
            user: spec.user,
            timeout_ms: spec.timeout.as_millis() as u64,
            stdin: has_stdin,
            max_output_bytes: spec.max_output_bytes,
            ..Default::default()
        })),
    }];
    if let Some(data) = spec.stdin {
        if !data.is_empty() {
            inputs.push(v1::ExecInput {
                input: Some(exec_input::Input::Stdin(data)),
            });
        }
        inputs.push(v1::ExecInput {
            input: Some(exec_input::Input::StdinEof(v1::Empty {})),
        });
    }
    inputs
}

/// Runs a command and streams its events. The request stream stays open until the command
/// exits: dropping the returned stream cancels the call, and the guest kills the process group.
pub async fn exec_stream(
    ch: Channel,
    spec: ExecSpec,
) -> Result<impl Stream<Item = Result<ExecEvent, Status>> + Send + 'static, Status> {
    let inputs = futures::stream::iter(start(spec)).chain(futures::stream::pending());
    let out = ProcessClient::new(ch).exec(inputs).await?.into_inner();
    Ok(out.filter_map(|m| async move {
        match m {
            Err(s) => Some(Err(s)),
            Ok(m) => match m.output? {
                exec_output::Output::Stdout(b) => Some(Ok(ExecEvent::Stdout(b.into()))),
                exec_output::Output::Stderr(b) => Some(Ok(ExecEvent::Stderr(b.into()))),
                exec_output::Output::Exit(e) => Some(Ok(ExecEvent::Exit {
                    exit_code: e.exit_code,
                    timed_out: e.timed_out,
                    truncated: e.stdout_truncated || e.stderr_truncated,
                    duration_ms: e.duration_ms,
                })),
                exec_output::Output::Started(_) => None,
            },
        }
    }))
}

/// Runs a command to completion and collects its output (bounded by `max_output_bytes`).
pub async fn exec(ch: Channel, spec: ExecSpec) -> Result<ExecOutcome, Status> {
    let t = Instant::now();
    let timeout = spec.timeout;
    let mut events = Box::pin(exec_stream(ch, spec).await?);
    let mut out = ExecOutcome::default();
    // The guest enforces the timeout; this bound only guards against a guest that stops answering.
    let deadline = tokio::time::Instant::now() + timeout + Duration::from_secs(10);
    loop {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        match next {
            Err(_) => {
                out.timed_out = true;
                out.exit_code = -1;
                out.duration_ms = t.elapsed().as_millis() as u64;
                return Ok(out);
            }
            Ok(None) => return Err(Status::unavailable("exec stream ended without an exit")),
            Ok(Some(ev)) => match ev? {
                ExecEvent::Stdout(b) => out.stdout.extend_from_slice(&b),
                ExecEvent::Stderr(b) => out.stderr.extend_from_slice(&b),
                ExecEvent::Exit {
                    exit_code,
                    timed_out,
                    truncated,
                    duration_ms,
                } => {
                    out.exit_code = exit_code;
                    out.timed_out = timed_out;
                    out.truncated = truncated;
                    out.duration_ms = duration_ms;
                    return Ok(out);
                }
            },
        }
    }
}

/// Streams a guest file's bytes.
pub async fn read_file(
    ch: Channel,
    path: String,
) -> Result<impl Stream<Item = Result<Bytes, Status>> + Send + 'static, Status> {
    let stream = FilesClient::new(ch)
        .read(v1::ReadRequest {
            path,
            offset: 0,
            length: 0,
        })
        .await?
        .into_inner();
    Ok(stream.map(|c| c.map(|c| Bytes::from(c.data))))
}

/// Writes a guest file from a byte stream (replaced atomically on success). Returns bytes written.
pub async fn write_file<S, E>(ch: Channel, path: String, body: S) -> Result<u64, Status>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let header = v1::WriteInput {
        input: Some(write_input::Input::Header(v1::WriteHeader {
            path,
            mode: 0,
            create_parents: true,
            append: false,
        })),
    };
    // A body error must not look like the end of the file: the input stream then stalls, the
    // call is dropped (cancelling the guest's write, which keeps the old file) and the error is
    // returned.
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
    let mut failed_tx = Some(failed_tx);
    let data = body
        .map(move |r| match r {
            Ok(b) => futures::future::Either::Left(futures::stream::once(async move {
                v1::WriteInput {
                    input: Some(write_input::Input::Data(b.to_vec())),
                }
            })),
            Err(e) => {
                if let Some(tx) = failed_tx.take() {
                    let _ = tx.send(e.to_string());
                }
                futures::future::Either::Right(futures::stream::pending())
            }
        })
        .flatten();
    let inputs = futures::stream::once(async move { header }).chain(data);
    let mut client = FilesClient::new(ch);
    let call = client.write(inputs);
    tokio::select! {
        r = call => Ok(r?.into_inner().bytes_written),
        Ok(e) = failed_rx => Err(Status::invalid_argument(format!("request body: {e}"))),
    }
}
