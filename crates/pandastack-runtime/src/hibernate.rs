//! Hibernate and wake. Hibernating pauses the sandbox, writes its whole state (device state and
//! RAM) into its own directory and stops the VM process: it then costs disk only. Waking restores
//! that state with the same disk, steps the clock and reseeds the RNG; processes inside carry on
//! where they were. A sandbox whose RAM is a file of its own saves device state only and wakes
//! with the same file mapped again. Volume slots keep their bindings: wake binds the same files (the guest still
//! has them mounted), and unbound slots their placeholders. Both are all-or-nothing: a failed hibernate leaves the sandbox running, a
//! failed wake leaves it hibernated.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pandastack_vm::{Memory, Vm, VmDriver, VmError, VmSpec};

use crate::identity::{free_page_reporting, identify, GuestReadyError, Identity};
use crate::sandbox::{Sandbox, SandboxInfo, MEMORY, ROOTFS};
use crate::{volumes, Runtime};

/// The hibernation image inside a sandbox directory.
pub(crate) const HIBERNATE_STATE: &str = "hibernate.state";

/// A sandbox whose VM is stopped, with its state on disk.
#[derive(Debug, Clone)]
pub struct Hibernated {
    pub id: String,
    pub dir: PathBuf,
    pub info: SandboxInfo,
}

impl Hibernated {
    pub fn state(&self) -> PathBuf {
        self.dir.join(HIBERNATE_STATE)
    }

    /// The sandbox's disk (no VM writes to it while hibernated).
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join(ROOTFS)
    }

    /// Host disk the hibernated sandbox's files take (its image, disk and the rest of its
    /// directory), in allocated blocks: a sparse or reflinked file counts what it holds.
    pub fn image_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.blocks() * 512)
            .sum()
    }

    /// The files of its directory another host needs to wake it, besides `sandbox.json`: the
    /// disk, the hibernation image and its own RAM file if it has one (empty volume slots are
    /// made again where it goes). A sandbox with a volume bound cannot leave its host (the
    /// volume's file is this host's): [`HibernateError::Immovable`].
    pub fn moving_files(&self) -> Result<Vec<&'static str>, HibernateError> {
        stays_for_volumes(&self.info)?;
        Ok(MOVING_FILES
            .into_iter()
            .filter(|&f| f != MEMORY || self.info.memory_file)
            .collect())
    }
}

/// Every file a hibernated sandbox's move may carry (see [`Hibernated::moving_files`]).
pub const MOVING_FILES: [&str; 3] = [ROOTFS, HIBERNATE_STATE, MEMORY];

