//! Hibernated sandboxes that move between hosts (#39). The host a sandbox hibernated on stores
//! its image in the shared object store, under its workspace (content-addressed chunks, zero
//! chunks not stored, chunks it shares with earlier images of the workspace stored once); a
//! host with the same compatibility key fetches it and adopts it, hibernated, to wake it there.
//!
//! ```text
//!   ws/<ws>/manifests/hibernated-files/<id>.<tag>.<file>.json   rootfs.ext4, hibernate.state, mem
//!   ws/<ws>/records/hibernated/<id>.<tag>.json                  written last
//! ```
//!
//! Storing leaves the sandbox where it is, hibernated; the caller (the control plane) decides
//! where it runs next, adopts it there, moves its row, and only then destroys the origin's copy
//! and forgets the stored image. Only this host's agent, and never two at once, runs it: an
//! adopted sandbox is hibernated until woken.

use pandastack_objects::{ObjectsError, DEFAULT_CHUNK_SIZE};
use pandastack_runtime::{HibernateError, SandboxInfo};
use pandastack_vm::VmDriver;
use serde::{Deserialize, Serialize};

use crate::entry::SandboxVm;
use crate::{AgentError, HostAgent, SandboxView, VmState};

const RECORDS: &str = "hibernated";
/// A sandbox's (and a snapshot's) disk among the files that move.
const ROOTFS: &str = "rootfs.ext4";
/// In a hibernated sandbox's directory from the time its image is stored for another host
/// until the move is given up ([`HostAgent::forget_stored`]) or its copy here is destroyed:
/// the sandbox does not wake here meanwhile (a file, so a restarted agent keeps refusing).
pub(crate) const LEAVING: &str = ".leaving";

/// Whether `h`'s image is on its way to another host: it must not wake here.
pub(crate) fn is_leaving(h: &pandastack_runtime::Hibernated) -> bool {
    h.dir.join(LEAVING).exists()
}
const FILES: &str = "hibernated-files";
/// In a hibernated sandbox's directory while a copy of its image is stored in case this host
/// is lost ([`HostAgent::store_durable`]): which one (a [`DurableCopy`]). The copy is removed
/// when the sandbox wakes here or is destroyed, as it no longer is the sandbox then.
const DURABLE: &str = ".durable";

/// The stored copy named in [`DURABLE`].
#[derive(Debug, Serialize, Deserialize)]
struct DurableCopy {
    ws: String,
    tag: String,
}

/// A hibernated sandbox as stored for another host (its record).
pub type StoredSandbox = StoredImage<SandboxInfo>;

/// What a host stores beside an image's files for other hosts (a hibernated sandbox's,
/// [`StoredSandbox`], or a snapshot's, `StoredSnapshot`): its record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredImage<I> {
    /// What it is (`sandbox.json`, `snapshot.json`; its paths are the storing host's).
    pub info: I,
    /// The files stored, by their name in its directory.
    pub files: Vec<String>,
    /// The storing host's compatibility key: it restores only on an equal one.
    pub compat_key: String,
    pub host: String,
    /// Unix ms when its record was made.
    pub stored_at_ms: i64,
}

impl<I: Clone> StoredImage<I> {
    /// The record of `info` with `files`, made now by host `host` with key `compat_key`.
    pub(crate) fn of(info: &I, files: &[&str], compat_key: &str, host: &str) -> Self {
        Self {
            info: info.clone(),
            files: files.iter().map(|f| (*f).to_owned()).collect(),
            compat_key: compat_key.to_owned(),
            host: host.to_owned(),
            stored_at_ms: crate::shared_templates::now_ms(),
        }
    }
}

fn record_id(id: &str, tag: &str) -> String {
    format!("{id}.{tag}")
}

