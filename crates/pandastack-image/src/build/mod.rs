//! Spec → base image (`base.ext4`, no agent in it), cached by spec hash.
//!
//! ```text
//!  lock <dir>.lock ─► cached? ─yes─► done
//!        │no
//!  <dir>.tmp/  mmdebstrap (private mount namespace)          mkfs.ext4 -d tree base.ext4
//!     tree/ ◄── bootstrap → pip → npm → files → setup[i] → guest-prep ──► base.ext4
//!        │ success: manifest.json, spec.toml; rm tree; rename <dir>.tmp → <dir>
//!        │ failure: rm tree; rename <dir>.tmp → <dir>.failed (build.log kept)
//! ```

mod mkfs;
mod plan;
mod run;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cache::{remove_build_dir, sibling, CacheLock, ImageCache};
use crate::manifest::{now_rfc3339, Manifest};
use crate::mirror::{host_debian_sources, MIRROR_ENV};
use crate::spec::{SpecError, SpecHash, TemplateSpec, BUILDER_VERSION};

use run::Session;

/// The image file in a cache directory.
pub const BASE_IMAGE: &str = "base.ext4";

/// Build progress, in order, for display.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The image was already built; nothing to do.
    Cached {
        image: PathBuf,
    },
    /// Another process is building the same image; waiting for it.
    Waiting {
        lock: PathBuf,
    },
    StepStarted {
        step: String,
    },
    StepFinished {
        step: String,
        elapsed: Duration,
    },
    /// The step the build failed in (the error says why).
    StepFailed {
        step: String,
        elapsed: Duration,
    },
    /// A line of command output (also in `build.log`).
    Log {
        step: String,
        line: String,
    },
    /// Bytes apt has downloaded so far (bootstrap and apt in setup steps).
    Downloaded {
        bytes: u64,
    },
    Finished {
        image: PathBuf,
        elapsed: Duration,
        downloaded_bytes: u64,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Rebuild even if the image is cached.
    pub force: bool,
}

/// A built base image.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseImage {
    /// `<cache>/images/<name>-<hash16>/`
    pub dir: PathBuf,
    /// `<dir>/base.ext4`
    pub path: PathBuf,
    pub manifest: Manifest,
    /// Found in the cache rather than built now.
    pub cached: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("hash the spec")]
    Spec(#[from] SpecError),
    #[error("building images needs root (mmdebstrap --mode=root, chroot, mounts)")]
    NotRoot,
    #[error("{program} not found (install the {package} package)")]
    MissingTool {
        program: &'static str,
        package: &'static str,
    },
    #[error("no Debian mirror for suite {suite} in the host's apt sources (/etc/apt); set {MIRROR_ENV} or debian.mirror in the spec")]
    NoMirror { suite: String },
    #[error("image cache {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("step {step} failed: {command} ({status}); log: {log}")]
    Step {
        step: String,
        command: String,
        status: String,
        log: PathBuf,
    },
    #[error("step mkfs: the root filesystem needs about {need_mb} MiB but vm.disk_mb is {disk_mb}; raise vm.disk_mb to at least {suggest_mb}; log: {log}")]
    DiskTooSmall {
        need_mb: u64,
        disk_mb: u32,
        suggest_mb: u64,
        log: PathBuf,
    },
    #[error("step {step}: {path}; log: {log}")]
    Io {
        step: String,
        path: PathBuf,
        log: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl BuildError {
    /// The step that failed, if the build got that far.
    pub fn step(&self) -> Option<&str> {
        match self {
            BuildError::Step { step, .. } | BuildError::Io { step, .. } => Some(step),
            BuildError::DiskTooSmall { .. } => Some("mkfs"),
            _ => None,
        }
    }

    /// The kept build log, if the build got that far.
    pub fn log(&self) -> Option<&Path> {
        match self {
            BuildError::Step { log, .. }
            | BuildError::Io { log, .. }
            | BuildError::DiskTooSmall { log, .. } => Some(log),
            _ => None,
        }
    }

    fn with_log(mut self, new: PathBuf) -> Self {
        match &mut self {
            BuildError::Step { log, .. }
            | BuildError::Io { log, .. }
            | BuildError::DiskTooSmall { log, .. } => *log = new,
            _ => {}
        }
        self
    }
}

fn cache_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Cache {
        path: path.to_owned(),
        source,
    }
}

/// `program` on PATH, or in /usr/sbin and /sbin (often missing from a non-login root PATH).
pub(crate) fn find_tool(
    program: &'static str,
    package: &'static str,
) -> Result<PathBuf, BuildError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(program))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
        .ok_or(BuildError::MissingTool { program, package })
}

