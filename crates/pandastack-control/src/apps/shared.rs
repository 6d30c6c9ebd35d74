//! What apps and functions share: the store, host and VMs they run on, deploy files, the
//! deploy queue and its worker ([`super::deploy`]), the proxy's route cache and the pool of
//! function instances (a function's deploy going live updates it). [`super::Apps`] and
//! [`super::Functions`] each hold one [`Shared`] (clones share its state).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pandastack_api_types::{AppConfig, DeployState};
use pandastack_host::{Host, HostError};
use pandastack_objects::Objects;
use pandastack_outbound::OutboundPolicy;
use pandastack_store::{new_id, now_ms, AppRow, DeployRow, NewJob, SandboxRow, Store, StoreError};
use tokio::sync::Notify;

use super::{instances, routes, source, AppAddress, DEPLOY_JOB_KIND, UPLOAD, UPLOAD_REF};
use crate::{ControlError, Sandboxes};

/// Why something apps and functions share failed: the store, the host or a sandbox, an upload,
/// the stored configuration, a deploy key, a source the host does not fetch. [`crate::AppError`]
/// and [`crate::FunctionError`] each carry it whole (`Shared`, with its own message).
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("upload: {0}")]
    Upload(String),
    #[error("upload larger than {0} bytes")]
    TooLarge(u64),
    #[error("stored app configuration: {0}")]
    Config(#[from] serde_json::Error),
    /// An SSH deploy key that could not be made or read.
    #[error("deploy key: {0}")]
    DeployKey(String),
    /// A git source the host does not fetch (a local one, or an internal address).
    #[error("git.url: {0}")]
    BadSource(String),
    /// A deploy's upload could not be carried to the replica that runs it (a cluster).
    #[error("{what}")]
    Carry {
        what: String,
        #[source]
        source: Box<pandastack_objects::ObjectsError>,
    },
}

/// `From` the shared causes (the store, the host, a sandbox operation, the stored
/// configuration) for a service's error that carries [`SharedError`] as `Shared`, so `?` works
/// as if they were its own variants.
macro_rules! from_shared_causes {
    ($error:ty) => {
        impl From<pandastack_store::StoreError> for $error {
            fn from(e: pandastack_store::StoreError) -> Self {
                Self::Shared(e.into())
            }
        }
        impl From<pandastack_host::HostError> for $error {
            fn from(e: pandastack_host::HostError) -> Self {
                Self::Shared(e.into())
            }
        }
        impl From<crate::ControlError> for $error {
            fn from(e: crate::ControlError) -> Self {
                Self::Shared(e.into())
            }
        }
        impl From<serde_json::Error> for $error {
            fn from(e: serde_json::Error) -> Self {
                Self::Shared(e.into())
            }
        }
    };
}
pub(crate) use from_shared_causes;

/// The state apps and functions of one host share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) sandboxes: Sandboxes,
    pub(crate) host_id: String,
    /// `<dir>/<deploy id>/`: a deploy's source, tarball and log.
    pub(crate) dir: PathBuf,
    pub(crate) address: AppAddress,
    /// Wakes the deploy worker.
    pub(crate) wake: Arc<Notify>,
    /// Where dependency caches are kept.
    pub(crate) objects: Objects,
    /// The proxy's routes to live VMs, cached.
    pub(crate) routes: Arc<routes::RouteCache>,
    /// Function instances of this host.
    pub(crate) instances: Arc<instances::Pool>,
    /// What the host may fetch sources from (public addresses and the operator's exceptions).
    pub(crate) outbound: Arc<OutboundPolicy>,
    /// How long a deploy waits for a new version and for the one it replaces.
    pub(crate) timings: super::deploy::DeployTimings,
}

/// `config` of a stored app.
pub(crate) fn config_of(row: &AppRow) -> Result<AppConfig, SharedError> {
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
pub(crate) fn new_deploy_key(name: &str) -> Result<String, SharedError> {
    use rand::TryRngCore;
    let mut seed = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut seed)
        .map_err(|e| SharedError::DeployKey(format!("random bytes: {e}")))?;
    let pair = ssh_key::private::Ed25519Keypair::from_seed(&seed);
    seed.fill(0);
    let mut key = ssh_key::PrivateKey::from(pair);
    key.set_comment(format!("pandastack-app-{name}"));
    let pem = key
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|e| SharedError::DeployKey(e.to_string()))?;
    Ok(pem.as_str().to_owned())
}

/// The public half of a stored deploy key, as an `authorized_keys` line.
pub(crate) fn public_deploy_key(private_key: &str) -> Result<String, SharedError> {
    ssh_key::PrivateKey::from_openssh(private_key)
        .and_then(|k| k.public_key().to_openssh())
        .map_err(|e| SharedError::DeployKey(e.to_string()))
}

