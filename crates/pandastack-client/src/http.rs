//! One request path for every call: auth header, `Idempotency-Key`, retries with backoff on
//! 429/502/503 (honouring `Retry-After`), and error answers turned into [`Error::Api`].

use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::api_error;
use crate::{Client, Error};

/// How often and how long to retry calls answered 429, 502 or 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    /// First backoff; doubled on each retry.
    pub base_delay: Duration,
    /// Longest wait between attempts, also for a server's `Retry-After`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): the server's `Retry-After` when given,
    /// else exponential backoff; at most `max_delay`.
    pub fn delay(&self, retry: u32, retry_after: Option<u64>) -> Duration {
        let d = match retry_after {
            Some(s) => Duration::from_secs(s),
            None => self.base_delay.saturating_mul(1u32 << retry.min(16)),
        };
        d.min(self.max_delay)
    }
}

/// What a request carries.
pub(crate) enum Payload {
    Empty,
    Json(Vec<u8>),
    /// A local file, streamed (reopened for each attempt).
    File(PathBuf),
    /// Bytes in memory, sent as `application/octet-stream`.
    Bytes(bytes::Bytes),
    /// UTF-8 text, sent as `text/plain; charset=utf-8`.
    Text(String),
}

impl Payload {
    pub(crate) fn json<T: Serialize>(body: &T) -> Result<Self, Error> {
        serde_json::to_vec(body)
            .map(Payload::Json)
            .map_err(|e| Error::decode("request body", Some(e)))
    }
}

/// A request to send: method, path under the base URL, query, payload.
pub(crate) struct Call<'a> {
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'a str, String)>,
    pub payload: Payload,
    pub idempotency_key: Option<String>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            payload: Payload::Empty,
            idempotency_key: None,
        }
    }

    pub(crate) fn query(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.query.push((k, v.into()));
        self
    }

    pub(crate) fn payload(mut self, p: Payload) -> Self {
        self.payload = p;
        self
    }

    /// Marks the call as a create: one random `Idempotency-Key` for all its attempts.
    pub(crate) fn idempotent(mut self) -> Self {
        self.idempotency_key = Some(format!("cli-{}", hex::encode(rand::random::<[u8; 16]>())));
        self
    }
}

impl Client {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url)
    }

    /// Sends `call`, retrying as the policy says; an error status becomes [`Error::Api`].
    pub(crate) async fn send(&self, call: Call<'_>) -> Result<Response, Error> {
        let url = self.url(&call.path);
        let mut retry = 0;
        loop {
            let mut req = self.http.request(call.method.clone(), &url);
            if !call.query.is_empty() {
                req = req.query(&call.query);
            }
            if let Some(key) = &self.config.api_key {
                req = req.bearer_auth(key);
            }
            if let Some(k) = &call.idempotency_key {
                req = req.header("Idempotency-Key", k);
            }
            req = match &call.payload {
                Payload::Empty => req,
                Payload::Json(b) => req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.clone()),
                Payload::Bytes(b) => req
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(b.clone()),
                Payload::Text(t) => req
                    .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                    .body(t.clone()),
                Payload::File(p) => {
                    let f = tokio::fs::File::open(p)
                        .await
                        .map_err(|e| Error::io(format!("cannot open {}", p.display()), e))?;
                    let len = f
                        .metadata()
                        .await
                        .map_err(|e| Error::io(format!("cannot stat {}", p.display()), e))?
                        .len();
                    let stream = tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024);
                    req.header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                        .header(reqwest::header::CONTENT_LENGTH, len)
                        .body(reqwest::Body::wrap_stream(stream))
                }
            };
            let resp = req
                .send()
                .await
                .map_err(|e| Error::transport(&self.config.base_url, e))?;
            let status = resp.status();
            if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
                return Ok(resp);
            }
            let err = read_error(resp).await;
            let retryable = matches!(status.as_u16(), 429 | 502 | 503);
            if !retryable || retry + 1 >= self.retry.attempts {
                return Err(Error::Api(err));
            }
            tokio::time::sleep(self.retry.delay(retry, err.retry_after)).await;
            retry += 1;
        }
    }

    /// Sends `call` and decodes a JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T, Error> {
        let what = format!("{} {}", call.method, call.path);
        let resp = self.send(call).await?;
        let body = resp.bytes().await.map_err(Error::Http)?;
        serde_json::from_slice(&body).map_err(|e| Error::decode(what, Some(e)))
    }

    /// `POST path` with `req` as its JSON body and an `Idempotency-Key` (one key for every
    /// retry of this call): every create of the client.
    pub(crate) async fn create<B: Serialize, T: DeserializeOwned>(
        &self,
        path: impl Into<String>,
        req: &B,
    ) -> Result<T, Error> {
        let call = Call::new(Method::POST, path)
            .payload(Payload::json(req)?)
            .idempotent();
        self.json(call).await
    }

    /// One page of the list at `path`: at most `limit` items after `cursor` (the previous
    /// page's `next_cursor`).
    pub(crate) async fn page<T: DeserializeOwned>(
        &self,
        path: impl Into<String>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<pandastack_api_types::List<T>, Error> {
        let mut call = Call::new(Method::GET, path);
        if let Some(l) = limit {
            call = call.query("limit", l.to_string());
        }
        if let Some(c) = cursor {
            call = call.query("cursor", c.to_owned());
        }
        self.json(call).await
    }

    /// Every item of a list, page after page (`page` gets the cursor to ask from) until a page
    /// has no `next_cursor`, or the same one again.
    pub(crate) async fn all<T, F, Fut>(&self, mut page: F) -> Result<Vec<T>, Error>
    where
        F: FnMut(Option<String>) -> Fut,
        Fut: std::future::Future<Output = Result<pandastack_api_types::List<T>, Error>>,
    {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let p = page(cursor.clone()).await?;
            all.extend(p.data);
            match p.next_cursor {
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(all),
            }
        }
    }

    /// Sends `call` and drops the (empty) answer.
    pub(crate) async fn empty(&self, call: Call<'_>) -> Result<(), Error> {
        let resp = self.send(call).await?;
        resp.bytes().await.map_err(Error::Http)?;
        Ok(())
    }
}

