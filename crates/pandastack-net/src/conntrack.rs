//! Flushing the conntrack table of the calling thread's network namespace over ctnetlink.
//!
//! One `IPCTNL_MSG_CT_DELETE` request without a tuple is the kernel's "flush" (what
//! `conntrack -F` sends). The conntrack table is per network namespace, so from inside a slot
//! namespace this drops exactly that slot's flows (and their NAT bindings) and nothing else.

use nix::sys::socket::{
    bind, recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr,
    SockFlag, SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

use crate::error::{NetError, Result};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 0x2;

/// Outcome of a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConntrackFlush {
    /// The namespace's conntrack table was flushed.
    Flushed,
    /// The kernel has no ctnetlink (`CONFIG_NF_CT_NETLINK`): nothing flushed.
    Unsupported,
}

/// Flushes every conntrack entry (all families) of the calling thread's network namespace.
pub(crate) fn flush_current_netns() -> Result<ConntrackFlush> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(|e| NetError::errno("socket(NETLINK_NETFILTER)", e))?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &NetlinkAddr::new(0, 0),
    )
    .map_err(|e| NetError::errno("bind netfilter netlink socket", e))?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(5, 0))
        .map_err(|e| NetError::errno("SO_RCVTIMEO", e))?;

    // nlmsghdr (16 bytes) + nfgenmsg (4 bytes: family AF_UNSPEC, version 0, res_id 0).
    // Version 0 with no tuple attribute means "flush all families".
    let mut msg = [0u8; 20];
    msg[0..4].copy_from_slice(&20u32.to_ne_bytes());
    msg[4..6].copy_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE).to_ne_bytes());
    msg[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &msg,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| NetError::errno("send conntrack flush", e))?;

    let mut buf = [0u8; 4096];
    let n = recv(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &mut buf,
        MsgFlags::empty(),
    )
    .map_err(|e| NetError::errno("receive conntrack flush ack", e))?;
    if n < 20 {
        return Err(NetError::io(
            "conntrack flush ack",
            std::io::Error::new(std::io::ErrorKind::InvalidData, "short netlink reply"),
        ));
    }
    let ty = u16::from_ne_bytes([buf[4], buf[5]]);
    if ty != NLMSG_ERROR {
        return Err(NetError::io(
            "conntrack flush ack",
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unexpected netlink message type {ty}"),
            ),
        ));
    }
    let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    match -code {
        0 => Ok(ConntrackFlush::Flushed),
        libc::EOPNOTSUPP | libc::EPROTONOSUPPORT => Ok(ConntrackFlush::Unsupported),
        errno => Err(NetError::io(
            "conntrack flush",
            std::io::Error::from_raw_os_error(errno),
        )),
    }
}
