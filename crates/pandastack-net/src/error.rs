//! Typed errors of the network-slot pool.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building, handing out or tearing down network slots.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A system call or file operation failed.
    #[error("{op}")]
    Io {
        /// What we were doing.
        op: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A netlink (rtnetlink) request failed.
    #[error("netlink {op}")]
    Netlink {
        /// What we were doing.
        op: String,
        /// The underlying error.
        #[source]
        source: rtnetlink::Error,
    },
    /// `nft -f -` rejected a ruleset or could not be run.
    #[error("nft ({context}) failed: {stderr}")]
    Nft {
        /// Which ruleset (slot or host table).
        context: String,
        /// nft's diagnostics.
        stderr: String,
    },
    /// The configuration is unusable.
    #[error("invalid network pool configuration: {0}")]
    Config(String),
    /// A string is not an IPv4 CIDR.
    #[error("invalid IPv4 CIDR {0:?}")]
    InvalidCidr(String),
    /// Every slot of the configured range exists and is in use.
    #[error("network pool exhausted: all {0} slots are in use")]
    Exhausted(u32),
    /// The slot is not handed out by this pool (double release, foreign slot).
    #[error("network slot {0} is not in use")]
    NotInUse(u32),
    /// The slot's TAP still has a process attached (QEMU still running): refusing to recycle it.
    #[error("network slot {0} is still in use: its TAP has a process attached")]
    SlotBusy(u32),
    /// Another process holds the pool's state directory.
    #[error("network pool state directory {0} is locked by another process")]
    Locked(PathBuf),
    /// The state file cannot be read or written.
    #[error("network pool state file {path}: {msg}")]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// A helper thread died.
    #[error("network helper thread panicked")]
    ThreadPanicked,
}

/// Result alias of this crate.
pub type Result<T, E = NetError> = std::result::Result<T, E>;

impl NetError {
    pub(crate) fn io(op: impl Into<String>, source: io::Error) -> Self {
        NetError::Io {
            op: op.into(),
            source,
        }
    }

    pub(crate) fn errno(op: impl Into<String>, e: nix::errno::Errno) -> Self {
        NetError::Io {
            op: op.into(),
            source: io::Error::from(e),
        }
    }

    pub(crate) fn netlink(op: impl Into<String>, source: rtnetlink::Error) -> Self {
        NetError::Netlink {
            op: op.into(),
            source,
        }
    }

    /// Whether this is a netlink error carrying the given errno.
    pub(crate) fn is_netlink_errno(&self, errno: i32) -> bool {
        matches!(self, NetError::Netlink { source: rtnetlink::Error::NetlinkError(m), .. } if m.raw_code().abs() == errno)
    }
}
