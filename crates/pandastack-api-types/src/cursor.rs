use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// A keyset position in a list ordered by `(created_at, id)`, opaque to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at_ms: i64,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cursor: not a cursor returned by this API")]
pub struct CursorError;

impl Cursor {
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.created_at_ms, self.id))
    }

    pub fn decode(s: &str) -> Result<Self, CursorError> {
        let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| CursorError)?;
        let text = String::from_utf8(raw).map_err(|_| CursorError)?;
        let (ms, id) = text.split_once(':').ok_or(CursorError)?;
        let created_at_ms = ms.parse().map_err(|_| CursorError)?;
        if id.is_empty() || id.len() > 64 {
            return Err(CursorError);
        }
        Ok(Self {
            created_at_ms,
            id: id.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let c = Cursor {
            created_at_ms: 1700000000123,
            id: "sb-abc".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()), Ok(c));
        for bad in ["", "!!!", "bm90LWEtY3Vyc29y", "OjE"] {
            assert_eq!(Cursor::decode(bad), Err(CursorError), "{bad}");
        }
    }
}
