//! The control plane's front door: one [`ControlPlane`] built from the store, a host, the
//! object store and one [`ControlConfig`], holding every service. A server (or a test's
//! in-process stack) builds it, calls [`ControlPlane::recover`] once to settle what a previous
//! process left, [`ControlPlane::start`] to run the workers, and
//! [`ControlPlane::shutdown`] at the end.

use std::sync::{Arc, Mutex};

use pandastack_host::{Host, VmState};
use pandastack_objects::Objects;
use pandastack_outbound::OutboundPolicy;
use pandastack_store::{SandboxState, Store, StoreError};
use tokio::task::JoinHandle;

use crate::{
    AppAddress, AppError, Apps, ArchiveSettings, BuildConfig, Certificates, CodeContexts,
    DatabaseAddress, DatabaseError, Databases, DeployTimings, DiskMax, Domains, Events, Functions,
    InFlight, Meter, MeterReport, MeterSettings, PlaceMode, Reaper, Sandboxes, Schedules,
    Snapshots, Templates, VolumeError, Volumes, Watched, WebhookSettings,
};

/// The owner, in a cluster, of the rows the control plane itself owns (databases, apps,
/// functions, schedules and their jobs): one id for every replica, so whichever replica runs
/// the workers ([`ControlPlane::start`]) runs them for all. Host-owned rows (sandboxes,
/// snapshots, volumes) name the agent's host that placement chose.
pub const CLUSTER_CONTROL_ID: &str = "control-plane";

/// What a control plane is configured with (every field the server's flags decide).
#[derive(Clone)]
pub struct ControlConfig {
    /// This host's id: the owner of the rows of what runs here.
    pub host_id: String,
    /// Template builds' files and upload limit; deploys keep theirs beside them
    /// (`<data>/deploys/`).
    pub builds: BuildConfig,
    /// How apps are addressed (`<name>.<domain>`).
    pub apps: AppAddress,
    /// How connection strings and `http_url` name databases.
    pub databases: DatabaseAddress,
    /// When databases' base backups are taken and how long their archive is kept.
    pub archive: ArchiveSettings,
    /// What app and function sources may be fetched from (default: public addresses only).
    pub outbound: OutboundPolicy,
    /// Where custom domains of apps get TLS certificates (`None`: no HTTPS front).
    pub certificates: Option<Certificates>,
    /// The most disk limits a create may ask for.
    pub disk_max: DiskMax,
    /// How long deploys wait for a new version to listen and be healthy, and for requests on
    /// the one it replaces (`Default`: the server's waits).
    pub deploy: DeployTimings,
    /// Where new sandboxes go: this host (a single-node server) or across a cluster's hosts.
    pub place: PlaceMode,
    /// How webhooks are delivered (retry schedule, attempt timeout); their URLs follow
    /// `outbound`.
    pub webhooks: WebhookSettings,
    /// How often usage is metered (see [`crate::meter`]).
    pub meter: MeterSettings,
}

