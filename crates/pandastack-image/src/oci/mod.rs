//! OCI image tarballs (`docker save`, or an OCI image layout) → ext4 root filesystem, without
//! ever unpacking untrusted layers as root on the host.
//!
//! [`import_oci`] runs on the host as root but only *reads* the outer archive: it finds the
//! manifest ([`layout`]) and copies the layer blobs to files it names itself. The layers are
//! applied by a child process ([`confine`]) in a user namespace where uid/gid 0–65535 are host
//! ids 100000–165535, in a private mount namespace that shows it the build's work directory as
//! `/tmp`: [`unpack_main`] applies each layer (whiteouts included, hostile entries dropped) and
//! runs `mkfs.ext4 -d` there, so the image records the tarball's owners, not the host's.
//!
//! Work directory layout, all removed again but the image:
//!
//! ```text
//! <work>/layer-0 …   layer blobs as in the archive (root's, read-only for the unpacker)
//! <work>/root/       the unpacked tree (the unpacker's: uid 100000)
//! <work>/out/        where the unpacker writes the image (uid 100000)
//! <work>/rootfs.ext4 the result, moved out of out/ and owned by root
//! ```

mod confine;
mod layout;
mod unpack;

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use unpack::{unpack_main, UnpackArgs};

/// First host uid/gid of the unpacker's user namespace (65536 ids from here).
pub const UNPACK_ID_BASE: u32 = 100_000;
/// Ids mapped into the unpacker's user namespace.
pub const UNPACK_ID_COUNT: u32 = 65_536;

/// File name of the result in the work directory.
const IMAGE: &str = "rootfs.ext4";

/// How to import.
#[derive(Debug, Clone)]
pub struct OciOptions {
    /// Root filesystem size in MiB; default: what the unpacked tree needs plus a quarter and
    /// 64 MiB (at least 256 MiB). Given and too small, the import fails saying what it needs.
    pub disk_mb: Option<u32>,
    /// An executable that runs [`unpack_main`] as `<unpacker> internal oci-unpack …` (the
    /// `pandastack` binary).
    pub unpacker: PathBuf,
}

/// An imported image.
#[derive(Debug, Clone)]
pub struct OciImport {
    /// `<work>/rootfs.ext4`, owned by root.
    pub image: PathBuf,
    /// Layer entries applied.
    pub entries: u64,
    /// Entries dropped for safety (device nodes, `..` paths, writes through links out of the
    /// tree, hard links to nothing in it, nameless whiteouts) or that the confined unpacker
    /// cannot make (owners outside uid/gid 0–65535).
    pub neutralised: u64,
    /// `KEY=value` entries of the image config's `Env` (empty if it has none).
    pub env: Vec<String>,
    /// The image config's `WorkingDir`, if set.
    pub working_dir: Option<String>,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("not an OCI or docker-save tarball: {0}")]
    NotAnImage(String),
    #[error("layer {layer} is missing from the tarball")]
    MissingLayer { layer: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("layer {digest}: content does not match its digest")]
    Digest { digest: String },
    #[error("image needs {need_mb} MiB, more than disk_mb {disk_mb}")]
    TooSmall { need_mb: u64, disk_mb: u32 },
    #[error("work directory {path} exists and is not empty")]
    WorkNotEmpty { path: PathBuf },
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

/// Reads `tarball` (plain or gzip), writes `<work>/rootfs.ext4`. `work` is created (it must not
/// exist, or be empty); everything else in it is removed before returning, also on error (then
/// `work` itself too, if this made it). `log` gets progress lines and each dropped entry.
pub fn import_oci(
    tarball: &Path,
    work: &Path,
    opts: &OciOptions,
    log: &mut dyn FnMut(&str),
) -> Result<OciImport, OciError> {
    let created = prepare_work(work)?;
    let result = import_into(tarball, work, opts, log);
    // The unpacked tree, the layer copies and the unpacker's directory are never needed again.
    // remove_dir_all does not follow symlinks, so nothing the layers made leads it elsewhere.
    let keep = result.as_ref().ok().map(|r| r.image.clone());
    for entry in std::fs::read_dir(work).into_iter().flatten().flatten() {
        let p = entry.path();
        if Some(&p) == keep.as_ref() {
            continue;
        }
        let _ = match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
    }
    if result.is_err() && created {
        let _ = std::fs::remove_dir(work);
    }
    result
}

