//! The data plane over one guest agent channel: bounded blocking exec, streamed exec events,
//! interactive sessions (stdin, signals, PTY), files as byte streams. The host boundary's types
//! in, the guest protocol's out; guest errors become [`HostError::Guest`].

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use pandastack_guest_proto::listing;
use pandastack_guest_proto::v1::{
    self, exec_input, exec_output, files_client::FilesClient, process_client::ProcessClient,
    write_input,
};
use pandastack_host::{
    BoxStream, DirPage, ExecEvent, ExecInput, ExecOutcome, ExecSpec, FileInfo, FileKind,
    GuestErrorKind, HostError, HostResult, ListPage, PtySize, SessionStart, WatchEvent, WatchKind,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// A guest agent's error status as a host error.
pub(crate) fn status(s: Status) -> HostError {
    let kind = match s.code() {
        Code::NotFound => GuestErrorKind::NotFound,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            GuestErrorKind::InvalidArgument
        }
        Code::AlreadyExists => GuestErrorKind::AlreadyExists,
        Code::ResourceExhausted => GuestErrorKind::NoSpace,
        Code::PermissionDenied => GuestErrorKind::PermissionDenied,
        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded => GuestErrorKind::Unavailable,
        _ => GuestErrorKind::Other,
    };
    HostError::guest(kind, s.message())
}

fn pty_size(p: PtySize) -> v1::PtySize {
    v1::PtySize {
        rows: p.rows,
        cols: p.cols,
    }
}

/// The guest's start message for `start`.
fn start_message(start: &SessionStart) -> v1::ExecStart {
    let spec = &start.spec;
    v1::ExecStart {
        argv: spec.argv.clone(),
        shell: spec.shell.clone(),
        env: spec.env.clone(),
        cwd: spec.cwd.clone(),
        user: spec.user.clone(),
        timeout_ms: spec.timeout.as_millis() as u64,
        stdin: start.stdin,
        pty: start.pty.is_some(),
        pty_size: start.pty.map(pty_size),
        max_output_bytes: spec.max_output_bytes,
    }
}

fn input_message(i: ExecInput) -> v1::ExecInput {
    let input = match i {
        ExecInput::Stdin(b) => exec_input::Input::Stdin(b.to_vec()),
        ExecInput::StdinEof => exec_input::Input::StdinEof(v1::Empty {}),
        ExecInput::Signal(n) => exec_input::Input::Signal(n),
        ExecInput::Resize(p) => exec_input::Input::Resize(pty_size(p)),
    };
    v1::ExecInput { input: Some(input) }
}

/// The inputs of a command whose stdin (if any) is all given up front.
fn start(mut spec: ExecSpec) -> Vec<v1::ExecInput> {
    let stdin = spec.stdin.take();
    let start = SessionStart {
        spec,
        stdin: stdin.is_some(),
        pty: None,
    };
    let mut inputs = vec![v1::ExecInput {
        input: Some(exec_input::Input::Start(start_message(&start))),
    }];
    if let Some(data) = stdin {
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
#[tracing::instrument(name = "guest.exec_session", skip_all, level = "info")]
pub(crate) async fn exec_session(
    ch: Channel,
    start: SessionStart,
    inputs: BoxStream<ExecInput>,
) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
    let first = v1::ExecInput {
        input: Some(exec_input::Input::Start(start_message(&start))),
    };
    let inputs = futures::stream::iter([first])
        .chain(MapInputs(inputs))
        .chain(futures::stream::pending());
    Ok(Box::pin(events(ch, inputs).await.map_err(status)?))
}

/// Runs a command and streams its events. The request stream stays open until the command
/// exits: dropping the returned stream cancels the call, and the guest kills the process group.
#[tracing::instrument(name = "guest.exec_stream", skip_all, level = "info")]
pub(crate) async fn exec_stream(
    ch: Channel,
    spec: ExecSpec,
) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
    let inputs = futures::stream::iter(start(spec)).chain(futures::stream::pending());
    Ok(Box::pin(events(ch, inputs).await.map_err(status)?))
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
) -> Result<impl Stream<Item = HostResult<ExecEvent>> + Send + 'static, Status>
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
    Ok(out.filter_map(|m| futures::future::ready(event(m))))
}

