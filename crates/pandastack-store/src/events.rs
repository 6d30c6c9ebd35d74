//! Event rows: every lifecycle change of a workspace's resources, in commit order.
//!
//! [`EventRepo::insert`] writes the event and, in the same transaction, one pending delivery
//! for each of the workspace's webhooks whose filter matches it — so an event that is stored is
//! also queued for every endpoint that wants it, whatever happens to the process after. Ids
//! come from one counter row updated in that transaction (see migration 0027): a reader that
//! has seen id N never later finds a smaller id, so reading "after N" resumes exactly.

use pandastack_api_types::event_matches;
use sqlx::AnyPool;

use crate::{col, new_id, now_ms, StoreError};

/// An event to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub workspace_id: String,
    /// e.g. `sandbox.created`.
    pub event_type: String,
    pub resource_kind: String,
    pub resource_id: String,
    /// A small JSON payload.
    pub data: serde_json::Value,
}

/// One event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub id: i64,
    pub workspace_id: String,
    pub event_type: String,
    pub resource_kind: String,
    pub resource_id: String,
    /// Unix ms.
    pub at: i64,
    pub data: serde_json::Value,
}

/// What a list of events is narrowed to.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only events after this id.
    pub after: Option<i64>,
    /// An exact type or a `<kind>.*` prefix.
    pub event_type: Option<String>,
    /// Only events of the resource with this id.
    pub resource_id: Option<String>,
}

pub struct EventRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, workspace_id, event_type, resource_kind, resource_id, at, data";

fn row(r: &sqlx::any::AnyRow) -> Result<EventRow, StoreError> {
    let data: String = col(r, "data")?;
    Ok(EventRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        event_type: col(r, "event_type")?,
        resource_kind: col(r, "resource_kind")?,
        resource_id: col(r, "resource_id")?,
        at: col(r, "at")?,
        data: serde_json::from_str(&data)?,
    })
}

impl EventRepo<'_> {
    /// Stores `event` with its next id, and a pending delivery for each webhook of its
    /// workspace whose filter matches. Returns the row and the number of deliveries queued.
    pub async fn insert(&self, event: &NewEvent) -> Result<(EventRow, usize), StoreError> {
        let mut tx = self.pool.begin().await?;
        let done = insert(&mut tx, event).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// Stores `events` in order in one transaction (one commit for the lot), each with its
    /// next id and its deliveries, as [`EventRepo::insert`] does one. All or none.
    pub async fn insert_many(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<(EventRow, usize)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut done = Vec::with_capacity(events.len());
        for e in events {
            done.push(insert(&mut tx, e).await?);
        }
        tx.commit().await?;
        Ok(done)
    }

    /// Events of workspace `ws` in id order, narrowed by `filter`, at most `limit`.
    pub async fn list(
        &self,
        ws: &str,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let (type_exact, type_prefix) = match filter.event_type.as_deref() {
            Some("*") | None => (String::new(), String::new()),
            Some(t) => match t.strip_suffix(".*") {
                Some(kind) => (String::new(), format!("{kind}.%")),
                None => (t.to_owned(), String::new()),
            },
        };
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM events WHERE workspace_id = $1 AND id > $2 \
             AND ($3 = '' OR event_type = $3) AND ($4 = '' OR event_type LIKE $4) \
             AND ($5 = '' OR resource_id = $5) ORDER BY id LIMIT $6"
        ))
        .bind(ws)
        .bind(filter.after.unwrap_or(0))
        .bind(type_exact)
        .bind(type_prefix)
        .bind(filter.resource_id.clone().unwrap_or_default())
        .bind(limit)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Event `id`, of any workspace.
    pub async fn get(&self, id: i64) -> Result<EventRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM events WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        row(&r)
    }

    /// The largest event id stored (0 when there is none).
    pub async fn last_id(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT last_id FROM event_counter WHERE id = 1")
                .fetch_one(self.pool)
                .await?,
        )
    }

    /// Deletes the events older than `before` (unix ms) that no pending delivery still needs,
    /// and their finished deliveries; returns how many events.
    pub async fn prune(&self, before: i64) -> Result<u64, StoreError> {
        sqlx::query(
            "DELETE FROM webhook_deliveries WHERE state <> 'pending' AND event_id IN \
             (SELECT id FROM events WHERE at < $1)",
        )
        .bind(before)
        .execute(self.pool)
        .await?;
        Ok(sqlx::query(
            "DELETE FROM events WHERE at < $1 AND NOT EXISTS \
             (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id AND d.state = 'pending')",
        )
        .bind(before)
        .execute(self.pool)
        .await?
        .rows_affected())
    }
}

/// [`EventRepo::insert`] in the caller's transaction (an event written with the change it
/// records). It takes the counter row's lock until that transaction ends.
pub(crate) async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    event: &NewEvent,
) -> Result<(EventRow, usize), StoreError> {
    let id: i64 = sqlx::query_scalar(
        "UPDATE event_counter SET last_id = last_id + 1 WHERE id = 1 RETURNING last_id",
    )
    .fetch_one(&mut **tx)
    .await?;
    let now = now_ms();
    let row = EventRow {
        id,
        workspace_id: event.workspace_id.clone(),
        event_type: event.event_type.clone(),
        resource_kind: event.resource_kind.clone(),
        resource_id: event.resource_id.clone(),
        at: now,
        data: event.data.clone(),
    };
    sqlx::query(&format!(
        "INSERT INTO events ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(row.id)
    .bind(&row.workspace_id)
    .bind(&row.event_type)
    .bind(&row.resource_kind)
    .bind(&row.resource_id)
    .bind(row.at)
    .bind(serde_json::to_string(&row.data)?)
    .execute(&mut **tx)
    .await?;
    let hooks = sqlx::query(
        "SELECT id, events FROM webhooks WHERE workspace_id = $1 AND disabled = 0 ORDER BY id",
    )
    .bind(&row.workspace_id)
    .fetch_all(&mut **tx)
    .await?;
    let mut queued = 0;
    for h in &hooks {
        let hook: String = col(h, "id")?;
        let patterns: String = col(h, "events")?;
        let patterns: Vec<String> = serde_json::from_str(&patterns)?;
        if !patterns.iter().any(|p| event_matches(p, &row.event_type)) {
            continue;
        }
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, webhook_id, workspace_id, event_id, event_type, \
             resource, state, attempts, round_start, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, 0, $7, $7)",
        )
        .bind(new_id("whd_"))
        .bind(&hook)
        .bind(&row.workspace_id)
        .bind(row.id)
        .bind(&row.event_type)
        .bind(format!("{}:{}", row.resource_kind, row.resource_id))
        .bind(now)
        .execute(&mut **tx)
        .await?;
        queued += 1;
    }
    Ok((row, queued))
}
