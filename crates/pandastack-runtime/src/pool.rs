//! A pool of warm VMs per template: each is a complete restore of the template — QEMU started
//! with the template's memory mapped copy-on-write and a disk clone, device state loaded, running,
//! with the guest agent session open and the post-restore hook run once (clock, RNG). Nothing
//! but the template's own processes and the warm-up command below has run in it. A create that
//! finds one renames the pooled directory to the sandbox's and runs the post-restore hook again
//! with the sandbox's identity (hostname, machine id, fresh entropy, clock): process start, state
//! load and the session open — and, under TCG, translating the agent's code paths for the first
//! time — are all off the create path. The pool is refilled by the caller
//! ([`Runtime::fill_pool`]), in the background.
//!
//! A warm VM still waiting [`WARM_AFTER`] (250 ms) after it joined the pool also runs one
//! command, `echo; /bin/true` through `/bin/sh` as a create's `cmd` would, off the clock: under
//! TCG each QEMU process translates the guest code it runs afresh, so the first command of a
//! sandbox paid ~250–400 ms for the agent's exec path, the shell, the loader and the kernel's
//! fork/exec paths being translated, against ~30–50 ms for the next one. The command waits while
//! any create, wake or snapshot is under way, and a VM taken first (a burst, sustained creates)
//! is not warmed, so those do not share the CPU with it; one taken while its command runs gets
//! the command's last milliseconds concurrently with its own first calls.
//!
//! A warm VM's volume slots are all on placeholders, so only creates that bind no volume take
//! one; a create with volumes restores on its own. (Rebinding a warm VM's slots with
//! `blockdev-reopen` on another file would bring volumes onto the pooled path; not done.)

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_guest_proto::v1::FreePageReporting;
use pandastack_vm::{Memory, Vm, VmDriver};
use tonic::transport::Channel;

use crate::identity::{identify, post_restore_within, Identity};
use crate::sandbox::CreateError;
use crate::standby::{AdoptError, Standby, Waiting};
use crate::template::Template;
use crate::Runtime;

/// Directory names of pooled VMs start with this (not a valid sandbox id).
pub(crate) const POOL_PREFIX: &str = ".pool-";

/// How long a warm VM waits untaken before it runs its warm-up command (unless
/// [`Runtime::with_pool_warm_up`] says otherwise).
pub const WARM_AFTER: Duration = Duration::from_millis(250);

/// The warm-up command (`/bin/sh -c`): a builtin writing to the output pipe and a dynamically
/// linked program started by the shell, as in most first commands.
const WARM_COMMAND: &str = "echo; /bin/true";

/// Longest the warm-up command may take.
const WARM_TIMEOUT: Duration = Duration::from_secs(30);

/// One warm VM: a process started as a stand-by one (run directory, network slot), its state
/// loaded and its agent session open.
pub(crate) struct Prepared<V> {
    process: Standby<V>,
    agent: Channel,
    /// Set when the VM leaves the pool (taken or discarded): its warm-up does not start then.
    gone: Arc<AtomicBool>,
}

/// What a create takes over from the pool.
pub(crate) struct Adopted<V> {
    pub vm: V,
    pub agent: Channel,
    pub net_slot: Option<u32>,
}

impl<V: Vm> Prepared<V> {
    /// Moves the pooled run directory to `dir` and hands over the VM, its session and its slot
    /// (see [`Standby::adopt`]). On failure the VM and slot are returned for the caller to stop
    /// and release. The open agent session is kept (it does not reconnect by path while the
    /// sandbox lives; a re-attach after a restart opens a new one at the new path).
    pub(crate) fn adopt(self, dir: &Path) -> Result<Adopted<V>, AdoptError<V>> {
        self.gone.store(true, Ordering::Release);
        let agent = self.agent;
        self.process.adopt(dir).map(|(vm, net_slot)| Adopted {
            vm,
            agent,
            net_slot,
        })
    }
}

pub(crate) struct Pool<V> {
    /// Keyed by template name and bake id: a re-bake makes older entries unusable.
    entries: Mutex<HashMap<String, Vec<Prepared<V>>>>,
    warm_up: Arc<WarmUps>,
}

/// What the warm-ups share with the runtime.
#[derive(Default)]
struct WarmUps {
    /// Creates, wakes and snapshots under way: warm-ups wait for none to be.
    busy: AtomicUsize,
    /// Warm-up commands that ran to a zero exit.
    done: AtomicU64,
}

/// Counts one create, wake or snapshot under way while it lives ([`Pool::busy`]).
pub(crate) struct Busy(Arc<WarmUps>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<V> Default for Pool<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            warm_up: Arc::default(),
        }
    }
}

fn key(t: &Template) -> String {
    format!("{}#{}", t.name, t.bake_id)
}

impl<V> Pool<V> {
    /// Marks a create, wake or snapshot as under way until the guard is dropped.
    pub(crate) fn busy(&self) -> Busy {
        self.warm_up.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(&self.warm_up))
    }

    pub(crate) fn take(&self, t: &Template) -> Option<Prepared<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get_mut(&key(t)).and_then(Vec::pop)
    }

    fn put(&self, t: &Template, p: Prepared<V>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.entry(key(t)).or_default().push(p);
    }

    fn len(&self, t: &Template) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&key(t)).map_or(0, Vec::len)
    }

    /// Every pooled VM of template `name`, whatever its bake.
    fn take_template(&self, name: &str) -> Vec<Prepared<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = format!("{name}#");
        let keys: Vec<String> = entries
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        keys.iter()
            .filter_map(|k| entries.remove(k))
            .flatten()
            .collect()
    }

    fn total(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.values().map(Vec::len).sum()
    }

    fn take_all(&self) -> Vec<Prepared<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.drain().flat_map(|(_, v)| v).collect()
    }
}

