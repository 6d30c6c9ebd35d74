//! Sandboxes: VMs restored from a template's snapshot, each with its own disk clone and identity.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use pandastack_vm::{Memory, Vm, VmDriver, VmError, VmSpec};
use tonic::transport::Channel;

use crate::files::clone_file;
use crate::template::Template;
use crate::{Runtime, RESTORE_TIMEOUT};

/// A running sandbox.
pub struct Sandbox<V: Vm> {
    pub id: String,
    pub dir: PathBuf,
    pub vm: V,
    /// Connected guest agent session.
    pub agent: Channel,
    /// Time from the create call to exec-ready.
    pub ready_in: Duration,
}

/// Why a create failed. Nothing of the half-created sandbox is left behind.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("invalid sandbox id {0:?}")]
    InvalidId(String),
    #[error("sandbox {0} already exists")]
    Exists(String),
    #[error("sandbox files")]
    Io(#[from] std::io::Error),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error("guest agent after restore")]
    Agent(#[source] Box<dyn std::error::Error + Send + Sync>),
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A random 32-hex-digit machine id.
fn machine_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl<D: VmDriver> Runtime<D> {
    /// Creates sandbox `id` from `template`: clone the disk, restore the snapshot with the
    /// template memory mapped copy-on-write, give the guest a new identity. Returns when the
    /// guest agent answers, i.e. when exec is possible.
    pub async fn create(
        &self,
        template: &Template,
        id: &str,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let started = Instant::now();
        if !valid_id(id) {
            return Err(CreateError::InvalidId(id.into()));
        }
        let dir = self.data.sandbox(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(CreateError::Exists(id.into()))
            }
            Err(e) => return Err(e.into()),
        }
        let result = self.create_in(template, id, &dir, started).await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    async fn create_in(
        &self,
        template: &Template,
        id: &str,
        dir: &std::path::Path,
        started: Instant,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        clone_file(&template.rootfs(), &dir.join("rootfs.ext4"))?;
        let cloned = started.elapsed();
        let spec = VmSpec {
            id: id.to_owned(),
            vcpus: template.shape.vcpus,
            memory_mib: template.shape.memory_mib,
            kernel: template.kernel.clone(),
            rootfs: dir.join("rootfs.ext4"),
            kernel_args: vec![],
            memory: Memory::PrivateFile(template.memory()),
            net: None,
            run_dir: dir.to_owned(),
        };
        let vm = self.driver.restore(&spec, &template.state()).await?;
        let restored = started.elapsed();
        match identify(&vm, id).await {
            Ok(agent) => {
                tracing::debug!(
                    sandbox = id,
                    clone_ms = cloned.as_secs_f64() * 1e3,
                    restore_ms = (restored - cloned).as_secs_f64() * 1e3,
                    agent_ms = (started.elapsed() - restored).as_secs_f64() * 1e3,
                    "sandbox created"
                );
                Ok(Sandbox {
                    id: id.to_owned(),
                    dir: dir.to_owned(),
                    vm,
                    agent,
                    ready_in: started.elapsed(),
                })
            }
            Err(e) => {
                let _ = vm.stop().await;
                Err(e)
            }
        }
    }

    /// Stops a sandbox and removes its files.
    pub async fn destroy(&self, sandbox: Sandbox<D::Vm>) -> Result<(), CreateError> {
        drop(sandbox.agent);
        sandbox.vm.stop().await?;
        std::fs::remove_dir_all(&sandbox.dir)?;
        Ok(())
    }
}

/// Connects to the restored guest and runs its post-restore hook: clock, RNG, hostname,
/// machine id. Clones of one snapshot must never share RNG state.
async fn identify<V: Vm>(vm: &V, id: &str) -> Result<Channel, CreateError> {
    let t = Instant::now();
    let channel = pandastack_guest_proto::host::connect(vm.agent_socket(), RESTORE_TIMEOUT)
        .await
        .map_err(|e| CreateError::Agent(Box::new(e)))?;
    tracing::debug!(
        sandbox = id,
        connect_ms = t.elapsed().as_secs_f64() * 1e3,
        "agent session open"
    );
    let mut entropy = vec![0u8; 64];
    rand::fill(&mut entropy[..]);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    AgentClient::new(channel.clone())
        .post_restore(v1::PostRestoreRequest {
            unix_time_ns: now.as_nanos() as i64,
            entropy,
            hostname: id.to_owned(),
            machine_id: machine_id(),
            network: None,
        })
        .await
        .map_err(|e| CreateError::Agent(Box::new(e)))?;
    Ok(channel)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sandbox_ids() {
        assert!(super::valid_id("sb-1a2b"));
        assert!(!super::valid_id("../etc"));
        assert!(!super::valid_id(""));
        assert_eq!(super::machine_id().len(), 32);
    }
}
