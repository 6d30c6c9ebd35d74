//! [`HostError`] across the link: a status with a code (for logs and other clients) and, in its
//! details, a [`pb::HostErrorDetail`] from which the caller rebuilds the same variant. A status
//! without one (the link itself failed: no connection, a reset stream) becomes
//! [`HostError::Failed`] with the status as its source.

use std::collections::BTreeSet;
use std::sync::Mutex;

use pandastack_host::{GuestErrorKind, HostError};
use prost::Message;
use tonic::{Code, Status};

use crate::convert::{state_from_pb, state_to_pb};
use crate::pb;
use crate::pb::host_error_detail::Error as D;

/// What a call that failed on the link itself (not on the host) names as its `what`.
const LINK: &str = "agent link";

/// The status that carries `e`.
pub fn to_status(e: &HostError) -> Status {
    let (code, detail) = match e {
        HostError::SandboxNotFound(id) => (Code::NotFound, D::SandboxNotFound(id.clone())),
        HostError::TemplateNotFound(id) => (Code::NotFound, D::TemplateNotFound(id.clone())),
        HostError::SnapshotNotFound(id) => (Code::NotFound, D::SnapshotNotFound(id.clone())),
        HostError::VolumeNotFound(id) => (Code::NotFound, D::VolumeNotFound(id.clone())),
        HostError::VolumeSnapshotNotFound(id) => {
            (Code::NotFound, D::VolumeSnapshotNotFound(id.clone()))
        }
        HostError::TooManyVolumes {
            template,
            slots,
            wanted,
        } => (
            Code::InvalidArgument,
            D::TooManyVolumes(pb::TooManyVolumes {
                template: template.clone(),
                slots: *slots as u64,
                wanted: *wanted as u64,
            }),
        ),
        HostError::InvalidState { id, state, op } => (
            Code::FailedPrecondition,
            D::InvalidState(pb::InvalidState {
                id: id.clone(),
                state: state_to_pb(*state) as i32,
                op: (*op).to_owned(),
            }),
        ),
        HostError::VmExited(id) => (Code::FailedPrecondition, D::VmExited(id.clone())),
        HostError::CutOff { id, state } => (
            Code::Aborted,
            D::CutOff(pb::CutOff {
                id: id.clone(),
                state: state_to_pb(*state) as i32,
            }),
        ),
        HostError::Guest { kind, message } => (
            guest_code(*kind),
            D::Guest(pb::GuestError {
                kind: guest_kind_to_pb(*kind) as i32,
                message: message.clone(),
            }),
        ),
        HostError::BuildFailed(m) => (Code::FailedPrecondition, D::BuildFailed(m.clone())),
        // Only a replica's fleet says this of a host; an agent never does, but one relaying it
        // keeps the cause chain.
        HostError::Unreachable { source, .. } | HostError::Failed { source, .. } => {
            let what = match e {
                HostError::Failed { what, .. } => *what,
                _ => "host unreachable",
            };
            let mut causes = Vec::new();
            let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
            while let Some(c) = cur {
                causes.push(c.to_string());
                cur = c.source();
            }
            (
                Code::Internal,
                D::Failed(pb::Failed {
                    what: what.to_owned(),
                    causes,
                }),
            )
        }
    };
    let detail = pb::HostErrorDetail {
        error: Some(detail),
    };
    Status::with_details(code, e.to_string(), detail.encode_to_vec().into())
}

/// The [`HostError`] `status` carries; a status without one is a failure of the link.
pub fn from_status(status: Status) -> HostError {
    let Some(detail) = pb::HostErrorDetail::decode(status.details())
        .ok()
        .and_then(|d| d.error)
    else {
        return HostError::failed(LINK, status);
    };
    match detail {
        D::SandboxNotFound(id) => HostError::SandboxNotFound(id),
        D::TemplateNotFound(id) => HostError::TemplateNotFound(id),
        D::SnapshotNotFound(id) => HostError::SnapshotNotFound(id),
        D::VolumeNotFound(id) => HostError::VolumeNotFound(id),
        D::VolumeSnapshotNotFound(id) => HostError::VolumeSnapshotNotFound(id),
        D::TooManyVolumes(t) => HostError::TooManyVolumes {
            template: t.template,
            slots: t.slots as usize,
            wanted: t.wanted as usize,
        },
        D::InvalidState(s) => match state_from_pb(s.state) {
            Some(state) => HostError::InvalidState {
                id: s.id,
                state,
                op: intern(&s.op),
            },
            None => HostError::failed(LINK, status),
        },
        D::VmExited(id) => HostError::VmExited(id),
        D::CutOff(c) => match state_from_pb(c.state) {
            Some(state) => HostError::CutOff { id: c.id, state },
            None => HostError::failed(LINK, status),
        },
        D::Guest(g) => HostError::Guest {
            kind: guest_kind_from_pb(g.kind),
            message: g.message,
        },
        D::BuildFailed(m) => HostError::BuildFailed(m),
        D::Failed(f) => HostError::Failed {
            what: intern(&f.what),
            source: Box::new(RemoteCause::chain(f.causes)),
        },
    }
}

/// One cause of a [`HostError::Failed`] as the agent's host reported it: its message, and the
/// cause under it. The chain prints as it did on the agent ([`pandastack_host::error_chain`]).
#[derive(Debug)]
pub struct RemoteCause {
    message: String,
    source: Option<Box<RemoteCause>>,
}

impl RemoteCause {
    fn chain(causes: Vec<String>) -> RemoteCause {
        let mut out: Option<RemoteCause> = None;
        for message in causes.into_iter().rev() {
            out = Some(RemoteCause {
                message,
                source: out.map(Box::new),
            });
        }
        out.unwrap_or(RemoteCause {
            message: String::new(),
            source: None,
        })
    }
}

