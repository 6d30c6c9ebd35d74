//! Blocking procedures that build, check, reset and tear down slots. Each runs on a fresh
//! thread (see [`crate::ns`]), never on a runtime worker.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::conntrack::{self, ConntrackFlush};
use crate::error::{NetError, Result};
use crate::{netlink, nft, ns, tap};
use crate::{
    GATEWAY_IP, GATEWAY_MAC, GUEST_IP, GUEST_MAC, GUEST_MTU, GUEST_PREFIX_LEN, NS_UPLINK, TAP_NAME,
};

/// Where slot N lives.
#[derive(Clone, Debug)]
pub(crate) struct Geom {
    pub index: u32,
    pub ns_path: PathBuf,
    pub veth: String,
    pub host_addr: Ipv4Addr,
    pub ns_addr: Ipv4Addr,
}

/// Everything needed to build one slot.
pub(crate) struct BuildSpec {
    pub geom: Geom,
    pub uplink_mtu: u32,
    pub tap_owner: Option<u32>,
    pub tap_group: Option<u32>,
    pub script: String,
    pub nft: PathBuf,
}

fn host_ns_fd() -> Result<OwnedFd> {
    ns::open_ns(Path::new("/proc/thread-self/ns/net"))
}

/// Builds slot `spec.geom.index` from nothing. On error the caller must run [`destroy`].
///
/// ```text
/// 1. pin a new netns at /run/netns/<ns_prefix>N and move this thread into it
/// 2. in the namespace: ip_forward=1, IPv6 off, persistent tap0, lo up,
///    veth eth0 <-> <veth_prefix>N (peer created directly in the host namespace),
///    eth0 = .2/30 + default route via .1, tap0 = GATEWAY_IP/30 with GATEWAY_MAC
/// 3. load the slot's nftables table (nft spawned from this thread runs in the namespace)
/// 4. back in the host namespace: IPv6 off on the host veth end, .1/30, up
/// ```
pub(crate) fn build(spec: &BuildSpec) -> Result<()> {
    let g = &spec.geom;
    let host_ns = host_ns_fd()?;
    ns::create_and_enter(&g.ns_path)?;

    // Inside the slot namespace from here on. IPv6 is off before any device exists, so no
    // interface ever gets an IPv6 address (guests are IPv4-only).
    ns::write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")?;
    ns::write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1")?;
    ns::write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    tap::create_persistent(TAP_NAME, spec.tap_owner, spec.tap_group)?;
    let host_fd = host_ns.as_raw_fd();
    netlink::block_on(async {
        let h = netlink::connect()?;
        let lo = netlink::link_index(&h, "lo").await?;
        netlink::set_link(&h, lo, None, None).await?;
        netlink::add_veth(&h, NS_UPLINK, &g.veth, host_fd, spec.uplink_mtu).await?;
        let eth = netlink::link_index(&h, NS_UPLINK).await?;
        netlink::add_addr(&h, eth, g.ns_addr, 30).await?;
        netlink::set_link(&h, eth, None, None).await?;
        let tap = netlink::link_index(&h, TAP_NAME).await?;
        netlink::set_link(&h, tap, Some(GUEST_MTU), Some(GATEWAY_MAC)).await?;
        netlink::add_addr(&h, tap, GATEWAY_IP, GUEST_PREFIX_LEN).await?;
        // Every guest has the same address and MAC: the first connection to a restored guest
        // needs no ARP exchange (which a guest just restored under TCG answers slowly).
        netlink::set_permanent_neighbour(&h, tap, GUEST_IP, GUEST_MAC).await?;
        netlink::add_default_route(&h, eth, g.host_addr).await?;
        Ok::<(), NetError>(())
    })??;
    nft::apply(&spec.nft, &spec.script, &format!("slot {}", g.index))?;

    // Back to the host namespace for the host end of the veth.
    ns::setns_fd(host_ns.as_fd()).map_err(|e| NetError::io("setns back to host", e))?;
    ns::write_sysctl(
        &format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", g.veth),
        "1",
    )?;
    netlink::block_on(async {
        let h = netlink::connect()?;
        let v = netlink::link_index(&h, &g.veth).await?;
        netlink::add_addr(&h, v, g.host_addr, 30).await?;
        netlink::set_link(&h, v, None, None).await?;
        Ok::<(), NetError>(())
    })??;
    Ok(())
}

