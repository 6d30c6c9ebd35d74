//! The proxy's connections into sandboxes (preview URLs and apps): HTTP/1.1 over the host
//! boundary's port stream ([`pandastack_host::Host::connect_port`]: one `Ports.Dial` call on
//! the guest agent's channel, the guest connecting to the port on its loopback), kept alive
//! between requests per (sandbox, port), so that a request to a warm server does not dial.
//!
//! - **Reuse.** A request takes the most recently used idle connection of its (sandbox, port)
//!   that is still open and has been idle less than [`IDLE_TIMEOUT`]; only without one does it
//!   dial. A connection goes back to the pool once its answer has come off it to the end and it
//!   can take another request — at most [`MAX_IDLE`] per (sandbox, port), the rest close.
//! - **Never pooled**: upgrades (WebSocket: the connection becomes the tunnel), answers after
//!   which the connection closes (`Connection: close`, HTTP/1.0 servers such as Python's
//!   `http.server`), answers a client stopped reading, requests to a sandbox that is not
//!   running (a paused one's requests go through the dial, which answers for its state).
//! - **Going away.** A hibernate, stop or delete ends the VM process, which ends its agent
//!   channel and every stream on it: each pooled connection's task ends with it and the pool
//!   finds it closed (and drops it on the next take or sweep). A sweep every half
//!   [`IDLE_TIMEOUT`] drops connections idle longer than that. The timeout is shorter than
//!   common servers' own keep-alive timeouts (Node's is 5 s), so that the pool, not the server,
//!   ends an idle connection; a server that closes first is seen as soon as its end of file
//!   crosses the channel.
//! - **Retry.** A request that finds its pooled connection closed before it was written is
//!   sent on another one; one that was written when the connection failed (a server closing an
//!   idle connection just then) is sent again on a new connection only when it is a `GET`,
//!   `HEAD` or `OPTIONS` without a body.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, Method};
use hyper::client::conn::http1::SendRequest;

/// Longest a connection is kept idle for reuse.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Most idle connections kept per (sandbox, port).
pub(crate) const MAX_IDLE: usize = 32;

type Key = (String, u16);

/// Idle keep-alive connections into sandboxes (see the module's documentation).
#[derive(Default)]
pub(crate) struct Upstreams(Arc<Inner>);

#[derive(Default)]
struct Inner {
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    /// A sweep task runs (it ends when nothing is idle).
    sweeping: AtomicBool,
}

struct Idle {
    conn: SendRequest<Body>,
    since: Instant,
}

impl Idle {
    fn usable(&self) -> bool {
        self.since.elapsed() < IDLE_TIMEOUT && self.conn.is_ready()
    }
}

impl Upstreams {
    /// An idle connection to `port` of sandbox `id` that can take a request now, if there is one.
    pub(crate) fn take(&self, id: &str, port: u16) -> Option<SendRequest<Body>> {
        let key = (id.to_owned(), port);
        let mut idle = self.0.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(&key)?;
        let mut found = None;
        while let Some(c) = list.pop() {
            if c.usable() {
                found = Some(c.conn);
                break;
            }
        }
        if list.is_empty() {
            idle.remove(&key);
        }
        found
    }

    /// Puts `conn` back once the answer it carries has been read and it can take another
    /// request; never if it closes first (a `Connection: close`, an upgrade, a dropped body).
    pub(crate) fn recycle(&self, id: &str, port: u16, mut conn: SendRequest<Body>) {
        let inner = Arc::downgrade(&self.0);
        let key = (id.to_owned(), port);
        tokio::spawn(async move {
            if conn.ready().await.is_err() {
                return;
            }
            if let Some(inner) = inner.upgrade() {
                inner.put(key, conn);
            }
        });
    }

    /// How many idle connections the pool holds (for tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        let idle = self.0.idle.lock().unwrap();
        idle.values().map(Vec::len).sum()
    }
}

impl Inner {
    fn put(self: &Arc<Self>, key: Key, conn: SendRequest<Body>) {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let list = idle.entry(key).or_default();
            if list.len() >= MAX_IDLE {
                return; // dropped: the connection closes
            }
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
    }
}

/// Drops idle connections past [`IDLE_TIMEOUT`] or closed, every half timeout, until nothing
/// is idle (the next [`Inner::put`] starts another sweep) or the pool is gone.
async fn sweep(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(IDLE_TIMEOUT / 2).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.sweep_once() {
            return;
        }
    }
}

impl Inner {
    /// Drops what is expired or closed; whether nothing is left (the sweep then ends).
    fn sweep_once(&self) -> bool {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|_, list| {
            list.retain(Idle::usable);
            !list.is_empty()
        });
        if idle.is_empty() {
            // Under the lock: a put after this sees `false` and starts a sweep of its own.
            self.sweeping.store(false, Ordering::Release);
        }
        idle.is_empty()
    }
}

