//! The health check of a new version: an HTTP/1.1 `GET` of the app's health path on its port
//! inside the VM (through the host boundary's port stream, as the proxy reaches it), healthy
//! when the status is 2xx or 3xx. A 5xx, a refused connection or no answer is unhealthy.

use std::time::{Duration, Instant};

use pandastack_host::Host;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between tries.
const RETRY: Duration = Duration::from_millis(200);

/// What the last try saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Nothing listens on the port (yet).
    NotListening,
    /// An HTTP status.
    Status(u16),
    /// Something else: no answer in time, not HTTP.
    Broken(String),
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::NotListening => write!(f, "nothing listens on the port"),
            Probe::Status(s) => write!(f, "HTTP {s}"),
            Probe::Broken(m) => write!(f, "{m}"),
        }
    }
}

impl Probe {
    pub fn healthy(&self) -> bool {
        matches!(self, Probe::Status(s) if (200..400).contains(s))
    }
}

/// One `GET path` on `port` of sandbox `id`.
pub async fn probe(host: &dyn Host, id: &str, port: u16, path: &str, name: &str) -> Probe {
    let mut io = match host.connect_port(id, port).await {
        Ok(io) => io,
        Err(_) => return Probe::NotListening,
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {name}\r\nUser-Agent: pandastack-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let exchange = async {
        io.write_all(request.as_bytes()).await?;
        io.flush().await?;
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
            let n = io.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(head)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Err(_) => Probe::Broken(format!("no answer within {REQUEST_TIMEOUT:?}")),
        Ok(Err(e)) => Probe::Broken(format!("connection: {e}")),
        Ok(Ok(head)) => status(&head).map(Probe::Status).unwrap_or_else(|| {
            Probe::Broken(format!(
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&head[..head.len().min(80)])
            ))
        }),
    }
}

/// The status of an HTTP/1.x status line.
fn status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

/// Probes until healthy or `within` has passed; the last probe either way.
pub async fn until_healthy(
    host: &dyn Host,
    id: &str,
    port: u16,
    path: &str,
    name: &str,
    within: Duration,
) -> Probe {
    let deadline = Instant::now() + within;
    loop {
        let p = probe(host, id, port, path, name).await;
        if p.healthy() || Instant::now() >= deadline {
            return p;
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status(b"HTTP/1.0 503 Busy\r\n"), Some(503));
        assert_eq!(status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert!(Probe::Status(302).healthy());
        assert!(!Probe::Status(500).healthy());
        assert!(!Probe::NotListening.healthy());
    }
}
