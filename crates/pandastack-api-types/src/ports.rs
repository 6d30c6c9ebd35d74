//! Preview URLs: a port inside a sandbox reached from outside through the server's proxy.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// Header that carries a sandbox's access token to the preview proxy (a cookie
/// `pandastack_access=<token>` works too, and `?pandastack_access=<token>` on a first visit
/// sets it).
pub const ACCESS_TOKEN_HEADER: &str = "x-pandastack-access-token";

/// A port's preview URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PortUrl {
    /// `<scheme>://<port>-<sandbox id>.<domain>[:<proxy port>]`.
    pub url: String,
    pub port: u16,
    /// Reachable without a token.
    pub public: bool,
    /// The sandbox's access token: send it as `X-PandaStack-Access-Token` (or open
    /// `<url>?pandastack_access=<token>` once in a browser) while the port is private. An API
    /// key of the sandbox's workspace works too.
    pub token: String,
}

/// `PATCH /v1/sandboxes/{id}/ports/{port}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortUpdate {
    pub public: bool,
}

/// A port number from a path: 1 to 65535.
pub fn parse_port(text: &str) -> Result<u16, FieldError> {
    text.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| field_error("port", "a TCP port, 1 to 65535"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_1_to_65535() {
        assert_eq!(parse_port("8080"), Ok(8080));
        assert_eq!(parse_port("65535"), Ok(65535));
        for bad in ["0", "65536", "-1", "80a", "", "1e3"] {
            assert!(parse_port(bad).is_err(), "{bad}");
        }
    }
}
