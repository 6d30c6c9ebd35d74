//! Message framing over the byte stream: bounded reads of typed backend messages, skipping a
//! message without holding it, buffered writes. Any failure here poisons the connection.

use bytes::{Buf, BytesMut};
use postgres_protocol::message::backend::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::ClientError;

/// The largest backend message accepted (body and length word), like PostgreSQL's own cap
/// on a field value.
pub const MAX_MESSAGE: usize = 1 << 30;

/// Bytes asked of the stream at a time when a message is larger.
const READ_CHUNK: usize = 64 * 1024;

/// A typed message's header: its tag and body length (length word excluded).
#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub tag: u8,
    pub body: usize,
}

pub(super) struct Conn<S> {
    io: S,
    rbuf: BytesMut,
    pub wbuf: BytesMut,
    broken: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(io: S) -> Conn<S> {
        Conn {
            io,
            rbuf: BytesMut::with_capacity(8 * 1024),
            wbuf: BytesMut::with_capacity(1024),
            broken: false,
        }
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The stream cannot be trusted to be at a message boundary any more.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    pub fn into_inner(self) -> S {
        self.io
    }

    /// The stream and what was read from it past the last message taken.
    pub fn into_parts(self) -> (S, BytesMut) {
        (self.io, self.rbuf)
    }

    fn poison<T>(&mut self, result: Result<T, ClientError>) -> Result<T, ClientError> {
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Writes out `wbuf` and flushes.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        let result = async {
            self.io.write_all(&self.wbuf).await?;
            self.io.flush().await?;
            Ok(())
        }
        .await;
        self.wbuf.clear();
        self.poison(result)
    }

    /// Reads until at least `need` bytes are buffered.
    async fn fill(&mut self, need: usize) -> Result<(), ClientError> {
        while self.rbuf.len() < need {
            let want = (need - self.rbuf.len()).clamp(8 * 1024, READ_CHUNK);
            self.rbuf.reserve(want);
            if self.io.read_buf(&mut self.rbuf).await? == 0 {
                return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        Ok(())
    }

    /// The header of the next message, which stays buffered.
    pub async fn header(&mut self) -> Result<Header, ClientError> {
        let result = async {
            self.fill(5).await?;
            let Some(&[tag, a, b, c, d]) = self.rbuf.get(..5) else {
                return Err(ClientError::Protocol("short message header".into()));
            };
            let len = u32::from_be_bytes([a, b, c, d]) as usize;
            if !(4..=MAX_MESSAGE).contains(&len) {
                return Err(ClientError::Protocol(format!(
                    "message {:?} of {len} bytes",
                    char::from(tag)
                )));
            }
            Ok(Header { tag, body: len - 4 })
        }
        .await;
        self.poison(result)
    }

    /// The next message, parsed.
    pub async fn message(&mut self) -> Result<Message, ClientError> {
        let result = async {
            let header = self.header().await?;
            self.fill(5 + header.body).await?;
            Message::parse(&mut self.rbuf)
                .map_err(ClientError::Malformed)?
                .ok_or_else(|| ClientError::Protocol("incomplete message".into()))
        }
        .await;
        self.poison(result)
    }

    /// Reads past the next message without buffering more than a chunk of it; returns its
    /// header.
    pub async fn skip(&mut self) -> Result<Header, ClientError> {
        let result = async {
            let header = self.header().await?;
            let mut remaining = 5 + header.body;
            loop {
                let take = remaining.min(self.rbuf.len());
                self.rbuf.advance(take);
                remaining -= take;
                if remaining == 0 {
                    return Ok(header);
                }
                self.rbuf.reserve(remaining.min(READ_CHUNK));
                if self.io.read_buf(&mut self.rbuf).await? == 0 {
                    return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
        .await;
        self.poison(result)
    }

    /// Shuts the write side down (after a `Terminate`).
    pub async fn shutdown(&mut self) -> Result<(), ClientError> {
        self.broken = true;
        self.io.shutdown().await?;
        Ok(())
    }
}
