//! Pool configuration and the per-slot egress policy.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cidr::Ipv4Cidr;
use crate::error::{NetError, Result};
use crate::{DEFAULT_BASE, DEFAULT_FALLBACK_DNS};

/// Egress policy of one slot, enforced by an nftables table *inside* the slot's namespace.
///
/// Evaluation order for a packet leaving the guest (first match wins):
///
/// 1. anything that is not IPv4, or not from [`crate::GUEST_IP`]: drop (anti-spoofing);
/// 2. udp/tcp port 53 to one of the pool's DNS resolvers: accept;
/// 3. any address of the host (all host IPv4 addresses at detection time, the slot's veth peer,
///    the guest gateway): drop — not overridable;
/// 4. `deny`: reject;
/// 5. `allow`: accept (overrides 6–8, so e.g. an internal `10.1.0.0/16` can be opened);
/// 6. udp/tcp port 53 anywhere else: reject;
/// 7. [`crate::ALWAYS_BLOCKED`] (loopback, link-local incl. the `169.254.169.254` metadata
///    service, multicast, reserved, this-network) and the pool's own slot range: reject;
/// 8. if `block_private`: [`crate::PRIVATE_RANGES`] (RFC 1918, CGNAT `100.64.0.0/10`, …): reject;
/// 9. `allow_internet` ? accept : reject.
///
/// "Reject" answers with ICMP admin-prohibited, so a blocked `connect()` in the guest fails at
/// once instead of hanging for the TCP timeout; it reveals nothing beyond "blocked".
///
/// The policy is checked on every packet (not only on new connections), so tightening a running
/// slot's policy also cuts its existing flows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EgressPolicy {
    /// Allow destinations no other rule matched (the public internet). Default `true`.
    pub allow_internet: bool,
    /// Block private and carrier-grade-NAT ranges. Default `true`.
    pub block_private: bool,
    /// Destinations allowed even inside blocked ranges (never the host itself).
    pub allow: Vec<Ipv4Cidr>,
    /// Destinations always rejected.
    pub deny: Vec<Ipv4Cidr>,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        Self {
            allow_internet: true,
            block_private: true,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl EgressPolicy {
    /// Only DNS and the `allow` list are reachable.
    pub fn allow_list_only(allow: Vec<Ipv4Cidr>) -> Self {
        Self {
            allow_internet: false,
            block_private: true,
            allow,
            deny: Vec::new(),
        }
    }
}

/// Configuration of a [`crate::NetPool`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetConfig {
    /// Directory holding `netpool.json` (the slot records) and `netpool.lock`.
    pub state_dir: PathBuf,
    /// Range carved into one `/30` per slot (host end `.1`, namespace end `.2` of each /30).
    /// Default `10.200.0.0/16` = 16384 slots. Must not overlap anything the host routes.
    pub base: Ipv4Cidr,
    /// Optional cap below what `base` allows.
    pub max_slots: Option<u32>,
    /// Namespace name prefix; slot N is `/run/netns/<ns_prefix><N>`. Default `ps-`.
    /// `open`/`reconcile` delete every `<ns_prefix><digits>` namespace they do not own, so two
    /// pools on one host must use different prefixes.
    pub ns_prefix: String,
    /// Host-side veth name prefix; slot N is `<veth_prefix><N>`. Default `psv`.
    pub veth_prefix: String,
    /// Name of the nftables table (family `inet`) on the host and in every slot namespace.
    /// Default `pandastack`.
    pub nft_table: String,
    /// Owner uid of every TAP (`TUNSETOWNER`): a process with this euid may attach to the TAP
    /// without `CAP_NET_ADMIN` (unprivileged QEMU). `None`: only privileged processes.
    pub tap_owner: Option<u32>,
    /// Owner gid of every TAP (`TUNSETGROUP`).
    pub tap_group: Option<u32>,
    /// MTU of the veth uplink. `None`: the MTU of the host's default-route device, capped at
    /// [`crate::GUEST_MTU`]. When it is below the guest MTU, TCP MSS is clamped in the namespace.
    pub uplink_mtu: Option<u32>,
    /// Resolvers the guests' DNS (sent to [`crate::GUEST_DNS`]) is forwarded to. `None`: the
    /// host's resolvers from `/etc/resolv.conf` (loopback stubs are skipped; for a
    /// systemd-resolved stub the upstreams from `/run/systemd/resolve/resolv.conf` are used),
    /// else `fallback_dns`.
    pub dns_servers: Option<Vec<Ipv4Addr>>,
    /// Used when no usable host resolver is found. Default [`DEFAULT_FALLBACK_DNS`].
    pub fallback_dns: Vec<Ipv4Addr>,
    /// Policy given to slots by [`crate::NetPool::acquire`] and restored on release.
    pub default_policy: EgressPolicy,
    /// The `nft` binary. Default `nft` (looked up in `PATH`).
    pub nft_path: PathBuf,
}

impl NetConfig {
    /// Defaults with the given state directory.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            base: DEFAULT_BASE,
            max_slots: None,
            ns_prefix: "ps-".into(),
            veth_prefix: "psv".into(),
            nft_table: "pandastack".into(),
            tap_owner: None,
            tap_group: None,
            uplink_mtu: None,
            dns_servers: None,
            fallback_dns: DEFAULT_FALLBACK_DNS.to_vec(),
            default_policy: EgressPolicy::default(),
            nft_path: PathBuf::from("nft"),
        }
    }

    /// Number of slots this configuration allows.
    pub fn capacity(&self) -> u32 {
        let by_range = (self.base.size() / 4).min(u64::from(u32::MAX)) as u32;
        self.max_slots.map_or(by_range, |m| m.min(by_range))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(NetError::Config(m));
        if self.base.prefix_len() > 30 {
            return bad(format!("base {} is smaller than one /30", self.base));
        }
        if self.capacity() == 0 {
            return bad("max_slots is 0".into());
        }
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !name_ok(&self.ns_prefix) {
            return bad(format!("ns_prefix {:?}", self.ns_prefix));
        }
        if !name_ok(&self.veth_prefix) || self.veth_prefix.contains('-') {
            return bad(format!("veth_prefix {:?}", self.veth_prefix));
        }
        let digits = (self.capacity() - 1).to_string().len();
        if self.veth_prefix.len() + digits > 15 {
            return bad(format!(
                "veth_prefix {:?} + {digits} digits exceeds the 15-byte interface name limit",
                self.veth_prefix
            ));
        }
        let table_ok = self
            .nft_table
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic())
            && self
                .nft_table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !table_ok {
            return bad(format!("nft_table {:?}", self.nft_table));
        }
        if self.base.overlaps(&crate::GUEST_CIDR) {
            return bad(format!(
                "base {} overlaps the guest network {}",
                self.base,
                crate::GUEST_CIDR
            ));
        }
        if let Some(m) = self.uplink_mtu {
            if !(576..=65535).contains(&m) {
                return bad(format!("uplink_mtu {m}"));
            }
        }
        Ok(())
    }
}
