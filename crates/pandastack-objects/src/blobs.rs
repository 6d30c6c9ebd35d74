//! Blobs: named byte strings in groups (a database's archived WAL segments), written
//! create-if-absent like everything else here: the same bytes again are success, other bytes
//! [`ObjectsError::Conflict`] — an archived segment is never replaced.

use bytes::Bytes;
use object_store::ObjectStoreExt;

use crate::{names, Objects, ObjectsError};

/// A stored blob's name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    pub name: String,
    pub size: u64,
}

impl Objects {
    /// Writes `data` as `ws/<ws>/blobs/<kind>/<group>/<name>` unless it exists.
    pub async fn put_blob(
        &self,
        ws: &str,
        kind: &str,
        group: &str,
        name: &str,
        data: Bytes,
    ) -> Result<(), ObjectsError> {
        let key = self.keys.blob(ws, kind, group, name)?;
        if self.create(&key, data.clone()).await? {
            return Ok(());
        }
        if self.read(&key).await? == data {
            return Ok(());
        }
        Err(ObjectsError::Conflict {
            key: key.to_string(),
        })
    }

    /// Reads a blob ([`ObjectsError::NotFound`] if absent).
    pub async fn get_blob(
        &self,
        ws: &str,
        kind: &str,
        group: &str,
        name: &str,
    ) -> Result<Bytes, ObjectsError> {
        let key = self.keys.blob(ws, kind, group, name)?;
        self.read(&key).await
    }

    /// The blobs of a group, sorted by name.
    pub async fn list_blobs(
        &self,
        ws: &str,
        kind: &str,
        group: &str,
    ) -> Result<Vec<BlobInfo>, ObjectsError> {
        let dir = self.keys.blobs(ws, kind, group)?;
        let mut out: Vec<BlobInfo> = self
            .list(&dir)
            .await?
            .into_iter()
            .filter(|meta| meta.location.prefix_match(&dir).map(|p| p.count()) == Some(1))
            .filter_map(|meta| {
                let name = meta.location.filename()?;
                names::check("blob name", name).is_ok().then(|| BlobInfo {
                    name: name.to_owned(),
                    size: meta.size,
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes a blob (absent is success).
    pub async fn delete_blob(
        &self,
        ws: &str,
        kind: &str,
        group: &str,
        name: &str,
    ) -> Result<(), ObjectsError> {
        let key = self.keys.blob(ws, kind, group, name)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(ObjectsError::store("delete", &key)(e)),
        }
    }
}
