//! # pandastack-net — a pool of pre-built per-sandbox network slots
//!
//! Every sandbox's QEMU process runs inside its own network namespace that holds the TAP
//! device the guest NIC is attached to. Building a namespace (netns, veth, TAP, addresses,
//! routes, an nftables table) takes milliseconds and several processes/syscalls, so it is done
//! ahead of time: [`NetPool::ensure`] pre-builds slots, [`NetPool::acquire`] hands one out,
//! [`NetPool::release`] resets it and puts it back. Slots are reused, never leaked: the pool
//! grows only up to what is needed at once, and `open`/[`NetPool::reconcile`] delete anything
//! with the pool's prefixes that no slot owns.
//!
//! ## Topology (slot N, defaults)
//!
//! ```text
//!  host network namespace                            slot namespace /run/netns/ps-N
//! ┌───────────────────────────────────────────┐     ┌──────────────────────────────────────────┐
//! │                                           │     │  nft table inet pandastack:              │
//! │  uplink (default route, e.g. eth0)        │     │   DNAT 10.88.0.1:53 -> host resolver     │
//! │   ▲  masquerade 10.200.0.0/16             │     │   SNAT 10.88.0.2 -> 10.200.x.(4N+2)      │
//! │   │  (nft table inet pandastack:          │     │   egress policy (forward tap0 -> eth0)   │
//! │   │   forward + INPUT guard)              │     │   input: drop (gateway ping only)        │
//! │   │                                       │     │                                          │
//! │  psvN  10.200.x.(4N+1)/30 ◄══ veth ══════════════► eth0  10.200.x.(4N+2)/30                 │
//! │                                           │     │        default via 10.200.x.(4N+1)       │
//! └───────────────────────────────────────────┘     │                                          │
//!                                                   │  tap0  10.88.0.1/30  02:50:53:00:00:01   │
//!                                                   │   ▲ persistent TAP, owner = tap_owner    │
//!                                                   └───┼──────────────────────────────────────┘
//!                                                       │ QEMU (started inside the namespace,
//!                                                       │ or given the TAP fd)
//!                                                  ┌────┴─────────────────────────────┐
//!                                                  │ guest eth0 10.88.0.2/30           │
//!                                                  │ MAC 02:50:53:00:00:02, gw/DNS .1 │
//!                                                  └──────────────────────────────────┘
//! ```
//!
//! * **Identical guest side in every slot.** Every slot's TAP has the same address and MAC and
//!   the guest always gets [`GUEST_IP`]/[`GUEST_PREFIX_LEN`], [`GATEWAY_IP`], [`GUEST_MAC`],
//!   [`GUEST_DNS`], [`GUEST_MTU`]. A template baked once therefore works unchanged in every
//!   slot, and a restored snapshot — whose kernel still holds the baked IP configuration
//!   *and its ARP entry for the gateway* — keeps working at once: the gateway MAC is fixed
//!   ([`GATEWAY_MAC`]) for exactly that reason. Uniqueness comes from the namespace: the
//!   guest address is SNATed to the slot's `/30` on the veth, which the host masquerades.
//! * **DNS.** Guests use [`GUEST_DNS`] (= the gateway); the namespace DNATs port 53 to the first
//!   host resolver (see [`DnsSource`] for how they are found: `/etc/resolv.conf`; for a
//!   loopback stub such as systemd-resolved's `127.0.0.53` its upstreams from
//!   `/run/systemd/resolve/resolv.conf`; else [`NetConfig::fallback_dns`], default
//!   [`DEFAULT_FALLBACK_DNS`]). A loopback resolver is never exposed to the namespace. Only
//!   the first resolver receives the DNAT; the others are allowed for direct queries.
//! * **IPv6 is disabled for guests.** `disable_ipv6` is set in every slot namespace before
//!   its devices exist and on the host veth end; the egress chain also drops non-IPv4.
//!   Guests are IPv4-only (the IPv6 equivalents of the blocked ranges are therefore moot).
//! * **MTU.** The TAP runs at [`GUEST_MTU`]; the veth runs at the host uplink's MTU when that is
//!   smaller, in which case TCP MSS is clamped in the namespace (both directions).
//!
//! ## Egress policy
//!
//! [`EgressPolicy`] (allow internet, block private ranges, allow/deny CIDR lists) is rendered
//! into one nftables table per slot namespace and loaded atomically with one `nft -f -`
//! transaction (see the `nft` module for why the binary rather than a Rust nftables crate).
//! Enforcing it inside the namespace means host firewall changes (a `flush ruleset`, docker,
//! ufw) cannot open it, and nothing in the slot can change it. Independently, the host table
//! guards the host: packets arriving from any `psv*` interface may not open connections to any
//! host address (INPUT), slots may not reach each other, and nothing may be forwarded into a
//! slot unless it belongs to a connection the slot opened. Default: internet allowed; the host
//! (all its addresses, the veth peer), `169.254.0.0/16` (metadata), `127.0.0.0/8`, multicast,
//! reserved ranges, RFC 1918, `100.64.0.0/10` blocked; DNS only to the resolvers.
//!
//! ## Mechanisms, and why
//!
//! * Namespaces are created like `ip netns add` (a bind mount of `/proc/thread-self/ns/net` on
//!   `/run/netns/<name>`, with `/run/netns` a shared mount), so they survive this process and
//!   are visible to `ip netns`. They are entered with `setns(2)` on **dedicated short-lived
//!   threads** (namespaces are per thread; a runtime worker must never be left inside one).
//! * Links, addresses and routes use **rtnetlink** from such a thread: a netlink socket is
//!   bound to the namespace of the thread that creates it, so netlink-in-namespace is just "open
//!   the socket after `setns`", with no `ip` processes. The veth is created from inside the
//!   namespace with its peer placed directly in the host namespace (`IFLA_NET_NS_FD`).
//! * The TAP is made with `/dev/net/tun` (`TUNSETIFF`, `TUNSETOWNER`/`TUNSETGROUP`,
//!   `TUNSETPERSIST`) inside the namespace — rtnetlink cannot create TUN/TAP devices. With
//!   [`NetConfig::tap_owner`] an unprivileged QEMU of that uid may attach to it.
//! * `nft` is spawned from a thread inside the namespace (children inherit the forking
//!   thread's namespace). Conntrack is flushed on release over ctnetlink, per namespace.
//!
//! ## Starting QEMU in a slot
//!
//! Either start QEMU inside the namespace and let it attach by name
//! (`-netdev tap,id=n0,ifname=tap0,script=no,downscript=no -device
//! virtio-net-device,netdev=n0,mac=02:50:53:00:00:02`) using [`Slot::enter_hook`] (a
//! `pre_exec` hook), [`setns_fd`], or [`Slot::run_in_netns`] (spawn from a thread inside the
//! namespace; works with `Command::uid`); or open the TAP with [`Slot::open_tap`] and pass the
//! fd (`-netdev tap,fd=N`). Running QEMU inside the namespace is preferred: a compromised
//! QEMU then has no route to the host network either.
//!
//! ## Privileges
//!
//! The pool needs root (`CAP_NET_ADMIN` for links, nftables and the TAP; `CAP_SYS_ADMIN` for
//! mounts and `setns`). The VMM itself needs neither if it attaches to a TAP owned by its uid
//! after being placed in the namespace by a privileged parent.

