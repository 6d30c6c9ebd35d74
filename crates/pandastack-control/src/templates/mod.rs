//! The template service: the catalog (specs on the host, shared by every workspace) and each
//! workspace's own templates, built from a spec or an OCI image tarball. Every build is a new
//! version (`<name>-v<N>-<6 hex>`, its name on the host); new sandboxes get the newest ready
//! one while older sandboxes keep theirs. Another workspace's builds are never reachable, not
//! even by host name; catalog names cannot be taken or deleted.
//!
//! ```text
//!   queue_spec / queue_oci ──► row (queued) + durable job ──► worker (one build at a time)
//!                                                              build ──► bake ──► ready | failed
//! ```
//!
//! A build runs as a durable job ([`worker`]): a server killed mid-build queues its running
//! jobs again at start ([`Templates::recover`]) and the next attempt clears what the cut-off one
//! left. Files of a build live in `<dir>/<build id>/` ([`files`]).

mod files;
mod queue;
mod worker;

pub(crate) use files::BuildLog;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pandastack_api_types::FieldError;
use pandastack_host::{Host, HostError, SpecRefused, TemplateView};
use pandastack_store::{BuildStatus, Store, StoreError, TemplateBuildRow};
use tokio::sync::{Notify, Semaphore};

pub use files::drain_upload;

use files::Files;

/// Where builds keep their files and how large an upload may be.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub dir: PathBuf,
    pub max_upload_bytes: u64,
}

/// Why a template operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// No template of that name in the workspace or the catalog (or no such version).
    #[error("template {0} not found")]
    NotFound(String),
    #[error(transparent)]
    InvalidName(#[from] FieldError),
    #[error("description: one line, at most 200 bytes")]
    InvalidDescription,
    /// A tarball build's shape: `field` out of `range`.
    #[error("{field}: must be {range}")]
    InvalidShape {
        field: &'static str,
        range: &'static str,
    },
    #[error(transparent)]
    InvalidSpec(#[from] SpecRefused),
    #[error("name {name:?} differs from the spec's name {spec_name:?}")]
    NameMismatch { name: String, spec_name: String },
    #[error("{0} is a catalog template; choose another name")]
    CatalogName(String),
    #[error("{0} is a catalog template; it cannot be deleted")]
    CatalogDelete(String),
    /// A new build of a template whose previous build has not finished.
    #[error("a build of template {0} is under way; wait for it to finish")]
    BuildUnderWay(String),
    /// A delete while a version is still being built.
    #[error("build {version} of {name} is {status}; delete it once it has finished")]
    VersionActive {
        name: String,
        version: i64,
        status: &'static str,
    },
    #[error("template {name} has no ready version yet (build {version} is {status})")]
    NoReadyVersion {
        name: String,
        version: i64,
        status: &'static str,
    },
    #[error("the image of {name} version {version} is gone; build the template again")]
    ImageGone { name: String, version: i64 },
    #[error("re-bake failed: {0}")]
    RebakeFailed(String),
    #[error("image tarball larger than this server's limit of {limit_mib} MiB")]
    UploadTooLarge { limit_mib: u64 },
    #[error("upload cut short: {0}")]
    UploadCut(String),
    #[error("empty body: send the image tarball")]
    EmptyUpload,
    #[error("no space left for the upload")]
    NoSpace,
    /// A file of a build could not be written (`what` names it).
    #[error("{what}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("build job")]
    Job(#[source] serde_json::Error),
    /// The task that ran the work to completion ended abnormally.
    #[error("request task")]
    Task(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    /// A cluster's upload could not be stored in the object store for the host that builds it.
    #[error("storing the upload in the object store")]
    Objects(#[source] Box<pandastack_objects::ObjectsError>),
}

/// The object store namespace of the OCI tarballs a cluster's replicas store for the hosts
/// that build them (see [`Templates::storing_uploads_in`]).
pub const STORED_UPLOADS: &str = "platform";

/// The manifest kind of a stored upload (`template-uploads/<build id>`), written when it is
/// stored and removed when its build ends, so the chunk collector keeps it until then.
const UPLOAD_MANIFESTS: &str = "template-uploads";

/// What a create from template `name` runs: the baked template's name on this host and the
/// environment its image asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub baked: String,
    pub env: BTreeMap<String, String>,
}

/// A template as a workspace sees it.
#[derive(Debug, Clone)]
pub enum TemplateInfo {
    /// One of the host's catalog templates.
    Catalog(TemplateView),
    /// The workspace's own.
    Built(Box<Built>),
}

/// A built template: its newest version and the newest ready one.
#[derive(Debug, Clone)]
pub struct Built {
    pub newest: TemplateBuildRow,
    pub ready_version: Option<i64>,
}

impl Built {
    /// The template of `versions` (one template's, oldest first); `None` if there are none.
    pub fn of(versions: &[TemplateBuildRow]) -> Option<Self> {
        let newest = versions.last()?.clone();
        let ready_version = newest_ready(versions).map(|v| v.version);
        Some(Self {
            newest,
            ready_version,
        })
    }
}

fn newest_ready(versions: &[TemplateBuildRow]) -> Option<&TemplateBuildRow> {
    versions
        .iter()
        .rev()
        .find(|v| v.status == BuildStatus::Ready)
}

/// The newest ready version of template `name`, or why there is none (`versions` not empty).
fn ready_or_conflict<'a>(
    name: &str,
    versions: &'a [TemplateBuildRow],
) -> Result<&'a TemplateBuildRow, TemplateError> {
    if let Some(v) = newest_ready(versions) {
        return Ok(v);
    }
    let newest = versions
        .last()
        .ok_or_else(|| TemplateError::NotFound(name.to_owned()))?;
    Err(TemplateError::NoReadyVersion {
        name: name.to_owned(),
        version: newest.version,
        status: newest.status.as_str(),
    })
}

/// The log of one build and how to tell that it has ended.
#[derive(Clone)]
pub struct BuildLogRef {
    path: PathBuf,
    templates: Templates,
    ws: String,
    name: String,
    id: String,
}

impl BuildLogRef {
    /// The log file (it may not exist yet).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `None` while the build is under way; then how it ended: `ready`, `failed` or `deleted`
    /// (also `None` when the store cannot say).
    pub async fn ended(&self) -> Option<String> {
        let versions = self
            .templates
            .store
            .template_builds()
            .versions(&self.ws, &self.name)
            .await
            .ok()?;
        match versions.into_iter().find(|v| v.id == self.id) {
            Some(v) if v.status.active() => None,
            Some(v) => Some(v.status.as_str().to_owned()),
            None => Some("deleted".to_owned()),
        }
    }
}

/// Templates of one host: the catalog and the builds it runs, over the store and the host.
#[derive(Clone)]
pub struct Templates {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
    files: Files,
    /// One build (or re-bake) at a time on this host.
    running: Arc<Semaphore>,
    /// Wakes the worker when a job is queued.
    wake: Arc<Notify>,
    /// In a cluster, where an OCI tarball upload is stored for the host that builds it (the
    /// replica that takes the upload need not be the one running the build, nor share a disk
    /// with its host); `None`: it stays in the build's directory.
    uploads: Option<pandastack_objects::Objects>,
    /// Where finished builds are recorded.
    events: crate::Events,
}

/// Runs `work` on a task of its own, so a caller that goes away does not cut it half-way.
async fn to_completion<T, F>(work: F) -> Result<T, TemplateError>
where
    F: Future<Output = Result<T, TemplateError>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(work)
        .await
        .unwrap_or_else(|e| Err(TemplateError::Task(e)))
}

