//! Sandbox rows.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::AnyPool;

use crate::placement::{place, Demand, Placement, Retry};
use crate::volumes::{claim, Claimed, MountClaim};
use crate::{col, found, parsed, Backend, OnHostLoss, OnTimeout, SandboxState, StoreError};

/// One sandbox as stored.
/// A hibernated sandbox's copy in the object store, kept in case its host is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableCopy {
    /// The stored image's tag (its host's).
    pub tag: String,
    /// When it became durable (Unix ms).
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRow {
    pub id: String,
    pub workspace_id: String,
    /// The host the sandbox's VM (or its hibernation image) is on.
    pub host_id: String,
    pub template: String,
    pub state: SandboxState,
    pub vcpus: i64,
    pub memory_mib: i64,
    /// Disk limits its VM runs with (MiB/s, IOPS; 0: unlimited). Before its create finishes:
    /// what the create asked for (0: not named).
    pub disk_mbps: i64,
    pub disk_iops: i64,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub ttl_seconds: Option<i64>,
    pub idle_timeout_seconds: Option<i64>,
    pub on_timeout: OnTimeout,
    /// What becomes of it if its host is lost (see [`SandboxRepo::to_restore`]).
    pub on_host_loss: OnHostLoss,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_activity_at: i64,
    pub boot_ms: i64,
    pub boot_mode: String,
    pub snapshot_id: Option<String>,
    pub parent_id: Option<String>,
    /// Secret that opens the sandbox's private ports through the preview proxy.
    pub access_token: String,
    /// Ports anyone may reach through the preview proxy.
    pub public_ports: BTreeSet<u16>,
    /// Volumes its create mounted (slot `i` is `volumes[i]`).
    pub volumes: Vec<pandastack_api_types::SandboxVolume>,
}

impl SandboxRow {
    /// A new sandbox the platform makes for its own services (an app's or a database's VM, a
    /// function instance, a schedule run's sandbox) before its create: state `starting`, the
    /// sizes its template gives, no environment, TTL or idle timeout, `kill` on timeout, a new
    /// id and access token. Callers set what differs.
    pub fn service(
        workspace_id: &str,
        host_id: &str,
        template: &str,
        metadata: BTreeMap<String, String>,
    ) -> Self {
        let now = crate::now_ms();
        Self {
            id: crate::new_id("sb-"),
            workspace_id: workspace_id.to_owned(),
            host_id: host_id.to_owned(),
            template: template.to_owned(),
            state: SandboxState::Starting,
            vcpus: 0,
            memory_mib: 0,
            disk_mbps: 0,
            disk_iops: 0,
            metadata,
            env: BTreeMap::new(),
            ttl_seconds: None,
            idle_timeout_seconds: None,
            on_timeout: OnTimeout::Kill,
            on_host_loss: OnHostLoss::Lost,
            created_at: now,
            expires_at: None,
            last_activity_at: now,
            boot_ms: 0,
            boot_mode: "restore".into(),
            snapshot_id: None,
            parent_id: None,
            access_token: crate::new_token(),
            public_ports: BTreeSet::new(),
            volumes: Vec::new(),
        }
    }
}

/// List filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub state: Option<SandboxState>,
    /// Every pair must match.
    pub metadata: Vec<(String, String)>,
}

pub struct SandboxRepo<'a> {
    pub(crate) pool: &'a AnyPool,
    pub(crate) backend: Backend,
}

const COLUMNS: &str = "id, workspace_id, host_id, template, state, vcpus, memory_mib, metadata, env, ttl_seconds, idle_timeout_seconds, on_timeout, created_at, expires_at, last_activity_at, boot_ms, boot_mode, snapshot_id, parent_id, access_token, public_ports, volumes, disk_mbps, disk_iops, on_host_loss";

