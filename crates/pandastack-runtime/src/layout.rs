//! Where things live under the data directory.

use std::path::{Path, PathBuf};

const VOLUMES: &str = "volumes";
const VOLUME_SNAPSHOTS: &str = "volume-snapshots";

/// The data directory: `templates/<name>/`, `sandboxes/<id>/`, `snapshots/<id>/`, and volume
/// files: `volumes/<id>.img`, `volume-snapshots/<id>.img`. Callers check ids before they name
/// paths (see [`crate::valid_id`]).
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Uses `root`, creating the subdirectories. `root` becomes root's alone (0700): the
    /// host's processes run as root, and a VM process, which runs as a uid of its own,
    /// starts chrooted in its run directory and never names a path above it.
    pub fn open(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        if rustix::process::geteuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        }
        for sub in [
            "templates",
            "sandboxes",
            "snapshots",
            VOLUMES,
            VOLUME_SNAPSHOTS,
        ] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn template(&self, name: &str) -> PathBuf {
        self.root.join("templates").join(name)
    }

    pub fn sandbox(&self, id: &str) -> PathBuf {
        self.root.join("sandboxes").join(id)
    }

    pub fn snapshot(&self, id: &str) -> PathBuf {
        self.root.join("snapshots").join(id)
    }

    /// The directory of volume files.
    pub fn volumes(&self) -> PathBuf {
        self.root.join(VOLUMES)
    }

    /// The file of volume `id`.
    pub fn volume(&self, id: &str) -> PathBuf {
        self.volumes().join(format!("{id}.img"))
    }

    /// The directory of volume snapshot files.
    pub fn volume_snapshots(&self) -> PathBuf {
        self.root.join(VOLUME_SNAPSHOTS)
    }

    /// The file of volume snapshot `id`.
    pub fn volume_snapshot(&self, id: &str) -> PathBuf {
        self.volume_snapshots().join(format!("{id}.img"))
    }
}
