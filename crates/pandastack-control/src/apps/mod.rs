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
//!
//! Three services: [`Apps`] (this file: apps, their deploys, routes and webhooks),
//! [`Functions`] ([`function`]: functions, their versions, instances ([`instances`]) and
//! calls ([`invocations`])) and [`Domains`] (custom domains). What apps and functions share —
//! the deploy queue and its pipeline ([`deploy`]), deploy files, the route cache and the
//! instance pool — is `Shared` (`shared.rs`); each service has its own error.

mod carried;
mod check;
pub mod deploy;
mod deps;
pub mod detect;
mod domains;
pub mod function;
pub mod instances;
pub mod invocations;
pub mod npm_lock;
mod routes;
mod shared;
mod source;
mod webhook;

use pandastack_api_types::{
    AppConfig, CreateAppRequest, CreateDeployRequest, DeployState, RollbackRequest,
    UpdateAppRequest, WebhookResult,
};
use pandastack_host::VmState;
use pandastack_store::{new_id, now_ms, AppRow, DeployRow, SandboxRow, StoreError};

pub use deploy::{DeployCause, DeployError, DeployPhase, DeployTimings};
pub use domains::{DomainError, Domains};
pub use function::{FunctionError, Functions};
pub use webhook::{sign as sign_webhook, Delivery, WebhookKind};

pub use shared::SharedError;
pub(crate) use shared::{app_env, config_of, deploy_key_fingerprint, Shared};
use shared::{new_deploy_key, new_secret, public_deploy_key};

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
    /// One of the app's custom domains was refused.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// What apps and functions share: the store, the host, an upload, a deploy key, a source.
    #[error(transparent)]
    Shared(#[from] SharedError),
}

shared::from_shared_causes!(AppError);

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

/// Apps of one host: their rows, configuration, deploys (the queue and the worker run apps'
/// and functions' deploys alike: `shared.rs`), routes for the proxy and webhooks. An app's
/// custom domains are [`Domains`]'.
#[derive(Clone)]
pub struct Apps {
    s: Shared,
    domains: Domains,
}

impl Apps {
    pub(crate) fn new(s: Shared, domains: Domains) -> Self {
        Self { s, domains }
    }

    /// Where apps answer.
    pub fn address(&self) -> &AppAddress {
        &self.s.address
    }

    /// At most `max` bytes of deploy `deploy`'s log from `from` (wherever the deploy ran: see
    /// `apps/carried.rs`).
    pub async fn read_log(
        &self,
        ws: &str,
        deploy: &str,
        from: Option<pandastack_host::LogPos>,
        max: usize,
    ) -> Result<pandastack_host::LogChunk, String> {
        self.s.read_deploy_log(ws, deploy, from, max).await
    }

    /// Runs this host's deploy jobs (apps' and functions' versions), one after another, for
    /// the life of the process.
    pub async fn worker(self) {
        self.s.deploy_worker().await
    }

    /// Removes deploy directories no deploy row owns (after a crash or a delete mid-way).
    pub async fn remove_strays(&self) -> Result<(), AppError> {
        Ok(self.s.remove_strays().await?)
    }

    /// `POST /v1/apps/{name}/deploy-key`: a new deploy key pair replaces the app's (the old
    /// public key stops working once removed from the repository's deploy keys; deploys
    /// from now on use the new one).
    pub async fn rotate_deploy_key(&self, ws: &str, name: &str) -> Result<AppInfo, AppError> {
        let row = self.row(ws, name).await?;
        let key = new_deploy_key(&row.name)?;
        self.s
            .store
            .apps()
            .set_deploy_key(&row.id, &key, false, now_ms())
            .await?;
        let row = self.s.store.apps().by_id(&row.id).await?;
        self.info(row).await
    }

