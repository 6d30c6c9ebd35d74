//! App hosting: apps deployed from git into VMs of the `app` template, served at
//! `<name>.<domain>` by the proxy.
//!
//! A deploy is a durable job (`app_deploy`, pinned to the app's host) that moves its row
//! `queued → cloning → building → baking → checking → live | failed`: the host fetches the
//! commit (`git`, nothing from the repository runs on the host), detection writes a build plan
//! ([`detect`]), and a new VM of its own installs and builds it, starts its server and is
//! health-checked. Only then does the app's live deploy switch, in one transaction; the
//! previous live VM is hibernated after a drain pause and kept as `standby`, so a rollback is
//! a wake and a switch. An app with `min_instances: 0` hibernates after `idle_seconds` without
//! requests (its VM's idle timeout; proxied requests are activity) and the next request wakes
//! it: the wake restores the VM with its server already listening.

mod check;
mod deploy;
mod deps;
pub mod detect;
mod domains;
pub mod function;
pub mod instances;
pub mod invocations;
pub mod npm_lock;
mod routes;
mod source;
mod webhook;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pandastack_api_types::{
    AppConfig, CreateAppRequest, CreateDeployRequest, DeployState, RollbackRequest,
    UpdateAppRequest, WebhookResult,
};
use pandastack_host::{Host, HostError, VmState};
use pandastack_objects::Objects;
use pandastack_outbound::OutboundPolicy;
use pandastack_store::{new_id, now_ms, AppRow, DeployRow, NewJob, SandboxRow, Store, StoreError};
use tokio::sync::Notify;

use crate::{ControlError, Sandboxes};

pub use webhook::{sign as sign_webhook, Delivery, WebhookKind};

/// The catalog template app VMs are made from (`app-m<MiB>` for other memory sizes).
pub const APP_TEMPLATE: &str = "app";
/// Sandbox metadata keys naming the app and deploy a VM serves.
pub const APP_METADATA: &str = "pandastack.app";
pub const DEPLOY_METADATA: &str = "pandastack.deploy";
/// Kind of the deploy jobs.
pub const DEPLOY_JOB_KIND: &str = "app_deploy";
/// Where the app lives in its VM.
pub(crate) const APP_DIR: &str = "/app";
/// `ref` of a deploy built from an uploaded tarball.
pub const UPLOAD_REF: &str = "upload";
/// An uploaded source in its deploy's directory.
pub(crate) const UPLOAD: &str = "upload.tar.gz";
/// The app's own output (its server's stdout and stderr) in its VM.
pub const APP_LOG: &str = "/var/log/pandastack-app.log";

/// Why an app operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("app {0} not found")]
    NotFound(String),
    #[error("deploy {0} not found")]
    DeployNotFound(String),
    #[error("app name {0} is taken")]
    Exists(String),
    /// A request that cannot be carried out in the app's present state.
    #[error("{0}")]
    Conflict(String),
    /// A webhook whose signature does not verify.
    #[error("webhook signature does not verify")]
    BadSignature,
    /// A webhook body or header that is not what the sender's scheme says.
    #[error("webhook: {0}")]
    BadWebhook(String),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    /// An uploaded source that could not be taken.
    #[error("upload: {0}")]
    Upload(String),
    #[error("upload larger than {0} bytes")]
    TooLarge(u64),
    #[error("stored app configuration: {0}")]
    Config(#[from] serde_json::Error),
    /// An SSH deploy key that could not be made or read.
    #[error("deploy key: {0}")]
    DeployKey(String),
    /// A custom domain the platform cannot give an app.
    #[error("{0}")]
    BadDomain(String),
    /// A git source the host does not fetch (a local one, or an internal address).
    #[error("git.url: {0}")]
    BadSource(String),
    /// A custom domain another app has.
    #[error("domain {0} belongs to another app")]
    DomainTaken(String),
    /// Every instance of a function is busy and none could be added in time.
    #[error("{0}")]
    Busy(String),
    /// An invoke's event the runtime refused (not JSON).
    #[error("{0}")]
    BadEvent(String),
}

/// Where apps answer (what their URLs say).
#[derive(Debug, Clone)]
pub struct AppAddress {
    /// `http` or `https`.
    pub scheme: String,
    /// `<name>.<domain>` is an app.
    pub domain: String,
    /// Port in the URLs (`None`: the scheme's default).
    pub port: Option<u16>,
}