/// The SHA-256 fingerprint of a stored deploy key (`SHA256:…`, as `ssh-keygen -l` shows it).
pub(crate) fn deploy_key_fingerprint(private_key: &str) -> String {
    match ssh_key::PrivateKey::from_openssh(private_key) {
        Ok(k) => k.fingerprint(ssh_key::HashAlg::Sha256).to_string(),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// Environment of an app's build and server: its env, its secrets, `PORT`.
pub(crate) fn app_env(config: &AppConfig, port: u16) -> BTreeMap<String, String> {
    let mut env = config.env.clone();
    env.extend(config.secrets.clone());
    env.insert("PORT".into(), port.to_string());
    env
}

/// `sb` with the idle timeout `config`'s scaling settings give it (see
/// [`Shared::set_scaling`]).
pub(crate) fn scaled(mut sb: SandboxRow, config: &AppConfig) -> SandboxRow {
    sb.idle_timeout_seconds = (config.min_instances == 0).then_some(config.idle_seconds as i64);
    sb.on_timeout = pandastack_api_types::OnTimeout::Hibernate;
    sb
}

fn remove_dir(p: &Path) {
    if let Err(e) = std::fs::remove_dir_all(p) {
        tracing::warn!(path = %p.display(), error = &e as &dyn std::error::Error, "remove a deploy directory");
    }
}

impl Shared {
    pub(crate) fn new(
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
            routes: Arc::default(),
            instances: Arc::default(),
            outbound: Arc::default(),
            timings: Default::default(),
        }
    }

    /// Deploys wait as `timings` says (by default the server's waits).
    pub(crate) fn with_timings(mut self, timings: super::deploy::DeployTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Lets sources be fetched from what `policy` allows (by default: public addresses only).
    pub(crate) fn with_outbound(mut self, policy: Arc<OutboundPolicy>) -> Self {
        self.outbound = policy;
        self
    }

    /// Refuses a git source the host will not fetch: a path or `file://`, a scheme or remote
    /// helper git is not allowed, an IP literal (or `localhost`) the outbound policy refuses.
    /// A name that resolves to a refused address fails its deploy at the fetch.
    pub(crate) fn check_source(
        &self,
        git: &pandastack_api_types::AppGit,
    ) -> Result<(), SharedError> {
        source::GitTarget::parse(&git.url)
            .and_then(|t| t.check_literal(&self.outbound))
            .map_err(|e| SharedError::BadSource(e.to_string()))
    }

    /// The directory of a deploy's files.
    pub(crate) fn deploy_dir(&self, deploy: &str) -> PathBuf {
        self.dir.join(deploy)
    }

    /// A deploy's log file (it may not exist yet).
    pub(crate) fn log_path(&self, deploy: &str) -> PathBuf {
        self.deploy_dir(deploy).join("deploy.log")
    }

    /// App `app_id`'s own `known_hosts` file (SSH host keys trusted on first use):
    /// `<data>/app-known-hosts/<app id>`, beside the deploys' directory.
    pub(crate) fn known_hosts(&self, app_id: &str) -> PathBuf {
        self.dir.with_file_name("app-known-hosts").join(app_id)
    }

    /// Makes `row`'s deploy key if it has none (an app made before apps had keys); two
    /// callers at once keep the first one stored.
    pub(crate) async fn ensure_deploy_key(&self, row: &mut AppRow) -> Result<(), SharedError> {
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

    /// Removes a deploy's VM (gone already is fine).
    pub(crate) async fn remove_vm(&self, d: &DeployRow) -> Result<(), SharedError> {
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
    ) -> Result<DeployRow, SharedError> {
        self.queue_as(new_id("dep-"), app, git_ref, delivery).await
    }

    /// [`Shared::queue`] with the deploy's id chosen by the caller.
    pub(crate) async fn queue_as(
        &self,
        id: String,
        app: &AppRow,
        git_ref: &str,
        delivery: Option<String>,
    ) -> Result<DeployRow, SharedError> {
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

    /// Keeps `upload` as a new deploy's source and queues the deploy of `row` (an app, or a
    /// function's version). An upload over [`source::MAX_UPLOAD_BYTES`], or one cut off,
    /// leaves nothing behind.
    pub(crate) async fn queue_upload<S, E>(
        &self,
        row: &AppRow,
        upload: S,
    ) -> Result<DeployRow, SharedError>
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
        let io = |e: std::io::Error| SharedError::Upload(format!("store the upload: {e}"));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        let mut file = tokio::fs::File::create(dir.join(UPLOAD))
            .await
            .map_err(io)?;
        let mut upload = std::pin::pin!(upload);
        let mut size = 0u64;
        while let Some(piece) = upload.next().await {
            let piece =
                piece.map_err(|e| SharedError::Upload(format!("the upload broke off: {e}")))?;
            size += piece.len() as u64;
            if size > source::MAX_UPLOAD_BYTES {
                return Err(SharedError::TooLarge(source::MAX_UPLOAD_BYTES));
            }
            file.write_all(&piece).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        if size == 0 {
            return Err(SharedError::Upload("the upload is empty".into()));
        }
        self.carry_upload(&row.workspace_id, &id).await?;
        let d = match self.queue_as(id.clone(), row, UPLOAD_REF, None).await {
            Ok(d) => d,
            Err(e) => {
                self.drop_carried_upload(&row.workspace_id, &id).await;
                return Err(e);
            }
        };
        cleanup.0 = None;
        Ok(d)
    }

    /// Where the app's idle hibernation stands: the VM's idle timeout from the scaling
    /// settings (`min_instances: 0` → `idle_seconds`, hibernate; `1` → none).
    pub(crate) async fn set_scaling(
        &self,
        sb: SandboxRow,
        config: &AppConfig,
    ) -> Result<(), SharedError> {
        self.store.sandboxes().update(&scaled(sb, config)).await?;
        Ok(())
    }

    /// Runs this host's deploy jobs (apps' and functions' versions), one after another, for
    /// the life of the process.
    pub(crate) async fn deploy_worker(self) {
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

    /// Removes deploy directories no deploy row owns (after a crash or a delete mid-way).
    pub(crate) async fn remove_strays(&self) -> Result<(), SharedError> {
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
