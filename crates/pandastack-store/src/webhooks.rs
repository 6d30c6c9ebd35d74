//! Webhook endpoints and their deliveries.
//!
//! The deliveries table is the queue of what is still to be sent: a deliverer
//! [`claim`](WebhookRepo::claim)s a pending delivery whose attempt is due with a lease — only
//! the oldest pending one of its (webhook, resource), so one resource's events are sent in
//! order and event N+1 waits until N is delivered or given up — then
//! [`record`](WebhookRepo::record)s the attempt's outcome. A lease that runs out (the
//! deliverer's process died mid-attempt) makes the delivery claimable again: delivered at least
//! once. On PostgreSQL concurrent deliverers skip each other's rows (`FOR UPDATE SKIP LOCKED`);
//! SQLite has one writer, so the claim is one atomic statement there.

use pandastack_api_types::DeliveryState;
use sqlx::AnyPool;

use crate::{col, found, now_ms, parsed, Backend, StoreError};

/// A webhook endpoint as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRow {
    pub id: String,
    pub workspace_id: String,
    pub url: String,
    /// Patterns: exact types, `<kind>.*`, `*`.
    pub events: Vec<String>,
    /// `whsec_…`
    pub secret: String,
    pub disabled: bool,
    pub created_at: i64,
}

/// One event's delivery to one webhook as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: String,
    pub webhook_id: String,
    pub workspace_id: String,
    pub event_id: i64,
    pub event_type: String,
    /// `<kind>:<id>`: deliveries of one resource to one webhook go in event order.
    pub resource: String,
    pub state: DeliveryState,
    pub attempts: i64,
    /// `attempts` when the current round began (creation, or the last redeliver).
    pub round_start: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<i64>,
    pub next_attempt_at: i64,
    pub delivered_at: Option<i64>,
    pub created_at: i64,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The endpoint answered 2xx with this status.
    Delivered { status: i64 },
    /// It did not: the status if it answered, why, and when to try again (`None`: give up).
    Failed {
        status: Option<i64>,
        error: String,
        retry_at: Option<i64>,
    },
}

pub struct WebhookRepo<'a> {
    pub(crate) pool: &'a AnyPool,
    pub(crate) backend: Backend,
}

const COLUMNS: &str = "id, workspace_id, url, events, secret, disabled, created_at";
const DELIVERY_COLUMNS: &str = "id, webhook_id, workspace_id, event_id, event_type, resource, \
     state, attempts, round_start, last_status, last_error, last_attempt_at, next_attempt_at, \
     delivered_at, created_at";

fn webhook_row(r: &sqlx::any::AnyRow) -> Result<WebhookRow, StoreError> {
    let events: String = col(r, "events")?;
    let disabled: i64 = col(r, "disabled")?;
    Ok(WebhookRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        url: col(r, "url")?,
        events: serde_json::from_str(&events)?,
        secret: col(r, "secret")?,
        disabled: disabled != 0,
        created_at: col(r, "created_at")?,
    })
}

fn delivery_row(r: &sqlx::any::AnyRow) -> Result<DeliveryRow, StoreError> {
    Ok(DeliveryRow {
        id: col(r, "id")?,
        webhook_id: col(r, "webhook_id")?,
        workspace_id: col(r, "workspace_id")?,
        event_id: col(r, "event_id")?,
        event_type: col(r, "event_type")?,
        resource: col(r, "resource")?,
        state: parsed(r, "state", DeliveryState::parse)?,
        attempts: col(r, "attempts")?,
        round_start: col(r, "round_start")?,
        last_status: col(r, "last_status")?,
        last_error: col(r, "last_error")?,
        last_attempt_at: col(r, "last_attempt_at")?,
        next_attempt_at: col(r, "next_attempt_at")?,
        delivered_at: col(r, "delivered_at")?,
        created_at: col(r, "created_at")?,
    })
}