fn file_id(id: &str, tag: &str, file: &str) -> String {
    format!("{id}.{tag}.{file}")
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Hibernates sandbox `id` (if it runs) and stores its image in workspace `ws`'s part of
    /// the shared object store; returns the tag that names this image (one per store). The
    /// sandbox stays here, hibernated. Needs sharing (a cluster's agent).
    pub async fn store_hibernated(&self, id: &str, ws: &str) -> Result<String, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        self.hibernate(id).await?;
        let e = self.entry(id).await?;
        // Held until the record is written: no wake changes the files while they are read.
        let slot = e.lock().await;
        let SandboxVm::Hibernated(h) = &*slot else {
            return Err(AgentError::InvalidState {
                id: id.into(),
                state: slot.state().unwrap_or(crate::VmState::Exited),
                op: "store its hibernation image",
            });
        };
        let files = h.moving_files().map_err(AgentError::Hibernate)?;
        let leaving = h.dir.join(LEAVING);
        std::fs::write(&leaving, b"")?;
        let stored = self.upload_hibernated(s, h, &files, id, ws).await;
        if stored.is_err() {
            let _ = std::fs::remove_file(&leaving);
        }
        stored
    }

    /// Stores the image of hibernated sandbox `id` in workspace `ws`'s part of the shared
    /// object store as [`Self::store_hibernated`] does, but for this host's loss: the sandbox
    /// stays here and wakes here as before, and another host adopts the copy only once this
    /// one is dead. Returns the copy's tag (the same one while it stays hibernated). An
    /// operation that changes the sandbox (a wake, a delete, a move) gives the upload up: an
    /// error, nothing recorded. The copy goes when the sandbox wakes here or is destroyed.
    pub async fn store_durable(&self, id: &str, ws: &str) -> Result<String, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let e = self.entry(id).await?;
        let cancelled = e.durable_upload();
        let given_up = |state| AgentError::InvalidState {
            id: id.into(),
            state,
            op: "keep a copy of its hibernation image (it changed meanwhile)",
        };
        // Held until the record is written: nothing changes the files while they are read.
        let slot = tokio::select! {
            slot = e.slot.lock() => slot,
            () = cancelled.cancelled() => return Err(given_up(VmState::Running)),
        };
        let h = match &*slot {
            SandboxVm::Hibernated(h) if !is_leaving(h) => h,
            other => return Err(given_up(other.state().unwrap_or(crate::VmState::Exited))),
        };
        let marker = h.dir.join(DURABLE);
        if let Some(copy) = read_durable(&marker) {
            if copy.ws == ws {
                return Ok(copy.tag);
            }
        }
        let files = h.moving_files().map_err(AgentError::Hibernate)?;
        let tag = tokio::select! {
            tag = self.upload_hibernated(s, h, &files, id, ws) => tag?,
            () = cancelled.cancelled() => return Err(given_up(VmState::Hibernated)),
        };
        let copy = DurableCopy {
            ws: ws.to_owned(),
            tag: tag.clone(),
        };
        std::fs::write(
            &marker,
            serde_json::to_vec(&copy).expect("a copy's name serialises"),
        )?;
        Ok(tag)
    }

    /// The durable copy of hibernated `h`'s image (see [`Self::store_durable`]), if it has
    /// one, forgotten: it no longer is the sandbox once it wakes here or goes. The record and
    /// manifests go in the background; the chunks stay until the collector takes them.
    pub(crate) fn drop_durable(&self, h: &pandastack_runtime::Hibernated) {
        let marker = h.dir.join(DURABLE);
        let Some(copy) = read_durable(&marker) else {
            return;
        };
        let _ = std::fs::remove_file(&marker);
        let Some(s) = self.sharing.get() else {
            return;
        };
        let (objects, id) = (s.objects.clone(), h.info.id.clone());
        tokio::spawn(async move {
            let forgot = async {
                objects
                    .delete_record(&copy.ws, RECORDS, &record_id(&id, &copy.tag))
                    .await?;
                // Its manifests too: the chunk collector takes the bytes back.
                for f in pandastack_runtime::MOVING_FILES {
                    objects
                        .delete_manifest(&copy.ws, FILES, &file_id(&id, &copy.tag, f))
                        .await?;
                }
                Ok::<_, ObjectsError>(())
            };
            if let Err(e) = forgot.await {
                tracing::warn!(
                    sandbox = %id,
                    error = &e as &dyn std::error::Error,
                    "the durable copy of a hibernated sandbox's image stays in the object store"
                );
            }
        });
    }

    /// The upload of [`Self::store_hibernated`]: `files` of `h`, then the record; the tag.
    async fn upload_hibernated(
        &self,
        s: &crate::shared_templates::Sharing<D>,
        h: &pandastack_runtime::Hibernated,
        files: &[&str],
        id: &str,
        ws: &str,
    ) -> Result<String, AgentError> {
        let tag = format!("{:016x}", rand::random::<u64>());
        for f in files {
            let up = s
                .objects
                .upload_file(ws, &h.dir.join(f), DEFAULT_CHUNK_SIZE)
                .await?;
            s.objects
                .put_manifest(ws, FILES, &file_id(id, &tag, f), &up.manifest)
                .await?;
        }
        let record = StoredSandbox::of(&h.info, files, &s.compat_key, &s.host);
        let json = serde_json::to_value(&record).expect("a record serialises");
        s.objects
            .put_record(ws, RECORDS, &record_id(id, &tag), &json)
            .await?;
        Ok(tag)
    }

    /// Fetches the image stored as `tag` ([`HostAgent::store_hibernated`] on another host) of
    /// sandbox `id` in workspace `ws`, and makes it a hibernated sandbox of this host (the
    /// next call into it wakes it). Refused when its compatibility key is not this host's, or
    /// the sandbox is here already; nothing is left behind on failure.
    pub async fn adopt_stored(
        &self,
        id: &str,
        ws: &str,
        tag: &str,
    ) -> Result<SandboxView, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        self.not_here(id).await?;
        let raw = s
            .objects
            .get_record(ws, RECORDS, &record_id(id, tag))
            .await?;
        let stored: StoredSandbox =
            serde_json::from_value(raw).map_err(|e| ObjectsError::Corrupt {
                key: record_id(id, tag),
                reason: e.to_string(),
            })?;
        if stored.info.id != id {
            return Err(ObjectsError::Corrupt {
                key: record_id(id, tag),
                reason: format!("it describes sandbox {}", stored.info.id),
            }
            .into());
        }
        if let Some(why) = crate::moving::other_key(
            "hibernated",
            &stored.host,
            &stored.compat_key,
            &s.compat_key,
        ) {
            return Err(HibernateError::Immovable { id: id.into(), why }.into());
        }
        let staged = self.rt.moving_in(id)?;
        let rootfs = self.rootfs_to_reuse(&stored.info.template).await;
        download_into(
            &s.objects,
            ws,
            FILES,
            &stored.files,
            |f| file_id(id, tag, f),
            &staged,
            rootfs,
        )
        .await?;
        let h = self.rt.adopt_hibernated(stored.info, &staged)?;
        Ok(self.insert(SandboxVm::Hibernated(h)).await)
    }

    /// Refuses an adoption of sandbox `id` when a sandbox with its id is here already.
    pub(crate) async fn not_here(&self, id: &str) -> Result<(), AgentError> {
        if self.entry(id).await.is_ok() {
            return Err(HibernateError::Immovable {
                id: id.into(),
                why: "a sandbox with its id is on this host already".into(),
            }
            .into());
        }
        Ok(())
    }

    /// Removes the stored image `tag` of sandbox `id` in workspace `ws` (absent is success):
    /// the record first, so no host adopts it from then on. The chunks stay. A copy of the
    /// sandbox still here wakes here again: the move is given up (or already over).
    pub async fn forget_stored(&self, id: &str, ws: &str, tag: &str) -> Result<(), AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        if let Ok(e) = self.entry(id).await {
            let slot = e.slot.lock().await;
            if let SandboxVm::Hibernated(h) = &*slot {
                match std::fs::remove_file(h.dir.join(LEAVING)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                    _ => {}
                }
                let marker = h.dir.join(DURABLE);
                if read_durable(&marker).is_some_and(|c| c.tag == tag) {
                    std::fs::remove_file(&marker)?;
                }
            }
        }
        s.objects
            .delete_record(ws, RECORDS, &record_id(id, tag))
            .await?;
        for f in pandastack_runtime::MOVING_FILES {
            s.objects
                .delete_manifest(ws, FILES, &file_id(id, tag, f))
                .await?;
        }
        Ok(())
    }
}