impl ImageCache {
    /// The cached base image for `spec`, if it is complete.
    pub fn cached_base(&self, spec: &TemplateSpec) -> Result<Option<BaseImage>, BuildError> {
        let hash = spec.hash()?;
        Ok(self.find_base(&self.image_dir(spec, &hash)))
    }

    pub(crate) fn find_base(&self, dir: &Path) -> Option<BaseImage> {
        let path = dir.join(BASE_IMAGE);
        let manifest = Manifest::read(dir)?;
        path.is_file().then(|| BaseImage {
            dir: dir.to_owned(),
            path,
            manifest,
            cached: true,
        })
    }

    /// Builds the base image for `spec`, or finds it in the cache.
    pub fn build_base(
        &self,
        spec: &TemplateSpec,
        options: BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BaseImage, BuildError> {
        let hash = spec.hash()?;
        let dir = self.image_dir(spec, &hash);
        if !options.force {
            if let Some(image) = self.find_base(&dir) {
                progress(Progress::Cached {
                    image: image.path.clone(),
                });
                return Ok(image);
            }
        }
        let _lock = CacheLock::acquire(&dir, |lock| {
            progress(Progress::Waiting {
                lock: lock.to_owned(),
            })
        })
        .map_err(cache_err(&dir))?;
        self.build_base_locked(spec, &hash, &dir, options, progress)
    }

    /// [`ImageCache::build_base`] with the image's lock held.
    pub(crate) fn build_base_locked(
        &self,
        spec: &TemplateSpec,
        hash: &SpecHash,
        dir: &Path,
        options: BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BaseImage, BuildError> {
        if !options.force {
            // Built by whoever held the lock before us?
            if let Some(image) = self.find_base(dir) {
                progress(Progress::Cached {
                    image: image.path.clone(),
                });
                return Ok(image);
            }
        }
        if !rustix::process::geteuid().is_root() {
            return Err(BuildError::NotRoot);
        }
        let work = sibling(dir, ".tmp");
        let failed = sibling(dir, ".failed");
        // Left by an interrupted build (we hold the lock, so nobody else is using it).
        remove_build_dir(&work).map_err(cache_err(&work))?;
        std::fs::create_dir_all(&work).map_err(cache_err(&work))?;
        let started = Instant::now();
        let mut session =
            Session::new(work.join("build.log"), progress).map_err(cache_err(&work))?;
        session.note(&format!(
            "build {} {} ({BUILDER_VERSION}) at {}",
            spec.name(),
            hash,
            now_rfc3339()
        ));
        let result = build_image(spec, &work, &mut session);
        match &result {
            Ok(_) => session.finish_step(),
            Err(_) => session.fail_step(),
        }
        let cleaned = remove_build_dir(&work.join("tree"))
            .and_then(|()| remove_build_dir(&work.join("hooks")));
        let write_spec = std::fs::write(work.join("spec.toml"), spec.text());
        let built = match (result, cleaned) {
            (Ok(built), Ok(())) => built,
            (Err(e), _) => {
                drop(session);
                let _ = remove_build_dir(&failed);
                if std::fs::rename(&work, &failed).is_err() {
                    return Err(e);
                }
                return Err(e.with_log(failed.join("build.log")));
            }
            (Ok(_), Err(e)) => return Err(cache_err(&work)(e)),
        };
        write_spec.map_err(cache_err(&work))?;

        let image_tmp = work.join(BASE_IMAGE);
        let md = std::fs::metadata(&image_tmp).map_err(cache_err(&image_tmp))?;
        let manifest = Manifest {
            name: spec.name().to_owned(),
            hash: hash.as_str().to_owned(),
            builder: BUILDER_VERSION.to_owned(),
            description: spec.description().to_owned(),
            suite: spec.debian().suite.clone(),
            variant: spec.debian().variant.as_str().to_owned(),
            mirror: built.mirror,
            vm: spec.vm(),
            apparent_bytes: md.len(),
            allocated_bytes: md.blocks() * 512,
            tree_bytes: built.tree_bytes,
            downloaded_bytes: session.downloaded(),
            steps: session.steps().to_vec(),
            build_seconds: started.elapsed().as_secs_f64(),
            built_at: now_rfc3339(),
        };
        manifest.write(&work).map_err(cache_err(&work))?;
        let downloaded_bytes = session.downloaded();
        drop(session);
        if dir.exists() {
            // --force: move the old image out of the way first, so `dir` is never half-written.
            let old = sibling(dir, ".old");
            remove_build_dir(&old).map_err(cache_err(&old))?;
            std::fs::rename(dir, &old).map_err(cache_err(dir))?;
            remove_build_dir(&old).map_err(cache_err(&old))?;
        }
        std::fs::rename(&work, dir).map_err(cache_err(dir))?;
        let _ = remove_build_dir(&failed);
        let path = dir.join(BASE_IMAGE);
        progress(Progress::Finished {
            image: path.clone(),
            elapsed: started.elapsed(),
            downloaded_bytes,
        });
        Ok(BaseImage {
            dir: dir.to_owned(),
            path,
            manifest,
            cached: false,
        })
    }
}

/// What [`build_image`] learned on the way.
struct Built {
    mirror: String,
    tree_bytes: u64,
}

/// Everything between an empty work directory and `<work>/base.ext4`.
fn build_image(
    spec: &TemplateSpec,
    work: &Path,
    session: &mut Session<'_>,
) -> Result<Built, BuildError> {
    let mmdebstrap = find_tool("mmdebstrap", "mmdebstrap")?;
    let setpriv = find_tool("setpriv", "util-linux")?;
    let unshare = find_tool("unshare", "util-linux")?;
    find_tool("mkfs.ext4", "e2fsprogs")?;
    let log = session.log_path().to_owned();
    let deb = spec.debian();
    let sources = host_debian_sources(&deb.suite, deb.mirror.as_deref()).ok_or_else(|| {
        BuildError::NoMirror {
            suite: deb.suite.clone(),
        }
    })?;
    session.note(&format!(
        "debian sources ({:?}): {}",
        sources.origin,
        sources.mmdebstrap_args(&deb.components).join(" | ")
    ));
    let tree = work.join("tree");
    let hooks = work.join("hooks");
    let io_err = |step: &str, path: &Path| {
        let (step, path, log) = (step.to_owned(), path.to_owned(), log.clone());
        move |source| BuildError::Io {
            step,
            path,
            log,
            source,
        }
    };
    let host = plan::HostEnv::from_host();
    let plan =
        plan::plan(spec, &host, &sources, &hooks, &tree).map_err(io_err("bootstrap", &hooks))?;

    session.start_step("bootstrap");
    // The run cannot outlive us or leave mounts behind, however it ends: setpriv has unshare
    // killed when we die, unshare then kills mmdebstrap, PID 1 of a new PID namespace, and with it
    // every process of the build (mmdebstrap forks workers, apt and dpkg); chroot mounts live in
    // a private mount namespace that goes away with them.
    let mut cmd = Command::new(setpriv);
    cmd.args(["--pdeathsig", "KILL", "--"])
        .arg(&unshare)
        .args(["--mount", "--pid", "--fork", "--mount-proc"])
        .args(["--propagation", "private", "--kill-child=SIGKILL", "--"])
        .arg(&mmdebstrap)
        .args(&plan.args);
    let watch = run::Watch {
        step_markers: true,
        downloads: Some(tree.join("var/cache/apt/archives")),
    };
    let status = run::run(session, &mut cmd, &watch).map_err(io_err("bootstrap", &mmdebstrap))?;
    if !status.success() {
        let step = session.current_step().unwrap_or("bootstrap").to_owned();
        return Err(BuildError::Step {
            command: plan.command_of(&step),
            step,
            status: format!("mmdebstrap {status}"),
            log,
        });
    }

    session.start_step("mkfs");
    let usage = mkfs::tree_usage(&tree).map_err(io_err("mkfs", &tree))?;
    let disk_mb = spec.vm().disk_mb;
    let too_small = |t: mkfs::TooSmall| BuildError::DiskTooSmall {
        need_mb: t.need_mb,
        disk_mb,
        suggest_mb: t.suggest_mb,
        log: log.clone(),
    };
    mkfs::check_fits(usage, disk_mb).map_err(too_small)?;
    let image = work.join(BASE_IMAGE);
    match mkfs::mkfs(session, &tree, &image, disk_mb) {
        Ok(()) => {}
        Err(mkfs::MkfsError::TooSmall) => return Err(too_small(mkfs::too_small(usage, disk_mb))),
        Err(mkfs::MkfsError::Io(e)) => return Err(io_err("mkfs", &image)(e)),
        Err(mkfs::MkfsError::Failed(command)) => {
            return Err(BuildError::Step {
                step: "mkfs".into(),
                command,
                status: "failed".into(),
                log,
            })
        }
    }
    session.finish_step();
    Ok(Built {
        mirror: sources.main,
        tree_bytes: usage.block_bytes,
    })
}
