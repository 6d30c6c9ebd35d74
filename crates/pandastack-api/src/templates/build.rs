//! Template builds in the background: one at a time (a build is heavy: a Debian bootstrap or a
//! multi-GiB unpack, then a cold boot), each with a log file, its row moving
//! `queued → building → baking → ready | failed`. Each build's files live in
//! `<dir>/<build id>/`: the uploaded tarball (removed once unpacked), the built image (kept for
//! re-bakes) and `build.log`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use futures::StreamExt;
use pandastack_api_types::ErrorCode;
use pandastack_host::{error_chain, BuildSource, HostError, Shape};
use pandastack_store::{now_ms, BuildStatus, NewJob, Store, TemplateBuildRow};
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult};
use crate::App;

/// Where builds keep their files and how large an upload may be.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub dir: PathBuf,
    pub max_upload_bytes: u64,
}

pub(crate) struct Builds {
    cfg: BuildConfig,
    /// One build at a time on this host.
    running: Arc<Semaphore>,
    /// Wakes the build worker when a job is queued.
    pub(crate) wake: tokio::sync::Notify,
}

const LOG: &str = "build.log";
const UPLOAD: &str = "upload.tar";

impl Builds {
    pub(crate) fn new(cfg: BuildConfig) -> Self {
        Self {
            cfg,
            running: Arc::new(Semaphore::new(1)),
            wake: tokio::sync::Notify::new(),
        }
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.cfg.dir.join(id)
    }

    pub(crate) fn log_path(&self, id: &str) -> PathBuf {
        self.dir(id).join(LOG)
    }

    /// Refuses an upload whose `Content-Length` is over the limit before reading it.
    pub(crate) fn check_length(&self, headers: &axum::http::HeaderMap) -> ApiResult<()> {
        let len = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match len {
            Some(n) if n > self.cfg.max_upload_bytes => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    fn too_large(&self) -> ApiError {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "image tarball larger than this server's limit of {} MiB",
                self.cfg.max_upload_bytes >> 20
            ),
        )
    }

    /// Streams an uploaded tarball to the build's directory, up to the configured size.
    pub(crate) async fn receive(&self, id: &str, body: Body) -> ApiResult<PathBuf> {
        let dir = self.dir(id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| ApiError::internal("build directory", &e))?;
        let path = dir.join(UPLOAD);
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| ApiError::internal("upload file", &e))?;
        let mut stream = body.into_data_stream();
        let mut total = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(ErrorCode::InvalidArgument, format!("upload cut short: {e}"))
            })?;
            total += chunk.len() as u64;
            if total > self.cfg.max_upload_bytes {
                return Err(self.too_large());
            }
            file.write_all(&chunk).await.map_err(|e| {
                if e.raw_os_error() == Some(28) {
                    ApiError::new(
                        ErrorCode::InsufficientStorage,
                        "no space left for the upload",
                    )
                } else {
                    ApiError::internal("upload write", &e)
                }
            })?;
        }
        file.flush()
            .await
            .map_err(|e| ApiError::internal("upload write", &e))?;
        if total == 0 {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "empty body: send the image tarball",
            ));
        }
        Ok(path)
    }

    /// Removes what an attempt cut off left in a build's directory (work directories, a
    /// half-built image), keeping the upload and the log.
    fn clear_partial(&self, id: &str) {
        let Ok(entries) = std::fs::read_dir(self.dir(id)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name == UPLOAD || name == LOG {
                continue;
            }
            let path = e.path();
            let removed = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = removed {
                tracing::warn!(path = %path.display(), error = &e as &dyn std::error::Error, "clear a cut-off build");
            }
        }
    }

    /// Removes a build's files.
    pub(crate) fn discard(&self, id: &str) {
        let dir = self.dir(id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    build = id,
                    error = &e as &dyn std::error::Error,
                    "remove build files"
                );
            }
        }
    }

    /// Settles what a previous server process on this host left: its running build jobs go
    /// back to the queue (the worker runs them again from the start); builds under way without
    /// a job (cut off while their upload was still arriving) are marked failed; build
    /// directories no row owns are removed.
    pub async fn recover(
        &self,
        store: &Store,
        host_id: &str,
    ) -> Result<(), pandastack_store::StoreError> {
        let requeued = store.jobs().requeue_running(host_id).await?;
        if requeued > 0 {
            tracing::info!(
                jobs = requeued,
                "build jobs cut off by a restart queued again"
            );
        }
        for mut row in store.template_builds().unfinished(host_id).await? {
            let resource = format!("template_build:{}", row.id);
            if store.jobs().incomplete(&resource).await?.is_some() {
                continue;
            }
            row.status = BuildStatus::Failed;
            row.error = Some("the server restarted during the build; build again".into());
            row.updated_at = now_ms();
            store.template_builds().update(&row).await?;
        }
        let known = store.template_builds().ids_on_host(host_id).await?;
        if let Ok(dir) = std::fs::read_dir(&self.cfg.dir) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !known.contains(&name) {
                    self.discard(&name);
                }
            }
        }
        Ok(())
    }
}

