//! The pool: slot bookkeeping, the state file, and reconciliation with what exists on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::cidr::Ipv4Cidr;
use crate::config::{EgressPolicy, NetConfig};
use crate::conntrack::ConntrackFlush;
use crate::env::{self, HostEnv};
use crate::error::{NetError, Result};
use crate::nft::{self, SlotRules};
use crate::ns::{self, on_fresh_thread};
use crate::slot::Slot;
use crate::slotops::{self, BuildSpec, Geom};
use crate::{
    netlink, GATEWAY_IP, GUEST_DNS, GUEST_IP, GUEST_MAC, GUEST_MTU, GUEST_PREFIX_LEN, NETNS_DIR,
    TAP_NAME,
};

const STATE_FILE: &str = "netpool.json";
const LOCK_FILE: &str = "netpool.lock";
const INUSE_FILE: &str = "netpool.inuse";
const STATE_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    InUse,
    /// Being built; not persisted (a crash leaves an orphan that the next `open` deletes).
    Creating,
    /// Being reset or re-policed; recorded as in use.
    Busy,
}

#[derive(Clone, Debug)]
struct Rec {
    state: State,
    /// `None` = the pool's default policy.
    policy: Option<EgressPolicy>,
    /// Fingerprint of the ruleset currently loaded in the namespace.
    applied: u64,
    /// Host-environment generation for which `applied` is known to be the default-policy
    /// ruleset (0 = not known). Lets warm acquire/release skip rendering altogether.
    default_gen: u64,
    tap_owner: Option<u32>,
    tap_group: Option<u32>,
    uplink_mtu: u32,
}

#[derive(Serialize, Deserialize)]
struct PersistedSlot {
    index: u32,
    /// Not in the JSON: filled from the in-use map.
    #[serde(skip)]
    in_use: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<EgressPolicy>,
    applied: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tap_owner: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tap_group: Option<u32>,
    uplink_mtu: u32,
}

#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    base: Ipv4Cidr,
    ns_prefix: String,
    veth_prefix: String,
    slots: Vec<PersistedSlot>,
}

struct Inner {
    slots: BTreeMap<u32, Rec>,
    free: BTreeSet<u32>,
    creating: usize,
    env: HostEnv,
    /// Bumped whenever `env` changes.
    env_gen: u64,
    host_ready: bool,
}

/// What [`NetPool::open`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OpenReport {
    /// Healthy recorded slots adopted as free.
    pub adopted_free: Vec<u32>,
    /// Healthy recorded slots adopted as in use (their sandboxes may still run; confirm with
    /// [`NetPool::reconcile`]).
    pub adopted_in_use: Vec<u32>,
    /// Slots and leftovers that were deleted, with the reason.
    pub removed: Vec<String>,
}

/// What [`NetPool::reconcile`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReconcileReport {
    /// In use by the pool but not by the caller: reset and returned to the free list.
    pub released: Vec<u32>,
    /// Free in the pool but in use by the caller: now marked in use.
    pub claimed: Vec<u32>,
    /// In use according to the caller but unknown to the pool (their network is gone).
    pub unknown: Vec<u32>,
    /// Not in use according to the caller, but a process is still attached to the TAP; left
    /// in use.
    pub busy: Vec<u32>,
    /// Namespaces and host links with the pool's prefixes that no slot owns: deleted.
    pub removed_orphans: Vec<String>,
}

/// Slot counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// Ready to hand out.
    pub free: usize,
    /// Handed out (including slots being reset or re-policed).
    pub in_use: usize,
    /// Being built.
    pub creating: usize,
    /// Most slots this configuration allows.
    pub capacity: u32,
}

/// A pool of pre-built network slots. See the crate documentation for the topology.
///
/// All methods take `&self`; the pool is `Send + Sync` (share it in an `Arc`). Slow work
/// (namespace creation, netlink, `nft`) runs on short-lived dedicated threads, so the async
/// methods never block the runtime; a warm [`NetPool::acquire`] is bookkeeping plus a state
/// file write.
pub struct NetPool {
    cfg: NetConfig,
    state_path: PathBuf,
    /// One byte per slot index, `1` = in use, written in place with `pwrite` (see
    /// [`NetPool::mark`]).
    inuse: File,
    inner: Mutex<Inner>,
    report: OpenReport,
    _lock: Flock<File>,
}