fn row(r: &sqlx::any::AnyRow) -> Result<SandboxRow, StoreError> {
    let metadata: String = col(r, "metadata")?;
    let env: String = col(r, "env")?;
    let public_ports: String = col(r, "public_ports")?;
    let volumes: String = col(r, "volumes")?;
    Ok(SandboxRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        host_id: col(r, "host_id")?,
        template: col(r, "template")?,
        state: parsed(r, "state", SandboxState::parse)?,
        vcpus: col(r, "vcpus")?,
        memory_mib: col(r, "memory_mib")?,
        disk_mbps: col(r, "disk_mbps")?,
        disk_iops: col(r, "disk_iops")?,
        metadata: serde_json::from_str(&metadata)?,
        env: serde_json::from_str(&env)?,
        ttl_seconds: col(r, "ttl_seconds")?,
        idle_timeout_seconds: col(r, "idle_timeout_seconds")?,
        on_timeout: parsed(r, "on_timeout", |s| match s {
            "kill" => Some(OnTimeout::Kill),
            "hibernate" => Some(OnTimeout::Hibernate),
            _ => None,
        })?,
        on_host_loss: parsed(r, "on_host_loss", OnHostLoss::parse)?,
        created_at: col(r, "created_at")?,
        expires_at: col(r, "expires_at")?,
        last_activity_at: col(r, "last_activity_at")?,
        boot_ms: col(r, "boot_ms")?,
        boot_mode: col(r, "boot_mode")?,
        snapshot_id: col(r, "snapshot_id")?,
        parent_id: col(r, "parent_id")?,
        access_token: col(r, "access_token")?,
        public_ports: serde_json::from_str(&public_ports)?,
        volumes: serde_json::from_str(&volumes)?,
    })
}