/// Reads and drops up to 64 MiB of a refused upload, for at most 10 s (see the caller).
pub(crate) async fn drain(body: Body) {
    const MAX: usize = 64 << 20;
    let mut stream = body.into_data_stream();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut seen = 0;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > MAX {
                break;
            }
        }
    })
    .await;
}

/// A build's log file, line by line with the time since the build started.
pub(super) struct BuildLog {
    file: Option<std::fs::File>,
    started: Instant,
}

impl BuildLog {
    fn open(path: &Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| tracing::warn!(path = %path.display(), error = &e as &dyn std::error::Error, "build log"))
            .ok();
        Self {
            file,
            started: Instant::now(),
        }
    }

    pub(super) fn line(&mut self, text: &str) {
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "[{:7.1}s] {text}", self.started.elapsed().as_secs_f64());
        }
    }
}

/// What a build job needs to run its build again from the start: the build's id and its
/// source (a spec's text, or the uploaded tarball, which is kept until the build ends).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct BuildJob {
    pub build: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tarball: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u32>,
}

/// Job kind of template builds in the jobs table.
pub(crate) const JOB_KIND: &str = "template_build";
/// A running build renews its lease this often; a lease lasts three times as long.
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// Attempts per build (a server killed mid-build counts one).
const MAX_ATTEMPTS: i64 = 3;

/// Queues `job` (a durable row: a restart of the server runs it again) and wakes the worker.
pub(crate) async fn enqueue(app: &App, job: BuildJob) -> ApiResult<()> {
    let new = NewJob {
        kind: JOB_KIND.into(),
        resource: format!("template_build:{}", job.build),
        host_id: Some(app.host_id.clone()),
        payload: serde_json::to_value(&job).map_err(|e| ApiError::internal("build job", &e))?,
        max_attempts: MAX_ATTEMPTS,
        run_after: 0,
    };
    app.store
        .template_builds()
        .enqueue_build(&job.build, &new)
        .await?;
    app.builds.wake.notify_one();
    Ok(())
}

/// Runs this host's build jobs one after another, for the life of the server.
pub(crate) async fn worker(app: Arc<App>) {
    let owner = format!("{}/{}", app.host_id, std::process::id());
    let lease = (LEASE_RENEW * 3).as_millis() as i64;
    loop {
        let job = match app.store.jobs().claim(&app.host_id, &owner, lease).await {
            Ok(Some(j)) if j.kind == JOB_KIND => j,
            Ok(Some(j)) => {
                // Not ours to run (another kind of job pinned to this host): give it back.
                let _ = app
                    .store
                    .jobs()
                    .fail(&j.id, &owner, "no runner for this kind of job", None)
                    .await;
                continue;
            }
            Ok(None) => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), app.builds.wake.notified()).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = &e as &dyn std::error::Error, "claim a build job");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        let renew = {
            let (app, id, owner) = (Arc::clone(&app), job.id.clone(), owner.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LEASE_RENEW).await;
                    if let Err(e) = app.store.jobs().renew(&id, &owner, lease).await {
                        tracing::warn!(job = %id, error = &e as &dyn std::error::Error, "renew build lease");
                    }
                }
            })
        };
        let result = run_job(&app, &job).await;
        renew.abort();
        let done = match result {
            Ok(()) => app.store.jobs().complete(&job.id, &owner).await,
            Err(message) => app
                .store
                .jobs()
                .fail(&job.id, &owner, &message, Some(now_ms() + 10_000))
                .await
                .map(|_| ()),
        };
        if let Err(e) = done {
            tracing::warn!(job = %job.id, error = &e as &dyn std::error::Error, "finish build job");
        }
    }
}

/// Runs one build job: the build, from its start, whatever an earlier attempt left.
async fn run_job(app: &Arc<App>, job: &pandastack_store::JobRow) -> Result<(), String> {
    let spec: BuildJob =
        serde_json::from_value(job.payload.clone()).map_err(|e| format!("job payload: {e}"))?;
    let row = match app.store.template_builds().by_id(&spec.build).await {
        Ok(Some(r)) if r.status.active() => r,
        // Deleted, or finished just before the previous process stopped: nothing to do.
        Ok(_) => return Ok(()),
        Err(e) => return Err(format!("state store: {}", error_chain(&e))),
    };
    if job.attempts > 1 {
        tracing::info!(build = %row.id, attempt = job.attempts, "template build runs again");
        app.builds.clear_partial(&row.id);
    }
    let source = match (&spec.spec, &spec.tarball) {
        (Some(text), _) => match app.host.check_spec(text) {
            Ok(_) => BuildSource::Spec(text.clone()),
            Err(e) => return fail_row(app, row, format!("spec: {e}")).await,
        },
        (None, Some(t)) => BuildSource::Oci {
            tarball: t.clone(),
            disk_mb: spec.disk_mb,
        },
        (None, None) => return fail_row(app, row, "build job without a source".into()).await,
    };
    run(app, row, source).await.map_err(|e| e.message)
}

