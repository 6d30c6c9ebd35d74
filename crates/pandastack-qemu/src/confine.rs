//! Unprivileged VM processes: every QEMU process runs as a uid/gid of its own from its first
//! instruction, with no capability and an empty bounding set, `no_new_privs`, and Landlock
//! rules that leave it its run directory, the system's installation and a few devices
//! ([`base_rules`]). What it would create or open elsewhere the host makes or opens for it: its
//! sockets (inherited, listening), its console log and snapshot file (given to its uid), a
//! template's memory and a kernel (inherited, named `/proc/self/fd/N`), volumes (fd sets).
//!
//! Where the kernel has no Landlock, QEMU starts as root instead, opens what its command line
//! names, then chroots into its run directory and drops to the VM's identity itself
//! (`-run-with chroot=<run dir>,user=<uid>:<gid>`) before the guest runs a single instruction.
//!
//! A uid is claimed by taking an exclusive `flock` on `<lock dir>/<uid>`; the lock's file
//! descriptor is inherited by the QEMU process, so the claim lasts exactly as long as the
//! process does, across restarts of the server and between servers on one host, with no table
//! to keep in step. The flip side: a compromised QEMU that closes that descriptor gives its uid
//! back while it still runs, and the next VM may get the same uid (each still in its own
//! chroot, but signals between them become possible); a per-server table of live uids would
//! narrow that.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use pandastack_vm::{VmError, VmSpec};

use crate::argv::{Confined, Inherited};

/// Default uids (and gids: each VM's gid equals its uid), chosen far from the ranges
/// distributions hand out to people (1000+) and to user namespaces (`/etc/subuid`, 100000+).
pub const DEFAULT_FIRST_UID: u32 = 4_200_000;
pub const DEFAULT_UID_COUNT: u32 = 65_536;
/// Where the uid claims live: a tmpfs, so nothing outlives a reboot.
pub const DEFAULT_LOCK_DIR: &str = "/run/pandastack/vm-uids";

/// The pool of identities VM processes run as.
#[derive(Debug)]
pub struct VmIdentities {
    first: u32,
    count: u32,
    lock_dir: PathBuf,
    /// Where the next search starts, so recently freed uids are reused last.
    next: AtomicU32,
    /// VM processes start as their uid under Landlock (where the kernel has it), else as root
    /// that chroots and drops itself.
    landlock: bool,
}

/// A uid held for one VM process until that process (which inherits `lock`) exits.
#[derive(Debug)]
pub struct Claim {
    pub uid: u32,
    pub lock: OwnedFd,
}

impl VmIdentities {
    /// Uids `first..first+count` with their claims in `lock_dir` (created if missing).
    pub fn new(first: u32, count: u32, lock_dir: impl Into<PathBuf>) -> Result<Self, VmError> {
        if first == 0 || count == 0 || first.checked_add(count).is_none() {
            return Err(VmError::InvalidSpec(format!(
                "vm uid range {first}+{count} is empty, includes root or overflows"
            )));
        }
        let lock_dir = lock_dir.into();
        std::fs::create_dir_all(&lock_dir)?;
        std::fs::set_permissions(
            &lock_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        Ok(Self {
            first,
            count,
            lock_dir,
            next: AtomicU32::new(0),
            landlock: crate::landlock::abi().is_some(),
        })
    }

    /// True when VM processes start as their uid under Landlock rather than chrooting
    /// themselves.
    pub fn landlock(&self) -> bool {
        self.landlock
    }

    /// The default pool when this process can switch uids (runs as root), else none.
    pub fn default_if_root() -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        match Self::new(DEFAULT_FIRST_UID, DEFAULT_UID_COUNT, DEFAULT_LOCK_DIR) {
            Ok(ids) => Some(ids),
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "vm processes will run as root"
                );
                None
            }
        }
    }

    /// `FIRST-LAST` (inclusive).
    pub fn parse_range(s: &str) -> Result<(u32, u32), String> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("{s:?}: expected FIRST-LAST, e.g. 4200000-4265535"))?;
        let a: u32 = a.trim().parse().map_err(|e| format!("{a:?}: {e}"))?;
        let b: u32 = b.trim().parse().map_err(|e| format!("{b:?}: {e}"))?;
        if a == 0 || b < a {
            return Err(format!("{s:?}: FIRST must be above 0 and not above LAST"));
        }
        Ok((a, b - a + 1))
    }

    /// Claims a uid no live VM process holds.
    pub fn claim(&self) -> Result<Claim, VmError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.count {
            let uid = self.first + (start.wrapping_add(i) % self.count);
            let path = self.lock_dir.join(uid.to_string());
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            let fd = OwnedFd::from(file);
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    self.next
                        .store(start.wrapping_add(i).wrapping_add(1), Ordering::Relaxed);
                    return Ok(Claim { uid, lock: fd });
                }
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => return Err(VmError::Io(e.into())),
            }
        }
        Err(VmError::Spawn(std::io::Error::other(format!(
            "all {} vm uids from {} are in use",
            self.count, self.first
        ))))
    }
}

