//! What the pool needs to know about the host: its addresses (blocked from the guests), its
//! resolvers (the DNS the guests may use) and the uplink MTU.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::config::NetConfig;
use crate::error::Result;
use crate::netlink;
use crate::GUEST_MTU;

/// Where the guests' DNS resolvers came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DnsSource {
    /// [`NetConfig::dns_servers`].
    Configured,
    /// Non-loopback `nameserver` lines of `/etc/resolv.conf`.
    ResolvConf,
    /// `/etc/resolv.conf` points at a loopback stub (systemd-resolved's `127.0.0.53`); its
    /// upstreams from `/run/systemd/resolve/resolv.conf` are used instead. A loopback stub is
    /// unreachable from a namespace without exposing the host's loopback (`route_localnet`),
    /// which this crate refuses to do.
    SystemdResolved,
    /// No usable host resolver: [`NetConfig::fallback_dns`].
    Fallback,
}

/// Snapshot of the host facts the rulesets are rendered from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEnv {
    /// Every IPv4 address of the host, except those inside the pool's slot range.
    pub host_addrs: Vec<Ipv4Addr>,
    /// Resolvers; the first is where [`crate::GUEST_DNS`] is forwarded.
    pub dns: Vec<Ipv4Addr>,
    /// Where `dns` came from.
    pub dns_source: DnsSource,
    /// MTU used on the veth uplink.
    pub uplink_mtu: u32,
}

/// IPv4 `nameserver` entries of a resolv.conf text (IPv6 entries are ignored: guests are
/// IPv4-only).
pub(crate) fn parse_resolv_conf(text: &str) -> Vec<Ipv4Addr> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("nameserver"))
                .then(|| it.next())
                .flatten()
        })
        .filter_map(|a| match a.parse::<IpAddr>() {
            Ok(IpAddr::V4(v)) => Some(v),
            _ => None,
        })
        .collect()
}

/// Picks resolvers per [`DnsSource`] (no I/O besides reading the two resolv.conf files).
pub(crate) fn detect_dns(cfg: &NetConfig) -> (Vec<Ipv4Addr>, DnsSource) {
    if let Some(d) = &cfg.dns_servers {
        return (d.clone(), DnsSource::Configured);
    }
    let etc = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let all = parse_resolv_conf(&etc);
    let usable: Vec<Ipv4Addr> = all
        .iter()
        .copied()
        .filter(|a| !a.is_loopback() && !a.is_unspecified())
        .collect();
    if !usable.is_empty() {
        return (usable, DnsSource::ResolvConf);
    }
    if all.iter().any(|a| a.is_loopback()) {
        let up = std::fs::read_to_string("/run/systemd/resolve/resolv.conf").unwrap_or_default();
        let up: Vec<Ipv4Addr> = parse_resolv_conf(&up)
            .into_iter()
            .filter(|a| !a.is_loopback())
            .collect();
        if !up.is_empty() {
            return (up, DnsSource::SystemdResolved);
        }
    }
    (cfg.fallback_dns.clone(), DnsSource::Fallback)
}

/// Detects the host environment. Call on a thread in the host namespace, inside
/// [`netlink::block_on`].
pub(crate) async fn detect(cfg: &NetConfig) -> Result<HostEnv> {
    let h = netlink::connect()?;
    let addrs = netlink::ipv4_addrs(&h).await?;
    let mut host_addrs: Vec<Ipv4Addr> = addrs
        .iter()
        .map(|(_, a, _)| *a)
        .filter(|a| !cfg.base.contains(*a) && !a.is_loopback())
        .collect();
    host_addrs.sort();
    host_addrs.dedup();
    let uplink_mtu = match cfg.uplink_mtu {
        Some(m) => m,
        None => {
            let mut mtu = GUEST_MTU;
            if let Some(oif) = netlink::default_route_oif(&h).await? {
                if let Some(l) = netlink::links(&h)
                    .await?
                    .into_iter()
                    .find(|l| l.index == oif)
                {
                    mtu = l.mtu.unwrap_or(GUEST_MTU).min(GUEST_MTU);
                }
            }
            mtu
        }
    };
    let (dns, dns_source) = detect_dns(cfg);
    Ok(HostEnv {
        host_addrs,
        dns,
        dns_source,
        uplink_mtu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf() {
        let t = "# x\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nnameserver fd00::1\noptions edns0\nsearch a\n";
        assert_eq!(
            parse_resolv_conf(t),
            [
                Ipv4Addr::new(127, 0, 0, 53),
                Ipv4Addr::new(10, 255, 255, 53)
            ]
        );
    }
}
