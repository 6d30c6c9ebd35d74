//! The packets a client sends before its first typed message: `StartupMessage`, `SSLRequest`,
//! `GSSENCRequest` and `CancelRequest`, all framed as a length (which counts itself) and a
//! 32-bit code.
//!
//! Parsing is strict and bounded: a packet is at most [`MAX_STARTUP_PACKET`] bytes (PostgreSQL's
//! own limit), every string is NUL-terminated UTF-8, and the parameter list ends with an empty
//! name. Anything else is a [`StartupError`], never a panic.

use bytes::{BufMut, Bytes, BytesMut};

/// The largest packet accepted before the first typed message, length word included
/// (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_PACKET: usize = 10_000;

/// `SSLRequest` code: 1234 in the major half, 5679 in the minor half.
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// `GSSENCRequest` code: 1234/5680.
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;
/// `CancelRequest` code: 1234/5678.
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;

/// The longest cancel key protocol 3.2 allows (3.0 keys are four bytes).
const MAX_CANCEL_KEY: usize = 256;

/// Option names that carry the endpoint (database id) for clients that cannot send SNI.
/// `project=` is Neon's older spelling; `%3D` covers a client that did not URL-decode.
const ENDPOINT_KEYS: [&str; 4] = ["endpoint=", "project=", "endpoint%3D", "project%3D"];

/// Why a startup-phase packet was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StartupError {
    /// The length word is below the 8 bytes every such packet has.
    #[error("startup packet length {0} is too short")]
    TooShort(usize),
    /// The length word is above [`MAX_STARTUP_PACKET`].
    #[error("startup packet length {0} exceeds {MAX_STARTUP_PACKET} bytes")]
    TooLong(usize),
    /// The body does not match the length word.
    #[error("startup packet body is {actual} bytes, its length word says {expected}")]
    LengthMismatch {
        /// Body length announced by the length word.
        expected: usize,
        /// Body bytes present.
        actual: usize,
    },
    /// A string or the parameter list ran past the end of the packet.
    #[error("startup packet is missing a NUL terminator")]
    MissingTerminator,
    /// Bytes after the terminating empty parameter name.
    #[error("startup packet has {0} bytes after its terminator")]
    TrailingBytes(usize),
    /// A name or value is not UTF-8.
    #[error("startup packet parameter is not UTF-8")]
    NotUtf8,
    /// A cancel request whose key is not 4..=256 bytes.
    #[error("cancel request key of {0} bytes")]
    BadCancelKey(usize),
    /// A code with a major version other than 3 (and not one of the special requests).
    #[error("unsupported frontend protocol {major}.{minor}")]
    UnsupportedProtocol {
        /// Major protocol version requested.
        major: u16,
        /// Minor protocol version requested.
        minor: u16,
    },
}

/// One packet of the startup phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// `SSLRequest`: the client wants TLS.
    SslRequest,
    /// `GSSENCRequest`: the client wants GSSAPI encryption.
    GssEncRequest,
    /// `CancelRequest` for the backend `pid`; `secret` is 4 bytes in protocol 3.0 and up to
    /// 256 in 3.2.
    Cancel {
        /// Backend process id from `BackendKeyData`.
        pid: i32,
        /// Secret key from `BackendKeyData`.
        secret: Bytes,
    },
    /// `StartupMessage` of protocol 3.x.
    Startup(Startup),
}

impl Packet {
    /// Checks the length word of a packet (the first four bytes on the wire) and returns the
    /// length of the body that follows it.
    pub fn body_len(length_word: [u8; 4]) -> Result<usize, StartupError> {
        let len = u32::from_be_bytes(length_word) as usize;
        if len < 8 {
            return Err(StartupError::TooShort(len));
        }
        if len > MAX_STARTUP_PACKET {
            return Err(StartupError::TooLong(len));
        }
        Ok(len - 4)
    }

    /// Parses a whole packet, length word included.
    pub fn parse_framed(packet: &[u8]) -> Result<Packet, StartupError> {
        let Some((word, body)) = packet.split_first_chunk::<4>() else {
            return Err(StartupError::TooShort(packet.len()));
        };
        let expected = Packet::body_len(*word)?;
        if body.len() != expected {
            return Err(StartupError::LengthMismatch {
                expected,
                actual: body.len(),
            });
        }
        Packet::parse_body(body)
    }

