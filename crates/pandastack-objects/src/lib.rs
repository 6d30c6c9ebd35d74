//! PandaStack object storage: the layer volume backups, hibernation images and managed
//! databases put their bytes in, on a local directory (`file:///…`, the embedded default) or
//! S3-compatible storage (`s3://bucket/prefix`), through the `object_store` crate.
//!
//! Layout, under the store's prefix:
//!
//! ```text
//! ws/<workspace id>/chunks/<first 2 hex>/<sha256 hex>      content-addressed chunk
//! ws/<workspace id>/manifests/<kind>/<id>.json             a file: chunk size, length, chunks
//! ws/<workspace id>/records/<kind>/<id>.json               what a manifest is (JSON)
//! ws/<workspace id>/blobs/<kind>/<group>/<name>            a named blob (archived WAL)
//! ```
//!
//! Guarantees:
//! - **Per workspace.** Every key starts with a workspace id; chunks are never shared between
//!   workspaces (no cross-tenant deduplication, so nothing can be learnt by probing hashes).
//!   Names are checked against a small charset, so no input escapes its namespace.
//! - **Create-if-absent.** Nothing is ever overwritten. A chunk that exists is success (same
//!   name, same bytes), so an interrupted upload retried sends only what is missing; a manifest
//!   that exists with the same content is success, with other content [`ObjectsError::Conflict`].
//! - **Verified reads.** A chunk's bytes are hashed on every read ([`ObjectsError::Corrupt`]).
//! - **Chunks before manifests.** [`Objects::upload_file`] returns only when every chunk is
//!   stored, so a manifest written after it never names a missing chunk.
//! - **No half files.** [`Objects::download_file`] writes a temporary file next to the
//!   destination and renames it into place only when complete.
//!
//! - **Chunks no manifest names are collected** ([`Objects::collect_chunks`]) once they have
//!   not been written for [`GC_GRACE`]; an upload that finds an old chunk writes it again, so
//!   a chunk an upload is about to name is never that old (see the `collect` module).
//!
//! This crate knows nothing about volumes, VMs or the state store.

mod blobs;
mod collect;
mod counted;
mod error;
mod files;
mod manifest;
mod names;
mod open;
mod records;
mod store;

use std::sync::Arc;

use object_store::ObjectStore;

pub use blobs::BlobInfo;
pub use collect::{Collected, GC_GRACE};
pub use error::ObjectsError;
pub use files::{DownloadStats, Reuse, Upload, UploadStats};
pub use manifest::{
    ChunkHash, ChunkRef, Manifest, ParseHashError, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
};
pub use names::MAX_NAME_LEN;
pub use store::PutChunk;

/// Chunk transfers in flight per file transfer (memory: this many chunks).
pub const DEFAULT_CONCURRENCY: usize = 4;

/// An open object store. Cheap to clone (the backend is shared).
#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    keys: names::Keys,
    description: String,
    concurrency: usize,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("store", &self.description)
            .finish_non_exhaustive()
    }
}

impl Objects {
    /// What this store is, for logs: the directory, or bucket, prefix, endpoint and region.
    /// Never a credential.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// Sets how many chunks a file transfer keeps in flight (at least 1); memory use of a
    /// transfer is about this many chunks.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Checks that the store answers (one listing of a prefix outside every workspace):
    /// catches wrong credentials, a missing bucket or an unreachable endpoint.
    pub async fn check(&self) -> Result<(), ObjectsError> {
        let key = self.keys.probe();
        match self.store.list_with_delimiter(Some(&key)).await {
            Ok(_) => Ok(()),
            Err(source) => Err(ObjectsError::Store {
                op: "check",
                key: key.to_string(),
                source,
            }),
        }
    }
}

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
