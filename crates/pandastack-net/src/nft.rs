//! nftables rulesets, generated as text and loaded with one `nft -f -` per table.
//!
//! Why the `nft` binary and a generated script rather than a Rust nftables library: `nft -f`
//! is the interface the nftables project keeps stable; a script is applied as *one kernel
//! transaction* (all-or-nothing, so a slot never runs with half a policy); the generated text
//! is exactly what an operator sees in `ip netns exec ps-N nft list ruleset`, which makes the
//! policy reviewable; and it supports every expression we need (inet-family NAT, TCP option
//! mangling, anonymous interval sets). `rustables` covers only part of the expression set and
//! has few users; the `nftables` crate drives the same `nft` binary through JSON, adding a
//! schema layer without removing the process spawn. The cost is one short-lived `nft`
//! process per application (a few milliseconds), which happens when a slot is built or its
//! policy changes — never on a warm acquire.
//!
//! Each script replaces its table atomically: `add table` (no-op if present) + `delete table`
//! + the full definition, in one transaction.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::cidr::{normalize, Ipv4Cidr};
use crate::config::EgressPolicy;
use crate::error::{NetError, Result};
use crate::{
    ALWAYS_BLOCKED, GATEWAY_IP, GUEST_CIDR, GUEST_IP, GUEST_MTU, NS_UPLINK, PRIVATE_RANGES,
    TAP_NAME,
};

/// Inputs of one slot's ruleset.
pub(crate) struct SlotRules<'a> {
    pub table: &'a str,
    /// The pool's whole slot range (other slots are never reachable).
    pub base: Ipv4Cidr,
    /// The slot's address on `eth0` (SNAT source).
    pub ns_addr: Ipv4Addr,
    /// The host end of the slot's veth.
    pub host_addr: Ipv4Addr,
    /// All IPv4 addresses of the host.
    pub host_addrs: &'a [Ipv4Addr],
    /// Resolvers; the first is the DNAT target of [`crate::GUEST_DNS`].
    pub dns: &'a [Ipv4Addr],
    /// Uplink MTU (MSS clamping when below the guest MTU).
    pub uplink_mtu: u32,
    pub policy: &'a EgressPolicy,
}

