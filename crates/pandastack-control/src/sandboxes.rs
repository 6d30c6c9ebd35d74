//! The sandbox service: a sandbox's row and its VM kept in step. Commands take what the caller
//! asked for ([`CreateSandboxRequest`], [`PatchSandboxRequest`]) and a workspace; the rows are
//! built here, and every state change is one row update.

use std::sync::Arc;
use tracing::Instrument;

use pandastack_api_types::{CreateSandboxRequest, PatchSandboxRequest};
use pandastack_host::{Host, HostError, Origin, VmState, VmView};
use pandastack_store::{
    now_ms, Adding, Filter, HostState, MountClaim, SandboxRow, SandboxState, Store, StoreError,
};

use crate::{row_state, Fleet, ResourceKind, TemplateError, Templates, Volumes};

mod durable;
mod file_urls;
mod lost;
mod migrate;
mod restore;

pub use file_urls::{FileUrlMethod, FileUrlRefused, SignedFileUrl, MAX_FILE_URL_SECONDS};

/// How long a create elsewhere from a snapshot that its host's agent could not send waits for
/// the snapshot's upload to end, to fetch it from the object store instead.
const UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Why a sandbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    /// The create's template could not be resolved (unknown, no ready version, ...).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The workspace has no such sandbox.
    #[error("sandbox {0} not found")]
    SandboxNotFound(String),
    /// The workspace has no such snapshot.
    #[error("snapshot {0} not found")]
    SnapshotNotFound(String),
    /// A disk limit outside what this server allows ([`DiskMax`]).
    #[error("{field}: between 1 and {max}")]
    DiskLimit { field: &'static str, max: u64 },
    /// The sandbox is `lost`: its host was declared dead, so its VM cannot be reached (it can
    /// still be deleted).
    #[error("sandbox {id} is lost: its host {host} is dead")]
    SandboxLost { id: String, host: String },
    /// A move to another host that cannot be made (one host only, a state or volume that does
    /// not move, the sandbox changed meanwhile); nothing was moved.
    #[error("sandbox {id} cannot move: {why}")]
    CannotMove { id: String, why: String },
    /// A volume to mount is on a dead host ([`crate::VolumeError::Unavailable`]).
    #[error(transparent)]
    VolumeUnavailable(Box<crate::VolumeError>),
}

/// The most a create may ask for in `disk_mbps` and `disk_iops` (`pandastack server
/// --vm-disk-mbps-max`, `--vm-disk-iops-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskMax {
    pub mbps: u64,
    pub iops: u64,
}

impl Default for DiskMax {
    fn default() -> Self {
        Self {
            mbps: 4096,
            iops: 1_000_000,
        }
    }
}

impl DiskMax {
    /// [`ControlError::DiskLimit`] naming the field when `req` asks for more than these.
    pub fn check(&self, req: &CreateSandboxRequest) -> Result<(), ControlError> {
        for (field, v, max) in [
            ("disk_mbps", req.disk_mbps, self.mbps),
            ("disk_iops", req.disk_iops, self.iops),
        ] {
            if v.is_some_and(|v| v == 0 || v > max) {
                return Err(ControlError::DiskLimit { field, max });
            }
        }
        Ok(())
    }
}

/// A create failure that says the host could not take it (so another host may): it cannot be
/// reached, or it failed for a reason of its own. Refusals of the request itself (a template
/// not found, a bad volume) are the same on every host.
pub(crate) fn refusal(e: &HostError) -> bool {
    matches!(e, HostError::Unreachable { .. } | HostError::Failed { .. })
}

/// When a sandbox whose TTL is `ttl_seconds`, counted from `from_ms`, expires (the one place a
/// TTL becomes a time).
pub fn expiry(from_ms: i64, ttl_seconds: Option<i64>) -> Option<i64> {
    ttl_seconds.map(|t| from_ms.saturating_add(t.saturating_mul(1000)))
}

