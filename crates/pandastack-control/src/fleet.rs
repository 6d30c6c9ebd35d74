//! Many hosts behind one [`Host`]: a control-plane replica's view of the cluster.
//!
//! ```text
//!   services ──► Fleet (dyn Host) ── owner of id? (rows: sandbox, snapshot, volume; cached)
//!                                  ├─► host's row (cached; every row read again each second)
//!                                  └─► link to that host's agent (dialled once, by address)
//! ```
//!
//! Every call that names a sandbox, snapshot or volume goes to the host its row names (the row
//! is written first: a create's row is placed in the store before the create reaches a host,
//! see [`crate::Sandboxes::create`]). The owner of an id is cached for [`ROW_MAX_AGE`] and read
//! again after that (the cached one is used while the store does not answer, within
//! [`STALE_READ_WAIT`]), so a hibernated
//! sandbox moved to another host (its row's host changed, #39) is followed by every replica
//! within that; a delete forgets it at once.
//!
//! The hosts' rows (address, state) are kept in memory, so a call reads nothing from the store
//! once it knows the owner: a task the fleet starts reads every row again each
//! [`REFRESH_EVERY`] (and stops when the last clone of the fleet is dropped); a host the cache
//! does not know (it joined since the last scan) is read from the store on the spot; a cached
//! row older than [`ROW_MAX_AGE`] (the scan stalled, or no runtime ran it) is read again before
//! use, and used as it is only if the store does not answer — an error, or no answer within
//! [`STALE_READ_WAIT`] (no host is reaped while the store is away). A host marked `dead` is not called — at most about a second after the store says
//! so: its sandboxes are `lost` and the caller gets [`HostError::Unreachable`]. Links are
//! dialled on first use from the row's address with the replica's identity ([`Dial`]) and
//! dialled again when the host re-joined at another address (a dial that fails reads the row
//! from the store first, in case the cache has not seen the new address yet).
//!
//! What crosses as a path (template builds' working directory and bake) runs on one host and
//! is refused here; the catalog is the union of the hosts'.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, DiskRequest, ExecEvent, ExecInput,
    ExecOutcome, ExecSpec, FileInfo, Host, HostError, HostResult, ListPage, LogChunk, LogPos,
    MetricSample, PortIo, SessionStart, Shape, SnapshotView, SpecRefused, SpecSummary,
    TemplateView, VmStats, VmView, VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload,
    VolumeView,
};
use pandastack_store::{HostRow, HostState, Store};

/// How often the fleet's task reads every host's row again.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// A cached host row older than this is read from the store again before it is used.
pub const ROW_MAX_AGE: Duration = Duration::from_secs(2);

/// How long a call waits for the store to read again an owner or host row it has a cached
/// (stale) value of, before it goes on with that value: a store that does not answer (down,
/// or a network that drops its packets) costs a call this, not the pool's acquire timeout or
/// a query that never returns.
pub const STALE_READ_WAIT: Duration = Duration::from_millis(500);

/// How long a dial (TCP and the mutual TLS handshake) may take before the host counts as
/// unreachable for that call.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Memory placement looks for when it chooses the host of a template build (its builder VM).
const BUILD_MEMORY_MIB: i64 = 1024;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A failure reaching a host, kept as the cause of [`HostError::Unreachable`].
pub type DialError = Box<dyn std::error::Error + Send + Sync>;

/// How a replica reaches host `host_id`'s agent at `address` (`host:port`): over the cluster's
/// mutual TLS in a server ([`AgentDialer`]), anything answering [`Host`] in tests.
#[async_trait::async_trait]
pub trait Dial: Send + Sync + 'static {
    async fn dial(&self, host_id: &str, address: &str) -> Result<Arc<dyn Host>, DialError>;
}

/// [`Dial`] over the agent link as a replica's identity.
pub struct AgentDialer {
    identity: pandastack_cluster::Identity,
}

impl AgentDialer {
    pub fn new(identity: pandastack_cluster::Identity) -> Self {
        Self { identity }
    }
}

#[async_trait::async_trait]
impl Dial for AgentDialer {
    async fn dial(&self, host_id: &str, address: &str) -> Result<Arc<dyn Host>, DialError> {
        let addr = tokio::net::lookup_host(address)
            .await?
            .next()
            .ok_or_else(|| format!("{address} resolves to no address"))?;
        let remote =
            pandastack_agent_link::RemoteHost::connect(&self.identity, addr, host_id).await?;
        Ok(Arc::new(remote))
    }
}

