//! The database connection front: a listener of its own that takes `postgres://` connections
//! (TLS required: PostgreSQL's SSLRequest, or direct TLS with ALPN `postgresql`), finds the
//! database by the TLS server name — `<id>.<domain>` for PostgreSQL, `<id>-pooler.<domain>`
//! for its PgBouncer — or, for clients that send no SNI, Neon's `options=endpoint=<id>`
//! (`endpoint=<id>-pooler` for the pooler), wakes or starts its VM and joins the client to the
//! cluster through the host boundary ([`pandastack_host::Host::connect_port`]). PostgreSQL
//! itself checks the password. What goes wrong before the cluster answers is told to the
//! client as a PostgreSQL error (unknown database `3D000`, waking too long `57P03`), not a
//! dropped socket. Open connections count as activity, so a database in use never hibernates.
//!
//! The same port and certificate also serve **PostgreSQL over WebSocket** (`wss://…/v2`,
//! [`ws`]): `@neondatabase/serverless`'s `Pool`/`Client` mode.
//!
//! **Cancel requests** (a driver's "cancel this query", psql's Ctrl-C) arrive on a new
//! connection, usually without TLS, and name no database: only the backend's process id and
//! secret key, which the server sent in `BackendKeyData` when the connection started. The front
//! reads the server's messages up to the first `ReadyForQuery` of every connection it joins
//! (forwarding them unchanged), keeps each key with the VM and port it came from while the
//! connection is open, and forwards a matching `CancelRequest` there. An unknown key is
//! dropped, as PostgreSQL itself does.
//!
//! What a connection reaches goes through [`Backends`]: the managed databases in the server
//! ([`Databases`]), a fake in the tests.
//!
//! ```text
//! accept ─ slot (MAX_CONNECTIONS) ─ Front::accept ─┬─ Startup ── label (SNI | endpoint=) ─┐
//!                                                  ├─ Cancel ─── key → VM, port ─ forward │
//!                                                  └─ Http ───── ws::serve_http ─ /v2 ─┐  │
//!                                        startup, cleartext password, label, login ◄───┘  │
//!                                                                                  ▼      ▼
//!                                                    Backends::open (wake, connect) ─ relay
//! ```

#[cfg(test)]
mod tests;
mod ws;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_control::{DatabaseError, DB_PORT, POOLER_PORT};
use pandastack_host::{HostError, PortIo};
use pandastack_pgwire::front::{self, Front, Incoming};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::ApiState;

/// Activity is written this often while a connection is open.
const TOUCH_EVERY: Duration = Duration::from_secs(5);
/// Longest a client may take to finish TLS and send its startup message.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest message before the first `ReadyForQuery` the front reads (authentication and
/// parameter messages are small; a longer one ends the connection).
const MAX_STARTUP_MESSAGE: usize = 1 << 20;

/// Most connections (TCP and WebSocket, cancel requests included) the front holds at once; one
/// more is closed at once, unread.
const MAX_CONNECTIONS: usize = 10_000;

/// A backend's cancel key: its process id and secret.
type CancelKey = (i32, Vec<u8>);

/// Cancel keys of the connections open through the front: the VM and port of each backend.
#[derive(Default)]
struct CancelKeys(Mutex<HashMap<CancelKey, (String, u16)>>);

impl CancelKeys {
    fn insert(&self, key: CancelKey, target: (String, u16)) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, target);
    }

    fn remove(&self, key: &CancelKey) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    fn get(&self, key: &CancelKey) -> Option<(String, u16)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }
}

/// A database's backend, woken and connected: what [`Backends::open`] returns.
pub(crate) struct Opened {
    /// The database's VM (sandbox id).
    sandbox: String,
    /// PostgreSQL's port or PgBouncer's.
    port: u16,
    /// The connection to it; nothing sent yet.
    stream: Box<dyn PortIo>,
}

