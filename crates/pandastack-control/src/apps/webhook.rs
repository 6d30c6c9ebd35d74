//! Push-to-deploy webhooks: GitHub's (`X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of
//! the body with the app's webhook secret; `X-GitHub-Event`, `X-GitHub-Delivery`) and a generic
//! one with the same signature scheme for other git hosts (`{"ref": "<branch>"}`). Signatures
//! are compared in constant time (`hmac`'s `verify_slice`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::AppError;

/// Which sender's scheme a delivery follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookKind {
    GitHub,
    Generic,
}

/// One webhook delivery as received.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    pub kind: WebhookKind,
    /// `X-GitHub-Delivery` (or the generic `X-PandaStack-Delivery`): redeliveries repeat it.
    pub id: Option<&'a str>,
    /// `X-GitHub-Event` (`push`, `ping`…); the generic hook has none.
    pub event: Option<&'a str>,
    /// The signature header's value (`sha256=<hex>`).
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
}

impl Delivery<'_> {
    /// Checks the body's signature with `secret`.
    pub fn verify(&self, secret: &str) -> Result<(), AppError> {
        let sig = self
            .signature
            .and_then(|s| s.trim().strip_prefix("sha256="))
            .ok_or(AppError::BadSignature)?;
        let sig = decode_hex(sig).ok_or(AppError::BadSignature)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|_| AppError::BadSignature)?;
        mac.update(self.body);
        mac.verify_slice(&sig).map_err(|_| AppError::BadSignature)
    }

    /// The branch a push delivery is for; `Ok(Err(reason))` for a delivery that deploys
    /// nothing (a ping, a tag, a deleted branch, another event).
    pub fn pushed_branch(&self) -> Result<Result<String, String>, AppError> {
        if self.kind == WebhookKind::GitHub {
            match self.event {
                Some("push") => {}
                Some(other) => return Ok(Err(format!("event {other:?} deploys nothing"))),
                None => return Err(AppError::BadWebhook("X-GitHub-Event header missing".into())),
            }
        }
        let v: serde_json::Value = serde_json::from_slice(self.body)
            .map_err(|e| AppError::BadWebhook(format!("body is not JSON: {e}")))?;
        if v.get("deleted").and_then(|d| d.as_bool()) == Some(true) {
            return Ok(Err("the branch was deleted".into()));
        }
        let r = v
            .get("ref")
            .and_then(|r| r.as_str())
            .ok_or_else(|| AppError::BadWebhook("body has no \"ref\"".into()))?;
        if let Some(b) = r.strip_prefix("refs/heads/") {
            return Ok(Ok(b.to_owned()));
        }
        if r.starts_with("refs/") {
            return Ok(Err(format!("{r} is not a branch")));
        }
        if self.kind == WebhookKind::Generic
            && pandastack_api_types::validate_git_ref("ref", r).is_ok()
        {
            return Ok(Ok(r.to_owned()));
        }
        Err(AppError::BadWebhook(format!("ref {r:?} is not a branch")))
    }
}

/// The signature header value for `body` signed with `secret` (`sha256=<hex>`).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(body: &[u8], sig: Option<&str>) -> Delivery<'static> {
        Delivery {
            kind: WebhookKind::GitHub,
            id: Some("d-1"),
            event: Some("push"),
            signature: sig.map(|s| Box::leak(s.to_owned().into_boxed_str()) as &str),
            body: Box::leak(body.to_vec().into_boxed_slice()),
        }
    }

    #[test]
    fn signatures_verify_only_with_the_secret_and_the_body() {
        let body = br#"{"ref":"refs/heads/main"}"#;
        let good = sign("s3cret", body);
        assert!(push(body, Some(&good)).verify("s3cret").is_ok());
        assert!(push(body, Some(&good)).verify("other").is_err());
        assert!(push(br#"{"ref":"refs/heads/evil"}"#, Some(&good))
            .verify("s3cret")
            .is_err());
        assert!(push(body, None).verify("s3cret").is_err());
        assert!(push(body, Some("sha256=zz")).verify("s3cret").is_err());
        assert!(push(body, Some(&good.replace("sha256=", "sha1=")))
            .verify("s3cret")
            .is_err());
    }

    #[test]
    fn branches_tags_and_other_events() {
        let d = push(br#"{"ref":"refs/heads/feature/x"}"#, None);
        assert_eq!(d.pushed_branch().unwrap(), Ok("feature/x".to_owned()));
        let d = push(br#"{"ref":"refs/tags/v1"}"#, None);
        assert!(d.pushed_branch().unwrap().is_err());
        let d = push(br#"{"ref":"refs/heads/main","deleted":true}"#, None);
        assert!(d.pushed_branch().unwrap().is_err());
        let mut d = push(b"{}", None);
        d.event = Some("ping");
        assert!(d.pushed_branch().unwrap().is_err());
        assert!(push(b"not json", None).pushed_branch().is_err());
        let mut g = push(br#"{"ref":"main"}"#, None);
        g.kind = WebhookKind::Generic;
        g.event = None;
        assert_eq!(g.pushed_branch().unwrap(), Ok("main".to_owned()));
    }
}
