//! The guest agent's post-restore hook: every VM that comes back from a snapshot steps its clock
//! and reseeds its RNG; a new sandbox also gets its own hostname and machine id. Clones of one
//! snapshot must never share RNG state. The hook also tells the guest whether to report freed
//! memory, from where its RAM lives ([`free_page_reporting`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pandastack_guest_proto::host::Restored;
use pandastack_guest_proto::session::Restore;
use pandastack_guest_proto::v1::{self, agent_client::AgentClient, FreePageReporting};
use pandastack_vm::{Memory, Vm};
use tonic::transport::Channel;

/// What the restored guest should become.
#[derive(Clone, Copy)]
pub(crate) enum Identity<'a> {
    /// A new sandbox: hostname = its id, a fresh machine id.
    New { hostname: &'a str },
    /// The same sandbox continuing (wake): keep hostname and machine id.
    Same,
}

/// Whether a guest whose RAM is `memory` should report the memory it frees (virtio-balloon
/// free-page reporting; the device always offers it, see `pandastack_qemu::argv`).
///
/// A private mapping of a file (a template's or snapshot's memory, which other VMs map too) is
/// opened read-only: QEMU refuses to discard any of it, so each report only writes an error
/// line into the VM's QEMU log and gives nothing back — off. RAM in a file of the VM's own
/// (a hole is punched into it) or anonymous RAM (the pages are dropped) gives the memory back
/// — on, which also turns reporting back on in a guest restored from its own memory file
/// after running from a template's.
pub(crate) fn free_page_reporting(memory: &Memory) -> FreePageReporting {
    match memory {
        Memory::PrivateFile(_) => FreePageReporting::Off,
        Memory::SharedFile(_) | Memory::Anonymous => FreePageReporting::On,
    }
}

/// Why the guest could not be made ready.
#[derive(Debug, thiserror::Error)]
#[error("guest agent after restore")]
pub struct GuestReadyError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Bound on the first call of a new session. It normally answers in well under a second; a
/// session that does not answer is replaced once (see [`identify`]).
const FIRST_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the restored guest and runs its post-restore hook, free-page reporting set to
/// `reporting`. Returns the agent session.
///
/// The hook rides on the session's opening lines (a RESTORE line, see
/// `pandastack_guest_proto::session`) when the guest's agent takes them: then nothing of the
/// agent's HTTP/2 and gRPC code runs until the first call, which a woken app may never make.
/// Older agents get the `PostRestore` call.
///
/// Guest agents baked before the port fix in `pandastack-guest` (`wait_host_connected`) could
/// drop their first session right after answering its HELLO; the host then waited forever on a
/// call nobody read. A session whose first call goes unanswered is therefore closed and a new
/// one opened, once.
pub(crate) async fn identify<V: Vm>(
    vm: &V,
    identity: Identity<'_>,
    reporting: FreePageReporting,
    timeout: Duration,
) -> Result<Channel, GuestReadyError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let t = Instant::now();
        let (channel, restored) = pandastack_guest_proto::host::connect_restoring(
            vm.agent_socket(),
            timeout,
            &restore_for(identity, reporting),
        )
        .await
        .map_err(|e| GuestReadyError(Box::new(e)))?;
        tracing::debug!(
            vm = vm.id(),
            connect_ms = t.elapsed().as_secs_f64() * 1e3,
            ?restored,
            "agent session open"
        );
        if let Restored::Applied { .. } = restored {
            return Ok(channel);
        }
        match tokio::time::timeout(
            FIRST_CALL_TIMEOUT.min(timeout),
            post_restore(&channel, identity, reporting),
        )
        .await
        {
            Ok(r) => return r.map(|()| channel),
            Err(_) if attempt < 2 => {
                tracing::warn!(
                    vm = vm.id(),
                    "guest agent did not answer its new session; reopening"
                );
            }
            Err(_) => {
                return Err(GuestReadyError(
                    format!(
                        "no answer to the post-restore call within {:?}",
                        FIRST_CALL_TIMEOUT.min(timeout)
                    )
                    .into(),
                ))
            }
        }
    }
}

/// The post-restore hook's data for `identity`, taken now (clock) and fresh (entropy).
fn restore_for(identity: Identity<'_>, reporting: FreePageReporting) -> Restore {
    let mut entropy = vec![0u8; 64];
    rand::fill(&mut entropy[..]);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let (hostname, machine_id) = match identity {
        Identity::New { hostname } => (hostname.to_owned(), machine_id()),
        Identity::Same => (String::new(), String::new()),
    };
    Restore {
        unix_time_ns: now.as_nanos() as i64,
        entropy,
        hostname,
        machine_id,
        free_page_reporting: reporting,
    }
}

/// Runs the post-restore hook over an open session: clock step, RNG reseed and, for a new
/// sandbox, hostname and machine id; free-page reporting set to `reporting`.
pub(crate) async fn post_restore(
    channel: &Channel,
    identity: Identity<'_>,
    reporting: FreePageReporting,
) -> Result<(), GuestReadyError> {
    AgentClient::new(channel.clone())
        .post_restore(v1::PostRestoreRequest::from(restore_for(
            identity, reporting,
        )))
        .await
        .map_err(|e| GuestReadyError(Box::new(e)))?;
    Ok(())
}

/// [`post_restore`] on a VM that is already running with its session open (a pooled one),
/// bounded like a restore: a VM that stopped answering fails the caller instead of hanging it.
pub(crate) async fn post_restore_within(
    channel: &Channel,
    identity: Identity<'_>,
    reporting: FreePageReporting,
    timeout: Duration,
) -> Result<(), GuestReadyError> {
    tokio::time::timeout(timeout, post_restore(channel, identity, reporting))
        .await
        .map_err(|_| {
            GuestReadyError(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the post-restore call did not answer within {timeout:?}"),
            )))
        })?
}

/// A random 32-hex-digit machine id.
fn machine_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reporting_is_off_only_where_discards_are_refused() {
        assert_eq!(
            free_page_reporting(&Memory::PrivateFile("/t/mem".into())),
            FreePageReporting::Off
        );
        assert_eq!(
            free_page_reporting(&Memory::SharedFile("/s/mem".into())),
            FreePageReporting::On
        );
        assert_eq!(
            free_page_reporting(&Memory::Anonymous),
            FreePageReporting::On
        );
        let line = restore_for(Identity::Same, FreePageReporting::Off).line(1);
        assert!(String::from_utf8_lossy(&line).ends_with(" fpr=off\n"));
    }

    #[test]
    fn machine_ids_are_32_hex_digits() {
        let id = super::machine_id();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
