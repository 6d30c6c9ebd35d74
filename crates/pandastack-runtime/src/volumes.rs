//! Volume slots: extra disks a sandbox's VM has besides its root disk.
//!
//! The device set is part of a VM's saved state and `-M microvm` cannot hotplug, so a template
//! is baked with a fixed number of slots ([`crate::DeviceProfile`]), each backed by an empty
//! placeholder file (`slot<N>.img`, 0 bytes: the guest sees a disk of size 0 and never reads
//! it), and every VM restored from that bake has the same slots. What backs a slot is chosen at
//! each restore:
//!
//! - **create from a template**: the caller's file (read-write or read-only) or a new
//!   placeholder. A create that binds a volume takes no pooled VM (those run with placeholders).
//! - **snapshot**: the content of every bound volume is reflinked into the snapshot
//!   (`vol<N>.img`) while the VM is paused, together with its memory and root disk.
//! - **create from a snapshot** (and each fork child): a slot bound in the snapshot gets a
//!   reflink of the snapshot's copy in the sandbox's own directory (`vol<N>.img`, removed with
//!   the sandbox), never the live volume; a slot unbound in the snapshot may be bound to a file.
//! - **hibernate / wake**: the bindings are kept in `sandbox.json`; wake binds the same files.
//!
//! After every restore the runtime has the driver tell the guest each bound disk's size
//! ([`pandastack_vm::Vm::refresh_volume`]); the guest kept the size it saw when the state was
//! saved (0 for a slot that was unbound). [`Runtime::mount_volume`] mounts a slot's ext4 file
//! system inside the guest; [`create_volume_file`] makes one on the host;
//! [`Runtime::freeze_fs`] / [`Runtime::thaw_fs`] hold a mounted volume still for a host-side copy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pandastack_guest_proto::v1::{self, exec_input, exec_output, process_client::ProcessClient};
use pandastack_vm::{Vm, VmDriver, VolumeDisk};
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;

use crate::sandbox::Sandbox;
use crate::Runtime;

/// The empty file behind unbound slot `slot` in a VM's directory.
pub(crate) fn placeholder_name(slot: usize) -> String {
    format!("slot{slot}.img")
}

/// A sandbox's (or snapshot's) own copy of the volume in slot `slot`.
pub(crate) fn copy_name(slot: usize) -> String {
    format!("vol{slot}.img")
}

/// Creates the placeholder of unbound slot `slot` in `dir` (0 bytes, which QEMU accepts as a
/// disk of size 0) and returns its disk.
pub(crate) fn placeholder(dir: &Path, slot: usize) -> std::io::Result<VolumeDisk> {
    let path = dir.join(placeholder_name(slot));
    std::fs::File::create(&path)?;
    Ok(VolumeDisk {
        path,
        read_only: false,
    })
}

/// What backs one slot of a VM being created ([`Runtime::create_with_bindings`]).
#[derive(Debug, Clone)]
pub enum SlotSource {
    /// A new placeholder.
    Unbound,
    /// The caller's file, bound where it is.
    Bound(VolumeDisk),
    /// A reflink of `from` in the sandbox's directory ([`copy_name`]), bound: the sandbox's own
    /// copy, removed with it.
    CloneOf { from: PathBuf, read_only: bool },
    /// The file `from` (made for this sandbox alone, e.g. a copy taken while its source was
    /// frozen) moved into the sandbox's directory ([`copy_name`]), bound and removed with the
    /// sandbox. A create that fails before the move leaves `from` where it was.
    MoveIn { from: PathBuf, read_only: bool },
}

/// How a snapshot records a volume: its content is `vol<N>.img` in the snapshot directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotVolume {
    /// It was bound read-only.
    pub read_only: bool,
}

