//! The managed-database service: a PostgreSQL cluster per database, its data on a durable
//! volume of its own, served by a sandbox of the `postgres` template that mounts it.
//!
//! The volume is the database; the VM is replaceable. A database whose VM was deleted or died
//! gets a new one on the same volume at its next use ([`Databases::running`]): PostgreSQL
//! recovers from its WAL like after a power cut, so every acknowledged commit (synchronous
//! commit, `fsync` on) is there. An idle database hibernates (its sandbox's idle timeout, with
//! connections counted as activity by the connection front) and wakes on the next use.
//!
//! Order of writes, so that a crash at any point leaves nothing a restart cannot settle: the
//! database row is written `creating` first, then its volume (named after the row), then its
//! VM (a sandbox row naming it in `metadata`), then the cluster is brought up and the row set
//! `ready`. Start-up ([`Databases::reconcile`]) removes what a `creating` row left. A delete
//! removes the VM, the row and then the volume.

mod archive;
mod drain;
mod failover;
mod pitr;
pub(crate) use pitr::rfc3339;
mod query;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_api_types::{
    CreateBranchRequest, CreateDatabaseRequest, CreateVolumeRequest, OnTimeout, SandboxState,
    SandboxVolume, DEFAULT_DATABASE_GB, DEFAULT_DATABASE_IDLE_SECONDS, DEFAULT_DATABASE_MEMORY_MB,
};
use pandastack_host::{ExecSpec, Host, HostError};
use pandastack_store::{
    new_id, now_ms, DatabaseRow, DatabaseRowState, MountClaim, SandboxRow, Store, StoreError,
};

use crate::{ControlError, Sandboxes, VolumeError, Volumes};

pub use archive::{ArchiveSettings, BaseBackup, POLL as ARCHIVE_POLL};
pub use pitr::parse_time;
pub use query::{Credentials, QueryError, QueryLimits, DB_PORT, POOLER_PORT};

/// The template every database VM is made from.
pub const DATABASE_TEMPLATE: &str = "postgres";
/// Sandbox metadata key naming the database a VM serves.
pub const DATABASE_METADATA: &str = "pandastack.database";
/// Where a database VM mounts its data volume.
pub(crate) const DATA_PATH: &str = "/var/lib/pandastack-db";
/// The script that brings the cluster up (and sets the owner's password).
const BOOTSTRAP: &str = include_str!("bootstrap.sh");
/// Longest the bootstrap may take (a first `initdb` under TCG takes seconds, a recovery after a
/// crash can take longer).
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(300);
/// What [`Databases::log_failed_start`] runs in the VM: every process with its state and wait
/// channel (from /proc: the image need not have `ps`), then the ends of the cluster's logs.
const DIAGNOSE: &str = r#"for p in /proc/[0-9]*; do
  [ -r "$p/stat" ] || continue
  printf '%s %s %s %s\n' "${p#/proc/}" "$(cut -d' ' -f3 "$p/stat" 2>/dev/null)" \
    "$(cat "$p/wchan" 2>/dev/null)" "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-160)"
done
echo "--- $PS_VOLUME/log/postgresql.log"
tail -n 30 "$PS_VOLUME/log/postgresql.log" 2>&1
echo "--- $PS_VOLUME/initdb.log"
tail -n 10 "$PS_VOLUME/initdb.log" 2>&1
"#;
/// Bound on that probe.
const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a point-in-time recovery may take.
const RECOVER_TIMEOUT: Duration = Duration::from_secs(1800);

