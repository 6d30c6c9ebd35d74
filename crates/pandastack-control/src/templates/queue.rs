//! New builds: checked, written as the next version's row and queued as a durable job.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::PathBuf;

use bytes::Bytes;
use futures::Stream;
use pandastack_api_types::{validate_template_name, OciTemplateParams};
use pandastack_store::{now_ms, BuildStatus, NewJob, SourceKind, StoreError, TemplateBuildRow};

use super::{drain_upload, TemplateError, Templates};

/// Job kind of template builds in the jobs table.
pub(super) const JOB_KIND: &str = "template_build";
/// Attempts per build (a server killed mid-build counts one).
const MAX_ATTEMPTS: i64 = 3;

/// The jobs table's resource of build `id`.
pub(super) fn resource(id: &str) -> String {
    format!("template_build:{id}")
}

/// What a build job needs to run its build again from the start: the build's id and its
/// source (a spec's text, or the uploaded tarball, which is kept until the build ends).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct BuildJob {
    pub build: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tarball: Option<PathBuf>,
    /// The tarball stored in the object store (a cluster's upload) instead of `tarball`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<pandastack_objects::Manifest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
}

/// Checks the shape of a tarball build: (vCPUs, memory MiB).
fn shape(
    cpu: Option<u32>,
    memory_mb: Option<u32>,
    disk_mb: Option<u32>,
) -> Result<(u32, u32), TemplateError> {
    let cpu = cpu.unwrap_or(1);
    let memory = memory_mb.unwrap_or(512);
    let bad = |field, range| TemplateError::InvalidShape { field, range };
    if !(1..=16).contains(&cpu) {
        return Err(bad("cpu", "1-16"));
    }
    if !(128..=65536).contains(&memory) {
        return Err(bad("memory_mb", "128-65536"));
    }
    if disk_mb.is_some_and(|d| !(64..=1 << 20).contains(&d)) {
        return Err(bad("disk_mb", "64-1048576"));
    }
    Ok((cpu, memory))
}

impl Templates {
    /// Queues a build of `spec` (TOML in the catalog's format) in workspace `ws`, as template
    /// `name` (default: the spec's name, which `name` must equal when given). Returns the new
    /// version's row (`queued`).
    pub async fn queue_spec(
        &self,
        ws: &str,
        name: Option<String>,
        spec: String,
    ) -> Result<TemplateBuildRow, TemplateError> {
        let summary = self.host.check_spec(&spec)?;
        let name = name.unwrap_or_else(|| summary.name.clone());
        if name != summary.name {
            return Err(TemplateError::NameMismatch {
                name,
                spec_name: summary.name,
            });
        }
        let mut row = self.new_row(ws, &name, SourceKind::Spec, &summary.description)?;
        row.vcpus = i64::from(summary.shape.vcpus);
        row.memory_mib = i64::from(summary.shape.memory_mib);
        row.disk_mb = i64::from(summary.disk_mb);
        self.insert(&mut row).await?;
        let job = BuildJob {
            build: row.id.clone(),
            spec: Some(spec),
            tarball: None,
            stored: None,
            disk_mb: None,
        };
        if let Err(e) = self.enqueue(&job).await {
            self.store.template_builds().delete(&row.id).await?;
            return Err(e);
        }
        Ok(row)
    }