async fn fail_row(app: &App, mut row: TemplateBuildRow, message: String) -> Result<(), String> {
    row.error = Some(message);
    set(&app.store, &mut row, BuildStatus::Failed)
        .await
        .map_err(|e| e.message)
}

async fn set(store: &Store, row: &mut TemplateBuildRow, status: BuildStatus) -> ApiResult<()> {
    row.status = status;
    row.updated_at = now_ms();
    store.template_builds().update(row).await?;
    Ok(())
}

async fn run(app: &Arc<App>, mut row: TemplateBuildRow, source: BuildSource) -> ApiResult<()> {
    let dir = app.builds.dir(&row.id);
    std::fs::create_dir_all(&dir).map_err(|e| ApiError::internal("build directory", &e))?;
    let mut log = BuildLog::open(&dir.join(LOG));
    log.line(&format!(
        "template {} version {} from {}: queued",
        row.name,
        row.version,
        row.source.as_str()
    ));
    let _permit = Arc::clone(&app.builds.running).acquire_owned().await;
    let result = build_and_bake(app, &mut row, source, &dir, &mut log).await;
    // The upload was kept until now so that a build cut off by a restart can run again.
    let _ = std::fs::remove_file(dir.join(UPLOAD));
    if let Err(message) = result {
        log.line(&format!("failed: {message}"));
        row.error = Some(message);
        // The bake cleans up after itself; the built image is of no use to anyone.
        let _ = std::fs::remove_file(dir.join("rootfs.ext4"));
        set(&app.store, &mut row, BuildStatus::Failed).await?;
    }
    Ok(())
}

/// Why a build failed, as its row and log say it.
type Failure = String;

fn failed(what: &str, e: &(dyn std::error::Error + 'static)) -> Failure {
    format!("{what}: {}", error_chain(e))
}

fn store_failed(e: ApiError) -> Failure {
    format!("state store: {}", e.message)
}

async fn build_and_bake(
    app: &Arc<App>,
    row: &mut TemplateBuildRow,
    source: BuildSource,
    dir: &Path,
    log: &mut BuildLog,
) -> Result<(), Failure> {
    set(&app.store, row, BuildStatus::Building)
        .await
        .map_err(store_failed)?;
    log.line("building the root filesystem");
    let started = Instant::now();
    // Lines from the blocking build thread go to the same file.
    let mut thread_log = BuildLog::open(&dir.join(LOG));
    thread_log.started = log.started;
    let built = app
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
    bake(app, row, &built.image, log).await
}

async fn bake(
    app: &Arc<App>,
    row: &mut TemplateBuildRow,
    image: &Path,
    log: &mut BuildLog,
) -> Result<(), Failure> {
    // A re-bake of a ready version keeps serving the earlier bake until the new one is in place.
    if row.status != BuildStatus::Ready {
        set(&app.store, row, BuildStatus::Baking)
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
    };
    let bake_ms = app
        .host
        .bake_image(&row.id, image, shape)
        .await
        .map_err(|e| failed("bake", &e))?;
    row.bake_ms = Some(bake_ms as i64);
    row.error = None;
    log.line(&format!("baked in {bake_ms} ms: ready"));
    set(&app.store, row, BuildStatus::Ready)
        .await
        .map_err(store_failed)?;
    Ok(())
}

/// Re-bakes a ready version from its kept image.
pub(crate) async fn rebake(app: &Arc<App>, mut row: TemplateBuildRow) -> ApiResult<()> {
    let dir = app.builds.dir(&row.id);
    let image = dir.join("rootfs.ext4");
    if !image.is_file() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "the image of {} version {} is gone; build the template again",
                row.name, row.version
            ),
        ));
    }
    let mut log = BuildLog::open(&dir.join(LOG));
    log.line("re-bake requested");
    let _permit = Arc::clone(&app.builds.running).acquire_owned().await;
    match bake(app, &mut row, &image, &mut log).await {
        Ok(()) => Ok(()),
        Err(m) => {
            log.line(&format!("re-bake failed: {m}"));
            // The earlier bake stays in place when a new one fails: still ready.
            set(&app.store, &mut row, BuildStatus::Ready).await?;
            Err(ApiError::new(
                ErrorCode::Internal,
                format!("re-bake failed: {m}"),
            ))
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