impl AppAddress {
    pub fn url(&self, name: &str) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        match self.port {
            Some(p) if p != default => format!("{}://{name}.{}:{p}", self.scheme, self.domain),
            _ => format!("{}://{name}.{}", self.scheme, self.domain),
        }
    }
}

/// An app with its configuration read and the state of its live VM.
#[derive(Debug, Clone)]
pub struct AppInfo {
    pub row: AppRow,
    pub config: AppConfig,
    pub instance: Option<SandboxRow>,
    /// The public half of its SSH deploy key (one OpenSSH `authorized_keys` line).
    pub deploy_key: String,
    /// Its custom domains, by name.
    pub domains: Vec<pandastack_store::DomainRow>,
}

/// Where the proxy sends an app's request.
#[derive(Debug, Clone)]
pub struct AppRoute {
    pub sandbox: SandboxRow,
    pub port: u16,
}

/// Apps of one host.
#[derive(Clone)]
pub struct Apps {
    pub(crate) store: Store,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) sandboxes: Sandboxes,
    pub(crate) host_id: String,
    /// `<dir>/<deploy id>/`: a deploy's source, tarball and log.
    pub(crate) dir: PathBuf,
    pub address: AppAddress,
    pub(crate) wake: Arc<Notify>,
    /// Where dependency caches are kept.
    pub(crate) objects: Objects,
    /// Certificates of custom domains (`None`: the proxy serves no TLS).
    pub(crate) certs: Option<crate::Certificates>,
    /// The proxy's routes to live VMs, cached (shared by clones).
    pub(crate) routes: Arc<routes::RouteCache>,
    /// Function instances of this host (shared by clones).
    pub(crate) instances: Arc<instances::Pool>,
    /// Wakes the runners of asynchronous function calls.
    pub(crate) invoke_wake: Arc<Notify>,
    /// What the host may fetch sources from (public addresses and the operator's exceptions).
    pub(crate) outbound: Arc<OutboundPolicy>,
}

/// `config` of a stored app.
fn config_of(row: &AppRow) -> Result<AppConfig, AppError> {
    Ok(serde_json::from_value(row.config.clone())?)
}

/// A fresh webhook secret: 32 of `[A-Za-z0-9]`.
pub(crate) fn new_secret() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// A new SSH deploy key for app `name`: an ed25519 pair, the private half in OpenSSH's
/// format (unencrypted: the store keeps it), commented `pandastack-app-<name>`.
pub(crate) fn new_deploy_key(name: &str) -> Result<String, AppError> {
    use rand::TryRngCore;
    let mut seed = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut seed)
        .map_err(|e| AppError::DeployKey(format!("random bytes: {e}")))?;
    let pair = ssh_key::private::Ed25519Keypair::from_seed(&seed);
    seed.fill(0);
    let mut key = ssh_key::PrivateKey::from(pair);
    key.set_comment(format!("pandastack-app-{name}"));
    let pem = key
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|e| AppError::DeployKey(e.to_string()))?;
    Ok(pem.as_str().to_owned())
}

/// The public half of a stored deploy key, as an `authorized_keys` line.
pub(crate) fn public_deploy_key(private_key: &str) -> Result<String, AppError> {
    ssh_key::PrivateKey::from_openssh(private_key)
        .and_then(|k| k.public_key().to_openssh())
        .map_err(|e| AppError::DeployKey(e.to_string()))
}

/// The SHA-256 fingerprint of a stored deploy key (`SHA256:…`, as `ssh-keygen -l` shows it).
pub(crate) fn deploy_key_fingerprint(private_key: &str) -> String {
    match ssh_key::PrivateKey::from_openssh(private_key) {
        Ok(k) => k.fingerprint(ssh_key::HashAlg::Sha256).to_string(),
        Err(e) => format!("unreadable: {e}"),
    }
}