impl WebhookRepo<'_> {
    pub async fn insert(&self, w: &WebhookRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO webhooks ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(&w.id)
        .bind(&w.workspace_id)
        .bind(&w.url)
        .bind(serde_json::to_string(&w.events)?)
        .bind(&w.secret)
        .bind(i64::from(w.disabled))
        .bind(w.created_at)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    /// Webhook `id` of workspace `ws` ([`StoreError::NotFound`] for another workspace's).
    pub async fn get(&self, ws: &str, id: &str) -> Result<WebhookRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(ws)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        webhook_row(&r)
    }

    /// Workspace `ws`'s webhooks in id order after `after`, at most `limit`.
    pub async fn list(
        &self,
        ws: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<WebhookRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE workspace_id = $1 AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(ws)
        .bind(after.unwrap_or_default())
        .bind(limit)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(webhook_row).collect()
    }

    /// Deletes webhook `id` of workspace `ws` and its deliveries.
    pub async fn delete(&self, ws: &str, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND workspace_id = $2")
            .bind(id)
            .bind(ws)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE workspace_id = $1 AND id = $2")
            .bind(ws)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        found(done)?;
        tx.commit().await?;
        Ok(())
    }

    /// Webhook `webhook`'s deliveries, newest event first, before event `before`, at most
    /// `limit`.
    pub async fn deliveries(
        &self,
        webhook: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1 AND event_id < $2 \
             ORDER BY event_id DESC LIMIT $3"
        ))
        .bind(webhook)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(delivery_row).collect()
    }

    /// Delivery `id` of webhook `webhook`.
    pub async fn delivery(&self, webhook: &str, id: &str) -> Result<DeliveryRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1 AND id = $2"
        ))
        .bind(webhook)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        delivery_row(&r)
    }

    /// Claims, for deliverer `owner` with a lease until `now + lease_ms`, the pending delivery
    /// due soonest that is the oldest pending one of its (webhook, resource) and not leased.
    pub async fn claim(
        &self,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<(DeliveryRow, WebhookRow)>, StoreError> {
        let now = now_ms();
        let lock = match self.backend {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let r = sqlx::query(&format!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 \
             WHERE id = (SELECT d.id FROM webhook_deliveries d \
                 WHERE d.state = 'pending' AND d.next_attempt_at <= $3 \
                 AND (d.lease_until IS NULL OR d.lease_until < $3) \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e \
                     WHERE e.webhook_id = d.webhook_id AND e.resource = d.resource \
                     AND e.state = 'pending' AND e.event_id < d.event_id) \
                 ORDER BY d.next_attempt_at, d.event_id LIMIT 1 {lock}) \
             AND state = 'pending' RETURNING {DELIVERY_COLUMNS}"
        ))
        .bind(owner)
        .bind(now + lease_ms)
        .bind(now)
        .fetch_optional(self.pool)
        .await?;
        let Some(r) = r else {
            return Ok(None);
        };
        let d = delivery_row(&r)?;
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1"))
            .bind(&d.webhook_id)
            .fetch_one(self.pool)
            .await?;
        Ok(Some((d, webhook_row(&r)?)))
    }

    /// Records `owner`'s attempt at delivery `id`: delivered, queued again at `retry_at`, or
    /// failed. [`StoreError::NotFound`] if `owner` no longer holds the lease (it ran out and
    /// another deliverer took it, or the webhook was deleted).
    pub async fn record(&self, id: &str, owner: &str, attempt: &Attempt) -> Result<(), StoreError> {
        let now = now_ms();
        let (state, status, error, next, delivered) = match attempt {
            Attempt::Delivered { status } => (
                DeliveryState::Delivered,
                Some(*status),
                None,
                now,
                Some(now),
            ),
            Attempt::Failed {
                status,
                error,
                retry_at: Some(at),
            } => (
                DeliveryState::Pending,
                *status,
                Some(error.as_str()),
                *at,
                None,
            ),
            Attempt::Failed {
                status,
                error,
                retry_at: None,
            } => (
                DeliveryState::Failed,
                *status,
                Some(error.as_str()),
                now,
                None,
            ),
        };
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET state = $1, attempts = attempts + 1, last_status = $2, \
             last_error = $3, last_attempt_at = $4, next_attempt_at = $5, delivered_at = $6, \
             lease_owner = NULL, lease_until = NULL \
             WHERE id = $7 AND lease_owner = $8 AND state = 'pending'",
        )
        .bind(state.as_str())
        .bind(status)
        .bind(error)
        .bind(now)
        .bind(next)
        .bind(delivered)
        .bind(id)
        .bind(owner)
        .execute(self.pool)
        .await?;
        found(done)
    }

    /// Queues delivery `id` of webhook `webhook` again, due now, with a new round of attempts
    /// (its history kept). A pending delivery is only made due now.
    pub async fn redeliver(&self, webhook: &str, id: &str) -> Result<DeliveryRow, StoreError> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET state = 'pending', round_start = CASE WHEN state = 'pending' \
             THEN round_start ELSE attempts END, next_attempt_at = $1, delivered_at = NULL \
             WHERE webhook_id = $2 AND id = $3",
        )
        .bind(now_ms())
        .bind(webhook)
        .bind(id)
        .execute(self.pool)
        .await?;
        found(done)?;
        self.delivery(webhook, id).await
    }

    /// When a deliverer may next find something to claim (unix ms): the earliest time at which
    /// the head of a (webhook, resource)'s pending deliveries is due and not leased. Deliveries
    /// waiting behind an earlier one of their resource do not count (they cannot be claimed
    /// before it is recorded, and the deliverer that records it looks again at once).
    pub async fn next_due(&self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(CASE WHEN d.lease_until IS NOT NULL AND d.lease_until > d.next_attempt_at \
             THEN d.lease_until ELSE d.next_attempt_at END) FROM webhook_deliveries d \
             WHERE d.state = 'pending' AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e \
                 WHERE e.webhook_id = d.webhook_id AND e.resource = d.resource \
                 AND e.state = 'pending' AND e.event_id < d.event_id)",
        )
        .fetch_one(self.pool)
        .await?)
    }

    /// Pending deliveries of every webhook.
    pub async fn pending(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'")
                .fetch_one(self.pool)
                .await?,
        )
    }
}