/// Why a connection could not be joined to its database. Each is told to the client as a
/// PostgreSQL error ([`OpenError::sqlstate`], [`OpenError::client_message`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("database {0} does not exist")]
    NotFound(String),
    #[error("database {0} is being created; try again shortly")]
    NotReady(String),
    #[error("database {id} could not be started")]
    Start {
        id: String,
        #[source]
        source: DatabaseError,
    },
    #[error("database {0} is waking up; try again in a few seconds")]
    WakeTimeout(String),
    #[error("database {id} did not accept the connection")]
    Connect {
        id: String,
        #[source]
        source: HostError,
    },
    #[error("looking up database {id}")]
    Internal {
        id: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl OpenError {
    fn sqlstate(&self) -> &'static str {
        match self {
            OpenError::NotFound(_) => "3D000",
            OpenError::NotReady(_) | OpenError::Start { .. } | OpenError::WakeTimeout(_) => "57P03",
            OpenError::Connect { .. } => "08006",
            OpenError::Internal { .. } => "XX000",
        }
    }

    /// The text the client sees: the error, and for a failed start or connect its cause (what
    /// the database said), but not the internals of a failed lookup.
    fn client_message(&self) -> String {
        match self {
            OpenError::Start { source, .. } => format!("{self}: {source}"),
            OpenError::Connect { source, .. } => format!("{self}: {source}"),
            OpenError::Internal { .. } => format!("{self}: internal error"),
            _ => self.to_string(),
        }
    }
}

/// What the front's connections reach. Methods return `Send` futures so connections can run
/// on any worker.
pub(crate) trait Backends: Send + Sync + 'static {
    /// The domain under which `<id>.<domain>` names a database.
    fn domain(&self) -> &str;
    /// Wakes or starts the database a label names (`<id>` or `<id>-pooler`) and connects to
    /// its PostgreSQL or PgBouncer.
    fn open(&self, label: &str) -> impl Future<Output = Result<Opened, OpenError>> + Send;
    /// Records that a connection to this VM is open now.
    fn touch(&self, sandbox: &str) -> impl Future<Output = ()> + Send;
    /// A new connection to a port of a VM (for a cancel request).
    fn connect(
        &self,
        sandbox: &str,
        port: u16,
    ) -> impl Future<Output = Result<Box<dyn PortIo>, HostError>> + Send;
}

/// The server's managed databases.
pub(crate) struct Databases {
    app: Arc<ApiState>,
    wake_timeout: Duration,
}

impl Backends for Databases {
    fn domain(&self) -> &str {
        &self.app.control.databases.address.domain
    }

    async fn open(&self, label: &str) -> Result<Opened, OpenError> {
        let (id, port) = route(&label.to_ascii_lowercase());
        let row = match self.app.control.databases.by_id(&id).await {
            Ok(r) => r,
            Err(DatabaseError::NotFound(_)) => return Err(OpenError::NotFound(id)),
            Err(DatabaseError::NotReady(_)) => return Err(OpenError::NotReady(id)),
            Err(e) => {
                return Err(OpenError::Internal {
                    id,
                    source: e.into(),
                })
            }
        };
        // The start runs as a task of its own: a client that gives up never cuts it off
        // half-way.
        let dbs = self.app.control.databases.clone();
        let started = tokio::spawn(async move { dbs.running(&row).await });
        let sandbox = match tokio::time::timeout(self.wake_timeout, started).await {
            Ok(Ok(Ok(s))) => s,
            Ok(Ok(Err(source))) => {
                let e = OpenError::Start { id, source };
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "database front: could not start the database"
                );
                return Err(e);
            }
            Ok(Err(e)) => {
                return Err(OpenError::Internal {
                    id,
                    source: e.into(),
                })
            }
            Err(_) => return Err(OpenError::WakeTimeout(id)),
        };
        let stream = self
            .app
            .control
            .host()
            .connect_port(&sandbox.id, port)
            .await
            .map_err(|source| OpenError::Connect { id, source })?;
        Ok(Opened {
            sandbox: sandbox.id,
            port,
            stream,
        })
    }

    async fn touch(&self, sandbox: &str) {
        self.app.control.databases.touch(sandbox).await;
    }

    async fn connect(&self, sandbox: &str, port: u16) -> Result<Box<dyn PortIo>, HostError> {
        self.app.control.host().connect_port(sandbox, port).await
    }
}

