//! A deploy's upload and log carried between control-plane replicas through the object store.
//!
//! A deploy's source tarball (an app's upload, a function's inline files packed) is written in
//! the deploy's directory by the replica that took the request. In a cluster the replica that
//! runs the deploy (whichever holds the workers' lock) may be another, with a disk of its own:
//! so a cluster's replica also keeps the tarball in the object store every replica shares
//! (`ws/<ws>/blobs/deploy-uploads/<deploy id>/upload.tar.gz`) before it queues the deploy, and
//! the runner fetches it when its own directory lacks it. The blob goes when the deploy ends.
//!
//! The log is written where the deploy runs. A cluster's runner ships what it appended about
//! once a second ([`SHIP_EVERY`]) as a blob named by its offset
//! (`…/blobs/deploy-logs/<deploy id>/<offset, 16 digits>`), and once more at the end; a replica
//! without the log file reads (and follows) those pieces, a second or so behind.
//!
//! A single-node server keeps only the files (no copy, no object store write).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pandastack_host::{LogChunk, LogPos};
use pandastack_objects::{Objects, ObjectsError};

use super::shared::{Shared, SharedError};
use super::UPLOAD;
use crate::PlaceMode;

/// The object store kind of deploy uploads.
const UPLOADS: &str = "deploy-uploads";
/// The object store kind of deploy logs' pieces.
const LOGS: &str = "deploy-logs";
/// How often a cluster's runner ships what its deploy's log gained.
pub(crate) const SHIP_EVERY: Duration = Duration::from_secs(1);
/// The file identity of a log read from shipped pieces ([`LogPos::file`]; never an inode).
const SHIPPED: u64 = 0;

impl Shared {
    /// Whether deploys may run on another replica than the one that took the request.
    fn across_replicas(&self) -> bool {
        self.sandboxes.place_mode() == PlaceMode::AcrossHosts
    }

    /// In a cluster, keeps deploy `deploy`'s upload (in its directory) in the object store too.
    pub(crate) async fn carry_upload(&self, ws: &str, deploy: &str) -> Result<(), SharedError> {
        if !self.across_replicas() {
            return Ok(());
        }
        let path = self.deploy_dir(deploy).join(UPLOAD);
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| SharedError::Upload(format!("read {}: {e}", path.display())))?;
        self.objects
            .put_blob(ws, UPLOADS, deploy, UPLOAD, bytes.into())
            .await
            .map_err(|e| carry_error("keep the upload in the object store", e))
    }

    /// Deploy `deploy`'s upload in `dir` (its directory here), fetched from the object store
    /// when another replica took the request.
    pub(crate) async fn fetch_upload(
        &self,
        ws: &str,
        deploy: &str,
        dir: &Path,
    ) -> Result<(), SharedError> {
        let path = dir.join(UPLOAD);
        if !self.across_replicas() || path.exists() {
            return Ok(());
        }
        let bytes = self
            .objects
            .get_blob(ws, UPLOADS, deploy, UPLOAD)
            .await
            .map_err(|e| carry_error("fetch the upload from the object store", e))?;
        let io = |e: std::io::Error| SharedError::Upload(format!("write {}: {e}", path.display()));
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
        tokio::fs::write(&path, &bytes).await.map_err(io)
    }

    /// Removes deploy `deploy`'s carried upload (absent is fine); a failure is logged.
    pub(crate) async fn drop_carried_upload(&self, ws: &str, deploy: &str) {
        if !self.across_replicas() {
            return;
        }
        if let Err(e) = self.objects.delete_blob(ws, UPLOADS, deploy, UPLOAD).await {
            tracing::warn!(
                deploy,
                error = &e as &dyn std::error::Error,
                "removing a deploy's upload from the object store"
            );
        }
    }
}

