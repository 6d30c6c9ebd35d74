//! Named network namespaces (`/run/netns/<name>`, compatible with `ip netns`) and the
//! thread discipline for entering them.
//!
//! A network namespace is a property of a *thread* (`setns(2)`/`unshare(2)` with `CLONE_NEWNET`
//! only change the calling thread). Every operation that must happen inside a namespace runs
//! on a fresh OS thread that is discarded afterwards, so no tokio worker or caller thread is
//! ever left in a slot namespace. Sockets (netlink, conntrack) and TUN devices are bound to the
//! namespace of the thread that creates them, and child processes inherit the namespace of the
//! thread that forks them.

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::stat::Mode;

use crate::error::{NetError, Result};
use crate::NETNS_DIR;

/// Makes sure `/run/netns` exists and is a shared mount point, exactly like `ip netns add`
/// does, so namespace bind mounts made here propagate to other mount namespaces (and the
/// namespaces show up in `ip netns list`).
pub(crate) fn ensure_netns_dir() -> Result<()> {
    fs::create_dir_all(NETNS_DIR).map_err(|e| NetError::io(format!("mkdir {NETNS_DIR}"), e))?;
    let make_shared = || {
        mount(
            None::<&str>,
            NETNS_DIR,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match make_shared() {
        Ok(()) => Ok(()),
        Err(Errno::EINVAL) => {
            // Not a mount point yet: bind it onto itself first (iproute2 does the same).
            mount(
                Some(NETNS_DIR),
                NETNS_DIR,
                Some("none"),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| NetError::errno(format!("bind-mount {NETNS_DIR}"), e))?;
            make_shared().map_err(|e| NetError::errno(format!("make {NETNS_DIR} shared"), e))
        }
        Err(e) => Err(NetError::errno(format!("make {NETNS_DIR} shared"), e)),
    }
}

/// Creates a new network namespace, pins it at `path` with a bind mount and leaves the
/// *calling thread* inside it. Only call this on a disposable thread.
pub(crate) fn create_and_enter(path: &Path) -> Result<()> {
    let create = || {
        open(
            path,
            OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    };
    let fd = match create() {
        Ok(fd) => fd,
        Err(Errno::EEXIST) => {
            // A leftover of an earlier crash: this index is ours, clear it and retry.
            delete(path)?;
            create().map_err(|e| NetError::errno(format!("create {}", path.display()), e))?
        }
        Err(e) => return Err(NetError::errno(format!("create {}", path.display()), e)),
    };
    drop(fd);
    let res = unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|e| NetError::errno("unshare(CLONE_NEWNET)", e))
        .and_then(|()| {
            // /proc/thread-self, not /proc/self: only this thread is in the new namespace.
            mount(
                Some("/proc/thread-self/ns/net"),
                path,
                Some("none"),
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| NetError::errno(format!("bind-mount netns at {}", path.display()), e))
        });
    if res.is_err() {
        let _ = fs::remove_file(path);
    }
    res
}

/// Unpins and removes a named namespace. The namespace itself is freed by the kernel once no
/// process, socket or open fd references it. Missing files are not an error.
pub(crate) fn delete(path: &Path) -> Result<()> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(NetError::errno(format!("umount {}", path.display()), e)),
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(NetError::io(format!("remove {}", path.display()), e)),
    }
}

/// Whether `path` is a mounted namespace file (nsfs), i.e. a live pinned namespace.
pub(crate) fn is_pinned(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .map(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
        .unwrap_or(false)
}

/// Opens a namespace file (`O_CLOEXEC`, so the fd never leaks into exec'd children).
pub(crate) fn open_ns(path: &Path) -> Result<OwnedFd> {
    open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| NetError::errno(format!("open {}", path.display()), e))
}

/// Moves the calling thread into the network namespace `fd` refers to.
///
/// Async-signal-safe (one `setns(2)` call, no allocation), so it may be called from a
/// `std::os::unix::process::CommandExt::pre_exec` closure with an fd opened *before* the fork
/// (see [`crate::Slot::enter_hook`]). Needs `CAP_SYS_ADMIN`: call it before any privilege
/// drop. Note that `Command::uid`/`gid` are applied by std *before* `pre_exec` closures run,
/// so combine a `pre_exec` namespace switch with your own privilege drop, or spawn from a
/// thread already in the namespace instead ([`crate::Slot::run_in_netns`]), which works with
/// `Command::uid`.
pub fn setns_fd(fd: BorrowedFd<'_>) -> io::Result<()> {
    setns(fd, CloneFlags::CLONE_NEWNET).map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// Moves the calling thread into the named namespace. Disposable threads only.
pub(crate) fn enter(path: &Path) -> Result<()> {
    let fd = open_ns(path)?;
    setns_fd(fd.as_fd()).map_err(|e| NetError::io(format!("setns {}", path.display()), e))
}

/// Runs `f` on a fresh, scoped OS thread that first enters the namespace at `path`. The thread
/// ends with `f`, so the namespace switch never leaks. Blocks the caller until `f` returns.
pub fn run_in_netns<R, F>(path: &Path, f: F) -> Result<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let ns = open_ns(path)?;
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("ps-netns".into())
            .spawn_scoped(s, move || {
                setns_fd(ns.as_fd()).map_err(|e| NetError::io("setns", e))?;
                drop(ns);
                Ok(f())
            })
            .map_err(|e| NetError::io("spawn netns thread", e))?;
        h.join().map_err(|_| NetError::ThreadPanicked)?
    })
}

/// Runs `f` on a fresh, detached OS thread and awaits its result without blocking the async
/// runtime. `f` may change its thread's namespaces freely.
pub(crate) async fn on_fresh_thread<R, F>(name: &str, f: F) -> Result<R>
where
    F: FnOnce() -> Result<R> + Send + 'static,
    R: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| NetError::io("spawn network helper thread", e))?;
    rx.await.map_err(|_| NetError::ThreadPanicked)?
}

/// Lists `(name, index)` of `/run/netns` entries named `<prefix><digits>`.
pub(crate) fn list_prefixed(prefix: &str) -> Result<Vec<(String, u32)>> {
    let rd = match fs::read_dir(NETNS_DIR) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(NetError::io(format!("read {NETNS_DIR}"), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| NetError::io(format!("read {NETNS_DIR}"), e))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if let Some(i) = crate::parse_index(&name, prefix) {
            out.push((name, i));
        }
    }
    out.sort_by_key(|(_, i)| *i);
    Ok(out)
}

/// Writes a sysctl through `/proc/sys` (resolved in the calling thread's network namespace for
/// `net.*` keys). `Ok(false)` if the key does not exist (e.g. IPv6 compiled out).
pub(crate) fn write_sysctl(path: &str, value: &str) -> Result<bool> {
    match fs::write(path, value) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(NetError::io(format!("write {path}"), e)),
    }
}
