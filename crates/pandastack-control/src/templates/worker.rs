//! The build worker: claims this host's build jobs with a lease and runs them one at a time (a
//! build is heavy: a Debian bootstrap or a multi-GiB unpack, then a cold boot), each with a log
//! file, its row moving `queued → building → baking → ready | failed`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_host::{error_chain, BuildSource, HostError, Shape};
use pandastack_store::{now_ms, BuildStatus, JobRow, StoreError, TemplateBuildRow};

use super::files::{BuildLog, IMAGE, LOG, UPLOAD};
use super::queue::{BuildJob, JOB_KIND};
use super::{TemplateError, Templates};
use crate::ResourceKind;

/// The disk limits a version's spec names (JSON), next to its image, for a re-bake.
const DISK_LIMITS: &str = "disk-limits.json";

/// Why a build failed, as its row and log say it.
type Failure = String;

fn failed(what: &str, e: &(dyn std::error::Error + 'static)) -> Failure {
    format!("{what}: {}", error_chain(e))
}

fn store_failed(e: StoreError) -> Failure {
    failed("state store", &e)
}

impl Templates {
    /// Runs this host's build jobs one after another, for the life of the process. Call
    /// [`Templates::recover`] first.
    pub async fn worker(self) {
        let runner = crate::jobs::Runner {
            store: self.store.clone(),
            host_id: self.host_id.clone(),
            kind: JOB_KIND,
            wake: Arc::clone(&self.wake),
            retry_after: Duration::from_secs(10),
        };
        runner
            .run(|job| {
                let me = self.clone();
                async move { me.run_job(&job).await }
            })
            .await
    }

    /// Runs one build job: the build, from its start, whatever an earlier attempt left.
    async fn run_job(&self, job: &JobRow) -> Result<(), Failure> {
        let spec: BuildJob =
            serde_json::from_value(job.payload.clone()).map_err(|e| format!("job payload: {e}"))?;
        let row = match self.store.template_builds().by_id(&spec.build).await {
            Ok(Some(r)) if r.status.active() => r,
            // Deleted, or finished just before the previous process stopped: nothing to do.
            Ok(_) => {
                self.forget_upload(&spec).await;
                return Ok(());
            }
            Err(e) => return Err(store_failed(e)),
        };
        if job.attempts > 1 {
            tracing::info!(build = %row.id, attempt = job.attempts, "template build runs again");
            self.files.clear_partial(&row.id);
        }
        let source = match (&spec.spec, &spec.tarball, &spec.stored) {
            (Some(text), _, _) => match self.host.check_spec(text) {
                Ok(_) => BuildSource::Spec(text.clone()),
                Err(e) => return self.fail_row(row, format!("spec: {e}")).await,
            },
            (None, _, Some(m)) => BuildSource::OciStored {
                ws: super::STORED_UPLOADS.to_owned(),
                manifest: m.clone(),
                disk_mb: spec.disk_mb,
            },
            (None, Some(t), None) => BuildSource::Oci {
                tarball: t.clone(),
                disk_mb: spec.disk_mb,
            },
            (None, None, None) => {
                return self
                    .fail_row(row, "build job without a source".into())
                    .await
            }
        };
        self.run(row, source)
            .await
            .map_err(|e| failed("template build", &e))?;
        self.forget_upload(&spec).await;
        Ok(())
    }

    /// The stored upload of build job `spec`, if it has one, no longer named by a manifest
    /// once its build has ended: the chunk collector takes it back. A failure is logged (the
    /// upload then stays).
    pub(super) async fn forget_upload(&self, spec: &BuildJob) {
        let (Some(objects), Some(_)) = (&self.uploads, &spec.stored) else {
            return;
        };
        if let Err(e) = objects
            .delete_manifest(super::STORED_UPLOADS, super::UPLOAD_MANIFESTS, &spec.build)
            .await
        {
            tracing::warn!(build = %spec.build, error = &e as &dyn std::error::Error, "a built template's stored upload stays in the object store");
        }
    }

    async fn fail_row(&self, mut row: TemplateBuildRow, message: String) -> Result<(), Failure> {
        row.error = Some(message);
        self.set(&mut row, BuildStatus::Failed)
            .await
            .map_err(store_failed)
    }

    /// Moves the build to `status`; a build that becomes ready or failed is an event.
    async fn set(&self, row: &mut TemplateBuildRow, status: BuildStatus) -> Result<(), StoreError> {
        let was = row.status;
        row.status = status;
        row.updated_at = now_ms();
        self.store.template_builds().update(row).await?;
        let ended = match status {
            _ if was == status => None,
            BuildStatus::Ready => Some("template.build_succeeded"),
            BuildStatus::Failed => Some("template.build_failed"),
            _ => None,
        };
        if let Some(ty) = ended {
            let data = serde_json::json!({
                "build": row.id,
                "version": row.version,
                "error": row.error,
            });
            self.events
                .emit(
                    &row.workspace_id,
                    ty,
                    ResourceKind::Template,
                    &row.name,
                    data,
                )
                .await;
        }
        Ok(())
    }

    async fn run(
        &self,
        mut row: TemplateBuildRow,
        source: BuildSource,
    ) -> Result<(), TemplateError> {
        let dir = self.files.dir(&row.id);
        std::fs::create_dir_all(&dir).map_err(|source| TemplateError::Io {
            what: "build directory",
            source,
        })?;
        let mut log = BuildLog::open(&dir.join(LOG));
        log.line(&format!(
            "template {} version {} from {}: queued",
            row.name,
            row.version,
            row.source.as_str()
        ));
        let _permit = Arc::clone(&self.running).acquire_owned().await;
        let result = self.build_and_bake(&mut row, source, &dir, &mut log).await;
        // The upload was kept until now so that a build cut off by a restart can run again.
        let _ = std::fs::remove_file(dir.join(UPLOAD));
        if let Err(message) = result {
            log.line(&format!("failed: {message}"));
            row.error = Some(message);
            // The bake cleans up after itself; the built image is of no use to anyone.
            let _ = std::fs::remove_file(dir.join(IMAGE));
            self.set(&mut row, BuildStatus::Failed).await?;
        }
        Ok(())
    }

    async fn build_and_bake(
        &self,
        row: &mut TemplateBuildRow,
        source: BuildSource,
        dir: &Path,
        log: &mut BuildLog,
    ) -> Result<(), Failure> {
        self.set(row, BuildStatus::Building)
            .await
            .map_err(store_failed)?;
        log.line("building the root filesystem");
        let started = Instant::now();
        // Lines from the blocking build thread go to the same file.
        let mut thread_log = log.another(&dir.join(LOG));
        let built = self
            .host
            .build_image(
                &row.id,
                source,
                dir.to_owned(),
                Box::new(move |line| thread_log.line(line)),
            )
            .await
            .map_err(|e| match e {
                HostError::BuildFailed(m) => m,
                e => failed("build", &e),
            })?;
        row.build_ms = Some(started.elapsed().as_millis() as i64);
        row.image_bytes = allocated_bytes(&built.image);
        row.disk_mb = i64::from(built.disk_mb);
        if let Some(shape) = built.shape {
            row.vcpus = i64::from(shape.vcpus);
            row.memory_mib = i64::from(shape.memory_mib);
        }
        // Disk limits are the host's to keep with the baked template (the row has no column
        // for them).
        let disk = built.shape.and_then(|s| s.disk);
        let kept = self.files.dir(&row.id).join(DISK_LIMITS);
        match disk {
            Some(d) => std::fs::write(&kept, serde_json::to_vec(&d).unwrap_or_default())
                .map_err(|e| failed("keep disk limits", &e))?,
            None => {
                let _ = std::fs::remove_file(&kept);
            }
        }
        row.env = built
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        log.line(&format!(
            "image built in {:.1}s: {} MiB allocated, disk {} MiB",
            started.elapsed().as_secs_f64(),
            row.image_bytes.unwrap_or(0) >> 20,
            row.disk_mb
        ));
        self.bake(row, &built.image, disk, log).await
    }

    async fn bake(
        &self,
        row: &mut TemplateBuildRow,
        image: &Path,
        disk: Option<pandastack_host::DiskLimits>,
        log: &mut BuildLog,
    ) -> Result<(), Failure> {
        // A re-bake of a ready version keeps serving the earlier bake until the new one is in
        // place.
        if row.status != BuildStatus::Ready {
            self.set(row, BuildStatus::Baking)
                .await
                .map_err(store_failed)?;
        }
        log.line(&format!(
            "baking: cold boot with {} vCPU, {} MiB, then snapshot",
            row.vcpus, row.memory_mib
        ));
        let shape = Shape {
            vcpus: row.vcpus as u32,
            memory_mib: row.memory_mib as u32,
            disk,
        };
        let bake_ms = self
            .host
            .bake_image(&row.id, image, shape)
            .await
            .map_err(|e| failed("bake", &e))?;
        row.bake_ms = Some(bake_ms as i64);
        row.error = None;
        log.line(&format!("baked in {bake_ms} ms: ready"));
        self.set(row, BuildStatus::Ready)
            .await
            .map_err(store_failed)?;
        Ok(())
    }

    /// Re-bakes a ready version from its kept image (after any build under way).
    pub(super) async fn rebake_version(
        &self,
        mut row: TemplateBuildRow,
    ) -> Result<(), TemplateError> {
        let dir = self.files.dir(&row.id);
        let image = dir.join(IMAGE);
        if !image.is_file() {
            return Err(TemplateError::ImageGone {
                name: row.name,
                version: row.version,
            });
        }
        let mut log = BuildLog::open(&dir.join(LOG));
        log.line("re-bake requested");
        // The disk limits its spec named, kept at its build.
        let disk = std::fs::read(dir.join(DISK_LIMITS))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let _permit = Arc::clone(&self.running).acquire_owned().await;
        match self.bake(&mut row, &image, disk, &mut log).await {
            Ok(()) => Ok(()),
            Err(m) => {
                log.line(&format!("re-bake failed: {m}"));
                // The earlier bake stays in place when a new one fails: still ready.
                self.set(&mut row, BuildStatus::Ready).await?;
                Err(TemplateError::RebakeFailed(m))
            }
        }
    }
}

/// Blocks the file occupies (sparse images are much smaller than their size).
fn allocated_bytes(path: &Path) -> Option<i64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.blocks() * 512) as i64)
}
