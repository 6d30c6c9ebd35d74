//! Persistent TAP devices via `/dev/net/tun` (`TUNSETIFF`, `TUNSETOWNER`, `TUNSETPERSIST`).
//!
//! TAP devices cannot be created over rtnetlink (the tun driver refuses `RTM_NEWLINK`), so the
//! ioctl interface is used. The device is created in the network namespace of the thread that
//! opens `/dev/net/tun`, and is attached *by name within that namespace*, which is why QEMU
//! must either run inside the slot namespace (`-netdev tap,ifname=tap0,script=no,downscript=no`)
//! or receive an fd from [`open`] (`-netdev tap,fd=N`).

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::error::{NetError, Result};

/// `struct ifreq` restricted to the part `TUNSETIFF` uses: the name and `ifr_flags`.
#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

// `struct ifreq` is 40 bytes on Linux (16-byte name + 24-byte union).
const _: () = assert!(std::mem::size_of::<IfReqFlags>() == 40);

fn ifreq(name: &str, flags: libc::c_int) -> Result<IfReqFlags> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(NetError::Config(format!("bad interface name {name:?}")));
    }
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: flags as libc::c_short,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn open_tun() -> Result<std::fs::File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .map_err(|e| NetError::io("open /dev/net/tun", e))
}

/// Attaches to (creating if absent) TAP `name` in the calling thread's network namespace.
fn set_iff(file: &std::fs::File, name: &str, flags: libc::c_int) -> Result<()> {
    let mut req = ifreq(name, flags)?;
    // SAFETY: `file` is an open /dev/net/tun fd; TUNSETIFF reads and writes a `struct ifreq`,
    // and `req` is a properly initialised, 40-byte, `repr(C)` ifreq that lives across the call.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETIFF,
            &mut req as *mut IfReqFlags,
        )
    };
    if rc < 0 {
        return Err(NetError::io(
            format!("TUNSETIFF {name}"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn ioctl_int(file: &std::fs::File, req: libc::Ioctl, arg: libc::c_ulong, what: &str) -> Result<()> {
    // SAFETY: `file` is an open, attached /dev/net/tun fd; TUNSETOWNER/TUNSETGROUP/TUNSETPERSIST
    // take their argument by value (an integer), no memory is passed to the kernel.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), req, arg) };
    if rc < 0 {
        return Err(NetError::io(what, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Creates a persistent, single-queue TAP `name` (`IFF_TAP | IFF_NO_PI`) in the calling
/// thread's namespace, owned by `owner`/`group` when given. The device outlives the fd.
pub(crate) fn create_persistent(name: &str, owner: Option<u32>, group: Option<u32>) -> Result<()> {
    let f = open_tun()?;
    set_iff(&f, name, libc::IFF_TAP | libc::IFF_NO_PI)?;
    if let Some(uid) = owner {
        ioctl_int(&f, libc::TUNSETOWNER, uid.into(), "TUNSETOWNER")?;
    }
    if let Some(gid) = group {
        ioctl_int(&f, libc::TUNSETGROUP, gid.into(), "TUNSETGROUP")?;
    }
    ioctl_int(&f, libc::TUNSETPERSIST, 1, "TUNSETPERSIST")?;
    Ok(())
}

/// Opens and attaches to the existing TAP `name` in the calling thread's namespace.
///
/// `vnet_hdr` must match what the consumer expects (QEMU: `-netdev tap,fd=N,vnet_hdr=on|off`).
/// The TAP is single-queue; while this fd is open no other process can attach (`EBUSY`).
pub(crate) fn open(name: &str, vnet_hdr: bool) -> Result<OwnedFd> {
    let f = open_tun()?;
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI;
    if vnet_hdr {
        flags |= libc::IFF_VNET_HDR;
    }
    set_iff(&f, name, flags)?;
    Ok(OwnedFd::from(f))
}