    /// Parses the body of a packet (everything after the length word).
    pub fn parse_body(body: &[u8]) -> Result<Packet, StartupError> {
        let Some((code, rest)) = body.split_first_chunk::<4>() else {
            return Err(StartupError::TooShort(body.len() + 4));
        };
        match u32::from_be_bytes(*code) {
            SSL_REQUEST_CODE | GSSENC_REQUEST_CODE if !rest.is_empty() => {
                Err(StartupError::TrailingBytes(rest.len()))
            }
            SSL_REQUEST_CODE => Ok(Packet::SslRequest),
            GSSENC_REQUEST_CODE => Ok(Packet::GssEncRequest),
            CANCEL_REQUEST_CODE => {
                let Some((pid, secret)) = rest.split_first_chunk::<4>() else {
                    return Err(StartupError::BadCancelKey(0));
                };
                if !(4..=MAX_CANCEL_KEY).contains(&secret.len()) {
                    return Err(StartupError::BadCancelKey(secret.len()));
                }
                Ok(Packet::Cancel {
                    pid: i32::from_be_bytes(*pid),
                    secret: Bytes::copy_from_slice(secret),
                })
            }
            version => {
                let (major, minor) = ((version >> 16) as u16, (version & 0xffff) as u16);
                if major != 3 {
                    return Err(StartupError::UnsupportedProtocol { major, minor });
                }
                Ok(Packet::Startup(Startup {
                    params: parse_params(rest)?,
                    minor,
                }))
            }
        }
    }
}

fn parse_params(mut rest: &[u8]) -> Result<Vec<(String, String)>, StartupError> {
    let mut params = Vec::new();
    loop {
        let name = take_cstr(&mut rest)?;
        if name.is_empty() {
            break;
        }
        let value = take_cstr(&mut rest)?;
        params.push((name, value));
    }
    if !rest.is_empty() {
        return Err(StartupError::TrailingBytes(rest.len()));
    }
    Ok(params)
}

fn take_cstr(rest: &mut &[u8]) -> Result<String, StartupError> {
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(StartupError::MissingTerminator)?;
    let (text, tail) = rest.split_at(end);
    let text = std::str::from_utf8(text).map_err(|_| StartupError::NotUtf8)?;
    *rest = tail.get(1..).unwrap_or_default();
    Ok(text.to_owned())
}

/// The encoded `CancelRequest` for a backend, as a client would send it.
pub fn encode_cancel_request(pid: i32, secret: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(12 + secret.len());
    // At most 256 bytes of key: the length fits.
    buf.put_u32((12 + secret.len()) as u32);
    buf.put_u32(CANCEL_REQUEST_CODE);
    buf.put_i32(pid);
    buf.put_slice(secret);
    buf.freeze()
}

/// A parsed `StartupMessage`: the parameters in the order the client sent them and the minor
/// protocol version it asked for (major is always 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Startup {
    /// `(name, value)` pairs, in order; names are non-empty.
    pub params: Vec<(String, String)>,
    /// Requested minor version: 0 for protocol 3.0, 2 for PostgreSQL 18's 3.2.
    pub minor: u16,
}

impl Startup {
    /// A protocol 3.0 startup message with these parameters.
    pub fn new(params: Vec<(String, String)>) -> Startup {
        Startup { params, minor: 0 }
    }

    /// The first value of a parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The `user` parameter (PostgreSQL requires it; its absence is left to the server).
    pub fn user(&self) -> Option<&str> {
        self.param("user")
    }

    /// The `database` parameter as sent; PostgreSQL defaults a missing one to the user name.
    pub fn database(&self) -> Option<&str> {
        self.param("database")
    }

    /// The endpoint named in the `options` parameter, Neon's convention for clients without
    /// SNI: a token `endpoint=<id>` (or `project=<id>`) among the whitespace-separated
    /// options, e.g. `options=endpoint%3Dabc` in a URL, which libpq decodes to `endpoint=abc`.
    /// The first such token wins. Backslash escapes are resolved as PostgreSQL does.
    pub fn endpoint(&self) -> Option<String> {
        let options = self.param("options")?;
        split_options(options)
            .into_iter()
            .find_map(|token| endpoint_value(token).map(unescape))
            .filter(|value| !value.is_empty())
    }

