//! The PandaStack state store: workspaces, API keys, hosts, sandbox, snapshot and template-build
//! rows, idempotency records, durable jobs, events and webhook deliveries, web console sessions.
//!
//! Two backends behind one set of queries: SQLite (one file, WAL) is the embedded default;
//! PostgreSQL (`postgres://…`) is the store several hosts share. The migrations and every query
//! are written in SQL both accept unchanged (`$n` placeholders, TEXT ids, BIGINT unix-ms
//! timestamps, JSON kept as TEXT, partial indexes, no engine-specific functions); where the
//! engines must differ (row locks) the query says so next to the [`Backend`] it runs on.
//!
//! Every query that serves a user request is scoped by workspace id: a workspace never sees
//! another's rows. Rows of things that live on a host (sandboxes, snapshots, template builds)
//! carry the id of that host, and every query a host runs about "its" things is filtered by it.
//! Hosts that join through an agent hold leases and epochs; a write caused by an agent is
//! applied only while its `(host id, epoch)` is current (the `hosts` module). A create in a
//! cluster chooses its host in the transaction that writes its row (the `placement` module).
//! This crate stores rows; it does not start VMs or speak HTTP.

mod apps;
mod audit;
mod databases;
mod domains;
mod events;
mod hosts;
mod idempotency;
mod invocations;
mod jobs;
mod keys;
mod lock;
mod members;
mod placement;
mod quotas;
mod sandboxes;
mod schedules;
mod sessions;
mod snapshots;
mod templates;
mod usage;
mod use_counters;
mod volumes;
mod webhooks;

pub use apps::{AppRepo, AppRow, DeployRow};
pub use audit::{AuditFilter, AuditRepo, AuditRow};
pub use databases::{DatabaseRepo, DatabaseRow, DatabaseRowState};
pub use domains::{CertState, DomainRepo, DomainRow};
pub use events::{EventFilter, EventRepo, EventRow, NewEvent};
pub use hosts::{HostCapacity, HostRow, HostState, Hosts, Joining, Reaped, Renewal};
pub use idempotency::{Idempotency, IdempotencyRecord, Reservation};
pub use invocations::{InvocationRow, Invocations};
pub use jobs::{JobRow, JobState, Jobs, NewJob};
pub use keys::{Counts, KeyGrant, KeyRow, Keys, Workspace};
pub use lock::AdvisoryLock;
pub use members::{MemberError, MemberRepo, MemberRow};
pub use pandastack_api_types::{OnHostLoss, OnTimeout, SandboxState};
pub use placement::{Demand, PlaceReason, Placement};
pub use quotas::{Adding, Quotas, StorageQuotas, StorageUse};
pub use sandboxes::{DurableCopy, Filter, SandboxRepo, SandboxRow};
pub use schedules::{Fired, Firing, RunRow, ScheduleRepo, ScheduleRow};
pub use sessions::{SessionRepo, SessionRow};
pub use snapshots::{SnapshotRepo, SnapshotRow};
pub use templates::{BuildStatus, SourceKind, TemplateBuildRow, TemplateBuilds};
pub use usage::{Advanced, Kept, Metered, UsageKey, UsageRepo, VmCursor};
pub use volumes::{
    Claimed, MountClaim, MountRow, VolumeBackupRow, VolumeRepo, VolumeRow, VolumeSnapshotRow,
    VolumeState,
};
pub use webhooks::{Attempt, DeliveryRow, WebhookRepo, WebhookRow};