/// A copy of `req` to send again if its connection fails after it was written: only a `GET`,
/// `HEAD` or `OPTIONS` without a body (safe to repeat, nothing to replay).
pub(crate) fn replayable(req: &Request) -> Option<Request> {
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS].contains(req.method());
    if !safe || !req.body().is_end_stream() {
        return None;
    }
    let mut copy = Request::new(Body::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// Takes the hop-by-hop headers off a request that is not an upgrade (RFC 9110 7.6.1): they
/// are about the client's connection, not the one into the sandbox (a client's
/// `Connection: close` must not close a pooled connection).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for h in named {
        headers.remove(h);
    }
    for h in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection to a server on the other end of a pipe that answers every request with
    /// `answer`; the number of requests it read so far.
    async fn connection(
        answer: &'static str,
    ) -> (SendRequest<Body>, Arc<std::sync::atomic::AtomicUsize>) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = match server.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    buf.drain(..end + 4);
                    count.fetch_add(1, Ordering::SeqCst);
                    if server.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if answer.contains("Connection: close") {
                        return;
                    }
                }
            }
        });
        let (tx, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client))
                .await
                .unwrap();
        tokio::spawn(conn);
        (tx, seen)
    }

    fn get() -> Request {
        Request::builder()
            .uri("/")
            .header(header::HOST, "x")
            .body(Body::empty())
            .unwrap()
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn kept_alive_connections_are_reused() {
        let pool = Upstreams::default();
        let (mut conn, seen) = connection("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
        let resp = conn.send_request(get()).await.unwrap();
        pool.recycle("sb-1", 80, conn);
        let body = axum::body::to_bytes(Body::new(resp.into_body()), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"ok");
        settle().await;
        assert_eq!(pool.idle(), 1);
        assert!(pool.take("sb-1", 81).is_none());
        assert!(pool.take("sb-2", 80).is_none());
        let mut again = pool.take("sb-1", 80).expect("pooled");
        assert_eq!(pool.idle(), 0);
        let resp = again.send_request(get()).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn closing_answers_are_not_pooled() {
        let pool = Upstreams::default();
        let (mut conn, _) =
            connection("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
        let resp = conn.send_request(get()).await.unwrap();
        pool.recycle("sb-1", 80, conn);
        axum::body::to_bytes(Body::new(resp.into_body()), 1024)
            .await
            .unwrap();
        settle().await;
        assert_eq!(pool.idle(), 0);
        assert!(pool.take("sb-1", 80).is_none());
    }

    #[tokio::test]
    async fn unfinished_answers_are_not_pooled() {
        let pool = Upstreams::default();
        let (mut conn, _) = connection("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok").await;
        let resp = conn.send_request(get()).await.unwrap();
        pool.recycle("sb-1", 80, conn);
        // Not while the answer is still coming, nor after its reader went away.
        settle().await;
        assert_eq!(pool.idle(), 0);
        drop(resp);
        settle().await;
        assert_eq!(pool.idle(), 0);
        assert!(pool.take("sb-1", 80).is_none());
    }

    #[tokio::test]
    async fn idle_connections_expire() {
        let pool = Upstreams::default();
        for _ in 0..2 {
            let (mut conn, _) = connection("HTTP/1.1 204 No Content\r\n\r\n").await;
            conn.send_request(get()).await.unwrap();
            pool.recycle("sb-1", 80, conn);
        }
        settle().await;
        assert_eq!(pool.idle(), 2);
        assert!(pool.0.sweeping.load(Ordering::Acquire), "a sweep runs");
        let backdate = |n: usize| {
            let mut idle = pool.0.idle.lock().unwrap();
            for c in idle
                .get_mut(&("sb-1".to_owned(), 80))
                .unwrap()
                .iter_mut()
                .take(n)
            {
                c.since -= IDLE_TIMEOUT;
            }
        };
        // An expired connection is never taken; a sweep drops it.
        backdate(1);
        assert!(!pool.0.sweep_once());
        assert_eq!(pool.idle(), 1);
        backdate(1);
        assert!(pool.take("sb-1", 80).is_none());
        assert!(pool.0.sweep_once(), "nothing left");
        assert!(!pool.0.sweeping.load(Ordering::Acquire), "the sweep ends");
    }

    #[test]
    fn only_safe_bodiless_requests_are_replayed() {
        assert!(replayable(&get()).is_some());
        let post = Request::builder()
            .method(Method::POST)
            .uri("/")
            .body(Body::empty())
            .unwrap();
        assert!(replayable(&post).is_none());
        let with_body = Request::builder().uri("/").body(Body::from("x")).unwrap();
        assert!(replayable(&with_body).is_none());
    }

    #[test]
    fn hop_by_hop_headers_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("close, x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-end", HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-end"], "2");
    }
}
