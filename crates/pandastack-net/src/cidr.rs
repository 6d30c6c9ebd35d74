//! A small IPv4 CIDR type (network address + prefix length), normalised on construction.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::NetError;

/// An IPv4 network in CIDR notation. The address is always the network address (host bits
/// cleared), so `10.1.2.3/8` parses to `10.0.0.0/8`. A bare address parses as a `/32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Ipv4Cidr {
    addr: Ipv4Addr,
    prefix: u8,
}

const fn mask_of(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix as u32)
    }
}

impl Ipv4Cidr {
    /// `a.b.c.d/prefix`, normalised. Panics (at compile time when used in a `const`) if
    /// `prefix > 32`.
    pub const fn from_octets(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        assert!(prefix <= 32, "prefix length above 32");
        let raw = u32::from_be_bytes([a, b, c, d]) & mask_of(prefix);
        let o = raw.to_be_bytes();
        Self {
            addr: Ipv4Addr::new(o[0], o[1], o[2], o[3]),
            prefix,
        }
    }

    /// `addr/prefix`, normalised to the network address.
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Result<Self, NetError> {
        if prefix > 32 {
            return Err(NetError::InvalidCidr(format!("{addr}/{prefix}")));
        }
        Ok(Self {
            addr: Ipv4Addr::from(u32::from(addr) & mask_of(prefix)),
            prefix,
        })
    }

    /// A single host (`/32`).
    pub fn host(addr: Ipv4Addr) -> Self {
        Self { addr, prefix: 32 }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.addr
    }

    /// The prefix length (0..=32).
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// The netmask as a `u32`.
    pub fn mask(&self) -> u32 {
        mask_of(self.prefix)
    }

    /// Number of addresses in the network.
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr)
    }

    /// Whether `other` lies entirely inside this network.
    pub fn contains_cidr(&self, other: &Ipv4Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        self.contains_cidr(other) || other.contains_cidr(self)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = NetError;

    fn from_str(s: &str) -> Result<Self, NetError> {
        let bad = || NetError::InvalidCidr(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().map_err(|_| bad())?),
            None => (s, 32),
        };
        let addr: Ipv4Addr = addr.trim().parse().map_err(|_| bad())?;
        Self::new(addr, prefix).map_err(|_| bad())
    }
}

impl TryFrom<String> for Ipv4Cidr {
    type Error = NetError;
    fn try_from(s: String) -> Result<Self, NetError> {
        s.parse()
    }
}

impl From<Ipv4Cidr> for String {
    fn from(c: Ipv4Cidr) -> String {
        c.to_string()
    }
}

/// Sorts, de-duplicates and drops networks contained in another entry of the list (nft rejects
/// overlapping intervals in some versions; the result is also easier to read).
pub(crate) fn normalize(list: &[Ipv4Cidr]) -> Vec<Ipv4Cidr> {
    let mut v: Vec<Ipv4Cidr> = list.to_vec();
    v.sort_by_key(|c| (c.prefix, u32::from(c.addr)));
    let mut out: Vec<Ipv4Cidr> = Vec::with_capacity(v.len());
    for c in v {
        if !out.iter().any(|k| k.contains_cidr(&c)) {
            out.push(c);
        }
    }
    out.sort_by_key(|c| u32::from(c.addr));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_normalise() {
        let c: Ipv4Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert_eq!("1.2.3.4".parse::<Ipv4Cidr>().unwrap().prefix_len(), 32);
        assert!("1.2.3.4/33".parse::<Ipv4Cidr>().is_err());
        assert!("x/3".parse::<Ipv4Cidr>().is_err());
        assert!(c.contains(Ipv4Addr::new(10, 255, 0, 1)));
        assert!(!c.contains(Ipv4Addr::new(11, 0, 0, 1)));
        assert_eq!(Ipv4Cidr::from_octets(0, 0, 0, 0, 0).size(), 1 << 32);
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(j, "\"10.0.0.0/8\"");
        assert_eq!(serde_json::from_str::<Ipv4Cidr>(&j).unwrap(), c);
    }

    #[test]
    fn normalize_drops_contained() {
        let l: Vec<Ipv4Cidr> = ["10.1.0.0/16", "10.0.0.0/8", "1.1.1.1", "10.0.0.0/8"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let n = normalize(&l);
        assert_eq!(
            n.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            ["1.1.1.1/32", "10.0.0.0/8"]
        );
    }
}
