//! Exec: blocking (`POST …/exec`, output bounded by the server) and streamed
//! (`POST …/exec/stream`, Server-Sent Events `stdout`/`stderr`/`exit`/`error`). A non-zero exit
//! is data, not an error.

use std::collections::VecDeque;

use pandastack_api_types::{ExecRequest, ExecResult};
use reqwest::{Method, Response};
use serde::Deserialize;

use crate::http::{Call, Payload};
use crate::sandboxes::sandbox_path;
use crate::sse::{SseDecoder, SseEvent};
use crate::{Client, Error};

/// The end of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ExecExit {
    pub exit_code: i32,
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub duration_ms: u64,
}

/// An event of a streamed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(String),
    Stderr(String),
    /// The last event.
    Exit(ExecExit),
}

impl Client {
    /// `POST …/exec`: runs a command and waits for it.
    pub async fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecResult, Error> {
        let call = Call::new(Method::POST, sandbox_path(id, "/exec")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `POST …/exec/stream`: runs a command, its output arriving as it is produced. Dropping the
    /// stream closes the connection, which kills the command.
    pub async fn exec_stream(&self, id: &str, req: &ExecRequest) -> Result<ExecStream, Error> {
        let call =
            Call::new(Method::POST, sandbox_path(id, "/exec/stream")).payload(Payload::json(req)?);
        let resp = self.send(call).await?;
        Ok(ExecStream {
            resp,
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
            done: false,
        })
    }
}

/// A running streamed command; read it with [`ExecStream::next`].
#[derive(Debug)]
pub struct ExecStream {
    resp: Response,
    decoder: SseDecoder,
    pending: VecDeque<SseEvent>,
    done: bool,
}

#[derive(Deserialize)]
struct Data {
    data: String,
}

#[derive(Deserialize)]
struct StreamError {
    #[serde(default)]
    code: Option<pandastack_api_types::ErrorCode>,
    message: String,
}

impl ExecStream {
    /// The next event: output, then one [`ExecEvent::Exit`]; `None` after the exit. An `error`
    /// event, or a stream that ends without an exit, is an error.
    pub async fn next(&mut self) -> Result<Option<ExecEvent>, Error> {
        loop {
            if self.done {
                return Ok(None);
            }
            if let Some(ev) = self.pending.pop_front() {
                if let Some(e) = decode_event(&ev)? {
                    if matches!(e, ExecEvent::Exit(_)) {
                        self.done = true;
                    }
                    return Ok(Some(e));
                }
                continue;
            }
            match self.resp.chunk().await.map_err(Error::Http)? {
                Some(chunk) => self.pending.extend(self.decoder.push(&chunk)),
                None => {
                    return Err(Error::Stream {
                        code: None,
                        message: "the exec stream ended without an exit status".into(),
                    })
                }
            }
        }
    }

    /// Reads the stream to its end, calling `on_output(is_stderr, text)` for each piece.
    pub async fn wait(mut self, mut on_output: impl FnMut(bool, &str)) -> Result<ExecExit, Error> {
        loop {
            match self.next().await? {
                Some(ExecEvent::Stdout(t)) => on_output(false, &t),
                Some(ExecEvent::Stderr(t)) => on_output(true, &t),
                Some(ExecEvent::Exit(x)) => return Ok(x),
                None => {
                    return Err(Error::Stream {
                        code: None,
                        message: "the exec stream ended without an exit status".into(),
                    })
                }
            }
        }
    }
}

/// One SSE event of `exec/stream` as an [`ExecEvent`]; unknown events are skipped (`None`).
fn decode_event(ev: &SseEvent) -> Result<Option<ExecEvent>, Error> {
    let json_err = |e| Error::decode(format!("{} event", ev.event), Some(e));
    Ok(Some(match ev.event.as_str() {
        "stdout" => ExecEvent::Stdout(
            serde_json::from_str::<Data>(&ev.data)
                .map_err(json_err)?
                .data,
        ),
        "stderr" => ExecEvent::Stderr(
            serde_json::from_str::<Data>(&ev.data)
                .map_err(json_err)?
                .data,
        ),
        "exit" => ExecEvent::Exit(serde_json::from_str(&ev.data).map_err(json_err)?),
        "error" => {
            let e: StreamError = serde_json::from_str(&ev.data).map_err(json_err)?;
            return Err(Error::Stream {
                code: e.code,
                message: e.message,
            });
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn exec_events_decode() {
        assert_eq!(
            decode_event(&ev("stdout", r#"{"data":"hi\n"}"#)).unwrap(),
            Some(ExecEvent::Stdout("hi\n".into()))
        );
        assert_eq!(
            decode_event(&ev(
                "exit",
                r#"{"exit_code":7,"timed_out":false,"truncated":false,"duration_ms":3,"new":1}"#
            ))
            .unwrap(),
            Some(ExecEvent::Exit(ExecExit {
                exit_code: 7,
                timed_out: false,
                truncated: false,
                duration_ms: 3
            }))
        );
        assert_eq!(decode_event(&ev("later", "{}")).unwrap(), None);
        let e = decode_event(&ev("error", r#"{"message":"guest lost"}"#)).unwrap_err();
        assert_eq!(e.to_string(), "guest lost");
        assert!(decode_event(&ev("stdout", "not json")).is_err());
    }
}