/// Turns an error answer into an [`crate::ApiError`].
async fn read_error(resp: Response) -> crate::ApiError {
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id");
    let retry_after = header("retry-after").and_then(|v| v.trim().parse().ok());
    let body = resp.bytes().await.unwrap_or_default();
    api_error(status, request_id, retry_after, &body)
}

/// Percent-encodes one path segment (ids are plain, but user input reaches here).
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_honours_retry_after() {
        let p = RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        };
        assert_eq!(p.delay(0, None), Duration::from_millis(100));
        assert_eq!(p.delay(2, None), Duration::from_millis(400));
        assert_eq!(p.delay(10, None), Duration::from_secs(2));
        assert_eq!(p.delay(0, Some(1)), Duration::from_secs(1));
        assert_eq!(p.delay(0, Some(60)), Duration::from_secs(2));
    }

    /// A one-connection-per-answer HTTP server: answers `replies` in order, returns the
    /// requests it saw.
    async fn scripted(
        replies: Vec<&'static str>,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            for reply in replies {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = vec![0u8; 8192];
                let mut req = Vec::new();
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap();
                    req.extend_from_slice(&buf[..n]);
                }
                seen.push(String::from_utf8_lossy(&req).into_owned());
                s.write_all(reply.as_bytes()).await.unwrap();
                s.shutdown().await.unwrap();
            }
            seen
        });
        (url, task)
    }

    #[tokio::test]
    async fn retries_503_with_one_idempotency_key() {
        let (url, server) = scripted(vec![
            "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 404 Not Found\r\nconnection: close\r\nx-request-id: req_h\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n{\"error\":{\"code\":\"snapshot_not_found\",\"message\":\"no such\",\"request_id\":\"req_9\"}}",
        ])
        .await;
        let client = Client::new(crate::Config::new(url, Some("pds_k".into())))
            .unwrap()
            .with_retry(RetryPolicy {
                attempts: 4,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(50),
            });
        let err = client.create_snapshot("sb-1").await.unwrap_err();
        let api = err.api().expect("api error");
        assert_eq!(api.status, 404);
        assert_eq!(
            api.code,
            Some(pandastack_api_types::ErrorCode::SnapshotNotFound)
        );
        assert_eq!(api.request_id.as_deref(), Some("req_9"));
        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 3);
        let key = |r: &str| {
            r.lines()
                .find_map(|l| l.strip_prefix("idempotency-key: "))
                .map(str::to_owned)
        };
        assert!(key(&seen[0]).is_some(), "{}", seen[0]);
        assert!(seen.iter().all(|r| key(r) == key(&seen[0])));
        assert!(seen[0].contains("authorization: Bearer pds_k"));
    }

    #[tokio::test]
    async fn refused_connections_are_connect_errors() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client =
            Client::new(crate::Config::new(format!("http://127.0.0.1:{port}"), None)).unwrap();
        let err = client.get_sandbox("sb-1").await.unwrap_err();
        assert!(err.is_connect(), "{err:?}");
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(seg("sb_ab-1"), "sb_ab-1");
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
    }
}
