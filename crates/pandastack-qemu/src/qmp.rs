//! A small typed client for QMP, QEMU's JSON control protocol, over a unix socket.
//!
//! One reader task owns the read half: replies are matched to requests by `id`, asynchronous
//! events go to a broadcast channel. Commands are typed by [`Command`] implementations so callers
//! never assemble JSON by hand.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{broadcast, oneshot};

/// QMP failures.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("connect to qmp socket")]
    Connect(#[source] std::io::Error),
    #[error("qmp i/o")]
    Io(#[from] std::io::Error),
    #[error("qmp protocol: {0}")]
    Protocol(String),
    #[error("qmp command {command}: {class}: {desc}")]
    Command {
        command: &'static str,
        class: String,
        desc: String,
    },
    #[error("qmp connection closed")]
    Closed,
    #[error("qmp command {0} timed out")]
    Timeout(&'static str),
}

/// A QMP command with typed arguments and reply.
pub trait Command: Serialize {
    const NAME: &'static str;
    type Reply: DeserializeOwned;
}

/// An asynchronous QMP event.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub event: String,
    #[serde(default)]
    pub data: Value,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, (String, String)>>>>>;

/// A connected QMP session (capabilities already negotiated).
pub struct Qmp {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Pending,
    next_id: AtomicU64,
    events: broadcast::Sender<Event>,
    timeout: Duration,
}

#[derive(Deserialize)]
struct ErrorBody {
    class: String,
    desc: String,
}

#[derive(Deserialize)]
struct Message {
    #[serde(rename = "return")]
    ret: Option<Value>,
    error: Option<ErrorBody>,
    id: Option<u64>,
    event: Option<String>,
    #[serde(default)]
    data: Value,
    #[serde(rename = "QMP")]
    greeting: Option<Value>,
}

#[derive(Serialize)]
struct Request<'a, T> {
    execute: &'a str,
    arguments: &'a T,
    id: u64,
}

impl Qmp {
    /// Connects to `path` and negotiates capabilities. `timeout` bounds every command.
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Self, QmpError> {
        let stream = UnixStream::connect(path).await.map_err(QmpError::Connect)?;
        let (read, write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let greeting = tokio::time::timeout(timeout, lines.next_line())
            .await
            .map_err(|_| QmpError::Timeout("greeting"))??
            .ok_or(QmpError::Closed)?;
        let msg: Message = serde_json::from_str(&greeting)
            .map_err(|e| QmpError::Protocol(format!("bad greeting: {e}")))?;
        if msg.greeting.is_none() {
            return Err(QmpError::Protocol("no greeting".into()));
        }
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(64);
        let reader_pending = pending.clone();
        let reader_events = events.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Message>(&line) else {
                    tracing::warn!(%line, "unparseable qmp message");
                    continue;
                };
                if let Some(event) = msg.event {
                    let _ = reader_events.send(Event {
                        event,
                        data: msg.data,
                    });
                    continue;
                }
                let Some(id) = msg.id else { continue };
                let Some(tx) = reader_pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id)
                else {
                    continue;
                };
                let result = match (msg.ret, msg.error) {
                    (_, Some(e)) => Err((e.class, e.desc)),
                    (Some(v), None) => Ok(v),
                    (None, None) => Ok(Value::Null),
                };
                let _ = tx.send(result);
            }
            // Connection gone: fail everything still waiting.
            reader_pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        });
        let qmp = Self {
            writer: tokio::sync::Mutex::new(write),
            pending,
            next_id: AtomicU64::new(1),
            events,
            timeout,
        };
        qmp.execute(&QmpCapabilities {}).await?;
        Ok(qmp)
    }

    /// Subscribes to events sent from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Runs a command and returns its typed reply.
    pub async fn execute<C: Command>(&self, cmd: &C) -> Result<C::Reply, QmpError> {
        self.execute_with_timeout(cmd, self.timeout).await
    }

    pub async fn execute_with_timeout<C: Command>(
        &self,
        cmd: &C,
        timeout: Duration,
    ) -> Result<C::Reply, QmpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let mut line = serde_json::to_vec(&Request {
            execute: C::NAME,
            arguments: cmd,
            id,
        })
        .map_err(|e| QmpError::Protocol(e.to_string()))?;
        line.push(b'\n');
        {
            let mut w = self.writer.lock().await;
            if let Err(e) = w.write_all(&line).await {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                return Err(e.into());
            }
        }
        let reply = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                return Err(QmpError::Timeout(C::NAME));
            }
            Ok(Err(_)) => return Err(QmpError::Closed),
            Ok(Ok(r)) => r,
        };
        let value = reply.map_err(|(class, desc)| QmpError::Command {
            command: C::NAME,
            class,
            desc,
        })?;
        // Commands without a reply return `{}`; unit replies accept anything.
        serde_json::from_value(value)
            .map_err(|e| QmpError::Protocol(format!("{}: bad reply: {e}", C::NAME)))
    }
}

