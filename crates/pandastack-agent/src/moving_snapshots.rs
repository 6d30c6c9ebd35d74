//! Snapshots that move between hosts (#39). The host that took a snapshot stores its files in
//! the shared object store, under its workspace, in the background after the snapshot call
//! returned (content-addressed chunks, zero chunks not stored, chunks shared with the
//! workspace's earlier images stored once); a host with the same compatibility key that is
//! asked to restore it and lacks it fetches it first.
//!
//! ```text
//!   ws/<ws>/manifests/snapshot-files/<id>.<file>.json   state, rootfs.ext4, mem
//!   ws/<ws>/records/snapshots/<id>.json                 written last
//! ```
//!
//! A snapshot's files never change, so the upload holds no lock. Deleting the snapshot on the
//! host that stored it removes the record (the chunks stay); a copy fetched by another host is
//! deleted there by the same call made on that host.

use pandastack_host::Origin;
use pandastack_objects::{ObjectsError, DEFAULT_CHUNK_SIZE};
use pandastack_runtime::{Snapshot, SnapshotError};
use pandastack_vm::VmDriver;
use serde::{Deserialize, Serialize};

use crate::{AgentError, HostAgent};

const RECORDS: &str = "snapshots";
const FILES: &str = "snapshot-files";
/// In the directory of a snapshot this host stored: the workspace it is stored under, so its
/// delete here removes the record.
const STORED: &str = ".stored";

/// A snapshot as stored for other hosts (its record).
pub type StoredSnapshot = crate::moving::StoredImage<Snapshot>;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    ws: String,
}

fn file_id(id: &str, file: &str) -> String {
    format!("{id}.{file}")
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Stores snapshot `id` of this host in workspace `ws`'s part of the shared object store,
    /// so any host with the same compatibility key can restore it ([`Self::fetch_snapshot`]).
    /// Again once stored: nothing is uploaded. Needs sharing (a cluster's agent).
    pub async fn store_snapshot(&self, id: &str, ws: &str) -> Result<(), AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let snap = self.rt.get_snapshot(id)?;
        let marker = snap.dir.join(STORED);
        if marker.is_file() {
            return Ok(());
        }
        let files = snap.moving_files()?;
        for f in &files {
            let up = s
                .objects
                .upload_file(ws, &snap.dir.join(f), DEFAULT_CHUNK_SIZE)
                .await?;
            s.objects
                .put_manifest(ws, FILES, &file_id(id, f), &up.manifest)
                .await?;
        }
        let record = StoredSnapshot::of(&snap, &files, &s.compat_key, &s.host);
        let json = serde_json::to_value(&record).expect("a record serialises");
        s.objects.put_record(ws, RECORDS, id, &json).await?;
        let stored = Stored { ws: ws.to_owned() };
        std::fs::write(
            &marker,
            serde_json::to_vec(&stored).expect("a workspace id serialises"),
        )?;
        Ok(())
    }

    /// Snapshot `id` of workspace `ws` on this host: here already, or fetched — from
    /// `origin`, the agent that took it, when named and reachable (see `peer_images`), else
    /// from the object store where that host stored it ([`Self::store_snapshot`]). Refused
    /// when its compatibility key is not this host's; nothing is left behind on failure.
    pub async fn fetch_snapshot(
        &self,
        id: &str,
        ws: &str,
        origin: Option<&Origin>,
    ) -> Result<(), AgentError> {
        if self.rt.get_snapshot(id).is_ok() {
            return Ok(());
        }
        if let Some(origin) = origin.filter(|_| self.peers.get().is_some()) {
            let started = std::time::Instant::now();
            match self.fetch_from_origin(id, origin).await {
                Ok(()) => {
                    tracing::info!(snapshot = id, origin = %origin.host_id, took_ms = started.elapsed().as_millis() as u64, "snapshot fetched from the host that took it");
                    return Ok(());
                }
                Err(e @ AgentError::Snapshot(SnapshotError::Immovable { .. })) => return Err(e),
                Err(e) => tracing::warn!(
                    snapshot = id,
                    origin = %origin.host_id,
                    error = &e as &dyn std::error::Error,
                    "snapshot not fetched from the host that took it: from the object store"
                ),
            }
        }
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let raw = s.objects.get_record(ws, RECORDS, id).await?;
        let stored: StoredSnapshot =
            serde_json::from_value(raw).map_err(|e| ObjectsError::Corrupt {
                key: id.to_owned(),
                reason: e.to_string(),
            })?;
        if stored.info.id != id {
            return Err(ObjectsError::Corrupt {
                key: id.to_owned(),
                reason: format!("it describes snapshot {}", stored.info.id),
            }
            .into());
        }
        if let Some(why) =
            crate::moving::other_key("was taken", &stored.host, &stored.compat_key, &s.compat_key)
        {
            return Err(SnapshotError::Immovable { id: id.into(), why }.into());
        }
        let staged = self.rt.snapshot_moving_in(id)?;
        let rootfs = self.rootfs_to_reuse(&stored.info.template).await;
        crate::moving::download_into(
            &s.objects,
            ws,
            FILES,
            &stored.files,
            |f| file_id(id, f),
            &staged,
            rootfs,
        )
        .await?;
        self.rt.adopt_snapshot(stored.info, &staged)?;
        Ok(())
    }

    /// Snapshot `id`'s record in the object store removed, if this host stored it (the chunks
    /// stay); for its delete. A failure is logged: the snapshot's row is what makes it exist.
    pub(crate) async fn forget_stored_snapshot(&self, snap: &Snapshot) {
        let Ok(raw) = std::fs::read(snap.dir.join(STORED)) else {
            return;
        };
        let (Some(s), Ok(stored)) = (self.sharing.get(), serde_json::from_slice::<Stored>(&raw))
        else {
            return;
        };
        let removed = async {
            s.objects
                .delete_record(&stored.ws, RECORDS, &snap.id)
                .await?;
            for f in pandastack_runtime::SNAPSHOT_FILES {
                s.objects
                    .delete_manifest(&stored.ws, FILES, &file_id(&snap.id, f))
                    .await?;
            }
            Ok::<_, ObjectsError>(())
        }
        .await;
        if let Err(e) = removed {
            tracing::warn!(
                snapshot = %snap.id,
                error = &e as &dyn std::error::Error,
                "the stored snapshot's record stays in the object store"
            );
        }
    }
}