impl std::fmt::Debug for NetPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPool")
            .field("ns_prefix", &self.cfg.ns_prefix)
            .field("stats", &self.stats())
            .finish()
    }
}

fn geom_of(base: Ipv4Cidr, ns_prefix: &str, veth_prefix: &str, index: u32) -> Geom {
    let net = u32::from(base.network()) + index * 4;
    Geom {
        index,
        ns_path: Path::new(NETNS_DIR).join(format!("{ns_prefix}{index}")),
        veth: format!("{veth_prefix}{index}"),
        host_addr: Ipv4Addr::from(net + 1),
        ns_addr: Ipv4Addr::from(net + 2),
    }
}

impl NetPool {
    /// Opens the pool: takes the state directory lock, enables IPv4 forwarding, installs the
    /// host table, adopts the healthy slots recorded in the state file (in-use ones stay in
    /// use), and deletes broken slots and every `<ns_prefix><N>` namespace / `<veth_prefix><N>`
    /// link it does not own. Creates no slot (see [`NetPool::ensure`]).
    ///
    /// Needs root (`CAP_NET_ADMIN` + `CAP_SYS_ADMIN`).
    pub async fn open(cfg: NetConfig) -> Result<NetPool> {
        cfg.validate()?;
        fs::create_dir_all(&cfg.state_dir)
            .map_err(|e| NetError::io(format!("create {}", cfg.state_dir.display()), e))?;
        let lock_path = cfg.state_dir.join(LOCK_FILE);
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| NetError::io(format!("open {}", lock_path.display()), e))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            if e == nix::errno::Errno::EWOULDBLOCK {
                NetError::Locked(cfg.state_dir.clone())
            } else {
                NetError::errno(format!("lock {}", lock_path.display()), e)
            }
        })?;
        let state_path = cfg.state_dir.join(STATE_FILE);
        let inuse_path = cfg.state_dir.join(INUSE_FILE);
        let inuse_missing = !inuse_path.exists();
        let inuse = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&inuse_path)
            .map_err(|e| NetError::io(format!("open {}", inuse_path.display()), e))?;

        on_fresh_thread("ps-net-open", ns::ensure_netns_dir).await?;
        let c2 = cfg.clone();
        let env =
            on_fresh_thread("ps-net-env", move || netlink::block_on(env::detect(&c2))?).await?;
        tracing::info!(
            dns = ?env.dns, dns_source = ?env.dns_source, uplink_mtu = env.uplink_mtu,
            host_addrs = ?env.host_addrs, "network pool host environment"
        );

        let mut pool = NetPool {
            cfg,
            state_path,
            inuse,
            inner: Mutex::new(Inner {
                slots: BTreeMap::new(),
                free: BTreeSet::new(),
                creating: 0,
                env,
                env_gen: 1,
                host_ready: false,
            }),
            report: OpenReport::default(),
            _lock: lock,
        };
        pool.ensure_host().await?;
        let mut report = OpenReport::default();
        pool.adopt(&mut report, inuse_missing).await?;
        report.removed.extend(pool.remove_orphans().await?);
        {
            let g = pool.lock();
            g.persist(&pool.state_path, &pool.cfg)?;
            pool.write_inuse_map(&g)?;
        }
        tracing::info!(?report, "network pool opened");
        pool.report = report;
        Ok(pool)
    }

    /// What `open` adopted and removed.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The pool's configuration.
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    /// The host facts the rulesets are currently rendered from.
    pub fn host_env(&self) -> HostEnv {
        self.lock().env.clone()
    }

    /// Slot counts.
    pub fn stats(&self) -> PoolStats {
        let g = self.lock();
        let in_use = g
            .slots
            .values()
            .filter(|r| matches!(r.state, State::InUse | State::Busy))
            .count();
        PoolStats {
            free: g.free.len(),
            in_use,
            creating: g.creating,
            capacity: self.cfg.capacity(),
        }
    }

    /// Builds slots until at least `n` are free (counting slots being built by concurrent
    /// calls). Returns how many this call built; stops early, without error, at capacity.
    pub async fn ensure(&self, n: usize) -> Result<usize> {
        let mut built = 0;
        loop {
            let index = {
                let mut g = self.lock();
                if g.free.len() + g.creating >= n {
                    break;
                }
                match self.reserve(&mut g) {
                    Ok(i) => i,
                    Err(NetError::Exhausted(c)) => {
                        tracing::warn!(capacity = c, "network pool at capacity");
                        break;
                    }
                    Err(e) => return Err(e),
                }
            };
            self.build_reserved(index, None, State::Free).await?;
            built += 1;
        }
        Ok(built)
    }

    /// Hands out a slot with the default policy: a free one if there is one (no namespace
    /// work unless the host environment changed since it was built), else builds one now.
    pub async fn acquire(&self) -> Result<Slot> {
        self.acquire_with(None).await
    }

    /// Like [`NetPool::acquire`] with a specific egress policy (`None` = the default). A
    /// non-default policy costs one `nft` run on the acquire path.
    pub async fn acquire_with(&self, policy: Option<EgressPolicy>) -> Result<Slot> {
        let policy = policy.filter(|p| *p != self.cfg.default_policy);
        let warm = {
            let mut g = self.lock();
            match g.free.pop_first() {
                Some(i) => {
                    let env = g.env.clone();
                    let env_gen = g.env_gen;
                    let rec = g.slots.get_mut(&i).expect("free slot has a record");
                    if policy.is_none() && rec.policy.is_none() && rec.default_gen == env_gen {
                        // Hot path: the slot already has the default ruleset for the current
                        // host environment. Flip its in-use byte and hand it out.
                        rec.state = State::InUse;
                        if let Err(e) = self.mark(i, true) {
                            g.slots.get_mut(&i).expect("record").state = State::Free;
                            g.free.insert(i);
                            return Err(e);
                        }
                        return Ok(self.slot_handle(i));
                    }
                    rec.state = State::Busy;
                    Ok((i, env, env_gen, rec.applied))
                }
                None => Err(self.reserve(&mut g)?),
            }
        };
        let (index, env, env_gen, applied) = match warm {
            Ok(w) => w,
            Err(reserved) => {
                self.build_reserved(reserved, policy, State::InUse).await?;
                return Ok(self.slot_handle(reserved));
            }
        };
        let script = self.render(index, policy.as_ref(), &env);
        let fp = nft::fingerprint(&script);
        if fp != applied {
            let path = self.geom(index).ns_path;
            let nft_bin = self.cfg.nft_path.clone();
            let r = on_fresh_thread("ps-net-policy", move || {
                slotops::apply_in(index, &path, &script, &nft_bin)
            })
            .await;
            if let Err(e) = r {
                tracing::warn!(
                    slot = index,
                    error = &e as &dyn std::error::Error,
                    "slot broken on acquire; deleting it"
                );
                self.discard(index).await;
                return Err(e);
            }
        }
        {
            let mut g = self.lock();
            let rec = g.slots.get_mut(&index).expect("busy slot has a record");
            rec.state = State::InUse;
            rec.default_gen = if policy.is_none() { env_gen } else { 0 };
            rec.policy = policy;
            rec.applied = fp;
            // The common case writes one byte; the inventory changes only if a ruleset was
            // (re)loaded, which already cost an nft run.
            let r = self.mark(index, true).and_then(|()| {
                if fp != applied {
                    g.persist(&self.state_path, &self.cfg)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                let rec = g.slots.get_mut(&index).expect("record");
                rec.state = State::Free;
                g.free.insert(index);
                let _ = self.mark(index, false);
                return Err(e);
            }
        }
        Ok(self.slot_handle(index))
    }

    /// The handle of an in-use slot (e.g. to re-attach to a sandbox after an agent restart).
    pub fn slot(&self, index: u32) -> Option<Slot> {
        let g = self.lock();
        match g.slots.get(&index) {
            Some(r) if matches!(r.state, State::InUse | State::Busy) => {
                Some(self.slot_handle(index))
            }
            _ => None,
        }
    }

    /// Returns a slot to the free list: refuses with [`NetError::SlotBusy`] while a process
    /// is attached to its TAP (the VM must have exited), flushes the namespace's conntrack
    /// table, and restores the default policy if the slot had another one (or the host
    /// environment changed). A slot found broken is deleted instead (logged; not an error).
    pub async fn release(&self, slot: Slot) -> Result<()> {
        self.release_index(slot.index).await.map(|_| ())
    }

    /// [`NetPool::release`] by index. Returns the conntrack outcome, or `None` if the slot
    /// was broken and deleted.
    pub async fn release_index(&self, index: u32) -> Result<Option<ConntrackFlush>> {
        let (script, fp, reload, env_gen) = {
            let mut g = self.lock();
            let env_gen = g.env_gen;
            let rec = match g.slots.get_mut(&index) {
                Some(r) if r.state == State::InUse => r,
                _ => return Err(NetError::NotInUse(index)),
            };
            rec.state = State::Busy;
            if rec.policy.is_none() && rec.default_gen == env_gen {
                (None, rec.applied, false, env_gen)
            } else {
                let applied = rec.applied;
                let env = g.env.clone();
                let script = self.render(index, None, &env);
                let fp = nft::fingerprint(&script);
                (
                    (fp != applied).then_some(script),
                    fp,
                    fp != applied,
                    env_gen,
                )
            }
        };
        let path = self.geom(index).ns_path;
        let nft_bin = self.cfg.nft_path.clone();
        let r = on_fresh_thread("ps-net-release", move || {
            slotops::reset(index, &path, script.as_deref(), &nft_bin)
        })
        .await;
        match r {
            Ok(ct) => {
                let mut g = self.lock();
                let rec = g.slots.get_mut(&index).expect("busy slot has a record");
                rec.state = State::Free;
                rec.policy = None;
                rec.applied = fp;
                rec.default_gen = env_gen;
                g.free.insert(index);
                self.mark(index, false)?;
                if reload {
                    g.persist(&self.state_path, &self.cfg)?;
                }
                if ct == ConntrackFlush::Unsupported {
                    tracing::debug!(
                        slot = index,
                        "kernel without ctnetlink: conntrack not flushed"
                    );
                }
                Ok(Some(ct))
            }
            Err(NetError::SlotBusy(i)) => {
                let mut g = self.lock();
                if let Some(rec) = g.slots.get_mut(&index) {
                    rec.state = State::InUse;
                }
                Err(NetError::SlotBusy(i))
            }
            Err(e) => {
                tracing::warn!(
                    slot = index,
                    error = &e as &dyn std::error::Error,
                    "slot broken on release; deleting it"
                );
                self.discard(index).await;
                Ok(None)
            }
        }
    }

    /// Replaces the egress policy of an in-use slot (one atomic `nft` transaction).
    pub async fn set_policy(&self, slot: &Slot, policy: EgressPolicy) -> Result<()> {
        let index = slot.index;
        let policy = Some(policy).filter(|p| *p != self.cfg.default_policy);
        let script = {
            let mut g = self.lock();
            let env = g.env.clone();
            let rec = match g.slots.get_mut(&index) {
                Some(r) if r.state == State::InUse => r,
                _ => return Err(NetError::NotInUse(index)),
            };
            rec.state = State::Busy;
            self.render(index, policy.as_ref(), &env)
        };
        let fp = nft::fingerprint(&script);
        let path = self.geom(index).ns_path;
        let nft_bin = self.cfg.nft_path.clone();
        let r = on_fresh_thread("ps-net-policy", move || {
            slotops::apply_in(index, &path, &script, &nft_bin)
        })
        .await;
        let mut g = self.lock();
        let rec = g.slots.get_mut(&index).expect("busy slot has a record");
        rec.state = State::InUse;
        r?;
        rec.default_gen = 0;
        rec.policy = policy;
        rec.applied = fp;
        g.persist(&self.state_path, &self.cfg)
    }

    /// Flushes the conntrack table of a slot's namespace (also done by release).
    pub async fn flush_conntrack(&self, slot: &Slot) -> Result<ConntrackFlush> {
        let path = slot.netns_path.clone();
        on_fresh_thread("ps-net-conntrack", move || {
            ns::enter(&path)?;
            crate::conntrack::flush_current_netns()
        })
        .await
    }

    /// The ruleset the slot's namespace should have with `policy` (`None` = default), as it
    /// would be loaded by `nft -f -`. For inspection and debugging.
    pub fn render_slot_ruleset(&self, index: u32, policy: Option<&EgressPolicy>) -> String {
        let env = self.lock().env.clone();
        self.render(index, policy, &env)
    }

    /// Re-reads host addresses, resolvers and MTU, and reloads the host table. Slots pick up
    /// the change lazily: a free slot's ruleset is re-rendered on acquire and reloaded if it
    /// differs. Call after host network changes (DHCP, resolv.conf).
    pub async fn refresh_host_env(&self) -> Result<HostEnv> {
        let c2 = self.cfg.clone();
        let env =
            on_fresh_thread("ps-net-env", move || netlink::block_on(env::detect(&c2))?).await?;
        {
            let mut g = self.lock();
            if g.env != env {
                g.env = env.clone();
                g.env_gen += 1;
            }
            g.host_ready = false;
        }
        self.ensure_host().await?;
        Ok(env)
    }

    /// Makes the pool agree with the caller's view: `in_use` lists the slot indices that
    /// running sandboxes hold. In-use slots not listed are released; free slots listed are
    /// claimed; namespaces and host links with the pool's prefixes that no slot owns are
    /// deleted.
    pub async fn reconcile(&self, in_use: &[u32]) -> Result<ReconcileReport> {
        let want: BTreeSet<u32> = in_use.iter().copied().collect();
        let mut report = ReconcileReport::default();
        let to_release: Vec<u32> = {
            let mut g = self.lock();
            let rel = g
                .slots
                .iter()
                .filter(|(i, r)| r.state == State::InUse && !want.contains(i))
                .map(|(i, _)| *i)
                .collect();
            for &i in &want {
                match g.slots.get(&i).map(|r| r.state) {
                    Some(State::Free) => {
                        g.free.remove(&i);
                        g.slots.get_mut(&i).expect("record").state = State::InUse;
                        self.mark(i, true)?;
                        report.claimed.push(i);
                    }
                    Some(_) => {}
                    None => report.unknown.push(i),
                }
            }
            rel
        };
        for i in to_release {
            match self.release_index(i).await {
                Ok(_) => report.released.push(i),
                Err(NetError::SlotBusy(_)) => report.busy.push(i),
                Err(e) => return Err(e),
            }
        }
        report.removed_orphans = self.remove_orphans().await?;
        Ok(report)
    }

    /// Deletes every slot (in use or not), every leftover with the pool's prefixes, the host
    /// table and the state file. Host IPv4 forwarding is left on. The pool stays usable:
    /// the next build reinstalls the host table.
    pub async fn destroy_all(&self) -> Result<()> {
        let items: Vec<(PathBuf, String)> = {
            let mut g = self.lock();
            let items = g
                .slots
                .iter()
                .filter(|(_, r)| r.state != State::Creating)
                .map(|(i, _)| {
                    let ge = self.geom(*i);
                    (ge.ns_path, ge.veth)
                })
                .collect();
            g.slots.retain(|_, r| r.state == State::Creating);
            g.free.clear();
            g.host_ready = false;
            items
        };
        on_fresh_thread("ps-net-destroy", move || slotops::destroy(&items)).await?;
        self.remove_orphans().await?;
        let nft_bin = self.cfg.nft_path.clone();
        let script = nft::delete_script(&self.cfg.nft_table);
        on_fresh_thread("ps-net-host", move || {
            nft::apply(&nft_bin, &script, "host table")
        })
        .await?;
        self.inuse
            .set_len(0)
            .map_err(|e| NetError::io("truncate the in-use map", e))?;
        match fs::remove_file(&self.state_path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(NetError::io(
                format!("remove {}", self.state_path.display()),
                e,
            )),
        }
    }

    // ----- internals -----

    /// Records a slot's in-use flag: one `pwrite` of one byte at offset `index` (a few
    /// microseconds, no rename, no fsync). A single-byte write cannot be torn, and page-cache
    /// writes survive a crash of this process; after a host crash no VM survives either.
    fn mark(&self, index: u32, in_use: bool) -> Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.inuse, &[u8::from(in_use)], u64::from(index))
            .map_err(|e| NetError::io("write the in-use map", e))
    }

    /// Rewrites the whole in-use map from the slot table.
    fn write_inuse_map(&self, g: &Inner) -> Result<()> {
        let len = g.slots.keys().next_back().map_or(0, |i| *i as usize + 1);
        let mut map = vec![0u8; len];
        for (i, r) in &g.slots {
            if matches!(r.state, State::InUse | State::Busy) {
                map[*i as usize] = 1;
            }
        }
        self.inuse
            .set_len(0)
            .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&self.inuse, &map, 0))
            .map_err(|e| NetError::io("write the in-use map", e))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The network namespace of slot `index` (`/run/netns/<prefix><index>`).
    pub fn netns_path(&self, index: u32) -> PathBuf {
        self.geom(index).ns_path
    }

    fn geom(&self, index: u32) -> Geom {
        geom_of(
            self.cfg.base,
            &self.cfg.ns_prefix,
            &self.cfg.veth_prefix,
            index,
        )
    }

    fn slot_handle(&self, index: u32) -> Slot {
        let g = self.geom(index);
        Slot {
            index,
            netns_name: format!("{}{index}", self.cfg.ns_prefix),
            netns_path: g.ns_path,
            tap: TAP_NAME.to_string(),
            guest_mac: GUEST_MAC,
            guest_ip: GUEST_IP,
            gateway: GATEWAY_IP,
            prefix_len: GUEST_PREFIX_LEN,
            dns: GUEST_DNS,
            mtu: GUEST_MTU,
            host_veth: g.veth,
            host_addr: g.host_addr,
            external_addr: g.ns_addr,
        }
    }

    fn render(&self, index: u32, policy: Option<&EgressPolicy>, env: &HostEnv) -> String {
        let g = self.geom(index);
        nft::slot_script(&SlotRules {
            table: &self.cfg.nft_table,
            base: self.cfg.base,
            ns_addr: g.ns_addr,
            host_addr: g.host_addr,
            host_addrs: &env.host_addrs,
            dns: &env.dns,
            uplink_mtu: env.uplink_mtu,
            policy: policy.unwrap_or(&self.cfg.default_policy),
        })
    }

    /// Lowest unused index, recorded as `Creating`.
    fn reserve(&self, g: &mut Inner) -> Result<u32> {
        let cap = self.cfg.capacity();
        let mut next = 0u32;
        for &i in g.slots.keys() {
            if i != next {
                break;
            }
            next += 1;
        }
        if next >= cap {
            return Err(NetError::Exhausted(cap));
        }
        g.slots.insert(
            next,
            Rec {
                state: State::Creating,
                policy: None,
                applied: 0,
                default_gen: 0,
                tap_owner: self.cfg.tap_owner,
                tap_group: self.cfg.tap_group,
                uplink_mtu: g.env.uplink_mtu,
            },
        );
        g.creating += 1;
        Ok(next)
    }

    /// Builds a reserved slot and records it in state `to`.
    async fn build_reserved(
        &self,
        index: u32,
        policy: Option<EgressPolicy>,
        to: State,
    ) -> Result<()> {
        let r = async {
            self.ensure_host().await?;
            let (env, env_gen) = {
                let g = self.lock();
                (g.env.clone(), g.env_gen)
            };
            let script = self.render(index, policy.as_ref(), &env);
            let fp = nft::fingerprint(&script);
            let spec = BuildSpec {
                geom: self.geom(index),
                uplink_mtu: env.uplink_mtu,
                tap_owner: self.cfg.tap_owner,
                tap_group: self.cfg.tap_group,
                script,
                nft: self.cfg.nft_path.clone(),
            };
            on_fresh_thread("ps-net-build", move || slotops::build(&spec)).await?;
            Ok::<_, NetError>((fp, env.uplink_mtu, env_gen))
        }
        .await;
        match r {
            Ok((fp, mtu, env_gen)) => {
                let mut g = self.lock();
                g.creating -= 1;
                let rec = g.slots.get_mut(&index).expect("reserved slot has a record");
                rec.state = to;
                rec.default_gen = if policy.is_none() { env_gen } else { 0 };
                rec.policy = policy;
                rec.applied = fp;
                rec.uplink_mtu = mtu;
                if to == State::Free {
                    g.free.insert(index);
                }
                g.persist(&self.state_path, &self.cfg)?;
                self.mark(index, to == State::InUse)?;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    slot = index,
                    error = &e as &dyn std::error::Error,
                    "building network slot failed"
                );
                let ge = self.geom(index);
                let items = vec![(ge.ns_path, ge.veth)];
                if let Err(e2) =
                    on_fresh_thread("ps-net-destroy", move || slotops::destroy(&items)).await
                {
                    tracing::warn!(
                        slot = index,
                        error = &e2 as &dyn std::error::Error,
                        "cleaning up a failed slot"
                    );
                }
                let mut g = self.lock();
                g.creating -= 1;
                g.slots.remove(&index);
                Err(e)
            }
        }
    }

    /// Deletes a slot and forgets it (best effort; logs failures).
    async fn discard(&self, index: u32) {
        let ge = self.geom(index);
        let items = vec![(ge.ns_path, ge.veth)];
        if let Err(e) = on_fresh_thread("ps-net-destroy", move || slotops::destroy(&items)).await {
            tracing::warn!(
                slot = index,
                error = &e as &dyn std::error::Error,
                "deleting network slot"
            );
        }
        let mut g = self.lock();
        g.slots.remove(&index);
        g.free.remove(&index);
        if let Err(e) = g
            .persist(&self.state_path, &self.cfg)
            .and_then(|()| self.mark(index, false))
        {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "writing network pool state"
            );
        }
    }

    async fn ensure_host(&self) -> Result<()> {
        let dns = {
            let g = self.lock();
            if g.host_ready {
                return Ok(());
            }
            g.env.dns.clone()
        };
        let script = nft::host_script(
            &self.cfg.nft_table,
            &self.cfg.veth_prefix,
            self.cfg.base,
            &dns,
        );
        let nft_bin = self.cfg.nft_path.clone();
        on_fresh_thread("ps-net-host", move || {
            slotops::host_setup(&nft_bin, &script)
        })
        .await?;
        self.lock().host_ready = true;
        Ok(())
    }

    /// Loads the state file, health-checks the recorded slots, adopts the healthy ones and
    /// deletes the rest.
    async fn adopt(&self, report: &mut OpenReport, inuse_missing: bool) -> Result<()> {
        let text = match fs::read(&self.state_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(NetError::io(
                    format!("read {}", self.state_path.display()),
                    e,
                ))
            }
        };
        let mut st: StateFile = match serde_json::from_slice(&text) {
            Ok(s) => s,
            Err(e) => {
                // Unreadable: own nothing; orphan removal deletes whatever carries our prefixes.
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "ignoring corrupt network pool state file"
                );
                report
                    .removed
                    .push(format!("state file unreadable ({e}): starting empty"));
                return Ok(());
            }
        };
        // In-use flags. Without the map (deleted by hand?), assume every slot is in use: they
        // are then never handed out before the caller's reconcile says otherwise.
        let mut map = Vec::new();
        io::Read::read_to_end(&mut &self.inuse, &mut map)
            .map_err(|e| NetError::io("read the in-use map", e))?;
        for s in &mut st.slots {
            s.in_use = inuse_missing || map.get(s.index as usize) == Some(&1);
        }
        let same_layout = st.version == STATE_VERSION
            && st.base == self.cfg.base
            && st.ns_prefix == self.cfg.ns_prefix
            && st.veth_prefix == self.cfg.veth_prefix;
        if !same_layout {
            if st.slots.iter().any(|s| s.in_use) {
                return Err(NetError::State {
                    path: self.state_path.clone(),
                    msg: format!(
                        "recorded slots use base {} / prefixes {:?},{:?} and some are in use; \
                         keep the old configuration until they are released",
                        st.base, st.ns_prefix, st.veth_prefix
                    ),
                });
            }
            let items: Vec<(PathBuf, String)> = st
                .slots
                .iter()
                .map(|s| {
                    let ge = geom_of(st.base, &st.ns_prefix, &st.veth_prefix, s.index);
                    report
                        .removed
                        .push(format!("slot {}: layout changed", s.index));
                    (ge.ns_path, ge.veth)
                })
                .collect();
            on_fresh_thread("ps-net-destroy", move || slotops::destroy(&items)).await?;
            return Ok(());
        }

        let cap = self.cfg.capacity();
        let (valid, beyond): (Vec<PersistedSlot>, Vec<PersistedSlot>) =
            st.slots.into_iter().partition(|s| s.index < cap);
        for s in &beyond {
            report
                .removed
                .push(format!("slot {}: beyond capacity {cap}", s.index));
        }
        let geoms: Vec<Geom> = valid.iter().map(|s| self.geom(s.index)).collect();
        let g2 = geoms.clone();
        let health = on_fresh_thread("ps-net-check", move || slotops::check(&g2)).await?;
        let env_mtu = self.lock().env.uplink_mtu;
        let mut doomed: Vec<(PathBuf, String)> = beyond
            .iter()
            .map(|s| {
                let ge = self.geom(s.index);
                (ge.ns_path, ge.veth)
            })
            .collect();
        {
            let mut g = self.lock();
            for ((s, ge), h) in valid.into_iter().zip(geoms).zip(health) {
                let stale_spec = !s.in_use
                    && (s.tap_owner != self.cfg.tap_owner
                        || s.tap_group != self.cfg.tap_group
                        || s.uplink_mtu != env_mtu);
                let reason = match h {
                    Some(r) => Some(r),
                    None if stale_spec => Some("TAP owner or MTU changed".to_string()),
                    None => None,
                };
                if let Some(r) = reason {
                    if s.in_use {
                        tracing::warn!(slot = s.index, reason = %r, "deleting broken in-use network slot");
                    }
                    report.removed.push(format!("slot {}: {r}", s.index));
                    doomed.push((ge.ns_path, ge.veth));
                    continue;
                }
                let state = if s.in_use { State::InUse } else { State::Free };
                if s.in_use {
                    report.adopted_in_use.push(s.index);
                } else {
                    report.adopted_free.push(s.index);
                    g.free.insert(s.index);
                }
                g.slots.insert(
                    s.index,
                    Rec {
                        state,
                        policy: s.policy,
                        applied: s.applied,
                        default_gen: 0,
                        tap_owner: s.tap_owner,
                        tap_group: s.tap_group,
                        uplink_mtu: s.uplink_mtu,
                    },
                );
            }
        }
        if !doomed.is_empty() {
            on_fresh_thread("ps-net-destroy", move || slotops::destroy(&doomed)).await?;
        }
        Ok(())
    }

    /// Deletes namespaces `<ns_prefix><N>` and host links `<veth_prefix><N>` whose N is not a
    /// slot of this pool. Lists first and snapshots the slot table second: an index is
    /// reserved before its namespace exists, so a slot being built is never mistaken for an
    /// orphan.
    async fn remove_orphans(&self) -> Result<Vec<String>> {
        let nsp = self.cfg.ns_prefix.clone();
        let vp = self.cfg.veth_prefix.clone();
        let (nss, links) = on_fresh_thread("ps-net-scan", move || {
            Ok((
                ns::list_prefixed(&nsp)?,
                slotops::host_links_with_prefix(&vp)?,
            ))
        })
        .await?;
        let known: BTreeSet<u32> = self.lock().slots.keys().copied().collect();
        let mut removed = Vec::new();
        let mut items: Vec<(PathBuf, String)> = Vec::new();
        for (name, i) in nss {
            if !known.contains(&i) {
                removed.push(format!("orphan namespace {name}"));
                items.push((Path::new(NETNS_DIR).join(&name), self.geom(i).veth));
            }
        }
        for (name, i) in links {
            if !known.contains(&i) && !items.iter().any(|(_, v)| *v == name) {
                removed.push(format!("orphan link {name}"));
                // A path that does not exist: destroy() tolerates it.
                items.push((self.geom(i).ns_path, name));
            }
        }
        if !items.is_empty() {
            tracing::info!(?removed, "removing network leftovers");
            on_fresh_thread("ps-net-destroy", move || slotops::destroy(&items)).await?;
        }
        Ok(removed)
    }
}

