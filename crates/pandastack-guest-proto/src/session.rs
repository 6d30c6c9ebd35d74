//! Session handshake on the virtio-serial port.
//!
//! A virtio-serial port is a byte pipe that outlives its peers: the host side is a unix socket that
//! a new host process (after a restore, or an agent restart) connects to, while the guest may still
//! hold state from the previous connection. So every session opens with a line exchange before any
//! HTTP/2 byte is sent:
//!
//! ```text
//! host  -> guest   PANDASTACK/1 HELLO <nonce>\n     (resent until answered)
//! guest -> host    PANDASTACK/1 READY <nonce>\n
//! host  <-> guest  HTTP/2 (host is the client)
//! ```
//!
//! The guest ignores everything that is not a HELLO line while it waits for one, and the host
//! ignores everything that is not a READY line for a nonce it sent, so stale bytes of an earlier
//! session on either side never reach the HTTP/2 codec.

const HELLO: &[u8] = b"PANDASTACK/1 HELLO ";
const READY: &[u8] = b"PANDASTACK/1 READY ";

/// Longest line either side will buffer while scanning; longer runs of garbage are discarded.
pub const MAX_LINE: usize = 128;

/// The HELLO line for `nonce`.
pub fn hello_line(nonce: u64) -> Vec<u8> {
    line(HELLO, nonce)
}

/// The READY line for `nonce`.
pub fn ready_line(nonce: u64) -> Vec<u8> {
    line(READY, nonce)
}

fn line(prefix: &[u8], nonce: u64) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(format!("{nonce:016x}\n").as_bytes());
    v
}

fn parse(prefix: &[u8], line: &[u8]) -> Option<u64> {
    // The line may start with stale bytes that had no newline of their own.
    let start = line.windows(prefix.len()).rposition(|w| w == prefix)?;
    let rest = &line[start + prefix.len()..];
    let hex = std::str::from_utf8(rest)
        .ok()?
        .trim_end_matches(['\n', '\r']);
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// What a scanner found after being fed some bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// No complete matching line yet; feed more bytes.
    NeedMore,
    /// A matching line with this nonce; `rest` are the bytes that followed it in the input.
    Found { nonce: u64, rest: Vec<u8> },
}

/// Incremental line scanner that finds the next HELLO (guest side) or READY (host side) line in a
/// byte stream, skipping anything else.
#[derive(Debug)]
pub struct Scanner {
    prefix: &'static [u8],
    line: Vec<u8>,
}

impl Scanner {
    /// Scanner for the guest: looks for HELLO lines.
    pub fn hello() -> Self {
        Self {
            prefix: HELLO,
            line: Vec::with_capacity(MAX_LINE),
        }
    }

    /// Scanner for the host: looks for READY lines.
    pub fn ready() -> Self {
        Self {
            prefix: READY,
            line: Vec::with_capacity(MAX_LINE),
        }
    }

    /// Feeds bytes; returns the first matching line's nonce and the bytes after it.
    pub fn feed(&mut self, bytes: &[u8]) -> Scan {
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                self.line.push(b);
                let found = parse(self.prefix, &self.line);
                self.line.clear();
                if let Some(nonce) = found {
                    return Scan::Found {
                        nonce,
                        rest: bytes[i + 1..].to_vec(),
                    };
                }
            } else if self.line.len() < MAX_LINE {
                self.line.push(b);
            } else {
                // Too long to be a line of ours: keep only the tail, where a prefix could start.
                let keep = self.line.len() - self.prefix.len();
                self.line.drain(..keep);
                self.line.push(b);
            }
        }
        Scan::NeedMore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hello_after_garbage_and_keeps_the_rest() {
        let mut s = Scanner::hello();
        let mut input = b"\x00\x00\x12garbage from an old session\n".to_vec();
        input.extend(hello_line(0xabc));
        input.extend(b"PRI * HTTP/2.0");
        assert_eq!(
            s.feed(&input),
            Scan::Found {
                nonce: 0xabc,
                rest: b"PRI * HTTP/2.0".to_vec()
            }
        );
    }

    #[test]
    fn finds_a_line_split_across_feeds() {
        let mut s = Scanner::ready();
        let l = ready_line(42);
        assert_eq!(s.feed(&l[..7]), Scan::NeedMore);
        assert_eq!(
            s.feed(&l[7..]),
            Scan::Found {
                nonce: 42,
                rest: vec![]
            }
        );
    }

    #[test]
    fn ignores_the_other_sides_line_and_malformed_nonces() {
        let mut s = Scanner::ready();
        assert_eq!(s.feed(&hello_line(1)), Scan::NeedMore);
        assert_eq!(s.feed(b"PANDASTACK/1 READY xyz\n"), Scan::NeedMore);
        assert_eq!(
            s.feed(b"PANDASTACK/1 READY 00000000000000001\n"),
            Scan::NeedMore
        );
    }

    #[test]
    fn finds_hello_glued_to_binary_garbage() {
        let mut s = Scanner::hello();
        let mut input = vec![0u8, 0, 4, 1, 0xff];
        input.extend(hello_line(9));
        assert_eq!(
            s.feed(&input),
            Scan::Found {
                nonce: 9,
                rest: vec![]
            }
        );
    }

    #[test]
    fn survives_long_garbage_without_a_newline() {
        let mut s = Scanner::hello();
        assert_eq!(s.feed(&vec![b'x'; 10 * MAX_LINE]), Scan::NeedMore);
        assert_eq!(s.feed(b"\n"), Scan::NeedMore);
        assert_eq!(
            s.feed(&hello_line(7)),
            Scan::Found {
                nonce: 7,
                rest: vec![]
            }
        );
    }
}