/// [`HibernateError::Immovable`] for a sandbox with a volume bound: the volume's file is its
/// host's.
fn stays_for_volumes(info: &SandboxInfo) -> Result<(), HibernateError> {
    if info.volumes.iter().any(Option::is_some) {
        return Err(immovable(
            &info.id,
            "a volume is mounted in it (volumes stay on their host)",
        ));
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum HibernateError {
    #[error("sandbox {id} cannot move to another host: {why}")]
    Immovable { id: String, why: String },
    #[error("sandbox files")]
    Io(#[from] std::io::Error),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error(transparent)]
    Net(#[from] crate::net::SlotError),
    #[error(transparent)]
    Agent(#[from] GuestReadyError),
}

impl<D: VmDriver> Runtime<D> {
    /// Hibernates a running sandbox. On failure the sandbox is handed back, running.
    pub async fn hibernate(
        &self,
        sandbox: Sandbox<D::Vm>,
    ) -> Result<Hibernated, (HibernateError, Sandbox<D::Vm>)> {
        let t = Instant::now();
        let mut sandbox = sandbox;
        end_session(&mut sandbox, self.restore_timeout).await;
        let state = sandbox.dir.join(HIBERNATE_STATE);
        let saved = async {
            sandbox.vm.pause().await?;
            sandbox.vm.save_state(&state).await?;
            Ok::<_, HibernateError>(())
        }
        .await;
        if let Err(e) = saved {
            let _ = std::fs::remove_file(&state);
            let _ = sandbox.vm.resume().await;
            return Err((e, sandbox));
        }
        let Sandbox {
            id,
            dir,
            mut info,
            vm,
            agent,
            ..
        } = sandbox;
        drop(agent);
        // The state is complete; a failure to stop now would only leave a paused process.
        if let Err(e) = vm.stop().await {
            tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "stop after hibernate");
        }
        // A hibernated sandbox holds no network slot; wake takes a fresh one.
        self.net_release(info.net_slot.take()).await;
        if let Err(e) = info.save(&dir) {
            tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "save sandbox info after hibernate");
        }
        tracing::debug!(sandbox = %id, ms = t.elapsed().as_millis() as u64, "hibernated");
        Ok(Hibernated { id, dir, info })
    }

    /// Wakes a hibernated sandbox. On failure it stays hibernated and is handed back.
    pub async fn wake(
        &self,
        h: Hibernated,
    ) -> Result<Sandbox<D::Vm>, (HibernateError, Hibernated)> {
        let t = Instant::now();
        let _busy = self.pool.busy();
        let lease = match self.net_acquire(h.info.network).await {
            Ok(l) => l,
            Err(e) => return Err((e.into(), h)),
        };
        let net_slot = lease.as_ref().map(|l| l.index);
        let spec = VmSpec {
            id: h.id.clone(),
            vcpus: h.info.shape.vcpus,
            memory_mib: h.info.shape.memory_mib,
            kernel: h.info.kernel.clone(),
            rootfs: h.dir.join(ROOTFS),
            kernel_args: vec![],
            memory: if h.info.memory_file {
                Memory::SharedFile(h.dir.join(MEMORY))
            } else {
                Memory::Anonymous
            },
            net: lease.map(|l| l.attach),
            volumes: volumes::disks_in(&h.dir, &h.info.volumes),
            disk_limits: h.info.shape.disk,
            run_dir: h.dir.clone(),
        };
        if !h.state().is_file() {
            self.net_release(net_slot).await;
            return Err((VmError::MissingFile(h.state()).into(), h));
        }
        // Woken from its own memory file or anonymous RAM: reporting gives memory back again.
        let reporting = free_page_reporting(&spec.memory);
        let vm = match self.driver.prepare_restore(&spec).await {
            Ok(vm) => vm,
            Err(e) => {
                self.net_release(net_slot).await;
                return Err((e.into(), h));
            }
        };
        // The session opens while the state loads: QEMU keeps the HELLO until the guest runs,
        // which then finds it waiting, its port already connected. A failed load ends the
        // wait for the guest at once.
        let ready = tokio::try_join!(
            async {
                self.driver
                    .finish_restore(&vm, &h.state())
                    .await
                    .map_err(HibernateError::from)
            },
            async {
                identify(&vm, Identity::Same, reporting, self.restore_timeout)
                    .await
                    .map_err(HibernateError::from)
            },
        );
        let agent = match ready {
            // The same files as before; a volume grown meanwhile shows its new size.
            Ok(((), agent)) => match volumes::refresh_bound(&vm, &h.info.volumes).await {
                Ok(()) => Ok(agent),
                Err(e) => Err(HibernateError::from(e)),
            },
            Err(e) => Err(e),
        };
        let agent = match agent {
            Ok(a) => a,
            Err(e) => {
                let _ = vm.stop().await;
                self.net_release(net_slot).await;
                return Err((e, h));
            }
        };
        let mut h = h;
        h.info.net_slot = net_slot;
        if let Err(e) = h.info.save(&h.dir) {
            tracing::warn!(sandbox = %h.id, error = &e as &dyn std::error::Error, "save sandbox info after wake");
        }
        // Running again: the image is stale from here on. (Unlinking it in the background
        // instead made wakes slower in `bench apps`: 291 -> 474 ms p50 to the first byte.)
        if let Err(e) = std::fs::remove_file(h.state()) {
            tracing::warn!(sandbox = %h.id, error = &e as &dyn std::error::Error, "remove hibernation image");
        }
        tracing::debug!(sandbox = %h.id, ms = t.elapsed().as_millis() as u64, "woken");
        Ok(Sandbox {
            id: h.id,
            dir: h.dir,
            info: h.info,
            vm,
            agent,
            ready_in: t.elapsed(),
        })
    }
}

impl<D: VmDriver> Runtime<D> {
    /// Where a hibernated sandbox `id` coming from another host is put together before
    /// [`Runtime::adopt_hibernated`] (created empty, an earlier unfinished one removed). Its
    /// name is not a sandbox id, so a scan never takes it for one.
    pub fn moving_in(&self, id: &str) -> Result<PathBuf, HibernateError> {
        if !crate::valid_id(id) {
            return Err(immovable(id, "not a valid sandbox id"));
        }
        let dir = self
            .data
            .root()
            .join("sandboxes")
            .join(format!(".moving-{id}"));
        crate::files::empty_dir(&dir)?;
        Ok(dir)
    }

    /// Makes the sandbox `info` describes, whose files another host stored and this one
    /// fetched into `staged` ([`Runtime::moving_in`]; the files of
    /// [`Hibernated::moving_files`]), a hibernated sandbox of this host: it runs this host's
    /// kernel (the same by the compatibility key the caller checked), holds no network slot,
    /// and gets fresh placeholders for its empty volume slots. Refused (and `staged` removed)
    /// when a sandbox `id` is here already, or it needs a network this host does not have.
    pub fn adopt_hibernated(
        &self,
        mut info: SandboxInfo,
        staged: &std::path::Path,
    ) -> Result<Hibernated, HibernateError> {
        let id = info.id.clone();
        let dir = self.data.sandbox(&id);
        let adopted = (|| {
            if !crate::valid_id(&id) {
                return Err(immovable(&id, "not a valid sandbox id"));
            }
            if dir.exists() {
                return Err(immovable(
                    &id,
                    "a sandbox with its id is on this host already",
                ));
            }
            if info.network && self.net.is_none() {
                return Err(immovable(
                    &id,
                    "it has a network card and this host runs sandboxes without networking",
                ));
            }
            stays_for_volumes(&info)?;
            for f in [ROOTFS, HIBERNATE_STATE] {
                if !staged.join(f).is_file() {
                    return Err(immovable(&id, &format!("its {f} was not fetched")));
                }
            }
            if info.memory_file && !staged.join(MEMORY).is_file() {
                return Err(immovable(&id, "its memory file was not fetched"));
            }
            for slot in 0..info.volumes.len() {
                volumes::placeholder(staged, slot)?;
            }
            info.kernel = self.kernel.clone();
            info.net_slot = None;
            info.save(staged)?;
            std::fs::rename(staged, &dir)?;
            Ok(())
        })();
        if let Err(e) = adopted {
            let _ = std::fs::remove_dir_all(staged);
            return Err(e);
        }
        Ok(Hibernated { id, dir, info })
    }
}

fn immovable(id: &str, why: &str) -> HibernateError {
    HibernateError::Immovable {
        id: id.to_owned(),
        why: why.to_owned(),
    }
}

/// How long a hibernate waits for the agent session's connection to close.
const SESSION_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// Time given to the guest, once its host hung up, to end the session and wait for a new one.
const SESSION_END_GRACE: Duration = Duration::from_millis(30);

/// Closes the sandbox's agent session before its state is saved, so that the image holds a
/// guest agent waiting for a new host: a woken guest then answers the first HELLO instead of
/// first finding out that its old session is gone (which cost it the first HELLO and a run of
/// the session's teardown code). Best effort: a caller still holding a clone of the channel
/// (a running exec stream) keeps the connection open, and the guest ends that session after
/// the wake instead. The sandbox gets a channel that connects on its next call.
async fn end_session<V: Vm>(sandbox: &mut Sandbox<V>, connect_timeout: Duration) {
    let lazy = pandastack_guest_proto::host::channel(sandbox.vm.agent_socket(), connect_timeout);
    drop(std::mem::replace(&mut sandbox.agent, lazy));
    match sandbox.vm.agent_disconnected(SESSION_CLOSE_WAIT).await {
        Ok(()) => tokio::time::sleep(SESSION_END_GRACE).await,
        Err(e) => tracing::debug!(
            sandbox = %sandbox.id,
            error = &e as &dyn std::error::Error,
            "agent session still open at hibernate"
        ),
    }
}
