//! Session handshake on the virtio-serial port.
//!
//! A virtio-serial port is a byte pipe that outlives its peers: the host side is a unix socket that
//! a new host process (after a restore, or an agent restart) connects to, while the guest may still
//! hold state from the previous connection. So every session opens with a line exchange before any
//! HTTP/2 byte is sent:
//!
//! ```text
//! host  -> guest   PANDASTACK/1 HELLO <nonce>\n          (resent until answered)
//! guest -> host    PANDASTACK/1 READY <nonce> restore\n
//! host  -> guest   PANDASTACK/1 RESTORE <nonce> ...\n    (optional, see [`Restore`])
//! guest -> host    PANDASTACK/1 RESTORED <nonce> ok <clock step ms>\n
//! host  <-> guest  HTTP/2 (host is the client)
//! ```
//!
//! The guest ignores everything that is not a HELLO line while it waits for one, and the host
//! ignores everything that is not a READY line for a nonce it sent, so stale bytes of an earlier
//! session on either side never reach the HTTP/2 codec.
//!
//! The word `restore` after READY's nonce says the guest takes a RESTORE line before HTTP/2: a
//! restored VM's identity (clock, entropy, hostname, machine id) applied by the small line code
//! instead of a first gRPC call, whose HTTP/2 and gRPC code paths are a large part of a restore's
//! time under TCG (they run for the first time in a VM whose translation cache starts empty).
//! Agents built before it answer a bare READY, and the host makes the gRPC call instead.
//!
//! A further word `fpr` after READY's nonce says the guest's RESTORE line takes a sixth field,
//! the free-page reporting setting (`PostRestoreRequest.free_page_reporting`). Agents that
//! offer `restore` without `fpr` refuse a RESTORE line with a field they do not know, so the
//! host leaves it out for them.

use crate::v1::FreePageReporting;

const HELLO: &[u8] = b"PANDASTACK/1 HELLO ";
const READY: &[u8] = b"PANDASTACK/1 READY ";
const RESTORE: &[u8] = b"PANDASTACK/1 RESTORE ";
const RESTORED: &[u8] = b"PANDASTACK/1 RESTORED ";
/// What every line of the handshake starts with.
pub const LINE_PREFIX: &[u8] = b"PANDASTACK/1 ";
/// The word after READY's nonce by which a guest offers to take a RESTORE line.
const CAN_RESTORE: &str = "restore";
/// The word after READY's nonce by which a guest offers to take the free-page reporting field
/// on its RESTORE line.
const CAN_FREE_PAGE_REPORTING: &str = "fpr";

/// Longest line either side will buffer while scanning; longer runs of garbage are discarded.
pub const MAX_LINE: usize = 128;
/// Longest RESTORE or RESTORED line.
pub const MAX_RESTORE_LINE: usize = 1024;

/// The HELLO line for `nonce`.
pub fn hello_line(nonce: u64) -> Vec<u8> {
    line(HELLO, nonce, "")
}

/// The READY line for `nonce`, as agents that do not take RESTORE lines answer.
pub fn ready_line(nonce: u64) -> Vec<u8> {
    line(READY, nonce, "")
}

/// Whether the words after READY's nonce (`Scan::Found::extra`) offer to take a RESTORE line.
pub fn offers_restore(extra: &str) -> bool {
    extra.split(' ').any(|w| w == CAN_RESTORE)
}

/// Whether the words after READY's nonce offer to take the free-page reporting field on a
/// RESTORE line.
pub fn offers_free_page_reporting(extra: &str) -> bool {
    offers_restore(extra) && extra.split(' ').any(|w| w == CAN_FREE_PAGE_REPORTING)
}

/// The READY line for `nonce` of an agent that takes a RESTORE line before HTTP/2, with the
/// free-page reporting field.
pub fn ready_line_restorable(nonce: u64) -> Vec<u8> {
    line(
        READY,
        nonce,
        &format!("{CAN_RESTORE} {CAN_FREE_PAGE_REPORTING}"),
    )
}

fn line(prefix: &[u8], nonce: u64, extra: &str) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(format!("{nonce:016x}").as_bytes());
    if !extra.is_empty() {
        v.push(b' ');
        v.extend_from_slice(extra.as_bytes());
    }
    v.push(b'\n');
    v
}

/// The nonce and the words after it (empty if none) of a `prefix` line.
fn parse(prefix: &[u8], line: &[u8]) -> Option<(u64, String)> {
    // The line may start with stale bytes that had no newline of their own.
    let start = line.windows(prefix.len()).rposition(|w| w == prefix)?;
    let rest = &line[start + prefix.len()..];
    let rest = std::str::from_utf8(rest)
        .ok()?
        .trim_end_matches(['\n', '\r']);
    let (hex, extra) = rest.split_once(' ').unwrap_or((rest, ""));
    if hex.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(hex, 16).ok()?, extra.to_owned()))
}

