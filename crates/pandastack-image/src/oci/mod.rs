//! OCI image tarballs (`docker save`, or an OCI image layout) → ext4 root filesystem, without
//! ever unpacking untrusted layers as root on the host.
//!
//! [`import_oci`] runs on the host as root but only *reads* the outer archive: it finds the
//! manifest ([`layout`]) and copies the layer blobs and the image config to files it names
//! itself. The layers are applied by a child process ([`confine`]) in a user namespace where
//! uid/gid 0–65535 are host ids 100000–165535, in a private mount namespace that shows it only
//! the build's work directory: [`unpack_main`] applies each layer (whiteouts included, hostile
//! entries dropped) and runs `mkfs.ext4 -d` there, so the image records the tarball's owners.

mod confine;
mod layout;
mod unpack;

use std::path::{Path, PathBuf};

pub use unpack::{unpack_main, UnpackArgs};

/// First host uid/gid of the unpacker's user namespace (65536 ids from here).
pub const UNPACK_ID_BASE: u32 = 100_000;
/// Ids mapped into the unpacker's user namespace.
pub const UNPACK_ID_COUNT: u32 = 65_536;

/// How to import.
#[derive(Debug, Clone)]
pub struct OciOptions {
    /// Root filesystem size; default: what the unpacked tree needs plus room to grow.
    pub disk_mb: Option<u32>,
    /// An executable that runs [`unpack_main`] as `<unpacker> internal oci-unpack …` (the
    /// `pandastack` binary).
    pub unpacker: PathBuf,
}

/// An imported image.
#[derive(Debug, Clone)]
pub struct OciImport {
    /// `<work>/out/rootfs.ext4`.
    pub image: PathBuf,
    /// Layer entries applied.
    pub entries: u64,
    /// Entries dropped for safety (device nodes, `..` paths, links out of the tree).
    pub neutralised: u64,
    /// `KEY=value` entries of the image config's `Env`.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("not an OCI image layout or `docker save` tarball: {0}")]
    NotAnImage(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("layer {digest}: content does not match its digest")]
    Digest { digest: String },
    #[error("image needs {need_mb} MiB, more than disk_mb {disk_mb}")]
    TooSmall { need_mb: u64, disk_mb: u32 },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tar: {0}")]
    Tar(String),
    #[error("unpacker: {0}")]
    Unpacker(String),
    #[error("mkfs.ext4: {0}")]
    Mkfs(String),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OciError {
    let what = what.into();
    move |source| OciError::Io { what, source }
}

/// Imports `tarball` into `<work>/out/rootfs.ext4`. `work` is created; on success it holds only
/// `out/`, on failure nothing is left of it.
pub fn import_oci(
    tarball: &Path,
    work: &Path,
    opts: &OciOptions,
    log: &mut dyn FnMut(&str),
) -> Result<OciImport, OciError> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).map_err(io(format!("create {}", work.display())))?;
    let result = import_into(tarball, work, opts, log);
    // The unpacked tree and the layer copies are never needed again.
    for entry in std::fs::read_dir(work).into_iter().flatten().flatten() {
        if entry.file_name() != "out" || result.is_err() {
            let p = entry.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
    if result.is_err() {
        let _ = std::fs::remove_dir_all(work);
    }
    result
}

fn import_into(
    tarball: &Path,
    work: &Path,
    opts: &OciOptions,
    log: &mut dyn FnMut(&str),
) -> Result<OciImport, OciError> {
    log("reading the image manifest");
    let image = layout::extract(tarball, work)?;
    log(&format!(
        "{} layer(s), {} MiB compressed",
        image.layers.len(),
        image.layer_bytes >> 20
    ));
    for dir in ["root", "out"] {
        let d = work.join(dir);
        std::fs::create_dir(&d).map_err(io(format!("create {}", d.display())))?;
        std::os::unix::fs::chown(&d, Some(UNPACK_ID_BASE), Some(UNPACK_ID_BASE))
            .map_err(io(format!("chown {}", d.display())))?;
    }
    log("unpacking the layers (user namespace) and making the ext4 image");
    let summary = confine::run_unpacker(work, &image.layers, opts, log)?;
    let image_path = work.join("out").join("rootfs.ext4");
    std::os::unix::fs::chown(&image_path, Some(0), Some(0))
        .map_err(io(format!("chown {}", image_path.display())))?;
    Ok(OciImport {
        image: image_path,
        entries: summary.entries,
        neutralised: summary.neutralised,
        env: image.env,
        working_dir: image.working_dir,
    })
}