/// Serves the front on `listener` until the task is dropped.
pub async fn serve_db_front(
    app: Arc<ApiState>,
    listener: TcpListener,
    front: Arc<Front>,
    wake_timeout: Duration,
) {
    serve(Arc::new(Databases { app, wake_timeout }), listener, front).await;
}

/// Serves the front on `listener` with these backends until the task is dropped.
pub(crate) async fn serve<B: Backends>(backends: Arc<B>, listener: TcpListener, front: Arc<Front>) {
    let keys = Arc::new(CancelKeys::default());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "database front: accept"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, limit = MAX_CONNECTIONS, "database front: too many connections; closed one");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (b, front, keys) = (Arc::clone(&backends), Arc::clone(&front), Arc::clone(&keys));
        tokio::spawn(async move {
            if let Err(e) = connection(&b, &front, &keys, tcp).await {
                tracing::debug!(%peer, error = AsRef::<dyn std::error::Error + Send + Sync>::as_ref(&e) as &dyn std::error::Error, "database front: connection ended");
            }
            drop(slot);
        });
    }
}

/// Which database and port a connection names: the SNI label, else `endpoint=`.
fn route(label: &str) -> (String, u16) {
    match label.strip_suffix("-pooler") {
        Some(id) => (id.to_owned(), POOLER_PORT),
        None => (label.to_owned(), DB_PORT),
    }
}

async fn connection<B: Backends>(
    b: &Arc<B>,
    front: &Front,
    keys: &Arc<CancelKeys>,
    tcp: tokio::net::TcpStream,
) -> anyhow::Result<()> {
    let incoming = match tokio::time::timeout(HANDSHAKE_TIMEOUT, front.accept(tcp)).await {
        Ok(i) => i?,
        Err(_) => anyhow::bail!("no startup message within {HANDSHAKE_TIMEOUT:?}"),
    };
    let mut accepted = match incoming {
        Incoming::Startup(a) => a,
        Incoming::Cancel { pid, secret, .. } => {
            return cancel(b.as_ref(), keys, (pid, secret.to_vec())).await
        }
        Incoming::Http(http) => {
            return ws::serve_http(Arc::clone(b), Arc::clone(keys), *http).await
        }
    };
    let domain = b.domain();
    let label = accepted
        .sni
        .as_deref()
        .and_then(|sni| front::host_label(sni, domain))
        .map(str::to_owned)
        .or_else(|| accepted.startup.endpoint());
    let Some(label) = label else {
        return refuse(
            &mut accepted.stream,
            "08004",
            &format!(
                "which database? connect to <database id>.{domain} (TLS server name), or add \
                 options=endpoint=<database id> to the connection string"
            ),
        )
        .await;
    };
    let mut opened = match b.open(&label).await {
        Ok(o) => o,
        Err(e) => return refuse_open(&mut accepted.stream, e).await,
    };
    opened
        .stream
        .write_all(&accepted.startup.encode_for_upstream())
        .await?;
    relay(b, keys, &mut accepted.stream, opened).await
}

/// Tells the client why its database could not be reached; an internal failure is also the
/// connection's error (logged with its cause).
async fn refuse_open<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    e: OpenError,
) -> anyhow::Result<()> {
    refuse(stream, e.sqlstate(), &e.client_message()).await?;
    match e {
        OpenError::Internal { .. } => Err(e.into()),
        _ => Ok(()),
    }
}