impl Templates {
    pub fn new(store: Store, host: Arc<dyn Host>, host_id: String, cfg: BuildConfig) -> Self {
        Self {
            events: crate::Events::new(store.clone()),
            store,
            host,
            host_id,
            files: Files::new(cfg),
            running: Arc::new(Semaphore::new(1)),
            wake: Arc::new(Notify::new()),
            uploads: None,
        }
    }

    /// Records finished builds in `events` (the control plane's).
    pub fn with_events(mut self, events: crate::Events) -> Self {
        self.events = events;
        self
    }

    /// Templates of a cluster's replica: OCI tarball uploads are stored in `objects` (see
    /// [`STORED_UPLOADS`]) and built from there by the host the fleet chooses.
    pub fn storing_uploads_in(mut self, objects: pandastack_objects::Objects) -> Self {
        self.uploads = Some(objects);
        self
    }

    /// Resolves `name` for a create in workspace `ws`: its own template of that name (the
    /// newest ready version), one of its own ready versions by host name (`<name>-v<N>-<hex>`),
    /// else `name` itself (a catalog template, baked on first use, or one baked on this host by
    /// hand). Another workspace's builds are never reachable, not even by host name.
    pub async fn resolve(&self, ws: &str, name: &str) -> Result<Resolved, TemplateError> {
        let versions = self.store.template_builds().versions(ws, name).await?;
        if !versions.is_empty() {
            let v = ready_or_conflict(name, &versions)?;
            return Ok(Resolved {
                baked: v.id.clone(),
                env: v.env.clone(),
            });
        }
        if let Some(v) = self.store.template_builds().by_id(name).await? {
            if v.workspace_id == ws && v.status == BuildStatus::Ready {
                return Ok(Resolved {
                    baked: v.id,
                    env: v.env,
                });
            }
            return Err(TemplateError::NotFound(name.to_owned()));
        }
        Ok(Resolved {
            baked: name.to_owned(),
            env: BTreeMap::new(),
        })
    }

