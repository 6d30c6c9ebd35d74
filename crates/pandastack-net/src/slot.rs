//! The handle given to the VM driver for one acquired slot.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::{ns, tap};

/// One acquired network slot: a named network namespace holding the guest's TAP.
///
/// A `Slot` is a plain description (it has no `Drop`): give it back with
/// [`crate::NetPool::release`] once the VM process using it has exited. It serialises, so the
/// host agent can store it with the sandbox and find it again after a restart
/// ([`crate::NetPool::slot`]).
///
/// Guest-facing values are the same for every slot (see the crate constants); only the
/// namespace, the host veth and the external address differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Slot number N.
    pub index: u32,
    /// Namespace name (`ps-N`), as shown by `ip netns list`.
    pub netns_name: String,
    /// `/run/netns/ps-N`.
    pub netns_path: PathBuf,
    /// TAP device inside the namespace ([`crate::TAP_NAME`]).
    pub tap: String,
    /// MAC the guest NIC must use ([`crate::GUEST_MAC`]).
    pub guest_mac: [u8; 6],
    /// Guest address ([`crate::GUEST_IP`]).
    pub guest_ip: Ipv4Addr,
    /// Guest gateway = TAP address ([`crate::GATEWAY_IP`]).
    pub gateway: Ipv4Addr,
    /// Guest prefix length ([`crate::GUEST_PREFIX_LEN`]).
    pub prefix_len: u8,
    /// DNS server the guest uses ([`crate::GUEST_DNS`]).
    pub dns: Ipv4Addr,
    /// Guest MTU ([`crate::GUEST_MTU`]).
    pub mtu: u32,
    /// Host end of the slot's veth (`psvN`).
    pub host_veth: String,
    /// Address of the host end (`.1` of the slot's /30): the namespace's default gateway.
    pub host_addr: Ipv4Addr,
    /// Address of the namespace end (`.2` of the /30): the source address of the slot's
    /// traffic as the host sees it (the host masquerades it further).
    pub external_addr: Ipv4Addr,
}

impl Slot {
    /// `02:50:53:00:00:02` form of [`Slot::guest_mac`], for `-device virtio-net-…,mac=`.
    pub fn guest_mac_string(&self) -> String {
        crate::mac_to_string(&self.guest_mac)
    }

    /// Opens the namespace (`O_CLOEXEC`). Use with [`crate::setns_fd`].
    pub fn open_netns(&self) -> Result<OwnedFd> {
        ns::open_ns(&self.netns_path)
    }

    /// A ready-made `pre_exec` hook that moves the child into the slot's namespace:
    ///
    /// ```no_run
    /// # async fn f(pool: &pandastack_net::NetPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::os::unix::process::CommandExt;
    /// let slot = pool.acquire().await?;
    /// let mut cmd = std::process::Command::new("qemu-system-x86_64");
    /// cmd.args(["-netdev", &format!("tap,id=n0,ifname={},script=no,downscript=no", slot.tap)]);
    /// // SAFETY: the hook only calls setns(2) on an fd opened before the fork.
    /// unsafe { cmd.pre_exec(slot.enter_hook()?) };
    /// let child = cmd.spawn()?;
    /// # Ok(()) }
    /// ```
    ///
    /// The fd is opened now (before the fork) and closed on exec. `setns` needs
    /// `CAP_SYS_ADMIN`, and std applies `Command::uid`/`gid` *before* `pre_exec` hooks, so with
    /// an unprivileged QEMU either drop privileges in a later hook of your own, or spawn with
    /// [`Slot::run_in_netns`] instead.
    pub fn enter_hook(&self) -> Result<impl FnMut() -> io::Result<()> + Send + Sync + 'static> {
        let fd = self.open_netns()?;
        Ok(move || ns::setns_fd(fd.as_fd()))
    }

    /// Runs `f` on a fresh thread inside the slot's namespace and returns its result. A child
    /// process spawned by `f` starts inside the namespace (children inherit the namespace of
    /// the forking thread), and this composes with `Command::uid`/`gid`:
    ///
    /// ```no_run
    /// # fn f(slot: &pandastack_net::Slot) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::os::unix::process::CommandExt;
    /// let child = slot.run_in_netns(|| {
    ///     std::process::Command::new("qemu-system-x86_64").uid(1000).gid(1000).spawn()
    /// })??;
    /// # Ok(()) }
    /// ```
    ///
    /// For `tokio::process::Command`, capture `tokio::runtime::Handle::current()` outside and
    /// call `handle.enter()` inside `f`. Blocks the caller while `f` runs.
    pub fn run_in_netns<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        ns::run_in_netns(&self.netns_path, f)
    }

    /// Opens the slot's TAP and returns the attached fd, for handing to a VMM that does not
    /// itself run in the namespace (QEMU: `-netdev tap,id=n0,fd=N,vnet_hdr=on|off`, matching
    /// `vnet_hdr`). While the fd is open nobody else can attach, and
    /// [`crate::NetPool::release`] refuses the slot.
    pub fn open_tap(&self, vnet_hdr: bool) -> Result<OwnedFd> {
        let name = self.tap.clone();
        ns::run_in_netns(&self.netns_path, move || tap::open(&name, vnet_hdr))?
    }
}
