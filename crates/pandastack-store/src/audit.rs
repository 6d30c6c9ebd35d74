//! The audit log: one row per state-changing API call (see migration 0029). Rows are written
//! in batches ([`AuditRepo::insert_many`]), listed newest first ([`AuditRepo::list`]) and
//! pruned after the operator's retention ([`AuditRepo::prune`]).

use sqlx::AnyPool;

use crate::{col, StoreError};

/// One audited call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// `au-` + the time in hex + random ([`AuditRow::new_id`]): ids sort by time.
    pub id: String,
    pub workspace_id: String,
    /// Unix ms.
    pub at: i64,
    pub key_id: String,
    pub key_name: String,
    /// The workspace member the key belongs to, if any.
    pub member_id: Option<String>,
    /// The operation (`create_sandbox`), or `<METHOD> <route>` for a route without one.
    pub action: String,
    pub method: String,
    /// The route template (`/v1/sandboxes/{id}`).
    pub route: String,
    /// The resource kind (`sandboxes`) and, when known, its id or name.
    pub resource_kind: String,
    pub resource_id: Option<String>,
    /// The HTTP status answered.
    pub status: i64,
    /// The error code of a refused or failed call.
    pub error_code: Option<String>,
    /// The caller's address.
    pub source: String,
    pub request_id: String,
}

impl AuditRow {
    /// A new id for a row at `at` (unix ms): ids of later rows sort after earlier ones, and of
    /// this process's rows of one millisecond in the order they were made (a counter), then a
    /// tag of the process that keeps two processes' ids apart.
    pub fn new_id(at: i64) -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::LazyLock;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        static TAG: LazyLock<u32> = LazyLock::new(rand::random::<u32>);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("au-{:012x}{n:08x}{:08x}", at.max(0), *TAG)
    }
}

/// What a list of audit rows is narrowed to.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only rows older than this id (the previous page's last).
    pub before: Option<String>,
    pub key_id: Option<String>,
    pub resource_id: Option<String>,
    pub action: Option<String>,
    /// Only rows at or after this time (unix ms).
    pub since: Option<i64>,
}

pub struct AuditRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, workspace_id, at, key_id, key_name, member_id, action, method, route, \
                       resource_kind, resource_id, status, error_code, source, request_id";

fn row(r: &sqlx::any::AnyRow) -> Result<AuditRow, StoreError> {
    Ok(AuditRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        at: col(r, "at")?,
        key_id: col(r, "key_id")?,
        key_name: col(r, "key_name")?,
        member_id: col(r, "member_id")?,
        action: col(r, "action")?,
        method: col(r, "method")?,
        route: col(r, "route")?,
        resource_kind: col(r, "resource_kind")?,
        resource_id: col(r, "resource_id")?,
        status: col(r, "status")?,
        error_code: col(r, "error_code")?,
        source: col(r, "source")?,
        request_id: col(r, "request_id")?,
    })
}

impl AuditRepo<'_> {
    /// Stores `rows` in one transaction (all or none).
    pub async fn insert_many(&self, rows: &[AuditRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for a in rows {
            sqlx::query(&format!(
                "INSERT INTO audit_log ({COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
            ))
            .bind(&a.id)
            .bind(&a.workspace_id)
            .bind(a.at)
            .bind(&a.key_id)
            .bind(&a.key_name)
            .bind(a.member_id.as_deref())
            .bind(&a.action)
            .bind(&a.method)
            .bind(&a.route)
            .bind(&a.resource_kind)
            .bind(a.resource_id.as_deref())
            .bind(a.status)
            .bind(a.error_code.as_deref())
            .bind(&a.source)
            .bind(&a.request_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Workspace `ws`'s rows, newest first, narrowed by `filter`, at most `limit`.
    pub async fn list(
        &self,
        ws: &str,
        filter: &AuditFilter,
        limit: i64,
    ) -> Result<Vec<AuditRow>, StoreError> {
        // Absent filters bind values that match everything, so the statement stays one text.
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM audit_log WHERE workspace_id = $1 AND ($2 = '' OR id < $2) \
             AND ($3 = '' OR key_id = $3) AND ($4 = '' OR resource_id = $4) \
             AND ($5 = '' OR action = $5) AND at >= $6 ORDER BY id DESC LIMIT $7"
        ))
        .bind(ws)
        .bind(filter.before.as_deref().unwrap_or_default())
        .bind(filter.key_id.as_deref().unwrap_or_default())
        .bind(filter.resource_id.as_deref().unwrap_or_default())
        .bind(filter.action.as_deref().unwrap_or_default())
        .bind(filter.since.unwrap_or(0))
        .bind(limit)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Deletes every row older than `before` (unix ms); returns how many.
    pub async fn prune(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM audit_log WHERE at < $1")
            .bind(before)
            .execute(self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::AuditRow;

    #[test]
    fn ids_of_one_millisecond_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..1000).map(|_| AuditRow::new_id(1_000)).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(AuditRow::new_id(999) < ids[0] && AuditRow::new_id(1_001) > ids[999]);
    }
}