    async fn row(&self, ws: &str, name: &str) -> Result<AppRow, AppError> {
        match self.s.store.apps().get(ws, name).await {
            Ok(r) if r.kind != function::FUNCTION_KIND => Ok(r),
            Ok(_) | Err(StoreError::NotFound) => Err(AppError::NotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    async fn info(&self, mut row: AppRow) -> Result<AppInfo, AppError> {
        let config = config_of(&row)?;
        self.s.ensure_deploy_key(&mut row).await?;
        let deploy_key = public_deploy_key(row.deploy_private_key.as_deref().unwrap_or_default())?;
        let instance = match &row.live_deploy_id {
            Some(d) => match self.s.store.apps().deploy(d).await?.sandbox_id {
                Some(sb) => match self.s.store.sandboxes().by_id(&sb).await {
                    Ok(s) => Some(s),
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                },
                None => None,
            },
            None => None,
        };
        let domains = self.domains.domains_of(&row.id).await?;
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
        let rows = self.s.store.apps().list(ws, "app", after, limit).await?;
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
        self.s.check_source(&req.git)?;
        let config = req.config();
        let now = now_ms();
        let private_key = new_deploy_key(&req.name)?;
        let deploy_key = public_deploy_key(&private_key)?;
        let row = AppRow {
            id: new_id("app-"),
            workspace_id: ws.to_owned(),
            name: req.name.clone(),
            host_id: self.s.host_id.clone(),
            config: serde_json::to_value(&config)?,
            webhook_secret: new_secret(),
            deploy_private_key: Some(private_key),
            live_deploy_id: None,
            created_at: now,
            updated_at: now,
            kind: "app".into(),
        };
        match self.s.store.apps().insert(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(AppError::Exists(req.name.clone())),
            Err(e) => return Err(e.into()),
        }
        if !req.domains.is_empty() {
            // A refused domain refuses the app: nothing is left behind.
            if let Err(e) = self.domains.set_domains(&row, &req.domains).await {
                self.s.store.apps().delete(&row.id).await?;
                return Err(e.into());
            }
        }
        let domains = self.domains.domains_of(&row.id).await?;
        let deploy = if req.deploy.unwrap_or(true) {
            Some(self.s.queue(&row, config.git_ref(), None).await?)
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
            self.s.check_source(git)?;
        }
        let row = self.row(ws, name).await?;
        let config = req.apply(config_of(&row)?);
        if let Some(domains) = &req.domains {
            self.domains.set_domains(&row, domains).await?;
        }
        self.s
            .store
            .apps()
            .set_config(&row.id, &serde_json::to_value(&config)?, now_ms())
            .await?;
        let row = self.s.store.apps().by_id(&row.id).await?;
        // The idle timeout of the live VM follows the scaling settings at once.
        let info = self.info(row).await?;
        if let Some(sb) = &info.instance {
            self.s.set_scaling(sb.clone(), &info.config).await?;
        }
        Ok(info)
    }

    /// Deletes an app: every deploy's VM, its rows and files.
    pub async fn delete(&self, ws: &str, name: &str) -> Result<(), AppError> {
        let row = self.row(ws, name).await?;
        let deploys = self
            .s
            .store
            .apps()
            .deploys(&row.id, None, u32::MAX - 1)
            .await?;
        for d in &deploys {
            self.s.remove_vm(d).await?;
        }
        self.s.store.apps().delete(&row.id).await?;
        self.s.routes.invalidate(&row.name);
        if let Err(e) = deps::forget(&self.s.objects, ws, &row.id).await {
            tracing::warn!(app = %row.id, error = &e as &dyn std::error::Error, "remove an app's dependency caches");
        }
        for d in &deploys {
            self.s.forget_deploy(ws, &d.id).await;
        }
        let _ = std::fs::remove_file(self.s.known_hosts(&row.id));
        Ok(())
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
        Ok(self.s.queue(&row, &git_ref, None).await?)
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
        Ok(self.s.queue_upload(&row, upload).await?)
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
        let deploys = self.s.store.apps().deploys(&row.id, before, limit).await?;
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
        match self.s.store.apps().deploy(id).await {
            Ok(d) if d.app_id == row.id => Ok((row, d)),
            Ok(_) | Err(StoreError::NotFound) => Err(AppError::DeployNotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// `None` while deploy `id` is under way; then its final state (`deleted` once gone).
    pub async fn deploy_ended(&self, id: &str) -> Option<String> {
        match self.s.store.apps().deploy(id).await {
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
        if let Some(c) = self.s.routes.get(name) {
            if c.row_usable
                && matches!(self.s.host.get(&c.sandbox.id).await, Ok(v) if v.state == VmState::Running)
            {
                return Ok(Some(AppRoute {
                    sandbox: c.sandbox,
                    port: c.port,
                }));
            }
            match self.s.store.sandboxes().by_id(&c.sandbox.id).await {
                Ok(sandbox) => {
                    self.s.routes.refresh_row(name, &sandbox);
                    return Ok(Some(AppRoute {
                        sandbox,
                        port: c.port,
                    }));
                }
                Err(StoreError::NotFound) => self.s.routes.invalidate(name),
                Err(e) => return Err(e.into()),
            }
        }
        let generation = self.s.routes.generation();
        let row = match self.s.store.apps().by_name(name).await {
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
        let d = self.s.store.apps().deploy(live).await?;
        let port = deploy::plan_port(&d).unwrap_or(deploy::DEFAULT_PORT);
        let Some(sb) = &d.sandbox_id else {
            return Err(AppError::Conflict(format!(
                "app {name}: its live VM is gone"
            )));
        };
        let sandbox = match self.s.store.sandboxes().by_id(sb).await {
            Ok(s) => s,
            Err(StoreError::NotFound) => {
                return Err(AppError::Conflict(format!(
                    "app {name}: its live VM is gone"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        self.s.routes.insert(name, &sandbox, port, generation);
        Ok(Some(AppRoute { sandbox, port }))
    }

    /// The proxy wrote `at` (ms) as the activity time of `sandbox`, app `name`'s live VM.
    pub fn note_activity(&self, name: &str, sandbox: &str, at: i64) {
        self.s.routes.note_activity(name, sandbox, at);
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
                let all = self.s.store.apps().deploys(&row.id, None, 1000).await?;
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

    /// A webhook delivery for app `name`: verified, then a deploy of the pushed branch when
    /// it is the tracked one (a delivery seen before deploys nothing).
    pub async fn webhook(
        &self,
        name: &str,
        delivery: &Delivery<'_>,
    ) -> Result<WebhookResult, AppError> {
        let row = match self.s.store.apps().by_name(name).await {
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
            if let Some(d) = self.s.store.apps().deploy_by_delivery(&row.id, id).await? {
                return Ok(WebhookResult {
                    status: "duplicate".into(),
                    deploy_id: Some(d.id),
                    reason: Some(format!("delivery {id} was received before")),
                });
            }
        }
        match self
            .s
            .queue(&row, &pushed, delivery.id.map(str::to_owned))
            .await
        {
            Ok(d) => Ok(WebhookResult {
                status: "deployed".into(),
                deploy_id: Some(d.id),
                reason: None,
            }),
            // The same delivery arriving twice at once: the second insert finds the first.
            Err(SharedError::Store(StoreError::Conflict)) => {
                let d = match delivery.id {
                    Some(id) => self.s.store.apps().deploy_by_delivery(&row.id, id).await?,
                    None => None,
                };
                Ok(WebhookResult {
                    status: "duplicate".into(),
                    deploy_id: d.map(|d| d.id),
                    reason: Some("delivery was received before".into()),
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}
