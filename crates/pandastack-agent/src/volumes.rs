//! Volumes on this host: ext4 files under the data directory (`volumes/<id>.img`), their
//! snapshots (`volume-snapshots/<id>.img`, reflink copies), sandboxes created with volumes
//! mounted, and transfers to and from the object store.
//!
//! ```text
//!   snapshot / read-only mount of a volume held read-write by a running sandbox:
//!     holder's lock ─► fsfreeze -f <path> (guest) ─► reflink on the host ─► fsfreeze -u <path>
//!   grow:       reflink to .<id>.img.grow ─► extend ─► e2fsck -f -p ─► resize2fs ─► rename over
//!   restore:    snapshot reflink / download ─► .<id>.img.new ─► grow? ─► rename (no replace)
//! ```
//!
//! Every file is written under a dot-name beside its final one and renamed into place when
//! complete, so an operation cut off half-way leaves no half volume under a volume's name (the
//! runtime's reconcile removes the dot-files at the next start). The caller serialises
//! operations on one volume id (a grow while a snapshot of the same volume is taken is its
//! mistake); ids are checked ([`pandastack_runtime::valid_id`]) before they name a path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_host::{
    DiskRequest, VolumeHolder, VolumeMount, VolumeSnapshotView, VolumeUpload, VolumeView,
};
use pandastack_objects::{Manifest, ObjectsError};
use pandastack_runtime::files::clone_file;
use pandastack_runtime::{valid_id, CreateError, FreezeError, MountError, SlotSource, VolumeDisk};
use pandastack_vm::VmDriver;

use crate::entry::SandboxVm;
use crate::{AgentError, HostAgent, SandboxView};

/// Chunk size of volume uploads. Measured on a 1 GiB volume holding a 40 MiB file (test
/// `upload_and_download_are_incremental_and_exact` in `host_volumes`): after the guest rewrote
/// 10 MiB of it, 1 MiB chunks sent 12 chunks (12 MiB: the data plus two chunks of ext4
/// metadata and journal), 4 MiB chunks 5 chunks (20 MiB: each dirtied metadata block costs a
/// whole chunk), 256 KiB chunks 11 MiB. Smaller chunks than 1 MiB save little and cost more
/// requests and a longer manifest (1 GiB in 1 MiB chunks: 1024 entries).
pub const VOLUME_CHUNK_SIZE: u64 = 1 << 20;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeFileError {
    #[error("invalid volume id {0:?}")]
    InvalidId(String),
    #[error("volume {0} not found")]
    NotFound(String),
    #[error("volume snapshot {0} not found")]
    SnapshotNotFound(String),
    #[error("volume {0} exists already")]
    Exists(String),
    #[error("volume snapshot {0} exists already")]
    SnapshotExists(String),
    #[error("volume size {0}: must be a multiple of 4096")]
    BadSize(u64),
    #[error("volume {id} has {size} bytes: it cannot shrink to {wanted}")]
    Shrink { id: String, size: u64, wanted: u64 },
    #[error("template {template} has {slots} volume slots; {wanted} volumes were asked for")]
    TooMany {
        template: String,
        slots: usize,
        wanted: usize,
    },
    #[error("no object store is configured on this host")]
    NoObjectStore,
    #[error("object store")]
    Objects(#[source] Box<ObjectsError>),
    #[error("freeze {path} in sandbox {sandbox}")]
    Freeze {
        sandbox: String,
        path: String,
        #[source]
        source: Box<FreezeError>,
    },
    #[error("thaw {path} in sandbox {sandbox}")]
    Thaw {
        sandbox: String,
        path: String,
        #[source]
        source: Box<FreezeError>,
    },
    #[error("mount volume {volume} at {path}")]
    Mount {
        volume: String,
        path: String,
        #[source]
        source: Box<MountError>,
    },
    #[error("{tool} {} failed (exit {code}): {output}", path.display())]
    Tool {
        tool: &'static str,
        path: PathBuf,
        code: i32,
        output: String,
    },
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VolumeFileError {
    let path = path.to_owned();
    move |source| VolumeFileError::Io { op, path, source }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VolumeFileError> + Send + 'static,
) -> Result<T, VolumeFileError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| VolumeFileError::Io {
            op: "run file task",
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
}

/// Removes `path`; gone already is success.
fn remove(path: &Path) -> Result<(), VolumeFileError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// `path`'s size and allocated bytes.
fn view(id: &str, path: &Path) -> Result<VolumeView, VolumeFileError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(VolumeFileError::NotFound(id.into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(VolumeFileError::NotFound(id.into()))
        }
        Err(e) => return Err(io("stat", path)(e)),
    };
    Ok(VolumeView {
        id: id.to_owned(),
        size_bytes: meta.len(),
        allocated_bytes: meta.blocks() * 512,
    })
}

/// Ids of the `<id>.img` files in `dir` (dot-files are temporaries).
fn ids_in(dir: &Path) -> Result<Vec<String>, VolumeFileError> {
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let e = e.map_err(io("list", dir))?;
        let name = e.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".img")) else {
            continue;
        };
        if valid_id(id) && e.file_type().is_ok_and(|t| t.is_file()) {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    Ok(ids)
}

