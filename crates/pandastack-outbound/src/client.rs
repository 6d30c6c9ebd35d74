//! The policy in a `reqwest` client: names resolve through [`OutboundPolicy::resolve`] (so the
//! connection goes to an address that was checked), and every redirect's target that is an IP
//! literal — which a client does not resolve — is checked before it is followed.

use std::sync::Arc;

use crate::OutboundPolicy;

struct Resolver(Arc<OutboundPolicy>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.0);
        Box::pin(async move {
            // reqwest sets the port itself; an exception for one port only does not match here.
            let addrs = policy.resolve(name.as_str(), 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Checks a URL's host when it is an IP literal (or `localhost`); names are checked when they
/// resolve.
pub fn check_url(policy: &OutboundPolicy, url: &reqwest::Url) -> Result<(), crate::Refused> {
    let host = url.host_str().unwrap_or_default();
    policy.check_literal(host, url.port_or_known_default().unwrap_or(0))
}

/// A client builder that keeps to `policy` (at most 10 redirects, each checked). Check the
/// first URL of each request with [`check_url`].
pub fn client_builder(policy: OutboundPolicy) -> reqwest::ClientBuilder {
    let policy = Arc::new(policy);
    let for_redirects = Arc::clone(&policy);
    reqwest::Client::builder()
        .dns_resolver(Arc::new(Resolver(policy)))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 10 {
                return attempt.error("more than 10 redirects");
            }
            match check_url(&for_redirects, attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        }))
        // Never a proxy from the environment: the checks are made here.
        .no_proxy()
}