/// Deletes the host veth ends (which deletes the pairs) and unpins the namespaces. The kernel
/// frees each namespace (and the TAP in it) once nothing references it. Call from the host
/// namespace.
pub(crate) fn destroy(items: &[(PathBuf, String)]) -> Result<()> {
    let mut first_err = None;
    netlink::block_on(async {
        let h = netlink::connect()?;
        for (_, veth) in items {
            let r = async {
                if let Some(l) = netlink::link(&h, veth).await? {
                    netlink::del_link(&h, l.index).await?;
                }
                Ok::<(), NetError>(())
            }
            .await;
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        Ok::<(), NetError>(())
    })??;
    for (path, _) in items {
        if let Err(e) = ns::delete(path) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Checks each slot; `None` = healthy, `Some(reason)` = broken. Call from the host namespace.
pub(crate) fn check(geoms: &[Geom]) -> Result<Vec<Option<String>>> {
    let host_ns = host_ns_fd()?;
    netlink::block_on(async {
        let h = netlink::connect()?;
        let links: HashMap<String, netlink::LinkInfo> = netlink::links(&h)
            .await?
            .into_iter()
            .map(|l| (l.name.clone(), l))
            .collect();
        let addrs = netlink::ipv4_addrs(&h).await?;
        let mut out = Vec::with_capacity(geoms.len());
        for g in geoms {
            out.push(check_one(g, &links, &addrs, &host_ns).await);
        }
        Ok(out)
    })?
}

async fn check_one(
    g: &Geom,
    links: &HashMap<String, netlink::LinkInfo>,
    addrs: &[(u32, Ipv4Addr, u8)],
    host_ns: &OwnedFd,
) -> Option<String> {
    if !ns::is_pinned(&g.ns_path) {
        return Some(format!("{} is not a pinned namespace", g.ns_path.display()));
    }
    let Some(v) = links.get(&g.veth) else {
        return Some(format!("host veth {} missing", g.veth));
    };
    if !v.up {
        return Some(format!("host veth {} is down", g.veth));
    }
    if !addrs
        .iter()
        .any(|(i, a, p)| *i == v.index && *a == g.host_addr && *p == 30)
    {
        return Some(format!("host veth {} lacks {}/30", g.veth, g.host_addr));
    }
    if let Err(e) = ns::enter(&g.ns_path) {
        return Some(format!("cannot enter namespace: {e}"));
    }
    let inner = async {
        let h = netlink::connect()?;
        let eth = netlink::link(&h, NS_UPLINK).await?;
        let tap = netlink::link(&h, TAP_NAME).await?;
        let ns_addrs = netlink::ipv4_addrs(&h).await?;
        Ok::<_, NetError>((eth, tap, ns_addrs))
    }
    .await;
    let back = ns::setns_fd(host_ns.as_fd());
    if let Err(e) = back {
        // Cannot continue checking from the wrong namespace.
        return Some(format!("cannot return to host namespace: {e}"));
    }
    let (eth, tap, ns_addrs) = match inner {
        Ok(x) => x,
        Err(e) => return Some(format!("netlink in namespace: {e}")),
    };
    let Some(eth) = eth else {
        return Some(format!("{NS_UPLINK} missing in namespace"));
    };
    if eth.link != Some(v.index) {
        return Some(format!("{NS_UPLINK} is not the peer of {}", g.veth));
    }
    if !ns_addrs
        .iter()
        .any(|(i, a, _)| *i == eth.index && *a == g.ns_addr)
    {
        return Some(format!("{NS_UPLINK} lacks {}", g.ns_addr));
    }
    let Some(tap) = tap else {
        return Some(format!("{TAP_NAME} missing in namespace"));
    };
    if !ns_addrs
        .iter()
        .any(|(i, a, _)| *i == tap.index && *a == GATEWAY_IP)
    {
        return Some(format!("{TAP_NAME} lacks {GATEWAY_IP}"));
    }
    None
}

/// Recycles a slot: refuses if a process is still attached to its TAP, flushes the
/// namespace's conntrack table and, if given, loads `script`.
pub(crate) fn reset(
    index: u32,
    ns_path: &Path,
    script: Option<&str>,
    nft_bin: &Path,
) -> Result<ConntrackFlush> {
    ns::enter(ns_path)?;
    let tap = netlink::block_on(async {
        let h = netlink::connect()?;
        let tap = netlink::link(&h, TAP_NAME).await?;
        if let Some(t) = &tap {
            // Slots built before the entry existed get it here (a no-op for the others).
            netlink::set_permanent_neighbour(&h, t.index, GUEST_IP, GUEST_MAC).await?;
        }
        Ok::<_, NetError>(tap)
    })??;
    let Some(tap) = tap else {
        return Err(NetError::io(
            format!("slot {index}: {TAP_NAME}"),
            std::io::Error::from_raw_os_error(libc::ENODEV),
        ));
    };
    // A persistent TAP has carrier exactly while a file descriptor is attached.
    if tap.carrier == Some(true) {
        return Err(NetError::SlotBusy(index));
    }
    let ct = conntrack::flush_current_netns()?;
    if let Some(s) = script {
        nft::apply(nft_bin, s, &format!("slot {index}"))?;
    }
    Ok(ct)
}

/// Loads `script` in the namespace.
pub(crate) fn apply_in(index: u32, ns_path: &Path, script: &str, nft_bin: &Path) -> Result<()> {
    ns::enter(ns_path)?;
    nft::apply(nft_bin, script, &format!("slot {index}"))
}

/// Host-wide setup: IPv4 forwarding and the host table. Call from the host namespace.
pub(crate) fn host_setup(nft_bin: &Path, script: &str) -> Result<()> {
    ns::write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    nft::apply(nft_bin, script, "host table")
}

/// Host links named `<prefix><digits>`: `(name, index)`.
pub(crate) fn host_links_with_prefix(prefix: &str) -> Result<Vec<(String, u32)>> {
    netlink::block_on(async {
        let h = netlink::connect()?;
        Ok(netlink::links(&h)
            .await?
            .into_iter()
            .filter_map(|l| crate::parse_index(&l.name, prefix).map(|i| (l.name, i)))
            .collect())
    })?
}
