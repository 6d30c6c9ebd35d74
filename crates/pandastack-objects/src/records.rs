//! Records: small JSON documents that describe what a manifest is (a volume backup's name,
//! size and times), so that what outlives a host's database can be listed and restored from
//! the object store alone. Written create-if-absent like manifests.

use bytes::Bytes;
use object_store::ObjectStoreExt;

use crate::{names, Objects, ObjectsError};

impl Objects {
    /// Writes `record` as `ws/<ws>/records/<kind>/<id>.json` unless it exists: the same
    /// record again is success, a different one [`ObjectsError::Conflict`].
    pub async fn put_record(
        &self,
        ws: &str,
        kind: &str,
        id: &str,
        record: &serde_json::Value,
    ) -> Result<(), ObjectsError> {
        let key = self.keys.record(ws, kind, id)?;
        let json = serde_json::to_vec(record).expect("a JSON value serialises");
        if self.create(&key, Bytes::from(json)).await? {
            return Ok(());
        }
        match self.get_record(ws, kind, id).await {
            Ok(existing) if existing == *record => Ok(()),
            Ok(_) | Err(ObjectsError::Corrupt { .. }) => Err(ObjectsError::Conflict {
                key: key.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Reads a record ([`ObjectsError::NotFound`] if absent).
    pub async fn get_record(
        &self,
        ws: &str,
        kind: &str,
        id: &str,
    ) -> Result<serde_json::Value, ObjectsError> {
        let key = self.keys.record(ws, kind, id)?;
        let data = self.read(&key).await?;
        serde_json::from_slice(&data).map_err(|e| ObjectsError::Corrupt {
            key: key.to_string(),
            reason: e.to_string(),
        })
    }

    /// The ids of workspace `ws`'s records of `kind`, sorted.
    pub async fn list_records(&self, ws: &str, kind: &str) -> Result<Vec<String>, ObjectsError> {
        let dir = self.keys.records(ws, kind)?;
        let mut out: Vec<String> = self
            .list(&dir)
            .await?
            .into_iter()
            .filter(|meta| meta.location.prefix_match(&dir).map(|p| p.count()) == Some(1))
            .filter_map(|meta| {
                let id = meta.location.filename()?.strip_suffix(".json")?;
                names::check("record id", id).is_ok().then(|| id.to_owned())
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Removes a record (absent is success).
    pub async fn delete_record(&self, ws: &str, kind: &str, id: &str) -> Result<(), ObjectsError> {
        let key = self.keys.record(ws, kind, id)?;
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(ObjectsError::store("delete", &key)(e)),
        }
    }
}