impl std::fmt::Display for RemoteCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RemoteCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// Distinct names [`intern`] keeps before it stops keeping new ones.
const MAX_INTERNED: usize = 4096;

/// `s` as a `&'static str`, for the fields of [`HostError`] that hold one (an operation's
/// name, chosen from the host's code). Each distinct name is leaked once and reused; past
/// [`MAX_INTERNED`] of them (not a set of names any host has) a fixed name stands in, so a
/// peer cannot grow this without bound.
pub(crate) fn intern(s: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    // A caller acts on this one (it retries), so it is never lost to the cap below.
    if s == pandastack_host::WAKE_WHILE_MOVING {
        return pandastack_host::WAKE_WHILE_MOVING;
    }
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = names.get(s) {
        return name;
    }
    if names.len() >= MAX_INTERNED {
        return "(remote operation)";
    }
    let name: &'static str = Box::leak(s.to_owned().into_boxed_str());
    names.insert(name);
    name
}

fn guest_code(kind: GuestErrorKind) -> Code {
    match kind {
        GuestErrorKind::NotFound => Code::NotFound,
        GuestErrorKind::InvalidArgument => Code::InvalidArgument,
        GuestErrorKind::AlreadyExists => Code::AlreadyExists,
        GuestErrorKind::NoSpace => Code::ResourceExhausted,
        GuestErrorKind::PermissionDenied => Code::PermissionDenied,
        GuestErrorKind::Unavailable => Code::Unavailable,
        GuestErrorKind::Other => Code::Unknown,
    }
}

fn guest_kind_to_pb(kind: GuestErrorKind) -> pb::GuestErrorKind {
    match kind {
        GuestErrorKind::NotFound => pb::GuestErrorKind::NotFound,
        GuestErrorKind::InvalidArgument => pb::GuestErrorKind::InvalidArgument,
        GuestErrorKind::AlreadyExists => pb::GuestErrorKind::AlreadyExists,
        GuestErrorKind::NoSpace => pb::GuestErrorKind::NoSpace,
        GuestErrorKind::PermissionDenied => pb::GuestErrorKind::PermissionDenied,
        GuestErrorKind::Unavailable => pb::GuestErrorKind::Unavailable,
        GuestErrorKind::Other => pb::GuestErrorKind::Other,
    }
}

/// A kind this side does not know (a newer agent's) is [`GuestErrorKind::Other`].
fn guest_kind_from_pb(kind: i32) -> GuestErrorKind {
    match pb::GuestErrorKind::try_from(kind) {
        Ok(pb::GuestErrorKind::NotFound) => GuestErrorKind::NotFound,
        Ok(pb::GuestErrorKind::InvalidArgument) => GuestErrorKind::InvalidArgument,
        Ok(pb::GuestErrorKind::AlreadyExists) => GuestErrorKind::AlreadyExists,
        Ok(pb::GuestErrorKind::NoSpace) => GuestErrorKind::NoSpace,
        Ok(pb::GuestErrorKind::PermissionDenied) => GuestErrorKind::PermissionDenied,
        Ok(pb::GuestErrorKind::Unavailable) => GuestErrorKind::Unavailable,
        _ => GuestErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pandastack_host::{error_chain, VmState};

    /// One of every variant, every guest kind and state included.
    pub(crate) fn every_error() -> Vec<HostError> {
        let io = std::io::Error::other("disk on fire");
        let mut all = vec![
            HostError::SandboxNotFound("sb-1".into()),
            HostError::TemplateNotFound("tpl".into()),
            HostError::SnapshotNotFound("snap".into()),
            HostError::VolumeNotFound("vol".into()),
            HostError::VolumeSnapshotNotFound("vsnap".into()),
            HostError::TooManyVolumes {
                template: "tpl".into(),
                slots: 2,
                wanted: 3,
            },
            HostError::VmExited("sb-2".into()),
            HostError::BuildFailed("step 3 failed".into()),
            HostError::failed("create", io),
        ];
        for state in [
            VmState::Running,
            VmState::Paused,
            VmState::Hibernated,
            VmState::Exited,
        ] {
            all.push(HostError::InvalidState {
                id: "sb".into(),
                state,
                op: "pause",
            });
            all.push(HostError::CutOff {
                id: "sb".into(),
                state,
            });
        }
        for kind in [
            GuestErrorKind::NotFound,
            GuestErrorKind::InvalidArgument,
            GuestErrorKind::AlreadyExists,
            GuestErrorKind::NoSpace,
            GuestErrorKind::PermissionDenied,
            GuestErrorKind::Unavailable,
            GuestErrorKind::Other,
        ] {
            all.push(HostError::guest(kind, "no such file"));
        }
        all
    }

    #[test]
    fn every_variant_comes_back_as_itself() {
        for e in every_error() {
            let back = from_status(to_status(&e));
            // Debug shows the variant and every field (a Failed's source only as a type, so its
            // chain is compared as text).
            match (&e, &back) {
                (HostError::Failed { what: a, .. }, HostError::Failed { what: b, .. }) => {
                    assert_eq!(a, b);
                    assert_eq!(error_chain(&e), error_chain(&back));
                }
                _ => assert_eq!(format!("{e:?}"), format!("{back:?}")),
            }
        }
    }

    #[test]
    fn a_status_without_detail_is_a_link_failure() {
        let e = from_status(Status::unavailable("connection refused"));
        assert!(matches!(e, HostError::Failed { what: LINK, .. }), "{e:?}");
    }

    #[test]
    fn failed_keeps_its_whole_chain() {
        let inner = std::io::Error::other("no space left on device");
        let outer = HostError::failed("bake", inner);
        let back = from_status(to_status(&outer));
        assert_eq!(error_chain(&back), "bake: no space left on device");
    }
}