/// Why no host was found for an id.
#[derive(Debug, thiserror::Error)]
enum RouteError {
    #[error("no host holds {0}")]
    NoOwner(String),
    #[error("host {0} is not known to the store")]
    UnknownHost(String),
    #[error("host {0} is dead")]
    Dead(String),
    #[error("host {0} has no address (it never joined as an agent)")]
    NoAddress(String),
    #[error("reading the state store")]
    Store(#[source] pandastack_store::StoreError),
    #[error("dialling host {host} at {address}")]
    Dial {
        host: String,
        address: String,
        #[source]
        source: DialError,
    },
}

/// A dialled link and the address it was dialled at.
struct Link {
    address: String,
    host: Arc<dyn Host>,
}

/// A host's row and when it was read.
struct Cached {
    row: Arc<HostRow>,
    read: Instant,
}

/// The hosts' rows by id.
type Rows = Mutex<HashMap<String, Cached>>;

/// The hosts of a cluster as one [`Host`] (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    store: Store,
    dial: Arc<dyn Dial>,
    links: Arc<tokio::sync::Mutex<HashMap<String, Link>>>,
    /// Owner of an id and when it was read.
    owners: Arc<Mutex<HashMap<String, (String, Instant)>>>,
    rows: Arc<Rows>,
    /// How long a call that lists every host waits for each.
    list_timeout: Duration,
    /// The host each template build of this replica runs on (its bake runs there too, on the
    /// image it built), by build id.
    builds: Arc<Mutex<HashMap<String, String>>>,
}

impl Fleet {
    /// A fleet over `store`'s hosts, reached through `dial`. Inside a Tokio runtime it starts
    /// the task that reads the hosts' rows every [`REFRESH_EVERY`] (see the module docs).
    pub fn new(store: Store, dial: Arc<dyn Dial>) -> Self {
        let fleet = Self {
            store,
            dial,
            links: Arc::default(),
            owners: Arc::default(),
            rows: Arc::default(),
            list_timeout: Duration::from_secs(5),
            builds: Arc::default(),
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(scan(fleet.store.clone(), Arc::downgrade(&fleet.rows)));
        }
        fleet
    }

