//! The request streams of the client-streaming and bidirectional calls, and the response
//! streams turned back into the boundary's.

use bytes::Bytes;
use futures::StreamExt;
use pandastack_host::{BoxStream, ExecEvent, ExecInput, HostResult, PortIo, SessionStart};
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio_stream::wrappers::ReceiverStream;

use crate::convert::*;
use crate::pb;
use crate::status::from_status;
use crate::CHUNK;

/// A response stream of exec events as the boundary's.
pub(super) fn events(s: tonic::Streaming<pb::ExecEvent>) -> BoxStream<HostResult<ExecEvent>> {
    Box::pin(s.map(|r| r.map_err(from_status).and_then(event_from_pb)))
}

/// `s` as a request stream, fed by a task of its own that ends with `s` or when the call
/// drops its request. (tonic's client-streaming future over a boxed `dyn Stream` does not
/// satisfy the `Send` proof `async_trait` needs — a higher-ranked lifetime error — while one
/// over a channel's receiver does.)
pub(super) fn request_stream<T: Send + 'static>(mut s: BoxStream<T>) -> ReceiverStream<T> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let m = tokio::select! {
                m = s.next() => m,
                // The call ended: stop waiting on `s` (a session's inputs may never end).
                () = tx.closed() => return,
            };
            let Some(m) = m else { return };
            if tx.send(m).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// A session's request stream: `start`, then the inputs.
pub(super) fn session_messages(
    id: &str,
    start: SessionStart,
    inputs: BoxStream<ExecInput>,
) -> BoxStream<pb::SessionMessage> {
    use pb::session_message::Message;
    let first = Message::Start(pb::SessionStart {
        id: id.to_owned(),
        spec: Some(spec_to_pb(start.spec)),
        stdin: start.stdin,
        pty: start.pty.map(pty_to_pb),
    });
    let rest = inputs.map(|i| match i {
        ExecInput::Stdin(b) => Message::Stdin(b),
        ExecInput::StdinEof => Message::StdinEof(pb::Empty {}),
        ExecInput::Signal(s) => Message::Signal(s),
        ExecInput::Resize(p) => Message::Resize(pty_to_pb(p)),
    });
    Box::pin(
        futures::stream::once(futures::future::ready(first))
            .chain(rest)
            .map(|m| pb::SessionMessage { message: Some(m) }),
    )
}

/// A write's request stream: the header, then the body in messages of at most [`CHUNK`]
/// bytes; a body error is the last message (`abort`).
pub(super) fn write_messages(
    id: &str,
    path: &str,
    body: BoxStream<Result<Bytes, String>>,
) -> BoxStream<pb::WriteFileMessage> {
    use pb::write_file_message::Message;
    let header = Message::Header(pb::PathRequest {
        id: id.to_owned(),
        path: path.to_owned(),
    });
    let mut aborted = false;
    let data = body
        .take_while(move |r| {
            let go = !aborted;
            aborted |= r.is_err();
            futures::future::ready(go)
        })
        .flat_map(|r| {
            let out: Vec<Message> = match r {
                Ok(mut b) => std::iter::from_fn(|| {
                    (!b.is_empty()).then(|| Message::Data(b.split_to(b.len().min(CHUNK))))
                })
                .collect(),
                Err(m) => vec![Message::Abort(m)],
            };
            futures::stream::iter(out)
        });
    Box::pin(
        futures::stream::once(futures::future::ready(header))
            .chain(data)
            .map(|m| pb::WriteFileMessage { message: Some(m) }),
    )
}

/// The caller's end of a connected port: its writes go to the agent as `data` messages (its
/// shutdown ends the request stream), the agent's messages come back as its reads (the
/// response's end is its EOF).
pub(super) fn port_io(
    tx: tokio::sync::mpsc::Sender<pb::PortMessage>,
    mut inbound: tonic::Streaming<pb::PortData>,
) -> Box<dyn PortIo> {
    use pb::port_message::Message;
    let (ours, theirs) = tokio::io::duplex(2 * CHUNK);
    let (mut read, mut write) = tokio::io::split(ours);
    // Caller → agent; the caller's shutdown ends the request stream.
    tokio::spawn(async move {
        let mut buf = vec![0; CHUNK];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let data = Message::Data(Bytes::copy_from_slice(&buf[..n]));
                    if tx
                        .send(pb::PortMessage {
                            message: Some(data),
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    // Agent → caller; the port's EOF (the response's end) shuts the caller's read side.
    tokio::spawn(async move {
        while let Some(Ok(m)) = inbound.next().await {
            if write.write_all(&m.data).await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    Box::new(theirs)
}
