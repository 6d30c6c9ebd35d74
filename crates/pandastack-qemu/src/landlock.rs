//! Landlock rule sets for VM processes: what files a confined QEMU may open once it runs as its
//! own uid without a single capability (see [`crate::confine`]).
//!
//! The kernel interface is three system calls and two small structures (`landlock(7)`); the rule
//! set is built here, in the host process, and only applied (`landlock_restrict_self`) in the
//! child between fork and exec, where nothing may allocate. The `landlock` crate applies a rule
//! set to the calling thread only, through calls that allocate, so it cannot be used there.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

// From include/uapi/linux/landlock.h.
const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
/// The file rights of ABI 1 (`EXECUTE` … `MAKE_SYM`).
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version this kernel offers, `None` where Landlock is not built in or not
/// enabled. Asked once per process.
pub fn abi() -> Option<u32> {
    static ABI: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: with a null attribute, size 0 and the VERSION flag the call only returns the
        // ABI version; it reads and writes no memory.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        (v >= 1).then_some(v as u32)
    })
}

/// What a rule grants beneath a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Run and read files, list directories (the QEMU binary, its libraries and firmware).
    ReadExecute,
    /// Read files (a kernel, a template's memory).
    Read,
    /// Read and write existing files, devices included (its run directory, `/dev/kvm`).
    ReadWrite,
}

/// A rule set being built: every file right the kernel knows is handled (so denied unless a
/// rule grants it), TCP bind and connect are denied (QEMU has no TCP to do), and from ABI 6 on
/// the process can neither signal nor reach abstract unix sockets outside its own domain.
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
    handled: u64,
}

impl Ruleset {
    pub fn new() -> std::io::Result<Self> {
        let abi = abi().ok_or_else(|| std::io::Error::other("landlock is not available"))?;
        let mut handled = FS_ABI1;
        if abi >= 2 {
            handled |= FS_REFER;
        }
        if abi >= 3 {
            handled |= FS_TRUNCATE;
        }
        if abi >= 5 {
            handled |= FS_IOCTL_DEV;
        }
        let attr = RulesetAttr {
            handled_access_fs: handled,
            handled_access_net: if abi >= 4 {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        // The structure grew with the ABI: hand over only the fields this kernel knows.
        let size = match abi {
            1..=3 => 8,
            4 | 5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: `attr` is a live, initialised structure of at least `size` bytes, which the
        // kernel only reads during the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the call returned a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Self { fd, handled })
    }

    /// Grants `access` beneath `path` (or to `path` itself when it is a file). A path that does
    /// not exist is skipped: not every host has `/lib64` or `/dev/kvm`.
    pub fn allow(&mut self, path: &Path, access: Access) -> std::io::Result<()> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        self.allow_fd(file.as_fd(), file.metadata()?.is_dir(), access)
    }

    /// Grants `access` to the file or directory open as `fd`.
    pub fn allow_fd(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        is_dir: bool,
        access: Access,
    ) -> std::io::Result<()> {
        let mut rights = match access {
            Access::ReadExecute => FS_EXECUTE | FS_READ_FILE | FS_READ_DIR,
            Access::Read => FS_READ_FILE | FS_READ_DIR,
            Access::ReadWrite => {
                FS_READ_FILE | FS_READ_DIR | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
            }
        };
        if !is_dir {
            // A rule on a file may only carry the rights that apply to files.
            rights &= FS_EXECUTE | FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
        }
        let attr = PathBeneathAttr {
            allowed_access: rights & self.handled,
            parent_fd: fd.as_raw_fd(),
        };
        // SAFETY: `attr` is a live, initialised structure the kernel only reads during the
        // call, and both descriptors stay open for its duration.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The rule set's descriptor, to apply with [`restrict_self`] in a child before exec.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// Applies the rule set `fd` to the calling thread (and what it executes). Needs
/// `no_new_privs`. Makes one system call and allocates nothing: safe between fork and exec.
pub fn restrict_self(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: a plain system call on a descriptor number; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
