//! Chunks and manifests: create-if-absent writes, verified reads.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::{names, ChunkHash, Manifest, Objects, ObjectsError};

/// What [`Objects::put_chunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutChunk {
    pub hash: ChunkHash,
    /// `true` if this call stored it, `false` if it was there already.
    pub created: bool,
}

impl Objects {
    /// Stores `data` as a chunk of workspace `ws` under its hash, unless it is there already.
    pub async fn put_chunk(&self, ws: &str, data: Bytes) -> Result<PutChunk, ObjectsError> {
        let hash = {
            let data = data.clone();
            tokio::task::spawn_blocking(move || ChunkHash::of(&data))
                .await
                .expect("hashing does not panic")
        };
        let created = self.store_chunk(ws, &hash, data).await?;
        Ok(PutChunk { hash, created })
    }

    /// Stores `data`, whose hash is `hash`: a `HEAD` first (an existing chunk costs no upload,
    /// which is what makes incremental uploads cheap), then a create-if-absent `PUT`; losing a
    /// race to another writer of the same chunk is success. Returns whether this call stored it.
    /// A chunk found that was last written longer ago than [`crate::collect::REFRESH_AFTER`] is
    /// written again (the same bytes), so the collector does not take it before the manifest
    /// this upload writes names it.
    pub(crate) async fn store_chunk(
        &self,
        ws: &str,
        hash: &ChunkHash,
        data: Bytes,
    ) -> Result<bool, ObjectsError> {
        let key = self.keys.chunk(ws, hash)?;
        match self.store.head(&key).await {
            Ok(meta) if meta.size == data.len() as u64 => {
                let age_ms = crate::now_ms() - meta.last_modified.timestamp_millis();
                if age_ms > crate::collect::REFRESH_AFTER.as_millis() as i64 {
                    self.store
                        .put(&key, PutPayload::from(data))
                        .await
                        .map_err(ObjectsError::store("put", &key))?;
                }
                return Ok(false);
            }
            Ok(meta) => {
                return Err(ObjectsError::Corrupt {
                    key: key.to_string(),
                    reason: format!("{} bytes stored, {} expected", meta.size, data.len()),
                })
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(ObjectsError::store("head", &key)(e)),
        }
        self.create(&key, data).await
    }

    /// `PUT` with `PutMode::Create`: `Ok(true)` if stored, `Ok(false)` if the key existed.
    pub(crate) async fn create(&self, key: &Path, data: Bytes) -> Result<bool, ObjectsError> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self.store.put_opts(key, PutPayload::from(data), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(ObjectsError::store("put", key)(e)),
        }
    }

    /// Whether workspace `ws` has the chunk.
    pub async fn has_chunk(&self, ws: &str, hash: &ChunkHash) -> Result<bool, ObjectsError> {
        let key = self.keys.chunk(ws, hash)?;
        match self.store.head(&key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(ObjectsError::store("head", &key)(e)),
        }
    }

    /// Reads a chunk and checks its hash ([`ObjectsError::Corrupt`] if the bytes are not the
    /// ones its name promises).
    pub async fn get_chunk(&self, ws: &str, hash: &ChunkHash) -> Result<Bytes, ObjectsError> {
        let key = self.keys.chunk(ws, hash)?;
        let data = self.read(&key).await?;
        let got = {
            let data = data.clone();
            tokio::task::spawn_blocking(move || ChunkHash::of(&data))
                .await
                .expect("hashing does not panic")
        };
        if got != *hash {
            return Err(ObjectsError::Corrupt {
                key: key.to_string(),
                reason: format!("content hashes to {got}"),
            });
        }
        Ok(data)
    }

    /// The chunks workspace `ws` holds (sorted). Objects under the chunk prefix whose name is
    /// not a hash are ignored.
    pub async fn list_chunks(&self, ws: &str) -> Result<Vec<ChunkHash>, ObjectsError> {
        let dir = self.keys.chunks(ws)?;
        let mut out: Vec<ChunkHash> = self
            .list(&dir)
            .await?
            .into_iter()
            .filter_map(|meta| meta.location.filename()?.parse().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Writes a manifest as `ws/<ws>/manifests/<kind>/<id>.json`, create-if-absent: the same
    /// manifest again is success, a different one [`ObjectsError::Conflict`]. It does not check
    /// that the chunks exist; [`Objects::upload_file`] stores them before it returns the manifest.
    pub async fn put_manifest(
        &self,
        ws: &str,
        kind: &str,
        id: &str,
        manifest: &Manifest,
    ) -> Result<(), ObjectsError> {
        let key = self.keys.manifest(ws, kind, id)?;
        manifest.validate().map_err(ObjectsError::InvalidManifest)?;
        let json = serde_json::to_vec(manifest).expect("a manifest serialises");
        if self.create(&key, json.into()).await? {
            return Ok(());
        }
        match self.get_manifest(ws, kind, id).await {
            Ok(existing) if existing == *manifest => Ok(()),
            Ok(_) | Err(ObjectsError::Corrupt { .. }) => Err(ObjectsError::Conflict {
                key: key.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Reads a manifest ([`ObjectsError::NotFound`] if absent, [`ObjectsError::Corrupt`] if it
    /// does not parse or is not self-consistent).
    pub async fn get_manifest(
        &self,
        ws: &str,
        kind: &str,
        id: &str,
    ) -> Result<Manifest, ObjectsError> {
        let key = self.keys.manifest(ws, kind, id)?;
        let data = self.read(&key).await?;
        let corrupt = |reason: String| ObjectsError::Corrupt {
            key: key.to_string(),
            reason,
        };
        let manifest: Manifest =
            serde_json::from_slice(&data).map_err(|e| corrupt(e.to_string()))?;
        manifest.validate().map_err(corrupt)?;
        Ok(manifest)
    }

    /// The ids of workspace `ws`'s manifests of `kind`, sorted.
    pub async fn list_manifests(&self, ws: &str, kind: &str) -> Result<Vec<String>, ObjectsError> {
        let dir = self.keys.manifests(ws, kind)?;
        let mut out: Vec<String> = self
            .list(&dir)
            .await?
            .into_iter()
            // Only direct children: `<kind>/<id>.json`.
            .filter(|meta| meta.location.prefix_match(&dir).map(|p| p.count()) == Some(1))
            .filter_map(|meta| {
                let id = meta.location.filename()?.strip_suffix(".json")?;
                names::check("manifest id", id)
                    .is_ok()
                    .then(|| id.to_owned())
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes a manifest; deleting one that does not exist is success (retries are
    /// idempotent). The chunks stay.
    pub async fn delete_manifest(
        &self,
        ws: &str,
        kind: &str,
        id: &str,
    ) -> Result<(), ObjectsError> {
        let key = self.keys.manifest(ws, kind, id)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(ObjectsError::store("delete", &key)(e)),
        }
    }

    pub(crate) async fn list(
        &self,
        dir: &Path,
    ) -> Result<Vec<object_store::ObjectMeta>, ObjectsError> {
        self.store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(ObjectsError::store("list", dir))
    }

    pub(crate) async fn read(&self, key: &Path) -> Result<Bytes, ObjectsError> {
        let got = self
            .store
            .get(key)
            .await
            .map_err(ObjectsError::store("get", key))?;
        got.bytes().await.map_err(ObjectsError::store("get", key))
    }
}
