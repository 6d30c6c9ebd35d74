//! Events and webhooks.
//!
//! ```text
//!  services ──emit──▶ writer task (one per process, in emit order) ──▶ one transaction per
//!                     batch: per event, its row (next id of the counter row) + a pending
//!                     delivery per matching webhook
//!                │
//!                ├─▶ hint (watch of the last id) ──▶ SSE streams read the table after their id
//!                └─▶ wake ──▶ deliverers (DELIVERERS per process) claim a due delivery, the
//!                             oldest pending of its (webhook, resource), with a lease; POST it
//!                             signed (Standard Webhooks); record delivered / retry at / failed
//! ```
//!
//! [`Events::emit`] never fails its caller: a lifecycle change has happened whether or not its
//! event could be written, so a failed insert is logged with its cause and the operation goes
//! on. Nor does it wait for the write: it queues the event for the process's writer task, which
//! stores what has queued up in one transaction (a serial create paid a durable commit of its
//! own for its event before: about 5.5 ms at the median, see bench/README.md). The queue keeps
//! emit order, so one process's events get ids in the order they happened. Reads of this
//! process ([`Events::list`], [`Events::last_id`]) and [`Events::stop`] first wait for what was
//! queued before them ([`Events::flush`]): a client reads its own events. The table, not the hint, is what streams and deliverers read, so a stream resumed after
//! an id gets exactly the later events, and a delivery queued before a restart is sent after
//! it. The hint only saves a stream its poll interval; streams also poll, which is what a
//! replica sees of another's events.

mod deliver;
mod webhooks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_api_types::{Event, EventResource};
use pandastack_outbound::OutboundPolicy;
use pandastack_store::{EventRow, NewEvent, Store, StoreError};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::JoinHandle;

pub use deliver::{sign, SIGNATURE_VERSION};
pub use webhooks::{delivery_wire, webhook_wire, WebhookError};

/// Largest event payload kept, bytes of JSON; a larger one is replaced by `{"truncated": true}`.
pub const MAX_EVENT_DATA: usize = 8 << 10;

/// Events waiting for the writer, at most (a full queue makes emitters wait: none is dropped).
const QUEUE: usize = 4096;
/// Events stored in one transaction, at most.
const BATCH: usize = 128;

enum Msg {
    Event(Box<NewEvent>),
    Flush(oneshot::Sender<()>),
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    Sandbox,
    Snapshot,
    Template,
    App,
    Database,
    Function,
    Schedule,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Sandbox => "sandbox",
            ResourceKind::Snapshot => "snapshot",
            ResourceKind::Template => "template",
            ResourceKind::App => "app",
            ResourceKind::Database => "database",
            ResourceKind::Function => "function",
            ResourceKind::Schedule => "schedule",
        }
    }
}

/// How webhooks are delivered.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Pause before each attempt after the first: its length + 1 is the most attempts a
    /// delivery gets before it is given up (`failed`).
    pub retry_delays: Vec<Duration>,
    /// Longest wait for one attempt's answer.
    pub attempt_timeout: Duration,
    /// Deliveries sent at once by one process.
    pub deliverers: usize,
    /// How long events (and their finished deliveries) are kept.
    pub retention: Duration,
}

impl Default for WebhookSettings {
    /// The server's: attempts at once, then after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h
    /// (the Standard Webhooks reference schedule: eight attempts over about a day); 10 s per
    /// attempt; four at a time; events kept 30 days.
    fn default() -> Self {
        let s = Duration::from_secs;
        Self {
            retry_delays: vec![
                s(5),
                s(300),
                s(1800),
                s(7200),
                s(5 * 3600),
                s(10 * 3600),
                s(10 * 3600),
            ],
            attempt_timeout: s(10),
            deliverers: 4,
            retention: s(30 * 86_400),
        }
    }
}

/// The event log and webhook delivery of one control plane.
#[derive(Clone)]
pub struct Events {
    store: Store,
    /// The last id this process wrote: a stream's cue to read the table.
    hint: Arc<watch::Sender<i64>>,
    /// Wakes the deliverers (a delivery was queued).
    wake: Arc<Notify>,
    settings: Arc<WebhookSettings>,
    outbound: Arc<OutboundPolicy>,
    /// Set by [`Events::stop`]: deliverers finish the attempt in hand and end.
    stopping: Arc<watch::Sender<bool>>,
    deliverers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The writer task's queue (started with the first event).
    queue: Arc<std::sync::OnceLock<mpsc::Sender<Msg>>>,
}

