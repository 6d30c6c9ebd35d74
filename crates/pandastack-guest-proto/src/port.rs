//! The host side of `Ports.Dial`: a TCP connection to a port inside the guest as a tokio byte
//! stream, so hyper or `copy_bidirectional` can use it as they would a socket.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::sync::PollSender;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::v1::{self, port_input, port_output, ports_client::PortsClient};

/// Largest piece of a write in one message.
const CHUNK: usize = 64 * 1024;
/// Messages queued towards the guest before a write waits (with HTTP/2 flow control behind it).
const QUEUE: usize = 4;

/// Connects to TCP `port` on the guest's loopback over the agent channel `ch`. Returns once the
/// guest has connected: nothing listening is an `Unavailable` status naming the port, at once.
///
/// Reads end at the guest side's end of file; `shutdown` ends the host's writing (the guest shuts
/// its socket's write side); dropping the stream ends the call, and the guest closes the
/// connection.
pub async fn connect_port(ch: Channel, port: u16) -> Result<PortStream, Status> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let open = v1::PortInput {
        input: Some(port_input::Input::Open(v1::PortOpen {
            port: u32::from(port),
        })),
    };
    // A new channel has room: this cannot wait or fail.
    let _ = tx.try_send(open);
    let mut outputs = PortsClient::new(ch)
        .dial(ReceiverStream::new(rx))
        .await?
        .into_inner();
    match outputs.message().await? {
        Some(v1::PortOutput {
            output: Some(port_output::Output::Connected(_)),
        }) => {}
        other => {
            return Err(Status::internal(format!(
                "port {port}: the guest answered {other:?} instead of `connected`"
            )))
        }
    }
    Ok(PortStream {
        tx: PollSender::new(tx),
        outputs,
        pending: Bytes::new(),
        eof: false,
    })
}

/// A connection to a port inside the guest (see [`connect_port`]).
pub struct PortStream {
    tx: PollSender<v1::PortInput>,
    outputs: Streaming<v1::PortOutput>,
    /// Received and not read yet.
    pending: Bytes,
    eof: bool,
}

fn broken(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        format!("port connection: {what}"),
    )
}

impl AsyncRead for PortStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.outputs).poll_next(cx)) {
                Some(Ok(m)) => match m.output {
                    Some(port_output::Output::Data(d)) => self.pending = Bytes::from(d),
                    Some(port_output::Output::Eof(_)) | None => self.eof = true,
                    Some(port_output::Output::Connected(_)) => {}
                },
                Some(Err(s)) => {
                    self.eof = true;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        format!("port connection: {}", s.message()),
                    )));
                }
                None => self.eof = true,
            }
        }
    }
}

impl AsyncWrite for PortStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| broken("closed"))?;
        let n = buf.len().min(CHUNK);
        let msg = v1::PortInput {
            input: Some(port_input::Input::Data(buf[..n].to_vec())),
        };
        self.tx.send_item(msg).map_err(|_| broken("closed"))?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Each write is queued as a message; the call sends them as fast as flow control allows.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.tx.is_closed() {
            return Poll::Ready(Ok(()));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| broken("closed"))?;
        let msg = v1::PortInput {
            input: Some(port_input::Input::CloseWrite(v1::Empty {})),
        };
        self.tx.send_item(msg).map_err(|_| broken("closed"))?;
        self.tx.close();
        Poll::Ready(Ok(()))
    }
}
