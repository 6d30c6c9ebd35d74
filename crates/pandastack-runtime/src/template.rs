//! Templates: a root disk, a VM shape and a baked snapshot (device state + memory file).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use pandastack_vm::{Memory, Vm, VmDriver, VmError, VmSpec, VolumeDisk};
use serde::{Deserialize, Serialize};

use crate::files::clone_file;
use crate::integrity::{self, Seal, SealCheck};
use crate::{volumes, Runtime, COLD_BOOT_TIMEOUT};

/// vCPUs and memory, fixed when a template is baked; and disk limits, which are not part of
/// the baked state (a sandbox may have its own, see [`Shape::with_disk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub vcpus: u32,
    pub memory_mib: u32,
    /// How fast its VM may use its disks (root and volumes together); `None`: the driver's
    /// default (`pandastack server --vm-disk-mbps`). Kept with the sandbox (`sandbox.json`),
    /// its snapshots and forks, so a wake or a fork has the limit its sandbox had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<pandastack_vm::DiskLimits>,
}

impl Shape {
    pub const fn new(vcpus: u32, memory_mib: u32) -> Self {
        Self {
            vcpus,
            memory_mib,
            disk: None,
        }
    }

    /// This shape with disk limits `disk` where given (`None` keeps its own).
    pub fn with_disk(self, disk: Option<pandastack_vm::DiskLimits>) -> Self {
        Self {
            disk: disk.or(self.disk),
            ..self
        }
    }
}

/// The devices a template is baked with besides the fixed ones (root disk, agent channel, RNG,
/// balloon, and the NIC when the runtime has a network pool). Part of the device state a
/// restore loads, so fixed at bake; every sandbox, snapshot and fork of the template has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// Extra disks for volumes (see [`crate::volumes`]); the QEMU driver allows up to 3.
    pub volume_slots: u32,
}

/// A baked template on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    pub shape: Shape,
    pub kernel: PathBuf,
    /// Random id of this bake: VMs pre-started for one bake are unusable for another.
    #[serde(default)]
    pub bake_id: String,
    /// Baked with a NIC: its sandboxes need a network slot.
    #[serde(default)]
    pub network: bool,
    /// Volume slots it was baked with (0 for bakes made before slots existed).
    #[serde(default)]
    pub volume_slots: u32,
    /// Milliseconds from cold boot start to snapshot written.
    pub bake_ms: u64,
    /// Milliseconds from cold boot start to the guest agent answering.
    pub boot_ms: u64,
    /// The image this bake's disk was cloned from (to bake it again).
    #[serde(default)]
    pub image: Option<PathBuf>,
    /// Seals on the files every clone reads; `None` for bakes made before seals existed.
    #[serde(default)]
    pub seals: Option<TemplateSeals>,
    #[serde(skip)]
    pub dir: PathBuf,
}

/// Seals on a template's shared files (see [`crate::integrity`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateSeals {
    pub memory: Seal,
    pub state: Seal,
}

/// What [`Runtime::check_template`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateCheck {
    /// The shared files are as baked.
    Intact,
    /// Baked before seals were recorded: nothing proves its memory image undamaged.
    Unsealed,
    /// A shared file changed since the bake (what changed).
    Damaged(String),
}

impl Template {
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.ext4")
    }
    pub fn memory(&self) -> PathBuf {
        self.dir.join("mem")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
}

const MANIFEST: &str = "template.json";

