//! An incremental Server-Sent Events decoder: bytes in as they arrive, whole events out.
//! Lines end in `\n`, `\r\n` or `\r`; `data:` lines of one event are joined with `\n`; comments
//! (`:` lines, the server's keep-alives) and `id:`/`retry:` are ignored.

/// One event of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:`; `message` when absent.
    pub event: String,
    pub data: String,
}

/// Feed chunks with [`SseDecoder::push`]; complete events come out.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    /// The last byte seen was `\r` (a following `\n` belongs to the same line end).
    after_cr: bool,
}

impl SseDecoder {
    /// Adds bytes; returns the events they completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(ev) = self.line(&String::from_utf8_lossy(&line)) {
                        out.push(ev);
                    }
                }
                _ => self.buf.push(b),
            }
        }
        out
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.event = None;
                return None;
            }
            return Some(SseEvent {
                event: self.event.take().unwrap_or_else(|| "message".into()),
                data: std::mem::take(&mut self.data).join("\n"),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_across_chunks() {
        let mut d = SseDecoder::default();
        let wire = b": keep-alive\n\nevent: stdout\ndata: {\"data\":\"hi\\n\"}\n\nevent: exit\r\ndata: {\"exit_code\":7}\r\n\r\ndata: a\ndata: b\n\n";
        // Byte by byte must give the same events as all at once.
        let mut one: Vec<SseEvent> = Vec::new();
        for b in wire.iter() {
            one.extend(d.push(&[*b]));
        }
        let all = SseDecoder::default().push(wire);
        assert_eq!(one, all);
        assert_eq!(
            all,
            vec![
                SseEvent {
                    event: "stdout".into(),
                    data: r#"{"data":"hi\n"}"#.into()
                },
                SseEvent {
                    event: "exit".into(),
                    data: r#"{"exit_code":7}"#.into()
                },
                SseEvent {
                    event: "message".into(),
                    data: "a\nb".into()
                },
            ]
        );
    }

    #[test]
    fn incomplete_event_waits() {
        let mut d = SseDecoder::default();
        assert!(d.push(b"event: log\ndata: {\"data\":\"x\"}\n").is_empty());
        let ev = d.push(b"\n");
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].event, "log");
    }
}