impl SandboxRepo<'_> {
    pub async fn insert(&self, s: &SandboxRow) -> Result<(), StoreError> {
        insert(self.pool, s).await
    }

    /// Inserts `rows` (one workspace's) in one transaction if the workspace then has at most
    /// `max_sandboxes` sandboxes that are not hibernated; otherwise writes nothing and returns
    /// [`StoreError::LimitReached`]. Concurrent callers are serialised on the workspace row, so
    /// two creates can never both take the last place.
    pub async fn insert_within_limit(&self, rows: &[SandboxRow]) -> Result<(), StoreError> {
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let mut tx = self.pool.begin().await?;
        check_limit(&mut tx, &first.workspace_id, rows.len()).await?;
        for row in rows {
            insert(&mut *tx, row).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// [`SandboxRepo::insert_within_limit`] for one sandbox that mounts `mounts` (its
    /// `volumes`): in the same transaction each volume is claimed (see
    /// [`crate::volumes`]: missing, elsewhere or busy volumes write nothing).
    pub async fn insert_with_volumes(
        &self,
        row: &SandboxRow,
        mounts: &[MountClaim],
    ) -> Result<Vec<Claimed>, StoreError> {
        let mut tx = self.pool.begin().await?;
        check_limit(&mut tx, &row.workspace_id, 1).await?;
        insert(&mut *tx, row).await?;
        let claimed = claim(&mut tx, &row.workspace_id, &row.host_id, &row.id, mounts).await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// [`SandboxRepo::insert_with_volumes`] on the host placement chooses for `demand`, in the
    /// same transaction (the `placement` module says how): the workspace's limit is checked,
    /// the host chosen, `row.host_id` and `row.memory_mib` (= `demand.memory_mib`) set, the
    /// row inserted — from then on it counts against its host, a create in flight — and the
    /// volumes claimed on that host (pin the demand to the volumes' host). Returns where it
    /// went and why, with the claims. [`StoreError::NoCapacity`] when no host fits; on any
    /// error nothing is written (though `row` may have been given a host).
    pub async fn insert_placed(
        &self,
        row: &mut SandboxRow,
        mounts: &[MountClaim],
        demand: &Demand<'_>,
    ) -> Result<(Placement, Vec<Claimed>), StoreError> {
        let mut retry = Retry::default();
        loop {
            let mut tx = self.pool.begin().await?;
            check_limit(&mut tx, &row.workspace_id, 1).await?;
            let placed = place(&mut tx, self.backend, demand, retry.raced).await;
            let Some(placement) = retry.outcome(placed)? else {
                tx.rollback().await?;
                continue;
            };
            row.host_id.clone_from(&placement.host_id);
            row.memory_mib = demand.memory_mib;
            insert(&mut *tx, row).await?;
            let claimed = claim(&mut tx, &row.workspace_id, &row.host_id, &row.id, mounts).await?;
            tx.commit().await?;
            return Ok((placement, claimed));
        }
    }

    /// Records a finished create: the VM's shape (with its disk limits), how it booted and its
    /// state, in one update.
    pub async fn finish_create(&self, s: &SandboxRow) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET template = $1, vcpus = $2, memory_mib = $3, boot_ms = $4, \
             boot_mode = $5, state = $6, disk_mbps = $7, disk_iops = $8 WHERE id = $9",
        )
        .bind(&s.template)
        .bind(s.vcpus)
        .bind(s.memory_mib)
        .bind(s.boot_ms)
        .bind(&s.boot_mode)
        .bind(s.state.as_str())
        .bind(s.disk_mbps)
        .bind(s.disk_iops)
        .bind(&s.id)
        .execute(self.pool)
        .await?;
        found(done)
    }

    pub async fn get(&self, workspace_id: &str, id: &str) -> Result<SandboxRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// A page of a workspace's sandboxes ordered by `(created_at, id)`, after `after`.
    pub async fn list(
        &self,
        workspace_id: &str,
        filter: &Filter,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        // Metadata filters are applied after the query (JSON functions differ between engines);
        // keyset paging therefore fetches in batches until the page is full.
        let mut out = Vec::new();
        let mut cursor = after;
        loop {
            let (ms, id) = cursor.clone().unwrap_or((i64::MIN, String::new()));
            let rows = sqlx::query(&format!(
                "SELECT {COLUMNS} FROM sandboxes WHERE workspace_id = $1 \
                 AND (created_at > $2 OR (created_at = $2 AND id > $3)) \
                 AND ($4 IS NULL OR state = $4) \
                 ORDER BY created_at, id LIMIT $5"
            ))
            .bind(workspace_id)
            .bind(ms)
            .bind(&id)
            .bind(filter.state.map(SandboxState::as_str))
            .bind(i64::from(limit) + 1)
            .fetch_all(self.pool)
            .await?;
            let exhausted = rows.len() <= limit as usize;
            for r in &rows {
                let s = row(r)?;
                cursor = Some((s.created_at, s.id.clone()));
                if filter
                    .metadata
                    .iter()
                    .all(|(k, v)| s.metadata.get(k) == Some(v))
                {
                    out.push(s);
                    if out.len() > limit as usize {
                        return Ok(out);
                    }
                }
            }
            if exhausted {
                return Ok(out);
            }
        }
    }

    pub async fn count_active(&self, workspace_id: &str) -> Result<i64, StoreError> {
        let r = sqlx::query(
            "SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = $1 AND state <> 'hibernated'",
        )
        .bind(workspace_id)
        .fetch_one(self.pool)
        .await?;
        col(&r, "n")
    }

    pub async fn set_state(&self, id: &str, state: SandboxState) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET state = $1, durable_tag = CASE WHEN state = $1 THEN durable_tag ELSE NULL END WHERE id = $2")
            .bind(state.as_str())
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// [`Self::set_state`] for a write caused by host `host_id`'s agent that joined with
    /// `epoch`: applied only while that epoch is current and the host is not dead
    /// ([`StoreError::Fenced`] otherwise), and only to a sandbox that is still on that host
    /// ([`StoreError::NotFound`] for one moved elsewhere or deleted). Either refusal writes
    /// nothing.
    pub async fn set_state_fenced(
        &self,
        id: &str,
        host_id: &str,
        epoch: i64,
        state: SandboxState,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        crate::hosts::fence(&mut tx, host_id, epoch).await?;
        let done = sqlx::query("UPDATE sandboxes SET state = $1, durable_tag = CASE WHEN state = $1 THEN durable_tag ELSE NULL END WHERE id = $2 AND host_id = $3")
            .bind(state.as_str())
            .bind(id)
            .bind(host_id)
            .execute(&mut *tx)
            .await?;
        found(done)?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Self::set_state`] and [`Self::touch`] in one statement (one commit: a wake on a
    /// request's path waits for it).
    pub async fn set_state_touched(
        &self,
        id: &str,
        state: SandboxState,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET state = $1, durable_tag = CASE WHEN state = $1 THEN durable_tag ELSE NULL END, last_activity_at = $2 WHERE id = $3")
            .bind(state.as_str())
            .bind(now)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Records the host disk a hibernated sandbox's files take (its storage quota counts it).
    pub async fn set_image_bytes(&self, id: &str, bytes: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET image_bytes = $1 WHERE id = $2")
            .bind(bytes)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Records API activity (for the idle timeout).
    pub async fn touch(&self, id: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET last_activity_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Replaces timeouts and metadata (the caller merged the patch).
    pub async fn update(&self, s: &SandboxRow) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE sandboxes SET metadata = $1, ttl_seconds = $2, idle_timeout_seconds = $3, expires_at = $4 WHERE workspace_id = $5 AND id = $6",
        )
        .bind(serde_json::to_string(&s.metadata)?)
        .bind(s.ttl_seconds)
        .bind(s.idle_timeout_seconds)
        .bind(s.expires_at)
        .bind(&s.workspace_id)
        .bind(&s.id)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    /// Any workspace's sandbox `id` (for the preview proxy, which authenticates by the
    /// sandbox's token or a key of its workspace).
    pub async fn by_id(&self, id: &str) -> Result<SandboxRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM sandboxes WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row(&r)
    }

    /// Sets the access token of a sandbox that has none yet; returns the token it has then.
    pub async fn ensure_access_token(&self, id: &str, token: &str) -> Result<String, StoreError> {
        sqlx::query("UPDATE sandboxes SET access_token = $1 WHERE id = $2 AND access_token = ''")
            .bind(token)
            .bind(id)
            .execute(self.pool)
            .await?;
        let r = sqlx::query("SELECT access_token FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        col(&r, "access_token")
    }

    /// Makes `port` public or private again; returns the public ports then.
    pub async fn set_port_public(
        &self,
        id: &str,
        port: u16,
        public: bool,
    ) -> Result<BTreeSet<u16>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // A write first takes SQLite's write lock (as in `insert_within_limit`).
        let touched = sqlx::query("UPDATE sandboxes SET public_ports = public_ports WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        found(touched)?;
        let r = sqlx::query("SELECT public_ports FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        let text: String = col(&r, "public_ports")?;
        let mut ports: BTreeSet<u16> = serde_json::from_str(&text)?;
        if public {
            ports.insert(port);
        } else {
            ports.remove(&port);
        }
        sqlx::query("UPDATE sandboxes SET public_ports = $1 WHERE id = $2")
            .bind(serde_json::to_string(&ports)?)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ports)
    }

    /// Deletes a sandbox's row and its volume mounts.
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sandbox_volumes WHERE sandbox_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sandboxes WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Moves hibernated sandbox `id` from host `from` to host `to` (its image adopted there):
    /// `false`, writing nothing, when it is no longer hibernated on `from` (woken, deleted or
    /// moved meanwhile). A hibernated sandbox holds no VM, so neither host's use changes.
    pub async fn move_hibernated(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET host_id = $1, durable_tag = NULL, durable_at = NULL \
             WHERE id = $2 AND host_id = $3 AND state = 'hibernated'",
        )
        .bind(to)
        .bind(id)
        .bind(from)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records that hibernated sandbox `id` on `host_id` has a durable copy `tag` in the object
    /// store since `at` (Unix ms): only while it is still there, hibernated, and untouched
    /// since `hibernated_at` (its `last_activity_at` when it hibernated; a wake and a new
    /// hibernation since make the copy stale). Whether it was recorded.
    pub async fn set_durable(
        &self,
        id: &str,
        host_id: &str,
        hibernated_at: i64,
        tag: &str,
        at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET durable_tag = $1, durable_at = $2 WHERE id = $3 AND host_id = $4 \
             AND state = 'hibernated' AND last_activity_at = $5",
        )
        .bind(tag)
        .bind(at)
        .bind(id)
        .bind(host_id)
        .bind(hibernated_at)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The durable copy of sandbox `id`'s hibernation image, if it has one (see
    /// [`Self::set_durable`]).
    pub async fn durable_copy(&self, id: &str) -> Result<Option<DurableCopy>, StoreError> {
        let r = sqlx::query("SELECT durable_tag, durable_at FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        let tag: Option<String> = col(&r, "durable_tag")?;
        let at: Option<i64> = col(&r, "durable_at")?;
        Ok(tag.map(|tag| DurableCopy {
            tag,
            at_ms: at.unwrap_or_default(),
        }))
    }

    /// Moves hibernated sandbox `id` off dead host `from` to `to`, which adopted its durable
    /// copy `tag`: only while `from` is dead and the row still names that copy (a sandbox
    /// re-homed, woken or deleted meanwhile is not moved). Whether it moved.
    pub async fn rehome_hibernated(
        &self,
        id: &str,
        from: &str,
        to: &str,
        tag: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET host_id = $1, durable_tag = NULL, durable_at = NULL \
             WHERE id = $2 AND host_id = $3 AND state = 'hibernated' AND durable_tag = $4 \
             AND EXISTS (SELECT 1 FROM hosts WHERE hosts.id = $3 AND hosts.state = 'dead')",
        )
        .bind(to)
        .bind(id)
        .bind(from)
        .bind(tag)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records snapshot `snapshot` (its files durable in the object store) as what sandbox
    /// `id` is restored from if its host is lost, while the snapshot's row is there (a
    /// snapshot deleted meanwhile is not recorded). Whether it was recorded.
    pub async fn set_checkpoint(&self, id: &str, snapshot: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET checkpoint = $1 WHERE id = $2 \
             AND EXISTS (SELECT 1 FROM snapshots WHERE snapshots.id = $1)",
        )
        .bind(snapshot)
        .bind(id)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The state sandbox `id` was in when its host's death made it `lost` (`None`: not lost
    /// since that was recorded).
    pub async fn lost_from(&self, id: &str) -> Result<Option<SandboxState>, StoreError> {
        let r = sqlx::query("SELECT lost_from FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        let from: Option<String> = col(&r, "lost_from")?;
        Ok(from.as_deref().and_then(SandboxState::parse))
    }

    /// Records snapshot `snapshot`, taken by the platform (no snapshot row), as what sandbox
    /// `id` is restored from if its host is lost, and makes it `on_host_loss: restore`.
    /// Whether its row is still there.
    pub async fn set_platform_checkpoint(
        &self,
        id: &str,
        snapshot: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET checkpoint = $1, on_host_loss = 'restore' WHERE id = $2",
        )
        .bind(snapshot)
        .bind(id)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The snapshot sandbox `id` is restored from if its host is lost (see
    /// [`Self::set_checkpoint`]), if any.
    pub async fn checkpoint(&self, id: &str) -> Result<Option<String>, StoreError> {
        let r = sqlx::query("SELECT checkpoint FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        col(&r, "checkpoint")
    }

    /// Forgets snapshot `snapshot` as any sandbox's checkpoint (it is being deleted).
    pub async fn clear_checkpoint(&self, snapshot: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET checkpoint = NULL WHERE checkpoint = $1")
            .bind(snapshot)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// The sandboxes to restore on another host (at most `limit`, oldest first): `lost`, on a
    /// host that is `dead`, created with [`OnHostLoss::Restore`]; each with its checkpoint
    /// (see [`Self::set_checkpoint`]), if it has one.
    pub async fn to_restore(
        &self,
        limit: u32,
    ) -> Result<Vec<(SandboxRow, Option<String>)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS}, checkpoint FROM sandboxes s WHERE state = 'lost' \
             AND on_host_loss = 'restore' \
             AND EXISTS (SELECT 1 FROM hosts h WHERE h.id = s.host_id AND h.state = 'dead') \
             ORDER BY created_at, id LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((row(r)?, col(r, "checkpoint")?)))
            .collect()
    }

    /// Takes lost sandbox `id` off dead host `from` for a restore on `to`: the row names `to`
    /// and says `starting`, only while it is `lost` on `from` and `from` is dead (so of
    /// replicas restoring it at once, one does). Whether it was taken.
    pub async fn take_lost(&self, id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET host_id = $1, state = 'starting', durable_tag = NULL, \
             durable_at = NULL WHERE id = $2 AND host_id = $3 AND state = 'lost' \
             AND EXISTS (SELECT 1 FROM hosts WHERE hosts.id = $3 AND hosts.state = 'dead')",
        )
        .bind(to)
        .bind(id)
        .bind(from)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives a restore of sandbox `id` on `to` up: the row is `lost` on `from` again, if it is
    /// still `starting` on `to` (see [`Self::take_lost`]). Whether it was given back.
    pub async fn give_back_lost(&self, id: &str, from: &str, to: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE sandboxes SET host_id = $1, state = 'lost' \
             WHERE id = $2 AND host_id = $3 AND state = 'starting'",
        )
        .bind(from)
        .bind(id)
        .bind(to)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The host placement would choose for `demand` now, without writing anything (a move's
    /// destination: the sandbox's row changes host only once its image is there, see
    /// [`SandboxRepo::move_hibernated`]). [`StoreError::NoCapacity`] when no host fits.
    pub async fn choose_host(&self, demand: &Demand<'_>) -> Result<Placement, StoreError> {
        let mut retry = Retry::default();
        loop {
            let mut tx = self.pool.begin().await?;
            let placed = place(&mut tx, self.backend, demand, retry.raced).await;
            tx.rollback().await?;
            if let Some(placement) = retry.outcome(placed)? {
                return Ok(placement);
            }
        }
    }

    /// Every sandbox on host `host_id` (all workspaces) with its recorded state, for
    /// reconciling the host with its rows at start.
    pub async fn on_host(&self, host_id: &str) -> Result<Vec<(String, SandboxState)>, StoreError> {
        let rows = sqlx::query("SELECT id, state FROM sandboxes WHERE host_id = $1 ORDER BY id")
            .bind(host_id)
            .fetch_all(self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((col(r, "id")?, parsed(r, "state", SandboxState::parse)?)))
            .collect()
    }

    /// How many sandboxes (every workspace, every host) are in each state, for the operator's
    /// metrics.
    pub async fn count_by_state(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM sandboxes GROUP BY state")
            .fetch_all(self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((col(r, "state")?, col(r, "n")?)))
            .collect()
    }

    /// How many sandboxes (any state, every workspace) each host has rows for; hosts with none
    /// are left out. Administration only (the operator's host list), never for a user request.
    pub async fn count_by_host(
        &self,
    ) -> Result<std::collections::BTreeMap<String, i64>, StoreError> {
        let rows = sqlx::query("SELECT host_id, COUNT(*) AS n FROM sandboxes GROUP BY host_id")
            .fetch_all(self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((col(r, "host_id")?, col(r, "n")?)))
            .collect()
    }

    /// Sandboxes on host `host_id` whose TTL has passed or that have been idle past their idle
    /// timeout at `now`.
    pub async fn expired(&self, host_id: &str, now: i64) -> Result<Vec<SandboxRow>, StoreError> {
        self.expired_where(Some(host_id), now).await
    }

    /// [`Self::expired`] on every host (a cluster's control plane, whose sandboxes are on its
    /// agents' hosts).
    pub async fn expired_on_any_host(&self, now: i64) -> Result<Vec<SandboxRow>, StoreError> {
        self.expired_where(None, now).await
    }

    /// Sandboxes whose VM the usage meter reads (running, paused or hibernated: a hibernated
    /// VM's last readings may not be counted yet), on host `host_id` or (`None`) every host.
    pub async fn with_vms(&self, host_id: Option<&str>) -> Result<Vec<SandboxRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE ($1 = '' OR host_id = $1) \
             AND state IN ('running', 'paused', 'hibernated')"
        ))
        .bind(host_id.unwrap_or(""))
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    async fn expired_where(
        &self,
        host_id: Option<&str>,
        now: i64,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE ($2 = '' OR host_id = $2) \
             AND state NOT IN ('hibernated', 'lost') AND \
             ((expires_at IS NOT NULL AND expires_at <= $1) OR \
              (idle_timeout_seconds IS NOT NULL AND last_activity_at + idle_timeout_seconds * 1000 <= $1))"
        ))
        .bind(now)
        .bind(host_id.unwrap_or(""))
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }
}

async fn insert<'e, E>(exec: E, s: &SandboxRow) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(&format!(
        "INSERT INTO sandboxes ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)"
    ))
    .bind(&s.id)
    .bind(&s.workspace_id)
    .bind(&s.host_id)
    .bind(&s.template)
    .bind(s.state.as_str())
    .bind(s.vcpus)
    .bind(s.memory_mib)
    .bind(serde_json::to_string(&s.metadata)?)
    .bind(serde_json::to_string(&s.env)?)
    .bind(s.ttl_seconds)
    .bind(s.idle_timeout_seconds)
    .bind(s.on_timeout.as_str())
    .bind(s.created_at)
    .bind(s.expires_at)
    .bind(s.last_activity_at)
    .bind(s.boot_ms)
    .bind(&s.boot_mode)
    .bind(&s.snapshot_id)
    .bind(&s.parent_id)
    .bind(&s.access_token)
    .bind(serde_json::to_string(&s.public_ports)?)
    .bind(serde_json::to_string(&s.volumes)?)
    .bind(s.disk_mbps)
    .bind(s.disk_iops)
    .bind(s.on_host_loss.as_str())
    .execute(exec)
    .await?;
    Ok(())
}

/// Locks workspace `ws` for the rest of `tx` and checks that `adding` more sandboxes keep it
/// within `max_sandboxes` sandboxes that are not hibernated.
async fn check_limit(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ws: &str,
    adding: usize,
) -> Result<(), StoreError> {
    // A write first: on SQLite it takes the database's write lock now (a read first would
    // fail to upgrade if another writer committed meanwhile); on PostgreSQL it locks the
    // workspace row until commit, and one that waited for the lock returns the row as the
    // create that held it left it. The count of sandboxes that are not hibernated is kept on
    // the row by triggers (see `use_counters`).
    let r = sqlx::query(
        "UPDATE workspaces SET max_sandboxes = max_sandboxes WHERE id = $1 \
         RETURNING max_sandboxes, active_sandboxes",
    )
    .bind(ws)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    let limit: i64 = col(&r, "max_sandboxes")?;
    let active: i64 = col(&r, "active_sandboxes")?;
    if active + adding as i64 > limit {
        return Err(StoreError::LimitReached { limit });
    }
    Ok(())
}