fn set_of(list: &[Ipv4Cidr]) -> String {
    let items: Vec<String> = normalize(list)
        .iter()
        .map(|c| {
            if c.prefix_len() == 32 {
                c.network().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    format!("{{ {} }}", items.join(", "))
}

fn addr_set(list: &[Ipv4Addr]) -> String {
    let v: Vec<Ipv4Cidr> = list.iter().map(|a| Ipv4Cidr::host(*a)).collect();
    set_of(&v)
}

const REJECT: &str = "reject with icmpx type admin-prohibited";

/// The ruleset of one slot namespace (see [`EgressPolicy`] for the order of the egress rules).
pub(crate) fn slot_script(r: &SlotRules<'_>) -> String {
    let t = r.table;
    let p = r.policy;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "add table inet {t}\ndelete table inet {t}\ntable inet {t} {{"
    );

    // DNS for the guest: GUEST_DNS (= the gateway) is forwarded to the first resolver.
    s.push_str(
        "\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n",
    );
    if let Some(d) = r.dns.first() {
        let _ = writeln!(
            s,
            "\t\tiifname \"{TAP_NAME}\" ip daddr {GATEWAY_IP} meta l4proto {{ tcp, udp }} th dport 53 dnat ip to {d}"
        );
    }
    s.push_str("\t}\n");

    let _ = writeln!(
        s,
        "\tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\toifname \"{NS_UPLINK}\" ip saddr {GUEST_IP} snat ip to {}\n\t}}",
        r.ns_addr
    );

    // Nothing in the namespace itself is reachable, except ping of the gateway by the guest.
    let _ = writeln!(
        s,
        "\tchain input {{\n\t\ttype filter hook input priority filter; policy drop;\n\
         \t\tiifname \"lo\" accept\n\
         \t\tct state established,related accept\n\
         \t\tiifname \"{TAP_NAME}\" ip saddr {GUEST_IP} ip daddr {GATEWAY_IP} icmp type echo-request accept\n\t}}"
    );

    s.push_str("\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n");
    s.push_str("\t\tct state invalid drop\n");
    if r.uplink_mtu < GUEST_MTU {
        let mss = r.uplink_mtu - 40;
        let _ = writeln!(
            s,
            "\t\ttcp flags syn tcp option maxseg size > {mss} tcp option maxseg size set {mss}"
        );
    }
    let _ = writeln!(
        s,
        "\t\tiifname \"{TAP_NAME}\" oifname \"{NS_UPLINK}\" jump egress\n\
         \t\tiifname \"{NS_UPLINK}\" oifname \"{TAP_NAME}\" ct state established,related accept\n\t}}"
    );

    s.push_str("\tchain egress {\n");
    s.push_str("\t\tmeta nfproto != ipv4 drop\n");
    let _ = writeln!(s, "\t\tip saddr != {GUEST_IP} drop");
    if !r.dns.is_empty() {
        let _ = writeln!(
            s,
            "\t\tip daddr {} meta l4proto {{ tcp, udp }} th dport 53 accept",
            addr_set(r.dns)
        );
    }
    let mut host: Vec<Ipv4Addr> = r.host_addrs.to_vec();
    host.extend([r.host_addr, r.ns_addr, GATEWAY_IP]);
    let _ = writeln!(s, "\t\tip daddr {} drop", addr_set(&host));
    if !p.deny.is_empty() {
        let _ = writeln!(s, "\t\tip daddr {} {REJECT}", set_of(&p.deny));
    }
    if !p.allow.is_empty() {
        let _ = writeln!(s, "\t\tip daddr {} accept", set_of(&p.allow));
    }
    let _ = writeln!(s, "\t\tmeta l4proto {{ tcp, udp }} th dport 53 {REJECT}");
    let mut always: Vec<Ipv4Cidr> = ALWAYS_BLOCKED.to_vec();
    always.extend([r.base, GUEST_CIDR]);
    let _ = writeln!(s, "\t\tip daddr {} {REJECT}", set_of(&always));
    if p.block_private {
        let _ = writeln!(s, "\t\tip daddr {} {REJECT}", set_of(PRIVATE_RANGES));
    }
    if p.allow_internet {
        s.push_str("\t\taccept\n");
    } else {
        let _ = writeln!(s, "\t\t{REJECT}");
    }
    s.push_str("\t}\n}\n");
    s
}

/// The host-side table: masquerade of the slot range, forwarding of slot traffic, and the INPUT
/// guard (slots cannot open connections to any host address, except DNS to the resolvers).
pub(crate) fn host_script(
    table: &str,
    veth_prefix: &str,
    base: Ipv4Cidr,
    dns: &[Ipv4Addr],
) -> String {
    let v = format!("\"{veth_prefix}*\"");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "add table inet {table}\ndelete table inet {table}\ntable inet {table} {{"
    );
    let _ = writeln!(
        s,
        "\tchain input {{\n\t\ttype filter hook input priority filter - 10; policy accept;\n\
         \t\tiifname {v} ct state established,related accept"
    );
    if !dns.is_empty() {
        let _ = writeln!(
            s,
            "\t\tiifname {v} ip saddr {base} ip daddr {} meta l4proto {{ tcp, udp }} th dport 53 accept",
            addr_set(dns)
        );
    }
    let _ = writeln!(s, "\t\tiifname {v} drop\n\t}}");
    let _ = writeln!(
        s,
        "\tchain forward {{\n\t\ttype filter hook forward priority filter - 10; policy accept;\n\
         \t\tiifname {v} oifname {v} drop\n\
         \t\tiifname {v} ip saddr {base} accept\n\
         \t\tiifname {v} drop\n\
         \t\toifname {v} ct state established,related accept\n\
         \t\toifname {v} drop\n\t}}"
    );
    let _ = writeln!(
        s,
        "\tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip saddr {base} oifname != {v} masquerade\n\t}}"
    );
    s.push_str("}\n");
    s
}

/// Removes a table if it exists (one transaction).
pub(crate) fn delete_script(table: &str) -> String {
    format!("add table inet {table}\ndelete table inet {table}\n")
}

/// Loads `script` with `nft -f -` in the calling thread's network namespace (the child process
/// inherits the namespace of the thread that spawns it).
pub(crate) fn apply(nft: &Path, script: &str, context: &str) -> Result<()> {
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NetError::Nft {
            context: context.to_string(),
            stderr: format!("cannot run {}: {e}", nft.display()),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| NetError::io("write nft script", e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NetError::io("wait for nft", e))?;
    if !out.status.success() {
        return Err(NetError::Nft {
            context: context.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// FNV-1a 64, a stable fingerprint of a rendered script (recorded per slot, compared before
/// re-applying).
pub(crate) fn fingerprint(script: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in script.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(policy: &EgressPolicy) -> String {
        slot_script(&SlotRules {
            table: "pandastack",
            base: "10.200.0.0/16".parse().unwrap(),
            ns_addr: Ipv4Addr::new(10, 200, 0, 6),
            host_addr: Ipv4Addr::new(10, 200, 0, 5),
            host_addrs: &[Ipv4Addr::new(192, 0, 2, 2)],
            dns: &[Ipv4Addr::new(10, 255, 255, 53)],
            uplink_mtu: 1400,
            policy,
        })
    }

    #[test]
    fn slot_script_orders_rules() {
        let s = rules(&EgressPolicy::default());
        let pos = |needle: &str| {
            s.find(needle)
                .unwrap_or_else(|| panic!("{needle} missing in\n{s}"))
        };
        assert!(s.starts_with("add table inet pandastack\ndelete table inet pandastack\n"));
        assert!(s.contains("dnat ip to 10.255.255.53"));
        assert!(s.contains("snat ip to 10.200.0.6"));
        assert!(s.contains("maxseg size set 1360"));
        let dns = pos("ip daddr { 10.255.255.53 } meta l4proto { tcp, udp } th dport 53 accept");
        let host = pos("ip daddr { 10.88.0.1, 10.200.0.5, 10.200.0.6, 192.0.2.2 } drop");
        let dns_drop = pos("th dport 53 reject");
        let private = pos("172.16.0.0/12");
        assert!(dns < host && host < dns_drop && dns_drop < private);
        assert!(s.contains("169.254.0.0/16"));
        assert!(s.trim_end().ends_with("accept\n\t}\n}") || s.contains("\t\taccept\n\t}\n}"));
    }

    #[test]
    fn policy_variants() {
        let p = EgressPolicy {
            allow_internet: false,
            block_private: false,
            allow: vec!["10.1.0.0/16".parse().unwrap()],
            deny: vec!["203.0.113.0/24".parse().unwrap()],
        };
        let s = rules(&p);
        assert!(!s.contains("172.16.0.0/12"));
        assert!(s.contains("ip daddr { 10.1.0.0/16 } accept"));
        assert!(s.contains("ip daddr { 203.0.113.0/24 } reject"));
        assert!(s.contains("\t\treject with icmpx type admin-prohibited\n\t}\n}"));
        assert_ne!(
            fingerprint(&s),
            fingerprint(&rules(&EgressPolicy::default()))
        );
    }

    #[test]
    fn host_script_shape() {
        let s = host_script("pandastack", "psv", "10.200.0.0/16".parse().unwrap(), &[]);
        assert!(s.contains("ip saddr 10.200.0.0/16 oifname != \"psv*\" masquerade"));
        assert!(s.contains("iifname \"psv*\" drop"));
        assert!(!s.contains("dport 53"));
    }
}
