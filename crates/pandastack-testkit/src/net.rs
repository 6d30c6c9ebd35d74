//! Network pools for tests: each test names its own namespaces, links, nftables table and
//! address range, so tests can run side by side and never touch a real server's pool; the
//! guard removes all of it when the test ends, even on panic.

use std::process::Command;
use std::sync::Arc;

use pandastack_net::{NetConfig, NetPool};

/// Names a test's network objects: namespaces `<name>-N`, links `<name>vN`, table
/// `pandastack_<name>` (what `pandastack server --net-name <name>` uses too).
#[derive(Debug, Clone)]
pub struct NetNames {
    pub name: String,
}

impl NetNames {
    pub fn new(name: &str) -> Self {
        Self { name: name.into() }
    }
    pub fn ns_prefix(&self) -> String {
        format!("{}-", self.name)
    }
    pub fn veth_prefix(&self) -> String {
        format!("{}v", self.name)
    }
    pub fn table(&self) -> String {
        format!("pandastack_{}", self.name)
    }

    /// Namespaces and host links currently carrying these names, and whether the host table
    /// exists.
    pub fn present(&self) -> (usize, usize, bool) {
        let ns = netns_names()
            .iter()
            .filter(|n| n.starts_with(&self.ns_prefix()))
            .count();
        let links = link_names()
            .iter()
            .filter(|l| l.starts_with(&self.veth_prefix()))
            .count();
        let table = sh("nft list tables").contains(&format!("inet {}", self.table()));
        (ns, links, table)
    }

    /// Deletes every namespace, link and table with these names.
    pub fn clean(&self) {
        for n in netns_names() {
            if n.starts_with(&self.ns_prefix()) {
                sh(&format!("ip netns del {n}"));
            }
        }
        for l in link_names() {
            if l.starts_with(&self.veth_prefix()) {
                sh(&format!("ip link del {l}"));
            }
        }
        sh(&format!("nft delete table inet {}", self.table()));
    }
}

/// A [`NetPool`] for one test; dropping it removes everything the pool made.
pub struct NetGuard {
    pub pool: Arc<NetPool>,
    pub names: NetNames,
    _state: tempfile::TempDir,
}

impl Drop for NetGuard {
    fn drop(&mut self) {
        self.names.clean();
    }
}

/// Opens a pool named `name` over `base` (e.g. `10.202.0.0/22`; must not overlap another
/// test's). Panics when the host cannot do it (tests run as root on Linux with nftables).
pub async fn net_pool(name: &str, base: &str) -> NetGuard {
    let names = NetNames::new(name);
    names.clean();
    let state = tempfile::tempdir().expect("net state dir");
    let mut cfg = NetConfig::new(state.path());
    cfg.ns_prefix = names.ns_prefix();
    cfg.veth_prefix = names.veth_prefix();
    cfg.nft_table = names.table();
    cfg.base = base.parse().expect("base cidr");
    let pool = NetPool::open(cfg)
        .await
        .expect("open network pool (needs root and nftables)");
    NetGuard {
        pool: Arc::new(pool),
        names,
        _state: state,
    }
}

/// The host's own address on its default route (what a guest must not be able to reach).
pub fn host_ip() -> String {
    let text = sh("ip -4 route get 1.1.1.1");
    let words: Vec<&str> = text.split_whitespace().collect();
    let i = words
        .iter()
        .position(|w| *w == "src")
        .unwrap_or_else(|| panic!("no src address in {text:?}"));
    words[i + 1].to_owned()
}

fn sh(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", &format!("{cmd} 2>/dev/null")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn netns_names() -> Vec<String> {
    sh("ip netns list")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn link_names() -> Vec<String> {
    sh("ip -o link show")
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
        .collect()
}
