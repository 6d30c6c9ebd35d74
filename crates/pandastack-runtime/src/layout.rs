//! Where things live under the data directory.

use std::path::{Path, PathBuf};

/// The data directory: `templates/<name>/`, `sandboxes/<id>/`, `snapshots/<id>/`.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Uses `root`, creating the subdirectories.
    pub fn open(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        for sub in ["templates", "sandboxes", "snapshots"] {
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
}