impl Apps {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        sandboxes: Sandboxes,
        host_id: String,
        dir: PathBuf,
        address: AppAddress,
        objects: Objects,
    ) -> Self {
        Self {
            store,
            host,
            sandboxes,
            host_id,
            dir,
            address,
            wake: Arc::default(),
            objects,
            certs: None,
            routes: Arc::default(),
            instances: Arc::default(),
            invoke_wake: Arc::default(),
            outbound: Arc::default(),
        }
    }

    /// Lets sources be fetched from what `policy` allows (by default: public addresses only).
    pub fn with_outbound(mut self, policy: OutboundPolicy) -> Self {
        self.outbound = Arc::new(policy);
        self
    }

    /// Refuses a git source the host will not fetch: a path or `file://`, a scheme or remote
    /// helper git is not allowed, an IP literal (or `localhost`) the outbound policy refuses.
    /// A name that resolves to a refused address fails its deploy at the fetch.
    pub(crate) fn check_source(&self, git: &pandastack_api_types::AppGit) -> Result<(), AppError> {
        source::GitTarget::parse(&git.url)
            .and_then(|t| t.check_literal(&self.outbound))
            .map_err(|e| AppError::BadSource(e.to_string()))
    }

    /// Custom domains get TLS certificates from `certs` (files or ACME).
    pub fn with_certificates(mut self, certs: crate::Certificates) -> Self {
        self.certs = Some(certs);
        self
    }

    /// The directory of a deploy's files.
    pub(crate) fn deploy_dir(&self, deploy: &str) -> PathBuf {
        self.dir.join(deploy)
    }

    /// App `app_id`'s own `known_hosts` file (SSH host keys trusted on first use):
    /// `<data>/app-known-hosts/<app id>`, beside the deploys' directory.
    pub(crate) fn known_hosts(&self, app_id: &str) -> PathBuf {
        self.dir.with_file_name("app-known-hosts").join(app_id)
    }

    /// Makes `row`'s deploy key if it has none (an app made before apps had keys); two
    /// callers at once keep the first one stored.
    pub(crate) async fn ensure_deploy_key(&self, row: &mut AppRow) -> Result<(), AppError> {
        if row.deploy_private_key.is_some() {
            return Ok(());
        }
        let key = new_deploy_key(&row.name)?;
        if self
            .store
            .apps()
            .set_deploy_key(&row.id, &key, true, now_ms())
            .await?
        {
            row.deploy_private_key = Some(key);
        } else {
            row.deploy_private_key = self.store.apps().by_id(&row.id).await?.deploy_private_key;
        }
        Ok(())
    }

    /// `POST /v1/apps/{name}/deploy-key`: a new deploy key pair replaces the app's (the old
    /// public key stops working once removed from the repository's deploy keys; deploys
    /// from now on use the new one).
    pub async fn rotate_deploy_key(&self, ws: &str, name: &str) -> Result<AppInfo, AppError> {
        let row = self.row(ws, name).await?;
        let key = new_deploy_key(&row.name)?;
        self.store
            .apps()
            .set_deploy_key(&row.id, &key, false, now_ms())
            .await?;
        let row = self.store.apps().by_id(&row.id).await?;
        self.info(row).await
    }

    /// A deploy's log file (it may not exist yet).
    pub fn log_path(&self, deploy: &str) -> PathBuf {
        self.deploy_dir(deploy).join("deploy.log")
    }

    async fn row(&self, ws: &str, name: &str) -> Result<AppRow, AppError> {
        match self.store.apps().get(ws, name).await {
            Ok(r) if r.kind != function::FUNCTION_KIND => Ok(r),
            Ok(_) | Err(StoreError::NotFound) => Err(AppError::NotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    async fn info(&self, mut row: AppRow) -> Result<AppInfo, AppError> {
        let config = config_of(&row)?;
        self.ensure_deploy_key(&mut row).await?;
        let deploy_key = public_deploy_key(row.deploy_private_key.as_deref().unwrap_or_default())?;
        let instance = match &row.live_deploy_id {
            Some(d) => match self.store.apps().deploy(d).await?.sandbox_id {
                Some(sb) => match self.store.sandboxes().by_id(&sb).await {
                    Ok(s) => Some(s),
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                },
                None => None,
            },
            None => None,
        };
        let domains = self.domains_of(&row.id).await?;
        Ok(AppInfo {
            row,
            config,
            instance,
            deploy_key,
            domains,
        })
    }

    pub async fn get(&self, ws: &str, name: &str) -> Result<AppInfo, AppError> {
        let row = self.row(ws, name).await?;
        self.info(row).await
    }

    /// A page of a workspace's apps by name (one more than `limit` when there are more).
    pub async fn list(
        &self,
        ws: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<AppInfo>, AppError> {
        let rows = self.store.apps().list(ws, "app", after, limit).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(self.info(r).await?);
        }
        Ok(out)
    }

    /// Creates an app (and queues its first deploy unless `deploy: false`).
    pub async fn create(
        &self,
        ws: &str,
        req: &CreateAppRequest,
    ) -> Result<(AppInfo, Option<DeployRow>), AppError> {
        self.check_source(&req.git)?;
        let config = req.config();
        let now = now_ms();
        let private_key = new_deploy_key(&req.name)?;
        let deploy_key = public_deploy_key(&private_key)?;
        let row = AppRow {
            id: new_id("app-"),
            workspace_id: ws.to_owned(),
            name: req.name.clone(),
            host_id: self.host_id.clone(),
            config: serde_json::to_value(&config)?,
            webhook_secret: new_secret(),
            deploy_private_key: Some(private_key),
            live_deploy_id: None,
            created_at: now,
            updated_at: now,
            kind: "app".into(),
        };
        match self.store.apps().insert(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(AppError::Exists(req.name.clone())),
            Err(e) => return Err(e.into()),
        }
        if !req.domains.is_empty() {
            // A refused domain refuses the app: nothing is left behind.
            if let Err(e) = self.set_domains(&row, &req.domains).await {
                self.store.apps().delete(&row.id).await?;
                return Err(e);
            }
        }
        let domains = self.domains_of(&row.id).await?;
        let deploy = if req.deploy.unwrap_or(true) {
            Some(self.queue(&row, config.git_ref(), None).await?)
        } else {
            None
        };
        Ok((
            AppInfo {
                row,
                config,
                instance: None,
                deploy_key,
                domains,
            },
            deploy,
        ))
    }

    /// Changes an app's configuration; the next deploy uses it (nothing is redeployed).
    pub async fn update(
        &self,
        ws: &str,
        name: &str,
        req: &UpdateAppRequest,
    ) -> Result<AppInfo, AppError> {
        if let Some(git) = &req.git {
            self.check_source(git)?;
        }
        let row = self.row(ws, name).await?;
        let config = req.apply(config_of(&row)?);
        if let Some(domains) = &req.domains {
            self.set_domains(&row, domains).await?;
        }
        self.store
            .apps()
            .set_config(&row.id, &serde_json::to_value(&config)?, now_ms())
            .await?;
        let row = self.store.apps().by_id(&row.id).await?;
        // The idle timeout of the live VM follows the scaling settings at once.
        let info = self.info(row).await?;
        if let Some(sb) = &info.instance {
            self.set_scaling(sb.clone(), &info.config).await?;
        }
        Ok(info)
    }

    /// Deletes an app: every deploy's VM, its rows and files.
    pub async fn delete(&self, ws: &str, name: &str) -> Result<(), AppError> {
        let row = self.row(ws, name).await?;
        let deploys = self
            .store
            .apps()
            .deploys(&row.id, None, u32::MAX - 1)
            .await?;
        for d in &deploys {
            self.remove_vm(d).await?;
        }
        self.store.apps().delete(&row.id).await?;
        self.routes.invalidate(&row.name);
        if let Err(e) = deps::forget(&self.objects, ws, &row.id).await {
            tracing::warn!(app = %row.id, error = &e as &dyn std::error::Error, "remove an app's dependency caches");
        }
        for d in &deploys {
            let _ = std::fs::remove_dir_all(self.deploy_dir(&d.id));
        }
        let _ = std::fs::remove_file(self.known_hosts(&row.id));
        Ok(())
    }

    /// Removes a deploy's VM (gone already is fine).
    pub(crate) async fn remove_vm(&self, d: &DeployRow) -> Result<(), AppError> {
        if let Some(sb) = &d.sandbox_id {
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) => self.sandboxes.delete(&s).await?,
                Err(StoreError::NotFound) => match self.host.destroy(sb).await {
                    Ok(()) | Err(HostError::SandboxNotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Queues a deploy of `git_ref` (the durable job runs it on the app's host).
    pub(crate) async fn queue(
        &self,
        app: &AppRow,
        git_ref: &str,
        delivery: Option<String>,
    ) -> Result<DeployRow, AppError> {
        self.queue_as(new_id("dep-"), app, git_ref, delivery).await
    }

    /// [`Apps::queue`] with the deploy's id chosen by the caller.
    pub(crate) async fn queue_as(
        &self,
        id: String,
        app: &AppRow,
        git_ref: &str,
        delivery: Option<String>,
    ) -> Result<DeployRow, AppError> {
        let now = now_ms();
        let mut d = DeployRow {
            id,
            app_id: app.id.clone(),
            workspace_id: app.workspace_id.clone(),
            host_id: app.host_id.clone(),
            seq: 0,
            git_ref: git_ref.to_owned(),
            commit_sha: None,
            state: DeployState::Queued,
            sandbox_id: None,
            plan: None,
            error: None,
            delivery_id: delivery,
            phases: serde_json::json!({}),
            created_at: now,
            updated_at: now,
        };
        // Two deploys of one app racing for the next number: the loser tries again.
        let mut tries = 0;
        loop {
            match self.store.apps().insert_deploy(&mut d).await {
                Ok(()) => break,
                Err(StoreError::Conflict) if d.delivery_id.is_none() && tries < 3 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
        self.store
            .jobs()
            .enqueue(&NewJob {
                kind: DEPLOY_JOB_KIND.into(),
                resource: format!("deploy:{}", d.id),
                host_id: Some(app.host_id.clone()),
                payload: serde_json::json!({ "deploy": d.id }),
                max_attempts: 3,
                run_after: now,
            })
            .await?;
        self.wake.notify_one();
        Ok(d)
    }

    /// `POST …/deploys`: queues a deploy of `ref` (default: the app's).
    pub async fn deploy(
        &self,
        ws: &str,
        name: &str,
        req: &CreateDeployRequest,
    ) -> Result<DeployRow, AppError> {
        let row = self.row(ws, name).await?;
        let config = config_of(&row)?;
        let git_ref = req
            .git_ref
            .clone()
            .unwrap_or_else(|| config.git_ref().to_owned());
        self.queue(&row, &git_ref, None).await
    }

    /// `POST …/deploys` with a gzip tarball: the upload is kept as the deploy's source
    /// (`ref` `upload`) and the deploy queued. An upload over [`source::MAX_UPLOAD_BYTES`], or
    /// one cut off, leaves nothing behind.
    pub async fn deploy_upload<S, E>(
        &self,
        ws: &str,
        name: &str,
        upload: S,
    ) -> Result<DeployRow, AppError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let row = match self.row(ws, name).await {
            Ok(r) => r,
            Err(e) => {
                crate::drain_upload(upload).await;
                return Err(e);
            }
        };
        self.queue_upload(&row, upload).await
    }

    /// Keeps `upload` as a new deploy's source and queues the deploy of `row` (an app, or a
    /// function's version).
    pub(crate) async fn queue_upload<S, E>(
        &self,
        row: &AppRow,
        upload: S,
    ) -> Result<DeployRow, AppError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let id = new_id("dep-");
        let dir = self.deploy_dir(&id);
        // Removed on any early return (a failed write, a client that went away).
        struct Cleanup(Option<PathBuf>);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                if let Some(d) = self.0.take() {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
        let mut cleanup = Cleanup(Some(dir.clone()));
        let io = |e: std::io::Error| AppError::Upload(format!("store the upload: {e}"));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        let mut file = tokio::fs::File::create(dir.join(UPLOAD))
            .await
            .map_err(io)?;
        let mut upload = std::pin::pin!(upload);
        let mut size = 0u64;
        while let Some(piece) = upload.next().await {
            let piece =
                piece.map_err(|e| AppError::Upload(format!("the upload broke off: {e}")))?;
            size += piece.len() as u64;
            if size > source::MAX_UPLOAD_BYTES {
                return Err(AppError::TooLarge(source::MAX_UPLOAD_BYTES));
            }
            file.write_all(&piece).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        if size == 0 {
            return Err(AppError::Upload("the upload is empty".into()));
        }
        let d = self.queue_as(id, row, UPLOAD_REF, None).await?;
        cleanup.0 = None;
        Ok(d)
    }

    /// A page of an app's deploys, newest first.
    pub async fn deploys(
        &self,
        ws: &str,
        name: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<(AppRow, Vec<DeployRow>), AppError> {
        let row = self.row(ws, name).await?;
        let deploys = self.store.apps().deploys(&row.id, before, limit).await?;
        Ok((row, deploys))
    }

    /// One deploy of a workspace's app.
    pub async fn deploy_row(
        &self,
        ws: &str,
        name: &str,
        id: &str,
    ) -> Result<(AppRow, DeployRow), AppError> {
        let row = self.row(ws, name).await?;
        match self.store.apps().deploy(id).await {
            Ok(d) if d.app_id == row.id => Ok((row, d)),
            Ok(_) | Err(StoreError::NotFound) => Err(AppError::DeployNotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// `None` while deploy `id` is under way; then its final state (`deleted` once gone).
    pub async fn deploy_ended(&self, id: &str) -> Option<String> {
        match self.store.apps().deploy(id).await {
            Ok(d) if d.state.active() => None,
            Ok(d) => Some(d.state.as_str().to_owned()),
            Err(StoreError::NotFound) => Some("deleted".into()),
            Err(_) => None,
        }
    }

    /// The VM serving a workspace's app now (for its runtime logs).
    pub async fn instance(&self, ws: &str, name: &str) -> Result<SandboxRow, AppError> {
        let info = self.get(ws, name).await?;
        info.instance
            .ok_or_else(|| AppError::Conflict(format!("app {name} has no live deploy yet")))
    }

    /// Where the proxy sends a request for app `name` (`Ok(None)`: no such app). Cached (see
    /// `routes`): a warm app's request reads nothing from the store while its host reports the
    /// live VM running.
    pub async fn route(&self, name: &str) -> Result<Option<AppRoute>, AppError> {
        if let Some(c) = self.routes.get(name) {
            if c.row_usable
                && matches!(self.host.get(&c.sandbox.id).await, Ok(v) if v.state == VmState::Running)
            {
                return Ok(Some(AppRoute {
                    sandbox: c.sandbox,
                    port: c.port,
                }));
            }
            match self.store.sandboxes().by_id(&c.sandbox.id).await {
                Ok(sandbox) => {
                    self.routes.refresh_row(name, &sandbox);
                    return Ok(Some(AppRoute {
                        sandbox,
                        port: c.port,
                    }));
                }
                Err(StoreError::NotFound) => self.routes.invalidate(name),
                Err(e) => return Err(e.into()),
            }
        }
        let generation = self.routes.generation();
        let row = match self.store.apps().by_name(name).await {
            // A function is served through its instances (`function_lease`), never a route.
            Ok(r) if r.kind == function::FUNCTION_KIND => return Ok(None),
            Ok(r) => r,
            Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(live) = &row.live_deploy_id else {
            return Err(AppError::Conflict(format!(
                "app {name} has no live deploy yet"
            )));
        };
        let d = self.store.apps().deploy(live).await?;
        let port = deploy::plan_port(&d).unwrap_or(deploy::DEFAULT_PORT);
        let Some(sb) = &d.sandbox_id else {
            return Err(AppError::Conflict(format!(
                "app {name}: its live VM is gone"
            )));
        };
        let sandbox = match self.store.sandboxes().by_id(sb).await {
            Ok(s) => s,
            Err(StoreError::NotFound) => {
                return Err(AppError::Conflict(format!(
                    "app {name}: its live VM is gone"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        self.routes.insert(name, &sandbox, port, generation);
        Ok(Some(AppRoute { sandbox, port }))
    }

    /// The proxy wrote `at` (ms) as the activity time of `sandbox`, app `name`'s live VM.
    pub fn note_activity(&self, name: &str, sandbox: &str, at: i64) {
        self.routes.note_activity(name, sandbox, at);
    }

    /// Goes back to an earlier version (`deploy_id`, default the newest `standby` one): its
    /// VM is woken, checked, and takes the traffic; the current one becomes `standby`.
    pub async fn rollback(
        &self,
        ws: &str,
        name: &str,
        req: &RollbackRequest,
    ) -> Result<DeployRow, AppError> {
        let row = self.row(ws, name).await?;
        let target = match &req.deploy_id {
            Some(id) => self.deploy_row(ws, name, id).await?.1,
            None => {
                let all = self.store.apps().deploys(&row.id, None, 1000).await?;
                all.into_iter()
                    .find(|d| d.state == DeployState::Standby && d.sandbox_id.is_some())
                    .ok_or_else(|| {
                        AppError::Conflict(format!(
                            "app {name} has no earlier version to roll back to"
                        ))
                    })?
            }
        };
        if row.live_deploy_id.as_deref() == Some(target.id.as_str()) {
            return Ok(target);
        }
        if target.state != DeployState::Standby || target.sandbox_id.is_none() {
            return Err(AppError::Conflict(format!(
                "deploy {} is {} and cannot take the traffic (only a standby version can)",
                target.id,
                target.state.as_str()
            )));
        }
        self.go_live(&row, target).await
    }

    /// Where the app's idle hibernation stands: the VM's idle timeout from the scaling
    /// settings (`min_instances: 0` → `idle_seconds`, hibernate; `1` → none).
    pub(crate) async fn set_scaling(
        &self,
        mut sb: SandboxRow,
        config: &AppConfig,
    ) -> Result<(), AppError> {
        sb.idle_timeout_seconds = (config.min_instances == 0).then_some(config.idle_seconds as i64);
        sb.on_timeout = pandastack_api_types::OnTimeout::Hibernate;
        self.store.sandboxes().update(&sb).await?;
        Ok(())
    }

    /// Runs this host's deploy jobs, one after another, for the life of the process.
    pub async fn worker(self) {
        let runner = crate::jobs::Runner {
            store: self.store.clone(),
            host_id: self.host_id.clone(),
            kind: DEPLOY_JOB_KIND,
            wake: Arc::clone(&self.wake),
            retry_after: std::time::Duration::from_secs(5),
        };
        runner
            .run(|job| {
                let me = self.clone();
                async move { me.run_job(&job).await }
            })
            .await
    }

    /// A webhook delivery for app `name`: verified, then a deploy of the pushed branch when
    /// it is the tracked one (a delivery seen before deploys nothing).
    pub async fn webhook(
        &self,
        name: &str,
        delivery: &Delivery<'_>,
    ) -> Result<WebhookResult, AppError> {
        let row = match self.store.apps().by_name(name).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Err(AppError::NotFound(name.into())),
            Err(e) => return Err(e.into()),
        };
        delivery.verify(&row.webhook_secret)?;
        let config = config_of(&row)?;
        let pushed = match delivery.pushed_branch()? {
            Ok(b) => b,
            Err(reason) => {
                return Ok(WebhookResult {
                    status: "ignored".into(),
                    deploy_id: None,
                    reason: Some(reason),
                })
            }
        };
        if pushed != config.git_ref() {
            return Ok(WebhookResult {
                status: "ignored".into(),
                deploy_id: None,
                reason: Some(format!(
                    "push to {pushed}; the app tracks {}",
                    config.git_ref()
                )),
            });
        }
        if let Some(id) = delivery.id {
            if let Some(d) = self.store.apps().deploy_by_delivery(&row.id, id).await? {
                return Ok(WebhookResult {
                    status: "duplicate".into(),
                    deploy_id: Some(d.id),
                    reason: Some(format!("delivery {id} was received before")),
                });
            }
        }
        match self
            .queue(&row, &pushed, delivery.id.map(str::to_owned))
            .await
        {
            Ok(d) => Ok(WebhookResult {
                status: "deployed".into(),
                deploy_id: Some(d.id),
                reason: None,
            }),
            // The same delivery arriving twice at once: the second insert finds the first.
            Err(AppError::Store(StoreError::Conflict)) => {
                let d = match delivery.id {
                    Some(id) => self.store.apps().deploy_by_delivery(&row.id, id).await?,
                    None => None,
                };
                Ok(WebhookResult {
                    status: "duplicate".into(),
                    deploy_id: d.map(|d| d.id),
                    reason: Some("delivery was received before".into()),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Removes deploy directories no deploy row owns (after a crash or a delete mid-way).
    pub async fn remove_strays(&self) -> Result<(), AppError> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("dep-") {
                continue;
            }
            if let Err(StoreError::NotFound) = self.store.apps().deploy(&name).await {
                remove_dir(&e.path());
            }
        }
        Ok(())
    }
}

fn remove_dir(p: &Path) {
    if let Err(e) = std::fs::remove_dir_all(p) {
        tracing::warn!(path = %p.display(), error = &e as &dyn std::error::Error, "remove a deploy directory");
    }
}

/// Environment of an app's build and server: its env, its secrets, `PORT`.
pub(crate) fn app_env(config: &AppConfig, port: u16) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    env.extend(config.secrets.clone());
    env.insert("PORT".into(), port.to_string());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_keys() {
        let private = new_deploy_key("web").unwrap();
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        let public = public_deploy_key(&private).unwrap();
        assert!(public.starts_with("ssh-ed25519 AAAA"), "{public}");
        assert!(public.ends_with(" pandastack-app-web"), "{public}");
        assert!(!public.contains('\n'));
        assert!(deploy_key_fingerprint(&private).starts_with("SHA256:"));
        // Every key is new.
        let other = public_deploy_key(&new_deploy_key("web").unwrap()).unwrap();
        assert_ne!(public, other);
        assert!(public_deploy_key("not a key").is_err());
    }
}