    /// The catalog's templates, then the workspace's own (by name).
    pub async fn list(&self, ws: &str) -> Result<Vec<TemplateInfo>, TemplateError> {
        let mut out: Vec<TemplateInfo> = self
            .host
            .catalog()?
            .into_iter()
            .map(TemplateInfo::Catalog)
            .collect();
        let rows = self.store.template_builds().list(ws).await?;
        for group in rows.chunk_by(|a, b| a.name == b.name) {
            out.extend(Built::of(group).map(|b| TemplateInfo::Built(Box::new(b))));
        }
        Ok(out)
    }

    /// One template: the workspace's own of that name, else the catalog's.
    pub async fn get(&self, ws: &str, name: &str) -> Result<TemplateInfo, TemplateError> {
        let versions = self.store.template_builds().versions(ws, name).await?;
        if let Some(b) = Built::of(&versions) {
            return Ok(TemplateInfo::Built(Box::new(b)));
        }
        self.host
            .catalog()?
            .into_iter()
            .find(|t| t.name == name)
            .map(TemplateInfo::Catalog)
            .ok_or_else(|| TemplateError::NotFound(name.to_owned()))
    }

    /// Bakes a template again: a catalog template from its spec, a built one from the newest
    /// ready version's kept image. New sandboxes get the new bake; running ones keep theirs.
    /// Runs to completion even if the caller goes away.
    pub async fn rebake(&self, ws: &str, name: &str) -> Result<TemplateInfo, TemplateError> {
        let versions = self.store.template_builds().versions(ws, name).await?;
        if versions.is_empty() {
            if !self.host.is_catalog(name) {
                return Err(TemplateError::NotFound(name.to_owned()));
            }
            let (host, n) = (Arc::clone(&self.host), name.to_owned());
            to_completion(async move { Ok(host.rebake(&n).await?) }).await?;
        } else {
            let row = ready_or_conflict(name, &versions)?.clone();
            let this = self.clone();
            to_completion(async move { this.rebake_version(row).await }).await?;
        }
        self.get(ws, name).await
    }

    /// Deletes built template `name` of workspace `ws`, every version: its bake on the host, its
    /// files, its rows. Running sandboxes made from it keep running (their disks are their
    /// own). Refused for catalog templates and while a version is being built. Runs to
    /// completion even if the caller goes away.
    pub async fn delete(&self, ws: &str, name: &str) -> Result<(), TemplateError> {
        let versions = self.store.template_builds().versions(ws, name).await?;
        if versions.is_empty() {
            if self.host.is_catalog(name) {
                return Err(TemplateError::CatalogDelete(name.to_owned()));
            }
            return Err(TemplateError::NotFound(name.to_owned()));
        }
        if let Some(v) = versions.iter().find(|v| v.status.active()) {
            return Err(TemplateError::VersionActive {
                name: name.to_owned(),
                version: v.version,
                status: v.status.as_str(),
            });
        }
        let this = self.clone();
        to_completion(async move {
            for v in versions {
                this.host.remove_template(&v.id).await?;
                this.files.discard(&v.id);
                this.store.template_builds().delete(&v.id).await?;
            }
            Ok(())
        })
        .await
    }

    /// The log of build `version` of template `name` (default: the newest).
    pub async fn log(
        &self,
        ws: &str,
        name: &str,
        version: Option<i64>,
    ) -> Result<BuildLogRef, TemplateError> {
        let versions = self.store.template_builds().versions(ws, name).await?;
        let row = match version {
            Some(v) => versions.into_iter().find(|r| r.version == v),
            None => versions.into_iter().next_back(),
        }
        .ok_or_else(|| TemplateError::NotFound(name.to_owned()))?;
        Ok(BuildLogRef {
            path: self.files.log_path(&row.id),
            templates: self.clone(),
            ws: ws.to_owned(),
            name: name.to_owned(),
            id: row.id,
        })
    }

    /// Settles what a previous server process on this host left: its running build jobs go
    /// back to the queue (the worker runs them again from the start); builds under way without
    /// a job (cut off while their upload was still arriving) are marked failed; build
    /// directories no row owns are removed. Call before [`Templates::worker`].
    pub async fn recover(&self) -> Result<(), StoreError> {
        let store = &self.store;
        let requeued = store.jobs().requeue_running(&self.host_id).await?;
        if requeued > 0 {
            tracing::info!(
                jobs = requeued,
                "build jobs cut off by a restart queued again"
            );
        }
        for mut row in store.template_builds().unfinished(&self.host_id).await? {
            if store
                .jobs()
                .incomplete(&queue::resource(&row.id))
                .await?
                .is_some()
            {
                continue;
            }
            row.status = BuildStatus::Failed;
            row.error = Some("the server restarted during the build; build again".into());
            row.updated_at = pandastack_store::now_ms();
            store.template_builds().update(&row).await?;
        }
        let known = store.template_builds().ids_on_host(&self.host_id).await?;
        self.files.remove_unknown(&known);
        Ok(())
    }
}