/// What a new sandbox starts from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A baked template (its name on the host).
    Template(String),
    /// A baked template, the sandbox's RAM a file of its own: snapshots of it restore by
    /// mapping instead of loading RAM ([`Host::create_with_memory_file`]).
    TemplateWithMemoryFile(String),
    /// A snapshot.
    Snapshot(String),
}

/// A lifecycle operation on a sandbox's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Pause,
    Resume,
    Hibernate,
    Wake,
}

/// Where new sandboxes go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlaceMode {
    /// On this process's host (a single-node server): the row names `host_id`.
    #[default]
    ThisHost,
    /// On the host the store's placement chooses, in the transaction that writes the row (a
    /// control-plane replica over a [`crate::Fleet`]).
    AcrossHosts,
}

/// How many hosts a create tries when hosts refuse it (a link down, a host failing the create).
const PLACE_TRIES: usize = 3;

/// What a create asks of its host when the template's shape is not known here.
const DEFAULT_MEMORY_MIB: i64 = 512;

/// Sandboxes of one host, over the store and the host.
#[derive(Clone)]
pub struct Sandboxes {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
    templates: Templates,
    volumes: Volumes,
    disk_max: DiskMax,
    place: PlaceMode,
    /// A cluster's hosts one by one (a move names its hosts); set once, seen by every clone.
    fleet: Arc<std::sync::OnceLock<Fleet>>,
    /// Sandboxes this process is moving to another host (one move of a sandbox at a time).
    moving: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Copies of moved sandboxes left on their old host for a moment (see `migrate`).
    retiring: Arc<migrate::Retiring>,
    /// Where lifecycle changes are recorded (one for the whole control plane).
    events: crate::Events,
}

