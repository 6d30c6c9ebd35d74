//! The address rules: which destinations count as internal, and the operator's exceptions.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;

/// Why the host will not connect somewhere on a user's behalf.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// `host` is, or resolved to, an internal address.
    #[error(
        "{host} resolves to {addr}, a {class} address: the server does not fetch from \
         loopback, link-local, private, CGNAT or metadata addresses (an operator can allow a \
         host with --allow-internal-fetch)"
    )]
    Internal {
        host: String,
        addr: IpAddr,
        class: &'static str,
    },
    /// The name did not resolve.
    #[error("resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    /// The name resolved to nothing.
    #[error("{host} has no address")]
    NoAddress { host: String },
}

/// An operator's exception: a destination the host may reach though it is internal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// Any address in a network (`10.1.0.0/16`, `fd00::/8`), any port.
    Net(IpNet),
    /// One address, any port or one (`10.1.2.3`, `10.1.2.3:9418`, `[fd00::1]:22`).
    Addr { ip: IpAddr, port: Option<u16> },
    /// A host name as the user wrote it (`git.internal`, `git.internal:8443`): whatever it
    /// resolves to. Matched without case.
    Host { name: String, port: Option<u16> },
}

/// Why an [`Allowed`] could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not an allowed destination: a host name, an IP address, either with :port, or a \
     CIDR such as 10.1.0.0/16"
)]
pub struct BadAllowed(String);

impl FromStr for Allowed {
    type Err = BadAllowed;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || BadAllowed(s.to_owned());
        if s.contains('/') {
            return s.parse().map(Allowed::Net).map_err(|_| bad());
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Allowed::Addr { ip, port: None });
        }
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Allowed::Addr {
                ip: a.ip(),
                port: Some(a.port()),
            });
        }
        let (name, port) = match s.rsplit_once(':') {
            Some((n, p)) => (n, Some(p.parse::<u16>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !name_ok {
            return Err(bad());
        }
        Ok(Allowed::Host {
            name: name.to_ascii_lowercase(),
            port,
        })
    }
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allowed::Net(n) => write!(f, "{n}"),
            Allowed::Addr { ip, port: None } => write!(f, "{ip}"),
            Allowed::Addr { ip, port: Some(p) } => write!(f, "{}", SocketAddr::new(*ip, *p)),
            Allowed::Host { name, port: None } => write!(f, "{name}"),
            Allowed::Host {
                name,
                port: Some(p),
            } => write!(f, "{name}:{p}"),
        }
    }
}

/// The class of an address the host does not reach on a user's behalf, or `None` for a
/// public one. IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses are judged by the
/// IPv4 address they carry.
pub fn internal_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    Some(match o {
        [169, 254, 169, 254] => "metadata",
        [0, ..] => "unspecified (this network)",
        [127, ..] => "loopback",
        [10, ..] | [192, 168, ..] => "private",
        [172, b, ..] if (16..32).contains(&b) => "private",
        [100, b, ..] if (64..128).contains(&b) => "CGNAT (shared address space)",
        [169, 254, ..] => "link-local",
        [192, 0, 0, _] => "IETF protocol assignment",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "documentation",
        [198, b, ..] if b == 18 || b == 19 => "benchmarking",
        [a, ..] if (224..240).contains(&a) => "multicast",
        [a, ..] if a >= 240 => "reserved",
        _ => return None,
    })
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_class(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback",
        // IPv4-compatible (deprecated), NAT64 (64:ff9b::/96): the IPv4 address inside.
        [0, 0, 0, 0, 0, 0, hi, lo] | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => {
            return v4_class(embedded(hi, lo))
        }
        // 6to4 (2002::/16) carries an IPv4 address in its second and third groups.
        [0x2002, hi, lo, ..] => return v4_class(embedded(hi, lo)),
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] => "metadata",
        [a, ..] if a & 0xfe00 == 0xfc00 => "private (unique local)",
        [a, ..] if a & 0xffc0 == 0xfe80 => "link-local",
        [a, ..] if a & 0xffc0 == 0xfec0 => "site-local",
        [a, ..] if a & 0xff00 == 0xff00 => "multicast",
        [0x2001, 0xdb8, ..] => "documentation",
        [0x100, 0, 0, 0, ..] => "discard",
        _ => return None,
    })
}

/// What the host may connect to on a user's behalf: public addresses, and the operator's
/// exceptions.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    allowed: Vec<Allowed>,
}

impl OutboundPolicy {
    /// Public addresses and `allowed`.
    pub fn new(allowed: Vec<Allowed>) -> Self {
        Self { allowed }
    }

    /// The operator's exceptions.
    pub fn allowed(&self) -> &[Allowed] {
        &self.allowed
    }

    /// Whether the operator allowed the host name `host` (as written by the user) on `port`.
    pub fn allows_name(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.');
        self.allowed.iter().any(|a| match a {
            Allowed::Host { name, port: p } => {
                name.eq_ignore_ascii_case(host) && p.is_none_or(|p| p == port)
            }
            _ => false,
        })
    }