/// The nonce of a whole HELLO line (with or without its newline).
pub fn parse_hello(line: &[u8]) -> Option<u64> {
    line.starts_with(HELLO)
        .then(|| parse(HELLO, line))
        .flatten()
        .map(|(nonce, _)| nonce)
}

/// What a restored guest becomes: the post-restore hook (`Agent.PostRestore` without a network
/// change) as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// Host wall clock; the guest steps its clock to it. The host's connector writes its clock
    /// at the moment it sends the line when that is later.
    pub unix_time_ns: i64,
    /// Mixed into the guest kernel's RNG and credited (at least 32 bytes, at most 256).
    pub entropy: Vec<u8>,
    /// New hostname, or empty to keep it.
    pub hostname: String,
    /// New machine id, or empty to keep it.
    pub machine_id: String,
    /// Whether the guest reports freed memory from now on; `Unspecified` leaves it as it is
    /// (and is all a guest that does not offer `fpr` can be sent).
    pub free_page_reporting: FreePageReporting,
}

/// The RESTORE line's word for a free-page reporting setting other than `Unspecified`.
fn reporting_word(r: FreePageReporting) -> Option<&'static str> {
    match r {
        FreePageReporting::Unspecified => None,
        FreePageReporting::On => Some("fpr=on"),
        FreePageReporting::Off => Some("fpr=off"),
    }
}

impl Restore {
    /// `PANDASTACK/1 RESTORE <nonce> <unix ns> <entropy hex> <hostname or -> <machine id or ->`,
    /// then `fpr=on` or `fpr=off` unless `free_page_reporting` is `Unspecified` (send that to
    /// guests that do not offer `fpr`, see [`offers_free_page_reporting`]). Hostnames and
    /// machine ids never contain spaces (the guest checks both as it would for the gRPC call).
    pub fn line(&self, nonce: u64) -> Vec<u8> {
        let word = |s: &str| {
            if s.is_empty() {
                "-".to_owned()
            } else {
                s.to_owned()
            }
        };
        let mut v = RESTORE.to_vec();
        v.extend_from_slice(
            format!(
                "{nonce:016x} {} {} {} {}",
                self.unix_time_ns,
                hex::encode(&self.entropy),
                word(&self.hostname),
                word(&self.machine_id)
            )
            .as_bytes(),
        );
        if let Some(w) = reporting_word(self.free_page_reporting) {
            v.push(b' ');
            v.extend_from_slice(w.as_bytes());
        }
        v.push(b'\n');
        v
    }

    /// Parses a whole RESTORE line (with or without its newline).
    pub fn parse_line(line: &[u8]) -> Option<(u64, Restore)> {
        let rest = line.strip_prefix(RESTORE)?;
        let rest = std::str::from_utf8(rest)
            .ok()?
            .trim_end_matches(['\n', '\r']);
        let mut words = rest.split(' ');
        let nonce = words.next().filter(|w| w.len() == 16)?;
        let nonce = u64::from_str_radix(nonce, 16).ok()?;
        let unix_time_ns = words.next()?.parse().ok()?;
        let entropy = hex::decode(words.next()?).ok()?;
        if entropy.len() > 256 {
            return None;
        }
        let word = |w: &str| {
            if w == "-" {
                String::new()
            } else {
                w.to_owned()
            }
        };
        let hostname = word(words.next()?);
        let machine_id = word(words.next()?);
        let free_page_reporting = match words.next() {
            None => FreePageReporting::Unspecified,
            Some("fpr=on") => FreePageReporting::On,
            Some("fpr=off") => FreePageReporting::Off,
            Some(_) => return None,
        };
        if words.next().is_some() {
            return None;
        }
        Some((
            nonce,
            Restore {
                unix_time_ns,
                entropy,
                hostname,
                machine_id,
                free_page_reporting,
            },
        ))
    }
}

/// The same hook as the `PostRestore` call, without a network change.
impl From<Restore> for crate::v1::PostRestoreRequest {
    fn from(r: Restore) -> Self {
        Self {
            unix_time_ns: r.unix_time_ns,
            entropy: r.entropy,
            hostname: r.hostname,
            machine_id: r.machine_id,
            network: None,
            free_page_reporting: r.free_page_reporting.into(),
        }
    }
}

/// The guest's answer to a RESTORE line: applied with the clock stepped by `Ok(ms)`, or refused
/// with a one-line reason.
pub fn restored_line(nonce: u64, result: Result<i64, &str>) -> Vec<u8> {
    let mut v = RESTORED.to_vec();
    let text = match result {
        Ok(ms) => format!("{nonce:016x} ok {ms}\n"),
        Err(why) => format!("{nonce:016x} error {}\n", why.replace(['\n', '\r'], " ")),
    };
    v.extend_from_slice(text.as_bytes());
    v
}

/// Parses a RESTORED line: its nonce and what it says.
pub fn parse_restored(line: &[u8]) -> Option<(u64, Result<i64, String>)> {
    let (nonce, extra) = parse(RESTORED, line)?;
    let result = match extra.split_once(' ') {
        Some(("ok", ms)) => Ok(ms.parse().ok()?),
        Some(("error", why)) => Err(why.to_owned()),
        _ => return None,
    };
    Some((nonce, result))
}

