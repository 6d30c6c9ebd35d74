//! `Ports`: a TCP connection to a port on the guest's loopback, carried over the agent channel
//! (the host's preview proxy reaches a sandbox's web servers through it).
//!
//! One call is one connection. The socket is split: a task copies the host's `data` into the
//! socket (and shuts its write side on `close_write`), the response stream reads the socket in
//! [`CHUNK`]s and ends with `eof`. Both directions are bounded: the reader produces the next chunk
//! only when the response stream asks for one (HTTP/2 flow control pushes back to it), and the
//! writer takes the next input only after the previous one is written. Ending the call drops both
//! halves, which closes the connection.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;

use futures::{Stream, StreamExt};
use pandastack_guest_proto::v1::{
    self, port_input::Input, port_output::Output, ports_server::Ports,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::{Request, Response, Status, Streaming};

/// Largest piece of the guest's answer in one message.
const CHUNK: usize = 64 * 1024;

pub struct PortsService;

type Outputs = Pin<Box<dyn Stream<Item = Result<v1::PortOutput, Status>> + Send>>;

fn output(o: Output) -> v1::PortOutput {
    v1::PortOutput { output: Some(o) }
}

/// Connects to `port` on the loopback: IPv4 first, then IPv6.
async fn connect(port: u16) -> Result<TcpStream, Status> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let err = match TcpStream::connect(v4).await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    match TcpStream::connect(v6).await {
        Ok(s) => Ok(s),
        Err(_) if err.kind() == std::io::ErrorKind::ConnectionRefused => Err(Status::unavailable(
            format!("nothing listens on port {port} in the sandbox (connection refused)"),
        )),
        Err(_) => Err(Status::unavailable(format!(
            "cannot connect to port {port} in the sandbox: {err}"
        ))),
    }
}

#[tonic::async_trait]
impl Ports for PortsService {
    type DialStream = Outputs;

    async fn dial(
        &self,
        req: Request<Streaming<v1::PortInput>>,
    ) -> Result<Response<Outputs>, Status> {
        let mut inputs = req.into_inner();
        let port = match inputs.message().await?.and_then(|m| m.input) {
            Some(Input::Open(o)) => {
                u16::try_from(o.port)
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| {
                        Status::invalid_argument(format!("port {}: want 1 to 65535", o.port))
                    })?
            }
            _ => return Err(Status::invalid_argument("the first input must be `open`")),
        };
        let socket = connect(port).await?;
        // Small writes (HTTP requests, WebSocket frames) go out at once.
        let _ = socket.set_nodelay(true);
        let (rd, mut wr) = socket.into_split();

        // Host → guest: until `close_write`, the end of the inputs, or an error.
        let writer = tokio::spawn(async move {
            while let Some(m) = inputs.next().await {
                match m.ok().and_then(|m| m.input) {
                    Some(Input::Data(b)) => {
                        if wr.write_all(&b).await.is_err() {
                            return;
                        }
                    }
                    Some(Input::CloseWrite(_)) => break,
                    Some(Input::Open(_)) => return,
                    None => return,
                }
            }
            let _ = wr.shutdown().await;
        });
        let guard = AbortOnDrop(writer);

        // Guest → host: `connected`, the socket's bytes, then `eof`; the call ends once the host
        // is done sending too (a guest that stops writing may still be read to).
        let first = futures::stream::iter([Ok(output(Output::Connected(v1::Empty {})))]);
        let data = futures::stream::unfold(
            (rd, vec![0u8; CHUNK], false, guard),
            |(mut rd, mut buf, done, mut guard)| async move {
                if done {
                    let _ = (&mut guard.0).await;
                    return None;
                }
                match rd.read(&mut buf).await {
                    Ok(0) => Some((
                        Ok(output(Output::Eof(v1::Empty {}))),
                        (rd, buf, true, guard),
                    )),
                    Ok(n) => {
                        let out = output(Output::Data(buf[..n].to_vec()));
                        Some((Ok(out), (rd, buf, false, guard)))
                    }
                    Err(e) => Some((
                        Err(Status::unavailable(format!("port connection: {e}"))),
                        (rd, buf, true, guard),
                    )),
                }
            },
        );
        Ok(Response::new(Box::pin(first.chain(data))))
    }
}

/// Aborts the writer task when the call's response stream is dropped (the call ended).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