/// The name, inside a confined VM's run directory, of the state file being written.
pub(crate) const SAVING: &str = ".state.partial";
/// The name, inside a confined VM's run directory, of a link to the state being loaded.
pub(crate) const LOADING: &str = ".state.incoming";

/// Readies `spec`'s run directory for a VM process running as `uid`: the directory becomes
/// searchable (it is the process's root), files in it that QEMU may reopen by name become the
/// uid's own, and volume files outside it are opened here, to be inherited and named through fd
/// sets. Returns the command-line view of that and the descriptors to hand over.
pub(crate) fn prepare(
    spec: &VmSpec,
    uid: u32,
    landlock: Option<Landlock<'_>>,
) -> Result<(Confined, Vec<OwnedFd>), VmError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&spec.run_dir, std::fs::Permissions::from_mode(0o711))?;
    if inside(&spec.run_dir, &spec.rootfs) {
        give(&spec.rootfs, uid)?;
    }
    let mut held = Vec::new();
    let landlock = match landlock {
        Some(l) => Some(landlocked(spec, uid, l, &mut held)?),
        None => None,
    };
    let mut volume_fds = Vec::with_capacity(spec.volumes.len());
    for disk in &spec.volumes {
        if inside(&spec.run_dir, &disk.path) {
            give(&disk.path, uid)?;
            volume_fds.push(None);
            continue;
        }
        // Read-write too for a read-only volume: its node is reopened writable for a resize.
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&disk.path)?;
        let ro = std::fs::File::open(&disk.path)?;
        volume_fds.push(Some([rw.as_raw_fd(), ro.as_raw_fd()]));
        held.push(OwnedFd::from(rw));
        held.push(OwnedFd::from(ro));
    }
    Ok((
        Confined {
            uid,
            landlock,
            volume_fds,
        },
        held,
    ))
}

/// What a Landlock-confined start needs from the driver.
#[derive(Debug)]
pub(crate) struct Landlock<'a> {
    /// Cold boot (the kernel is opened) or a restore.
    pub boot: bool,
    /// The rule set being built; the caller applies it in the child.
    pub rules: &'a mut crate::landlock::Ruleset,
}

/// Readies a VM process that runs as `uid` from its first instruction, under the rules it gets
/// here: its installation readable, its run directory's files (which it cannot create in:
/// the directory is root's) and a few devices readable and writable, the files it maps or
/// loads from elsewhere readable through descriptors it inherits. Binds its two sockets.
fn landlocked(
    spec: &VmSpec,
    uid: u32,
    l: Landlock<'_>,
    held: &mut Vec<OwnedFd>,
) -> Result<Inherited, VmError> {
    use crate::landlock::Access;
    use std::os::fd::{AsFd, AsRawFd};
    let rules = l.rules;
    // Its console log: its own file, appended to across restores.
    let console = spec.run_dir.join(crate::argv::CONSOLE_LOG);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&console)?;
    give(&console, uid)?;

    let mut keep = |file: std::fs::File, access: Access| -> Result<std::os::fd::RawFd, VmError> {
        rules.allow_fd(file.as_fd(), false, access)?;
        let fd = file.as_raw_fd();
        held.push(OwnedFd::from(file));
        Ok(fd)
    };
    let memory = match &spec.memory {
        pandastack_vm::Memory::SharedFile(p) => {
            // Written through by the VM, and mapped read-only by others (a bake's memory
            // becomes its template's): the VM's own, readable by all who can reach it. A
            // bake's is made here: QEMU, not root, cannot create it.
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(p)?;
            give_shared(p, uid)?;
            match inside(&spec.run_dir, p) {
                true => None,
                false => Some(keep(
                    std::fs::OpenOptions::new().read(true).write(true).open(p)?,
                    Access::ReadWrite,
                )?),
            }
        }
        pandastack_vm::Memory::PrivateFile(p) if !inside(&spec.run_dir, p) => {
            Some(keep(std::fs::File::open(p)?, Access::Read)?)
        }
        _ => None,
    };
    let kernel = match l.boot && !inside(&spec.run_dir, &spec.kernel) {
        true => Some(keep(std::fs::File::open(&spec.kernel)?, Access::Read)?),
        false => None,
    };
    let mut listen = |name: &str| -> Result<std::os::fd::RawFd, VmError> {
        let path = spec.run_dir.join(name);
        let _ = std::fs::remove_file(&path);
        let socket = std::os::unix::net::UnixListener::bind(&path)?;
        let fd = socket.as_raw_fd();
        held.push(OwnedFd::from(socket));
        Ok(fd)
    };
    let qmp = listen(crate::argv::QMP_SOCKET)?;
    let agent = listen(crate::argv::AGENT_SOCKET)?;
    let tap = match &spec.net {
        Some(net) => {
            let fd = open_tap(&net.tap, net.netns.as_deref())?;
            let raw = fd.as_raw_fd();
            held.push(fd);
            Some(raw)
        }
        None => None,
    };
    Ok(Inherited {
        qmp,
        agent,
        kernel,
        memory,
        tap,
    })
}

