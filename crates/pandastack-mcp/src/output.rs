//! What tools answer with: JSON (as text for the model, and as structured content), and text
//! bounded to a number of bytes with what was cut said.

use rmcp::model::CallToolResult;
use serde::Serialize;

use crate::ToolError;

/// `value` as the tool's result: its JSON as text and as structured content.
pub(crate) fn json(value: impl Serialize) -> Result<CallToolResult, ToolError> {
    let v = serde_json::to_value(value).map_err(ToolError::Encode)?;
    Ok(CallToolResult::structured(v))
}

/// Text cut to a bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Capped {
    /// The text, whole or its head and tail around a marker saying how much was left out.
    pub text: String,
    /// Whether anything was left out.
    pub truncated: bool,
    /// Size of the whole text, bytes.
    pub total_bytes: usize,
}

/// `s` within about `max` bytes: whole if it fits, else its first and last halves (cut on
/// character boundaries) around `[… N bytes omitted …]`. The end of a command's output is
/// often what matters (the error), so both ends are kept.
pub(crate) fn cap(s: &str, max: usize) -> Capped {
    let total_bytes = s.len();
    if total_bytes <= max {
        return Capped {
            text: s.to_owned(),
            truncated: false,
            total_bytes,
        };
    }
    let mut head = max / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = total_bytes - (max - max / 2);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    let omitted = tail - head;
    Capped {
        text: format!("{}[… {omitted} bytes omitted …]{}", &s[..head], &s[tail..]),
        truncated: true,
        total_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_whole() {
        let c = cap("hello", 5);
        assert_eq!(c.text, "hello");
        assert!(!c.truncated);
    }

    #[test]
    fn long_text_keeps_both_ends() {
        let s = format!("{}{}", "a".repeat(100), "b".repeat(100));
        let c = cap(&s, 20);
        assert!(c.truncated);
        assert_eq!(c.total_bytes, 200);
        assert_eq!(
            c.text,
            format!(
                "{}[… 180 bytes omitted …]{}",
                "a".repeat(10),
                "b".repeat(10)
            )
        );
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let s = "é".repeat(50); // 100 bytes, 2 per character
        let c = cap(&s, 11);
        assert!(c.truncated);
        // The head rounds down, the tail up: never half a character.
        assert!(c.text.starts_with("ééé[…") || c.text.starts_with("éé[…"));
        assert!(c.text.ends_with("…]ééé") || c.text.ends_with("…]éé"));
    }
}
