//! Commands cut off by what happened to their sandbox. An exec holds only a clone of the guest
//! channel, not the sandbox's lock, so a delete, a hibernate or the VM process ending on its own
//! (a guest power-off, a crash) can take the VM away under it; the call then sees a broken
//! HTTP/2 stream ("h2 protocol error", "transport error"), which says nothing about why. The
//! answer is read from the sandbox instead, once the operation that may have broken the stream
//! has ended (it holds the sandbox's lock while it stops the VM):
//!
//! ```text
//!   broken stream ─► wait for the sandbox's lock ─► gone ─────────────► SandboxNotFound
//!                                                 ├ VM process ended ─► VmExited
//!                                                 ├ hibernated/paused ► CutOff { state }
//!                                                 └ running ──────────► the stream's own error
//! ```
//!
//! A VM process killed from outside takes no lock, and its guest connection closes a moment
//! before the process is seen to have ended: a running VM is looked at again for
//! [`EXIT_GRACE`] before the stream's own error stands.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pandastack_host::{BoxStream, ExecEvent, GuestErrorKind, HostError, HostResult, VmState};
use pandastack_vm::VmDriver;

use crate::{AgentError, HostAgent};

/// How long a VM that still runs after its guest stream broke is watched for its end.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// How often it is looked at meanwhile.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// Whether `e` is a broken guest stream (a transport failure or a cut-off call) rather than an
/// answer of the guest agent about the request.
fn broken(e: &HostError) -> bool {
    matches!(
        e,
        HostError::Guest {
            kind: GuestErrorKind::Unavailable | GuestErrorKind::Other,
            ..
        }
    )
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Sandbox `id`'s state once the operation holding it (a delete, a hibernate, a stop of a
    /// powered-off guest), if any, has ended: [`VmState::Exited`] for a VM whose process has
    /// ended, [`AgentError::SandboxNotFound`] once it is deleted.
    pub(crate) async fn settled(&self, id: &str) -> Result<VmState, AgentError> {
        let e = self.entry(id).await?;
        let slot = e.slot.lock().await;
        let state = slot
            .state()
            .ok_or_else(|| AgentError::SandboxNotFound(id.into()))?;
        Ok(match slot.sandbox() {
            Some(sb) if !self.rt.is_alive(sb) => VmState::Exited,
            _ => state,
        })
    }

    /// Why a call inside sandbox `id` failed with `e`: for a broken guest stream, what the
    /// sandbox's state says (see the module docs); any other error as it is.
    pub(crate) async fn cut_off(&self, id: &str, e: HostError) -> HostError {
        if !broken(&e) {
            return e;
        }
        let deadline = tokio::time::Instant::now() + EXIT_GRACE;
        let state = loop {
            match self.settled(id).await {
                Ok(VmState::Running) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(EXIT_POLL).await
                }
                Ok(state) => break Some(state),
                Err(AgentError::SandboxNotFound(_)) => break None,
                Err(_) => return e,
            }
        };
        let why = match state {
            Some(VmState::Running) => return e,
            None => HostError::SandboxNotFound(id.into()),
            Some(VmState::Exited) => HostError::VmExited(id.into()),
            Some(state) => HostError::CutOff {
                id: id.into(),
                state,
            },
        };
        tracing::debug!(
            sandbox = id,
            error = &e as &dyn std::error::Error,
            why = %why,
            "a call inside the sandbox was cut off"
        );
        why
    }
}

/// `events` with a broken stream's error replaced by why it broke ([`HostAgent::cut_off`]).
pub(crate) fn explained<D: VmDriver + 'static>(
    agent: Arc<HostAgent<D>>,
    id: &str,
    events: BoxStream<HostResult<ExecEvent>>,
) -> BoxStream<HostResult<ExecEvent>> {
    let call = Arc::new((agent, id.to_owned()));
    Box::pin(events.then(move |ev| {
        let call = Arc::clone(&call);
        async move {
            match ev {
                Err(e) => Err(call.0.cut_off(&call.1, e).await),
                ok => ok,
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_broken_streams_are_explained() {
        let guest = |kind| HostError::guest(kind, "x");
        assert!(broken(&guest(GuestErrorKind::Unavailable)));
        assert!(broken(&guest(GuestErrorKind::Other)));
        // The guest's answers about the request, and what the host knew before the call.
        assert!(!broken(&guest(GuestErrorKind::NotFound)));
        assert!(!broken(&guest(GuestErrorKind::InvalidArgument)));
        assert!(!broken(&HostError::SandboxNotFound("sb".into())));
        assert!(!broken(&HostError::VmExited("sb".into())));
    }
}