/// Aborts a task when dropped (the activity ticker of a connection that ends any way).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Joins a client, whose startup (and, on the WebSocket path, login) is done, to its backend
/// until both ends are done; the backend's cancel key is kept meanwhile and the VM marked
/// active.
async fn relay<B: Backends, C: AsyncRead + AsyncWrite + Unpin>(
    b: &Arc<B>,
    keys: &CancelKeys,
    client: &mut C,
    opened: Opened,
) -> anyhow::Result<()> {
    let Opened {
        sandbox,
        port,
        stream,
    } = opened;
    // `open` recorded this use; the ticker records the connection while it is open.
    let (tb, sb) = (Arc::clone(b), sandbox.clone());
    let ticker = AbortOnDrop(tokio::spawn(async move {
        let mut every = tokio::time::interval(TOUCH_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            tb.touch(&sb).await;
        }
    }));
    let mut key = None;
    let joined = join(client, stream, |k| {
        keys.insert(k.clone(), (sandbox.clone(), port));
        key = Some(k);
    })
    .await;
    if let Some(k) = &key {
        keys.remove(k);
    }
    drop(ticker);
    b.touch(&sandbox).await;
    joined
}

/// Forwards a `CancelRequest` to the backend whose key it names (nothing for an unknown key).
async fn cancel<B: Backends>(b: &B, keys: &CancelKeys, key: CancelKey) -> anyhow::Result<()> {
    let Some((sandbox, port)) = keys.get(&key) else {
        tracing::debug!(
            pid = key.0,
            "database front: cancel request with an unknown key"
        );
        return Ok(());
    };
    let mut s = b.connect(&sandbox, port).await?;
    s.write_all(&pandastack_pgwire::startup::encode_cancel_request(
        key.0, &key.1,
    ))
    .await?;
    s.flush().await?;
    // PostgreSQL answers a cancel request by closing the connection.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    Ok(())
}

/// Joins client and upstream both ways until both ends are done. The server's messages up to
/// the first `ReadyForQuery` are read one by one on the way (and forwarded unchanged) so that
/// the backend's cancel key is seen (`on_key`).
async fn join<C>(
    client: &mut C,
    upstream: Box<dyn PortIo>,
    on_key: impl FnOnce(CancelKey),
) -> anyhow::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let up = async {
        let r = tokio::io::copy(&mut cr, &mut uw).await;
        let _ = uw.shutdown().await;
        r
    };
    let down = async {
        if let Some(k) = until_ready(&mut ur, &mut cw).await? {
            on_key(k);
        }
        let r = tokio::io::copy(&mut ur, &mut cw).await;
        let _ = cw.shutdown().await;
        r
    };
    let (a, b) = tokio::join!(up, down);
    a?;
    b?;
    Ok(())
}

/// Forwards the server's messages up to and including the first `ReadyForQuery` (or the end
/// of the stream); returns the `BackendKeyData` key if one went by.
async fn until_ready<R, W>(from: &mut R, to: &mut W) -> std::io::Result<Option<CancelKey>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut key = None;
    loop {
        let mut head = [0u8; 5];
        match from.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(key),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if !(4..=MAX_STARTUP_MESSAGE).contains(&len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("server message of {len} bytes before ReadyForQuery"),
            ));
        }
        let mut body = vec![0u8; len - 4];
        from.read_exact(&mut body).await?;
        to.write_all(&head).await?;
        to.write_all(&body).await?;
        // The client answers some of these (SASL): they must reach it now.
        to.flush().await?;
        match head[0] {
            b'K' if body.len() >= 8 => {
                let pid = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                key = Some((pid, body[4..].to_vec()));
            }
            b'Z' => return Ok(key),
            _ => {}
        }
    }
}

async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    code: &str,
    message: &str,
) -> anyhow::Result<()> {
    front::write_error(stream, front::Severity::Fatal, code, message, None).await?;
    Ok(())
}
