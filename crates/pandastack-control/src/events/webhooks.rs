//! A workspace's webhook endpoints: create (URL checked against the outbound policy, secret
//! generated when not given), list, get, delete, delivery history and redeliver.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pandastack_api_types::{
    CreateWebhookRequest, DeliveryState, FieldError, Webhook, WebhookDelivery,
};
use pandastack_outbound::Refused;
use pandastack_store::{new_id, now_ms, DeliveryRow, StoreError, WebhookRow};

use super::{rfc3339, Events};

/// Why a webhook operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook {0} not found")]
    NotFound(String),
    #[error("delivery {0} not found")]
    DeliveryNotFound(String),
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The URL points where the server does not connect on a user's behalf.
    #[error("url")]
    Refused(#[source] Refused),
    #[error("state store")]
    Store(#[from] StoreError),
}

/// A webhook row on the wire (the secret only when `with_secret`).
pub fn webhook_wire(row: &WebhookRow, with_secret: bool) -> Webhook {
    Webhook {
        id: row.id.clone(),
        url: row.url.clone(),
        events: row.events.clone(),
        secret: with_secret.then(|| row.secret.clone()),
        created_at: rfc3339(row.created_at),
    }
}

/// A delivery row on the wire.
pub fn delivery_wire(d: &DeliveryRow) -> WebhookDelivery {
    WebhookDelivery {
        id: d.id.clone(),
        webhook_id: d.webhook_id.clone(),
        event_id: d.event_id.to_string(),
        event_type: d.event_type.clone(),
        state: d.state,
        attempts: u32::try_from(d.attempts).unwrap_or(u32::MAX),
        last_status: d.last_status.and_then(|s| u16::try_from(s).ok()),
        last_error: d.last_error.clone(),
        last_attempt_at: d.last_attempt_at.map(rfc3339),
        next_attempt_at: (d.state == DeliveryState::Pending).then(|| rfc3339(d.next_attempt_at)),
        delivered_at: d.delivered_at.map(rfc3339),
        created_at: rfc3339(d.created_at),
    }
}

impl Events {
    /// Creates a webhook of workspace `ws`. The URL must pass the outbound policy: an IP
    /// literal or `localhost` at once, a name by what it resolves to now (a name that does not
    /// resolve yet is accepted; each attempt checks again).
    pub async fn create_webhook(
        &self,
        ws: &str,
        req: &CreateWebhookRequest,
    ) -> Result<WebhookRow, WebhookError> {
        req.validate()?;
        let url = url::Url::parse(&req.url).map_err(|_| {
            WebhookError::Invalid(FieldError {
                field: "url".into(),
                message: "not a URL".into(),
            })
        })?;
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(443);
        self.outbound
            .check_literal(host, port)
            .map_err(WebhookError::Refused)?;
        // A name that does not resolve (yet) is not refused here: each attempt resolves it.
        if let Err(e @ Refused::Internal { .. }) = self.outbound.resolve(host, port).await {
            return Err(WebhookError::Refused(e));
        }
        let secret = match &req.secret {
            Some(s) => s.clone(),
            None => format!("whsec_{}", STANDARD.encode(rand::random::<[u8; 32]>())),
        };
        let mut seen = std::collections::HashSet::new();
        let events: Vec<String> = req
            .events
            .iter()
            .filter(|e| seen.insert(e.as_str()))
            .cloned()
            .collect();
        let row = WebhookRow {
            id: new_id("wh_"),
            workspace_id: ws.to_owned(),
            url: req.url.clone(),
            events,
            secret,
            disabled: false,
            created_at: now_ms(),
        };
        self.store.webhooks().insert(&row).await?;
        Ok(row)
    }

    /// Workspace `ws`'s webhooks after id `after`, at most `limit`.
    pub async fn list_webhooks(
        &self,
        ws: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<WebhookRow>, WebhookError> {
        Ok(self.store.webhooks().list(ws, after, limit).await?)
    }

    /// Webhook `id` of workspace `ws`.
    pub async fn webhook(&self, ws: &str, id: &str) -> Result<WebhookRow, WebhookError> {
        self.store
            .webhooks()
            .get(ws, id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => WebhookError::NotFound(id.to_owned()),
                e => e.into(),
            })
    }

    /// Deletes webhook `id` of workspace `ws` with its delivery history (what is pending is
    /// not sent).
    pub async fn delete_webhook(&self, ws: &str, id: &str) -> Result<(), WebhookError> {
        self.store
            .webhooks()
            .delete(ws, id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => WebhookError::NotFound(id.to_owned()),
                e => e.into(),
            })
    }

    /// Webhook `id`'s deliveries, newest event first, before event `before`.
    pub async fn deliveries(
        &self,
        ws: &str,
        id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<DeliveryRow>, WebhookError> {
        let hook = self.webhook(ws, id).await?;
        Ok(self
            .store
            .webhooks()
            .deliveries(&hook.id, before, limit)
            .await?)
    }

    /// Queues delivery `delivery` of webhook `id` again, due now, with a fresh round of
    /// attempts. It keeps its place in its resource's order: events after it wait for it.
    pub async fn redeliver(
        &self,
        ws: &str,
        id: &str,
        delivery: &str,
    ) -> Result<DeliveryRow, WebhookError> {
        let hook = self.webhook(ws, id).await?;
        let d = self
            .store
            .webhooks()
            .redeliver(&hook.id, delivery)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => WebhookError::DeliveryNotFound(delivery.to_owned()),
                e => e.into(),
            })?;
        self.wake.notify_waiters();
        Ok(d)
    }
}
