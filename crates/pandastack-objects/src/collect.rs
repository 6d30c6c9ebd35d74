//! Collecting the chunks no manifest names: what deleting a snapshot, a template's bake, a
//! backup or a moved image leaves behind (those deletes remove records and manifests only).
//!
//! An upload that finds a chunk stored already does not send it again, so a chunk no manifest
//! names may be about to be named by one whose upload is still running. The collector
//! therefore deletes only a chunk unreferenced *and* not written for [`GC_GRACE`], and an
//! upload that finds a chunk older than [`REFRESH_AFTER`] (half the grace) writes it again,
//! which makes it new. A chunk the collector deletes was thus last seen by any upload more than
//! half the grace before the collector listed it: only an upload that spends longer than that
//! between finding the chunk and writing its manifest could name a deleted chunk.
//!
//! ```text
//!   1. list ws/<ws>/chunks (with their times)     2. list and read ws/<ws>/manifests/**
//!   3. delete each chunk no manifest names whose time is older than now − grace
//! ```
//!
//! A manifest that cannot be read or parsed stops the pass for its workspace: nothing is
//! deleted on a guess.

use std::collections::HashSet;
use std::time::Duration;

use object_store::ObjectStoreExt;

use crate::{names, ChunkHash, Manifest, Objects, ObjectsError};

/// How long a chunk no manifest names is kept from its last write (see the module doc).
pub const GC_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// An upload that finds a chunk last written longer ago than this writes it again.
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(12 * 60 * 60);

/// What one [`Objects::collect_chunks`] pass did in a workspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Manifests read.
    pub manifests: u64,
    /// Chunks named by some manifest.
    pub referenced: u64,
    /// Chunks no manifest names but written within the grace: kept for now.
    pub young: u64,
    /// Chunks deleted, and their bytes.
    pub deleted: u64,
    pub bytes_deleted: u64,
}

impl Objects {
    /// The workspaces the store holds something of (`ws/<id>/…`), sorted.
    pub async fn list_workspaces(&self) -> Result<Vec<String>, ObjectsError> {
        let dir = self.keys.workspaces();
        let listed = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(ObjectsError::store("list", &dir))?;
        let mut out: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .filter(|ws| names::check("workspace id", ws).is_ok())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes workspace `ws`'s chunks that no manifest of it names and that were last written
    /// more than `grace` ago ([`GC_GRACE`] in production; see the module doc for why less is
    /// unsafe while uploads run). Deleting a chunk that is gone already is success.
    pub async fn collect_chunks(
        &self,
        ws: &str,
        grace: Duration,
    ) -> Result<Collected, ObjectsError> {
        // Chunks first: a manifest written after this listing names only chunks listed here
        // or written since (which are young).
        let chunks = self.list(&self.keys.chunks(ws)?).await?;
        let mut named: HashSet<ChunkHash> = HashSet::new();
        let mut out = Collected::default();
        for meta in self.list(&self.keys.all_manifests(ws)?).await? {
            if !meta.location.as_ref().ends_with(".json") {
                continue;
            }
            let key = meta.location.to_string();
            let data = self.read(&meta.location).await?;
            let manifest: Manifest =
                serde_json::from_slice(&data).map_err(|e| ObjectsError::Corrupt {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
            manifest
                .validate()
                .map_err(|reason| ObjectsError::Corrupt { key, reason })?;
            named.extend(manifest.data_chunks());
            out.manifests += 1;
        }
        let cutoff_ms = crate::now_ms() - grace.as_millis() as i64;
        for meta in chunks {
            let Some(hash) = meta
                .location
                .filename()
                .and_then(|n| n.parse::<ChunkHash>().ok())
            else {
                continue;
            };
            if named.contains(&hash) {
                out.referenced += 1;
                continue;
            }
            if meta.last_modified.timestamp_millis() > cutoff_ms {
                out.young += 1;
                continue;
            }
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(ObjectsError::store("delete", &meta.location)(e)),
            }
            out.deleted += 1;
            out.bytes_deleted += meta.size;
        }
        Ok(out)
    }
}