impl Events {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            hint: Arc::new(watch::channel(0).0),
            wake: Arc::default(),
            settings: Arc::default(),
            outbound: Arc::default(),
            stopping: Arc::new(watch::channel(false).0),
            deliverers: Arc::default(),
            queue: Arc::default(),
        }
    }

    /// Delivers with `settings`.
    pub fn with_settings(mut self, settings: WebhookSettings) -> Self {
        self.settings = Arc::new(settings);
        self
    }

    /// Webhook URLs must be where `policy` allows, when created and at each attempt.
    pub fn with_outbound(mut self, policy: Arc<OutboundPolicy>) -> Self {
        self.outbound = policy;
        self
    }

    /// Records that `event_type` happened to resource `kind`/`id` of workspace `ws`, and
    /// queues its deliveries. Never fails: a failure is logged with its cause.
    pub async fn emit(
        &self,
        ws: &str,
        event_type: &'static str,
        kind: ResourceKind,
        id: &str,
        data: serde_json::Value,
    ) {
        debug_assert!(
            pandastack_api_types::EVENT_TYPES.contains(&event_type),
            "{event_type} is not in EVENT_TYPES"
        );
        let data = if data.to_string().len() > MAX_EVENT_DATA {
            serde_json::json!({"truncated": true})
        } else {
            data
        };
        let event = NewEvent {
            workspace_id: ws.to_owned(),
            event_type: event_type.to_owned(),
            resource_kind: kind.as_str().to_owned(),
            resource_id: id.to_owned(),
            data,
        };
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(self.clone().writer(rx));
            tx
        });
        if queue.send(Msg::Event(Box::new(event))).await.is_err() {
            tracing::warn!(workspace = %ws, event = event_type, resource = %id, "the event writer has stopped: an event is lost");
        }
    }

    /// Waits until every event queued before this call is stored (or its write failed, logged).
    pub async fn flush(&self) {
        let Some(queue) = self.queue.get() else {
            return;
        };
        let (done, wait) = oneshot::channel();
        if queue.send(Msg::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// The writer task: stores queued events in batches, in queue order, then moves the hint
    /// and wakes the deliverers; answers flushes after what came before them. Ends when every
    /// handle of these events is gone and the queue is drained. Holds only a weak part of
    /// `self` (the store, hint and wake), so the queue's sender going away ends it.
    async fn writer(self, mut rx: mpsc::Receiver<Msg>) {
        let (store, hint, wake) = (
            self.store.clone(),
            Arc::clone(&self.hint),
            Arc::clone(&self.wake),
        );
        drop(self);
        while let Some(first) = rx.recv().await {
            let mut events = Vec::new();
            let mut flushes = Vec::new();
            let mut next = Some(first);
            while let Some(m) = next.take() {
                match m {
                    Msg::Event(e) => events.push(*e),
                    Msg::Flush(done) => flushes.push(done),
                }
                if events.len() < BATCH {
                    next = rx.try_recv().ok();
                }
            }
            let written = match store.events().insert_many(&events).await {
                Ok(done) => done,
                // One at a time, so that one event the store refuses costs only itself.
                Err(_) => {
                    let mut done = Vec::new();
                    for e in &events {
                        match store.events().insert(e).await {
                            Ok(d) => done.push(d),
                            Err(err) => tracing::warn!(
                                workspace = %e.workspace_id,
                                event = %e.event_type,
                                resource = %e.resource_id,
                                error = &err as &dyn std::error::Error,
                                "write an event"
                            ),
                        }
                    }
                    done
                }
            };
            if let Some(last) = written.iter().map(|(row, _)| row.id).max() {
                hint.send_if_modified(|seen| {
                    let newer = last > *seen;
                    if newer {
                        *seen = last;
                    }
                    newer
                });
            }
            if written.iter().any(|(_, queued)| *queued > 0) {
                wake.notify_waiters();
            }
            for done in flushes {
                let _ = done.send(());
            }
        }
    }

    /// The hint streams wait on: changes when this process writes an event.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.hint.subscribe()
    }

    /// Events of workspace `ws` after id `after`, at most `limit`, narrowed by type (exact or
    /// `<kind>.*`) and resource id.
    pub async fn list(
        &self,
        ws: &str,
        filter: &pandastack_store::EventFilter,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        self.flush().await;
        self.store.events().list(ws, filter, limit).await
    }

    /// The largest event id stored, after what this process has queued.
    pub async fn last_id(&self) -> Result<i64, StoreError> {
        self.flush().await;
        self.store.events().last_id().await
    }

    /// Starts the deliverers and the pruner of old events; [`Events::stop`] ends them.
    pub fn start(&self) -> Vec<JoinHandle<()>> {
        let _ = self.stopping.send(false);
        let mut kept = self.deliverers.lock().unwrap_or_else(|p| p.into_inner());
        for n in 0..self.settings.deliverers.max(1) {
            kept.push(tokio::spawn(self.clone().deliverer(n)));
        }
        vec![tokio::spawn(self.clone().pruner())]
    }

    /// Stops the deliverers after the attempts in hand (so a stop neither loses nor doubles
    /// a delivery), waiting at most an attempt's timeout and a second.
    pub async fn stop(&self) {
        self.flush().await;
        let _ = self.stopping.send(true);
        self.wake.notify_waiters();
        let tasks: Vec<_> = self
            .deliverers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        let limit = self.settings.attempt_timeout + Duration::from_secs(1);
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(limit, t).await.is_err() {
                abort.abort();
            }
        }
    }

    /// Deletes events past their retention, once an hour.
    async fn pruner(self) {
        loop {
            let before = pandastack_store::now_ms() - self.settings.retention.as_millis() as i64;
            match self.store.events().prune(before).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "pruned events past their retention"),
                Err(e) => {
                    tracing::warn!(error = &e as &dyn std::error::Error, "prune old events")
                }
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
}

/// RFC 3339 of unix ms (UTC); the number itself if out of range.
pub(crate) fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// An event row on the wire: the list's items, a stream's `data` and a webhook's body.
pub fn event_wire(row: &EventRow) -> Event {
    Event {
        id: row.id.to_string(),
        event_type: row.event_type.clone(),
        resource: EventResource {
            kind: row.resource_kind.clone(),
            id: row.resource_id.clone(),
        },
        at: rfc3339(row.at),
        data: row.data.clone(),
    }
}
