//! Integration tests of the network-slot pool. They need root (namespaces, veth, nftables) and
//! are skipped otherwise.
//!
//! Each test uses its own name prefixes, nft table name and slot range, so it can never touch a
//! real pool (`ps-*`, `psv*`, table `pandastack`) on the same host, and a [`Guard`] removes
//! everything with those prefixes when the test ends, even on panic. The tests also compare
//! host-wide counts before and after, so they take a file lock ([`serial`]) to run one at a
//! time under any `--test-threads` and across processes.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_net::{
    run_in_netns, ConntrackFlush, EgressPolicy, Ipv4Cidr, NetConfig, NetError, NetPool, GATEWAY_IP,
    GUEST_DNS, GUEST_IP, TAP_NAME,
};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Taken by every test for its whole run: host-wide before/after counts must not interleave,
/// whether the other test runs in this process or in another (scripts/run-tests.py runs each
/// test in a process of its own). A lock on a file, released when the handle drops.
fn serial() -> std::fs::File {
    let path = std::env::temp_dir().join("pandastack-net-pool-tests.lock");
    let file = std::fs::File::create(&path).expect("lock file");
    // Blocks this test's thread; nothing else of this test runs while it waits.
    file.lock().expect("lock");
    file
}

macro_rules! require_root {
    () => {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let _serial = serial();
    };
}

