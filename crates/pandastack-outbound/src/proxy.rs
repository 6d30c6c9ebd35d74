//! A checking HTTP proxy on the host's loopback, for programs that fetch on a user's behalf
//! and speak HTTP(S) through a proxy (git, apt): every connection they open — the first and
//! each redirect's — goes through here, is resolved here, checked against the
//! [`OutboundPolicy`] and made to the address that was checked (no second lookup a DNS answer
//! could change in between).
//!
//! `CONNECT host:port` (HTTPS) is tunnelled; an absolute-form request (`GET http://host/…`) is
//! forwarded in origin form. A refusal answers 403 with its reason and is kept
//! ([`FetchProxy::refusals`]) so the caller can report it instead of the client's paraphrase.
//! The proxy lives as long as its [`FetchProxy`] (dropping it stops it).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::{OutboundPolicy, Refused};

/// Longest a connection to a checked address may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, hyper::Error>;

/// A running checking proxy (stopped when dropped).
pub struct FetchProxy {
    addr: SocketAddr,
    refusals: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FetchProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    policy: OutboundPolicy,
    refusals: Arc<Mutex<Vec<String>>>,
}

impl FetchProxy {
    /// Starts a proxy on `127.0.0.1` (an ephemeral port) that lets through what `policy`
    /// allows.
    pub async fn start(policy: OutboundPolicy) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let refusals = Arc::<Mutex<Vec<String>>>::default();
        let shared = Arc::new(Shared {
            policy,
            refusals: Arc::clone(&refusals),
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(&shared, req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades();
                    if let Err(e) = conn.await {
                        tracing::debug!(
                            error = &e as &dyn std::error::Error,
                            "fetch proxy connection"
                        );
                    }
                });
            }
        });
        Ok(Self {
            addr,
            refusals,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`, for `http.proxy`, `Acquire::http::Proxy` and the like.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The connections refused so far, each as its reason.
    pub fn refusals(&self) -> Vec<String> {
        self.refusals.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

/// Host and port of a request's target (`CONNECT`'s authority, or an absolute URI's).
fn target(req: &Request<Incoming>) -> Option<(String, u16)> {
    let uri = req.uri();
    let host = uri.host()?.to_owned();
    let port = match uri.port_u16() {
        Some(p) => p,
        None if req.method() == Method::CONNECT => return None,
        None => match uri.scheme_str() {
            Some("http") => 80,
            _ => return None,
        },
    };
    Some((host, port))
}

/// Resolves and checks `host`, then connects to the first checked address that answers.
async fn connect(shared: &Shared, host: &str, port: u16) -> Result<TcpStream, Response<Body>> {
    let addrs = match shared.policy.resolve(host, port).await {
        Ok(a) => a,
        Err(e) => {
            let reason = match &e {
                Refused::Resolve { .. } => {
                    return Err(text(StatusCode::BAD_GATEWAY, error_text(&e)));
                }
                _ => e.to_string(),
            };
            tracing::info!(host, port, reason, "fetch proxy refused a connection");
            if let Ok(mut r) = shared.refusals.lock() {
                r.push(reason.clone());
            }
            return Err(text(StatusCode::FORBIDDEN, reason));
        }
    };
    let mut last = None;
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = Some(format!("connect {a}: {e}")),
            Err(_) => last = Some(format!("connect {a}: timed out")),
        }
    }
    Err(text(
        StatusCode::BAD_GATEWAY,
        last.unwrap_or_else(|| format!("{host}: no address")),
    ))
}

fn error_text(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let Some((host, port)) = target(&req) else {
        return text(
            StatusCode::BAD_REQUEST,
            "a proxy request: CONNECT host:port, or an absolute http:// URI".into(),
        );
    };
    let upstream = match connect(shared, &host, port).await {
        Ok(s) => s,
        Err(refusal) => return refusal,
    };
    if req.method() == Method::CONNECT {
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let mut upstream = upstream;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(e) => {
                    tracing::debug!(error = &e as &dyn std::error::Error, "fetch proxy upgrade")
                }
            }
        });
        return Response::new(http_body_util::Empty::new().map_err(|e| match e {}).boxed());
    }
    forward(upstream, req).await
}

/// Sends an absolute-form request to `upstream` in origin form, without the proxy's own
/// headers; its answer.
async fn forward(upstream: TcpStream, req: Request<Incoming>) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    parts.uri = match path.parse() {
        Ok(u) => u,
        Err(_) => return text(StatusCode::BAD_REQUEST, "request path".into()),
    };
    for h in ["proxy-connection", "proxy-authorization", "keep-alive"] {
        parts.headers.remove(h);
    }
    let req = Request::from_parts(parts, body);
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(x) => x,
            Err(e) => return text(StatusCode::BAD_GATEWAY, error_text(&e)),
        };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match sender.send_request(req).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(e) => text(StatusCode::BAD_GATEWAY, error_text(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server on loopback: answers `hello` and counts its connections.
    async fn origin() -> (u16, Arc<Mutex<usize>>) {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::<Mutex<usize>>::default();
        let s = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                *s.lock().unwrap() += 1;
                let mut buf = vec![0; 4096];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let reply = if head.starts_with("GET /x HTTP/1.1") {
                    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                } else {
                    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                };
                let _ = c.write_all(reply.as_bytes()).await;
            }
        });
        (port, seen)
    }

    async fn through(proxy: &FetchProxy, request: &str) -> String {
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        c.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        // A tunnel stays open: what came within a second is the answer.
        let _ = tokio::time::timeout(Duration::from_secs(1), c.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn refuses_loopback_unless_allowed() {
        let (port, seen) = origin().await;
        let get = format!(
            "GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        );
        let strict = FetchProxy::start(OutboundPolicy::default()).await.unwrap();
        let r = through(&strict, &get).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        assert!(r.contains("a loopback address"), "{r}");
        let connect =
            format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n");
        let r = through(&strict, &connect).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        assert_eq!(strict.refusals().len(), 2, "{:?}", strict.refusals());
        assert_eq!(*seen.lock().unwrap(), 0, "nothing reached the origin");

        let allowed = OutboundPolicy::new(vec![format!("127.0.0.1:{port}").parse().unwrap()]);
        let open = FetchProxy::start(allowed).await.unwrap();
        let r = through(&open, &get).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.ends_with("hello"), "{r}");
        let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = through(&open, &connect).await;
        assert!(r.starts_with("HTTP/1.1 200"), "a tunnel: {r}");
        assert!(open.refusals().is_empty());
        assert_eq!(*seen.lock().unwrap(), 2);
    }
}
