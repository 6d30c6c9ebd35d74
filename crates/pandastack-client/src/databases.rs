//! Managed PostgreSQL databases: create (with an `Idempotency-Key`), list (with cursors), get,
//! delete, branch (as of now or a past time), restore in place to a past time, rotate the
//! owner's password, run a query over HTTP, take a base backup to the object store (and wait
//! for the upload), and the extensions the `postgres` template offers.

use std::time::Duration;

use pandastack_api_types::{
    BackupState, CreateBranchRequest, CreateDatabaseRequest, Database, DatabaseExtensions,
    ErrorCode, List, QueryRequest, QueryResponse, RestoreDatabaseRequest, VolumeBackup,
};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::{ApiError, Client, Error};

/// How often [`Client::wait_database_backup`] asks about an upload under way.
const BACKUP_POLL: Duration = Duration::from_millis(500);

impl Client {
    /// `POST /v1/databases`, with an `Idempotency-Key`. Answers once the database is ready
    /// (the first create on a server builds and bakes the `postgres` template: minutes).
    pub async fn create_database(&self, req: &CreateDatabaseRequest) -> Result<Database, Error> {
        self.create("/v1/databases", req).await
    }

    /// One page of `GET /v1/databases`.
    pub async fn list_databases(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<Database>, Error> {
        self.page("/v1/databases", limit, cursor).await
    }

    /// Every database of the workspace, following `next_cursor` to the end.
    pub async fn list_all_databases(&self) -> Result<Vec<Database>, Error> {
        self.all(|cursor| async move { self.list_databases(None, cursor.as_deref()).await })
            .await
    }

    /// `GET /v1/databases/{id}` (id or name).
    pub async fn get_database(&self, id: &str) -> Result<Database, Error> {
        self.json(Call::new(Method::GET, database_path(id, "")))
            .await
    }

    /// `DELETE /v1/databases/{id}`: its VM and its data volume (backups stay).
    pub async fn delete_database(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, database_path(id, "")))
            .await
    }

    /// `POST /v1/databases/{id}/branches`, with an `Idempotency-Key`: a new database on a
    /// copy of this one's data as of now, or as of `from_time` (point-in-time, from the
    /// archive), answered once ready.
    pub async fn branch_database(
        &self,
        id: &str,
        req: &CreateBranchRequest,
    ) -> Result<Database, Error> {
        self.create(database_path(id, "/branches"), req).await
    }

    /// `POST /v1/databases/{id}/restore`, with an `Idempotency-Key`: the database's data as of
    /// `to_time`, in place (same id and connection strings, a new timeline; connections to the
    /// old data are closed), answered once ready. A time outside the restore window is
    /// [`Error::Api`] 422 `invalid_argument` whose message names the window.
    pub async fn restore_database(
        &self,
        id: &str,
        req: &RestoreDatabaseRequest,
    ) -> Result<Database, Error> {
        self.create(database_path(id, "/restore"), req).await
    }

    /// `POST /v1/databases/{id}/password`: a new owner password; the answer carries the new
    /// connection strings.
    pub async fn rotate_database_password(&self, id: &str) -> Result<Database, Error> {
        self.json(Call::new(Method::POST, database_path(id, "/password")))
            .await
    }

    /// `POST /v1/databases/{id}/query`: one statement as the owner role. A PostgreSQL error is
    /// [`Error::Api`] with code `query_failed` and the message `"<severity> <SQLSTATE>: …"`.
    pub async fn query_database(
        &self,
        id: &str,
        req: &QueryRequest,
    ) -> Result<QueryResponse, Error> {
        let call =
            Call::new(Method::POST, database_path(id, "/query")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `GET /v1/databases/extensions`.
    pub async fn database_extensions(&self) -> Result<DatabaseExtensions, Error> {
        self.json(Call::new(Method::GET, "/v1/databases/extensions"))
            .await
    }

    /// `POST /v1/databases/{id}/backups`: a base backup (where a point-in-time restore or
    /// branch starts); the upload runs on the server; the answer is the backup `uploading`
    /// (see [`Client::wait_database_backup`]).
    pub async fn create_database_backup(&self, id: &str) -> Result<VolumeBackup, Error> {
        self.json(Call::new(Method::POST, database_path(id, "/backups")))
            .await
    }

    /// `GET /v1/databases/{id}/backups`, oldest first.
    pub async fn list_database_backups(&self, id: &str) -> Result<Vec<VolumeBackup>, Error> {
        let page: List<VolumeBackup> = self
            .json(Call::new(Method::GET, database_path(id, "/backups")))
            .await?;
        Ok(page.data)
    }

    /// Polls a database's backup until it is no longer `uploading` and returns it (`done` or
    /// `failed`: the caller decides what a failure means), or [`Error::Timeout`] after
    /// `timeout`.
    pub async fn wait_database_backup(
        &self,
        id: &str,
        backup_id: &str,
        timeout: Duration,
    ) -> Result<VolumeBackup, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let b = self
                .list_database_backups(id)
                .await?
                .into_iter()
                .find(|b| b.id == backup_id)
                .ok_or_else(|| {
                    Error::Api(ApiError {
                        status: 404,
                        code: Some(ErrorCode::NotFound),
                        code_text: "not_found".into(),
                        message: format!("database {id} has no backup {backup_id}"),
                        request_id: None,
                        retry_after: None,
                    })
                })?;
            if b.state != BackupState::Uploading {
                return Ok(b);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "backup {backup_id} of database {id} still uploading after {}s",
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(BACKUP_POLL).await;
        }
    }
}

fn database_path(id: &str, rest: &str) -> String {
    format!("/v1/databases/{}{rest}", seg(id))
}
