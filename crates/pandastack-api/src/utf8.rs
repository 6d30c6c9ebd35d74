//! Text from byte streams that arrive in arbitrary pieces (console logs, command output sent as
//! JSON strings): a character cut by a piece boundary is held back and completed by the next
//! piece instead of turning into two replacement characters.

/// A decoder for one byte stream. Invalid bytes decode as U+FFFD, as with
/// [`String::from_utf8_lossy`].
#[derive(Debug, Default)]
pub(crate) struct Utf8Pieces {
    /// The start of a character cut by the end of the last piece.
    partial: Vec<u8>,
}

impl Utf8Pieces {
    /// The text of `bytes` (after what was held back), holding back a cut character at the end.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        self.partial = split_incomplete(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// What is still held back (an unfinished character: replacement characters), at the end.
    pub(crate) fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.partial);
        String::from_utf8_lossy(&rest).into_owned()
    }
}

/// Splits off an incomplete UTF-8 sequence at the end of `buf` and returns it.
fn split_incomplete(buf: &mut Vec<u8>) -> Vec<u8> {
    let len = buf.len();
    // A sequence is at most 4 bytes: its lead byte is within the last 4.
    for back in 1..=len.min(4) {
        let b = buf[len - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back {
            buf.split_off(len - back)
        } else {
            Vec::new()
        };
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_characters_wait_for_the_next_piece() {
        let euro = "€".as_bytes(); // 3 bytes
        let mut d = Utf8Pieces::default();
        assert_eq!(d.push(&[b"ab".as_slice(), &euro[..2]].concat()), "ab");
        assert_eq!(d.push(&euro[2..]), "€");
        assert_eq!(d.push(euro), "€");
        assert_eq!(d.push(&[0xFF, b'x']), "\u{FFFD}x");
        assert_eq!(d.push(&euro[..1]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
        assert_eq!(d.push(b""), "");
    }
}
