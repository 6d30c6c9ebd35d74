//! Calls into a sandbox's guest agent on behalf of HTTP handlers: bounded blocking exec, streamed
//! exec events, interactive sessions (stdin, signals, PTY), and file transfer as byte streams.
//! Nothing here knows HTTP; handlers map the results onto wire types.

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

impl ExecSpec {
    /// The guest's start message for this command. `stdin`: whether stdin is a pipe the caller
    /// feeds (else `/dev/null`); `pty`: run on a terminal of (rows, cols).
    pub fn to_start(&self, stdin: bool, pty: Option<(u32, u32)>) -> v1::ExecStart {
        v1::ExecStart {
            argv: self.argv.clone(),
            shell: self.shell.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            user: self.user.clone(),
            timeout_ms: self.timeout.as_millis() as u64,
            stdin,
            pty: pty.is_some(),
            pty_size: pty.map(|(rows, cols)| v1::PtySize { rows, cols }),
            max_output_bytes: self.max_output_bytes,
        }
    }
}

fn start(spec: ExecSpec) -> Vec<v1::ExecInput> {
    let mut inputs = vec![v1::ExecInput {
        input: Some(exec_input::Input::Start(
            spec.to_start(spec.stdin.is_some(), None),
        )),
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

/// Runs a command whose further inputs (stdin, signals, terminal resizes) come from `inputs`, and
/// streams its events. `inputs` should not end before the command does (a clean end of inputs
/// lets the command run on unattended); dropping the returned stream cancels the call, and the
/// guest kills the process group.
pub async fn exec_session<S>(
    ch: Channel,
    start: v1::ExecStart,
    inputs: S,
) -> Result<impl Stream<Item = Result<ExecEvent, Status>> + Send + 'static, Status>
where
    S: Stream<Item = v1::ExecInput> + Send + 'static,
{
    let first = v1::ExecInput {
        input: Some(exec_input::Input::Start(start)),
    };
    let inputs = futures::stream::once(async move { first })
        .chain(inputs)
        .chain(futures::stream::pending());
    events(ch, inputs).await
}

/// Runs a command and streams its events. The request stream stays open until the command
/// exits: dropping the returned stream cancels the call, and the guest kills the process group.
pub async fn exec_stream(
    ch: Channel,
    spec: ExecSpec,
) -> Result<impl Stream<Item = Result<ExecEvent, Status>> + Send + 'static, Status> {
    let inputs = futures::stream::iter(start(spec)).chain(futures::stream::pending());
    events(ch, inputs).await
}

/// Makes the `Exec` call and maps its outputs to events.
///
/// Cancellation: the guest kills a command when its call is reset, and HTTP/2 resets a stream
/// only once neither side of it is referenced any more. Dropping the response alone is not
/// enough while the request body (`inputs`, open until the command ends) is still being sent,
/// so the returned stream holds a guard whose drop ends `inputs`: then the request half closes
/// and the stream is reset, and the guest kills the command's whole tree.
async fn events<S>(
    ch: Channel,
    inputs: S,
) -> Result<impl Stream<Item = Result<ExecEvent, Status>> + Send + 'static, Status>
where
    S: Stream<Item = v1::ExecInput> + Send + 'static,
{
    let (guard, dropped) = tokio::sync::oneshot::channel::<()>();
    let inputs = inputs.take_until(dropped);
    let out = ProcessClient::new(ch).exec(inputs).await?.into_inner();
    let out = out.map(move |m| {
        let _keep = &guard;
        m
    });
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