/// Attaches to the persistent TAP `name` (in network namespace `netns` when given) as root and
/// returns its queue: the VM process, which may not open `/dev/net/tun` (root's, 0600 on many
/// hosts), gets it as a descriptor (`-netdev tap,fd=N`). Flags as QEMU sets them itself
/// (`IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`): whether the peer has virtio-net headers decides the
/// NIC's features, which are part of the state a restore loads.
fn open_tap(name: &str, netns: Option<&Path>) -> Result<OwnedFd, VmError> {
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    const IFF_TAP: libc::c_short = 0x0002;
    const IFF_NO_PI: libc::c_short = 0x1000;
    const IFF_VNET_HDR: libc::c_short = 0x4000;
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(VmError::InvalidSpec(format!("tap name {name:?}")));
    }
    let name = name.to_owned();
    let ns = netns
        .map(|p| {
            std::fs::File::open(p).map_err(|e| {
                VmError::InvalidSpec(format!("network namespace {}: {e}", p.display()))
            })
        })
        .transpose()?;
    // A network namespace belongs to a thread: the TAP is looked up by name in the opener's,
    // so a short-lived thread enters the slot's and opens it there.
    let open = move || -> std::io::Result<OwnedFd> {
        use std::os::fd::{AsRawFd, FromRawFd};
        if let Some(ns) = &ns {
            // SAFETY: setns on an open namespace descriptor; it affects only this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } == -1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let tun = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq` (40 bytes), which `req` is.
        if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } == -1 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("attach to tap {name}: {e}"),
            ));
        }
        // SAFETY: the descriptor is moved out of `tun`, which no longer owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(tun)) })
    };
    std::thread::scope(|s| s.spawn(open).join())
        .map_err(|_| VmError::Spawn(std::io::Error::other("tap thread panicked")))?
        .map_err(VmError::Spawn)
}

/// The group that may open `/dev/kvm`, when it is not root's and may read and write it: a VM
/// process that runs KVM guests as its own uid gets it as a supplementary group. `None`: only
/// root may (then such a process cannot use KVM).
pub(crate) fn kvm_group() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/dev/kvm").ok()?;
    (m.gid() != 0 && m.mode() & 0o060 == 0o060).then_some(m.gid())
}

/// The Landlock rules every VM process running `binary` in `run_dir` gets: its installation
/// (and the system's libraries) readable and executable, the dynamic loader's cache readable,
/// the files of its run directory, `/dev/kvm` and `/dev/null` readable and writable. Nothing else of the
/// host is reachable by name: not `/etc`, not `/proc`, not another VM's directory.
pub fn base_rules(run_dir: &Path, binary: &Path) -> Result<crate::landlock::Ruleset, VmError> {
    use crate::landlock::Access;
    let mut rules = crate::landlock::Ruleset::new()?;
    let install = crate::process::resolve(binary)
        .ok()
        .and_then(|b| std::fs::canonicalize(b).ok())
        .and_then(|b| b.parent()?.parent().map(Path::to_owned))
        .filter(|p| p.parent().is_some());
    for dir in ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"]
        .iter()
        .map(PathBuf::from)
        .chain(install)
    {
        rules.allow(&dir, Access::ReadExecute)?;
    }
    rules.allow(Path::new("/etc/ld.so.cache"), Access::Read)?;
    for dev in ["/dev/kvm", "/dev/null"] {
        rules.allow(Path::new(dev), Access::ReadWrite)?;
    }
    for dev in ["/dev/urandom", "/dev/random", "/dev/zero"] {
        rules.allow(Path::new(dev), Access::Read)?;
    }
    rules.allow(run_dir, Access::ReadWrite)?;
    Ok(rules)
}