/// Why a database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("database {0} not found")]
    NotFound(String),
    #[error("database {0} exists")]
    Exists(String),
    #[error("database {0} is being created")]
    NotReady(String),
    /// Credentials that do not log in to a database over HTTP, in PostgreSQL's words: also
    /// what an id of no (ready) database gets, so the answer does not say which ids exist.
    #[error("password authentication failed for user \"{0}\"")]
    LoginFailed(String),
    /// The cluster did not come up in its VM (the message is the script's output).
    #[error("database {database}: PostgreSQL did not start: {detail}")]
    Bootstrap {
        database: String,
        detail: String,
        /// The script ran out of time (rather than failing).
        timed_out: bool,
    },
    /// WAL archiving or a base backup failed (object store, guest).
    #[error("archive: {0}")]
    Archive(String),
    /// A time that is not RFC 3339.
    #[error("invalid {field}: {reason}")]
    BadTime { field: String, reason: String },
    /// A point-in-time restore to a time no base backup and archive reach.
    #[error("{time} is outside the restore window of database {database}: {window}")]
    OutsideWindow {
        database: String,
        time: String,
        window: String,
    },
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// How users reach databases (what the connection strings say).
#[derive(Debug, Clone)]
pub struct DatabaseAddress {
    /// `<id>.<domain>` is a database, `<id>-pooler.<domain>` its PgBouncer.
    pub domain: String,
    /// Port of the connection front in the strings.
    pub port: u16,
    /// The API's base URL (`http_url` is `<base>/v1/databases/<id>`).
    pub api_url: String,
}

impl DatabaseAddress {
    fn uri(&self, row: &DatabaseRow, host: &str) -> String {
        format!(
            "postgres://{}:{}@{host}.{}:{}/{}?sslmode=require",
            row.role_name, row.password, self.domain, self.port, row.role_name
        )
    }

    /// The direct connection string.
    pub fn connection_uri(&self, row: &DatabaseRow) -> String {
        self.uri(row, &row.id)
    }

    /// The connection string through PgBouncer.
    pub fn pooled_uri(&self, row: &DatabaseRow) -> String {
        self.uri(row, &format!("{}-pooler", row.id))
    }

    pub fn http_url(&self, row: &DatabaseRow) -> String {
        format!(
            "{}/v1/databases/{}",
            self.api_url.trim_end_matches('/'),
            row.id
        )
    }
}

/// A database and the sandbox serving it now (if any).
#[derive(Debug, Clone)]
pub struct DatabaseInfo {
    pub row: DatabaseRow,
    pub sandbox: Option<SandboxRow>,
}

/// Databases of one host.
#[derive(Clone)]
pub struct Databases {
    store: Store,
    host: Arc<dyn Host>,
    sandboxes: Sandboxes,
    volumes: Volumes,
    host_id: String,
    pub address: DatabaseAddress,
    /// Idle sessions of the HTTP query broker.
    sessions: Arc<query::SessionPool>,
    /// One start (wake or new VM) at a time per database.
    starting: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    archive: ArchiveSettings,
    /// Held while an outbox is being moved to the object store.
    archiving: Arc<tokio::sync::Mutex<()>>,
    /// The last base backup per database that its schedule counts from, once looked up.
    bases: Arc<Mutex<HashMap<String, archive::LastBase>>>,
}

/// How a database VM brings its cluster up.
pub(crate) enum Boot {
    /// Start (a new cluster is made on an empty volume).
    Start,
    /// Start a branch's copy of its parent: the parent's unarchived WAL is not the branch's.
    Branch,
    /// Point-in-time recovery from a base backup and the archive.
    Recover(Box<pitr::Recovery>),
}

/// A fresh password: 24 of `[A-Za-z0-9]` (safe in a URI unescaped).
fn new_password() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// The template of a database VM with `memory_mb` of memory: `postgres`, or `postgres-m<MiB>`
/// (the same image baked with that memory; the host bakes it on first use).
pub fn database_template(memory_mb: i64) -> String {
    if memory_mb == i64::from(DEFAULT_DATABASE_MEMORY_MB) {
        DATABASE_TEMPLATE.to_owned()
    } else {
        format!("{DATABASE_TEMPLATE}-m{memory_mb}")
    }
}

/// The volume that holds database `id`'s data.
pub fn volume_name(id: &str) -> String {
    format!("pgdata-{id}")
}