#![deny(missing_docs)]

use std::net::Ipv4Addr;

mod cidr;
mod config;
mod conntrack;
mod dial;
mod env;
mod error;
mod netlink;
mod nft;
mod ns;
mod pool;
mod slot;
mod slotops;
mod tap;

pub use cidr::Ipv4Cidr;
pub use config::{EgressPolicy, NetConfig};
pub use conntrack::ConntrackFlush;
pub use dial::connect_guest;
pub use env::{DnsSource, HostEnv};
pub use error::{NetError, Result};
pub use ns::{run_in_netns, setns_fd};
pub use pool::{NetPool, OpenReport, PoolStats, ReconcileReport};
pub use slot::Slot;

/// Name of the TAP device inside every slot namespace.
pub const TAP_NAME: &str = "tap0";
/// Name of the namespace end of the veth uplink.
pub const NS_UPLINK: &str = "eth0";
/// Directory of named network namespaces (shared with `ip netns`).
pub const NETNS_DIR: &str = "/run/netns";

/// The guest's address (same in every slot).
pub const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
/// The guest's gateway: the TAP's address in the slot namespace.
pub const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
/// Prefix length of the guest network.
pub const GUEST_PREFIX_LEN: u8 = 30;
/// Netmask of the guest network.
pub const GUEST_NETMASK: Ipv4Addr = Ipv4Addr::new(255, 255, 255, 252);
/// The guest network `10.88.0.0/30`.
pub const GUEST_CIDR: Ipv4Cidr = Ipv4Cidr::from_octets(10, 88, 0, 0, 30);
/// MAC of the guest NIC (locally administered, unicast).
pub const GUEST_MAC: [u8; 6] = [0x02, 0x50, 0x53, 0x00, 0x00, 0x02];
/// MAC of the TAP (the guest's gateway). Fixed so the ARP entry inside a restored snapshot
/// stays valid in every slot.
pub const GATEWAY_MAC: [u8; 6] = [0x02, 0x50, 0x53, 0x00, 0x00, 0x01];
/// MTU of the guest NIC and the TAP.
pub const GUEST_MTU: u32 = 1500;
/// DNS server the guest must use (forwarded by the namespace to the host's resolver).
pub const GUEST_DNS: Ipv4Addr = GATEWAY_IP;
/// Default slot range: 16384 slots of one /30 each.
pub const DEFAULT_BASE: Ipv4Cidr = Ipv4Cidr::from_octets(10, 200, 0, 0, 16);
/// Resolvers used when the host has no usable one (Cloudflare, Quad9).
pub const DEFAULT_FALLBACK_DNS: [Ipv4Addr; 2] =
    [Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(9, 9, 9, 9)];