/// The event of one guest output (`None`: nothing for the caller).
fn event(m: Result<v1::ExecOutput, Status>) -> Option<HostResult<ExecEvent>> {
    {
        match m {
            Err(s) => Some(Err(status(s))),
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
    }
}

/// Runs a command to completion and collects its output (bounded by `max_output_bytes`).
#[tracing::instrument(name = "guest.exec", skip_all, level = "info")]
pub(crate) async fn exec(ch: Channel, spec: ExecSpec) -> HostResult<ExecOutcome> {
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
            Ok(None) => {
                return Err(HostError::guest(
                    GuestErrorKind::Unavailable,
                    "exec stream ended without an exit",
                ))
            }
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
#[tracing::instrument(name = "guest.read_file", skip_all, level = "info")]
pub(crate) async fn read_file(
    ch: Channel,
    path: String,
) -> HostResult<BoxStream<HostResult<Bytes>>> {
    let stream = FilesClient::new(ch)
        .read(v1::ReadRequest {
            path,
            offset: 0,
            length: 0,
        })
        .await
        .map_err(status)?
        .into_inner();
    Ok(Box::pin(
        stream.map(|c| c.map(|c| Bytes::from(c.data)).map_err(status)),
    ))
}

/// Writes a guest file from a byte stream (replaced atomically on success). Returns bytes written.
#[tracing::instrument(name = "guest.write_file", skip_all, level = "info")]
pub(crate) async fn write_file(
    ch: Channel,
    path: String,
    body: BoxStream<Result<Bytes, String>>,
) -> HostResult<u64> {
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
    let data = WriteData {
        body,
        failed: Some(failed_tx),
    };
    let inputs = futures::stream::iter([header]).chain(data);
    let mut client = FilesClient::new(ch);
    let call = client.write(inputs);
    tokio::select! {
        r = call => Ok(r.map_err(status)?.into_inner().bytes_written),
        Ok(e) = failed_rx => Err(HostError::guest(
            GuestErrorKind::InvalidArgument,
            format!("request body: {e}"),
        )),
    }
}

fn file_info(f: v1::FileInfo) -> FileInfo {
    let kind = match v1::FileType::try_from(f.r#type) {
        Ok(v1::FileType::File) => FileKind::File,
        Ok(v1::FileType::Dir) => FileKind::Dir,
        Ok(v1::FileType::Symlink) => FileKind::Symlink,
        _ => FileKind::Other,
    };
    FileInfo {
        name: f.name,
        path: f.path,
        kind,
        size: f.size,
        mode: f.mode,
        mtime_ms: f.mtime_ms,
        symlink_target: (!f.symlink_target.is_empty()).then_some(f.symlink_target),
    }
}

#[tracing::instrument(name = "guest.stat", skip_all, level = "info")]
pub(crate) async fn stat(ch: Channel, path: String) -> HostResult<FileInfo> {
    let info = FilesClient::new(ch)
        .stat(v1::PathRequest { path })
        .await
        .map_err(status)?
        .into_inner();
    Ok(file_info(info))
}

/// Watches a guest directory: returns once the guest armed the watch (its first, empty batch),
/// then streams the batches that follow.
#[tracing::instrument(name = "guest.watch", skip_all, level = "info")]
pub(crate) async fn watch(
    ch: Channel,
    path: String,
    recursive: bool,
) -> HostResult<BoxStream<HostResult<Vec<WatchEvent>>>> {
    let mut stream = FilesClient::new(ch)
        .watch(v1::WatchRequest { path, recursive })
        .await
        .map_err(watch_status)?
        .into_inner();
    match stream.message().await {
        Ok(Some(_armed)) => {}
        Ok(None) => {
            return Err(HostError::guest(
                GuestErrorKind::Unavailable,
                "the guest ended the watch before arming it",
            ))
        }
        Err(s) => return Err(watch_status(s)),
    }
    Ok(Box::pin(stream.map(|b| {
        b.map(|b| b.events.into_iter().filter_map(watch_event).collect())
            .map_err(status)
    })))
}

fn watch_status(s: Status) -> HostError {
    if s.code() == Code::Unimplemented {
        return HostError::guest(
            GuestErrorKind::InvalidArgument,
            "this sandbox's guest agent cannot watch files (it predates watching); rebuild its template",
        );
    }
    status(s)
}

fn watch_event(e: v1::WatchEvent) -> Option<WatchEvent> {
    let kind = match v1::WatchKind::try_from(e.kind).ok()? {
        v1::WatchKind::Create => WatchKind::Create,
        v1::WatchKind::Modify => WatchKind::Modify,
        v1::WatchKind::Delete => WatchKind::Delete,
        v1::WatchKind::Rename => WatchKind::Rename,
        v1::WatchKind::Overflow => WatchKind::Overflow,
        v1::WatchKind::Unspecified => return None,
    };
    Some(WatchEvent {
        kind,
        path: e.path,
        from: (!e.from.is_empty()).then_some(e.from),
        dir: e.dir,
    })
}

#[tracing::instrument(name = "guest.list", skip_all, level = "info")]
pub(crate) async fn list(
    ch: Channel,
    path: String,
    depth: u32,
    page: ListPage,
) -> HostResult<DirPage> {
    let pattern = match page.pattern.as_deref() {
        None => None,
        Some(p) => Some(listing::NamePattern::new(p).map_err(|e| HostError::Guest {
            kind: GuestErrorKind::InvalidArgument,
            message: format!("pattern: {e}"),
        })?),
    };
    let mut answer = FilesClient::new(ch)
        .list(v1::ListRequest {
            path,
            depth,
            after: page.after.clone().unwrap_or_default(),
            limit: page.limit,
            pattern: page.pattern.clone().unwrap_or_default(),
        })
        .await
        .map_err(status)?
        .into_inner();
    // A guest agent older than name patterns ignores them: its answer is filtered here.
    if let Some(p) = &pattern {
        answer.entries.retain(|e| p.matches(&e.name));
    }
    Ok(hold_to_page(answer, &page))
}

/// The page `page` asks for, from a guest agent's answer. An answer without `next_after` is
/// cut to it with the agent's own paging ([`listing::page`]): a guest agent baked before
/// listings had pages ignores `after` and `limit` and answers the whole listing (sorted by
/// path) that way, and so gives callers the same pages a paging agent does. A paging agent's
/// last page already is that page and passes through unchanged.
fn hold_to_page(answer: v1::ListResponse, page: &ListPage) -> DirPage {
    let answer = if answer.next_after.is_empty() {
        let after = page.after.as_deref().unwrap_or_default();
        listing::page(answer.entries, after, page.limit.max(1))
    } else {
        answer
    };
    DirPage {
        entries: answer.entries.into_iter().map(file_info).collect(),
        next_after: Some(answer.next_after).filter(|n| !n.is_empty()),
    }
}

#[tracing::instrument(name = "guest.mkdir", skip_all, level = "info")]
pub(crate) async fn mkdir(ch: Channel, path: String, parents: bool) -> HostResult<()> {
    FilesClient::new(ch)
        .mkdir(v1::MkdirRequest {
            path,
            parents,
            mode: 0,
        })
        .await
        .map_err(status)?;
    Ok(())
}

#[tracing::instrument(name = "guest.remove", skip_all, level = "info")]
pub(crate) async fn remove(ch: Channel, path: String, recursive: bool) -> HostResult<()> {
    FilesClient::new(ch)
        .remove(v1::RemoveRequest { path, recursive })
        .await
        .map_err(status)?;
    Ok(())
}

#[tracing::instrument(name = "guest.rename", skip_all, level = "info")]
pub(crate) async fn rename(
    ch: Channel,
    from: String,
    to: String,
    overwrite: bool,
) -> HostResult<()> {
    FilesClient::new(ch)
        .rename(v1::RenameRequest {
            from,
            to,
            overwrite,
        })
        .await
        .map_err(status)?;
    Ok(())
}

/// A session's inputs as guest messages (a named stream: a `map` over the boxed stream trips
/// the compiler's `Send` proof of the call's future).
struct MapInputs(BoxStream<ExecInput>);

impl Stream for MapInputs {
    type Item = v1::ExecInput;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<v1::ExecInput>> {
        self.0.as_mut().poll_next(cx).map(|i| i.map(input_message))
    }
}

/// A request body as file data. A body error must not look like the end of the file: the
/// stream then stalls (the caller drops the call) and the error goes to `failed`.
struct WriteData {
    body: BoxStream<Result<Bytes, String>>,
    failed: Option<tokio::sync::oneshot::Sender<String>>,
}

impl Stream for WriteData {
    type Item = v1::WriteInput;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<v1::WriteInput>> {
        use std::task::Poll;
        if self.failed.is_none() {
            return Poll::Pending;
        }
        match self.body.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(v1::WriteInput {
                input: Some(write_input::Input::Data(b.to_vec())),
            })),
            Poll::Ready(Some(Err(e))) => {
                if let Some(tx) = self.failed.take() {
                    let _ = tx.send(e);
                }
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> v1::FileInfo {
        v1::FileInfo {
            name: path.rsplit('/').next().unwrap_or_default().into(),
            path: path.into(),
            mode: 0o644,
            ..Default::default()
        }
    }

    fn whole(entries: Vec<v1::FileInfo>) -> v1::ListResponse {
        v1::ListResponse {
            entries,
            next_after: String::new(),
        }
    }

    fn paths(p: &DirPage) -> Vec<&str> {
        p.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn an_old_agents_whole_listing_is_held_to_the_page() {
        let all: Vec<_> = ["/d/a", "/d/b", "/d/b", "/d/c", "/d/d"]
            .into_iter()
            .map(entry)
            .collect();
        let first = ListPage {
            after: None,
            limit: 2,
            pattern: None,
        };
        let p = hold_to_page(whole(all.clone()), &first);
        assert_eq!(paths(&p), ["/d/a", "/d/b", "/d/b"]);
        assert_eq!(p.next_after.as_deref(), Some("/d/b"));
        let next = ListPage {
            after: p.next_after,
            limit: 2,
            pattern: None,
        };
        let p = hold_to_page(whole(all.clone()), &next);
        assert_eq!(paths(&p), ["/d/c", "/d/d"]);
        assert_eq!(p.next_after, None);
        let everything = ListPage {
            after: None,
            limit: 1000,
            pattern: None,
        };
        assert_eq!(hold_to_page(whole(all), &everything).entries.len(), 5);
        assert!(hold_to_page(whole(Vec::new()), &everything)
            .entries
            .is_empty());
    }
}
