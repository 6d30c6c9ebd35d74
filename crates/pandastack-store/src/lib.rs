//! The PandaStack state store: workspaces, API keys, sandbox, snapshot and template-build rows,
//! idempotency records. SQLite (one file, WAL) is the embedded default. The migrations and every query are
//! written in SQL that PostgreSQL accepts unchanged (`$n` placeholders, TEXT ids, BIGINT unix-ms
//! timestamps, JSON kept as TEXT, no engine-specific functions) so a PostgreSQL backend is a
//! connection-type change, not a rewrite.
//!
//! Every query that serves a user request is scoped by workspace id: a workspace never sees
//! another's rows. This crate stores rows; it does not start VMs or speak HTTP.

mod idempotency;
mod keys;
mod sandboxes;
mod snapshots;
mod templates;

pub use idempotency::{Idempotency, IdempotencyRecord, Reservation};
pub use keys::{KeyRow, Keys, Workspace};
pub use sandboxes::{Filter, SandboxRow, Sandboxes};
pub use snapshots::{SnapshotRow, Snapshots};
pub use templates::{BuildStatus, TemplateBuildRow, TemplateBuilds};

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::SqlitePool;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    Conflict,
    #[error("database")]
    Db(#[source] sqlx::Error),
    #[error("database migration")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored json")]
    Json(#[from] serde_json::Error),
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

/// A connected, migrated store.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Opens (creating if missing) the SQLite database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self { pool })
    }

    pub fn keys(&self) -> Keys<'_> {
        Keys { pool: &self.pool }
    }

    pub fn sandboxes(&self) -> Sandboxes<'_> {
        Sandboxes { pool: &self.pool }
    }

    pub fn snapshots(&self) -> Snapshots<'_> {
        Snapshots { pool: &self.pool }
    }

    pub fn template_builds(&self) -> TemplateBuilds<'_> {
        TemplateBuilds { pool: &self.pool }
    }

    pub fn idempotency(&self) -> Idempotency<'_> {
        Idempotency { pool: &self.pool }
    }
}

/// A random id with a prefix: `sb-` + 16 hex digits and so on.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