fn sh(cmd: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh_ok(cmd: &str) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn netns_names() -> Vec<String> {
    sh("ip netns list")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn link_names() -> Vec<String> {
    sh("ip -o link show")
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .collect()
}

fn nft_tables() -> Vec<String> {
    sh("nft list tables").lines().map(str::to_string).collect()
}

#[derive(Debug, PartialEq)]
struct Counts {
    netns: usize,
    links: usize,
    tables: usize,
}

/// Counts of what these tests create: every test namespace starts with `pst`, every test link
/// with `pt` and every test nft table is `pstest_*`. Objects of other pools on the host (a
/// server's slots left by an earlier test binary, say) are not counted: they may come and go
/// while these tests run.
fn counts() -> Counts {
    let ns = netns_names();
    let links = link_names();
    Counts {
        netns: ns.iter().filter(|n| n.starts_with("pst")).count(),
        links: links.iter().filter(|n| n.starts_with("pt")).count(),
        tables: nft_tables()
            .iter()
            .filter(|t| t.contains(" pstest_"))
            .count(),
    }
}

/// Removes everything a test created: namespaces and links with the test's prefixes, extra
/// namespaces/links, and the test's host nft table.
struct Guard {
    ns_prefix: String,
    veth_prefix: String,
    table: String,
    extra_ns: Vec<String>,
    extra_links: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Guard {
    fn new(tag: &str) -> (Guard, NetConfig) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = NetConfig::new(dir.path());
        cfg.ns_prefix = format!("pst{tag}-");
        cfg.veth_prefix = format!("pt{tag}v");
        cfg.nft_table = format!("pstest_{tag}");
        cfg.base = "10.201.0.0/22".parse().unwrap();
        let g = Guard {
            ns_prefix: cfg.ns_prefix.clone(),
            veth_prefix: cfg.veth_prefix.clone(),
            table: cfg.nft_table.clone(),
            extra_ns: Vec::new(),
            extra_links: Vec::new(),
            _dir: dir,
        };
        g.clean();
        (g, cfg)
    }

    /// Links first: deleting a veth end removes the pair at once, while deleting the namespace
    /// of one end frees the pair later, from the kernel's namespace clean-up work.
    fn clean(&self) {
        for l in link_names() {
            if l.starts_with(&self.veth_prefix) || self.extra_links.contains(&l) {
                let _ = sh(&format!("ip link del {l} 2>/dev/null"));
            }
        }
        for n in netns_names() {
            if n.starts_with(&self.ns_prefix) || self.extra_ns.contains(&n) {
                let _ = sh(&format!("ip netns del {n} 2>/dev/null"));
            }
        }
        let _ = sh(&format!("nft delete table inet {} 2>/dev/null", self.table));
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.clean();
    }
}

/// The counts once they equal `before`, or the last ones after 10 s: a namespace outlives
/// `ip netns del` while anything still holds it (a socket a test's server thread is closing),
/// and the kernel frees it and its links from a work queue, later on a loaded host. A leak never
/// settles, so it still fails.
fn settled_counts(before: &Counts) -> Counts {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = counts();
        if now == *before || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ours(names: &[String], prefix: &str) -> usize {
    names.iter().filter(|n| n.starts_with(prefix)).count()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test]
async fn pool_builds_slots_and_reuses_indices() {
    require_root!();
    let before = counts();
    let (g, cfg) = Guard::new("a");
    let pool = NetPool::open(cfg.clone()).await.unwrap();
    assert_eq!(pool.ensure(3).await.unwrap(), 3);
    assert_eq!(pool.ensure(3).await.unwrap(), 0, "ensure is idempotent");
    let st = pool.stats();
    assert_eq!((st.free, st.in_use, st.capacity), (3, 0, 256));
    assert_eq!(ours(&netns_names(), &g.ns_prefix), 3);
    assert_eq!(ours(&link_names(), &g.veth_prefix), 3);
    assert!(nft_tables().contains(&format!("table inet {}", g.table)));

    let s = pool.acquire().await.unwrap();
    assert_eq!(s.index, 0);
    assert_eq!(s.netns_path, Path::new("/run/netns").join("psta-0"));
    assert_eq!(
        (s.guest_ip, s.gateway, s.dns),
        (GUEST_IP, GATEWAY_IP, GUEST_DNS)
    );
    assert_eq!(s.host_addr, Ipv4Addr::new(10, 201, 0, 1));
    assert_eq!(s.external_addr, Ipv4Addr::new(10, 201, 0, 2));
    assert_eq!(s.guest_mac_string(), "02:50:53:00:00:02");

    // What the namespace looks like.
    let ns = &s.netns_name;
    let links = sh(&format!("ip -n {ns} -o link show"));
    assert!(
        links.contains("tap0:") && links.contains("eth0@"),
        "{links}"
    );
    assert!(
        links.contains("02:50:53:00:00:01"),
        "gateway MAC on the TAP: {links}"
    );
    let addrs = sh(&format!("ip -n {ns} -o addr show"));
    assert!(
        addrs.contains("10.88.0.1/30") && addrs.contains("10.201.0.2/30"),
        "{addrs}"
    );
    assert!(
        !addrs.contains("inet6"),
        "IPv6 disabled in the slot: {addrs}"
    );
    let neigh = sh(&format!("ip -n {ns} neigh show 10.88.0.2"));
    assert!(
        neigh.contains("lladdr 02:50:53:00:00:02") && neigh.contains("PERMANENT"),
        "the guest's address needs no ARP: {neigh}"
    );
    let routes = sh(&format!("ip -n {ns} route show default"));
    assert!(routes.contains("via 10.201.0.1 dev eth0"), "{routes}");
    let rules = sh(&format!(
        "ip netns exec {ns} nft list table inet {}",
        g.table
    ));
    assert!(rules.contains("snat ip to 10.201.0.2"), "{rules}");
    let fwd = s
        .run_in_netns(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward"))
        .unwrap()
        .unwrap();
    assert_eq!(fwd.trim(), "1");
    let host = sh(&format!("ip -o addr show dev {}", s.host_veth));
    assert!(
        host.contains("10.201.0.1/30") && !host.contains("inet6"),
        "{host}"
    );
    assert!(!sh(&format!("ip -o link show {}", s.host_veth)).contains("state DOWN"));

    let idx = s.index;
    pool.release(s).await.unwrap();
    let again = pool.acquire().await.unwrap();
    assert_eq!(again.index, idx, "a released slot is handed out again");
    let second = pool.acquire().await.unwrap();
    assert_ne!(second.index, idx);
    // Double release is refused.
    let copy = second.clone();
    pool.release(second).await.unwrap();
    assert!(matches!(
        pool.release(copy).await,
        Err(NetError::NotInUse(_))
    ));
    pool.release(again).await.unwrap();

    pool.destroy_all().await.unwrap();
    assert_eq!(ours(&netns_names(), &g.ns_prefix), 0);
    assert_eq!(ours(&link_names(), &g.veth_prefix), 0);
    drop(pool);
    drop(g);
    assert_eq!(settled_counts(&before), before);
}

#[tokio::test]
async fn no_leaks_after_200_cycles_and_timings() {
    require_root!();
    let before = counts();
    let (g, cfg) = Guard::new("b");
    let pool = NetPool::open(cfg).await.unwrap();

    // Cold: building one slot.
    let mut builds = Vec::new();
    for _ in 0..5 {
        let n = pool.stats().free + 1;
        let t = Instant::now();
        assert_eq!(pool.ensure(n).await.unwrap(), 1);
        builds.push(t.elapsed());
    }
    let during = counts();
    assert_eq!(during.netns, before.netns + 5);
    assert_eq!(during.links, before.links + 5);
    assert_eq!(during.tables, before.tables + 1);

    let mut acq = Vec::new();
    let mut rel = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let s = pool.acquire().await.unwrap();
        acq.push(t.elapsed());
        let t = Instant::now();
        pool.release(s).await.unwrap();
        rel.push(t.elapsed());
    }
    assert_eq!(
        counts(),
        during,
        "200 acquire/release cycles created nothing"
    );
    assert_eq!(pool.stats().free, 5);

    // Acquire from an empty pool builds synchronously.
    let held: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(pool.acquire().await.unwrap());
        }
        v
    };
    let t = Instant::now();
    let cold = pool.acquire().await.unwrap();
    let cold_acquire = t.elapsed();
    assert_eq!(cold.index, 5);
    for s in held {
        pool.release(s).await.unwrap();
    }
    pool.release(cold).await.unwrap();

    let t = Instant::now();
    pool.destroy_all().await.unwrap();
    let destroy = t.elapsed();
    drop(pool);
    drop(g);
    let after = settled_counts(&before);
    assert_eq!(after, before, "nothing leaked");

    let stat = |v: &mut Vec<Duration>| {
        v.sort();
        let p50 = v[v.len() / 2];
        let p99 = v[(v.len() * 99 / 100).min(v.len() - 1)];
        let mean = v.iter().sum::<Duration>() / v.len() as u32;
        format!(
            "p50 {:.3} ms, p99 {:.3} ms, mean {:.3} ms (n={})",
            ms(p50),
            ms(p99),
            ms(mean),
            v.len()
        )
    };
    eprintln!("TIMING build one slot (ensure): {}", stat(&mut builds));
    eprintln!("TIMING acquire (warm pool): {}", stat(&mut acq));
    eprintln!("TIMING release: {}", stat(&mut rel));
    eprintln!(
        "TIMING acquire from empty pool (builds): {:.3} ms",
        ms(cold_acquire)
    );
    eprintln!("TIMING destroy_all of 6 slots: {:.3} ms", ms(destroy));
}

#[tokio::test]
async fn reconcile_and_reopen() {
    require_root!();
    let before = counts();
    let (mut g, cfg) = Guard::new("c");
    let pool = NetPool::open(cfg.clone()).await.unwrap();
    pool.ensure(3).await.unwrap();
    let a = pool.acquire().await.unwrap();
    let b = pool.acquire().await.unwrap();

    // Leftovers with our prefixes that no slot owns, plus a name that only looks similar.
    g.extra_ns.push("pstc-foo".into());
    g.extra_links.push("ptcx78".into());
    sh_ok("ip netns add pstc-77 && ip netns add pstc-foo");
    sh_ok("ip link add ptcv78 type veth peer name ptcx78");
    let rep = pool.reconcile(&[a.index]).await.unwrap();
    assert_eq!(rep.released, vec![b.index]);
    assert!(rep.claimed.is_empty() && rep.unknown.is_empty() && rep.busy.is_empty());
    assert!(
        rep.removed_orphans.iter().any(|r| r.contains("pstc-77")),
        "{rep:?}"
    );
    assert!(
        rep.removed_orphans.iter().any(|r| r.contains("ptcv78")),
        "{rep:?}"
    );
    let names = netns_names();
    assert!(!names.contains(&"pstc-77".to_string()));
    assert!(
        names.contains(&"pstc-foo".to_string()),
        "non-matching name untouched"
    );
    assert!(!link_names().contains(&"ptcv78".to_string()));
    let st = pool.stats();
    assert_eq!((st.free, st.in_use), (2, 1));

    // Claiming: the caller says slot `free0` is in use (e.g. found a running VM on it).
    let free0 = 2;
    let rep = pool.reconcile(&[a.index, free0, 99]).await.unwrap();
    assert_eq!(rep.claimed, vec![free0]);
    assert_eq!(rep.unknown, vec![99]);
    assert!(pool.slot(free0).is_some());
    pool.release_index(free0).await.unwrap();

    // A second pool on the same state directory is refused.
    assert!(matches!(
        NetPool::open(cfg.clone()).await,
        Err(NetError::Locked(_))
    ));

    // Restart: break one free slot, leave an orphan, reopen.
    drop(pool);
    let broken = b.index; // free after the reconcile above
    sh_ok(&format!("ip link del {}", b.host_veth));
    sh_ok("ip netns add pstc-50");
    let pool = NetPool::open(cfg.clone()).await.unwrap();
    let r = pool.open_report().clone();
    assert_eq!(r.adopted_in_use, vec![a.index], "{r:?}");
    assert_eq!(r.adopted_free, vec![free0], "{r:?}");
    assert!(
        r.removed
            .iter()
            .any(|m| m.starts_with(&format!("slot {broken}:"))),
        "{r:?}"
    );
    assert!(r.removed.iter().any(|m| m.contains("pstc-50")), "{r:?}");
    assert_eq!(
        pool.slot(a.index).as_ref(),
        Some(&a),
        "in-use slot survives a restart"
    );
    assert!(!netns_names().contains(&b.netns_name));
    // The adopted in-use slot can be released and reused.
    pool.release(a).await.unwrap();
    assert_eq!(pool.stats().free, 2);

    pool.destroy_all().await.unwrap();
    drop(pool);
    sh_ok("ip netns del pstc-foo");
    drop(g);
    assert_eq!(settled_counts(&before), before);
}

#[tokio::test]
async fn tap_attach_blocks_release_and_owner_may_attach() {
    require_root!();
    let (g, mut cfg) = Guard::new("d");
    cfg.tap_owner = Some(65534);
    cfg.tap_group = Some(65534);
    let pool = NetPool::open(cfg).await.unwrap();
    let s = pool.acquire().await.unwrap();

    let fd = s.open_tap(true).unwrap();
    let carrier = sh(&format!("ip -n {} -o link show {TAP_NAME}", s.netns_name));
    assert!(
        !carrier.contains("NO-CARRIER"),
        "attached TAP has carrier: {carrier}"
    );
    let copy = s.clone();
    match pool.release(copy).await {
        Err(NetError::SlotBusy(i)) => assert_eq!(i, s.index),
        other => panic!("release with an attached TAP: {other:?}"),
    }
    drop(fd);

    // TUNSETOWNER: a process whose euid is the owner may attach to the TAP by name without
    // CAP_NET_ADMIN; another uid may not. (The opener must be able to open /dev/net/tun, which
    // is 0600 on this host, so the probe opens it as root inside the namespace and then drops
    // to the uid before TUNSETIFF; the kernel's ownership check uses the caller's credentials
    // at TUNSETIFF time.)
    let attach = |uid: u32| {
        let py = format!(
            "import fcntl,os,struct\n\
             fd=os.open('/dev/net/tun',os.O_RDWR)\n\
             os.setgroups([]); os.setresgid({uid},{uid},{uid}); os.setresuid({uid},{uid},{uid})\n\
             fcntl.ioctl(fd,0x400454ca,struct.pack('16sH22x',b'tap0',0x0002|0x1000))\n\
             print('attached',os.geteuid())"
        );
        s.run_in_netns(|| Command::new("python3").args(["-c", &py]).output().unwrap())
            .unwrap()
    };
    let ok = attach(65534);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "attached 65534");
    let denied = attach(65533);
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Operation not permitted"));

    // run_in_netns composes with Command::uid: the child is unprivileged *and* in the slot
    // namespace (/proc/net/dev lists the slot's devices).
    let out = s
        .run_in_netns(|| {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .args(["-c", "id -u; cat /proc/net/dev"])
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap()
        })
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.starts_with("65534\n") && out.contains("tap0:"), "{out}");

    // The pre_exec hook puts a child in the namespace.
    let mut cmd = Command::new("ip");
    cmd.args(["-o", "addr", "show", "dev", "eth0"]);
    let hook = s.enter_hook().unwrap();
    // SAFETY: the hook only calls setns(2) on an fd opened before the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(hook);
    }
    let out = String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
    assert!(out.contains(&s.external_addr.to_string()), "{out}");

    pool.release(s).await.unwrap();
    pool.destroy_all().await.unwrap();
    drop(g);
}