    /// Whether `addr` may be reached (for the name `host`, as written by the user).
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<(), Refused> {
        let ip = match addr.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        let Some(class) = internal_class(ip) else {
            return Ok(());
        };
        let excepted = self.allows_name(host, addr.port())
            || self.allowed.iter().any(|a| match a {
                Allowed::Net(n) => n.contains(&ip),
                Allowed::Addr { ip: a, port } => *a == ip && port.is_none_or(|p| p == addr.port()),
                Allowed::Host { .. } => false,
            });
        if excepted {
            Ok(())
        } else {
            Err(Refused::Internal {
                host: host.to_owned(),
                addr: ip,
                class,
            })
        }
    }

    /// `host` (a name or an IP literal, IPv6 with or without brackets) checked without
    /// resolving it: an IP literal by its class, `localhost` and `*.localhost` as loopback.
    /// A name that resolves to an internal address is refused later, by [`Self::resolve`].
    pub fn check_literal(&self, host: &str, port: u16) -> Result<(), Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check(host, SocketAddr::new(ip, port));
        }
        let lower = bare.trim_end_matches('.').to_ascii_lowercase();
        if (lower == "localhost" || lower.ends_with(".localhost"))
            && !self.allows_name(&lower, port)
        {
            return Err(Refused::Internal {
                host: host.to_owned(),
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                class: "loopback",
            });
        }
        Ok(())
    }

    /// Resolves `host` and checks every address it gives: all must be allowed (a name that
    /// answers with an internal address among public ones is refused, not filtered). Connect
    /// to what this returns, never to the name again.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|source| Refused::Resolve {
                    host: host.to_owned(),
                    source,
                })?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(Refused::NoAddress {
                host: host.to_owned(),
            });
        }
        for a in &addrs {
            self.check(host, *a)?;
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<&'static str> {
        internal_class(s.parse().unwrap())
    }

    #[test]
    fn classes() {
        for (ip, c) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.1", "loopback"),
            ("0.0.0.0", "unspecified (this network)"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "CGNAT (shared address space)"),
            ("100.127.255.254", "CGNAT (shared address space)"),
            ("169.254.169.254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.1.1", "private"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("2002:7f00:1::", "loopback"),
            ("fd00:ec2::254", "metadata"),
            ("fd12::1", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
        ] {
            assert_eq!(class(ip), Some(c), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "151.101.1.1",
            "2606:4700::1111",
            "2002:0101:0101::",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    #[test]
    fn exceptions() {
        let p = OutboundPolicy::new(
            [
                "10.1.0.0/16",
                "127.0.0.1:9418",
                "git.internal",
                "Mirror.LAN:8443",
            ]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect(),
        );
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(p.check("10.1.2.3", at("10.1.2.3:22")).is_ok());
        assert!(p.check("10.2.0.1", at("10.2.0.1:22")).is_err());
        assert!(p.check("127.0.0.1", at("127.0.0.1:9418")).is_ok());
        let e = p.check("127.0.0.1", at("127.0.0.1:80")).unwrap_err();
        assert!(e.to_string().contains("a loopback address"), "{e}");
        assert!(p.check("git.internal", at("192.168.0.9:443")).is_ok());
        assert!(p.check("GIT.internal.", at("192.168.0.9:443")).is_ok());
        assert!(p.check("mirror.lan", at("192.168.0.9:8443")).is_ok());
        assert!(p.check("mirror.lan", at("192.168.0.9:443")).is_err());
        assert!(p.check("example.com", at("93.184.215.14:443")).is_ok());
        // Mapped addresses are judged as IPv4.
        assert!(p.check("x", at("[::ffff:127.0.0.1]:80")).is_err());
        assert!(p.check_literal("localhost", 80).is_err());
        assert!(p.check_literal("a.localhost.", 80).is_err());
        assert!(p.check_literal("[::1]", 80).is_err());
        assert!(p.check_literal("127.0.0.1", 9418).is_ok());
        assert!(p.check_literal("example.com", 443).is_ok());
    }

    #[test]
    fn parse_allowed() {
        for (s, shown) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3", "10.1.2.3"),
            ("10.1.2.3:9418", "10.1.2.3:9418"),
            ("[fd00::1]:22", "[fd00::1]:22"),
            ("fd00::1", "fd00::1"),
            ("Git.Internal", "git.internal"),
            ("git.internal:8443", "git.internal:8443"),
        ] {
            assert_eq!(s.parse::<Allowed>().unwrap().to_string(), shown);
        }
        for s in ["", "10.0.0.0/33", "a b", "host:port", "host:99999", "-x/"] {
            assert!(s.parse::<Allowed>().is_err(), "{s}");
        }
    }

    #[tokio::test]
    async fn resolve_checks_every_address() {
        let p = OutboundPolicy::default();
        let e = p.resolve("localhost", 80).await.unwrap_err();
        assert!(matches!(e, Refused::Internal { .. }), "{e}");
        let e = p.resolve("[::1]", 80).await.unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        let ok = OutboundPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert_eq!(
            ok.resolve("127.0.0.1", 80).await.unwrap(),
            vec!["127.0.0.1:80".parse().unwrap()]
        );
    }
}
