//! Guest network configuration over rtnetlink: MAC, MTU, one IPv4 address, default route, and
//! `/etc/resolv.conf`. Used by `Agent.ConfigureNetwork`, `Agent.PostRestore` and, at boot, by
//! PID 1 (kernel command line).

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use pandastack_guest_proto::v1;
use rtnetlink::packet_route::link::{LinkAttribute, LinkLayerType};
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};
use tonic::Status;

const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Why the network could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum NetConfigError {
    #[error("invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
    #[error("no ethernet interface")]
    NoInterface,
    #[error("no interface {0:?}")]
    NoSuchInterface(String),
    #[error("open netlink socket")]
    Socket(#[source] std::io::Error),
    #[error("{op}")]
    Netlink {
        op: &'static str,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("write {RESOLV_CONF}")]
    ResolvConf(#[source] std::io::Error),
}

impl From<NetConfigError> for Status {
    fn from(e: NetConfigError) -> Self {
        let msg = error_chain(&e);
        match &e {
            NetConfigError::Invalid { .. } => Status::invalid_argument(msg),
            NetConfigError::NoInterface | NetConfigError::NoSuchInterface(_) => {
                Status::not_found(msg)
            }
            NetConfigError::Netlink {
                source: rtnetlink::Error::NetlinkError(m),
                ..
            } if m.raw_code().abs() == libc::EPERM => Status::permission_denied(msg),
            NetConfigError::Socket(io) | NetConfigError::ResolvConf(io)
                if io.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                Status::permission_denied(msg)
            }
            _ => Status::internal(msg),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A validated [`v1::NetworkConfig`].
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    interface: Option<String>,
    mac: Option<[u8; 6]>,
    mtu: Option<u32>,
    address: Option<(Ipv4Addr, u8)>,
    gateway: Option<Ipv4Addr>,
    dns: Vec<IpAddr>,
}

fn invalid(field: &'static str, value: &str) -> NetConfigError {
    NetConfigError::Invalid {
        field,
        value: value.to_owned(),
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, prefix) = s.split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    (prefix <= 32).then_some((addr.parse().ok()?, prefix))
}

impl Plan {
    fn new(cfg: &v1::NetworkConfig) -> Result<Self, NetConfigError> {
        let interface = match cfg.interface.as_str() {
            "" => None,
            name if name.len() < 16 && !name.contains(['/', '\0', ' ']) => Some(name.to_owned()),
            name => return Err(invalid("interface", name)),
        };
        let mac = match cfg.mac.as_str() {
            "" => None,
            m => Some(parse_mac(m).ok_or_else(|| invalid("mac", m))?),
        };
        let address = match cfg.address_cidr.as_str() {
            "" => None,
            a => Some(parse_cidr(a).ok_or_else(|| invalid("address_cidr", a))?),
        };
        let gateway = match cfg.gateway.as_str() {
            "" => None,
            g => Some(g.parse().map_err(|_| invalid("gateway", g))?),
        };
        let dns = cfg
            .dns
            .iter()
            .map(|d| d.parse().map_err(|_| invalid("dns", d)))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            interface,
            mac,
            mtu: (cfg.mtu > 0).then_some(cfg.mtu),
            address,
            gateway,
            dns,
        })
    }
}

fn resolv_conf(dns: &[IpAddr]) -> String {
    dns.iter().map(|d| format!("nameserver {d}\n")).collect()
}

fn netlink(op: &'static str) -> impl FnOnce(rtnetlink::Error) -> NetConfigError {
    move |source| NetConfigError::Netlink { op, source }
}

/// A netlink connection whose background task ends with it.
struct Netlink {
    handle: Handle,
    task: tokio::task::JoinHandle<()>,
}

impl Netlink {
    fn open() -> Result<Self, NetConfigError> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(NetConfigError::Socket)?;
        Ok(Self {
            handle,
            task: tokio::spawn(conn),
        })
    }

    /// Index of the link named `name`, or of the first Ethernet link (lowest index; tunnel
    /// devices such as `sit0` are not candidates).
    async fn link_index(&self, name: Option<&str>) -> Result<u32, NetConfigError> {
        let links: Vec<_> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(netlink("list links"))?;
        let mut found: Vec<(u32, String, bool)> = links
            .into_iter()
            .filter_map(|l| {
                let ether = l.header.link_layer_type == LinkLayerType::Ether;
                l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some((l.header.index, n.clone(), ether)),
                    _ => None,
                })
            })
            .collect();
        found.sort();
        let index = match name {
            Some(name) => found.into_iter().find(|(_, n, _)| n == name),
            None => found.into_iter().find(|(_, _, ether)| *ether),
        };
        match (index, name) {
            (Some((i, _, _)), _) => Ok(i),
            (None, Some(name)) => Err(NetConfigError::NoSuchInterface(name.to_owned())),
            (None, None) => Err(NetConfigError::NoInterface),
        }
    }

    async fn set(
        &self,
        msg: rtnetlink::packet_route::link::LinkMessage,
        op: &'static str,
    ) -> Result<(), NetConfigError> {
        self.handle
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(netlink(op))
    }

    async fn flush_ipv4(&self, index: u32) -> Result<(), NetConfigError> {
        let addrs: Vec<_> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(netlink("list addresses"))?;
        for a in addrs {
            if a.header.family == AddressFamily::Inet {
                self.handle
                    .address()
                    .del(a)
                    .execute()
                    .await
                    .map_err(netlink("delete address"))?;
            }
        }
        Ok(())
    }
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks `cfg` without applying it.
pub fn check(cfg: &v1::NetworkConfig) -> Result<(), NetConfigError> {
    Plan::new(cfg).map(drop)
}