// ---------------------------------------------------------------------------------------------
// Egress policy
// ---------------------------------------------------------------------------------------------

const INET_NS: &str = "pstinet";
const GUEST_NS: &str = "pstguest";
const INET_LINK: &str = "ptinet0";
const INET_ADDR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const INET_HOST_SIDE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
const RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 53);
const PRIV10: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const PRIV192: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);
const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
const PORT: u16 = 18080;
const HOST_PORT: u16 = 18081;

fn ns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

/// A TCP server that answers every connection with the peer address it saw.
fn tcp_server(l: TcpListener, stop: Arc<AtomicBool>, tag: &'static str) {
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut c, peer)) => {
                    let _ = writeln!(c, "{tag} {peer}");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
}

/// A UDP server that answers every datagram with `tag`.
fn udp_server(s: UdpSocket, stop: Arc<AtomicBool>, tag: &'static str) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((_, peer)) = s.recv_from(&mut buf) {
                let _ = s.send_to(tag.as_bytes(), peer);
            }
        }
    });
}

/// TCP connect + read from inside the namespace at `ns`: `Ok(answer)` or `Err(reason)`.
fn tcp_probe(ns: &Path, ip: Ipv4Addr, port: u16) -> Result<String, String> {
    run_in_netns(ns, || {
        let addr = SocketAddr::from((ip, port));
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_millis(700))
            .map_err(|e| e.to_string())?;
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).map_err(|e| e.to_string())?;
        Ok(s.trim().to_string())
    })
    .unwrap()
}

