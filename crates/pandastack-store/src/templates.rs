//! User-built template rows: one per build (a version of a workspace's template).

use std::collections::BTreeMap;

use sqlx::AnyPool;

use crate::{col, found, parsed, StoreError};

/// Where a build stands: `queued → building → baking → ready | failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildStatus {
    Queued,
    Building,
    Baking,
    Ready,
    Failed,
}

impl BuildStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStatus::Queued => "queued",
            BuildStatus::Building => "building",
            BuildStatus::Baking => "baking",
            BuildStatus::Ready => "ready",
            BuildStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => BuildStatus::Queued,
            "building" => BuildStatus::Building,
            "baking" => BuildStatus::Baking,
            "ready" => BuildStatus::Ready,
            "failed" => BuildStatus::Failed,
            _ => return None,
        })
    }

    /// Still under way (not `ready` or `failed`).
    pub fn active(self) -> bool {
        matches!(
            self,
            BuildStatus::Queued | BuildStatus::Building | BuildStatus::Baking
        )
    }
}

/// What a build starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A template spec (TOML) built into a Debian image.
    Spec,
    /// An OCI image (a registry reference or an uploaded archive).
    Oci,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Spec => "spec",
            SourceKind::Oci => "oci",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "spec" => Some(SourceKind::Spec),
            "oci" => Some(SourceKind::Oci),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateBuildRow {
    /// `<name>-v<version>-<6 hex>`: also the baked template's name on the host, and what the
    /// sandboxes made from this version show as their template.
    pub id: String,
    pub workspace_id: String,
    /// The host that builds it and keeps the baked template.
    pub host_id: String,
    pub name: String,
    pub version: i64,
    pub source: SourceKind,
    pub status: BuildStatus,
    pub error: Option<String>,
    pub description: String,
    pub vcpus: i64,
    pub memory_mib: i64,
    pub disk_mb: i64,
    /// Environment from the image (OCI `Env`), given to every sandbox of the template.
    pub env: BTreeMap<String, String>,
    pub image_bytes: Option<i64>,
    pub build_ms: Option<i64>,
    pub bake_ms: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct TemplateBuilds<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, workspace_id, host_id, name, version, source, status, error, description, vcpus, memory_mib, disk_mb, env, image_bytes, build_ms, bake_ms, created_at, updated_at";

fn row(r: &sqlx::any::AnyRow) -> Result<TemplateBuildRow, StoreError> {
    let env: String = col(r, "env")?;
    Ok(TemplateBuildRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        host_id: col(r, "host_id")?,
        name: col(r, "name")?,
        version: col(r, "version")?,
        source: parsed(r, "source", SourceKind::parse)?,
        status: parsed(r, "status", BuildStatus::parse)?,
        error: col(r, "error")?,
        description: col(r, "description")?,
        vcpus: col(r, "vcpus")?,
        memory_mib: col(r, "memory_mib")?,
        disk_mb: col(r, "disk_mb")?,
        env: serde_json::from_str(&env)?,
        image_bytes: col(r, "image_bytes")?,
        build_ms: col(r, "build_ms")?,
        bake_ms: col(r, "bake_ms")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

impl TemplateBuilds<'_> {
    /// Inserts `b` as the next version of its template (its `version` and `id` are set here:
    /// `<name>-v<version>-<6 hex>`), unless a build of that template is still under way
    /// ([`StoreError::Conflict`]) or the workspace has no room for another build (see
    /// [`crate::quotas`]).
    pub async fn insert_next(&self, b: &mut TemplateBuildRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        // Serialise concurrent builds of one workspace (a write first: SQLite takes its write
        // lock, PostgreSQL locks the workspace row) so two cannot both pass the check below.
        sqlx::query("UPDATE workspaces SET name = name WHERE id = $1")
            .bind(&b.workspace_id)
            .execute(&mut *tx)
            .await?;
        crate::quotas::check_locked(&mut tx, &b.workspace_id, crate::Adding::TemplateBuild).await?;
        let rows = sqlx::query(
            "SELECT version, status FROM template_builds WHERE workspace_id = $1 AND name = $2",
        )
        .bind(&b.workspace_id)
        .bind(&b.name)
        .fetch_all(&mut *tx)
        .await?;
        let mut next = 1;
        for r in &rows {
            let v: i64 = col(r, "version")?;
            next = next.max(v + 1);
            if parsed(r, "status", BuildStatus::parse)?.active() {
                return Err(StoreError::Conflict);
            }
        }
        b.version = next;
        b.id = format!(
            "{}-v{next}-{:06x}",
            b.name,
            rand::random::<u32>() & 0x00ff_ffff
        );
        sqlx::query(&format!(
            "INSERT INTO template_builds ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        ))
        .bind(&b.id)
        .bind(&b.workspace_id)
        .bind(&b.host_id)
        .bind(&b.name)
        .bind(b.version)
        .bind(b.source.as_str())
        .bind(b.status.as_str())
        .bind(&b.error)
        .bind(&b.description)
        .bind(b.vcpus)
        .bind(b.memory_mib)
        .bind(b.disk_mb)
        .bind(serde_json::to_string(&b.env)?)
        .bind(b.image_bytes)
        .bind(b.build_ms)
        .bind(b.bake_ms)
        .bind(b.created_at)
        .bind(b.updated_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Queues the job that runs build `build_id`, unless its row is gone or finished (a
    /// [`StoreError::NotFound`]: nothing queued). Row check and enqueue are one transaction.
    pub async fn enqueue_build(
        &self,
        build_id: &str,
        job: &crate::NewJob,
    ) -> Result<crate::JobRow, StoreError> {
        let mut tx = self.pool.begin().await?;
        // A write first takes SQLite's write lock (as in `insert_next`): a read first fails to
        // upgrade ("database is locked") if another connection wrote meanwhile.
        let touched = sqlx::query("UPDATE template_builds SET status = status WHERE id = $1")
            .bind(build_id)
            .execute(&mut *tx)
            .await?;
        found(touched)?;
        let r = sqlx::query("SELECT status FROM template_builds WHERE id = $1")
            .bind(build_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(r) = r else {
            return Err(StoreError::NotFound);
        };
        if !parsed(&r, "status", BuildStatus::parse)?.active() {
            return Err(StoreError::NotFound);
        }
        let row = crate::jobs::enqueue(&mut *tx, job).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Writes the mutable fields of `b` (status, error, env, disk size, figures).
    pub async fn update(&self, b: &TemplateBuildRow) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE template_builds SET status = $2, error = $3, env = $4, image_bytes = $5, \
             build_ms = $6, bake_ms = $7, updated_at = $8, disk_mb = $9 WHERE id = $1",
        )
        .bind(&b.id)
        .bind(b.status.as_str())
        .bind(&b.error)
        .bind(serde_json::to_string(&b.env)?)
        .bind(b.image_bytes)
        .bind(b.build_ms)
        .bind(b.bake_ms)
        .bind(b.updated_at)
        .bind(b.disk_mb)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    /// Every version of the workspace's template `name`, oldest first.
    pub async fn versions(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM template_builds WHERE workspace_id = $1 AND name = $2 ORDER BY version"
        ))
        .bind(workspace_id)
        .bind(name)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Every build of the workspace, by name then version.
    pub async fn list(&self, workspace_id: &str) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM template_builds WHERE workspace_id = $1 ORDER BY name, version"
        ))
        .bind(workspace_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// The build with id `id` (any workspace), if there is one.
    pub async fn by_id(&self, id: &str) -> Result<Option<TemplateBuildRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM template_builds WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(row).transpose()
    }

    /// Builds on host `host_id` left under way by a previous server process.
    pub async fn unfinished(&self, host_id: &str) -> Result<Vec<TemplateBuildRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM template_builds WHERE host_id = $1 AND status IN ('queued', 'building', 'baking')"
        ))
        .bind(host_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Ids of every build on host `host_id` (any workspace): the host's user-built templates.
    pub async fn ids_on_host(&self, host_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM template_builds WHERE host_id = $1")
            .bind(host_id)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }

    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM template_builds WHERE id = $1")
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }
}
