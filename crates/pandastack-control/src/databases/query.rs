//! The HTTP query broker's half in the control plane: a PostgreSQL session with a database,
//! over the host boundary's port stream to the cluster inside its VM, logged in with the
//! credentials given (the cluster checks them).
//!
//! Logging in costs a SCRAM exchange (4096 PBKDF2 rounds on each side) and a new stream through
//! the guest agent, far more than a small query; so sessions that ended cleanly (idle, not in a
//! transaction) are kept per database, credentials and timeout ([`SessionPool`]) for
//! [`IDLE_FOR`] and reused after a `select 1` proves them alive — a session whose VM hibernated,
//! died or was replaced fails that probe and is dropped, and a fresh one is made.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use pandastack_host::PortIo;
use pandastack_pgwire::client::{
    Client, ClientError, ConnectOptions, Limits, QueryResult, TransactionStatus,
};
use pandastack_store::DatabaseRow;

use super::{DatabaseError, Databases};

/// PostgreSQL's port inside a database VM.
pub const DB_PORT: u16 = 5432;
/// PgBouncer's port inside a database VM.
pub const POOLER_PORT: u16 = 6432;

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the database did not answer within {0:?}")]
    Timeout(Duration),
}

/// Longest a broker session's login may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds of one HTTP query.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// The statement timeout (and the bound on connecting and logging in).
    pub timeout: Duration,
    pub max_rows: usize,
    pub max_bytes: usize,
}

impl QueryLimits {
    fn limits(&self) -> Limits {
        Limits {
            max_rows: self.max_rows,
            max_bytes: self.max_bytes,
        }
    }
}

/// Who logs in, to which database.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    pub database: String,
}

impl Credentials {
    /// The owner role's, from the row.
    pub fn owner(row: &DatabaseRow) -> Self {
        Self {
            user: row.role_name.clone(),
            password: row.password.clone(),
            database: row.role_name.clone(),
        }
    }
}

/// A logged-in session with a database's cluster.
pub type Session = Client<Box<dyn PortIo>>;

/// How long an idle session is kept for reuse.
const IDLE_FOR: Duration = Duration::from_secs(60);
/// Idle sessions kept per key.
const IDLE_PER_KEY: usize = 4;

/// Which sessions can serve a request: the same database, role, password, database name and
/// statement timeout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    database_id: String,
    user: String,
    database: String,
    /// SHA-256 of the password (the password itself is not kept here).
    password: [u8; 32],
    timeout_ms: u128,
}

impl SessionKey {
    fn new(row: &DatabaseRow, creds: &Credentials, limits: &QueryLimits) -> Self {
        Self {
            database_id: row.id.clone(),
            user: creds.user.clone(),
            database: creds.database.clone(),
            password: Sha256::digest(creds.password.as_bytes()).into(),
            timeout_ms: limits.timeout.as_millis(),
        }
    }
}

/// Idle broker sessions, by key.
#[derive(Default)]
pub(super) struct SessionPool {
    idle: Mutex<HashMap<SessionKey, Vec<(Session, Instant)>>>,
}

impl SessionPool {
    fn take(&self, key: &SessionKey) -> Option<Session> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((s, since)) = list.pop() {
            if since.elapsed() < IDLE_FOR && s.is_usable() {
                return Some(s);
            }
        }
        None
    }

    fn put(&self, key: SessionKey, s: Session) {
        if !s.is_usable() || s.transaction_status() != TransactionStatus::Idle {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, l| {
            l.retain(|(_, since)| since.elapsed() < IDLE_FOR);
            !l.is_empty()
        });
        let list = idle.entry(key).or_default();
        if list.len() < IDLE_PER_KEY {
            list.push((s, Instant::now()));
        }
    }

    /// Drops every idle session of database `id` (its password changed, or it is gone).
    pub(super) fn forget(&self, id: &str) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|k, _| k.database_id != id);
    }
}

impl Databases {
    /// A session with database `row`'s cluster (its VM woken or started first), logged in as
    /// `creds`, with `limits.timeout` as the statement timeout.
    async fn session(
        &self,
        row: &DatabaseRow,
        creds: &Credentials,
        limits: &QueryLimits,
    ) -> Result<Session, DatabaseError> {
        // `running` records the use (a wake or a new VM counts as activity).
        let sandbox = self.running(row).await?;
        let key = SessionKey::new(row, creds, limits);
        while let Some(mut s) = self.sessions.take(&key) {
            let probe = Limits {
                max_rows: 1,
                max_bytes: 64,
            };
            let alive =
                tokio::time::timeout(Duration::from_secs(2), s.query("select 1", &[], &probe))
                    .await;
            if matches!(alive, Ok(Ok(_))) {
                return Ok(s);
            }
        }
        let stream = self.host.connect_port(&sandbox.id, DB_PORT).await?;
        let opts = ConnectOptions {
            user: creds.user.clone(),
            password: Some(creds.password.clone()),
            database: Some(creds.database.clone()),
            options: Some(format!(
                "-c statement_timeout={}",
                limits.timeout.as_millis().max(1)
            )),
            application_name: Some("pandastack-http".into()),
        };
        // The statement timeout bounds the statement, not the login: a short one (a few
        // hundred ms) must not fail a SCRAM handshake on a busy or just-woken VM.
        let bound = limits.timeout.max(CONNECT_TIMEOUT);
        match tokio::time::timeout(bound, Client::connect(stream, &opts)).await {
            Ok(c) => Ok(c.map_err(QueryError::from)?),
            Err(_) => Err(QueryError::Timeout(bound).into()),
        }
    }

    /// Runs one statement with text parameters.
    pub async fn query(
        &self,
        row: &DatabaseRow,
        creds: &Credentials,
        sql: &str,
        params: &[Option<String>],
        limits: &QueryLimits,
    ) -> Result<QueryResult, DatabaseError> {
        let mut s = self.session(row, creds, limits).await?;
        let bound = limits.timeout + Duration::from_secs(5);
        let out = match tokio::time::timeout(bound, s.query(sql, params, &limits.limits())).await {
            Ok(r) => r,
            Err(_) => return Err(QueryError::Timeout(bound).into()),
        };
        self.sessions.put(SessionKey::new(row, creds, limits), s);
        Ok(out.map_err(QueryError::from)?)
    }

    /// Runs statements as one transaction (rolled back if any fails).
    pub async fn transaction(
        &self,
        row: &DatabaseRow,
        creds: &Credentials,
        queries: &[(String, Vec<Option<String>>)],
        isolation: Option<&str>,
        read_only: bool,
        limits: &QueryLimits,
    ) -> Result<Vec<QueryResult>, DatabaseError> {
        let mut s = self.session(row, creds, limits).await?;
        let bound = limits.timeout * (queries.len().max(1) as u32) + Duration::from_secs(5);
        let out = match tokio::time::timeout(
            bound,
            s.transaction(queries, isolation, read_only, &limits.limits()),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => return Err(QueryError::Timeout(bound).into()),
        };
        self.sessions.put(SessionKey::new(row, creds, limits), s);
        Ok(out.map_err(QueryError::from)?)
    }
}
