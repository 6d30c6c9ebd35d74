//! Workflows of the control plane that need no VM, each a real [`ControlPlane`] over a real
//! SQLite store (in a temporary directory) and the in-memory [`ScriptedHost`], in-process:
//! durable jobs, the scheduler across a restart, the reaper, volume mounts, quotas, the template
//! service's builds, apps' deploys (phases, blue-green switch, rollback) and functions'
//! versions, their VM commands and health checks scripted, and managed databases' WAL archive
//! (base backups due, retention, the point-in-time restore window). Each test takes a few
//! seconds at most (the reaper ticks every 2 s; cron schedules here fire every second).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pandastack_api_types::CreateSandboxRequest;
use pandastack_control::ControlPlane;
use pandastack_store::{SandboxRow, Store};
use pandastack_testkit::script::ScriptedHost;

#[path = "workflows/databases.rs"]
mod databases;
#[path = "workflows/deploys.rs"]
mod deploys;
#[path = "workflows/fleet.rs"]
mod fleet;
#[path = "workflows/fleet_resources.rs"]
mod fleet_resources;
#[path = "workflows/functions.rs"]
mod functions;
#[path = "workflows/jobs.rs"]
mod jobs;
#[path = "workflows/quotas.rs"]
mod quotas;
#[path = "workflows/reaper.rs"]
mod reaper;
#[path = "workflows/schedules.rs"]
mod schedules;
#[path = "workflows/templates.rs"]
mod templates;
#[path = "workflows/volumes.rs"]
mod volumes;

/// The host id of the control planes of [`Env`].
const HOST_ID: &str = "host-a";

/// How long an app's replaced version keeps serving after a switch before its VM hibernates,
/// in [`Env`]'s control planes (the server's 10 s would make each test of it wait that long).
const DRAIN: Duration = Duration::from_millis(1500);

/// A store, a scripted host and a control plane over them (workers not started), with one
/// workspace.
struct Env {
    dir: tempfile::TempDir,
    store: Store,
    host: Arc<ScriptedHost>,
    control: ControlPlane,
    ws: String,
}

impl Env {
    /// A workspace allowed 20 sandboxes and 100 creates a minute.
    async fn new() -> Self {
        Self::with_limits(20, 100).await
    }

    async fn with_limits(max_sandboxes: i64, creates_per_minute: i64) -> Self {
        Self::with_host(max_sandboxes, creates_per_minute, ScriptedHost::new()).await
    }

    /// A workspace allowed 20 sandboxes and 100 creates a minute, over `host`.
    async fn with_host(max_sandboxes: i64, creates_per_minute: i64, host: ScriptedHost) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        let (ws, _, _) = store
            .keys()
            .create_workspace_with_key("ws", max_sandboxes, creates_per_minute)
            .await
            .unwrap();
        let host = Arc::new(host);
        let control = plane(&store, &host, dir.path(), HOST_ID);
        Self {
            dir,
            store,
            host,
            control,
            ws: ws.id,
        }
    }

    /// Another control plane over the same store, host and files: a second server process of
    /// the same host, or this one after a restart.
    fn another_plane(&self) -> ControlPlane {
        plane(&self.store, &self.host, self.dir.path(), HOST_ID)
    }

    async fn create(&self, req: CreateSandboxRequest) -> SandboxRow {
        self.control.sandboxes.create(&self.ws, &req).await.unwrap()
    }

    /// The sandbox's row, `None` once it is gone.
    async fn row(&self, id: &str) -> Option<SandboxRow> {
        match self.store.sandboxes().by_id(id).await {
            Ok(r) => Some(r),
            Err(pandastack_store::StoreError::NotFound) => None,
            Err(e) => panic!("read sandbox {id}: {e}"),
        }
    }
}

/// A control plane of host `host_id` over `store` and `host`, its files under `dir`.
fn plane(store: &Store, host: &Arc<ScriptedHost>, dir: &Path, host_id: &str) -> ControlPlane {
    let objects =
        pandastack_objects::Objects::open(&format!("file://{}", dir.join("objects").display()))
            .expect("object store");
    let config = pandastack_control::ControlConfig {
        // A new version's server gets 2 s to listen and 2 s to be healthy (the server's 300 s
        // and 60 s would make a test of one that never does wait minutes); the version it
        // replaces drains for [`DRAIN`].
        deploy: pandastack_control::DeployTimings {
            listen: Duration::from_secs(2),
            check: Duration::from_secs(2),
            drain: DRAIN,
        },
        ..pandastack_testkit::fake::test_config(host_id, &dir.join(host_id).join("builds"))
    };
    let host: Arc<dyn pandastack_host::Host> = Arc::clone(host) as _;
    ControlPlane::new(store.clone(), host, objects, config)
}

/// The events of resource `id` (by id or name) of workspace `ws`, oldest first: (type, data).
/// The events of resource `id` in workspace `ws`, as `events` lists them (after what it has
/// queued: an emit only queues its event).
async fn events_of(
    events: &pandastack_control::Events,
    ws: &str,
    id: &str,
) -> Vec<(String, serde_json::Value)> {
    let filter = pandastack_store::EventFilter {
        resource_id: Some(id.to_owned()),
        ..Default::default()
    };
    events
        .list(ws, &filter, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.event_type, e.data))
        .collect()
}

/// Polls `check` every 50 ms until it returns `Some`, failing the test after `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `sandbox_exec` schedule `name` of template `base` running `command` at `cron`.
fn schedule(
    name: &str,
    cron: &str,
    command: &str,
    policy: pandastack_api_types::ConcurrencyPolicy,
) -> pandastack_api_types::CreateScheduleRequest {
    pandastack_api_types::CreateScheduleRequest {
        name: name.into(),
        cron: cron.into(),
        timezone: None,
        target: pandastack_api_types::ScheduleTarget::SandboxExec(
            pandastack_api_types::SandboxExecTarget {
                template: "base".into(),
                command: command.into(),
                env: Default::default(),
                timeout_seconds: 60,
            },
        ),
        payload: None,
        concurrency_policy: Some(policy),
        starting_deadline_seconds: None,
        retries: None,
        paused: None,
    }
}

/// A cron expression that is not due during a test (1 January, 00:00).
const NEVER: &str = "0 0 1 1 *";
