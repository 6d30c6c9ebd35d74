//! File watch: `GET …/files/watch?path=&recursive=` as Server-Sent Events, each a
//! [`WatchFrame`] (`ready`, then `create`/`modify`/`delete`/`rename`/`overflow`; an `error` ends
//! it).

use std::collections::VecDeque;

use pandastack_api_types::WatchFrame;
use reqwest::{Method, Response};

use crate::http::Call;
use crate::sandboxes::sandbox_path;
use crate::sse::{SseDecoder, SseEvent};
use crate::{Client, Error};

impl Client {
    /// `GET …/files/watch`: the changes under the directory `path` (and below it when
    /// `recursive`), the first frame `ready` once the watch is armed. Dropping the stream ends
    /// the watch.
    pub async fn watch_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<WatchStream, Error> {
        let call = Call::new(Method::GET, sandbox_path(id, "/files/watch"))
            .query("path", path)
            .query("recursive", if recursive { "true" } else { "false" });
        let resp = self.send(call).await?;
        Ok(WatchStream {
            resp,
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
        })
    }
}

/// A running watch; read it with [`WatchStream::next`].
#[derive(Debug)]
pub struct WatchStream {
    resp: Response,
    decoder: SseDecoder,
    pending: VecDeque<SseEvent>,
}

impl WatchStream {
    /// The next frame; `None` when the server ended the stream. An `error` frame is an
    /// [`Error::Stream`] with its code.
    pub async fn next(&mut self) -> Result<Option<WatchFrame>, Error> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                let frame: WatchFrame = match serde_json::from_str(&ev.data) {
                    Ok(f) => f,
                    // A frame of a kind this client does not know (a newer server's).
                    Err(_) if ev.event != "error" => continue,
                    Err(e) => return Err(Error::decode("error event", Some(e))),
                };
                if let WatchFrame::Error(e) = frame {
                    return Err(Error::Stream {
                        code: Some(e.code),
                        message: e.message,
                    });
                }
                return Ok(Some(frame));
            }
            match self.resp.chunk().await.map_err(Error::Http)? {
                Some(chunk) => self.pending.extend(self.decoder.push(&chunk)),
                None => return Ok(None),
            }
        }
    }
}
