//! The HTTP query broker's half in the control plane: a PostgreSQL session with a database,
//! over the host boundary's port stream to the cluster inside its VM, logged in with the
//! credentials given (the cluster checks them).

use std::time::Duration;

use pandastack_host::PortIo;
use pandastack_pgwire::client::{Client, ClientError, ConnectOptions, Limits, QueryResult};
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

impl Databases {
    /// A session with database `row`'s cluster (its VM woken or started first), logged in as
    /// `creds`, with `limits.timeout` as the statement timeout.
    pub async fn session(
        &self,
        row: &DatabaseRow,
        creds: &Credentials,
        limits: &QueryLimits,
    ) -> Result<Session, DatabaseError> {
        let sandbox = self.running(row).await?;
        self.touch(&sandbox.id).await;
        let stream = self.host().connect_port(&sandbox.id, DB_PORT).await?;
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
        match tokio::time::timeout(limits.timeout, Client::connect(stream, &opts)).await {
            Ok(c) => Ok(c.map_err(QueryError::from)?),
            Err(_) => Err(QueryError::Timeout(limits.timeout).into()),
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
            Ok(r) => r.map_err(QueryError::from)?,
            Err(_) => return Err(QueryError::Timeout(bound).into()),
        };
        let _ = s.close().await;
        Ok(out)
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
            Ok(r) => r.map_err(QueryError::from)?,
            Err(_) => return Err(QueryError::Timeout(bound).into()),
        };
        let _ = s.close().await;
        Ok(out)
    }
}
