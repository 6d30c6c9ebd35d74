//! A build's files in `<dir>/<build id>/`: the uploaded tarball (removed once the build ends),
//! the built image `rootfs.ext4` (kept for re-bakes) and `build.log`.

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::{BuildConfig, TemplateError};

pub(super) const LOG: &str = "build.log";
pub(super) const UPLOAD: &str = "upload.tar";
pub(super) const IMAGE: &str = "rootfs.ext4";

/// The build file area of this host.
#[derive(Clone)]
pub(super) struct Files {
    cfg: Arc<BuildConfig>,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> TemplateError {
    move |source| TemplateError::Io { what, source }
}

impl Files {
    pub(super) fn new(cfg: BuildConfig) -> Self {
        Self { cfg: Arc::new(cfg) }
    }

    pub(super) fn dir(&self, id: &str) -> PathBuf {
        self.cfg.dir.join(id)
    }

    pub(super) fn log_path(&self, id: &str) -> PathBuf {
        self.dir(id).join(LOG)
    }

    fn too_large(&self) -> TemplateError {
        TemplateError::UploadTooLarge {
            limit_mib: self.cfg.max_upload_bytes >> 20,
        }
    }

    /// Refuses an upload whose announced length is over the limit before reading it.
    pub(super) fn check_length(&self, len: Option<u64>) -> Result<(), TemplateError> {
        match len {
            Some(n) if n > self.cfg.max_upload_bytes => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    /// Streams an uploaded tarball to the build's directory, up to the configured size.
    pub(super) async fn receive<S, E>(&self, id: &str, upload: S) -> Result<PathBuf, TemplateError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: Display,
    {
        let dir = self.dir(id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(io("build directory"))?;
        let path = dir.join(UPLOAD);
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(io("upload file"))?;
        let mut upload = std::pin::pin!(upload);
        let mut total = 0u64;
        while let Some(chunk) = upload.next().await {
            let chunk = chunk.map_err(|e| TemplateError::UploadCut(e.to_string()))?;
            total += chunk.len() as u64;
            if total > self.cfg.max_upload_bytes {
                return Err(self.too_large());
            }
            file.write_all(&chunk).await.map_err(|e| {
                if e.raw_os_error() == Some(ENOSPC) {
                    TemplateError::NoSpace
                } else {
                    io("upload write")(e)
                }
            })?;
        }
        file.flush().await.map_err(io("upload write"))?;
        if total == 0 {
            return Err(TemplateError::EmptyUpload);
        }
        Ok(path)
    }

    /// Removes what an attempt cut off left in a build's directory (work directories, a
    /// half-built image), keeping the upload and the log.
    pub(super) fn clear_partial(&self, id: &str) {
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
    pub(super) fn discard(&self, id: &str) {
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

    /// Removes the directories of builds not in `known`.
    pub(super) fn remove_unknown(&self, known: &[String]) {
        if let Ok(dir) = std::fs::read_dir(&self.cfg.dir) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !known.contains(&name) {
                    self.discard(&name);
                }
            }
        }
    }
}

/// `ENOSPC` (the same number on every Linux architecture).
const ENOSPC: i32 = 28;

/// Reads and drops up to 64 MiB of a refused upload, for at most 10 s: a client still sending
/// then gets the refusal rather than a reset connection.
pub async fn drain_upload<S, E>(upload: S)
where
    S: Stream<Item = Result<Bytes, E>> + Send,
{
    const MAX: usize = 64 << 20;
    let mut upload = std::pin::pin!(upload);
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut seen = 0;
        while let Some(Ok(chunk)) = upload.next().await {
            seen += chunk.len();
            if seen > MAX {
                break;
            }
        }
    })
    .await;
}

/// A build's log file, line by line with the time since the build started.
pub(crate) struct BuildLog {
    file: Option<std::fs::File>,
    started: Instant,
}

impl BuildLog {
    pub(crate) fn open(path: &Path) -> Self {
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

    /// Another writer of the same file, counting from the same start.
    pub(super) fn another(&self, path: &Path) -> Self {
        Self {
            started: self.started,
            ..Self::open(path)
        }
    }

    pub(crate) fn line(&mut self, text: &str) {
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "[{:7.1}s] {text}", self.started.elapsed().as_secs_f64());
        }
    }
}