/// What a scanner found after being fed some bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// No complete matching line yet; feed more bytes.
    NeedMore,
    /// A matching line with this nonce; `extra` are the words after the nonce on the line (see
    /// [`ready_line_restorable`]), `rest` the bytes that followed the line in the input.
    Found {
        nonce: u64,
        extra: String,
        rest: Vec<u8>,
    },
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
                if let Some((nonce, extra)) = found {
                    return Scan::Found {
                        nonce,
                        extra,
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
                extra: String::new(),
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
                extra: String::new(),
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
                extra: String::new(),
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
                extra: String::new(),
                rest: vec![]
            }
        );
    }

    #[test]
    fn ready_may_offer_restore() {
        assert!(offers_restore("restore") && !offers_restore(""));
        // Agents that take RESTORE lines without the free-page reporting field.
        assert!(!offers_free_page_reporting("restore"));
        assert!(!offers_free_page_reporting("fpr"));
        let mut s = Scanner::ready();
        let Scan::Found { nonce, extra, rest } = s.feed(&ready_line_restorable(5)) else {
            panic!("no READY found");
        };
        assert_eq!((nonce, rest), (5, vec![]));
        assert!(offers_restore(&extra) && offers_free_page_reporting(&extra));
    }

    #[test]
    fn restore_lines_round_trip_and_reject_garbage() {
        let r = Restore {
            unix_time_ns: 1_790_000_000_123_456_789,
            entropy: (0..64).collect(),
            hostname: "sb-1".into(),
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            free_page_reporting: FreePageReporting::Unspecified,
        };
        let line = r.line(0xfeed);
        assert!(line.len() < MAX_RESTORE_LINE);
        assert_eq!(Restore::parse_line(&line), Some((0xfeed, r.clone())));
        let same = Restore {
            hostname: String::new(),
            machine_id: String::new(),
            ..r
        };
        assert_eq!(Restore::parse_line(&same.line(1)), Some((1, same.clone())));
        // Unspecified adds no word: the line is what agents without `fpr` parse.
        assert!(!String::from_utf8_lossy(&line).contains("fpr"));
        for fpr in [FreePageReporting::On, FreePageReporting::Off] {
            let r = Restore {
                free_page_reporting: fpr,
                ..same.clone()
            };
            let line = r.line(2);
            assert!(line.ends_with(if fpr == FreePageReporting::On {
                b" fpr=on\n"
            } else {
                b"fpr=off\n"
            }));
            assert_eq!(Restore::parse_line(&line), Some((2, r.clone())));
            // And the gRPC request carries the same setting.
            assert_eq!(
                crate::v1::PostRestoreRequest::from(r).free_page_reporting(),
                fpr
            );
        }
        for bad in [
            &b"PANDASTACK/1 RESTORE 0000000000000001 12 zz - -\n"[..],
            b"PANDASTACK/1 RESTORE 0000000000000001 12 00 - - extra\n",
            b"PANDASTACK/1 RESTORE 0000000000000001 12 00 - - fpr=on extra\n",
            b"PANDASTACK/1 RESTORE 0000000000000001 x 00 - -\n",
            b"PANDASTACK/1 RESTORE 01 12 00 - -\n",
            b"PANDASTACK/1 HELLO 0000000000000001\n",
        ] {
            assert_eq!(
                Restore::parse_line(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn free_page_reporting_survives_the_wire_and_defaults_to_unspecified() {
        use crate::v1::PostRestoreRequest;
        use prost::Message;
        for fpr in [
            FreePageReporting::Unspecified,
            FreePageReporting::On,
            FreePageReporting::Off,
        ] {
            let req = PostRestoreRequest {
                entropy: vec![1; 32],
                free_page_reporting: fpr.into(),
                ..Default::default()
            };
            let back = PostRestoreRequest::decode(req.encode_to_vec().as_slice()).unwrap();
            assert_eq!(back.free_page_reporting(), fpr);
        }
        // What an old host sends (no field 6) reads as Unspecified.
        let old = PostRestoreRequest {
            entropy: vec![1; 32],
            hostname: "sb".into(),
            ..Default::default()
        };
        let bytes = old.encode_to_vec();
        assert!(!bytes.contains(&(6 << 3)), "field 6 on the wire");
        let back = PostRestoreRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.free_page_reporting(), FreePageReporting::Unspecified);
    }

    #[test]
    fn restored_lines_carry_the_result() {
        assert_eq!(
            parse_restored(&restored_line(3, Ok(-25))),
            Some((3, Ok(-25)))
        );
        assert_eq!(
            parse_restored(&restored_line(4, Err("set clock: EPERM\nmore"))),
            Some((4, Err("set clock: EPERM more".into())))
        );
        assert_eq!(
            parse_restored(b"PANDASTACK/1 RESTORED 0000000000000004 maybe\n"),
            None
        );
    }
}