    /// Queues a build of the OCI image tarball `upload` (an OCI image layout or `docker save`
    /// output, of announced length `content_length`) in workspace `ws`. Everything that can be
    /// checked before the upload is read is; a refusal then reads (a bounded part of) the
    /// upload anyway, so a client still sending gets the answer rather than a reset connection.
    /// If the upload fails, nothing of the build remains.
    pub async fn queue_oci<S, E>(
        &self,
        ws: &str,
        params: OciTemplateParams,
        content_length: Option<u64>,
        upload: S,
    ) -> Result<TemplateBuildRow, TemplateError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: Display,
    {
        let accepted = async {
            let (vcpus, memory_mib) = shape(params.cpu, params.memory_mb, params.disk_mb)?;
            self.files.check_length(content_length)?;
            let description = params.description.as_deref().unwrap_or("");
            let mut row = self.new_row(ws, &params.name, SourceKind::Oci, description)?;
            (row.vcpus, row.memory_mib) = (i64::from(vcpus), i64::from(memory_mib));
            row.disk_mb = i64::from(params.disk_mb.unwrap_or(0));
            self.insert(&mut row).await?;
            Ok::<_, TemplateError>(row)
        }
        .await;
        let row = match accepted {
            Ok(row) => row,
            Err(e) => {
                drain_upload(upload).await;
                return Err(e);
            }
        };
        // From here the row exists without a job: if the caller goes away mid-upload (the
        // future is dropped), the guard removes the row and the files, so no `queued` build
        // without a job blocks the name until the next restart.
        let mut guard = Unqueued {
            templates: self.clone(),
            id: Some(row.id.clone()),
        };
        let tarball = match self.files.receive(&row.id, upload).await {
            Ok(p) => p,
            Err(e) => {
                guard.id = None;
                self.files.discard(&row.id);
                self.store.template_builds().delete(&row.id).await?;
                return Err(e);
            }
        };
        // In a cluster the tarball goes to the object store, for whichever host builds it.
        let stored = match &self.uploads {
            None => None,
            Some(objects) => {
                let up = objects
                    .upload_file(
                        super::STORED_UPLOADS,
                        &tarball,
                        pandastack_objects::DEFAULT_CHUNK_SIZE,
                    )
                    .await;
                // Named by a manifest until its build ends, so the chunk collector keeps it.
                let up = match up {
                    Ok(up) => objects
                        .put_manifest(
                            super::STORED_UPLOADS,
                            super::UPLOAD_MANIFESTS,
                            &row.id,
                            &up.manifest,
                        )
                        .await
                        .map(|()| up),
                    Err(e) => Err(e),
                };
                match up {
                    Ok(up) => {
                        // The build reads it from the object store; this copy is done with.
                        let _ = std::fs::remove_file(&tarball);
                        tracing::info!(build = %row.id, bytes_uploaded = up.stats.bytes_uploaded, "template upload stored in the object store");
                        Some(up.manifest)
                    }
                    Err(e) => {
                        guard.id = None;
                        self.files.discard(&row.id);
                        self.store.template_builds().delete(&row.id).await?;
                        return Err(TemplateError::Objects(Box::new(e)));
                    }
                }
            }
        };
        let job = BuildJob {
            build: row.id.clone(),
            spec: None,
            tarball: stored.is_none().then_some(tarball),
            stored,
            disk_mb: params.disk_mb,
        };
        let queued = self.enqueue(&job).await;
        guard.id = None;
        if let Err(e) = queued {
            self.files.discard(&row.id);
            self.forget_upload(&job).await;
            self.store.template_builds().delete(&row.id).await?;
            return Err(e);
        }
        Ok(row)
    }

    /// A new version's row, not yet inserted: the name checked (valid, not a catalog
    /// template's) and the description (one line).
    fn new_row(
        &self,
        ws: &str,
        name: &str,
        source: SourceKind,
        description: &str,
    ) -> Result<TemplateBuildRow, TemplateError> {
        validate_template_name(name)?;
        if self.host.is_catalog(name) {
            return Err(TemplateError::CatalogName(name.to_owned()));
        }
        if description.len() > 200 || description.contains('\n') {
            return Err(TemplateError::InvalidDescription);
        }
        let now = now_ms();
        Ok(TemplateBuildRow {
            id: String::new(),
            workspace_id: ws.to_owned(),
            host_id: self.host_id.clone(),
            name: name.to_owned(),
            version: 0,
            source,
            status: BuildStatus::Queued,
            error: None,
            description: description.to_owned(),
            vcpus: 1,
            memory_mib: 512,
            disk_mb: 0,
            env: BTreeMap::new(),
            image_bytes: None,
            build_ms: None,
            bake_ms: None,
            created_at: now,
            updated_at: now,
        })
    }

    /// Inserts `row` as the next version (setting its version and id), unless a build of the
    /// template is under way.
    async fn insert(&self, row: &mut TemplateBuildRow) -> Result<(), TemplateError> {
        match self.store.template_builds().insert_next(row).await {
            Ok(()) => Ok(()),
            Err(StoreError::Conflict) => Err(TemplateError::BuildUnderWay(row.name.clone())),
            Err(e) => Err(e.into()),
        }
    }

    /// Queues `job` (a durable row: a restart of the server runs it again) and wakes the worker.
    async fn enqueue(&self, job: &BuildJob) -> Result<(), TemplateError> {
        let new = NewJob {
            kind: JOB_KIND.into(),
            resource: resource(&job.build),
            host_id: Some(self.host_id.clone()),
            payload: serde_json::to_value(job).map_err(TemplateError::Job)?,
            max_attempts: MAX_ATTEMPTS,
            run_after: 0,
        };
        self.store
            .template_builds()
            .enqueue_build(&job.build, &new)
            .await?;
        self.wake.notify_one();
        Ok(())
    }
}

/// Removes a build whose upload was cut off by its caller going away (see `queue_oci`).
struct Unqueued {
    templates: Templates,
    /// The build still to remove; `None` once the upload ended either way.
    id: Option<String>,
}

impl Drop for Unqueued {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let t = self.templates.clone();
        rt.spawn(async move {
            t.files.discard(&id);
            if let Err(e) = t.store.template_builds().delete(&id).await {
                tracing::warn!(build = %id, error = &e as &dyn std::error::Error, "removing a build whose upload was cut off");
            }
        });
    }
}