/// Checks a caller's volume file before any VM starts: a regular file of whole sectors.
pub(crate) fn check_volume(disk: &VolumeDisk) -> std::io::Result<()> {
    let meta = std::fs::metadata(&disk.path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if !meta.len().is_multiple_of(512) {
        return Err(std::io::Error::other(format!(
            "{} bytes is not a whole number of 512-byte sectors",
            meta.len()
        )));
    }
    Ok(())
}

/// The smallest volume [`create_volume_file`] makes.
pub const MIN_VOLUME_BYTES: u64 = 1 << 20;

/// Creates an empty ext4 volume of `size_bytes` at `path` (which must not exist): a sparse file
/// formatted by `mkfs.ext4` with no blocks reserved for root (the volume is its user's). The
/// size must be a multiple of 4 KiB and at least [`MIN_VOLUME_BYTES`]. A failure leaves no
/// file.
pub fn create_volume_file(path: &Path, size_bytes: u64) -> std::io::Result<()> {
    if size_bytes < MIN_VOLUME_BYTES || !size_bytes.is_multiple_of(4096) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("volume size {size_bytes}: must be a multiple of 4096 and at least 1 MiB"),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    let made = (|| {
        file.set_len(size_bytes)?;
        drop(file);
        let out = std::process::Command::new("mkfs.ext4")
            .args(["-F", "-q", "-m", "0"])
            .arg(path)
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "mkfs.ext4 failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Why a volume could not be mounted in the guest.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("sandbox has no volume slot {0}")]
    NoSlot(usize),
    #[error("volume slot {0} is not bound")]
    Unbound(usize),
    #[error("invalid mount point {0:?}: must be an absolute path")]
    InvalidPath(String),
    #[error("invalid owner {0:?}: expected user, user:group or uid:gid")]
    InvalidOwner(String),
    #[error("guest agent")]
    Agent(#[source] tonic::Status),
    #[error("guest agent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("mount in the guest failed (exit {code}): {stderr}")]
    Failed { code: i32, stderr: String },
}

/// Bound on a mount in the guest.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Run as root in the guest: finds the disk of a slot by its serial number once the guest sees
/// its size (the size change is handled by the guest kernel in the background after a
/// restore), mounts it and hands its root directory to the owner.
const MOUNT_SCRIPT: &str = r#"serial=$1 dir=$2 opts=$3 owner=$4
dev= i=0
while :; do
  for d in /sys/block/vd*; do
    # `read` is a builtin (no process); it fails at an end of file without a newline, as
    # `serial` has, after setting the variable.
    s= n=0
    read -r s 2>/dev/null <"$d/serial"
    [ "$s" = "$serial" ] || continue
    read -r n 2>/dev/null <"$d/size"
    [ "$n" != 0 ] && dev=/dev/${d##*/}
  done
  [ -n "$dev" ] && break
  i=$((i + 1))
  [ "$i" -lt 1000 ] || { echo "no disk with serial $serial and a size" >&2; exit 3; }
  sleep 0.01
done
[ -d "$dir" ] || mkdir -p "$dir" || exit 4
mount -t ext4 -o "$opts" "$dev" "$dir" || exit 5
if [ -n "$owner" ]; then chown "$owner" "$dir" || exit 6; fi
"#;

impl<D: VmDriver> Runtime<D> {
    /// Mounts the ext4 file system of `sandbox`'s volume slot `slot` at `path` inside the guest
    /// (created if missing), through the guest agent as root. A read-write volume's root
    /// directory is then given to `owner` (`chown` syntax: `user`, `user:group`, `uid:gid`), so
    /// that user can write to it; a read-only one is mounted `ro,noload` (no journal replay:
    /// nothing is written) and keeps its owner.
    pub async fn mount_volume(
        &self,
        sandbox: &Sandbox<D::Vm>,
        slot: usize,
        path: &str,
        owner: Option<&str>,
    ) -> Result<(), MountError> {
        let disk = sandbox
            .info
            .volumes
            .get(slot)
            .ok_or(MountError::NoSlot(slot))?
            .as_ref()
            .ok_or(MountError::Unbound(slot))?;
        if !path.starts_with('/') || path.contains('\0') {
            return Err(MountError::InvalidPath(path.into()));
        }
        if let Some(o) = owner.filter(|o| !valid_owner(o)) {
            return Err(MountError::InvalidOwner(o.into()));
        }
        let (opts, owner) = if disk.read_only {
            ("ro,noload", "")
        } else {
            ("rw", owner.unwrap_or(""))
        };
        let serial = pandastack_vm::volume_serial(slot);
        let argv = [
            "/bin/sh",
            "-c",
            MOUNT_SCRIPT,
            "sh",
            &serial,
            path,
            opts,
            owner,
        ];
        let (code, stderr) = tokio::time::timeout(
            MOUNT_TIMEOUT + Duration::from_secs(5),
            run_as_root(&sandbox.agent, &argv, MOUNT_TIMEOUT),
        )
        .await
        .map_err(|_| MountError::Timeout(MOUNT_TIMEOUT))?
        .map_err(MountError::Agent)?;
        if code != 0 {
            return Err(MountError::Failed {
                code,
                stderr: stderr.trim().to_owned(),
            });
        }
        tracing::debug!(sandbox = %sandbox.id, slot, path, read_only = disk.read_only, "volume mounted");
        Ok(())
    }
}

/// Why a guest file system could not be frozen or thawed.
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error("invalid mount point {0:?}: must be an absolute path")]
    InvalidPath(String),
    #[error("guest agent")]
    Agent(#[source] tonic::Status),
    #[error("guest agent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("fsfreeze {op} {path} in the guest failed (exit {code}): {stderr}")]
    Failed {
        op: &'static str,
        path: String,
        code: i32,
        stderr: String,
    },
}

/// Run as root in the guest: `fsfreeze <op> -- <path>`, found wherever the image keeps it.
const FSFREEZE_SCRIPT: &str =
    r#"PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH exec fsfreeze "$1" -- "$2""#;

/// Bound on one `fsfreeze` in the guest (a freeze first writes the file system's dirty data).
const FREEZE_TIMEOUT: Duration = Duration::from_secs(30);

impl<D: VmDriver> Runtime<D> {
    /// Freezes the file system mounted at `path` in `sandbox`'s guest (`fsfreeze -f`, as
    /// root): dirty data is written and the journal flushed to the disk, and writes block until
    /// [`Runtime::thaw_fs`]. The disk's file is then consistent for a copy on the host.
    pub async fn freeze_fs(&self, sandbox: &Sandbox<D::Vm>, path: &str) -> Result<(), FreezeError> {
        fsfreeze(&sandbox.agent, "-f", path).await
    }

    /// Thaws what [`Runtime::freeze_fs`] froze (`fsfreeze -u`). Call it whatever happened
    /// after a freeze was asked for, a failed or timed-out one included.
    pub async fn thaw_fs(&self, sandbox: &Sandbox<D::Vm>, path: &str) -> Result<(), FreezeError> {
        fsfreeze(&sandbox.agent, "-u", path).await
    }
}

async fn fsfreeze(agent: &Channel, op: &'static str, path: &str) -> Result<(), FreezeError> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(FreezeError::InvalidPath(path.into()));
    }
    let argv = ["/bin/sh", "-c", FSFREEZE_SCRIPT, "sh", op, path];
    let (code, stderr) = tokio::time::timeout(
        FREEZE_TIMEOUT + Duration::from_secs(5),
        run_as_root(agent, &argv, FREEZE_TIMEOUT),
    )
    .await
    .map_err(|_| FreezeError::Timeout(FREEZE_TIMEOUT))?
    .map_err(FreezeError::Agent)?;
    if code != 0 {
        return Err(FreezeError::Failed {
            op,
            path: path.into(),
            code,
            stderr: stderr.trim().to_owned(),
        });
    }
    Ok(())
}

/// `chown` owner syntax with names or ids only (nothing `chown` could take for an option).
fn valid_owner(owner: &str) -> bool {
    !owner.is_empty()
        && !owner.starts_with('-')
        && owner.len() <= 65
        && owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}

/// Runs `argv` as root in the guest; returns its exit code and standard error.
pub(crate) async fn run_as_root(
    agent: &Channel,
    argv: &[&str],
    timeout: Duration,
) -> Result<(i32, String), tonic::Status> {
    let start = v1::ExecInput {
        input: Some(exec_input::Input::Start(v1::ExecStart {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout_ms: timeout.as_millis() as u64,
            ..Default::default()
        })),
    };
    let mut out = ProcessClient::new(agent.clone())
        .exec(futures::stream::iter([start]))
        .await?
        .into_inner();
    let mut stderr = Vec::new();
    while let Some(msg) = out.message().await? {
        match msg.output {
            Some(exec_output::Output::Stderr(b)) => stderr.extend_from_slice(&b),
            Some(exec_output::Output::Exit(e)) => {
                return Ok((e.exit_code, String::from_utf8_lossy(&stderr).into_owned()))
            }
            _ => {}
        }
    }
    Err(tonic::Status::unavailable(
        "exec stream ended without an exit",
    ))
}

/// Has the guest see the size of every bound slot of `vm` (after a restore).
pub(crate) async fn refresh_bound<V: Vm>(
    vm: &V,
    volumes: &[Option<VolumeDisk>],
) -> Result<(), pandastack_vm::VmError> {
    for (slot, disk) in volumes.iter().enumerate() {
        if let Some(disk) = disk {
            vm.refresh_volume(slot, disk).await?;
        }
    }
    Ok(())
}

/// The disks of `volumes` for a VM in `dir`: an unbound slot's placeholder is `slot<N>.img`.
pub(crate) fn disks_in(dir: &Path, volumes: &[Option<VolumeDisk>]) -> Vec<VolumeDisk> {
    volumes
        .iter()
        .enumerate()
        .map(|(slot, v)| {
            v.clone().unwrap_or_else(|| VolumeDisk {
                path: dir.join(placeholder_name(slot)),
                read_only: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_files_are_sparse_ext4_of_the_size_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.ext4");
        create_volume_file(&path, 64 << 20).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 16 << 20, "not sparse");
        // ext4 magic at 1024 + 0x38.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1024 + 0x38..1024 + 0x3a], &[0x53, 0xef]);
        let kind = create_volume_file(&path, 64 << 20).unwrap_err().kind();
        assert_eq!(kind, std::io::ErrorKind::AlreadyExists);
        for bad in [0, 4096, (1 << 20) + 512] {
            let p = dir.path().join(format!("bad-{bad}"));
            assert!(create_volume_file(&p, bad).is_err());
            assert!(!p.exists());
        }
    }

    #[test]
    fn owners() {
        for ok in ["user", "1000:1000", "user:", "www-data:www-data", "a.b"] {
            assert!(valid_owner(ok), "{ok}");
        }
        for bad in ["", "--reference=/etc/shadow", "a b", "a;b", "$(id)", "x/y"] {
            assert!(!valid_owner(bad), "{bad}");
        }
    }

    #[test]
    fn unbound_slots_are_placeholders_in_the_vm_directory() {
        let bound = VolumeDisk {
            path: "/v/a.ext4".into(),
            read_only: true,
        };
        let disks = disks_in(Path::new("/d/sb"), &[None, Some(bound.clone())]);
        assert_eq!(disks[0].path, Path::new("/d/sb/slot0.img"));
        assert!(!disks[0].read_only);
        assert_eq!(disks[1], bound);
    }
}