    /// Reads every host's row again (what the fleet's task does each [`REFRESH_EVERY`]).
    pub async fn refresh(&self) -> Result<(), pandastack_store::StoreError> {
        let read = Instant::now();
        let list = self.store.hosts().list().await?;
        replace_rows(&self.rows, list, read);
        Ok(())
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Host `host_id`'s row from the store, kept in the cache (or removed from it if gone).
    async fn read_row(&self, host_id: &str) -> Result<Arc<HostRow>, RouteError> {
        let read = Instant::now();
        match self.store.hosts().get(host_id).await {
            Ok(r) => {
                let row = Arc::new(r);
                self.rows().insert(
                    host_id.to_owned(),
                    Cached {
                        row: Arc::clone(&row),
                        read,
                    },
                );
                Ok(row)
            }
            Err(pandastack_store::StoreError::NotFound) => {
                self.rows().remove(host_id);
                Err(RouteError::UnknownHost(host_id.to_owned()))
            }
            Err(e) => Err(RouteError::Store(e)),
        }
    }

    /// The host that holds `id` (a sandbox, snapshot or volume), from the cache (read at most
    /// [`ROW_MAX_AGE`] ago) or the store.
    async fn owner(&self, id: &str) -> Result<String, RouteError> {
        let cached = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        if let Some((h, read)) = &cached {
            if read.elapsed() <= ROW_MAX_AGE {
                return Ok(h.clone());
            }
        }
        let read = Instant::now();
        let hosts = self.store.hosts();
        let owner = hosts.owner_of(id);
        let got = match &cached {
            Some((h, _)) => match tokio::time::timeout(STALE_READ_WAIT, owner).await {
                Ok(got) => got,
                Err(_) => {
                    tracing::debug!(id = %id, "fleet: the store is slow; using the cached owner");
                    return Ok(h.clone());
                }
            },
            None => owner.await,
        };
        let host = match got {
            Ok(Some(h)) => h,
            Ok(None) => return Err(RouteError::NoOwner(id.to_owned())),
            // No host is reaped while the store is away; nothing moves either.
            Err(e) => match cached {
                Some((h, _)) => return Ok(h),
                None => return Err(RouteError::Store(e)),
            },
        };
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), (host.clone(), read));
        Ok(host)
    }

    /// Drops what this fleet knows of where `id` is: a sandbox moved to another host, the next
    /// call reads its owner from the store.
    pub fn moved(&self, id: &str) {
        self.forget(id);
    }

    fn forget(&self, id: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// The link to host `host_id`, dialled if there is none or the host moved address.
    pub async fn host(&self, host_id: &str) -> HostResult<Arc<dyn Host>> {
        self.link(host_id)
            .await
            .map_err(|e| unreachable(host_id, e))
    }

    async fn link(&self, host_id: &str) -> Result<Arc<dyn Host>, RouteError> {
        let cached = self
            .rows()
            .get(host_id)
            .map(|c| (Arc::clone(&c.row), c.read.elapsed() <= ROW_MAX_AGE));
        let row = match cached {
            Some((row, true)) => row,
            Some((stale, false)) => {
                match tokio::time::timeout(STALE_READ_WAIT, self.read_row(host_id)).await {
                    Err(_) => {
                        tracing::debug!(
                            host = %host_id,
                            "fleet: the store is slow; using the host's last row"
                        );
                        stale
                    }
                    Ok(Err(RouteError::Store(e))) => {
                        tracing::debug!(
                            host = %host_id,
                            error = &e as &dyn std::error::Error,
                            "fleet: the store does not answer; using the host's last row"
                        );
                        stale
                    }
                    Ok(r) => r?,
                }
            }
            None => return self.link_to(&*self.read_row(host_id).await?).await,
        };
        match self.link_to(&row).await {
            Err(e @ RouteError::Dial { .. }) => {
                // The host may have joined again elsewhere since the cache read its row.
                let fresh = self.read_row(host_id).await?;
                if fresh.address == row.address && fresh.state == row.state {
                    return Err(e);
                }
                self.link_to(&fresh).await
            }
            r => r,
        }
    }

    async fn link_to(&self, row: &HostRow) -> Result<Arc<dyn Host>, RouteError> {
        if row.state == HostState::Dead {
            return Err(RouteError::Dead(row.id.clone()));
        }
        let address = row
            .address
            .clone()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| RouteError::NoAddress(row.id.clone()))?;
        if let Some(l) = self.links.lock().await.get(&row.id) {
            if l.address == address {
                return Ok(Arc::clone(&l.host));
            }
        }
        // Dialled without holding the links: a host that accepts connections but does not
        // answer (a stopped agent) must not hold up calls to every other host. Bounded too.
        let dial_error = |source: DialError| RouteError::Dial {
            host: row.id.clone(),
            address: address.clone(),
            source,
        };
        let host = match tokio::time::timeout(DIAL_TIMEOUT, self.dial.dial(&row.id, &address)).await
        {
            Ok(r) => r.map_err(dial_error)?,
            Err(_) => {
                return Err(dial_error(
                    format!("no answer within {DIAL_TIMEOUT:?}").into(),
                ))
            }
        };
        let mut links = self.links.lock().await;
        // Another call may have dialled the same address meanwhile: one link is kept.
        if let Some(l) = links.get(&row.id) {
            if l.address == address {
                return Ok(Arc::clone(&l.host));
            }
        }
        links.insert(
            row.id.clone(),
            Link {
                address,
                host: Arc::clone(&host),
            },
        );
        Ok(host)
    }

    /// The host holding `id`, ready to call.
    async fn to(&self, id: &str) -> HostResult<Arc<dyn Host>> {
        let host_id = match self.owner(id).await {
            Ok(h) => h,
            Err(RouteError::NoOwner(_)) => return Err(not_found(id)),
            Err(e) => return Err(unreachable("?", e)),
        };
        let host = self.host(&host_id).await;
        if host.is_err() {
            // Not cached past a failure: a create's row may be placed elsewhere next.
            self.forget(id);
        }
        host
    }

    /// Snapshot `snap` deleted from every live host (a host's delete of one it stored removes
    /// its record from the object store too); absent is success, a failure is logged.
    pub(crate) async fn delete_snapshot_everywhere(&self, snap: &str) {
        for host in self.live().await {
            match host.delete_snapshot(snap).await {
                Ok(()) | Err(HostError::SnapshotNotFound(_)) => {}
                Err(e) => tracing::warn!(
                    snapshot = %snap,
                    error = &e as &dyn std::error::Error,
                    "a copy of a deleted snapshot stays on a host"
                ),
            }
        }
        self.forget(snap);
    }

    /// Every host not dead, linked (those that cannot be reached are logged and skipped).
    pub(crate) async fn live(&self) -> Vec<Arc<dyn Host>> {
        let read = Instant::now();
        let rows = match self.store.hosts().list().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = &e as &dyn std::error::Error, "fleet: listing hosts");
                return Vec::new();
            }
        };
        replace_rows(&self.rows, rows.clone(), read);
        let mut out = Vec::new();
        for row in rows.iter().filter(|r| r.state != HostState::Dead) {
            match self.link_to(row).await {
                Ok(h) => out.push(h),
                Err(e) => tracing::debug!(
                    host = %row.id,
                    error = &e as &dyn std::error::Error,
                    "fleet: host skipped"
                ),
            }
        }
        out
    }

    /// `r`, the outcome of a create of `id`; a failed one forgets where `id` was (its row goes
    /// and a new placement may put it elsewhere).
    fn settled(&self, id: &str, r: HostResult<VmView>) -> HostResult<VmView> {
        if r.is_err() {
            self.forget(id);
        }
        r
    }

    /// The links dialled so far (the synchronous catalog calls read these).
    fn dialled(&self) -> Vec<Arc<dyn Host>> {
        match self.links.try_lock() {
            Ok(l) => l.values().map(|l| Arc::clone(&l.host)).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The fleet's task: every [`REFRESH_EVERY`], every host's row, until the fleet is dropped.
async fn scan(store: Store, rows: Weak<Rows>) {
    let mut every = tokio::time::interval(REFRESH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if rows.strong_count() == 0 {
            return;
        }
        let read = Instant::now();
        match store.hosts().list().await {
            Ok(list) => match rows.upgrade() {
                Some(rows) => replace_rows(&rows, list, read),
                None => return,
            },
            Err(e) => tracing::debug!(
                error = &e as &dyn std::error::Error,
                "fleet: reading the hosts' rows"
            ),
        }
    }
}

/// The cache takes `list`, read at `read`: a host no longer listed is forgotten, and an entry
/// read after `read` (a read-through while the list was under way) is kept as it is.
fn replace_rows(rows: &Rows, list: Vec<HostRow>, read: Instant) {
    let mut rows = rows.lock().unwrap_or_else(|p| p.into_inner());
    let mut fresh: HashMap<String, Cached> = rows.drain().filter(|(_, c)| c.read > read).collect();
    for r in list {
        fresh.entry(r.id.clone()).or_insert(Cached {
            row: Arc::new(r),
            read,
        });
    }
    *rows = fresh;
}

fn unreachable(host: &str, e: RouteError) -> HostError {
    HostError::Unreachable {
        host: host.to_owned(),
        source: Box::new(e),
    }
}

/// An id no row names: the caller asked for something that is not (or no longer) there.
fn not_found(id: &str) -> HostError {
    HostError::SandboxNotFound(id.to_owned())
}

#[async_trait::async_trait]
impl Host for Fleet {
    async fn list(&self) -> Vec<VmView> {
        let mut all = Vec::new();
        for h in self.live().await {
            match tokio::time::timeout(self.list_timeout, h.list()).await {
                Ok(vms) => all.extend(vms),
                Err(_) => tracing::warn!("fleet: a host did not list its sandboxes in time"),
            }
        }
        all
    }

    async fn get(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.get(id).await
    }

    async fn create(&self, template: &str, id: &str) -> HostResult<VmView> {
        let r = self.to(id).await?.create(template, id).await;
        self.settled(id, r)
    }

    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView> {
        let r = self
            .to(id)
            .await?
            .create_with_volumes(template, id, volumes)
            .await;
        self.settled(id, r)
    }

    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> HostResult<VmView> {
        let r = self
            .to(id)
            .await?
            .create_with_disk(template, id, volumes, disk)
            .await;
        self.settled(id, r)
    }

    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView> {
        let r = self
            .to(id)
            .await?
            .create_with_memory_file(template, id)
            .await;
        self.settled(id, r)
    }

    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView> {
        let r = self.to(id).await?.create_from_snapshot(snapshot, id).await;
        self.settled(id, r)
    }

    async fn pause(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.pause(id).await
    }

    async fn resume(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.resume(id).await
    }

    async fn hibernate(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.hibernate(id).await
    }

    async fn wake(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.wake(id).await
    }

    async fn awake(&self, id: &str) -> HostResult<VmView> {
        self.to(id).await?.awake(id).await
    }

    async fn destroy(&self, id: &str) -> HostResult<()> {
        let r = self.to(id).await?.destroy(id).await;
        if matches!(r, Ok(()) | Err(HostError::SandboxNotFound(_))) {
            self.forget(id);
        }
        r
    }

    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>> {
        self.to(id).await?.stats(id).await
    }

    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>> {
        self.to(id).await?.metrics(id, since_ms).await
    }

    async fn console(&self, id: &str, from: Option<LogPos>, max: usize) -> HostResult<LogChunk> {
        self.to(id).await?.console(id, from, max).await
    }

    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView> {
        self.to(id).await?.snapshot(id, snapshot_id).await
    }

    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        self.to(id).await?.fork(id, snapshot_id, child_ids).await
    }

    async fn store_hibernated(&self, id: &str, ws: &str) -> HostResult<String> {
        self.to(id).await?.store_hibernated(id, ws).await
    }

    async fn store_snapshot(&self, snapshot_id: &str, ws: &str) -> HostResult<()> {
        self.to(snapshot_id)
            .await?
            .store_snapshot(snapshot_id, ws)
            .await
    }

    /// Made on a host the caller names ([`Fleet::host`]): the fleet cannot know which.
    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        _: &str,
        _: Option<&pandastack_host::Origin>,
    ) -> HostResult<()> {
        Err(HostError::failed(
            "fetch snapshot",
            format!("a fleet fetches snapshot {snapshot_id} on a host it is given"),
        ))
    }

    async fn store_durable(&self, id: &str, ws: &str) -> HostResult<String> {
        self.to(id).await?.store_durable(id, ws).await
    }

    async fn leave(&self, id: &str) -> HostResult<String> {
        self.to(id).await?.leave(id).await
    }

    /// Made on a host the caller names ([`Fleet::host`]), before the row names it.
    async fn adopt_from(
        &self,
        id: &str,
        _: &str,
        _: &pandastack_host::Origin,
    ) -> HostResult<VmView> {
        Err(HostError::failed(
            "adopt a sandbox from another host",
            format!("a fleet adopts sandbox {id} on a host it is given"),
        ))
    }

    /// To the host the sandbox's row names (a move calls its destination itself, before the
    /// row names it: see `Sandboxes::migrate`).
    async fn adopt_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<VmView> {
        self.to(id).await?.adopt_stored(id, ws, tag).await
    }

    async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> HostResult<()> {
        self.to(id).await?.forget_stored(id, ws, tag).await
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        let r = self
            .to(snapshot_id)
            .await?
            .delete_snapshot(snapshot_id)
            .await;
        if r.is_ok() {
            self.forget(snapshot_id);
        }
        r
    }

    async fn keep_standby(&self, snapshot_id: &str, count: usize) -> HostResult<usize> {
        self.to(snapshot_id)
            .await?
            .keep_standby(snapshot_id, count)
            .await
    }

    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        self.to(id).await?.create_volume(id, size_bytes).await
    }

    async fn volume(&self, id: &str) -> HostResult<VolumeView> {
        self.to(id).await?.volume(id).await
    }

    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        self.to(id).await?.grow_volume(id, size_bytes).await
    }

    async fn delete_volume(&self, id: &str) -> HostResult<()> {
        let r = self.to(id).await?.delete_volume(id).await;
        if r.is_ok() {
            self.forget(id);
        }
        r
    }

    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        let mut all = Vec::new();
        for h in self.live().await {
            all.extend(h.volume_ids().await?);
        }
        Ok(all)
    }

    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView> {
        self.to(id)
            .await?
            .snapshot_volume(id, snapshot_id, holder)
            .await
    }

    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        // Volume snapshots have no row naming their host: every host is asked.
        for h in self.live().await {
            match h.delete_volume_snapshot(snapshot_id).await {
                Ok(()) => return Ok(()),
                Err(HostError::VolumeSnapshotNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Err(HostError::VolumeSnapshotNotFound(snapshot_id.to_owned()))
    }

    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        let mut all = Vec::new();
        for h in self.live().await {
            all.extend(h.volume_snapshot_ids().await?);
        }
        Ok(all)
    }

    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        self.to(id)
            .await?
            .volume_from_snapshot(snapshot_id, id, size_bytes)
            .await
    }

    async fn upload_volume_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
    ) -> HostResult<VolumeUpload> {
        for h in self.live().await {
            match h.upload_volume_snapshot(snapshot_id, ws).await {
                Err(HostError::VolumeSnapshotNotFound(_)) => {}
                r => return r,
            }
        }
        Err(HostError::VolumeSnapshotNotFound(snapshot_id.to_owned()))
    }

    async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        self.to(id)
            .await?
            .volume_from_manifest(ws, manifest, id, size_bytes)
            .await
    }

    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome> {
        self.to(id).await?.exec(id, spec).await
    }

    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        self.to(id).await?.exec_stream(id, spec).await
    }

    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        inputs: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        self.to(id).await?.exec_session(id, start, inputs).await
    }

    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        self.to(id).await?.read_file(id, path).await
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        self.to(id).await?.write_file(id, path, body).await
    }

    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo> {
        self.to(id).await?.stat(id, path).await
    }

    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage> {
        self.to(id).await?.list_dir(id, path, depth, page).await
    }

    async fn watch(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<pandastack_host::WatchEvent>>>> {
        self.to(id).await?.watch(id, path, recursive).await
    }

    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()> {
        self.to(id).await?.mkdir(id, path, parents).await
    }

    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()> {
        self.to(id).await?.remove(id, path, recursive).await
    }

    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()> {
        self.to(id).await?.rename(id, from, to, overwrite).await
    }

    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>> {
        self.to(id).await?.connect_port(id, port).await
    }

    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        let mut all: Vec<TemplateView> = Vec::new();
        for h in self.dialled() {
            for t in h.catalog()? {
                if !all.iter().any(|a| a.name == t.name) {
                    all.push(t);
                }
            }
        }
        Ok(all)
    }

    fn is_catalog(&self, name: &str) -> bool {
        self.dialled().iter().any(|h| h.is_catalog(name))
    }

    async fn rebake(&self, name: &str) -> HostResult<()> {
        for h in self.live().await {
            h.rebake(name).await?;
        }
        Ok(())
    }

    async fn remove_template(&self, name: &str) -> HostResult<()> {
        for h in self.live().await {
            match h.remove_template(name).await {
                Ok(()) | Err(HostError::TemplateNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        match self.dialled().first() {
            Some(h) => h.check_spec(text),
            None => Err(SpecRefused::Invalid(
                "no host has attended this replica yet: template specs are checked by a host"
                    .to_owned(),
            )),
        }
    }

    /// A build runs on the host placement chooses for a VM of [`BUILD_MEMORY_MIB`] (its
    /// builder VM), in a directory of that host's (the agent's data directory's
    /// `builds/<build id>`: `dir` is the replica's, so it is not passed on); its bake then runs
    /// there too ([`Host::bake_image`] below), and that host stores the bake in the object store
    /// for the others. An OCI tarball comes stored in the object store
    /// ([`BuildSource::OciStored`]: the replica that took the upload stored it), and the host
    /// fetches it; one in a replica's directory ([`BuildSource::Oci`]) is refused.
    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        _dir: PathBuf,
        log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        if matches!(source, BuildSource::Oci { .. }) {
            return Err(HostError::BuildFailed(
                "an OCI tarball in a replica's directory cannot be read by the host that builds \
                 it (a cluster's uploads are stored in the object store): build from a spec"
                    .to_owned(),
            ));
        }
        let demand = pandastack_store::Demand {
            memory_mib: BUILD_MEMORY_MIB,
            template: None,
            compat_key: None,
            host: None,
            exclude: &[],
            now_ms: pandastack_store::now_ms(),
        };
        let chosen = self
            .store
            .sandboxes()
            .choose_host(&demand)
            .await
            .map_err(|e| HostError::BuildFailed(format!("no host to build on: {e}")))?;
        let host = self.host(&chosen.host_id).await?;
        tracing::info!(build = %build_id, host = %chosen.host_id, "template build placed");
        lock(&self.builds).insert(build_id.to_owned(), chosen.host_id.clone());
        let built = host
            .build_image(build_id, source, PathBuf::new(), log)
            .await;
        if built.is_err() {
            lock(&self.builds).remove(build_id);
        }
        built
    }

    /// The bake of a build on the host that built its image (see [`Self::build_image`]).
    async fn bake_image(&self, name: &str, image: &Path, shape: Shape) -> HostResult<u64> {
        let Some(host_id) = lock(&self.builds).get(name).cloned() else {
            return Err(HostError::BuildFailed(format!(
                "{name} was not built by this replica since it started: in a cluster a template \
                 is baked on the host that built its image (build the version again)"
            )));
        };
        let baked = self
            .host(&host_id)
            .await?
            .bake_image(name, image, shape)
            .await;
        lock(&self.builds).remove(name);
        baked
    }
}
