//! Events and webhooks: every lifecycle change of a workspace's resources is an event
//! (`sandbox.created`, `deploy.live`, …) with the resource it is about, its time and a small
//! payload; `GET /v1/events` lists and streams them, and webhook endpoints receive them as
//! signed POSTs (the Standard Webhooks format).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// Every event type, as sent in `type`. A webhook's `events` filter names these, or a prefix
/// ending in `.*` (`sandbox.*`), or `*`.
pub const EVENT_TYPES: &[&str] = &[
    "sandbox.created",
    "sandbox.paused",
    "sandbox.resumed",
    "sandbox.hibernated",
    "sandbox.woken",
    "sandbox.killed",
    "sandbox.lost",
    "sandbox.expired",
    "sandbox.forked",
    "snapshot.created",
    "template.build_succeeded",
    "template.build_failed",
    "deploy.phase",
    "deploy.live",
    "deploy.failed",
    "deploy.rolled_back",
    "database.ready",
    "database.hibernated",
    "database.restored",
    "function.version_live",
    "schedule.fired",
    "schedule.failed",
];

/// Most patterns in one webhook's `events`.
pub const MAX_WEBHOOK_EVENTS: usize = 64;
/// Longest webhook URL, bytes.
pub const MAX_WEBHOOK_URL: usize = 2048;
/// A webhook secret's key: 24 to 64 bytes (base64 after `whsec_`).
pub const WEBHOOK_KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// Whether event type `ty` matches filter `pattern`: the exact type, a prefix ending in `.*`
/// (`sandbox.*` matches `sandbox.created`), or `*` (everything).
pub fn event_matches(pattern: &str, ty: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix(".*") {
        Some(prefix) => ty
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.')),
        None => pattern == ty,
    }
}

/// Whether `pattern` is a filter that can match an event: a known type, `<kind>.*` of a known
/// kind, or `*`.
pub fn valid_event_pattern(pattern: &str) -> bool {
    EVENT_TYPES.iter().any(|t| event_matches(pattern, t))
        && (pattern == "*" || pattern.ends_with(".*") || EVENT_TYPES.contains(&pattern))
}

/// The resource an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EventResource {
    /// `sandbox`, `snapshot`, `template`, `app`, `database`, `function` or `schedule`.
    pub kind: String,
    /// The resource's id (a sandbox's `sb-…`) or, for resources addressed by name (templates,
    /// apps, functions, schedules, databases), its name.
    pub id: String,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// Increasing with time across the server: a later event has a larger id. An SSE stream's
    /// `id:` and the `Last-Event-ID` a client resumes from.
    pub id: String,
    /// e.g. `sandbox.created` (see the event list in the documentation).
    #[serde(rename = "type")]
    pub event_type: String,
    pub resource: EventResource,
    /// When it happened (RFC 3339).
    pub at: String,
    /// A small payload, by type (e.g. a deploy's `phase`, a failure's `error`).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// `POST /v1/webhooks`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// Where events are POSTed: `http://` or `https://`. Private, loopback, link-local and
    /// metadata addresses are refused unless the operator allows them
    /// (`--allow-internal-fetch`).
    #[schema(max_length = 2048)]
    pub url: String,
    /// Event types to send: exact types, `<kind>.*` or `*` (1 to 64 patterns).
    #[schema(min_items = 1, max_items = 64)]
    pub events: Vec<String>,
    /// `whsec_` + base64 of 24 to 64 random bytes; generated when not given.
    #[serde(default)]
    pub secret: Option<String>,
}

impl CreateWebhookRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_webhook_url(&self.url)?;
        if self.events.is_empty() || self.events.len() > MAX_WEBHOOK_EVENTS {
            return Err(field_error("events", "1 to 64 event types"));
        }
        for (i, e) in self.events.iter().enumerate() {
            if !valid_event_pattern(e) {
                return Err(field_error(
                    format!("events[{i}]"),
                    format!("{e:?} is not an event type, a `<kind>.*` prefix of one, or `*`"),
                ));
            }
        }
        if let Some(s) = &self.secret {
            if webhook_key(s).is_none() {
                return Err(field_error(
                    "secret",
                    "whsec_ followed by the base64 of 24 to 64 bytes",
                ));
            }
        }
        Ok(())
    }
}

/// The key bytes of a `whsec_<base64>` secret, if it is one.
pub fn webhook_key(secret: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    let key = STANDARD.decode(secret.strip_prefix("whsec_")?).ok()?;
    WEBHOOK_KEY_BYTES.contains(&key.len()).then_some(key)
}

/// A webhook URL as the edge accepts it: http(s), a host, no credentials, at most 2048 bytes.
/// Where it points is the server's outbound policy's to judge.
pub fn validate_webhook_url(u: &str) -> Result<(), FieldError> {
    let bad = |m: &str| Err(field_error("url", m));
    if u.len() > MAX_WEBHOOK_URL {
        return bad("at most 2048 bytes");
    }
    let Ok(parsed) = url::Url::parse(u) else {
        return bad("not a URL");
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return bad("an http:// or https:// URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return bad("a URL with a host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return bad("no credentials in the URL (sign with the secret instead)");
    }
    if parsed.fragment().is_some() {
        return bad("no #fragment");
    }
    Ok(())
}

/// A webhook endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Webhook {
    /// `wh_…`
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// The signing secret (`whsec_…`): shown by the create only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: String,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: waiting for its turn (an earlier event of the same resource) or its
    /// next attempt.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt failed; `POST …/redeliver` tries again.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => DeliveryState::Pending,
            "delivered" => DeliveryState::Delivered,
            "failed" => DeliveryState::Failed,
            _ => return None,
        })
    }
}

/// One event's delivery to one webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WebhookDelivery {
    /// `whd_…`
    pub id: String,
    pub webhook_id: String,
    /// The event's id, also the `webhook-id` header of every attempt.
    pub event_id: String,
    pub event_type: String,
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// The HTTP status of the last attempt, if it got an answer.
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub last_attempt_at: Option<String>,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at: Option<String>,
    pub delivered_at: Option<String>,
    pub created_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(event_matches("*", "sandbox.created"));
        assert!(event_matches("sandbox.*", "sandbox.created"));
        assert!(!event_matches("sandbox.*", "snapshot.created"));
        assert!(!event_matches("sand.*", "sandbox.created"));
        assert!(event_matches("deploy.live", "deploy.live"));
        assert!(!event_matches("deploy.live", "deploy.failed"));
        for ok in ["*", "sandbox.*", "deploy.live", "schedule.failed"] {
            assert!(valid_event_pattern(ok), "{ok}");
        }
        for bad in [
            "",
            "sandbox",
            "sandbox.",
            "nope.*",
            "sandbox.melted",
            "*.*",
            ".*",
        ] {
            assert!(!valid_event_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn urls_and_secrets() {
        for ok in ["https://example.com/hook", "http://10.0.0.1:8080/x?y=1"] {
            assert!(validate_webhook_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ftp://x",
            "not a url",
            "https://user:pw@example.com/",
            "file:///etc/passwd",
            "https://example.com/#x",
        ] {
            assert!(validate_webhook_url(bad).is_err(), "{bad}");
        }
        assert!(webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_some());
        assert!(webhook_key("whsec_c2hvcnQ=").is_none());
        assert!(webhook_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_none());
    }
}