/// Renames `from` to `to` unless `to` exists (then `exists()`).
fn rename_new(
    from: &Path,
    to: &Path,
    exists: impl FnOnce() -> VolumeFileError,
) -> Result<(), VolumeFileError> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => Err(exists()),
        Err(e) => Err(io("rename into place", to)(e.into())),
    }
}

/// Runs `tool args… path`; fails unless its exit code is at most `max_ok`.
fn run_tool(
    tool: &'static str,
    args: &[&str],
    path: &Path,
    max_ok: i32,
) -> Result<(), VolumeFileError> {
    let out = std::process::Command::new(tool)
        .args(args)
        .arg(path)
        .output()
        .map_err(io(tool, path))?;
    let code = out.status.code().unwrap_or(-1);
    if (0..=max_ok).contains(&code) {
        return Ok(());
    }
    Err(VolumeFileError::Tool {
        tool,
        path: path.to_owned(),
        code,
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

/// Grows the ext4 volume file at `path` (no VM may have it open) to `size` bytes: extends the
/// file, checks the file system (`e2fsck -f -p`: `resize2fs` wants a fresh check) and grows it.
/// Works on `path` in place: call it on a copy.
fn grow_file(path: &Path, size: u64) -> Result<(), VolumeFileError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io("open", path))?;
    file.set_len(size).map_err(io("extend", path))?;
    drop(file);
    // e2fsck: 1 = errors corrected, 2 = corrected (reboot advised: not for a file).
    run_tool("e2fsck", &["-f", "-p"], path, 2)?;
    run_tool("resize2fs", &[], path, 0)
}

/// A temporary name beside `dest` for work that ends in a rename onto it.
fn temp_beside(dest: &Path, what: &str) -> PathBuf {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    dest.with_file_name(format!(".{name}.{what}"))
}

fn check_size(size: u64) -> Result<(), VolumeFileError> {
    if size.is_multiple_of(4096) {
        Ok(())
    } else {
        Err(VolumeFileError::BadSize(size))
    }
}

impl From<ObjectsError> for VolumeFileError {
    fn from(e: ObjectsError) -> Self {
        VolumeFileError::Objects(Box::new(e))
    }
}

impl<D: VmDriver + 'static> HostAgent<D> {
    fn volume_path(&self, id: &str) -> Result<PathBuf, VolumeFileError> {
        if !valid_id(id) {
            return Err(VolumeFileError::InvalidId(id.into()));
        }
        Ok(self.rt.data().volume(id))
    }

    fn volume_snapshot_path(&self, id: &str) -> Result<PathBuf, VolumeFileError> {
        if !valid_id(id) {
            return Err(VolumeFileError::InvalidId(id.into()));
        }
        Ok(self.rt.data().volume_snapshot(id))
    }

    fn objects(&self) -> Result<&pandastack_objects::Objects, VolumeFileError> {
        self.cfg
            .objects
            .as_ref()
            .ok_or(VolumeFileError::NoObjectStore)
    }

    /// Creates volume `id`: an empty ext4 file system of `size_bytes` in a sparse file.
    pub async fn create_volume(
        &self,
        id: &str,
        size_bytes: u64,
    ) -> Result<VolumeView, VolumeFileError> {
        let path = self.volume_path(id)?;
        let owned = id.to_owned();
        blocking(move || {
            match pandastack_runtime::create_volume_file(&path, size_bytes) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(VolumeFileError::Exists(owned))
                }
                Err(e) => return Err(io("create volume", &path)(e)),
            }
            view(&owned, &path)
        })
        .await
    }

    /// One volume's size and allocated bytes.
    pub fn volume(&self, id: &str) -> Result<VolumeView, VolumeFileError> {
        view(id, &self.volume_path(id)?)
    }

    /// Removes volume `id`'s file; gone already is success.
    pub async fn delete_volume(&self, id: &str) -> Result<(), VolumeFileError> {
        let path = self.volume_path(id)?;
        blocking(move || remove(&path)).await
    }

    /// Ids of every volume file.
    pub fn volume_ids(&self) -> Result<Vec<String>, VolumeFileError> {
        ids_in(&self.rt.data().volumes())
    }

    /// Removes volume snapshot `id`'s file; gone already is success.
    pub async fn delete_volume_snapshot(&self, id: &str) -> Result<(), VolumeFileError> {
        let path = self.volume_snapshot_path(id)?;
        blocking(move || remove(&path)).await
    }

    /// Ids of every volume snapshot file.
    pub fn volume_snapshot_ids(&self) -> Result<Vec<String>, VolumeFileError> {
        ids_in(&self.rt.data().volume_snapshots())
    }

    /// Grows volume `id` (file and ext4 file system) to `size_bytes`; no sandbox may have it
    /// bound. Shrinking is refused; the same size is a no-op. The work is done on a reflink
    /// that is renamed over the volume only when the file system is grown, so a failure leaves
    /// the volume as it was.
    pub async fn grow_volume(
        &self,
        id: &str,
        size_bytes: u64,
    ) -> Result<VolumeView, VolumeFileError> {
        let path = self.volume_path(id)?;
        let current = view(id, &path)?;
        check_size(size_bytes)?;
        if size_bytes < current.size_bytes {
            return Err(VolumeFileError::Shrink {
                id: id.into(),
                size: current.size_bytes,
                wanted: size_bytes,
            });
        }
        if size_bytes == current.size_bytes {
            return Ok(current);
        }
        let owned = id.to_owned();
        blocking(move || {
            let tmp = temp_beside(&path, "grow");
            remove(&tmp)?;
            let grown = clone_file(&path, &tmp)
                .map_err(io("copy", &path))
                .and_then(|_| grow_file(&tmp, size_bytes))
                .and_then(|()| std::fs::rename(&tmp, &path).map_err(io("rename over", &path)));
            if grown.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            grown?;
            view(&owned, &path)
        })
        .await
    }

    /// Copies volume `id` into volume snapshot `snapshot_id` (a reflink). With a `holder` that
    /// is running, its file system at the holder's path is frozen for the copy and thawed after,
    /// whatever happened; a paused holder (vCPUs stopped) or a hibernated one (no VM) is copied
    /// without a freeze (crash-consistent, or complete), as is a holder this host does not know.
    pub async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> Result<VolumeSnapshotView, VolumeFileError> {
        let from = self.volume_path(id)?;
        let dest = self.volume_snapshot_path(snapshot_id)?;
        let size = view(id, &from)?.size_bytes;
        if dest.exists() {
            return Err(VolumeFileError::SnapshotExists(snapshot_id.into()));
        }
        let tmp = temp_beside(&dest, "copy");
        remove(&tmp)?;
        let (took, frozen) = self.frozen_copy(&from, &tmp, holder.as_ref()).await?;
        let owned = snapshot_id.to_owned();
        let moved = rename_new(&tmp, &dest, || VolumeFileError::SnapshotExists(owned));
        if moved.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        moved?;
        Ok(VolumeSnapshotView {
            id: snapshot_id.to_owned(),
            size_bytes: size,
            copy_ms: took.as_millis() as u64,
            frozen,
        })
    }

    /// Clones `from` to `to` (which must not exist), with `holder`'s file system frozen around
    /// the clone when it is running. Returns how long the copy took (the freeze and thaw
    /// included when frozen) and whether it froze. `to` is not left behind on failure.
    async fn frozen_copy(
        &self,
        from: &Path,
        to: &Path,
        holder: Option<&VolumeHolder>,
    ) -> Result<(Duration, bool), VolumeFileError> {
        let copy = || {
            let (from, to) = (from.to_owned(), to.to_owned());
            blocking(move || {
                clone_file(&from, &to).map_err(|e| {
                    let _ = std::fs::remove_file(&to);
                    io("copy", &from)(e)
                })?;
                Ok(())
            })
        };
        let entry = match holder {
            Some(h) => match self.entry(&h.sandbox_id).await {
                Ok(e) => Some((h, e)),
                Err(_) => {
                    tracing::warn!(sandbox = %h.sandbox_id, "volume holder not on this host: copying without a freeze");
                    None
                }
            },
            None => None,
        };
        let started = Instant::now();
        let Some((h, entry)) = entry else {
            copy().await?;
            return Ok((started.elapsed(), false));
        };
        // Held for the copy: the holder cannot be hibernated, resumed or destroyed meanwhile.
        let slot = entry.slot.lock().await;
        let SandboxVm::Running(sb) = &*slot else {
            copy().await?;
            return Ok((started.elapsed(), false));
        };
        let started = Instant::now();
        let frozen = self.rt.freeze_fs(sb, &h.path).await;
        let copied = match &frozen {
            Ok(()) => copy().await,
            Err(_) => Ok(()),
        };
        // Always: a freeze that failed or timed out may still have taken effect in the guest.
        let thawed = self.rt.thaw_fs(sb, &h.path).await;
        let took = started.elapsed();
        drop(slot);
        let failed = |e| {
            let _ = std::fs::remove_file(to);
            e
        };
        if let Err(source) = frozen {
            if let Err(e) = &thawed {
                tracing::debug!(sandbox = %h.sandbox_id, error = e as &dyn std::error::Error, "thaw after a failed freeze");
            }
            return Err(failed(VolumeFileError::Freeze {
                sandbox: h.sandbox_id.clone(),
                path: h.path.clone(),
                source: Box::new(source),
            }));
        }
        copied.map_err(failed)?;
        if let Err(source) = thawed {
            tracing::error!(sandbox = %h.sandbox_id, path = %h.path, error = &source as &dyn std::error::Error, "volume left frozen in the guest");
            return Err(failed(VolumeFileError::Thaw {
                sandbox: h.sandbox_id.clone(),
                path: h.path.clone(),
                source: Box::new(source),
            }));
        }
        tracing::debug!(sandbox = %h.sandbox_id, path = %h.path, frozen_ms = took.as_secs_f64() * 1e3, "volume copied frozen");
        Ok((took, true))
    }

    /// Creates volume `id` as a reflink of volume snapshot `snapshot_id`, grown to `size_bytes`
    /// when that is larger than the snapshot.
    pub async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> Result<VolumeView, VolumeFileError> {
        let from = self.volume_snapshot_path(snapshot_id)?;
        let dest = self.volume_path(id)?;
        let snap_size = match view(snapshot_id, &from) {
            Ok(v) => v.size_bytes,
            Err(VolumeFileError::NotFound(s)) => return Err(VolumeFileError::SnapshotNotFound(s)),
            Err(e) => return Err(e),
        };
        let owned = id.to_owned();
        blocking(move || {
            if dest.exists() {
                return Err(VolumeFileError::Exists(owned));
            }
            let tmp = temp_beside(&dest, "new");
            remove(&tmp)?;
            let made = (|| {
                clone_file(&from, &tmp).map_err(io("copy", &from))?;
                if size_bytes > snap_size {
                    check_size(size_bytes)?;
                    grow_file(&tmp, size_bytes)?;
                }
                rename_new(&tmp, &dest, || VolumeFileError::Exists(owned.clone()))
            })();
            if made.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            made?;
            view(&owned, &dest)
        })
        .await
    }

    /// Uploads volume snapshot `snapshot_id` into workspace `ws` of the object store in
    /// [`VOLUME_CHUNK_SIZE`] chunks (only those not stored already are sent). The caller stores
    /// the manifest.
    pub async fn upload_volume_snapshot(
        &self,
        snapshot_id: &str,
        ws: &str,
    ) -> Result<VolumeUpload, VolumeFileError> {
        let objects = self.objects()?;
        let path = self.volume_snapshot_path(snapshot_id)?;
        if !path.is_file() {
            return Err(VolumeFileError::SnapshotNotFound(snapshot_id.into()));
        }
        let up = objects.upload_file(ws, &path, VOLUME_CHUNK_SIZE).await?;
        Ok(VolumeUpload {
            manifest: up.manifest,
            chunks: up.stats.chunks,
            holes: up.stats.holes,
            uploaded_chunks: up.stats.uploaded,
            bytes_uploaded: up.stats.bytes_uploaded,
        })
    }

    /// Creates volume `id` from the file `manifest` describes (chunks of workspace `ws`), grown
    /// to `size_bytes` when larger. A failed download leaves no file.
    pub async fn volume_from_manifest(
        &self,
        ws: &str,
        manifest: &Manifest,
        id: &str,
        size_bytes: u64,
    ) -> Result<VolumeView, VolumeFileError> {
        let objects = self.objects()?;
        let dest = self.volume_path(id)?;
        if dest.exists() {
            return Err(VolumeFileError::Exists(id.into()));
        }
        let tmp = temp_beside(&dest, "download");
        remove(&tmp)?;
        let fetched = objects.download_file(ws, manifest, &tmp).await;
        let owned = id.to_owned();
        let length = manifest.length;
        let tmp2 = tmp.clone();
        let made = match fetched {
            Err(e) => Err(e.into()),
            Ok(_) => {
                blocking(move || {
                    if size_bytes > length {
                        check_size(size_bytes)?;
                        grow_file(&tmp2, size_bytes)?;
                    }
                    rename_new(&tmp2, &dest, || VolumeFileError::Exists(owned.clone()))?;
                    view(&owned, &dest)
                })
                .await
            }
        };
        if made.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        made
    }

    /// Creates sandbox `id` from `template` with `mounts` in its volume slots, in order, each
    /// mounted at its path before this returns. Checked before any VM starts: the number of
    /// slots ([`VolumeFileError::TooMany`]) and that every volume exists. A read-write mount binds
    /// the volume's file; a read-only one binds a copy as of now, moved into the sandbox's
    /// directory (its holder, if running, frozen for the copy). A failed mount destroys the
    /// sandbox. Takes no pooled VM (those have nothing bound) unless `mounts` is empty.
    pub async fn create_with_volumes(
        self: &Arc<Self>,
        template: &str,
        id: &str,
        mounts: &[VolumeMount],
    ) -> Result<SandboxView, AgentError> {
        self.create_with_disk(template, id, mounts, DiskRequest::default())
            .await
    }

    /// [`HostAgent::create_with_volumes`] with disk limits of its own where `disk` names them
    /// (see [`HostAgent::disk_limits`]).
    pub async fn create_with_disk(
        self: &Arc<Self>,
        template: &str,
        id: &str,
        mounts: &[VolumeMount],
        disk: DiskRequest,
    ) -> Result<SandboxView, AgentError> {
        if mounts.is_empty() {
            // Nothing to bind: a plain create, which may take a pooled VM.
            return self.create_limited(template, id, disk).await;
        }
        if !valid_id(id) {
            return Err(CreateError::InvalidId(id.into()).into());
        }
        let t = self.template(template).await?;
        if mounts.len() > t.volume_slots as usize {
            return Err(VolumeFileError::TooMany {
                template: template.into(),
                slots: t.volume_slots as usize,
                wanted: mounts.len(),
            }
            .into());
        }
        let mut files = Vec::with_capacity(mounts.len());
        for m in mounts {
            let path = self
                .volume_path(&m.volume_id)
                .map_err(|_| VolumeFileError::NotFound(m.volume_id.clone()))?;
            if !path.is_file() {
                return Err(VolumeFileError::NotFound(m.volume_id.clone()).into());
            }
            files.push(path);
        }
        if self.rt.data().sandbox(id).exists() {
            return Err(CreateError::Exists(id.into()).into());
        }
        let mut staged = Vec::new();
        let limits = self.disk_limits(&t, disk);
        let created = self
            .create_bound(&t, id, mounts, &files, limits, &mut staged)
            .await;
        // A create that failed before moving a copy into the sandbox leaves it here.
        for s in staged {
            if let Err(e) = remove(&s) {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "remove a staged volume copy"
                );
            }
        }
        let sb = created?;
        Ok(self.insert(SandboxVm::Running(sb)).await)
    }

    async fn create_bound(
        &self,
        t: &pandastack_runtime::Template,
        id: &str,
        mounts: &[VolumeMount],
        files: &[PathBuf],
        disk: Option<pandastack_vm::DiskLimits>,
        staged: &mut Vec<PathBuf>,
    ) -> Result<pandastack_runtime::Sandbox<D::Vm>, AgentError> {
        let mut bindings = Vec::with_capacity(mounts.len());
        for (slot, (m, file)) in mounts.iter().zip(files).enumerate() {
            if m.read_only {
                let copy = self
                    .rt
                    .data()
                    .volumes()
                    .join(format!(".ro-{id}-{slot}.img"));
                remove(&copy)?;
                staged.push(copy.clone());
                self.frozen_copy(file, &copy, m.holder.as_ref()).await?;
                bindings.push(SlotSource::MoveIn {
                    from: copy,
                    read_only: true,
                });
            } else {
                bindings.push(SlotSource::Bound(VolumeDisk {
                    path: file.clone(),
                    read_only: false,
                }));
            }
        }
        let sb = self.rt.create_with_options(t, id, &bindings, disk).await?;
        for (slot, m) in mounts.iter().enumerate() {
            let mounted = self
                .rt
                .mount_volume(&sb, slot, &m.path, m.owner.as_deref())
                .await;
            if let Err(source) = mounted {
                if let Err(e) = self.rt.destroy(sb).await {
                    tracing::warn!(
                        sandbox = id,
                        error = &e as &dyn std::error::Error,
                        "destroy after a failed mount"
                    );
                }
                return Err(VolumeFileError::Mount {
                    volume: m.volume_id.clone(),
                    path: m.path.clone(),
                    source: Box::new(source),
                }
                .into());
            }
        }
        Ok(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_skips_temporaries_and_foreign_names() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "a.img",
            "b-1.img",
            ".a.img.grow",
            ".ro-x-0.img",
            "c.txt",
            "..img",
        ] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.img")).unwrap();
        assert_eq!(ids_in(dir.path()).unwrap(), ["a", "b-1"]);
    }

    #[test]
    fn rename_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"old").unwrap();
        let e = rename_new(&a, &b, || VolumeFileError::Exists("b".into())).unwrap_err();
        assert!(matches!(e, VolumeFileError::Exists(_)));
        assert_eq!(std::fs::read(&b).unwrap(), b"old");
        std::fs::remove_file(&b).unwrap();
        rename_new(&a, &b, || unreachable!()).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"new");
    }

    #[test]
    fn grow_file_grows_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.img");
        pandastack_runtime::create_volume_file(&path, 8 << 20).unwrap();
        grow_file(&path, 16 << 20).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 << 20);
        let out = std::process::Command::new("dumpe2fs")
            .arg("-h")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("Block count:"))
            .unwrap();
        let blocks: u64 = line.split(':').nth(1).unwrap().trim().parse().unwrap();
        let bsize: u64 = text
            .lines()
            .find(|l| l.starts_with("Block size:"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(blocks * bsize, 16 << 20);
        // Not an ext4 file system: refused with the tool's words.
        let junk = dir.path().join("junk.img");
        std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
        let e = grow_file(&junk, 2 << 20).unwrap_err();
        assert!(
            matches!(e, VolumeFileError::Tool { tool: "e2fsck", .. }),
            "{e}"
        );
    }
}
