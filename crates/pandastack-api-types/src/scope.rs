//! What an API key may do: scopes `<kind>:<action>`, either part `*`, or `*` alone for
//! everything. Kinds are the API's resource collections; actions are classes of calls:
//!
//! - `read`: looking (`GET`), reading files in a sandbox included;
//! - `write`: creating, changing and deleting (every other method);
//! - `exec`: running something inside a VM — exec, PTY, the code interpreter, writing files in
//!   a sandbox, SQL through a database's `/query`, invoking a function.
//!
//! A key can only make keys whose scopes its own cover ([`covers_all`]).

use serde::{Deserialize, Serialize};

use crate::{field_error, FieldError};

/// The resource kinds scopes name (the first path segment after `/v1`).
pub const SCOPE_KINDS: &[&str] = &[
    "sandboxes",
    "snapshots",
    "templates",
    "volumes",
    "databases",
    "apps",
    "functions",
    "schedules",
    "keys",
    "usage",
    "events",
    "webhooks",
    "audit",
    "members",
    "hosts",
];

/// A class of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Read,
    Write,
    Exec,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write",
            Action::Exec => "exec",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "read" => Action::Read,
            "write" => Action::Write,
            "exec" => Action::Exec,
            _ => return None,
        })
    }
}

/// One scope: a kind (`None`: every kind) and an action (`None`: every action).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scope {
    pub kind: Option<String>,
    pub action: Option<Action>,
}

impl Scope {
    /// Every call.
    pub const ALL: Scope = Scope {
        kind: None,
        action: None,
    };

    /// `*`, or `<kind>:<action>` with `*` for either part.
    pub fn parse(s: &str) -> Result<Scope, FieldError> {
        if s == "*" {
            return Ok(Scope::ALL);
        }
        let bad = || {
            field_error(
                "scopes",
                format!(
                    "{s:?}: a scope is `*` or `<kind>:<action>` (kind: * or one of {}; action: *, read, write or exec)",
                    SCOPE_KINDS.join(", ")
                ),
            )
        };
        let (kind, action) = s.split_once(':').ok_or_else(bad)?;
        let kind = match kind {
            "*" => None,
            k if SCOPE_KINDS.contains(&k) => Some(k.to_owned()),
            _ => return Err(bad()),
        };
        let action = match action {
            "*" => None,
            a => Some(Action::parse(a).ok_or_else(bad)?),
        };
        Ok(Scope { kind, action })
    }

    /// Whether this scope allows `action` on `kind`.
    pub fn allows(&self, kind: &str, action: Action) -> bool {
        self.kind.as_deref().is_none_or(|k| k == kind) && self.action.is_none_or(|a| a == action)
    }

    /// Whether everything `other` allows, this allows too.
    pub fn covers(&self, other: &Scope) -> bool {
        let kind = match (&self.kind, &other.kind) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        let action = match (self.action, other.action) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        kind && action
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.kind, self.action) {
            (None, None) => f.write_str("*"),
            (k, a) => write!(
                f,
                "{}:{}",
                k.as_deref().unwrap_or("*"),
                a.map_or("*", Action::as_str)
            ),
        }
    }
}

/// Parses a list of scopes: at least one, at most 64, each valid.
pub fn parse_scopes(v: &[String]) -> Result<Vec<Scope>, FieldError> {
    if v.is_empty() || v.len() > 64 {
        return Err(field_error("scopes", "between 1 and 64 scopes"));
    }
    let mut out: Vec<Scope> = v
        .iter()
        .map(|s| Scope::parse(s))
        .collect::<Result<_, _>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// Whether `held` allows `action` on `kind`.
pub fn allows(held: &[Scope], kind: &str, action: Action) -> bool {
    held.iter().any(|s| s.allows(kind, action))
}

/// The first scope of `wanted` that no scope of `held` covers, if any.
pub fn first_uncovered<'a>(held: &[Scope], wanted: &'a [Scope]) -> Option<&'a Scope> {
    wanted.iter().find(|w| !held.iter().any(|h| h.covers(w)))
}