/// Why a bake failed.
#[derive(Debug, thiserror::Error)]
pub enum BakeError {
    #[error("invalid template name {0:?}")]
    InvalidName(String),
    #[error("image {0} not found")]
    MissingImage(PathBuf),
    #[error("template {0} is not baked")]
    NotBaked(String),
    #[error("template files")]
    Io(#[from] std::io::Error),
    #[error("template manifest")]
    Manifest(#[from] serde_json::Error),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error(transparent)]
    Net(#[from] crate::net::SlotError),
    #[error(
        "template {name} fetched from another host: its {file} is not what that host's bake sealed"
    )]
    Unsealed { name: String, file: &'static str },
    #[error("guest agent did not come up (console log: {console})")]
    Agent {
        console: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl<D: VmDriver> Runtime<D> {
    /// Loads a baked template.
    pub fn template(&self, name: &str) -> Result<Template, BakeError> {
        if !valid_name(name) {
            return Err(BakeError::InvalidName(name.into()));
        }
        let dir = self.data.template(name);
        let raw = match std::fs::read(dir.join(MANIFEST)) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BakeError::NotBaked(name.into()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut t: Template = serde_json::from_slice(&raw)?;
        t.dir = dir;
        Ok(t)
    }

    /// Names of the baked templates.
    pub fn baked_templates(&self) -> Result<Vec<String>, BakeError> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(self.data.root().join("templates"))? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if valid_name(&name) && e.path().join(MANIFEST).is_file() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes baked template `name` (its pooled VMs first). Sandboxes restored from it keep
    /// running: their memory mappings hold the files open.
    pub async fn remove_template(&self, name: &str) -> Result<(), BakeError> {
        if !valid_name(name) {
            return Err(BakeError::InvalidName(name.into()));
        }
        self.drain_template_pool(name).await;
        let dir = self.data.template(name);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks that template `name`'s memory image and device state are what its bake wrote
    /// (cheap: a `stat` each unless they changed). A file whose metadata alone changed is
    /// re-sealed in the manifest.
    pub async fn check_template(&self, name: &str) -> Result<TemplateCheck, BakeError> {
        let mut t = self.template(name)?;
        let Some(seals) = t.seals.clone() else {
            return Ok(TemplateCheck::Unsealed);
        };
        let (mem, state) = (t.memory(), t.state());
        let checked = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>((
                integrity::check(&mem, &seals.memory)?,
                integrity::check(&state, &seals.state)?,
            ))
        })
        .await
        .map_err(std::io::Error::other)?;
        let (memory, state) = match checked {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TemplateCheck::Damaged(format!("file missing: {e}")))
            }
            Err(e) => return Err(e.into()),
        };
        let mut seals = t.seals.clone().expect("checked above");
        for (what, check, seal) in [
            ("memory", memory, &mut seals.memory),
            ("state", state, &mut seals.state),
        ] {
            match check {
                SealCheck::Intact => {}
                SealCheck::Resealed(new) => *seal = new,
                SealCheck::Damaged(why) => {
                    return Ok(TemplateCheck::Damaged(format!("{what}: {why}")))
                }
            }
        }
        if t.seals.as_ref() != Some(&seals) {
            tracing::info!(
                template = name,
                "template files' metadata changed, content did not: re-sealed"
            );
            t.seals = Some(seals);
            write_manifest(&t.dir, &t)?;
        }
        Ok(TemplateCheck::Intact)
    }

    /// Where a bake of template `name` fetched from another host is put together before
    /// [`Runtime::install_template`] (created empty; an earlier unfinished one removed).
    pub fn template_staging(&self, name: &str) -> Result<PathBuf, BakeError> {
        if !valid_name(name) {
            return Err(BakeError::InvalidName(name.into()));
        }
        let work = self.data.template(name).with_extension("fetching");
        crate::files::empty_dir(&work)?;
        Ok(work)
    }

    /// Installs `baked`, a bake made by another host with this host's devices and compatibility
    /// key, from `staged` (see [`Runtime::template_staging`]; it holds `rootfs.ext4`, `mem` and
    /// `state`) as template `baked.name`, replacing an earlier bake of that name once complete.
    /// The memory image and device state are sealed here and must hash as the other host
    /// sealed them ([`BakeError::Unsealed`] else, and nothing is installed). The bake keeps its
    /// id, so VMs of it are the same everywhere; it runs this host's kernel (equal by the
    /// compatibility key) and names no image (a bake again comes from the catalog spec).
    pub async fn install_template(
        &self,
        mut baked: Template,
        staged: &Path,
    ) -> Result<Template, BakeError> {
        let name = baked.name.clone();
        if !valid_name(&name) {
            return Err(BakeError::InvalidName(name));
        }
        let result = async {
            let seals = seal_files(staged).await?;
            if let Some(theirs) = &baked.seals {
                for (file, mine, want) in [
                    ("memory image", &seals.memory, &theirs.memory),
                    ("device state", &seals.state, &theirs.state),
                ] {
                    if mine.sha256 != want.sha256 || mine.size != want.size {
                        return Err(BakeError::Unsealed {
                            name: name.clone(),
                            file,
                        });
                    }
                }
            }
            baked.seals = Some(seals);
            baked.kernel = self.kernel.clone();
            baked.image = None;
            baked.dir = staged.to_owned();
            write_manifest(staged, &baked)
        }
        .await;
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(staged);
            return Err(e);
        }
        self.drain_template_pool(&name).await;
        let dir = self.data.template(&name);
        put_in_place(staged, &dir)?;
        baked.dir = dir;
        Ok(baked)
    }

    /// Cold-boots `image` with `shape`, waits for the guest agent and snapshots the running guest
    /// as template `name` (replacing an earlier bake only once the new one is complete). No
    /// volume slots.
    pub async fn bake(
        &self,
        name: &str,
        image: &Path,
        shape: Shape,
    ) -> Result<Template, BakeError> {
        self.bake_with(name, image, shape, DeviceProfile::default())
            .await
    }

    /// [`Runtime::bake`] with the devices of `profile`: each volume slot is backed by an empty
    /// placeholder while the template boots, so the guest has read nothing from it.
    pub async fn bake_with(
        &self,
        name: &str,
        image: &Path,
        shape: Shape,
        profile: DeviceProfile,
    ) -> Result<Template, BakeError> {
        if !valid_name(name) {
            return Err(BakeError::InvalidName(name.into()));
        }
        if !image.is_file() {
            return Err(BakeError::MissingImage(image.to_owned()));
        }
        let dir = self.data.template(name);
        let work = dir.with_extension("baking");
        crate::files::empty_dir(&work)?;
        let result = self.bake_into(name, image, shape, profile, &work).await;
        match result {
            Ok(mut t) => {
                put_in_place(&work, &dir)?;
                t.dir = dir;
                Ok(t)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                Err(e)
            }
        }
    }

    async fn bake_into(
        &self,
        name: &str,
        image: &Path,
        shape: Shape,
        profile: DeviceProfile,
        work: &Path,
    ) -> Result<Template, BakeError> {
        let started = Instant::now();
        clone_file(image, &work.join("rootfs.ext4"))?;
        let volumes = (0..profile.volume_slots as usize)
            .map(|slot| volumes::placeholder(work, slot))
            .collect::<Result<Vec<_>, _>>()?;
        let lease = self.net_acquire(self.net.is_some()).await?;
        let result = self
            .bake_vm(name, shape, volumes, work, lease.as_ref(), started)
            .await;
        self.net_release(lease.as_ref().map(|l| l.index)).await;
        let boot_ms = result?;
        for f in ["qmp.sock", "agent.sock", "qemu.pid"] {
            let _ = std::fs::remove_file(work.join(f));
        }
        // Restores make placeholders of their own.
        for slot in 0..profile.volume_slots as usize {
            let _ = std::fs::remove_file(work.join(volumes::placeholder_name(slot)));
        }
        let seals = seal_files(work).await?;
        let t = Template {
            name: name.to_owned(),
            shape,
            kernel: self.kernel.clone(),
            bake_id: format!("{:016x}", rand::random::<u64>()),
            network: lease.is_some(),
            volume_slots: profile.volume_slots,
            bake_ms: started.elapsed().as_millis() as u64,
            boot_ms,
            image: Some(image.to_owned()),
            seals: Some(seals),
            dir: work.to_owned(),
        };
        write_manifest(work, &t)?;
        Ok(t)
    }

    /// Boots the template VM, waits for its agent and saves its state; returns the boot time.
    async fn bake_vm(
        &self,
        name: &str,
        shape: Shape,
        volumes: Vec<VolumeDisk>,
        work: &Path,
        lease: Option<&crate::net::Lease>,
        started: Instant,
    ) -> Result<u64, BakeError> {
        let mut kernel_args = vec![format!("pandastack.hostname={name}")];
        if lease.is_some() {
            kernel_args.extend(crate::net::guest_kernel_args());
        }
        let spec = VmSpec {
            id: format!("template-{name}"),
            vcpus: shape.vcpus,
            memory_mib: shape.memory_mib,
            kernel: self.kernel.clone(),
            rootfs: work.join("rootfs.ext4"),
            kernel_args,
            memory: Memory::SharedFile(work.join("mem")),
            net: lease.map(|l| l.attach.clone()),
            volumes,
            disk_limits: shape.disk,
            run_dir: work.to_owned(),
        };
        let vm = self.driver.boot(&spec).await?;
        let result = async {
            let channel =
                pandastack_guest_proto::host::connect(vm.agent_socket(), COLD_BOOT_TIMEOUT)
                    .await
                    .map_err(|e| BakeError::Agent {
                        console: vm.console_log(),
                        source: Box::new(e),
                    })?;
            let mut agent = AgentClient::new(channel.clone());
            agent
                .health(v1::Empty {})
                .await
                .map_err(|e| BakeError::Agent {
                    console: vm.console_log(),
                    source: Box::new(e),
                })?;
            let boot_ms = started.elapsed().as_millis() as u64;
            // Free-page reporting off in the saved state: every clone maps this memory
            // privately (reports would only fill qemu.log), and finds it off already instead
            // of unbinding the balloon driver in its first moments. A sandbox whose memory
            // becomes its own (a wake) turns it on again.
            crate::identity::post_restore(
                &channel,
                crate::identity::Identity::Same,
                pandastack_guest_proto::v1::FreePageReporting::Off,
            )
            .await
            .map_err(|e| BakeError::Agent {
                console: vm.console_log(),
                source: Box::new(e),
            })?;
            // Let the guest settle so the snapshot holds an idle system, then end the session:
            // restored clones start out waiting for a new host.
            tokio::time::sleep(Duration::from_millis(200)).await;
            agent
                .detach(v1::Empty {})
                .await
                .map_err(|e| BakeError::Agent {
                    console: vm.console_log(),
                    source: Box::new(e),
                })?;
            // The session's connection closes in the background once the client is dropped;
            // the snapshot must not capture it half closed.
            drop(agent);
            drop(channel);
            vm.agent_disconnected(Duration::from_secs(10)).await?;
            vm.pause().await?;
            vm.save_state(&work.join("state")).await?;
            Ok::<_, BakeError>(boot_ms)
        }
        .await;
        vm.stop().await?;
        reclaim(work)?;
        result
    }
}

/// A bake's VM process ran as a uid of its own, which owned the files it may reopen: they
/// become root's, so no VM process later given that uid can change a template.
fn reclaim(dir: &Path) -> std::io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::os::unix::fs::chown(entry.path(), Some(0), Some(0))?;
        }
    }
    Ok(())
}

