//! Server-side answers the front writes itself: an `ErrorResponse`, so that a client that
//! cannot be served learns why in PostgreSQL's own terms instead of seeing a dropped socket.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Severity of an `ErrorResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The statement failed; the session goes on.
    Error,
    /// The session ends (every error before authentication is one).
    Fatal,
}

impl Severity {
    /// The word on the wire (both the localized `S` and the fixed `V` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

/// An encoded `ErrorResponse`: severity, SQLSTATE, message and, if given, hint. NUL bytes in
/// the texts are dropped (the fields are NUL-terminated).
pub fn encode_error(
    severity: Severity,
    sqlstate: &str,
    message: &str,
    hint: Option<&str>,
) -> Bytes {
    let mut buf = BytesMut::with_capacity(64 + message.len());
    buf.put_u8(b'E');
    buf.put_u32(0);
    let mut field = |code: u8, text: &str| {
        buf.put_u8(code);
        buf.extend(text.bytes().filter(|&b| b != 0));
        buf.put_u8(0);
    };
    field(b'S', severity.as_str());
    field(b'V', severity.as_str());
    field(b'C', sqlstate);
    field(b'M', message);
    if let Some(hint) = hint {
        field(b'H', hint);
    }
    buf.put_u8(0);
    // Texts come from the host, not the peer; a message over 4 GiB is not a thing it sends.
    let len = u32::try_from(buf.len() - 1)
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    buf[1..5].copy_from_slice(&len);
    buf.freeze()
}

/// Writes an `ErrorResponse` and flushes. Used for "database does not exist" (`3D000`),
/// "cannot connect now" (`57P03`) while a database wakes, "requires TLS" (`28000`), and the like.
pub async fn write_error<W: AsyncWrite + Unpin + ?Sized>(
    stream: &mut W,
    severity: Severity,
    sqlstate: &str,
    message: &str,
    hint: Option<&str>,
) -> std::io::Result<()> {
    stream
        .write_all(&encode_error(severity, sqlstate, message, hint))
        .await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use fallible_iterator::FallibleIterator;
    use postgres_protocol::message::backend::Message;

    #[test]
    fn encodes_a_parseable_error_response() {
        let bytes = encode_error(
            Severity::Fatal,
            "3D000",
            "database \"x\0y\" does not exist",
            Some("check the id"),
        );
        let mut buf = BytesMut::from(&bytes[..]);
        let Ok(Some(Message::ErrorResponse(body))) = Message::parse(&mut buf) else {
            panic!("not an ErrorResponse");
        };
        assert!(buf.is_empty());
        let fields: Vec<(u8, String)> = body
            .fields()
            .map(|f| {
                Ok((
                    f.type_(),
                    String::from_utf8_lossy(f.value_bytes()).into_owned(),
                ))
            })
            .collect()
            .expect("fields");
        assert_eq!(
            fields,
            vec![
                (b'S', "FATAL".to_owned()),
                (b'V', "FATAL".to_owned()),
                (b'C', "3D000".to_owned()),
                (b'M', "database \"xy\" does not exist".to_owned()),
                (b'H', "check the id".to_owned()),
            ]
        );
    }
}
