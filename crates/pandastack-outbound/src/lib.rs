//! # pandastack-outbound — what the host may connect to on a user's behalf
//!
//! Some fetches run on the host itself, with a URL a user chose: an app's or function's git
//! source above all. Left alone,
//! such a URL reaches whatever the host can reach — its own loopback services, the cloud
//! metadata endpoint, the LAN — and `file://` or a plain path reads the host's disk as root.
//! Sandboxes never get that far (their egress policy is enforced in their network namespace);
//! this crate holds the host's own fetches to the same line:
//!
//! * [`OutboundPolicy`]: public addresses only — not loopback, unspecified, link-local,
//!   private, CGNAT, metadata, multicast, documentation or reserved ranges, IPv6 forms that
//!   carry such an IPv4 address included — unless the operator allows a host, an address or a
//!   network ([`Allowed`], `--allow-internal-fetch`).
//! * The check is made where the connection is made, on the address that is then used: names
//!   are resolved once, every answer checked, and the connection goes to a checked address.
//!   Redirects are checked the same way.
//! * Programs that fetch for us over HTTP(S) go through a [`FetchProxy`] (git's `http.proxy`);
//!   a caller that connects itself uses [`OutboundPolicy::resolve`] and connects to what it
//!   returns.
//!
//! It must not decide which schemes or programs are used (its callers refuse `file://`, paths
//! and git's remote helpers before anything runs), and it holds no state beyond one fetch.

mod policy;
mod proxy;

pub use policy::{internal_class, Allowed, BadAllowed, OutboundPolicy, Refused};
pub use proxy::FetchProxy;