impl Inner {
    /// Writes the slot inventory (JSON) atomically: temp file + rename. It changes only when
    /// slots are built or deleted or a slot's ruleset is reloaded, never on a plain
    /// acquire/release (those only flip a byte of the in-use map). No fsync: the file must
    /// survive a crash of this process, which rename guarantees; after a host crash no VM
    /// survives either, and `open` health-checks every recorded slot anyway.
    fn persist(&self, path: &Path, cfg: &NetConfig) -> Result<()> {
        let st = StateFile {
            version: STATE_VERSION,
            base: cfg.base,
            ns_prefix: cfg.ns_prefix.clone(),
            veth_prefix: cfg.veth_prefix.clone(),
            slots: self
                .slots
                .iter()
                .filter(|(_, r)| r.state != State::Creating)
                .map(|(i, r)| PersistedSlot {
                    index: *i,
                    in_use: false,
                    policy: r.policy.clone(),
                    applied: r.applied,
                    tap_owner: r.tap_owner,
                    tap_group: r.tap_group,
                    uplink_mtu: r.uplink_mtu,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec(&st).map_err(|e| NetError::State {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, bytes).map_err(|e| NetError::io(format!("write {}", tmp.display()), e))?;
        fs::rename(&tmp, path).map_err(|e| NetError::io(format!("rename {}", tmp.display()), e))
    }
}
