//! Metered usage: hour rows per (workspace, resource) and the cursors of the meter that adds to
//! them (migration 0031).
//!
//! Exactness rests on one rule: what a pass adds and the cursor that says it was added commit
//! together, and the cursor moves only from the value the pass read (a compare-and-set). A pass
//! that crashes leaves nothing; a pass repeated over the same readings — after a restart, or by
//! a second replica — finds the cursor moved and adds nothing ([`Advanced::Stale`]).

use sqlx::AnyPool;

use crate::{col, StoreError};

/// One hour's figures of one resource (or the sum of several). Integers in the units named.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Metered {
    /// Wall time a VM ran.
    pub vm_ms: i64,
    /// vCPUs x ms.
    pub vcpu_ms: i64,
    /// Configured memory (MiB) x ms.
    pub memory_mib_ms: i64,
    /// KiB kept x ms.
    pub storage_kib_ms: i64,
    pub egress_bytes: i64,
    pub ingress_bytes: i64,
    pub invocations: i64,
    pub invocation_ms: i64,
}

impl Metered {
    /// Adds `o` to `self`, field by field.
    pub fn add(&mut self, o: &Metered) {
        self.vm_ms += o.vm_ms;
        self.vcpu_ms += o.vcpu_ms;
        self.memory_mib_ms += o.memory_mib_ms;
        self.storage_kib_ms += o.storage_kib_ms;
        self.egress_bytes += o.egress_bytes;
        self.ingress_bytes += o.ingress_bytes;
        self.invocations += o.invocations;
        self.invocation_ms += o.invocation_ms;
    }

    pub fn is_zero(&self) -> bool {
        *self == Metered::default()
    }
}

/// Which hour of which resource a [`Metered`] belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsageKey {
    pub workspace_id: String,
    /// `sandbox`, `database`, `app`, `function`, `volume`, `snapshot`, …
    pub kind: String,
    pub resource_id: String,
    /// Unix ms of the hour's start (a multiple of 3,600,000).
    pub hour: i64,
}

/// The last reading of a VM already counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmCursor {
    pub at_ms: i64,
    pub run: i64,
    pub net_rx: Option<i64>,
    pub net_tx: Option<i64>,
}

/// What became of an advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advanced {
    /// The figures were added and the cursor moved, together.
    Done,
    /// The cursor was not where the caller read it (another pass counted those readings):
    /// nothing was written.
    Stale,
}

/// One thing a workspace keeps (its size now), for storage metering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub workspace_id: String,
    pub kind: &'static str,
    pub resource_id: String,
    pub bytes: i64,
}

pub struct UsageRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const GIB: i64 = 1 << 30;

