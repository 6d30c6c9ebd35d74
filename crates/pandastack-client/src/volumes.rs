//! Volumes: durable disks that outlive sandboxes — create (empty, from a volume snapshot or
//! from a backup), list (with cursors), get, grow, delete; their snapshots; their backups to
//! the object store, and waiting for a backup's upload to end.

use std::time::Duration;

use pandastack_api_types::{
    BackupState, CreateVolumeRequest, List, PatchVolumeRequest, Volume, VolumeBackup,
    VolumeSnapshot,
};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::{Client, Error};

/// How often [`Client::wait_volume_backup`] asks about an upload under way.
const BACKUP_POLL: Duration = Duration::from_millis(500);

impl Client {
    /// `POST /v1/volumes`, with an `Idempotency-Key`.
    pub async fn create_volume(&self, req: &CreateVolumeRequest) -> Result<Volume, Error> {
        self.create("/v1/volumes", req).await
    }

    /// One page of `GET /v1/volumes`.
    pub async fn list_volumes(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<Volume>, Error> {
        self.page("/v1/volumes", limit, cursor).await
    }

    /// Every volume of the workspace, following `next_cursor` to the end.
    pub async fn list_all_volumes(&self) -> Result<Vec<Volume>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list_volumes(None, cursor.as_deref()).await?;
            all.extend(page.data);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }

    /// `GET /v1/volumes/{name}`.
    pub async fn get_volume(&self, name: &str) -> Result<Volume, Error> {
        self.json(Call::new(Method::GET, volume_path(name, "")))
            .await
    }

    /// `PATCH /v1/volumes/{name}`: grows the volume to `size_gb` (never shrinks it).
    pub async fn grow_volume(&self, name: &str, size_gb: u32) -> Result<Volume, Error> {
        let body = PatchVolumeRequest { size_gb };
        let call = Call::new(Method::PATCH, volume_path(name, "")).payload(Payload::json(&body)?);
        self.json(call).await
    }

    /// `DELETE /v1/volumes/{name}`.
    pub async fn delete_volume(&self, name: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, volume_path(name, "")))
            .await
    }

    /// `POST /v1/volumes/{name}/snapshots`.
    pub async fn create_volume_snapshot(&self, name: &str) -> Result<VolumeSnapshot, Error> {
        self.json(Call::new(Method::POST, volume_path(name, "/snapshots")))
            .await
    }

    /// `GET /v1/volumes/{name}/snapshots`, every page.
    pub async fn list_volume_snapshots(&self, name: &str) -> Result<Vec<VolumeSnapshot>, Error> {
        self.all_pages(&volume_path(name, "/snapshots")).await
    }

    /// `DELETE /v1/volumes/{name}/snapshots/{id}`.
    pub async fn delete_volume_snapshot(&self, name: &str, id: &str) -> Result<(), Error> {
        self.empty(Call::new(
            Method::DELETE,
            volume_path(name, &format!("/snapshots/{}", seg(id))),
        ))
        .await
    }

    /// `POST /v1/volumes/{name}/backups`: the upload runs on the server; the answer is the
    /// backup `uploading` (see [`Client::wait_volume_backup`]).
    pub async fn create_volume_backup(&self, name: &str) -> Result<VolumeBackup, Error> {
        self.json(Call::new(Method::POST, volume_path(name, "/backups")))
            .await
    }

    /// `GET /v1/volumes/{name}/backups`, every page (also for a deleted volume's backups).
    pub async fn list_volume_backups(&self, name: &str) -> Result<Vec<VolumeBackup>, Error> {
        self.all_pages(&volume_path(name, "/backups")).await
    }

    /// `GET /v1/volumes/{name}/backups/{id}`.
    pub async fn get_volume_backup(&self, name: &str, id: &str) -> Result<VolumeBackup, Error> {
        self.json(Call::new(
            Method::GET,
            volume_path(name, &format!("/backups/{}", seg(id))),
        ))
        .await
    }

    /// Polls a backup until it is no longer `uploading` and returns it (`done` or `failed`:
    /// the caller decides what a failure means), or [`Error::Timeout`] after `timeout`.
    pub async fn wait_volume_backup(
        &self,
        name: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<VolumeBackup, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let b = self.get_volume_backup(name, id).await?;
            if b.state != BackupState::Uploading {
                return Ok(b);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "backup {id} of volume {name} still uploading after {}s",
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(BACKUP_POLL).await;
        }
    }

    /// Every item of a cursor-paginated list at `path`.
    async fn all_pages<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Vec<T>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut call = Call::new(Method::GET, path.to_owned());
            if let Some(c) = cursor.take() {
                call = call.query("cursor", c);
            }
            let page: List<T> = self.json(call).await?;
            all.extend(page.data);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }
}

fn volume_path(name: &str, rest: &str) -> String {
    format!("/v1/volumes/{}{rest}", seg(name))
}