/// Gives `path` to `uid`, readable by everyone who can reach it.
fn give_shared(path: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
}

/// True when `path` is directly inside `dir`.
pub(crate) fn inside(dir: &Path, path: &Path) -> bool {
    path.parent() == Some(dir)
}

/// Makes `state` loadable by a confined VM in `run_dir`: returns the name the process opens
/// (relative to its run directory, its working directory whether chrooted or not) and the copy
/// made for it (to remove once loaded), if one was needed. A state
/// outside the run directory is reflinked in — a copy, not a hard link, so the shared file's
/// inode is not touched (its ctime is how tests see that no VM wrote it) — or hard-linked where
/// the file system has no reflinks, or copied across file systems. It is root's and readable
/// by others: nothing but root's processes and the VM whose directory holds it can reach it.
pub(crate) fn loadable(run_dir: &Path, state: &Path) -> Result<(String, Option<PathBuf>), VmError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(state)?;
    if meta.permissions().mode() & 0o004 == 0 {
        take_back(state)?;
    }
    if let (true, Some(name)) = (inside(run_dir, state), state.file_name()) {
        return Ok((name.to_string_lossy().into_owned(), None));
    }
    let copy = run_dir.join(LOADING);
    let _ = std::fs::remove_file(&copy);
    let cloned = (|| {
        let src = std::fs::File::open(state)?;
        let dst = std::fs::File::create(&copy)?;
        rustix::fs::ioctl_ficlone(&dst, &src).map_err(std::io::Error::from)
    })();
    if cloned.is_err() {
        // No reflinks here: a hard link (the shared inode's ctime moves, nothing else), and
        // only across file systems a copy.
        let _ = std::fs::remove_file(&copy);
        if std::fs::hard_link(state, &copy).is_err() {
            std::fs::copy(state, &copy)?;
        }
    }
    take_back(&copy)?;
    Ok((LOADING.to_owned(), Some(copy)))
}

/// Moves `from` to `to` (replacing it): a rename, or a copy across file systems.
pub(crate) fn move_file(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(from, to)?;
            std::fs::remove_file(from)
        }
        other => other,
    }
}

/// `path` escaped for a QEMU option value (a comma is written twice).
pub(crate) fn opt_escape(path: &Path) -> String {
    path.to_string_lossy().replace(',', ",,")
}

/// Gives `path` to `uid` (its gid is the same number), readable and writable by it alone.
pub(crate) fn give(path: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Takes `path` back for root, readable by everyone who can reach it (a snapshot's state is
/// loaded by VM processes of other uids, each through a link in its own run directory) and
/// writable by nobody else.
pub(crate) fn take_back(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, Some(0), Some(0))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
}

/// The uid of a running process, from `/proc`.
pub(crate) fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges() {
        assert_eq!(
            VmIdentities::parse_range("4200000-4265535"),
            Ok((4_200_000, 65_536))
        );
        assert_eq!(VmIdentities::parse_range("7-7"), Ok((7, 1)));
        assert!(VmIdentities::parse_range("0-10").is_err());
        assert!(VmIdentities::parse_range("10-9").is_err());
        assert!(VmIdentities::parse_range("10").is_err());
    }

    #[test]
    fn a_claimed_uid_is_not_handed_out_again_until_its_lock_goes() {
        let dir = tempfile::tempdir().unwrap();
        let ids = VmIdentities::new(5000, 2, dir.path()).unwrap();
        let a = ids.claim().unwrap();
        let b = ids.claim().unwrap();
        assert_ne!(a.uid, b.uid);
        assert!(ids.claim().is_err(), "both uids are held");
        let freed = a.uid;
        drop(a);
        let c = ids.claim().unwrap();
        assert_eq!(c.uid, freed);
        // A second pool over the same lock directory (another server) sees the same claims.
        let other = VmIdentities::new(5000, 2, dir.path()).unwrap();
        assert!(
            other.claim().is_err(),
            "both uids are held by the first pool"
        );
        drop(b);
        assert_eq!(other.claim().unwrap().uid, 5000 + 5001 - c.uid);
    }

    #[test]
    fn escapes_commas() {
        assert_eq!(opt_escape(Path::new("/a,b/c")), "/a,,b/c");
    }
}