/// Destinations no slot can reach whatever its policy says, unless explicitly allowed:
/// this-network, loopback, link-local (cloud metadata `169.254.169.254`), multicast,
/// reserved and broadcast. (The host's own addresses are blocked separately and cannot be
/// allowed.)
pub const ALWAYS_BLOCKED: &[Ipv4Cidr] = &[
    Ipv4Cidr::from_octets(0, 0, 0, 0, 8),
    Ipv4Cidr::from_octets(127, 0, 0, 0, 8),
    Ipv4Cidr::from_octets(169, 254, 0, 0, 16),
    Ipv4Cidr::from_octets(224, 0, 0, 0, 4),
    Ipv4Cidr::from_octets(240, 0, 0, 0, 4),
];

/// Ranges blocked when [`EgressPolicy::block_private`] is set: RFC 1918, carrier-grade NAT
/// (RFC 6598), IETF protocol assignments and the benchmarking range.
pub const PRIVATE_RANGES: &[Ipv4Cidr] = &[
    Ipv4Cidr::from_octets(10, 0, 0, 0, 8),
    Ipv4Cidr::from_octets(100, 64, 0, 0, 10),
    Ipv4Cidr::from_octets(172, 16, 0, 0, 12),
    Ipv4Cidr::from_octets(192, 0, 0, 0, 24),
    Ipv4Cidr::from_octets(192, 168, 0, 0, 16),
    Ipv4Cidr::from_octets(198, 18, 0, 0, 15),
];

/// `aa:bb:cc:dd:ee:ff` form of a MAC address.
pub fn mac_to_string(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Kernel command-line `ip=` argument configuring the guest statically (for cold boots of a
/// template; restored snapshots keep their configuration):
/// `ip=10.88.0.2::10.88.0.1:255.255.255.252::eth0:off:10.88.0.1`.
pub fn guest_kernel_ip_arg() -> String {
    format!("ip={GUEST_IP}::{GATEWAY_IP}:{GUEST_NETMASK}::eth0:off:{GUEST_DNS}")
}

/// `N` if `name` is `<prefix><decimal digits>` (no sign, no leading zeros except `0` itself).
pub(crate) fn parse_index(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    if rest.is_empty()
        || !rest.bytes().all(|b| b.is_ascii_digit())
        || (rest.len() > 1 && rest.starts_with('0'))
    {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_agree() {
        assert!(GUEST_CIDR.contains(GUEST_IP));
        assert!(GUEST_CIDR.contains(GATEWAY_IP));
        assert_eq!(GUEST_CIDR.prefix_len(), GUEST_PREFIX_LEN);
        assert_eq!(u32::from(GUEST_NETMASK), GUEST_CIDR.mask());
        assert_eq!(mac_to_string(&GUEST_MAC), "02:50:53:00:00:02");
        assert_eq!(DEFAULT_BASE.size() / 4, 16384);
        assert_eq!(
            guest_kernel_ip_arg(),
            "ip=10.88.0.2::10.88.0.1:255.255.255.252::eth0:off:10.88.0.1"
        );
    }

    #[test]
    fn index_parsing() {
        assert_eq!(parse_index("ps-12", "ps-"), Some(12));
        assert_eq!(parse_index("ps-0", "ps-"), Some(0));
        assert_eq!(parse_index("ps-012", "ps-"), None);
        assert_eq!(parse_index("ps-", "ps-"), None);
        assert_eq!(parse_index("ps-foo", "ps-"), None);
        assert_eq!(parse_index("psv3", "ps-"), None);
    }

    #[test]
    fn config_validation() {
        let mut c = NetConfig::new("/tmp/x");
        assert!(c.validate().is_ok());
        assert_eq!(c.capacity(), 16384);
        c.veth_prefix = "averylongpre".into();
        assert!(c.validate().is_err());
        let mut c = NetConfig::new("/tmp/x");
        c.base = "10.88.0.0/16".parse().unwrap();
        assert!(c.validate().is_err());
        let mut c = NetConfig::new("/tmp/x");
        c.nft_table = "bad-name".into();
        assert!(c.validate().is_err());
    }
}