/// Why settling what a previous process left failed (the server does not start).
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("sandbox rows")]
    Sandboxes(#[source] StoreError),
    #[error("unused fork snapshots")]
    Snapshots(#[source] StoreError),
    #[error("template builds")]
    Builds(#[source] StoreError),
    #[error("volumes and backups")]
    Volumes(#[source] VolumeError),
    #[error("databases")]
    Databases(#[source] DatabaseError),
    #[error("app deploys")]
    Deploys(#[source] AppError),
    #[error("function instances")]
    Instances(#[source] StoreError),
}

/// Every service of the control plane of one host, over one store and host.
#[derive(Clone)]
pub struct ControlPlane {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
    pub sandboxes: Sandboxes,
    pub snapshots: Snapshots,
    pub templates: Templates,
    pub code: CodeContexts,
    pub volumes: Volumes,
    pub databases: Databases,
    pub apps: Apps,
    pub functions: Functions,
    pub domains: Domains,
    pub schedules: Schedules,
    pub events: Events,
    certificates: Option<Certificates>,
    place: PlaceMode,
    /// Calls in flight into guests, which the reaper does not idle out.
    in_flight: InFlight,
    /// The workers [`Self::start`] started, stopped by [`Self::shutdown`].
    /// The object store every service shares (for the chunk collector).
    objects: Objects,
    /// The usage meter ([`crate::meter`]).
    meter: Meter,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl ControlPlane {
    pub fn new(store: Store, host: Arc<dyn Host>, objects: Objects, config: ControlConfig) -> Self {
        let ControlConfig {
            host_id,
            builds,
            apps,
            databases,
            archive,
            outbound,
            certificates,
            disk_max,
            deploy,
            place,
            webhooks,
            meter,
        } = config;
        let outbound = std::sync::Arc::new(outbound);
        let events = Events::new(store.clone())
            .with_settings(webhooks)
            .with_outbound(Arc::clone(&outbound));
        // Every service calls guests through the same watched host: a call in flight keeps its
        // sandbox from idling out (see `crate::in_flight`).
        let in_flight = InFlight::new(store.clone());
        let host: Arc<dyn Host> = Arc::new(Watched::new(host, in_flight.clone()));
        let volumes = Volumes::new(
            store.clone(),
            Arc::clone(&host),
            objects.clone(),
            host_id.clone(),
        )
        .with_placement(place);
        let deploys_dir = builds.dir.with_file_name("deploys");
        let mut templates =
            Templates::new(store.clone(), Arc::clone(&host), host_id.clone(), builds)
                .with_events(events.clone());
        if place == PlaceMode::AcrossHosts {
            templates = templates.storing_uploads_in(objects.clone());
        }
        let sandboxes = Sandboxes::new(
            store.clone(),
            Arc::clone(&host),
            host_id.clone(),
            templates.clone(),
            volumes.clone(),
            disk_max,
        )
        .with_placement(place)
        .with_events(events.clone());
        let domains = Domains::new(store.clone(), apps.domain.clone(), certificates.clone());
        let shared = crate::apps::Shared::new(
            store.clone(),
            Arc::clone(&host),
            sandboxes.clone(),
            host_id.clone(),
            deploys_dir,
            apps,
            objects.clone(),
        )
        .with_outbound(outbound)
        .with_timings(deploy);
        let functions = Functions::new(shared.clone());
        let meter = Meter::new(
            store.clone(),
            Arc::clone(&host),
            match place {
                PlaceMode::ThisHost => Some(host_id.clone()),
                PlaceMode::AcrossHosts => None,
            },
            meter,
        );
        Self {
            schedules: Schedules::new(
                store.clone(),
                Arc::clone(&host),
                sandboxes.clone(),
                templates.clone(),
                functions.clone(),
                host_id.clone(),
            ),
            databases: Databases::new(
                store.clone(),
                Arc::clone(&host),
                sandboxes.clone(),
                volumes.clone(),
                host_id.clone(),
                databases,
            )
            .with_archive(archive),
            snapshots: Snapshots::new(
                store.clone(),
                Arc::clone(&host),
                host_id.clone(),
                sandboxes.clone(),
            ),
            code: CodeContexts::new(Arc::clone(&host)),
            apps: Apps::new(shared, domains.clone()),
            functions,
            domains,
            events,
            volumes,
            sandboxes,
            templates,
            certificates,
            place,
            store,
            host,
            host_id,
            in_flight,
            objects,
            meter,
            workers: Arc::default(),
        }
    }

    /// The store every service shares.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The host the sandboxes run on.
    pub fn host(&self) -> &Arc<dyn Host> {
        &self.host
    }

    /// Where new sandboxes go: this host, or across a cluster's hosts.
    pub fn place_mode(&self) -> PlaceMode {
        self.place
    }

    /// What a drain of host `host_id` moves to other hosts, one at a time: its databases
    /// (cleanly stopped, their volumes copied: no commit lost), then its hibernated sandboxes
    /// and app VMs ([`Sandboxes::move_off`]). Each failure is logged and leaves that resource
    /// where it was; a drain asked again moves what is left.
    pub async fn move_off(&self, host_id: &str) {
        if let Err(e) = self.databases.move_off(host_id).await {
            tracing::warn!(host = %host_id, error = &e as &dyn std::error::Error, "drain: moving databases off the host");
        }
        if let Err(e) = self.sandboxes.move_off(host_id).await {
            tracing::warn!(host = %host_id, error = &e as &dyn std::error::Error, "drain: moving hibernated sandboxes and app VMs off the host");
        }
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// Settles what a previous process left, before [`Self::start`]: rows of this host's
    /// sandboxes against the host's VMs, fork snapshots no sandbox uses, template builds (jobs
    /// this host was running queued again, for every kind: builds, deploys, runs), volumes cut
    /// off mid-create and backups mid-upload, databases mid-create or mid-restore, deploy files
    /// and function instances nothing owns.
    pub async fn recover(&self) -> Result<(), RecoverError> {
        let known: Vec<String> = self
            .store
            .sandboxes()
            .on_host(&self.host_id)
            .await
            .map_err(RecoverError::Sandboxes)?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        crate::reconcile_rows(&self.store, &*self.host, known)
            .await
            .map_err(RecoverError::Sandboxes)?;
        let released = self
            .snapshots
            .release_unused()
            .await
            .map_err(RecoverError::Snapshots)?;
        if !released.is_empty() {
            tracing::info!(snapshots = ?released, "deleted fork snapshots no sandbox uses");
        }
        self.templates
            .recover()
            .await
            .map_err(RecoverError::Builds)?;
        self.volumes
            .reconcile()
            .await
            .map_err(RecoverError::Volumes)?;
        self.volumes
            .recover_backups()
            .await
            .map_err(RecoverError::Volumes)?;
        self.databases
            .reconcile()
            .await
            .map_err(RecoverError::Databases)?;
        self.apps
            .remove_strays()
            .await
            .map_err(RecoverError::Deploys)?;
        self.functions
            .remove_stray_instances()
            .await
            .map_err(RecoverError::Instances)?;
        Ok(())
    }

    /// Starts the workers: template builds, volume backups, database archiving and failover,
    /// deploys (of apps and functions: [`Apps::worker`]) and function instances and calls, the
    /// scheduler and its runs, webhook deliverers and the pruner of old events, the reaper (TTL
    /// and idle timeouts), the restorer of lost sandboxes (a cluster's `on_host_loss:
    /// "restore"`), the object store's chunk collector and, with ACME configured, certificate
    /// orders, and the usage meter. They run until [`Self::shutdown`].
    pub fn start(&self) {
        let mut w = vec![
            tokio::spawn(self.templates.clone().worker()),
            tokio::spawn(self.volumes.clone().worker()),
            tokio::spawn(self.databases.clone().archiver()),
            tokio::spawn(self.databases.clone().failover_worker()),
            tokio::spawn(self.apps.clone().worker()),
            tokio::spawn(self.functions.clone().instance_sweeper()),
            tokio::spawn(self.reaper().run()),
            tokio::spawn(self.sandboxes.clone().restorer()),
            tokio::spawn(crate::chunks::collector(self.objects.clone())),
            tokio::spawn(self.meter.clone().run()),
        ];
        w.extend(self.functions.start_invoke_runners());
        w.extend(self.schedules.start());
        w.extend(self.events.start());
        if let Some(c) = &self.certificates {
            w.extend(c.start());
        }
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(w);
    }

    /// One pass of the usage meter now (the worker [`Self::start`] runs one every interval):
    /// what the hosts sampled since the last pass and what the workspaces keep are counted.
    pub async fn meter_once(&self) -> MeterReport {
        self.meter.once().await
    }

    /// The reaper of TTL and idle timeouts: of this host's sandboxes, or of every host's in a
    /// cluster.
    fn reaper(&self) -> Reaper {
        let r = Reaper::new(
            self.store.clone(),
            Arc::clone(&self.host),
            self.host_id.clone(),
            self.sandboxes.clone(),
            self.in_flight.clone(),
        );
        match self.place {
            PlaceMode::ThisHost => r,
            PlaceMode::AcrossHosts => r.on_every_host(),
        }
    }

    /// Stops the workers (webhook deliverers after the attempts in hand), then, with
    /// `hibernate`, hibernates every sandbox of this host that is not (the operator's choice,
    /// not the workspace's: never refused for its quotas). A sandbox that cannot be hibernated
    /// is logged and left as it is.
    pub async fn shutdown(&self, hibernate: bool) {
        // Webhook deliveries in flight finish first: a stop must not send one twice.
        self.events.stop().await;
        for w in self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            w.abort();
        }
        // The readings since the last pass are counted before the VMs go (exact across the
        // restart: the next process goes on from the cursors).
        self.meter.once().await;
        if !hibernate {
            return;
        }
        for v in self.host.list().await {
            if v.state == VmState::Hibernated {
                continue;
            }
            let saved: Result<(), Box<dyn std::error::Error + Send + Sync>> = async {
                let h = self.host.hibernate(&v.id).await?;
                let rows = self.store.sandboxes();
                rows.set_state(&v.id, SandboxState::Hibernated).await?;
                rows.set_image_bytes(&v.id, h.image_bytes as i64).await?;
                if let Ok(row) = rows.by_id(&v.id).await {
                    let from = crate::row_state(v.state);
                    self.sandboxes
                        .state_event(&row, from, SandboxState::Hibernated)
                        .await;
                }
                Ok(())
            }
            .await;
            if let Err(e) = saved {
                tracing::warn!(sandbox = %v.id, error = &*e as &dyn std::error::Error, "hibernate on shutdown");
            }
        }
    }
}