impl<D: VmDriver> Runtime<D> {
    /// Starts VM processes for `template` until `size` wait in its pool. Returns how many are
    /// ready.
    pub async fn fill_pool(&self, template: &Template, size: usize) -> Result<usize, CreateError> {
        while self.pool.len(template) < size {
            let p = self.prepare(template).await?;
            if let Some(after) = self.pool_warm_up {
                let shared = Arc::clone(&self.pool.warm_up);
                warm_later(after, p.agent.clone(), Arc::clone(&p.gone), shared);
            }
            self.pool.put(template, p);
        }
        Ok(self.pool.len(template))
    }

    /// Number of warm VMs waiting for `template`.
    pub fn pool_size(&self, template: &Template) -> usize {
        self.pool.len(template)
    }

    /// Number of warm VMs waiting, every template's.
    pub fn pooled(&self) -> usize {
        self.pool.total()
    }

    /// How many pooled VMs have run their warm-up command (see the module's documentation).
    pub fn pool_warmed(&self) -> u64 {
        self.pool.warm_up.done.load(Ordering::Acquire)
    }

    /// Stops every pooled VM and removes its directory.
    pub async fn drain_pool(&self) {
        for p in self.pool.take_all() {
            self.discard(p).await;
        }
    }

    /// Stops the pooled VMs of template `name` (any bake of it).
    pub async fn drain_template_pool(&self, name: &str) {
        for p in self.pool.take_template(name) {
            self.discard(p).await;
        }
    }

    /// A pooled VM of `t` whose process still runs. One that exited while it waited (killed,
    /// crashed) is discarded on the way, so a create never waits out a restore timeout on it.
    pub(crate) async fn take_pooled(&self, t: &Template) -> Option<Prepared<D::Vm>> {
        while let Some(p) = self.pool.take(t) {
            if !p.process.vm.has_exited() {
                return Some(p);
            }
            tracing::warn!(template = %t.name, dir = %p.process.dir.display(), "a pooled VM had exited; discarded");
            self.discard(p).await;
        }
        None
    }

    async fn discard(&self, p: Prepared<D::Vm>) {
        p.gone.store(true, Ordering::Release);
        self.discard_standby(p.process).await;
    }

    /// Connects to a pooled VM and makes one `PostRestore` call on the session, off the clock:
    /// the create that takes the VM makes the same call (with the sandbox's identity), and finds
    /// the agent's HTTP/2 and gRPC code already run once. Pooled VMs map their template's
    /// memory privately: free-page reporting off.
    async fn identify_warm(&self, vm: &D::Vm) -> Result<Channel, CreateError> {
        let off = FreePageReporting::Off;
        let agent = identify(vm, Identity::Same, off, self.restore_timeout).await?;
        post_restore_within(&agent, Identity::Same, off, self.restore_timeout).await?;
        Ok(agent)
    }

    async fn prepare(&self, t: &Template) -> Result<Prepared<D::Vm>, CreateError> {
        let waiting = self
            .start_waiting(&Waiting {
                rootfs: t.rootfs(),
                memory: Memory::PrivateFile(t.memory()),
                shape: t.shape,
                kernel: t.kernel.clone(),
                network: t.network,
                slots: t.volume_slots as usize,
            })
            .await?;
        // On failure finish_restore stops the process itself.
        let ready = match self.driver.finish_restore(&waiting.vm, &t.state()).await {
            Ok(()) => self.identify_warm(&waiting.vm).await,
            Err(e) => Err(e.into()),
        };
        match ready {
            Ok(agent) => Ok(Prepared {
                process: waiting,
                agent,
                gone: Arc::new(AtomicBool::new(false)),
            }),
            Err(e) => {
                self.discard_standby(waiting).await;
                Err(e)
            }
        }
    }
}

/// Runs the warm-up command on a pooled VM's session `after` it joined the pool, once no
/// create, wake or snapshot is under way (checked every `after`), unless the VM has left the
/// pool by then. Its outcome changes nothing but the log: a VM whose warm-up failed
/// serves as well as one never warmed.
fn warm_later(after: Duration, agent: Channel, gone: Arc<AtomicBool>, shared: Arc<WarmUps>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(after).await;
            if gone.load(Ordering::Acquire) {
                return;
            }
            if shared.busy.load(Ordering::Acquire) == 0 {
                break;
            }
        }
        let t = std::time::Instant::now();
        let argv = ["/bin/sh", "-c", WARM_COMMAND];
        match crate::volumes::run_as_root(&agent, &argv, WARM_TIMEOUT).await {
            Ok((0, _)) => {
                shared.done.fetch_add(1, Ordering::AcqRel);
                tracing::debug!(ms = t.elapsed().as_millis() as u64, "pooled VM warmed");
            }
            Ok((code, stderr)) => {
                tracing::debug!(code, stderr = %stderr.trim(), "pooled VM warm-up failed")
            }
            Err(e) => tracing::debug!(
                error = &e as &dyn std::error::Error,
                "pooled VM warm-up failed"
            ),
        }
    });
}