/// Why an image that `made` ("was taken", "hibernated") on `host` with compatibility key
/// `theirs` does not restore on a host whose key is `here`: `None` when the keys are equal.
pub(crate) fn other_key(made: &str, host: &str, theirs: &str, here: &str) -> Option<String> {
    (theirs != here).then(|| {
        format!("it {made} on host {host} with compatibility key {theirs}, this host's is {here}")
    })
}

/// The durable copy named at `marker`, if there is one (an unreadable marker names none).
fn read_durable(marker: &std::path::Path) -> Option<DurableCopy> {
    let bytes = std::fs::read(marker).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Downloads each of a stored image's `files` (manifest `kind`/`manifest_id(file)` in
/// workspace `ws`) into `staged` under its own name; `staged` is removed on failure. The disk
/// (`rootfs.ext4`) copies the chunks `rootfs` (a local bake's root filesystem and its
/// manifest: see [`HostAgent::rootfs_to_reuse`]) has instead of fetching them.
pub(crate) async fn download_into(
    objects: &pandastack_objects::Objects,
    ws: &str,
    kind: &str,
    files: &[String],
    manifest_id: impl Fn(&str) -> String,
    staged: &std::path::Path,
    rootfs: Option<(std::path::PathBuf, pandastack_objects::Manifest)>,
) -> Result<(), AgentError> {
    let fetched = async {
        for f in files {
            let manifest = objects.get_manifest(ws, kind, &manifest_id(f)).await?;
            let reuse = rootfs
                .as_ref()
                .filter(|_| f == ROOTFS)
                .map(|(path, manifest)| pandastack_objects::Reuse { path, manifest });
            let got = objects
                .download_file_reusing(ws, &manifest, &staged.join(f), reuse)
                .await?;
            tracing::debug!(file = %f, fetched = got.chunks, reused = got.reused, "downloaded");
        }
        Ok::<_, AgentError>(())
    }
    .await;
    if fetched.is_err() {
        let _ = std::fs::remove_dir_all(staged);
    }
    fetched
}