impl Sandboxes {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        host_id: String,
        templates: Templates,
        volumes: Volumes,
        disk_max: DiskMax,
    ) -> Self {
        let store_for_events = store.clone();
        Self {
            store,
            host,
            host_id,
            templates,
            volumes,
            disk_max,
            place: PlaceMode::ThisHost,
            fleet: Arc::default(),
            moving: Arc::default(),
            retiring: Arc::default(),
            events: crate::Events::new(store_for_events),
        }
    }

    /// Records lifecycle changes in `events` (the control plane's).
    pub fn with_events(mut self, events: crate::Events) -> Self {
        self.events = events;
        self
    }

    /// Where lifecycle changes are recorded.
    pub fn events(&self) -> &crate::Events {
        &self.events
    }

    /// Gives a cluster's sandboxes (and every clone of them) the fleet their host is, so that
    /// sandboxes can move between its hosts ([`Self::migrate`]); a second call changes nothing.
    pub fn set_fleet(&self, fleet: Fleet) {
        let _ = self.fleet.set(fleet);
    }

    /// Places new sandboxes as `place` says.
    /// Where new sandboxes go.
    pub fn place_mode(&self) -> PlaceMode {
        self.place
    }

    pub fn with_placement(mut self, place: PlaceMode) -> Self {
        self.place = place;
        self
    }

    /// Creates a sandbox in workspace `ws` as `req` asks: from a snapshot of the workspace's,
    /// or from a template (the workspace's own, else the catalog's; its image's environment
    /// under the caller's), with volumes mounted, within the workspace's create rate and
    /// sandbox limit. Returns once it accepts commands.
    pub async fn create(
        &self,
        ws: &str,
        req: &CreateSandboxRequest,
    ) -> Result<SandboxRow, ControlError> {
        self.disk_max.check(req)?;
        if let Some(snap) = &req.snapshot_id {
            match self.store.snapshots().get(ws, snap).await {
                Ok(_) => {}
                Err(StoreError::NotFound) => {
                    return Err(ControlError::SnapshotNotFound(snap.clone()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let resolved = match &req.snapshot_id {
            Some(_) => None,
            None => Some(self.templates.resolve(ws, &req.template).await?),
        };
        let now = now_ms();
        self.store.keys().take_creates(ws, 1, now).await?;
        let mut row = SandboxRow::service(ws, &self.host_id, &req.template, req.metadata.clone());
        // What the create asks for until it finishes (then what its VM runs with).
        row.disk_mbps = req.disk_mbps.map_or(0, |v| v as i64);
        row.disk_iops = req.disk_iops.map_or(0, |v| v as i64);
        row.env = resolved.as_ref().map(|r| r.env.clone()).unwrap_or_default();
        row.env.extend(req.env.clone());
        row.ttl_seconds = req.ttl_seconds.map(|v| v as i64);
        row.idle_timeout_seconds = req.idle_timeout_seconds.map(|v| v as i64);
        row.on_timeout = req.on_timeout;
        row.on_host_loss = req.on_host_loss;
        row.created_at = now;
        row.last_activity_at = now;
        row.expires_at = expiry(now, row.ttl_seconds);
        row.snapshot_id = req.snapshot_id.clone();
        row.volumes = req.volumes.clone();
        let source = match (&req.snapshot_id, resolved) {
            (Some(snap), _) => Source::Snapshot(snap.clone()),
            (None, Some(r)) => Source::Template(r.baked),
            (None, None) => Source::Template(req.template.clone()),
        };
        match source {
            Source::Template(t) if !req.volumes.is_empty() => {
                let claims: Vec<MountClaim> = req
                    .volumes
                    .iter()
                    .map(|v| MountClaim {
                        name: v.name.clone(),
                        path: v.path.clone(),
                        read_only: v.read_only,
                    })
                    .collect();
                self.launch_with_volumes(row, &t, &claims).await
            }
            source => self.launch(row, source).await,
        }
    }

    /// The workspace's sandbox `id` ([`ControlError::SandboxNotFound`] for another
    /// workspace's).
    pub async fn get(&self, ws: &str, id: &str) -> Result<SandboxRow, ControlError> {
        if !pandastack_api_types::valid_name(id, 32) {
            return Err(ControlError::SandboxNotFound(id.to_owned()));
        }
        found(self.store.sandboxes().get(ws, id).await, id)
    }

    /// Sandbox `id` of any workspace (the preview proxy, which checks access itself).
    pub async fn by_id(&self, id: &str) -> Result<SandboxRow, ControlError> {
        found(self.store.sandboxes().by_id(id).await, id)
    }

    /// A page of the workspace's sandboxes matching `filter`, oldest first, after the
    /// `(created_at, id)` of the previous page's last.
    pub async fn list(
        &self,
        ws: &str,
        filter: &Filter,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SandboxRow>, ControlError> {
        Ok(self
            .store
            .sandboxes()
            .list(ws, filter, after, limit)
            .await?)
    }

    /// Changes the workspace's sandbox `id` as `req` asks: a TTL counted from now, the idle
    /// timeout, the metadata (replaced whole).
    pub async fn update(
        &self,
        ws: &str,
        id: &str,
        req: &PatchSandboxRequest,
    ) -> Result<SandboxRow, ControlError> {
        let mut row = self.get(ws, id).await?;
        if let Some(t) = req.ttl_seconds {
            row.ttl_seconds = Some(t as i64);
            row.expires_at = expiry(now_ms(), row.ttl_seconds);
        }
        if let Some(t) = req.idle_timeout_seconds {
            row.idle_timeout_seconds = Some(t as i64);
        }
        if let Some(m) = &req.metadata {
            row.metadata = m.clone();
        }
        self.store.sandboxes().update(&row).await?;
        Ok(row)
    }

    /// Records activity on sandbox `id` now (a WebSocket session's traffic, say).
    pub async fn touch(&self, id: &str) -> Result<(), ControlError> {
        Ok(self.store.sandboxes().touch(id, now_ms()).await?)
    }

    /// The secret that opens the sandbox's private ports, made the first time it is asked for.
    pub async fn access_token(&self, row: &SandboxRow) -> Result<String, ControlError> {
        if !row.access_token.is_empty() {
            return Ok(row.access_token.clone());
        }
        Ok(self
            .store
            .sandboxes()
            .ensure_access_token(&row.id, &pandastack_store::new_token())
            .await?)
    }

    /// Makes port `port` of the sandbox public (or private again); returns its public ports.
    pub async fn set_port_public(
        &self,
        row: &SandboxRow,
        port: u16,
        public: bool,
    ) -> Result<std::collections::BTreeSet<u16>, ControlError> {
        Ok(self
            .store
            .sandboxes()
            .set_port_public(&row.id, port, public)
            .await?)
    }

    /// Creates the sandbox of `row` (state `starting`, owned by this host; the platform's own
    /// sandboxes: an app's VM, a schedule run's) from `source`: the row goes in first, within
    /// its workspace's limit in one transaction — a crash mid-create leaves a row start-up
    /// reconciliation settles, never a VM nobody knows about — then the VM, then one update
    /// records it. A failed VM create removes the row.
    pub async fn launch(
        &self,
        row: SandboxRow,
        source: Source,
    ) -> Result<SandboxRow, ControlError> {
        self.launch_avoiding(row, source, &[]).await
    }

    /// [`Self::launch`], placement in a cluster not choosing the hosts in `avoid`.
    pub(crate) async fn launch_avoiding(
        &self,
        row: SandboxRow,
        source: Source,
        avoid: &[String],
    ) -> Result<SandboxRow, ControlError> {
        if self.place == PlaceMode::ThisHost {
            self.store
                .sandboxes()
                .insert_within_limit(std::slice::from_ref(&row))
                .instrument(
                    tracing::info_span!("placement", host = %row.host_id, mode = "this_host"),
                )
                .await?;
            return self.launch_on_host(row, &source).await;
        }
        let (template, pinned) = match &source {
            Source::Template(t) | Source::TemplateWithMemoryFile(t) => (Some(t.as_str()), None),
            Source::Snapshot(s) => (None, self.store.hosts().owner_of(s).await?),
        };
        let mut refused: Vec<String> = Vec::new();
        loop {
            let mut row = row.clone();
            let exclude = [avoid, &refused].concat();
            let placed = self
                .place_row(&mut row, &[], template, pinned.as_deref(), &exclude)
                .await;
            if let (Source::Snapshot(s), Some(origin)) = (&source, &pinned) {
                // A durable snapshot whose host has no room (or is gone) restores elsewhere.
                if matches!(
                    placed,
                    Err(ControlError::Store(StoreError::NoCapacity { .. }))
                ) {
                    if let Some((key, from)) = self.snapshot_elsewhere(s, origin).await? {
                        self.place_row_keyed(&mut row, &[], None, None, Some(&key), &exclude)
                            .await?;
                        self.fetched(&row, s, from.as_ref()).await?;
                        return self.launch_on_host(row, &source).await;
                    }
                }
            }
            placed?;
            if let (Source::Snapshot(s), None, Some(_)) = (&source, &pinned, self.fleet.get()) {
                // A snapshot the platform took (a function version's bake: no row names its
                // host) is in the object store: the host chosen fetches it unless it has it.
                self.fetched(&row, s, None).await?;
            }
            let host = row.host_id.clone();
            match self.launch_on_host(row, &source).await {
                Err(ControlError::Host(e)) if refusal(&e) && refused.len() + 1 < PLACE_TRIES => {
                    tracing::warn!(
                        host = %host,
                        error = &e as &dyn std::error::Error,
                        "placement: the host refused the create; trying the next one"
                    );
                    refused.push(host);
                }
                r => return r,
            }
        }
    }

    /// Where snapshot `snapshot`, taken on host `origin`, may be restored besides there: the
    /// compatibility key of those hosts, and `origin`'s agent while it is alive (a host placed
    /// elsewhere reads the files from it, not waiting for their upload). `Some` in a cluster
    /// while `origin` is alive, or once the files are durable in the object store.
    async fn snapshot_elsewhere(
        &self,
        snapshot: &str,
        origin: &str,
    ) -> Result<Option<(String, Option<Origin>)>, ControlError> {
        if self.fleet.get().is_none() {
            return Ok(None);
        }
        let durable = match self.store.snapshots().durable_at(snapshot).await {
            Ok(at) => at.is_some(),
            Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let host = self.store.hosts().get(origin).await?;
        let from = match (host.state, host.address) {
            (HostState::Dead, _) | (_, None) => None,
            (_, Some(address)) => Some(Origin {
                host_id: host.id,
                address,
            }),
        };
        if !durable && from.is_none() {
            return Ok(None);
        }
        Ok(host.compat_key.map(|key| (key, from)))
    }

    /// Snapshot `snapshot` fetched onto the host of `row` (placed, in state `starting`): from
    /// the agent of the host that took it (`from`) while it answers, else from the object
    /// store; a failure removes the row.
    async fn fetched(
        &self,
        row: &SandboxRow,
        snapshot: &str,
        from: Option<&Origin>,
    ) -> Result<(), ControlError> {
        let fetched = async {
            let fleet = self.fleet.get().ok_or_else(|| {
                HostError::failed("fetch snapshot", "this server is a single host")
            })?;
            let started = std::time::Instant::now();
            let host = fleet.host(&row.host_id).await?;
            match host
                .fetch_snapshot(snapshot, &row.workspace_id, from)
                .await
            {
                Err(e) if from.is_some() && self.became_durable(snapshot).await => {
                    // Neither its host's agent nor (yet) the object store had it: now stored.
                    tracing::info!(snapshot, host = %row.host_id, error = &e as &dyn std::error::Error, "snapshot not fetched before its upload ended; again from the object store");
                    host.fetch_snapshot(snapshot, &row.workspace_id, None)
                        .await?;
                }
                r => r?,
            }
            tracing::info!(
                snapshot,
                host = %row.host_id,
                took_ms = started.elapsed().as_secs_f64() * 1e3,
                "snapshot fetched for a create on another host"
            );
            Ok::<_, HostError>(())
        }
        .await;
        if let Err(e) = fetched {
            self.store.sandboxes().delete(&row.id).await?;
            return Err(e.into());
        }
        Ok(())
    }

    /// Whether snapshot `snapshot`'s upload to the object store ends within
    /// [`UPLOAD_WAIT`] (it runs in the background from the snapshot's taking; `false` if the
    /// row is gone or cannot be read).
    async fn became_durable(&self, snapshot: &str) -> bool {
        let started = std::time::Instant::now();
        loop {
            match self.store.snapshots().durable_at(snapshot).await {
                Ok(Some(_)) => return true,
                Ok(None) if started.elapsed() < UPLOAD_WAIT => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await
                }
                _ => return false,
            }
        }
    }

    /// The cluster's hosts one by one, if this is a cluster's replica.
    pub(crate) fn fleet(&self) -> Option<Fleet> {
        self.fleet.get().cloned()
    }

    /// The create of [`Self::launch`] once its row is in.
    async fn launch_on_host(
        &self,
        row: SandboxRow,
        source: &Source,
    ) -> Result<SandboxRow, ControlError> {
        let disk = disk_request(&row);
        let created = match source {
            Source::Template(t) if !disk.is_empty() => {
                self.host
                    .create_with_disk(t, &row.id, Vec::new(), disk)
                    .await
            }
            Source::Template(t) => self.host.create(t, &row.id).await,
            Source::TemplateWithMemoryFile(t) => {
                self.host.create_with_memory_file(t, &row.id).await
            }
            Source::Snapshot(s) => self.host.create_from_snapshot(s, &row.id).await,
        };
        match created {
            Ok(view) => self.finish(row, &view).await,
            Err(e) => {
                self.store.sandboxes().delete(&row.id).await?;
                Err(e.into())
            }
        }
    }

    /// Creates the sandbox of `row` from template `template` with volumes mounted: the row and
    /// its claims on the volumes go in first, in one transaction (a missing, busy or remote
    /// volume writes nothing and starts no VM), then the VM with the volumes mounted. A failed
    /// VM create removes the row and its claims.
    pub(crate) async fn launch_with_volumes(
        &self,
        row: SandboxRow,
        template: &str,
        claims: &[MountClaim],
    ) -> Result<SandboxRow, ControlError> {
        let mut row = row;
        let claimed = match self.place {
            PlaceMode::ThisHost => {
                self.store
                    .sandboxes()
                    .insert_with_volumes(&row, claims)
                    .await?
            }
            PlaceMode::AcrossHosts => {
                // A volume on a dead host is refused saying so (a missing one by the claim).
                for c in claims {
                    if let Err(e @ crate::VolumeError::Unavailable { .. }) =
                        self.volumes.reachable_row(&row.workspace_id, &c.name).await
                    {
                        return Err(ControlError::VolumeUnavailable(Box::new(e)));
                    }
                }
                // A sandbox runs where its volumes are.
                let pinned = match claims.first() {
                    Some(c) => match self.store.volumes().get(&row.workspace_id, &c.name).await {
                        Ok(v) => Some(v.host_id),
                        Err(StoreError::NotFound) => None,
                        Err(e) => return Err(e.into()),
                    },
                    None => None,
                };
                self.place_row(&mut row, claims, Some(template), pinned.as_deref(), &[])
                    .await?
            }
        };
        let mounts = self.volumes.host_mounts(claimed).await;
        let disk = disk_request(&row);
        match self
            .host
            .create_with_disk(template, &row.id, mounts, disk)
            .await
        {
            Ok(view) => self.finish(row, &view).await,
            Err(e) => {
                self.store.sandboxes().delete(&row.id).await?;
                Err(e.into())
            }
        }
    }

    /// Writes `row` on the host the store's placement chooses for it (and claims `claims`), in
    /// one transaction; logs the choice and its reason.
    async fn place_row(
        &self,
        row: &mut SandboxRow,
        claims: &[MountClaim],
        template: Option<&str>,
        pinned: Option<&str>,
        refused: &[String],
    ) -> Result<Vec<pandastack_store::Claimed>, ControlError> {
        self.place_row_keyed(row, claims, template, pinned, None, refused)
            .await
    }

    /// [`Self::place_row`] among hosts with compatibility key `compat_key` only, if given.
    async fn place_row_keyed(
        &self,
        row: &mut SandboxRow,
        claims: &[MountClaim],
        template: Option<&str>,
        pinned: Option<&str>,
        compat_key: Option<&str>,
        refused: &[String],
    ) -> Result<Vec<pandastack_store::Claimed>, ControlError> {
        let memory_mib = template
            .and_then(|t| {
                self.host
                    .catalog()
                    .ok()?
                    .into_iter()
                    .find(|v| v.name == t)
                    .map(|v| i64::from(v.shape.memory_mib))
            })
            // A snapshot's sandbox (a fork's child, a lost one restored) has its memory already.
            .or_else(|| (template.is_none() && row.memory_mib > 0).then_some(row.memory_mib))
            .unwrap_or(DEFAULT_MEMORY_MIB);
        let demand = pandastack_store::Demand {
            memory_mib,
            template,
            compat_key,
            host: pinned,
            exclude: refused,
            now_ms: now_ms(),
        };
        let started = std::time::Instant::now();
        let (placed, claimed) = self
            .store
            .sandboxes()
            .insert_placed(row, claims, &demand)
            .instrument(tracing::info_span!(
                "placement",
                mode = "cluster",
                memory_mib
            ))
            .await?;
        tracing::info!(
            sandbox = %row.id,
            host = %placed.host_id,
            reason = %placed.reason,
            candidates = placed.candidates,
            free_memory_mib = placed.free_memory_mib,
            memory_mib,
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "placed"
        );
        Ok(claimed)
    }

    /// Records a finished create (shape, boot time, state) in one update.
    pub async fn finish(
        &self,
        mut row: SandboxRow,
        view: &VmView,
    ) -> Result<SandboxRow, ControlError> {
        row.template = view.template.clone();
        row.vcpus = i64::from(view.shape.vcpus);
        row.memory_mib = i64::from(view.shape.memory_mib);
        let disk = view
            .shape
            .disk
            .unwrap_or(pandastack_host::DiskLimits::UNLIMITED);
        row.disk_mbps = disk.mbps() as i64;
        row.disk_iops = disk.iops as i64;
        row.boot_ms = view.ready_ms as i64;
        row.state = row_state(view.state);
        self.store.sandboxes().finish_create(&row).await?;
        let data = serde_json::json!({
            "template": row.template,
            "snapshot_id": row.snapshot_id,
            "parent_id": row.parent_id,
            "boot_ms": row.boot_ms,
            "metadata": row.metadata,
        });
        self.events
            .emit(
                &row.workspace_id,
                "sandbox.created",
                ResourceKind::Sandbox,
                &row.id,
                data,
            )
            .await;
        Ok(row)
    }

    /// The event of a sandbox's state change from `from` to `to`, if it is one.
    pub(crate) async fn state_event(&self, row: &SandboxRow, from: SandboxState, to: SandboxState) {
        let ty = match (from, to) {
            (SandboxState::Hibernated, SandboxState::Running) => "sandbox.woken",
            (SandboxState::Paused, SandboxState::Running) => "sandbox.resumed",
            (_, SandboxState::Paused) => "sandbox.paused",
            (_, SandboxState::Hibernated) => "sandbox.hibernated",
            _ => return,
        };
        self.events
            .emit(
                &row.workspace_id,
                ty,
                ResourceKind::Sandbox,
                &row.id,
                serde_json::json!({"from": from.as_str(), "to": to.as_str()}),
            )
            .await;
        // A managed database hibernates with its VM (its idle timeout).
        if let (Some(db), SandboxState::Hibernated) =
            (row.metadata.get(crate::DATABASE_METADATA), to)
        {
            self.events
                .emit(
                    &row.workspace_id,
                    "database.hibernated",
                    ResourceKind::Database,
                    db,
                    serde_json::json!({"sandbox_id": row.id}),
                )
                .await;
        }
    }

    /// Records the host's view of a sandbox after an operation (its state, if it changed) and
    /// the activity.
    pub async fn record(
        &self,
        mut row: SandboxRow,
        view: &VmView,
    ) -> Result<SandboxRow, ControlError> {
        let state = row_state(view.state);
        let now = now_ms();
        if view.state == VmState::Hibernated {
            self.store
                .sandboxes()
                .set_image_bytes(&row.id, view.image_bytes as i64)
                .await?;
        }
        if row.state != state {
            self.store
                .sandboxes()
                .set_state_touched(&row.id, state, now)
                .await?;
            let was = row.state;
            row.state = state;
            if state == SandboxState::Hibernated {
                self.keep_durable(&row, now);
            }
            self.state_event(&row, was, state).await;
        } else {
            self.store.sandboxes().touch(&row.id, now).await?;
        }
        row.last_activity_at = now;
        Ok(row)
    }

    /// [`Self::lifecycle`] for a caller's request: a hibernation first checks the workspace's
    /// storage quotas (count of hibernated sandboxes, storage; see
    /// [`pandastack_store::Quotas`]). The platform's own hibernations (an app's idle VM) call
    /// [`Self::lifecycle`] and are never refused.
    pub async fn requested(&self, row: SandboxRow, verb: Verb) -> Result<SandboxRow, ControlError> {
        if verb == Verb::Hibernate && row.state != SandboxState::Hibernated {
            self.store
                .quotas()
                .check(&row.workspace_id, Adding::Hibernation)
                .await?;
        }
        self.lifecycle(row, verb).await
    }

    /// Runs `verb` on the sandbox's VM and records the result. A sandbox moving to another
    /// host is followed there once the move is over (see `migrate`).
    pub async fn lifecycle(&self, row: SandboxRow, verb: Verb) -> Result<SandboxRow, ControlError> {
        self.following(row, Some(verb)).await
    }

    /// The sandbox ready for work inside it: woken if it was hibernated, the row saying so. A
    /// sandbox moving to another host is followed there once the move is over.
    pub async fn awake(&self, row: SandboxRow) -> Result<SandboxRow, ControlError> {
        self.following(row, None).await
    }

    /// `verb` (`None`: [`Host::awake`]) on the sandbox's VM, recorded; called again where the
    /// sandbox is once a move that refused it is over.
    async fn following(
        &self,
        mut row: SandboxRow,
        verb: Option<Verb>,
    ) -> Result<SandboxRow, ControlError> {
        let started = std::time::Instant::now();
        loop {
            reachable(&row)?;
            let done = match verb {
                Some(Verb::Pause) => self.host.pause(&row.id).await,
                Some(Verb::Resume) => self.host.resume(&row.id).await,
                Some(Verb::Hibernate) => self.host.hibernate(&row.id).await,
                Some(Verb::Wake) => self.host.wake(&row.id).await,
                None => self.host.awake(&row.id).await,
            };
            match done {
                Err(e) if pandastack_host::is_moving(&e) => {
                    match self.followed(&row, started).await? {
                        Some(now) => row = now,
                        None => return Err(e.into()),
                    }
                }
                // Hibernated on a host now dead: woken where its durable copy is adopted.
                Err(e) if row.state == SandboxState::Hibernated => {
                    match self.rehomed(&row, started).await? {
                        Some(now) => row = now,
                        None => return Err(e.into()),
                    }
                }
                done => return self.record(row, &done?).await,
            }
        }
    }

    /// Stops the sandbox's VM, removes its files and its row. A VM the host does not have
    /// (already gone) is not an error. A `lost` sandbox's host is dead: it is not called (a
    /// stopped host may take a connection and never answer), the row goes, and the VM is
    /// destroyed if the host joins again (no row names it then: see `crate::rejoin`). The
    /// snapshot it was restored from goes too if it was a fork's, not kept, and this was the
    /// last sandbox using it (see [`crate::Snapshots`]).
    pub async fn delete(&self, row: &SandboxRow) -> Result<(), ControlError> {
        if row.state == SandboxState::Lost {
            tracing::info!(
                sandbox = row.id,
                host = row.host_id,
                "deleting a lost sandbox: its VM goes when its host joins again"
            );
        } else {
            // Its readings since the meter's last pass go with the VM: counted first.
            if let Err(e) = crate::meter::count_vm(&self.store, &*self.host, row).await {
                tracing::warn!(sandbox = %row.id, error = &e as &dyn std::error::Error, "meter: a deleted VM's last readings");
            }
            match self.host.destroy(&row.id).await {
                Ok(()) | Err(HostError::SandboxNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.store.sandboxes().delete(&row.id).await?;
        self.events
            .emit(
                &row.workspace_id,
                "sandbox.killed",
                ResourceKind::Sandbox,
                &row.id,
                serde_json::json!({"state": row.state.as_str()}),
            )
            .await;
        if let Some(snapshot) = &row.snapshot_id {
            crate::snapshots::release(&self.store, &*self.host, self.fleet.get(), snapshot).await;
        }
        self.drop_platform_checkpoint(row).await;
        Ok(())
    }
}

/// [`ControlError::SandboxLost`] for a `lost` sandbox: nothing can reach its VM.
fn reachable(row: &SandboxRow) -> Result<(), ControlError> {
    if row.state == SandboxState::Lost {
        return Err(ControlError::SandboxLost {
            id: row.id.clone(),
            host: row.host_id.clone(),
        });
    }
    Ok(())
}

/// A sandbox row read by id, [`ControlError::SandboxNotFound`] when there is none.
fn found(read: Result<SandboxRow, StoreError>, id: &str) -> Result<SandboxRow, ControlError> {
    match read {
        Ok(r) => Ok(r),
        Err(StoreError::NotFound) => Err(ControlError::SandboxNotFound(id.to_owned())),
        Err(e) => Err(e.into()),
    }
}

/// The disk limits a new sandbox's row asks for (its `disk_mbps` and `disk_iops` until its
/// create finishes; 0: not named).
fn disk_request(row: &SandboxRow) -> pandastack_host::DiskRequest {
    let named = |v: i64| u64::try_from(v).ok().filter(|&v| v > 0);
    pandastack_host::DiskRequest {
        mbps: named(row.disk_mbps),
        iops: named(row.disk_iops),
    }
}