impl Shared {
    /// Reads at most `max` bytes of deploy `deploy`'s log from `from`: the file here, or (a
    /// cluster, the deploy run by another replica) the pieces its runner shipped.
    pub(crate) async fn read_deploy_log(
        &self,
        ws: &str,
        deploy: &str,
        from: Option<LogPos>,
        max: usize,
    ) -> Result<LogChunk, String> {
        let path = self.log_path(deploy);
        if !self.across_replicas() || path.exists() {
            return tokio::task::spawn_blocking(move || {
                pandastack_host::read_log(&path, from, max)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string());
        }
        let start = from.filter(|p| p.file == SHIPPED).map_or(0, |p| p.offset);
        let restarted = from.is_some_and(|p| p.file != SHIPPED);
        let pieces = self
            .objects
            .list_blobs(ws, LOGS, deploy)
            .await
            .map_err(|e| pandastack_host::error_chain(&e))?;
        let mut data = Vec::new();
        let mut next = start;
        for p in pieces {
            let Ok(offset) = p.name.parse::<u64>() else {
                continue;
            };
            if offset < next || (!data.is_empty() && data.len() + p.size as usize > max) {
                continue;
            }
            if offset > next {
                break; // a piece not shipped yet (or lost): wait for it
            }
            let bytes = self
                .objects
                .get_blob(ws, LOGS, deploy, &p.name)
                .await
                .map_err(|e| pandastack_host::error_chain(&e))?;
            next = offset + bytes.len() as u64;
            data.extend_from_slice(&bytes);
        }
        Ok(LogChunk {
            data: data.into(),
            next: Some(LogPos {
                file: SHIPPED,
                offset: next,
            }),
            restarted,
        })
    }

    /// In a cluster, ships deploy `deploy`'s log (appended to here) to the object store until
    /// the returned shipper is finished. `None` on a single-node server.
    pub(crate) fn ship_log(&self, ws: &str, deploy: &str) -> Option<LogShipper> {
        if !self.across_replicas() {
            return None;
        }
        let mut piece = Piece {
            objects: self.objects.clone(),
            ws: ws.to_owned(),
            deploy: deploy.to_owned(),
            path: self.log_path(deploy),
            shipped: 0,
        };
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                let last = tokio::select! {
                    _ = tokio::time::sleep(SHIP_EVERY) => false,
                    _ = &mut stopped => true,
                };
                piece.ship().await;
                if last {
                    return;
                }
            }
        });
        Some(LogShipper { stop, task })
    }

    /// Removes what a deploy keeps: its directory here and what it carried in the object store
    /// (a failure is logged).
    pub(crate) async fn forget_deploy(&self, ws: &str, deploy: &str) {
        let _ = std::fs::remove_dir_all(self.deploy_dir(deploy));
        if !self.across_replicas() {
            return;
        }
        self.drop_carried_upload(ws, deploy).await;
        let pieces = match self.objects.list_blobs(ws, LOGS, deploy).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    deploy,
                    error = &e as &dyn std::error::Error,
                    "listing a deploy's log in the object store"
                );
                return;
            }
        };
        for p in pieces {
            if let Err(e) = self.objects.delete_blob(ws, LOGS, deploy, &p.name).await {
                tracing::warn!(
                    deploy,
                    error = &e as &dyn std::error::Error,
                    "removing a deploy's log from the object store"
                );
            }
        }
    }
}

/// A deploy log's shipping (see [`Shared::ship_log`]).
pub(crate) struct LogShipper {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl LogShipper {
    /// Ships what is left and stops.
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// What a shipper knows of its log.
struct Piece {
    objects: Objects,
    ws: String,
    deploy: String,
    path: PathBuf,
    /// Bytes of the file shipped so far.
    shipped: u64,
}

impl Piece {
    /// Ships what the file gained since the last time (a failure is logged and tried again).
    async fn ship(&mut self) {
        let path = self.path.clone();
        let from = self.shipped;
        let read = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(from))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            Ok(buf)
        })
        .await;
        let bytes = match read {
            Ok(Ok(b)) if !b.is_empty() => b,
            Ok(Ok(_)) => return,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return,
            Ok(Err(e)) => {
                tracing::warn!(deploy = %self.deploy, error = &e as &dyn std::error::Error, "reading a deploy's log to ship");
                return;
            }
            Err(e) => {
                tracing::warn!(deploy = %self.deploy, error = &e as &dyn std::error::Error, "reading a deploy's log to ship");
                return;
            }
        };
        let name = format!("{from:016}");
        let len = bytes.len() as u64;
        match self
            .objects
            .put_blob(&self.ws, LOGS, &self.deploy, &name, bytes.into())
            .await
        {
            Ok(()) => self.shipped += len,
            // A put that went through once its answer was lost: what it wrote counts.
            Err(ObjectsError::Conflict { .. }) => {
                match self
                    .objects
                    .get_blob(&self.ws, LOGS, &self.deploy, &name)
                    .await
                {
                    Ok(b) => self.shipped += b.len() as u64,
                    Err(e) => {
                        tracing::warn!(deploy = %self.deploy, error = &e as &dyn std::error::Error, "reading a shipped piece of a deploy's log")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(deploy = %self.deploy, error = &e as &dyn std::error::Error, "shipping a deploy's log")
            }
        }
    }
}

fn carry_error(what: &str, source: ObjectsError) -> SharedError {
    SharedError::Carry {
        what: what.to_owned(),
        source: Box::new(source),
    }
}