    /// The message to send to the real server: the same parameters in the same order and the
    /// same protocol version, with every endpoint token (and a `-c` right before one) removed
    /// from `options`, and `options` left out if nothing else remains in it.
    pub fn encode_for_upstream(&self) -> Bytes {
        let params = self.params.iter().filter_map(|(name, value)| {
            if name != "options" {
                return Some((name.as_str(), value.clone()));
            }
            let kept = strip_endpoint(value);
            (!kept.is_empty()).then_some((name.as_str(), kept))
        });
        encode(self.minor, params)
    }

    /// The message exactly as parsed (every parameter kept).
    pub fn encode(&self) -> Bytes {
        encode(
            self.minor,
            self.params
                .iter()
                .map(|(name, value)| (name.as_str(), value.clone())),
        )
    }
}

fn encode<'a>(minor: u16, params: impl Iterator<Item = (&'a str, String)>) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_u32(0);
    buf.put_u32((3 << 16) | u32::from(minor));
    for (name, value) in params {
        put_cstr(&mut buf, name);
        put_cstr(&mut buf, &value);
    }
    buf.put_u8(0);
    let len = (buf.len() as u32).to_be_bytes();
    buf[..4].copy_from_slice(&len);
    buf.freeze()
}

/// Writes `text` without any NUL byte (a parsed parameter never has one) and a terminator.
fn put_cstr(buf: &mut BytesMut, text: &str) {
    buf.extend(text.bytes().filter(|&b| b != 0));
    buf.put_u8(0);
}

fn endpoint_value(token: &str) -> Option<&str> {
    ENDPOINT_KEYS
        .iter()
        .find_map(|key| strip_prefix_ignore_case(token, key))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// `options` split the way the server splits it (`pg_split_opts`): on ASCII whitespace, a
/// backslash taking the next character literally. Tokens are returned raw (escapes kept).
fn split_options(options: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut start = None;
    let mut escaped = false;
    for (i, c) in options.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c.is_ascii_whitespace() {
            if let Some(s) = start.take() {
                tokens.push(&options[s..i]);
            }
            continue;
        }
        start.get_or_insert(i);
        escaped = c == '\\';
    }
    if let Some(s) = start {
        tokens.push(&options[s..]);
    }
    tokens
}