/// Makes `work` (or accepts it empty); true if it was made here.
fn prepare_work(work: &Path) -> Result<bool, OciError> {
    match std::fs::read_dir(work) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(OciError::WorkNotEmpty {
                    path: work.to_owned(),
                });
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = work.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("create {}", parent.display())))?;
            }
            std::fs::create_dir(work).map_err(io(format!("create {}", work.display())))?;
            Ok(true)
        }
        Err(e) => Err(io(format!("read {}", work.display()))(e)),
    }
}

fn import_into(
    tarball: &Path,
    work: &Path,
    opts: &OciOptions,
    log: &mut dyn FnMut(&str),
) -> Result<OciImport, OciError> {
    // The unpacker (another uid) reads the layers in here: traversable and readable whatever
    // the umask, writable only by root.
    set_mode(work, 0o755)?;
    log("reading the image manifest");
    let image = layout::extract(tarball, work)?;
    log(&format!(
        "{} layer(s), {} MiB",
        image.layers.len(),
        image.layer_bytes.div_ceil(1 << 20)
    ));
    for layer in &image.layers {
        set_mode(layer, 0o644)?;
    }
    for dir in ["root", "out"] {
        let d = work.join(dir);
        std::fs::create_dir(&d).map_err(io(format!("create {}", d.display())))?;
        std::os::unix::fs::chown(&d, Some(UNPACK_ID_BASE), Some(UNPACK_ID_BASE))
            .map_err(io(format!("chown {}", d.display())))?;
        set_mode(&d, 0o755)?;
    }
    log("unpacking the layers (user namespace) and making the ext4 image");
    let summary = confine::run_unpacker(work, &image.layers, opts, log)?;
    let image_path = take_image(work)?;
    log(&format!(
        "{} entries applied, {} dropped for safety",
        summary.entries, summary.neutralised
    ));
    Ok(OciImport {
        image: image_path,
        entries: summary.entries,
        neutralised: summary.neutralised,
        env: image.env,
        working_dir: image.working_dir,
    })
}

fn set_mode(path: &Path, mode: u32) -> Result<(), OciError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {}", path.display())))
}

/// Moves the unpacker's image to `<work>/rootfs.ext4`, root's. Whatever the unpacker left is
/// distrusted: `out/` is made root's first (so no process of the unpacker's uid can change it
/// any more), then the image must be a regular file with one link, opened without following a
/// symlink, and is chowned through that open file.
fn take_image(work: &Path) -> Result<PathBuf, OciError> {
    let out = work.join("out");
    std::os::unix::fs::lchown(&out, Some(0), Some(0))
        .map_err(io(format!("chown {}", out.display())))?;
    set_mode(&out, 0o700)?;
    let made = out.join(IMAGE);
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&made)
        .map_err(io(format!("open {}", made.display())))?;
    let md = f
        .metadata()
        .map_err(io(format!("stat {}", made.display())))?;
    if !md.is_file() || md.nlink() != 1 {
        return Err(OciError::Unpacker(format!(
            "{} is not a plain file with one link",
            made.display()
        )));
    }
    std::os::unix::fs::fchown(&f, Some(0), Some(0))
        .map_err(io(format!("chown {}", made.display())))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(io(format!("chmod {}", made.display())))?;
    let image = work.join(IMAGE);
    std::fs::rename(&made, &image).map_err(io(format!("move {}", made.display())))?;
    Ok(image)
}
