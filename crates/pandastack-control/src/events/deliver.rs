//! Sending deliveries: claim, sign, POST, record.
//!
//! Each attempt is a POST of the event (the same JSON as `GET /v1/events` lists) with the
//! Standard Webhooks headers: `webhook-id` (the event's id, the same on every attempt, for the
//! receiver to drop doubles), `webhook-timestamp` (unix seconds of the attempt) and
//! `webhook-signature` (`v1,` + base64 of HMAC-SHA256 over `{id}.{timestamp}.{body}` keyed by
//! the secret's bytes). The URL is checked against the outbound policy at each attempt, on the
//! addresses its name resolves to then, and the connection goes to those addresses (a name
//! that changes its answer after the create cannot reach an internal address). Redirects are
//! not followed; no proxy is used. A 2xx is delivered; anything else is tried again after the
//! next pause of the schedule, and given up (`failed`) when the schedule is used up.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use pandastack_api_types::webhook_key;
use pandastack_outbound::Refused;
use pandastack_store::{now_ms, Attempt, DeliveryRow, WebhookRow};
use sha2::Sha256;

use super::{event_wire, Events};

/// The signature scheme's version prefix.
pub const SIGNATURE_VERSION: &str = "v1";
/// A deliverer's lease on the delivery it sends (longer than any attempt).
const LEASE: Duration = Duration::from_secs(60);
/// Longest sleep between looks for due deliveries when nobody wakes a deliverer.
const IDLE: Duration = Duration::from_secs(5);

/// Why one attempt did not deliver.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("the webhook's secret is not a whsec_ secret")]
    Secret,
    #[error("url")]
    Url(#[source] url::ParseError),
    #[error("url has no host")]
    NoHost,
    #[error("refused by the outbound policy")]
    Refused(#[source] Refused),
    #[error("http client")]
    Client(#[source] reqwest::Error),
    #[error("request")]
    Send(#[source] reqwest::Error),
    #[error("the endpoint answered {0}")]
    Status(u16),
    #[error("the event is gone")]
    Event(#[source] pandastack_store::StoreError),
}

/// Every cause of `e`, joined: what a delivery's `last_error` shows.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The `webhook-signature` value of `body` sent as message `msg_id` at `timestamp` (unix
/// seconds), keyed by `key` (the secret's bytes).
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "{SIGNATURE_VERSION},{}",
        STANDARD.encode(mac.finalize().into_bytes())
    )
}

impl Events {
    /// One deliverer: claims and sends deliveries until [`Events::stop`].
    pub(super) async fn deliverer(self, n: usize) {
        let owner = format!("{}/{}", std::process::id(), n);
        let mut stopping = self.stopping.subscribe();
        loop {
            if *stopping.borrow() {
                return;
            }
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let claimed = self
                .store
                .webhooks()
                .claim(&owner, LEASE.as_millis() as i64)
                .await;
            let pause = match claimed {
                Ok(Some((d, hook))) => {
                    let attempt = self.attempt(&d, &hook).await;
                    if let Err(e) = self.store.webhooks().record(&d.id, &owner, &attempt).await {
                        tracing::warn!(delivery = %d.id, error = &e as &dyn std::error::Error, "record a webhook attempt");
                    }
                    // The next event of its resource may go now: idle deliverers look too.
                    self.wake.notify_waiters();
                    continue;
                }
                Ok(None) => self.until_next_due().await,
                Err(e) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "claim a webhook delivery"
                    );
                    IDLE
                }
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(pause) => {}
                _ = stopping.changed() => {}
            }
        }
    }

    /// How long until the earliest pending delivery is due (between 50 ms and [`IDLE`]).
    async fn until_next_due(&self) -> Duration {
        match self.store.webhooks().next_due().await {
            Ok(Some(at)) => {
                let ms = (at - now_ms()).clamp(50, IDLE.as_millis() as i64);
                Duration::from_millis(ms as u64)
            }
            _ => IDLE,
        }
    }

    /// Sends delivery `d` to `hook` once; what came of it, with the next attempt's time.
    async fn attempt(&self, d: &DeliveryRow, hook: &WebhookRow) -> Attempt {
        let outcome = self.send(d, hook).await;
        match outcome {
            Ok(status) => Attempt::Delivered {
                status: i64::from(status),
            },
            Err(e) => {
                let status = match &e {
                    AttemptError::Status(s) => Some(i64::from(*s)),
                    _ => None,
                };
                // This attempt is number `attempts + 1` of the delivery, and `n` of its round.
                let n = (d.attempts - d.round_start + 1).max(1) as usize;
                let retry_at = self
                    .settings
                    .retry_delays
                    .get(n - 1)
                    .map(|p| now_ms() + p.as_millis() as i64);
                let error = chain(&e);
                tracing::info!(delivery = %d.id, webhook = %hook.id, attempt = n, gives_up = retry_at.is_none(), error = error.as_str(), "webhook attempt failed");
                Attempt::Failed {
                    status,
                    error,
                    retry_at,
                }
            }
        }
    }

    async fn send(&self, d: &DeliveryRow, hook: &WebhookRow) -> Result<u16, AttemptError> {
        let key = webhook_key(&hook.secret).ok_or(AttemptError::Secret)?;
        let url = url::Url::parse(&hook.url).map_err(AttemptError::Url)?;
        let host = url.host_str().ok_or(AttemptError::NoHost)?.to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs = self
            .outbound
            .resolve(&host, port)
            .await
            .map_err(AttemptError::Refused)?;
        let event = self
            .store
            .events()
            .get(d.event_id)
            .await
            .map_err(AttemptError::Event)?;
        let body = serde_json::to_vec(&event_wire(&event)).unwrap_or_default();
        let msg_id = d.event_id.to_string();
        let ts = now_ms() / 1000;
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.settings.attempt_timeout)
            .user_agent("PandaStack-Webhooks/1")
            .resolve_to_addrs(host.trim_start_matches('[').trim_end_matches(']'), &addrs)
            .build()
            .map_err(AttemptError::Client)?;
        let resp = client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sign(&key, &msg_id, ts, &body))
            .body(body)
            .send()
            .await
            .map_err(AttemptError::Send)?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            Ok(status)
        } else {
            Err(AttemptError::Status(status))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's example: secret, id, timestamp, body and the
    /// signature its reference libraries compute.
    #[test]
    fn signs_as_the_specification_does() {
        let key = webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