fn unescape(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn strip_endpoint(options: &str) -> String {
    let tokens = split_options(options);
    let mut kept: Vec<&str> = Vec::with_capacity(tokens.len());
    for token in tokens {
        if endpoint_value(token).is_some() {
            // `-c endpoint=x` names no real setting (custom ones need a dot): drop the `-c`.
            if kept.last() == Some(&"-c") {
                kept.pop();
            }
            continue;
        }
        kept.push(token);
    }
    kept.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup(params: &[(&str, &str)]) -> Startup {
        Startup::new(
            params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn round_trips_a_startup_message() {
        let s = startup(&[("user", "alice"), ("database", "db"), ("options", "-c a=b")]);
        let parsed = Packet::parse_framed(&s.encode()).expect("parse");
        assert_eq!(parsed, Packet::Startup(s.clone()));
        assert_eq!(s.user(), Some("alice"));
        assert_eq!(s.database(), Some("db"));
        assert_eq!(s.endpoint(), None);
    }

    #[test]
    fn keeps_the_minor_version() {
        let mut s = startup(&[("user", "u")]);
        s.minor = 2;
        let bytes = s.encode_for_upstream();
        assert_eq!(&bytes[4..8], &[0, 3, 0, 2]);
        assert_eq!(Packet::parse_framed(&bytes), Ok(Packet::Startup(s)));
    }

    #[test]
    fn parses_the_special_requests() {
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(Packet::parse_framed(&ssl), Ok(Packet::SslRequest));
        let gss = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
        assert_eq!(Packet::parse_framed(&gss), Ok(Packet::GssEncRequest));
        let cancel = encode_cancel_request(42, &[1, 2, 3, 4]);
        assert_eq!(
            Packet::parse_framed(&cancel),
            Ok(Packet::Cancel {
                pid: 42,
                secret: Bytes::from_static(&[1, 2, 3, 4])
            })
        );
        let long_key = encode_cancel_request(7, &[9; 32]);
        assert!(matches!(
            Packet::parse_framed(&long_key),
            Ok(Packet::Cancel { pid: 7, .. })
        ));
    }

    #[test]
    fn refuses_malformed_packets() {
        assert_eq!(
            Packet::body_len([0, 0, 0, 7]),
            Err(StartupError::TooShort(7))
        );
        assert_eq!(
            Packet::body_len(10_001u32.to_be_bytes()),
            Err(StartupError::TooLong(10_001))
        );
        assert_eq!(
            Packet::body_len([0xff, 0xff, 0xff, 0xff]),
            Err(StartupError::TooLong(u32::MAX as usize))
        );
        assert_eq!(
            Packet::parse_framed(&[0, 0]),
            Err(StartupError::TooShort(2))
        );
        assert!(matches!(
            Packet::parse_framed(&[0, 0, 0, 12, 0, 3, 0, 0]),
            Err(StartupError::LengthMismatch {
                expected: 8,
                actual: 4
            })
        ));
        // Missing the list terminator, then a value without its NUL.
        assert_eq!(
            Packet::parse_body(b"\0\x03\0\0user\0bob\0"),
            Err(StartupError::MissingTerminator)
        );
        assert_eq!(
            Packet::parse_body(b"\0\x03\0\0user\0bob"),
            Err(StartupError::MissingTerminator)
        );
        assert_eq!(
            Packet::parse_body(b"\0\x03\0\0user\0bob\0\0junk"),
            Err(StartupError::TrailingBytes(4))
        );
        assert_eq!(
            Packet::parse_body(b"\0\x03\0\0user\0\xff\xfe\0\0"),
            Err(StartupError::NotUtf8)
        );
        assert_eq!(
            Packet::parse_body(b"\0\x02\0\0user\0bob\0\0"),
            Err(StartupError::UnsupportedProtocol { major: 2, minor: 0 })
        );
        assert_eq!(
            Packet::parse_body(&[0x04, 0xd2, 0x16, 0x2f, 0]),
            Err(StartupError::TrailingBytes(1))
        );
        assert_eq!(
            Packet::parse_body(&[0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 1, 2]),
            Err(StartupError::BadCancelKey(2))
        );
        assert_eq!(
            Packet::parse_body(&[0x04, 0xd2, 0x16, 0x2e, 0, 0]),
            Err(StartupError::BadCancelKey(0))
        );
        // Every prefix of a valid packet is an error, never a panic.
        let good = startup(&[("user", "u"), ("options", "endpoint=x")]).encode();
        for cut in 0..good.len() {
            assert!(Packet::parse_framed(&good[..cut]).is_err(), "cut at {cut}");
            let _ = Packet::parse_body(good.get(4..cut).unwrap_or_default());
        }
    }

    #[test]
    fn finds_the_endpoint_in_options() {
        for (options, want) in [
            ("endpoint=abc", Some("abc")),
            ("-c x=y endpoint=abc", Some("abc")),
            ("endpoint=abc -c x=y", Some("abc")),
            ("project=abc", Some("abc")),
            ("endpoint%3Dabc", Some("abc")),
            ("  endpoint=abc\t", Some("abc")),
            ("-c endpoint=abc", Some("abc")),
            ("endpoint=a\\ b", Some("a b")),
            ("endpoint=", None),
            ("-c search_path=endpoint=x", None),
            ("-c x=y", None),
            ("", None),
        ] {
            let s = startup(&[("user", "u"), ("options", options)]);
            assert_eq!(s.endpoint().as_deref(), want, "options {options:?}");
        }
        assert_eq!(startup(&[("user", "u")]).endpoint(), None);
    }

    #[test]
    fn strips_the_endpoint_for_upstream() {
        let s = startup(&[
            ("user", "u"),
            ("options", "-c a=b endpoint=abc -c c=d\\ e"),
            ("database", "d"),
        ]);
        let Ok(Packet::Startup(up)) = Packet::parse_framed(&s.encode_for_upstream()) else {
            panic!("upstream message does not parse");
        };
        assert_eq!(
            up.params,
            vec![
                ("user".to_string(), "u".to_string()),
                ("options".to_string(), "-c a=b -c c=d\\ e".to_string()),
                ("database".to_string(), "d".to_string()),
            ]
        );

        for options in ["endpoint=abc", " project=abc ", "-c endpoint=abc"] {
            let s = startup(&[("user", "u"), ("options", options), ("database", "d")]);
            let Ok(Packet::Startup(up)) = Packet::parse_framed(&s.encode_for_upstream()) else {
                panic!("upstream message does not parse");
            };
            assert_eq!(up.param("options"), None, "options {options:?}");
            assert_eq!(up.params.len(), 2);
        }
    }
}