async fn add_rows(
    conn: &mut sqlx::AnyConnection,
    rows: &[(UsageKey, Metered)],
) -> Result<(), StoreError> {
    for (k, m) in rows.iter().filter(|(_, m)| !m.is_zero()) {
        sqlx::query(
            "INSERT INTO usage_hours (workspace_id, resource_kind, resource_id, hour, vm_ms, \
               vcpu_ms, memory_mib_ms, storage_kib_ms, egress_bytes, ingress_bytes, invocations, \
               invocation_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (workspace_id, hour, resource_kind, resource_id) DO UPDATE SET \
               vm_ms = usage_hours.vm_ms + excluded.vm_ms, \
               vcpu_ms = usage_hours.vcpu_ms + excluded.vcpu_ms, \
               memory_mib_ms = usage_hours.memory_mib_ms + excluded.memory_mib_ms, \
               storage_kib_ms = usage_hours.storage_kib_ms + excluded.storage_kib_ms, \
               egress_bytes = usage_hours.egress_bytes + excluded.egress_bytes, \
               ingress_bytes = usage_hours.ingress_bytes + excluded.ingress_bytes, \
               invocations = usage_hours.invocations + excluded.invocations, \
               invocation_ms = usage_hours.invocation_ms + excluded.invocation_ms",
        )
        .bind(&k.workspace_id)
        .bind(&k.kind)
        .bind(&k.resource_id)
        .bind(k.hour)
        .bind(m.vm_ms)
        .bind(m.vcpu_ms)
        .bind(m.memory_mib_ms)
        .bind(m.storage_kib_ms)
        .bind(m.egress_bytes)
        .bind(m.ingress_bytes)
        .bind(m.invocations)
        .bind(m.invocation_ms)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

fn cursor_row(r: &sqlx::any::AnyRow) -> Result<VmCursor, StoreError> {
    Ok(VmCursor {
        at_ms: col(r, "at_ms")?,
        run: col(r, "run")?,
        net_rx: col(r, "net_rx")?,
        net_tx: col(r, "net_tx")?,
    })
}

impl UsageRepo<'_> {
    /// The last counted reading of sandbox `id`'s VM (`None`: none counted yet).
    pub async fn cursor(&self, id: &str) -> Result<Option<VmCursor>, StoreError> {
        let r = sqlx::query(
            "SELECT at_ms, run, net_rx, net_tx FROM usage_vm_cursors WHERE sandbox_id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(cursor_row).transpose()
    }

    /// Adds `rows` and moves sandbox `id`'s cursor from `seen` (what the caller read) to `to`,
    /// in one transaction; [`Advanced::Stale`] (nothing written) if the cursor is not `seen`.
    pub async fn advance_vm(
        &self,
        id: &str,
        seen: Option<&VmCursor>,
        to: &VmCursor,
        rows: &[(UsageKey, Metered)],
    ) -> Result<Advanced, StoreError> {
        let mut tx = self.pool.begin().await?;
        // The cursor's write comes first: it takes SQLite's write lock (PostgreSQL's row lock,
        // or the key's for an insert), so two passes over one VM run one after the other.
        let moved = match seen {
            Some(s) => sqlx::query(
                "UPDATE usage_vm_cursors SET at_ms = $2, run = $3, net_rx = $4, net_tx = $5 \
                 WHERE sandbox_id = $1 AND at_ms = $6 AND run = $7",
            )
            .bind(id)
            .bind(to.at_ms)
            .bind(to.run)
            .bind(to.net_rx)
            .bind(to.net_tx)
            .bind(s.at_ms)
            .bind(s.run),
            None => sqlx::query(
                "INSERT INTO usage_vm_cursors (sandbox_id, at_ms, run, net_rx, net_tx) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sandbox_id) DO NOTHING",
            )
            .bind(id)
            .bind(to.at_ms)
            .bind(to.run)
            .bind(to.net_rx)
            .bind(to.net_tx),
        }
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return Ok(Advanced::Stale);
        }
        add_rows(&mut tx, rows).await?;
        tx.commit().await?;
        Ok(Advanced::Done)
    }

    /// Until when storage is counted (`None`: no pass yet).
    pub async fn storage_cursor(&self) -> Result<Option<i64>, StoreError> {
        let r = sqlx::query("SELECT at_ms FROM usage_storage_cursor WHERE id = 1")
            .fetch_optional(self.pool)
            .await?;
        r.as_ref().map(|r| col(r, "at_ms")).transpose()
    }

    /// Adds `rows` and moves the storage cursor from `seen` to `to`, in one transaction (see
    /// [`Self::advance_vm`]).
    pub async fn advance_storage(
        &self,
        seen: Option<i64>,
        to: i64,
        rows: &[(UsageKey, Metered)],
    ) -> Result<Advanced, StoreError> {
        let mut tx = self.pool.begin().await?;
        let moved = match seen {
            Some(s) => sqlx::query(
                "UPDATE usage_storage_cursor SET at_ms = $1 WHERE id = 1 AND at_ms = $2",
            )
            .bind(to)
            .bind(s),
            None => sqlx::query(
                "INSERT INTO usage_storage_cursor (id, at_ms) VALUES (1, $1) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(to),
        }
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return Ok(Advanced::Stale);
        }
        add_rows(&mut tx, rows).await?;
        tx.commit().await?;
        Ok(Advanced::Done)
    }

    /// Adds `rows` as they are (what needs no cursor: a finished function invocation).
    pub async fn add(&self, rows: &[(UsageKey, Metered)]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        add_rows(&mut tx, rows).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Everything every workspace keeps now, with its size: volumes and their snapshots
    /// (provisioned size), finished volume backups (bytes uploaded), snapshots, hibernated
    /// sandboxes' images and template builds that did not fail.
    pub async fn kept(&self) -> Result<Vec<Kept>, StoreError> {
        let rows = sqlx::query(
            "SELECT workspace_id, 'volume' AS kind, id, size_gb * $1 AS bytes FROM volumes \
             UNION ALL SELECT workspace_id, 'volume_snapshot', id, size_gb * $1 \
               FROM volume_snapshots \
             UNION ALL SELECT workspace_id, 'volume_backup', id, COALESCE(bytes_uploaded, 0) \
               FROM volume_backups \
             UNION ALL SELECT workspace_id, 'snapshot', id, size_bytes FROM snapshots \
             UNION ALL SELECT workspace_id, 'sandbox', id, image_bytes FROM sandboxes \
               WHERE state = 'hibernated' \
             UNION ALL SELECT workspace_id, 'template', id, COALESCE(image_bytes, 0) \
               FROM template_builds WHERE status <> 'failed'",
        )
        .bind(GIB)
        .fetch_all(self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let kind: String = col(r, "kind")?;
            let kind = match kind.as_str() {
                "volume" => "volume",
                "volume_snapshot" => "volume_snapshot",
                "volume_backup" => "volume_backup",
                "snapshot" => "snapshot",
                "sandbox" => "sandbox",
                _ => "template",
            };
            let bytes: i64 = col(r, "bytes")?;
            if bytes > 0 {
                out.push(Kept {
                    workspace_id: col(r, "workspace_id")?,
                    kind,
                    resource_id: col(r, "id")?,
                    bytes,
                });
            }
        }
        Ok(out)
    }

    /// Workspace `ws`'s rows of the hours starting in `[from_ms, to_ms)`, oldest first.
    pub async fn hours(
        &self,
        ws: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(UsageKey, Metered)>, StoreError> {
        let rows = sqlx::query(
            "SELECT workspace_id, resource_kind, resource_id, hour, vm_ms, vcpu_ms, \
               memory_mib_ms, storage_kib_ms, egress_bytes, ingress_bytes, invocations, \
               invocation_ms \
             FROM usage_hours WHERE workspace_id = $1 AND hour >= $2 AND hour < $3 \
             ORDER BY hour, resource_kind, resource_id",
        )
        .bind(ws)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    UsageKey {
                        workspace_id: col(r, "workspace_id")?,
                        kind: col(r, "resource_kind")?,
                        resource_id: col(r, "resource_id")?,
                        hour: col(r, "hour")?,
                    },
                    Metered {
                        vm_ms: col(r, "vm_ms")?,
                        vcpu_ms: col(r, "vcpu_ms")?,
                        memory_mib_ms: col(r, "memory_mib_ms")?,
                        storage_kib_ms: col(r, "storage_kib_ms")?,
                        egress_bytes: col(r, "egress_bytes")?,
                        ingress_bytes: col(r, "ingress_bytes")?,
                        invocations: col(r, "invocations")?,
                        invocation_ms: col(r, "invocation_ms")?,
                    },
                ))
            })
            .collect()
    }

    /// Deletes the cursors of sandboxes that no longer exist; returns how many.
    pub async fn forget_gone(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM usage_vm_cursors WHERE NOT EXISTS \
             (SELECT 1 FROM sandboxes WHERE sandboxes.id = usage_vm_cursors.sandbox_id)",
        )
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
