//! Databases moved off a host being drained (#39): each database whose volume is on the host
//! moves, with no commit lost, to a volume on another host.
//!
//! ```text
//!   VM woken (a hibernated one) ─► under the database's start lock: a clean shutdown
//!   (clients told why), the VM removed ─► the volume copied to another host through the object
//!   store ─► the database's row names the copy (one transaction) ─► the old volume removed
//!   ─► a VM started on the copy (if one was running)
//! ```
//!
//! Nothing is replayed: the copy is of a cleanly stopped cluster, so it starts on the same
//! timeline and its archive goes on where it was (what the old VM had not archived yet is in
//! the copy's outbox). Clients are cut off for the copy: a new connection meanwhile waits on
//! the start lock and connects to the new VM. A copy that fails leaves the database on its
//! volume, started again if it was running.

use pandastack_api_types::SandboxState;
use pandastack_store::{DatabaseRow, StoreError};

use super::{volume_name, DatabaseError, Databases};

impl Databases {
    /// Moves every database whose volume is on host `host_id` to another host, one at a time
    /// (for a drain). Returns how many moved and how many stayed (each failure logged).
    pub async fn move_off(&self, host_id: &str) -> Result<(usize, usize), DatabaseError> {
        let (mut moved, mut stayed) = (0, 0);
        for row in self.store.databases().with_volume_on(host_id).await? {
            let id = row.id.clone();
            match self.move_to_another_host(row, host_id).await {
                Ok(true) => moved += 1,
                Ok(false) => {}
                Err(e) => {
                    stayed += 1;
                    tracing::warn!(database = %id, host = %host_id, error = &e as &dyn std::error::Error, "drain: a database stays on the host");
                }
            }
        }
        tracing::info!(host = %host_id, moved, stayed, "drain: databases moved off");
        Ok((moved, stayed))
    }

    /// Database `row`, whose volume is on host `from`, moved to another host (see the module
    /// docs). `false`: it was not there any more.
    async fn move_to_another_host(
        &self,
        row: DatabaseRow,
        from: &str,
    ) -> Result<bool, DatabaseError> {
        // A hibernated VM is woken so that its cluster stops cleanly.
        let was_running = match &row.sandbox_id {
            Some(sb) => match self.store.sandboxes().by_id(sb).await {
                Ok(s) => {
                    if s.state == SandboxState::Hibernated {
                        self.running(&row).await?;
                    }
                    s.state == SandboxState::Running
                }
                Err(StoreError::NotFound) => false,
                Err(e) => return Err(e.into()),
            },
            None => false,
        };
        let moved = self.onto_a_copy(&row.id, from).await;
        if was_running {
            // On its new volume, or again on its old one when the move failed.
            if let Err(e) = self.running(&row).await {
                tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "a drained database's VM did not start; the next connection starts it");
            }
        }
        moved
    }

    /// Under database `id`'s start lock: its VM stopped cleanly and removed, its volume (on
    /// host `from`) copied to another host, the row naming the copy, the old volume removed.
    /// `false`: its volume was not on `from` any more (nothing done).
    async fn onto_a_copy(&self, id: &str, from: &str) -> Result<bool, DatabaseError> {
        let lock = self.start_lock(id);
        let _held = lock.lock().await;
        let row = self.store.databases().by_id(id).await?;
        let (ws, name) = (row.workspace_id.as_str(), volume_name(id));
        let volume = self.store.volumes().get(ws, &name).await?;
        if volume.host_id != from || volume.id != row.volume_id {
            return Ok(false);
        }
        if let Some(sb) = &row.sandbox_id {
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) => {
                    self.shut_down(&row, &s).await;
                    self.sandboxes.delete(&s).await?;
                }
                Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
            self.store.databases().set_sandbox(id, None).await?;
        }
        let temp = format!("{name}-m{:06x}", rand::random::<u32>() >> 8);
        let copy = self.volumes.copy_elsewhere(&volume, &temp).await?;
        let retired = format!("{name}-x{:06x}", rand::random::<u32>() >> 8);
        self.store
            .databases()
            .swap_volume(id, &volume.id, &retired, &copy.row.id, &name, None)
            .await?;
        self.sessions.forget(id);
        tracing::info!(database = %id, from = %from, to = %copy.row.host_id, "database moved to another host");
        if let Err(e) = self.volumes.delete(ws, &retired).await {
            tracing::warn!(database = %id, volume = %retired, error = &e as &dyn std::error::Error, "could not remove a moved database's old volume");
        }
        Ok(true)
    }
}
