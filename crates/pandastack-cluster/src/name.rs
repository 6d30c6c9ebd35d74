//! Roles and names: what a certificate says about its holder, and the rules a name follows.

use std::fmt;
use std::str::FromStr;

use rustls::pki_types::DnsName;

/// Longest host name (one DNS label).
pub const MAX_NAME_LEN: usize = 63;

/// The scheme of the URI SAN that names a certificate's holder.
pub(crate) const URI_PREFIX: &str = "pandastack://";

/// What a certificate's holder is in the cluster. Both roles authenticate as clients and as
/// servers: agents dial replicas and replicas call agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A host agent (`pandastack agent`), one per host.
    Agent,
    /// A control-plane replica (`pandastack server`).
    Server,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Server => "server",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role that is neither `agent` nor `server`.
#[derive(Debug, thiserror::Error)]
#[error("unknown role {0:?} (agent or server)")]
pub struct RoleParseError(String);

impl FromStr for Role {
    type Err = RoleParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "agent" => Ok(Role::Agent),
            "server" => Ok(Role::Server),
            other => Err(RoleParseError(other.to_owned())),
        }
    }
}

/// A name or DNS name that may not go into a certificate.
#[derive(Debug, thiserror::Error)]
#[error("invalid name {name:?}: {why}")]
pub struct NameError {
    pub name: String,
    pub why: &'static str,
}

/// Checks a host's name (a host id such as `host-0123abcd`, or a replica's name): 1 to 63
/// characters of `a-z`, `0-9` and `-`, starting and ending with a letter or digit, not all
/// digits — one DNS label, so it can be a DNS SAN too.
pub fn check_name(name: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("only lowercase letters, digits and '-' are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("must start and end with a letter or digit");
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return bad("must not be all digits");
    }
    Ok(())
}

/// Checks a DNS name for a certificate's SANs: a valid DNS name, no wildcard.
pub fn check_dns_name(name: &str) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError {
            name: name.to_owned(),
            why,
        })
    };
    if name.contains('*') {
        return bad("wildcards are not allowed");
    }
    if DnsName::try_from(name).is_err() {
        return bad("not a valid DNS name");
    }
    Ok(())
}

/// The URI SAN naming `name` in `role`.
pub(crate) fn identity_uri(role: Role, name: &str) -> String {
    format!("{URI_PREFIX}{role}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        for ok in ["host-0123abcdef012345", "a", "r1", &"x".repeat(63)] {
            check_name(ok).unwrap();
        }
        for (bad, why) in [
            ("", "empty"),
            (&"x".repeat(64) as &str, "longer"),
            ("Host-1", "lowercase"),
            ("host_1", "lowercase"),
            ("host.1", "lowercase"),
            ("host/1", "lowercase"),
            ("-host", "start and end"),
            ("host-", "start and end"),
            ("1234", "all digits"),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn dns_names_are_checked() {
        check_dns_name("agent-1.example.com").unwrap();
        check_dns_name("localhost").unwrap();
        for bad in ["*.example.com", "", "a..b", "exa mple.com", "-a.com"] {
            assert!(check_dns_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn roles_round_trip() {
        for role in [Role::Agent, Role::Server] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        let e = "replica".parse::<Role>().unwrap_err();
        assert_eq!(e.to_string(), "unknown role \"replica\" (agent or server)");
    }
}
