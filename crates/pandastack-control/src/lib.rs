//! The control plane: the work over the store and a [`pandastack_host::Host`] that is not HTTP.
//! [`ControlPlane`] is its front door: built from the store, a host, the object store and one
//! config; `recover()`, `start()` and `shutdown()`.
//! Handlers in `pandastack-api` parse, call and map. Here: the sandbox service ([`Sandboxes`]:
//! create with the row first and within the workspace limit, lifecycle, wake-for-work, delete,
//! one row update per state change), the snapshot service ([`Snapshots`]: snapshot, fork all or
//! nothing, delete), the reaper (TTL and idle timeouts, with guest CPU counted as activity),
//! start-up reconciliation and the code interpreter ([`CodeContexts`]: runs in per-context
//! Python kernels inside a sandbox, streamed or collected; contexts created and deleted).
//! The template service ([`Templates`]: resolve for creates, list, builds from a spec or an OCI
//! tarball queued as durable jobs and run one at a time by its worker, re-bake, delete).
//! Schedules ([`Schedules`]: cron expressions fired once per due time, runs as durable jobs).
//! Events and webhooks ([`Events`]: every lifecycle change written as an event row, streamed,
//! and delivered to webhook endpoints signed, retried, in order per resource).
//! Membership ([`LeaseReaper`]: marks dead the hosts whose leases lapsed, only after the store
//! has answered for a whole lease; not started by the single-node server).

mod activity;
pub mod apps;
pub mod certs;
pub mod chunks;
mod code;
mod databases;
pub mod events;
pub mod fleet;
mod in_flight;
mod jobs;
pub mod membership;
pub mod meter;
mod plane;
mod reaper;
mod reconcile;
pub mod rejoin;
mod sandboxes;
pub mod schedules;
mod snapshots;
mod templates;
mod volumes;

pub use activity::{busy, Activity, BUSY_SHARE};
pub use apps::{
    AppAddress, AppError, AppInfo, AppRoute, Apps, DeployCause, DeployError, DeployPhase,
    DeployTimings, DomainError, Domains, FunctionError, Functions, SharedError,
};
pub use certs::{AcmeConfig, CertConfig, Certificates};
pub use code::{CodeContextError, CodeContexts, CodeEvent};
pub use databases::{
    parse_time as parse_database_time, volume_name as database_volume_name, ArchiveSettings,
    BaseBackup, Credentials, DatabaseAddress, DatabaseError, DatabaseInfo, Databases, QueryError,
    QueryLimits, ARCHIVE_POLL, DATABASE_METADATA, DATABASE_TEMPLATE, DB_PORT, POOLER_PORT,
};
pub use events::{event_wire, Events, ResourceKind, WebhookError, WebhookSettings};
pub use fleet::{AgentDialer, Dial, Fleet};
pub use in_flight::{Busy, InFlight, Watched, TOUCH_EVERY};
pub use membership::{LeaseReaper, LeaseStore, StoreMembers};
pub use meter::{Meter, MeterReport, MeterSettings};
pub use plane::{ControlConfig, ControlPlane, RecoverError, CLUSTER_CONTROL_ID};
pub use reaper::Reaper;
pub use reconcile::{reconcile_rows, Reconciled};
pub use rejoin::{reconcile_host, JoinWatch, Rejoined};
pub use sandboxes::{
    expiry, ControlError, DiskMax, FileUrlMethod, FileUrlRefused, PlaceMode, Sandboxes,
    SignedFileUrl, Source, Verb, MAX_FILE_URL_SECONDS,
};
pub use schedules::{ScheduleError, ScheduleInfo, Schedules};
pub use snapshots::{Forked, Snapshots};
pub use templates::{
    drain_upload, BuildConfig, BuildLogRef, Built, Resolved, TemplateError, TemplateInfo, Templates,
};
pub use volumes::{BackupInfo, VolumeError, VolumeInfo, Volumes, BACKUP_JOB_KIND, GIB};

use pandastack_api_types::SandboxState;
use pandastack_host::VmState;

/// The row state of a VM state (the one place they are mapped).
pub fn row_state(v: VmState) -> SandboxState {
    match v {
        VmState::Running => SandboxState::Running,
        VmState::Paused => SandboxState::Paused,
        VmState::Hibernated => SandboxState::Hibernated,
        // Not stopped by anyone who asked: the sandbox failed (its guest powered off, or its
        // process was killed).
        VmState::Exited => SandboxState::Failed,
    }
}
