//! The PTY WebSocket (`GET …/pty?cols=&rows=&cmd=`, protocol in `docs/streams.md`): binary
//! frames carry terminal bytes both ways, the client sends `resize` as a JSON text frame, the
//! server sends `exit` (then closes) or `error`.

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use pandastack_api_types::{ErrorCode, PtyClientFrame, PtyServerFrame};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::error::api_error;
use crate::sandboxes::sandbox_path;
use crate::{Client, Error};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Terminal size and program of a PTY session.
#[derive(Debug, Clone, Default)]
pub struct PtyOptions {
    pub cols: Option<u16>,
    pub rows: Option<u16>,
    /// A shell command line; the default is a login shell.
    pub cmd: Option<String>,
}

/// What the server sends on a PTY session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyEvent {
    /// Terminal output.
    Output(Vec<u8>),
    /// The program ended; the socket closes next.
    Exit(i32),
    /// A control frame was refused, or the session failed.
    Error { code: ErrorCode, message: String },
}

/// The sending half of a PTY session.
#[derive(Debug)]
pub struct PtySender {
    sink: SplitSink<Ws, Message>,
}

/// The receiving half of a PTY session.
#[derive(Debug)]
pub struct PtyReceiver {
    stream: SplitStream<Ws>,
}

impl Client {
    /// Opens a PTY session on a sandbox.
    pub async fn pty(
        &self,
        id: &str,
        opts: &PtyOptions,
    ) -> Result<(PtySender, PtyReceiver), Error> {
        let mut url = reqwest::Url::parse(&self.url(&sandbox_path(id, "/pty")))
            .map_err(|e| Error::Config(format!("bad base URL: {e}")))?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme)
            .map_err(|()| Error::Config("bad base URL scheme".into()))?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(c) = opts.cols {
                q.append_pair("cols", &c.to_string());
            }
            if let Some(r) = opts.rows {
                q.append_pair("rows", &r.to_string());
            }
            if let Some(cmd) = &opts.cmd {
                q.append_pair("cmd", cmd);
            }
        }
        let mut req = url.as_str().into_client_request()?;
        if let Some(key) = &self.config.api_key {
            let v = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| Error::Config("the API key is not a valid header value".into()))?;
            req.headers_mut().insert("authorization", v);
        }
        let ws = match tokio_tungstenite::connect_async(req).await {
            Ok((ws, _)) => ws,
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                let header = |n: &str| {
                    resp.headers()
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                let body = resp.body().clone().unwrap_or_default();
                return Err(Error::Api(api_error(
                    resp.status().as_u16(),
                    header("x-request-id"),
                    header("retry-after").and_then(|v| v.parse().ok()),
                    &body,
                )));
            }
            Err(tokio_tungstenite::tungstenite::Error::Io(e)) => {
                return Err(Error::Connect {
                    url: self.config.base_url.clone(),
                    source: Box::new(e),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let (sink, stream) = ws.split();
        Ok((PtySender { sink }, PtyReceiver { stream }))
    }
}

impl PtySender {
    /// Keyboard input.
    pub async fn input(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.sink
            .send(Message::Binary(bytes.to_vec().into()))
            .await
            .map_err(Error::from)
    }

    /// A new terminal size.
    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<(), Error> {
        let frame = serde_json::to_string(&PtyClientFrame::Resize { cols, rows })
            .map_err(|e| Error::decode("resize frame", Some(e)))?;
        self.sink
            .send(Message::Text(frame.into()))
            .await
            .map_err(Error::from)
    }

    /// Closes the socket (the server kills the program).
    pub async fn close(&mut self) -> Result<(), Error> {
        self.sink.close().await.map_err(Error::from)
    }
}

impl PtyReceiver {
    /// The next event; `None` once the socket is closed.
    pub async fn next(&mut self) -> Result<Option<PtyEvent>, Error> {
        loop {
            let Some(msg) = self.stream.next().await else {
                return Ok(None);
            };
            match msg? {
                Message::Binary(b) => return Ok(Some(PtyEvent::Output(b.to_vec()))),
                Message::Text(t) => match serde_json::from_str::<PtyServerFrame>(t.as_str()) {
                    Ok(PtyServerFrame::Exit { exit_code }) => {
                        return Ok(Some(PtyEvent::Exit(exit_code)))
                    }
                    Ok(PtyServerFrame::Error(e)) => {
                        return Ok(Some(PtyEvent::Error {
                            code: e.code,
                            message: e.message,
                        }))
                    }
                    // Frames this client does not know are ignored.
                    Err(_) => continue,
                },
                Message::Close(_) => return Ok(None),
                _ => continue,
            }
        }
    }
}