impl Databases {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        sandboxes: Sandboxes,
        volumes: Volumes,
        host_id: String,
        address: DatabaseAddress,
    ) -> Self {
        Self {
            store,
            host,
            sandboxes,
            volumes,
            host_id,
            address,
            sessions: Arc::default(),
            starting: Arc::default(),
            archive: ArchiveSettings::default(),
            archiving: Arc::default(),
            bases: Arc::default(),
        }
    }

    /// When base backups are taken and how long the archive is kept.
    pub fn with_archive(mut self, settings: ArchiveSettings) -> Self {
        self.archive = settings;
        self
    }

    /// A workspace's ready database by id or name.
    pub async fn row(&self, ws: &str, id: &str) -> Result<DatabaseRow, DatabaseError> {
        match self.store.databases().get(ws, id).await {
            Ok(r) if r.state == DatabaseRowState::Ready => Ok(r),
            Ok(_) => Err(DatabaseError::NotReady(id.into())),
            Err(StoreError::NotFound) => Err(DatabaseError::NotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Any workspace's ready database by id (the connection front knows no workspace).
    pub async fn by_id(&self, id: &str) -> Result<DatabaseRow, DatabaseError> {
        match self.store.databases().by_id(id).await {
            Ok(r) if r.state == DatabaseRowState::Ready => Ok(r),
            Ok(_) => Err(DatabaseError::NotReady(id.into())),
            Err(StoreError::NotFound) => Err(DatabaseError::NotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// The database `creds` may try to log in to over HTTP (the Neon-compatible `/sql`, which
    /// takes no API key): any workspace's ready database `id`. An id of no ready database
    /// fails as a wrong password does ([`DatabaseError::LoginFailed`]), so the answer is no
    /// oracle of which ids exist; the owner role's password is checked here, before the VM is
    /// woken for a caller that cannot log in. Other roles are the cluster's to check.
    pub async fn login(&self, id: &str, creds: &Credentials) -> Result<DatabaseRow, DatabaseError> {
        let failed = || DatabaseError::LoginFailed(creds.user.clone());
        let row = match self.by_id(id).await {
            Ok(r) => r,
            Err(DatabaseError::NotFound(_) | DatabaseError::NotReady(_)) => return Err(failed()),
            Err(e) => return Err(e),
        };
        // Compared as digests: how long the comparison takes tells nothing about the password.
        let digest = |p: &str| <sha2::Sha256 as sha2::Digest>::digest(p.as_bytes());
        if creds.user == row.role_name && digest(&creds.password) != digest(&row.password) {
            return Err(failed());
        }
        Ok(row)
    }

    pub async fn info(&self, row: DatabaseRow) -> Result<DatabaseInfo, DatabaseError> {
        let sandbox = match &row.sandbox_id {
            Some(id) => match self.store.sandboxes().by_id(id).await {
                Ok(s) => Some(s),
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        Ok(DatabaseInfo { row, sandbox })
    }

    pub async fn get(&self, ws: &str, id: &str) -> Result<DatabaseInfo, DatabaseError> {
        let row = self.row(ws, id).await?;
        self.info(row).await
    }

    /// A page of a workspace's databases by name (one more than `limit` when there are more).
    pub async fn list(
        &self,
        ws: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<DatabaseInfo>, DatabaseError> {
        let rows = self.store.databases().list(ws, after, limit).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(self.info(r).await?);
        }
        Ok(out)
    }

    /// Creates a database: its row, an empty volume, a VM with the volume mounted, a new
    /// cluster with the owner role and database. Anything made is removed if a step fails.
    pub async fn create(
        &self,
        ws: &str,
        req: &CreateDatabaseRequest,
    ) -> Result<DatabaseInfo, DatabaseError> {
        let row = DatabaseRow {
            id: new_id("db-"),
            workspace_id: ws.to_owned(),
            name: req.name.clone(),
            version: i64::from(req.version.unwrap_or(17)),
            host_id: self.host_id.clone(),
            state: DatabaseRowState::Creating,
            volume_id: String::new(),
            sandbox_id: None,
            role_name: req.name.clone(),
            password: new_password(),
            size_gb: i64::from(req.size_gb.unwrap_or(DEFAULT_DATABASE_GB)),
            memory_mb: i64::from(req.memory_mb.unwrap_or(DEFAULT_DATABASE_MEMORY_MB)),
            idle_seconds: req.idle_seconds.unwrap_or(DEFAULT_DATABASE_IDLE_SECONDS) as i64,
            parent_id: None,
            created_at: now_ms(),
        };
        let volume = CreateVolumeRequest {
            name: volume_name(&row.id),
            size_gb: Some(row.size_gb as u32),
            ..Default::default()
        };
        self.make(row, volume, Boot::Start).await
    }

    /// A branch of database `id` as of now (or of `from_time`, from the archive: see
    /// [`pitr`]): a new database on a copy-on-write copy of its
    /// volume (taken with the parent's file system frozen, so the copy is what a power cut at
    /// that instant would leave; PostgreSQL recovers it), with the same owner role and its own
    /// password.
    pub async fn branch(
        &self,
        ws: &str,
        id: &str,
        req: &CreateBranchRequest,
    ) -> Result<DatabaseInfo, DatabaseError> {
        let parent = self.row(ws, id).await?;
        if let Some(t) = &req.from_time {
            let from_ms = pitr::parse_time("from_time", t)?;
            return self.branch_at(ws, parent, from_ms, req).await;
        }
        let pvol = volume_name(&parent.id);
        let snap = self.volumes.snapshot(ws, &pvol).await?;
        let row = self.branch_row(ws, &parent, req);
        let volume = CreateVolumeRequest {
            name: volume_name(&row.id),
            from_snapshot: Some(snap.id.clone()),
            ..Default::default()
        };
        let made = self.make(row, volume, Boot::Branch).await;
        if let Err(e) = self.volumes.delete_snapshot(ws, &pvol, &snap.id).await {
            tracing::warn!(snapshot = %snap.id, error = &e as &dyn std::error::Error, "could not remove a branch's volume snapshot");
        }
        made
    }

    /// The row of a new branch of `parent` (`creating`): the parent's version, owner role and
    /// sizes, its own id, name (default `<parent>_<6 hex>`) and password.
    fn branch_row(&self, ws: &str, parent: &DatabaseRow, req: &CreateBranchRequest) -> DatabaseRow {
        let branch_id = new_id("db-");
        let name = req
            .name
            .clone()
            .unwrap_or_else(|| format!("{}_{}", parent.name, &branch_id[branch_id.len() - 6..]));
        DatabaseRow {
            id: branch_id,
            workspace_id: ws.to_owned(),
            name,
            version: parent.version,
            host_id: self.host_id.clone(),
            state: DatabaseRowState::Creating,
            volume_id: String::new(),
            sandbox_id: None,
            role_name: parent.role_name.clone(),
            password: new_password(),
            size_gb: parent.size_gb,
            memory_mb: parent.memory_mb,
            idle_seconds: req
                .idle_seconds
                .map(|s| s as i64)
                .unwrap_or(parent.idle_seconds),
            parent_id: Some(parent.id.clone()),
            created_at: now_ms(),
        }
    }

    /// Writes `row` (`creating`), makes its volume and VM, brings the cluster up, sets the
    /// row `ready`; undoes everything on failure.
    async fn make(
        &self,
        mut row: DatabaseRow,
        volume: CreateVolumeRequest,
        boot: Boot,
    ) -> Result<DatabaseInfo, DatabaseError> {
        match self.store.databases().insert(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(DatabaseError::Exists(row.name)),
            Err(e) => return Err(e.into()),
        }
        let made = async {
            let template = database_template(row.memory_mb);
            let mounter = crate::volumes::Mounter {
                memory_mib: row.memory_mb,
                template: Some(&template),
            };
            let v = self
                .volumes
                .create_for(&row.workspace_id, &volume, &mounter)
                .await?;
            row.volume_id = v.row.id.clone();
            self.store
                .databases()
                .set_volume(&row.id, &row.volume_id)
                .await?;
            let sandbox = self.start_vm(&row, &volume.name, &boot).await?;
            self.store.databases().set_ready(&row.id).await?;
            row.state = DatabaseRowState::Ready;
            let data = serde_json::json!({"name": row.name, "parent_id": row.parent_id});
            self.sandboxes
                .events()
                .emit(
                    &row.workspace_id,
                    "database.ready",
                    crate::ResourceKind::Database,
                    &row.id,
                    data,
                )
                .await;
            Ok::<_, DatabaseError>(sandbox)
        }
        .await;
        match made {
            Ok(sandbox) => Ok(DatabaseInfo {
                row,
                sandbox: Some(sandbox),
            }),
            Err(e) => {
                tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "database create failed: removing what it made");
                if let Err(c) = self.remove(&row).await {
                    tracing::warn!(database = %row.id, error = &c as &dyn std::error::Error, "could not remove a failed database");
                }
                Err(e)
            }
        }
    }

    /// A new VM for database `row` with volume `vol` mounted, the cluster up; the row names
    /// it unless it is a restore's (which names it when it swaps the volume in).
    ///
    /// A start whose bootstrap ran out of time is tried once more in a new VM (the failed one
    /// is gone by then, and the script is idempotent): one CI run saw a bootstrap hang for its
    /// whole 300 s with nothing on stderr, in a VM like any other. Recoveries are not retried.
    async fn start_vm(
        &self,
        row: &DatabaseRow,
        vol: &str,
        boot: &Boot,
    ) -> Result<SandboxRow, DatabaseError> {
        match self.start_vm_once(row, vol, boot).await {
            Err(DatabaseError::Bootstrap {
                timed_out: true, ..
            }) if !matches!(boot, Boot::Recover(_)) => {
                tracing::warn!(database = %row.id, "the bootstrap ran out of time: once more in a new VM");
                self.start_vm_once(row, vol, boot).await
            }
            r => r,
        }
    }

    async fn start_vm_once(
        &self,
        row: &DatabaseRow,
        vol: &str,
        boot: &Boot,
    ) -> Result<SandboxRow, DatabaseError> {
        let vol = vol.to_owned();
        let template = database_template(row.memory_mb);
        let mut sandbox = SandboxRow::service(
            &row.workspace_id,
            &self.host_id,
            &template,
            BTreeMap::from([(DATABASE_METADATA.to_owned(), row.id.clone())]),
        );
        sandbox.idle_timeout_seconds = (row.idle_seconds > 0).then_some(row.idle_seconds);
        sandbox.on_timeout = OnTimeout::Hibernate;
        sandbox.volumes = vec![SandboxVolume {
            name: vol.clone(),
            path: DATA_PATH.into(),
            read_only: false,
        }];
        let claims = [MountClaim {
            name: vol,
            path: DATA_PATH.into(),
            read_only: false,
        }];
        let sandbox = self
            .sandboxes
            .launch_with_volumes(sandbox, &template, &claims)
            .await?;
        let restoring = matches!(boot, Boot::Recover(r) if r.in_place);
        if !restoring {
            self.store
                .databases()
                .set_sandbox(&row.id, Some(&sandbox.id))
                .await?;
        }
        let booted = match boot {
            Boot::Start => self.script(row, &sandbox.id, "start", &[]).await.map(drop),
            Boot::Branch => self
                .script(row, &sandbox.id, "start", &[("PS_NEW_ARCHIVE", "1")])
                .await
                .map(drop),
            Boot::Recover(r) => self.recover(row, &sandbox.id, r).await,
        };
        if let Err(e) = booted {
            self.log_failed_start(row, &sandbox.id, &e).await;
            if !restoring {
                let _ = self.store.databases().set_sandbox(&row.id, None).await;
            }
            if let Err(d) = self.sandboxes.delete(&sandbox).await {
                tracing::warn!(sandbox = %sandbox.id, error = &d as &dyn std::error::Error, "could not remove a database VM that failed to start");
            }
            return Err(e);
        }
        Ok(sandbox)
    }

    /// Logs what the VM of a database that did not come up shows before it is removed: its
    /// processes (state and what each waits in), the end of PostgreSQL's and initdb's logs, and
    /// the end of the VM's console (kernel messages such as hung tasks). Bounded: a VM that no
    /// longer answers is reported as such.
    async fn log_failed_start(&self, row: &DatabaseRow, sandbox: &str, error: &DatabaseError) {
        let probe = ExecSpec {
            shell: DIAGNOSE.into(),
            env: HashMap::from([("PS_VOLUME".to_owned(), DATA_PATH.to_owned())]),
            timeout: DIAGNOSE_TIMEOUT,
            max_output_bytes: 16 * 1024,
            ..Default::default()
        };
        let inside = match tokio::time::timeout(
            DIAGNOSE_TIMEOUT + Duration::from_secs(5),
            self.host.exec(sandbox, probe),
        )
        .await
        {
            Ok(Ok(out)) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Ok(Err(e)) => format!("(the probe failed: {})", pandastack_host::error_chain(&e)),
            Err(_) => format!("(no answer within {DIAGNOSE_TIMEOUT:?})"),
        };
        let console = self.console_tail(sandbox, 4096).await;
        tracing::warn!(
            database = %row.id,
            sandbox,
            error = error as &dyn std::error::Error,
            "database VM did not come up; inside it:\n{inside}\nthe end of its console:\n{console}"
        );
    }

    /// The last `max` bytes of a sandbox's console (or why there are none).
    async fn console_tail(&self, sandbox: &str, max: usize) -> String {
        let mut tail = Vec::new();
        let mut from = None;
        // The console of a database VM is small (a restored VM logs little); bounded anyway.
        for _ in 0..64 {
            match self.host.console(sandbox, from, 64 * 1024).await {
                Ok(chunk) if chunk.data.is_empty() => break,
                Ok(chunk) => {
                    tail.extend_from_slice(&chunk.data);
                    let keep = tail.len().saturating_sub(max);
                    tail.drain(..keep);
                    from = chunk.next;
                    if from.is_none() {
                        break;
                    }
                }
                Err(e) => return format!("(console: {e})"),
            }
        }
        String::from_utf8_lossy(&tail).into_owned()
    }

    /// Runs the bootstrap script in the database's VM in `mode` (`start`, `password`,
    /// `recover`, `backup-start`, `backup-stop`, `flush-archive`) with extra environment;
    /// returns its standard output.
    pub(crate) async fn script(
        &self,
        row: &DatabaseRow,
        sandbox: &str,
        mode: &str,
        extra: &[(&str, &str)],
    ) -> Result<String, DatabaseError> {
        let mut env = HashMap::from([
            ("PS_VOLUME".to_owned(), DATA_PATH.to_owned()),
            ("PS_ROLE".to_owned(), row.role_name.clone()),
            ("PS_PASSWORD".to_owned(), row.password.clone()),
            ("PS_MODE".to_owned(), mode.to_owned()),
        ]);
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        // A recovery replays as much WAL as was archived (two attempts when the target is
        // after the last commit); everything else is a start or a quick statement.
        let timeout = if mode == "recover" {
            RECOVER_TIMEOUT
        } else {
            BOOTSTRAP_TIMEOUT
        };
        let started = std::time::Instant::now();
        let out = self
            .host
            .exec(
                sandbox,
                ExecSpec {
                    shell: BOOTSTRAP.into(),
                    env,
                    timeout,
                    max_output_bytes: 64 * 1024,
                    ..Default::default()
                },
            )
            .await?;
        if out.exit_code != 0 || out.timed_out {
            let mut detail = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            if out.timed_out {
                detail = format!("timed out after {timeout:?}; {detail}");
            }
            let tail: String = detail
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(DatabaseError::Bootstrap {
                database: row.id.clone(),
                detail: tail,
                timed_out: out.timed_out,
            });
        }
        tracing::info!(database = %row.id, sandbox, mode, ms = started.elapsed().as_millis() as u64, "database bootstrap");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The database's VM ready for connections: woken if it hibernated, a new one on the same
    /// volume if it has none (deleted, or its VM died). One start at a time per database.
    pub async fn running(&self, row: &DatabaseRow) -> Result<SandboxRow, DatabaseError> {
        let lock = self.start_lock(&row.id);
        let _held = lock.lock().await;
        let row = self.store.databases().by_id(&row.id).await?;
        if let Some(sb) = &row.sandbox_id {
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) => match self.sandboxes.awake(s.clone()).await {
                    Ok(s) => return Ok(s),
                    Err(ControlError::Host(
                        HostError::SandboxNotFound(_) | HostError::VmExited(_),
                    )) => {
                        tracing::warn!(database = %row.id, sandbox = %sb, "database VM is gone: starting a new one on its volume");
                        self.sandboxes.delete(&s).await?;
                    }
                    Err(e) => return Err(e.into()),
                },
                Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
            self.store.databases().set_sandbox(&row.id, None).await?;
        }
        tracing::info!(database = %row.id, "starting a VM for a database");
        self.start_vm(&row, &volume_name(&row.id), &Boot::Start)
            .await
    }

    /// The lock that makes starts (and a restore's swap) of database `id` one at a time.
    fn start_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(m.entry(id.to_owned()).or_default())
    }

    /// A fast shutdown of the cluster in a running VM about to be removed (a restore swapped its
    /// volume out), so its clients get
    /// PostgreSQL's "terminating connection due to administrator command" (57P01) rather than
    /// a dropped socket. Best effort.
    async fn shut_down(&self, row: &DatabaseRow, sandbox: &SandboxRow) {
        if sandbox.state != SandboxState::Running {
            return;
        }
        if let Err(e) = self.script(row, &sandbox.id, "stop", &[]).await {
            tracing::debug!(database = %row.id, sandbox = %sandbox.id, error = &e as &dyn std::error::Error, "no clean shutdown before removing a database VM");
        }
    }

    /// Rotates the owner role's password (in the cluster and PgBouncer, then the row).
    pub async fn rotate_password(&self, ws: &str, id: &str) -> Result<DatabaseInfo, DatabaseError> {
        let mut row = self.row(ws, id).await?;
        let sandbox = self.running(&row).await?;
        row.password = new_password();
        self.script(&row, &sandbox.id, "password", &[]).await?;
        self.store
            .databases()
            .set_password(&row.id, &row.password)
            .await?;
        self.sessions.forget(&row.id);
        row.sandbox_id = Some(sandbox.id.clone());
        Ok(DatabaseInfo {
            row,
            sandbox: Some(sandbox),
        })
    }

    /// Deletes a database: its VM, its row, its volume (backups stay in the object store).
    pub async fn delete(&self, ws: &str, id: &str) -> Result<(), DatabaseError> {
        let row = match self.store.databases().get(ws, id).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Err(DatabaseError::NotFound(id.into())),
            Err(e) => return Err(e.into()),
        };
        self.remove(&row).await
    }

    /// Removes whatever database `row` has: VMs serving it, the row, the volume.
    async fn remove(&self, row: &DatabaseRow) -> Result<(), DatabaseError> {
        self.sessions.forget(&row.id);
        self.starting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&row.id);
        if let Some(sb) = &row.sandbox_id {
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) => self.sandboxes.delete(&s).await?,
                Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // A VM made by a create that crashed before the row named it.
        let filter = pandastack_store::Filter {
            state: None,
            metadata: vec![(DATABASE_METADATA.to_owned(), row.id.clone())],
        };
        for s in self
            .store
            .sandboxes()
            .list(&row.workspace_id, &filter, None, 1000)
            .await?
        {
            self.sandboxes.delete(&s).await?;
        }
        self.store.databases().delete(&row.id).await?;
        if let Err(e) = self.remove_archive(row).await {
            tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "could not remove a database's WAL archive");
        }
        match self
            .volumes
            .delete(&row.workspace_id, &volume_name(&row.id))
            .await
        {
            Ok(()) | Err(VolumeError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Start-up: removes what creates interrupted by a crash left (rows still `creating`, with
    /// their VMs and volumes) and what an interrupted restore left.
    pub async fn reconcile(&self) -> Result<(), DatabaseError> {
        for r in self.store.databases().on_host(&self.host_id).await? {
            if r.state == DatabaseRowState::Creating {
                tracing::warn!(database = %r.id, name = %r.name, "removing a database whose create did not finish");
                self.remove(&r).await?;
            } else {
                self.remove_strays(&r).await?;
            }
        }
        Ok(())
    }

    /// A base backup: the database's volume backed up (to the object store, as a durable
    /// job) between `pg_backup_start` and `pg_backup_stop`, usable for point-in-time restore.
    pub async fn backup(&self, ws: &str, id: &str) -> Result<crate::BackupInfo, DatabaseError> {
        let row = self.row(ws, id).await?;
        let sandbox = self.running(&row).await?;
        self.base_backup(&row, &sandbox.id).await
    }

    pub async fn backups(
        &self,
        ws: &str,
        id: &str,
    ) -> Result<Vec<crate::BackupInfo>, DatabaseError> {
        let row = self.row(ws, id).await?;
        Ok(self.volumes.backups(ws, &volume_name(&row.id)).await?)
    }

    /// Counts a use of the database (a connection, a query) as activity of its VM.
    pub async fn touch(&self, sandbox: &str) {
        if let Err(e) = self.store.sandboxes().touch(sandbox, now_ms()).await {
            tracing::debug!(
                sandbox,
                error = &e as &dyn std::error::Error,
                "could not record database activity"
            );
        }
    }
}