/// Brings the link `name` up (used for `lo` at boot).
pub async fn link_up(name: &str) -> Result<(), NetConfigError> {
    let nl = Netlink::open()?;
    let index = nl.link_index(Some(name)).await?;
    nl.set(
        LinkUnspec::new_with_index(index).up().build(),
        "set link up",
    )
    .await
}

/// Applies `cfg`: `lo` up; then on the interface: MAC (link down, set, up), MTU, link up,
/// replace IPv4 addresses with `address_cidr`, default route via `gateway`; then resolv.conf.
/// Empty fields leave that part as it is.
pub async fn configure(cfg: &v1::NetworkConfig) -> Result<(), NetConfigError> {
    let plan = Plan::new(cfg)?;
    let nl = Netlink::open()?;
    let lo = nl.link_index(Some("lo")).await?;
    nl.set(LinkUnspec::new_with_index(lo).up().build(), "set lo up")
        .await?;
    let index = nl.link_index(plan.interface.as_deref()).await?;
    if let Some(mac) = plan.mac {
        nl.set(
            LinkUnspec::new_with_index(index).down().build(),
            "set link down",
        )
        .await?;
        nl.set(
            LinkUnspec::new_with_index(index)
                .address(mac.to_vec())
                .build(),
            "set mac address",
        )
        .await?;
    }
    if let Some(mtu) = plan.mtu {
        nl.set(
            LinkUnspec::new_with_index(index).mtu(mtu).build(),
            "set mtu",
        )
        .await?;
    }
    nl.set(
        LinkUnspec::new_with_index(index).up().build(),
        "set link up",
    )
    .await?;
    if let Some((addr, prefix)) = plan.address {
        nl.flush_ipv4(index).await?;
        nl.handle
            .address()
            .add(index, IpAddr::V4(addr), prefix)
            .execute()
            .await
            .map_err(netlink("add address"))?;
    }
    if let Some(gw) = plan.gateway {
        let route = RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(gw)
            .output_interface(index)
            .build();
        nl.handle
            .route()
            .add(route)
            .replace()
            .execute()
            .await
            .map_err(netlink("set default route"))?;
    }
    if !plan.dns.is_empty() {
        let body = resolv_conf(&plan.dns);
        tokio::task::spawn_blocking(move || std::fs::write(RESOLV_CONF, body))
            .await
            .map_err(|e| NetConfigError::ResolvConf(std::io::Error::other(e)))?
            .map_err(NetConfigError::ResolvConf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config() {
        let plan = Plan::new(&v1::NetworkConfig {
            interface: "eth0".into(),
            address_cidr: "10.0.2.15/24".into(),
            gateway: "10.0.2.2".into(),
            dns: vec!["1.1.1.1".into(), "2606:4700::1111".into()],
            mtu: 1400,
            mac: "02:AB:cd:00:00:01".into(),
        })
        .unwrap();
        assert_eq!(
            plan,
            Plan {
                interface: Some("eth0".into()),
                mac: Some([2, 0xab, 0xcd, 0, 0, 1]),
                mtu: Some(1400),
                address: Some((Ipv4Addr::new(10, 0, 2, 15), 24)),
                gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
                dns: vec![
                    "1.1.1.1".parse().unwrap(),
                    "2606:4700::1111".parse().unwrap()
                ],
            }
        );
        assert_eq!(
            resolv_conf(&plan.dns),
            "nameserver 1.1.1.1\nnameserver 2606:4700::1111\n"
        );
    }

    #[test]
    fn empty_fields_change_nothing() {
        let plan = Plan::new(&v1::NetworkConfig::default()).unwrap();
        assert_eq!(
            plan,
            Plan {
                interface: None,
                mac: None,
                mtu: None,
                address: None,
                gateway: None,
                dns: vec![],
            }
        );
    }

    #[test]
    fn rejects_bad_fields() {
        let bad = [
            v1::NetworkConfig {
                address_cidr: "10.0.0.2".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                address_cidr: "10.0.0.2/33".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                address_cidr: "fd00::2/64".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                gateway: "10.0.0.x".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                mac: "02:00:00:00:00".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                mac: "02:00:00:00:00:00:00".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                interface: "../etc".into(),
                ..Default::default()
            },
            v1::NetworkConfig {
                dns: vec!["dns.example".into()],
                ..Default::default()
            },
        ];
        for cfg in bad {
            let err = Plan::new(&cfg).unwrap_err();
            assert!(
                matches!(err, NetConfigError::Invalid { .. }),
                "{cfg:?}: {err}"
            );
            assert_eq!(Status::from(err).code(), tonic::Code::InvalidArgument);
        }
    }
}
