//! A workspace's members and their roles, and its audit log.
//!
//! A member's keys can do no more than the member's role allows, whatever their own scopes say:
//! a call must pass both ([`Role::scopes`]). Changing a member's role changes what every key of
//! theirs may do at once; removing a member revokes their keys.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::scope::{Action, Scope, SCOPE_KINDS};
use crate::{field_error, FieldError};

/// What a member may do in the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, including making and removing other owners.
    Owner,
    /// Everything but owners: may not make an owner, nor change or remove one.
    Admin,
    /// Every resource (read, write, exec), its own keys, webhooks; not members nor the audit log.
    Developer,
    /// Reads every resource but the audit log; its own keys only to list them.
    Viewer,
}

/// Kinds only an owner or admin reaches.
const ADMIN_KINDS: &[&str] = &["members", "audit"];

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Developer => "developer",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(s: &str) -> Result<Role, FieldError> {
        Ok(match s {
            "owner" => Role::Owner,
            "admin" => Role::Admin,
            "developer" => Role::Developer,
            "viewer" => Role::Viewer,
            _ => {
                return Err(field_error(
                    "role",
                    format!("{s:?}: one of owner, admin, developer, viewer"),
                ))
            }
        })
    }

    /// Whether the role manages the workspace (members, every key, the audit log).
    pub fn manages(self) -> bool {
        matches!(self, Role::Owner | Role::Admin)
    }

    /// What the role allows, as scopes.
    pub fn scopes(self) -> Vec<Scope> {
        let kinds = || SCOPE_KINDS.iter().filter(|k| !ADMIN_KINDS.contains(k));
        match self {
            Role::Owner | Role::Admin => vec![Scope::ALL],
            Role::Developer => kinds()
                .map(|k| Scope {
                    kind: Some((*k).to_owned()),
                    action: None,
                })
                .collect(),
            Role::Viewer => kinds()
                .map(|k| Scope {
                    kind: Some((*k).to_owned()),
                    action: Some(Action::Read),
                })
                .collect(),
        }
    }

    /// Whether the role allows `action` on `kind`.
    pub fn allows(self, kind: &str, action: Action) -> bool {
        crate::scope::allows(&self.scopes(), kind, action)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A member of the workspace.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub id: String,
    pub name: String,
    pub email: String,
    pub role: Role,
    pub created_at: String,
    /// How many of its keys are not revoked.
    pub active_keys: u32,
}

/// `POST /v1/members`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMemberRequest {
    /// A display name (1–64 bytes).
    pub name: String,
    /// Unique in the workspace (compared case-insensitively).
    pub email: String,
    pub role: Role,
}

/// `PATCH /v1/members/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMemberRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub role: Option<Role>,
}

/// Checks a member's name and email; returns the email in lower case.
pub fn check_member(name: &str, email: &str) -> Result<String, FieldError> {
    if name.trim().is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(field_error("name", "1 to 64 bytes, no control characters"));
    }
    let email = email.trim().to_ascii_lowercase();
    let ok = email.len() <= 254
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        })
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(field_error("email", format!("{email:?}: an email address")));
    }
    Ok(email)
}

/// One audited call: `{at, key_id, action, resource, result, source}` and what else tells it
/// apart.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    pub id: String,
    /// RFC 3339.
    pub at: String,
    pub key_id: String,
    pub key_name: String,
    /// The member the key belongs to, if any.
    pub member_id: Option<String>,
    /// The operation (`create_sandbox`, as in the OpenAPI document).
    pub action: String,
    pub method: String,
    /// The route template (`/v1/sandboxes/{id}`).
    pub route: String,
    /// `<kind>` or `<kind>/<id or name>`.
    pub resource: String,
    /// `ok`, or the error code of a refused or failed call.
    pub result: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The caller's address.
    pub source: String,
    pub request_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_nest() {
        for kind in SCOPE_KINDS {
            for action in [Action::Read, Action::Write, Action::Exec] {
                if Role::Viewer.allows(kind, action) {
                    assert!(Role::Developer.allows(kind, action), "{kind}:{action:?}");
                }
                if Role::Developer.allows(kind, action) {
                    assert!(Role::Admin.allows(kind, action), "{kind}:{action:?}");
                }
                assert!(Role::Owner.allows(kind, action));
            }
        }
        assert!(Role::Viewer.allows("sandboxes", Action::Read));
        assert!(!Role::Viewer.allows("sandboxes", Action::Write));
        assert!(!Role::Viewer.allows("audit", Action::Read));
        assert!(Role::Developer.allows("sandboxes", Action::Exec));
        assert!(!Role::Developer.allows("members", Action::Write));
        assert!(!Role::Developer.allows("audit", Action::Read));
        assert!(Role::Admin.allows("audit", Action::Read));
    }

    #[test]
    fn members_are_checked() {
        assert_eq!(
            check_member("Ada", " Ada@Example.org ").unwrap(),
            "ada@example.org"
        );
        for (name, email) in [
            ("", "a@b.c"),
            ("x", "nope"),
            ("x", "@b.c"),
            ("x", "a@b"),
            ("x", "a b@c.d"),
        ] {
            assert!(check_member(name, email).is_err(), "{name:?} {email:?}");
        }
    }
}
