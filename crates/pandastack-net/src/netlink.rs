//! rtnetlink helpers. Every connection lives on a private current-thread runtime of the
//! (disposable) thread that opened it; the socket is bound to that thread's network namespace
//! at creation, and dropping the runtime closes it, so no socket keeps a deleted namespace
//! alive.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::RawFd;

use futures::TryStreamExt;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkMessage,
};
use rtnetlink::packet_route::route::{RouteAttribute, RouteHeader};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::error::{NetError, Result};

/// Runs `f` to completion on a new current-thread runtime owned by the calling thread.
pub(crate) fn block_on<F: Future>(f: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| NetError::io("build netlink runtime", e))?;
    Ok(rt.block_on(f))
}

/// Opens an rtnetlink connection in the calling thread's *current* network namespace. Must be
/// called inside [`block_on`].
pub(crate) fn connect() -> Result<Handle> {
    let (conn, handle, _) =
        rtnetlink::new_connection().map_err(|e| NetError::io("open rtnetlink socket", e))?;
    tokio::spawn(conn);
    Ok(handle)
}

/// A link's essentials.
#[derive(Clone, Debug)]
pub(crate) struct LinkInfo {
    pub index: u32,
    pub name: String,
    pub mtu: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's ifindex (in the peer's namespace).
    pub link: Option<u32>,
    pub carrier: Option<bool>,
    pub up: bool,
}

fn link_info(m: &LinkMessage) -> LinkInfo {
    let mut li = LinkInfo {
        index: m.header.index,
        name: String::new(),
        mtu: None,
        link: None,
        carrier: None,
        up: m.header.flags.contains(LinkFlags::Up),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => li.name = n.clone(),
            LinkAttribute::Mtu(v) => li.mtu = Some(*v),
            LinkAttribute::Link(v) => li.link = Some(*v),
            LinkAttribute::Carrier(c) => li.carrier = Some(*c != 0),
            _ => {}
        }
    }
    li
}

/// The link called `name`, or `None`.
pub(crate) async fn link(h: &Handle, name: &str) -> Result<Option<LinkInfo>> {
    let mut s = h.link().get().match_name(name.to_string()).execute();
    match s.try_next().await {
        Ok(m) => Ok(m.as_ref().map(link_info)),
        Err(e) => {
            let e = NetError::netlink(format!("get link {name}"), e);
            if e.is_netlink_errno(libc::ENODEV) {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// The link called `name`; an error if absent.
pub(crate) async fn link_index(h: &Handle, name: &str) -> Result<u32> {
    link(h, name).await?.map(|l| l.index).ok_or_else(|| {
        NetError::io(
            format!("link {name}"),
            std::io::Error::from_raw_os_error(libc::ENODEV),
        )
    })
}

/// All links.
pub(crate) async fn links(h: &Handle) -> Result<Vec<LinkInfo>> {
    let msgs: Vec<LinkMessage> = h
        .link()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| NetError::netlink("dump links", e))?;
    Ok(msgs.iter().map(link_info).collect())
}

/// Sets a link up, optionally with an MTU and a MAC address, in one request.
pub(crate) async fn set_link(
    h: &Handle,
    index: u32,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
) -> Result<()> {
    let mut b = LinkUnspec::new_with_index(index).up();
    if let Some(m) = mtu {
        b = b.mtu(m);
    }
    if let Some(mac) = mac {
        b = b.address(mac.to_vec());
    }
    h.link()
        .set(b.build())
        .execute()
        .await
        .map_err(|e| NetError::netlink(format!("set link {index}"), e))
}

/// Adds an IPv4 address to a link.
pub(crate) async fn add_addr(h: &Handle, index: u32, addr: Ipv4Addr, prefix: u8) -> Result<()> {
    h.address()
        .add(index, IpAddr::V4(addr), prefix)
        .execute()
        .await
        .map_err(|e| NetError::netlink(format!("add {addr}/{prefix} to link {index}"), e))
}

/// Sets a permanent neighbour entry `addr` → `mac` on a link (`ip neigh replace … nud
/// permanent`).
pub(crate) async fn set_permanent_neighbour(
    h: &Handle,
    index: u32,
    addr: Ipv4Addr,
    mac: [u8; 6],
) -> Result<()> {
    h.neighbours()
        .add(index, IpAddr::V4(addr))
        .link_layer_address(&mac)
        .replace()
        .execute()
        .await
        .map_err(|e| NetError::netlink(format!("neighbour {addr} on link {index}"), e))
}

/// Deletes a link by index.
pub(crate) async fn del_link(h: &Handle, index: u32) -> Result<()> {
    match h.link().del(index).execute().await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e = NetError::netlink(format!("delete link {index}"), e);
            if e.is_netlink_errno(libc::ENODEV) {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Creates a veth pair: `local` in the current namespace, `peer` directly in the namespace
/// `peer_ns_fd` refers to. Both ends get `mtu`; both start down.
pub(crate) async fn add_veth(
    h: &Handle,
    local: &str,
    peer: &str,
    peer_ns_fd: RawFd,
    mtu: u32,
) -> Result<()> {
    let peer_msg = LinkUnspec::new_with_name(peer)
        .mtu(mtu)
        .setns_by_fd(peer_ns_fd)
        .build();
    let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(local)
        .mtu(mtu)
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
        .build();
    h.link()
        .add(msg)
        .execute()
        .await
        .map_err(|e| NetError::netlink(format!("create veth {local}/{peer}"), e))
}

/// Adds the default route via `gw` on link `index`.
pub(crate) async fn add_default_route(h: &Handle, index: u32, gw: Ipv4Addr) -> Result<()> {
    let msg = RouteMessageBuilder::<Ipv4Addr>::new()
        .gateway(gw)
        .output_interface(index)
        .build();
    h.route()
        .add(msg)
        .execute()
        .await
        .map_err(|e| NetError::netlink(format!("default route via {gw}"), e))
}

/// `(ifindex, address, prefix)` of every IPv4 address.
pub(crate) async fn ipv4_addrs(h: &Handle) -> Result<Vec<(u32, Ipv4Addr, u8)>> {
    let msgs: Vec<_> = h
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| NetError::netlink("dump addresses", e))?;
    let mut out = Vec::new();
    for m in msgs {
        let mut local = None;
        let mut address = None;
        for a in &m.attributes {
            match a {
                AddressAttribute::Local(IpAddr::V4(v)) => local = Some(*v),
                AddressAttribute::Address(IpAddr::V4(v)) => address = Some(*v),
                _ => {}
            }
        }
        if let Some(a) = local.or(address) {
            out.push((m.header.index, a, m.header.prefix_len));
        }
    }
    Ok(out)
}

/// Output ifindex of the main table's IPv4 default route (first one found).
pub(crate) async fn default_route_oif(h: &Handle) -> Result<Option<u32>> {
    let msgs: Vec<_> = h
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute()
        .try_collect()
        .await
        .map_err(|e| NetError::netlink("dump routes", e))?;
    for m in msgs {
        if m.header.destination_prefix_length != 0 {
            continue;
        }
        let table = m
            .attributes
            .iter()
            .find_map(|a| match a {
                RouteAttribute::Table(t) => Some(*t),
                _ => None,
            })
            .unwrap_or(u32::from(m.header.table));
        if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
            continue;
        }
        if let Some(oif) = m.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        }) {
            return Ok(Some(oif));
        }
    }
    Ok(None)
}