use std::path::Path;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::AnyPool;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    Conflict,
    /// A workspace limit would be exceeded by the change (nothing was written).
    #[error("limit of {limit} reached")]
    LimitReached { limit: i64 },
    /// The workspace keeps as many of `what` as its quota allows (nothing was written).
    #[error("workspace limit of {limit} {what} reached")]
    CountLimit { what: &'static str, limit: i64 },
    /// The workspace's snapshots, hibernated sandboxes and template builds take its whole
    /// storage quota (nothing was written).
    #[error("workspace storage quota of {limit_gb} GiB reached ({used_bytes} bytes used by snapshots, hibernated sandboxes and template builds)")]
    StorageQuota { limit_gb: i64, used_bytes: i64 },
    /// The workspace made as many creates this minute as its rate allows (nothing was counted).
    #[error("workspace create rate of {limit} per minute reached")]
    RateLimited { limit: i64, retry_after_secs: u64 },
    #[error("database")]
    Db(#[source] sqlx::Error),
    #[error("database migration")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored json")]
    Json(#[from] serde_json::Error),
    /// A stored value this version cannot read (e.g. an unknown state name).
    #[error("stored {column} has an unknown value {value:?}")]
    Corrupt { column: &'static str, value: String },
    /// A create named a volume the workspace does not have (or one still being made).
    #[error("volume {0} not found")]
    MissingVolume(String),
    /// A create asked for a volume whose file is on another host.
    #[error("volume {volume} is on host {host}")]
    VolumeElsewhere { volume: String, host: String },
    /// A read-write mount of a volume another sandbox has mounted read-write.
    #[error("volume {volume} is mounted read-write by sandbox {sandbox}")]
    VolumeBusy { volume: String, sandbox: String },
    /// A write caused by host `host`'s agent named an epoch that is not the host's current one,
    /// or the host is dead (nothing was written): the agent must join again.
    #[error("host {host} epoch {epoch} is fenced")]
    Fenced { host: String, epoch: i64 },
    /// Drain or undrain of a dead host: only its agent joining again brings it back.
    #[error("host {host} is dead")]
    HostDead { host: String },
    /// Forget of a host that is not dead.
    #[error("host {host} is {state}, not dead")]
    HostNotDead { host: String, state: HostState },
    /// No host can take a create (nothing was written); `why` counts the hosts by the reason
    /// each could not ("3 hosts: 1 draining, 2 with less than 2048 MiB free").
    #[error("no host can take it: {why}")]
    NoCapacity { why: String },
    /// Forget of a dead host that still has rows (`what`: the table) on it.
    #[error("host {host} still has {count} {what}")]
    HostInUse {
        host: String,
        what: &'static str,
        count: i64,
    },
    #[error("unsupported state store {0:?} (want a file path, sqlite://… or postgres://…)")]
    Url(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict,
            _ => StoreError::Db(e),
        }
    }
}

/// Which database engine a [`Store`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A connected, migrated store.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Opens (creating if missing) the SQLite database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        Self::connect(&sqlite_url(path)).await
    }

    /// Connects to `url` — `sqlite://PATH[?mode=rwc]`, `postgres://…` (or `postgresql://…`),
    /// or a bare file path (SQLite, created if missing) — and applies migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let (url, backend) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (url.to_owned(), Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            (url.to_owned(), Backend::Sqlite)
        } else if !url.contains("://") && !url.is_empty() {
            (sqlite_url(Path::new(url)), Backend::Sqlite)
        } else {
            return Err(StoreError::Url(url.to_owned()));
        };
        let opts: AnyConnectOptions = url.parse()?;
        let pool = AnyPoolOptions::new()
            .max_connections(match backend {
                Backend::Sqlite => 8,
                Backend::Postgres => 16,
            })
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await?;
        if backend == Backend::Sqlite {
            // Persistent in the file: readers never wait for the writer. Foreign keys and a
            // 5 s busy timeout are sqlx's per-connection defaults for SQLite.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        sqlx::migrate!("./migrations").run(&pool).await?;
        use_counters::install(&pool, backend).await?;
        Ok(Self { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// One round trip to the database: `Ok` if it answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub fn keys(&self) -> Keys<'_> {
        Keys { pool: &self.pool }
    }

    pub fn quotas(&self) -> Quotas<'_> {
        Quotas { pool: &self.pool }
    }

    pub fn apps(&self) -> AppRepo<'_> {
        AppRepo { pool: &self.pool }
    }

    pub fn domains(&self) -> DomainRepo<'_> {
        DomainRepo { pool: &self.pool }
    }

    pub fn databases(&self) -> DatabaseRepo<'_> {
        DatabaseRepo { pool: &self.pool }
    }

    pub fn members(&self) -> MemberRepo<'_> {
        MemberRepo { pool: &self.pool }
    }

    pub fn audit(&self) -> AuditRepo<'_> {
        AuditRepo { pool: &self.pool }
    }

    /// Web console sessions.
    pub fn sessions(&self) -> SessionRepo<'_> {
        SessionRepo { pool: &self.pool }
    }

    pub fn events(&self) -> EventRepo<'_> {
        EventRepo { pool: &self.pool }
    }

    pub fn webhooks(&self) -> WebhookRepo<'_> {
        WebhookRepo {
            pool: &self.pool,
            backend: self.backend,
        }
    }

    pub fn hosts(&self) -> Hosts<'_> {
        Hosts { pool: &self.pool }
    }

    pub fn sandboxes(&self) -> SandboxRepo<'_> {
        SandboxRepo {
            pool: &self.pool,
            backend: self.backend,
        }
    }

    pub fn invocations(&self) -> Invocations<'_> {
        Invocations { pool: &self.pool }
    }

    pub fn schedules(&self) -> ScheduleRepo<'_> {
        ScheduleRepo { pool: &self.pool }
    }

    pub fn snapshots(&self) -> SnapshotRepo<'_> {
        SnapshotRepo { pool: &self.pool }
    }

    pub fn template_builds(&self) -> TemplateBuilds<'_> {
        TemplateBuilds { pool: &self.pool }
    }

    pub fn volumes(&self) -> VolumeRepo<'_> {
        VolumeRepo {
            pool: &self.pool,
            backend: self.backend,
        }
    }

    pub fn usage(&self) -> UsageRepo<'_> {
        UsageRepo { pool: &self.pool }
    }

    pub fn idempotency(&self) -> Idempotency<'_> {
        Idempotency { pool: &self.pool }
    }

    pub fn jobs(&self) -> Jobs<'_> {
        Jobs {
            pool: &self.pool,
            backend: self.backend,
        }
    }
}

/// `sqlite://PATH?mode=rwc`, with the characters the URL parser would take for syntax escaped
/// (sqlx percent-decodes the path).
fn sqlite_url(path: &Path) -> String {
    let p = path
        .to_string_lossy()
        .replace('%', "%25")
        .replace('?', "%3F")
        .replace('#', "%23");
    format!("sqlite://{p}?mode=rwc")
}

/// A random id with a prefix: `sb-` + 16 hex digits and so on.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// A fresh secret (128 random bits, hex): a sandbox's access token.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `Ok` if the statement changed a row, [`StoreError::NotFound`] if it matched none.
pub(crate) fn found(done: sqlx::any::AnyQueryResult) -> Result<(), StoreError> {
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

/// Reads a typed column, naming it in the error instead of panicking.
pub(crate) fn col<'r, T>(r: &'r sqlx::any::AnyRow, name: &str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    use sqlx::Row;
    r.try_get(name).map_err(StoreError::from)
}

/// Reads a TEXT column holding a name of a typed value (a state, a mode).
pub(crate) fn parsed<T>(
    r: &sqlx::any::AnyRow,
    name: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let s: String = col(r, name)?;
    parse(&s).ok_or(StoreError::Corrupt {
        column: name,
        value: s,
    })
}