/// Whether `held` covers every scope of `wanted`.
pub fn covers_all(held: &[Scope], wanted: &[Scope]) -> bool {
    first_uncovered(held, wanted).is_none()
}

/// The scope a call needs: its resource kind (the path's first segment after `/v1`; `None`
/// for a path outside `/v1`, which no scope governs) and its action class (see the module's
/// notes). `route` is the route template (`/v1/sandboxes/{id}/exec`).
pub fn needed(method: &str, route: &str) -> Option<(String, Action)> {
    let mut segs = route.strip_prefix("/v1/")?.split('/');
    // The public routes take no key.
    let kind = segs
        .next()
        .filter(|k| !k.is_empty() && !matches!(*k, "health" | "openapi.json"))?
        .to_owned();
    let rest: Vec<&str> = segs.collect();
    let reading = matches!(method, "GET" | "HEAD");
    let sub = rest.get(1).copied();
    let last = rest.last().copied();
    let exec = match kind.as_str() {
        "sandboxes" => match sub {
            Some("exec" | "pty" | "code") => true,
            Some("fs" | "files") => !reading,
            _ => false,
        },
        "databases" => last == Some("query") || last == Some("sql"),
        "functions" => last == Some("invoke"),
        _ => false,
    };
    let action = if exec {
        Action::Exec
    } else if reading {
        Action::Read
    } else {
        Action::Write
    };
    Some((kind, action))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Scope {
        Scope::parse(v).unwrap()
    }

    #[test]
    fn scopes_read_and_print_as_written() {
        for v in ["*", "*:read", "sandboxes:*", "sandboxes:exec", "keys:write"] {
            assert_eq!(s(v).to_string(), v);
        }
        for bad in [
            "",
            "read",
            "sandbox:read",
            "sandboxes:run",
            "sandboxes:read:x",
            "*:",
        ] {
            assert!(Scope::parse(bad).is_err(), "{bad}");
        }
        assert!(parse_scopes(&[]).is_err());
    }

    #[test]
    fn wider_scopes_cover_narrower_ones() {
        assert!(s("*").covers(&s("sandboxes:exec")));
        assert!(s("*:read").covers(&s("apps:read")));
        assert!(!s("*:read").covers(&s("apps:write")));
        assert!(!s("*:read").covers(&s("*")));
        assert!(s("sandboxes:*").covers(&s("sandboxes:read")));
        assert!(!s("sandboxes:*").covers(&s("*:read")));
        let held = [s("sandboxes:*"), s("*:read")];
        assert!(covers_all(&held, &[s("apps:read"), s("sandboxes:exec")]));
        assert_eq!(
            first_uncovered(&held, &[s("apps:read"), s("apps:write")]).map(Scope::to_string),
            Some("apps:write".into())
        );
    }

    #[test]
    fn a_call_needs_its_kind_and_action_class() {
        let n = |m: &str, r: &str| needed(m, r).map(|(k, a)| format!("{k}:{}", a.as_str()));
        assert_eq!(n("POST", "/v1/sandboxes"), Some("sandboxes:write".into()));
        assert_eq!(
            n("GET", "/v1/sandboxes/{id}"),
            Some("sandboxes:read".into())
        );
        assert_eq!(
            n("POST", "/v1/sandboxes/{id}/exec"),
            Some("sandboxes:exec".into())
        );
        assert_eq!(
            n("GET", "/v1/sandboxes/{id}/pty"),
            Some("sandboxes:exec".into())
        );
        assert_eq!(
            n("GET", "/v1/sandboxes/{id}/fs"),
            Some("sandboxes:read".into())
        );
        assert_eq!(
            n("PUT", "/v1/sandboxes/{id}/fs"),
            Some("sandboxes:exec".into())
        );
        assert_eq!(
            n("POST", "/v1/databases/{id}/query"),
            Some("databases:exec".into())
        );
        assert_eq!(
            n("POST", "/v1/functions/{name}/invoke"),
            Some("functions:exec".into())
        );
        assert_eq!(n("DELETE", "/v1/keys/{id}"), Some("keys:write".into()));
        assert_eq!(n("GET", "/metrics"), None);
        assert_eq!(n("GET", "/v1/health"), None);
    }
}