/// Makes the complete template directory `work` template directory `dir`, replacing an earlier
/// one only once `work` is in place.
fn put_in_place(work: &Path, dir: &Path) -> std::io::Result<()> {
    let old = dir.with_extension("old");
    if dir.exists() {
        std::fs::rename(dir, &old)?;
    }
    std::fs::rename(work, dir)?;
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

/// Writes `t`'s manifest into `dir` (atomically: a reader sees the old or the new one).
fn write_manifest(dir: &Path, t: &Template) -> Result<(), BakeError> {
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(t)?)?;
    std::fs::rename(&tmp, dir.join(MANIFEST))?;
    Ok(())
}

/// Makes a fresh bake's memory image and device state read-only and seals them.
async fn seal_files(dir: &Path) -> Result<TemplateSeals, BakeError> {
    let (mem, state) = (dir.join("mem"), dir.join("state"));
    let started = Instant::now();
    let seals = tokio::task::spawn_blocking(move || {
        Ok::<_, std::io::Error>(TemplateSeals {
            memory: integrity::seal(&mem)?,
            state: integrity::seal(&state)?,
        })
    })
    .await
    .map_err(std::io::Error::other)??;
    tracing::debug!(
        seal_ms = started.elapsed().as_secs_f64() * 1e3,
        memory_bytes = seals.memory.size,
        "template files sealed"
    );
    Ok(seals)
}

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn template_names() {
        assert!(valid_name("code-interpreter"));
        assert!(!valid_name(""));
        assert!(!valid_name("../x"));
        assert!(!valid_name("Base"));
        assert!(!valid_name(&"a".repeat(41)));
    }
}