fn udp_probe(ns: &Path, ip: Ipv4Addr, port: u16) -> Result<String, String> {
    run_in_netns(ns, || {
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_millis(700)))
            .unwrap();
        s.send_to(b"q", (ip, port)).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let (n, _) = s.recv_from(&mut buf).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
    .unwrap()
}

/// At most `n` of `v`, evenly spaced, first and last included.
fn spread(v: &[Ipv4Addr], n: usize) -> Vec<Ipv4Addr> {
    if v.len() <= n {
        return v.to_vec();
    }
    (0..n).map(|i| v[i * (v.len() - 1) / (n - 1)]).collect()
}

#[tokio::test]
async fn egress_policy_from_a_stand_in_guest() {
    require_root!();
    let before = counts();
    let (mut g, mut cfg) = Guard::new("e");
    g.extra_ns = vec![INET_NS.into(), GUEST_NS.into()];
    g.extra_links = vec![INET_LINK.into()];
    g.clean();

    // A simulated internet: namespace `pstinet` behind veth `ptinet0`, routed by the host, with
    // a public-looking address, a resolver, and addresses in private/metadata ranges that the
    // host routes to it (so blocking them proves the slot's policy, not the host guard).
    sh_ok(&format!(
        "set -e
         ip netns add {INET_NS}
         ip link add {INET_LINK} type veth peer name eth0 netns {INET_NS}
         ip addr add {INET_HOST_SIDE}/24 dev {INET_LINK}
         ip link set {INET_LINK} up
         ip -n {INET_NS} link set lo up
         for a in {INET_ADDR}/24 {RESOLVER}/32 {PRIV10}/32 {PRIV192}/32 {METADATA}/32; do
           ip -n {INET_NS} addr add $a dev eth0
         done
         ip -n {INET_NS} link set eth0 up
         ip -n {INET_NS} route add default via {INET_HOST_SIDE}
         for a in {PRIV10} {PRIV192} {METADATA}; do ip route add $a/32 via {INET_ADDR}; done"
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let inet = ns_path(INET_NS);
    let l = run_in_netns(&inet, || TcpListener::bind(("0.0.0.0", PORT)))
        .unwrap()
        .unwrap();
    tcp_server(l, stop.clone(), "inet");
    let u = run_in_netns(&inet, || UdpSocket::bind((RESOLVER, 53)))
        .unwrap()
        .unwrap();
    udp_server(u, stop.clone(), "resolver");
    let u = run_in_netns(&inet, || UdpSocket::bind((INET_ADDR, 53)))
        .unwrap()
        .unwrap();
    udp_server(u, stop.clone(), "other-dns");
    // A service on the host itself (all host addresses).
    let hl = TcpListener::bind(("0.0.0.0", HOST_PORT)).unwrap();
    tcp_server(hl, stop.clone(), "host");

    cfg.dns_servers = Some(vec![RESOLVER]);
    let pool = NetPool::open(cfg).await.unwrap();
    let slot = pool.acquire().await.unwrap();
    let env = pool.host_env();
    assert!(env.host_addrs.contains(&INET_HOST_SIDE), "{env:?}");

    // The stand-in guest. A real guest is a kernel behind QEMU attached to the slot's TAP
    // `tap0`. Here the TAP is replaced by a veth whose slot-side end is also named `tap0` (same
    // name, gateway address 10.88.0.1/30 and gateway MAC), and whose other end is `eth0` in a
    // namespace `pstguest` configured exactly like a guest (10.88.0.2/30, guest MAC, default
    // route and DNS via 10.88.0.1). Packets from the stand-in enter the slot namespace through
    // `tap0` just like frames written by QEMU, so they traverse the same prerouting (DNS DNAT),
    // forward/egress policy and SNAT rules, which all match on the interface name.
    let sns = &slot.netns_name;
    sh_ok(&format!(
        "set -e
         ip netns add {GUEST_NS}
         ip -n {sns} link del tap0
         ip -n {sns} link add tap0 type veth peer name eth0 netns {GUEST_NS}
         ip -n {sns} link set tap0 address 02:50:53:00:00:01
         ip -n {sns} addr add 10.88.0.1/30 dev tap0
         ip -n {sns} link set tap0 up
         ip -n {GUEST_NS} link set lo up
         ip -n {GUEST_NS} link set eth0 address {mac}
         ip -n {GUEST_NS} addr add {GUEST_IP}/30 dev eth0
         ip -n {GUEST_NS} link set eth0 up
         ip -n {GUEST_NS} route add default via {GATEWAY_IP}",
        mac = slot.guest_mac_string()
    ));
    let guest = ns_path(GUEST_NS);

    // Internet: reachable, and the far end sees the host's masqueraded address.
    let t = Instant::now();
    let r = tcp_probe(&guest, INET_ADDR, PORT);
    eprintln!("guest -> internet first connect: {:.1} ms", ms(t.elapsed()));
    let r = r.expect("guest reaches the internet");
    assert!(
        r.starts_with(&format!("inet {INET_HOST_SIDE}:")),
        "masqueraded: {r}"
    );
    // DNS: the guest's resolver (the gateway) is forwarded to the configured resolver; direct
    // queries to the resolver work; port 53 elsewhere is refused.
    assert_eq!(udp_probe(&guest, GUEST_DNS, 53), Ok("resolver".into()));
    assert_eq!(udp_probe(&guest, RESOLVER, 53), Ok("resolver".into()));
    assert!(udp_probe(&guest, INET_ADDR, 53).is_err());

    // Blocked: every host address (including the one facing the "internet" and the veth peer),
    // metadata, private ranges, and the gateway itself.
    // The policy blocks the host's addresses as one set; probing a spread of them (a host with
    // another pool's slots has hundreds, at 0.7 s a probe) tests the set as well as all would.
    let mut blocked = spread(&env.host_addrs, 8);
    blocked.extend([INET_HOST_SIDE, slot.host_addr, METADATA, PRIV10, PRIV192]);
    blocked.sort_unstable();
    blocked.dedup();
    for ip in &blocked {
        let port = if [METADATA, PRIV10, PRIV192].contains(ip) {
            PORT
        } else {
            HOST_PORT
        };
        let t = Instant::now();
        let r = tcp_probe(&guest, *ip, port);
        assert!(r.is_err(), "guest reached {ip}:{port}: {r:?}");
        eprintln!(
            "guest -> {ip}:{port} blocked after {:.1} ms ({})",
            ms(t.elapsed()),
            r.unwrap_err()
        );
    }
    assert!(tcp_probe(&guest, GATEWAY_IP, HOST_PORT).is_err());

    // The host-side INPUT guard on its own: the slot namespace itself (not subject to the
    // slot's forward policy) cannot open connections to the host either, but can reach the
    // internet through it.
    let sp = slot.netns_path.clone();
    assert!(tcp_probe(&sp, slot.host_addr, HOST_PORT).is_err());
    assert!(tcp_probe(&sp, INET_HOST_SIDE, HOST_PORT).is_err());
    assert!(tcp_probe(&sp, INET_ADDR, PORT).is_ok());

    // Policy changes, each one atomic nft transaction on the running slot.
    let p10: Ipv4Cidr = "10.99.0.0/24".parse().unwrap();
    pool.set_policy(
        &slot,
        EgressPolicy {
            allow: vec![p10],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        tcp_probe(&guest, PRIV10, PORT).is_ok(),
        "allow-listed private range"
    );
    assert!(tcp_probe(&guest, PRIV192, PORT).is_err());
    assert!(tcp_probe(&guest, METADATA, PORT).is_err());

    pool.set_policy(
        &slot,
        EgressPolicy {
            block_private: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        tcp_probe(&guest, PRIV192, PORT).is_ok(),
        "private ranges open"
    );
    assert!(
        tcp_probe(&guest, METADATA, PORT).is_err(),
        "metadata still blocked"
    );
    assert!(
        tcp_probe(&guest, slot.host_addr, HOST_PORT).is_err(),
        "host still blocked"
    );
    let allow_host = EgressPolicy {
        block_private: false,
        allow: vec![Ipv4Cidr::host(INET_HOST_SIDE)],
        ..Default::default()
    };
    pool.set_policy(&slot, allow_host).await.unwrap();
    assert!(
        tcp_probe(&guest, INET_HOST_SIDE, HOST_PORT).is_err(),
        "host cannot be allow-listed"
    );

    pool.set_policy(
        &slot,
        EgressPolicy::allow_list_only(vec![Ipv4Cidr::host(PRIV10)]),
    )
    .await
    .unwrap();
    assert!(
        tcp_probe(&guest, INET_ADDR, PORT).is_err(),
        "internet closed"
    );
    assert!(tcp_probe(&guest, PRIV10, PORT).is_ok());
    assert_eq!(
        udp_probe(&guest, GUEST_DNS, 53),
        Ok("resolver".into()),
        "DNS still works"
    );

    pool.set_policy(
        &slot,
        EgressPolicy {
            deny: vec![Ipv4Cidr::host(INET_ADDR)],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(tcp_probe(&guest, INET_ADDR, PORT).is_err(), "denied");

    // Conntrack: the slot namespace has entries from the traffic above; flushing empties it.
    let count = || {
        slot.run_in_netns(|| std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count"))
            .unwrap()
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let n = count();
    assert!(n > 0, "conntrack entries in the slot namespace");
    assert_eq!(
        pool.flush_conntrack(&slot).await.unwrap(),
        ConntrackFlush::Flushed
    );
    assert_eq!(count(), 0, "flushed ({n} before)");

    stop.store(true, Ordering::Relaxed);
    // Deleting the slot-side end removes the pair at once (deleting the guest namespace would
    // free it asynchronously, and a still-present `tap0` with carrier reads as "busy").
    sh_ok(&format!(
        "ip -n {sns} link del tap0 && ip netns del {GUEST_NS}"
    ));
    // The stand-in replaced the TAP, so the slot is "broken" now: release deletes it.
    assert_eq!(pool.release_index(slot.index).await.unwrap(), None);
    assert_eq!(pool.stats().free, 0);
    pool.destroy_all().await.unwrap();
    drop(pool);
    drop(g);
    assert_eq!(settled_counts(&before), before);
}