/// A reply with no content (`{}`).
#[derive(Debug, Deserialize)]
pub struct Empty {}

macro_rules! command {
    ($ty:ident, $name:literal, $reply:ty) => {
        impl Command for $ty {
            const NAME: &'static str = $name;
            type Reply = $reply;
        }
    };
}

#[derive(Serialize)]
pub struct QmpCapabilities {}
command!(QmpCapabilities, "qmp_capabilities", Empty);

#[derive(Serialize)]
pub struct Stop {}
command!(Stop, "stop", Empty);

#[derive(Serialize)]
pub struct Cont {}
command!(Cont, "cont", Empty);

#[derive(Serialize)]
pub struct Quit {}
command!(Quit, "quit", Empty);

#[derive(Serialize)]
pub struct QueryChardev {}
command!(QueryChardev, "query-chardev", Vec<ChardevInfo>);

/// One character device; a socket chardev's `filename` starts with `disconnected:` while no
/// client is connected.
#[derive(Debug, Deserialize)]
pub struct ChardevInfo {
    pub label: String,
    pub filename: String,
}

#[derive(Serialize)]
pub struct QueryStatus {}
command!(QueryStatus, "query-status", StatusInfo);

#[derive(Debug, Deserialize)]
pub struct StatusInfo {
    pub running: bool,
    pub status: String,
}

#[derive(Serialize)]
pub struct MigrateSetCapabilities {
    pub capabilities: Vec<MigrationCapability>,
}
command!(MigrateSetCapabilities, "migrate-set-capabilities", Empty);

#[derive(Serialize)]
pub struct MigrationCapability {
    pub capability: &'static str,
    pub state: bool,
}

/// `migrate-set-parameters` with only the bandwidth cap (bytes per second). QEMU's default of
/// 128 MiB/s is meant for networks; snapshots to a local file should not be throttled.
#[derive(Serialize)]
pub struct MigrateSetParameters {
    #[serde(rename = "max-bandwidth")]
    pub max_bandwidth: u64,
}
command!(MigrateSetParameters, "migrate-set-parameters", Empty);

#[derive(Serialize)]
pub struct Migrate {
    pub uri: String,
}
command!(Migrate, "migrate", Empty);

#[derive(Serialize)]
pub struct MigrateIncoming {
    pub uri: String,
    /// false: stay alive after a failed load so the error can be queried (QEMU >= 9.1).
    #[serde(rename = "exit-on-error")]
    pub exit_on_error: bool,
}
command!(MigrateIncoming, "migrate-incoming", Empty);

#[derive(Serialize)]
pub struct QueryMigrate {}
command!(QueryMigrate, "query-migrate", MigrationInfo);

#[derive(Debug, Deserialize)]
pub struct MigrationInfo {
    pub status: Option<String>,
    #[serde(rename = "error-desc")]
    pub error_desc: Option<String>,
}

/// `block_resize` of a block node: the image becomes `size` bytes (no change for the current
/// size) and the device on it tells the guest its size (virtio-blk: a config-change interrupt).
#[derive(Serialize)]
pub struct BlockResize {
    #[serde(rename = "node-name")]
    pub node_name: String,
    pub size: u64,
}
command!(BlockResize, "block_resize", Empty);

/// `blockdev-reopen`: every option of each node, as for `blockdev-add` (options left out are
/// reset to their defaults).
#[derive(Serialize)]
pub struct BlockdevReopen {
    pub options: Vec<Value>,
}
command!(BlockdevReopen, "blockdev-reopen", Empty);
