//! The streamable-HTTP transport: [`http_service`] is the tower service the API listener mounts
//! at `/mcp`. Authentication is the listener's job (a request without a valid bearer key is
//! refused before it gets here); each tool call then uses the key of the request that carried it.

use std::sync::Arc;

use pandastack_client::Client;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::PandaStackMcp;

/// The `/mcp` service type.
pub type McpHttpService = StreamableHttpService<PandaStackMcp, LocalSessionManager>;

/// The MCP streamable-HTTP service over the API at `base` (the server's own listener; `base`'s
/// key, if any, is never used). Cancelling `shutdown` ends its sessions and open streams, so a
/// graceful shutdown of the listener does not wait for them.
///
/// `Host` checking (rmcp's defence against DNS rebinding of a local server) is off: every
/// request carries an API key, which a page served by another origin does not have, and the
/// server answers on whatever names its operator points at it.
pub fn http_service(base: Client, shutdown: CancellationToken) -> McpHttpService {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(shutdown);
    StreamableHttpService::new(
        move || Ok(PandaStackMcp::per_request(base.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The key of `Authorization: Bearer <key>` (scheme case-insensitive), if there is one.
pub fn bearer_key(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = v.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_keys_are_read() {
        let mut h = http::HeaderMap::new();
        assert_eq!(bearer_key(&h), None);
        h.insert("authorization", "Bearer pds_abc".parse().unwrap());
        assert_eq!(bearer_key(&h).as_deref(), Some("pds_abc"));
        h.insert("authorization", "bearer  pds_x ".parse().unwrap());
        assert_eq!(bearer_key(&h).as_deref(), Some("pds_x"));
        h.insert("authorization", "Basic dXNlcg==".parse().unwrap());
        assert_eq!(bearer_key(&h), None);
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer_key(&h), None);
    }
}
