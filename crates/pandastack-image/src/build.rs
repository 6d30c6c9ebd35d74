//! Spec → sparse ext4 image, cached by spec hash.
//!
//! One mmdebstrap run does the whole tree: bootstrap, then customize hooks for pip, npm, files,
//! setup commands and guest preparation (mmdebstrap mounts /proc, /sys and /dev for hooks and
//! unmounts them however the run ends). Hooks print `@@step <name>` so progress and failures name
//! the step. Then `mkfs.ext4 -d` packs the tree into a sparse image.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::spec::TemplateSpec;

/// Progress of a build, for display.
#[derive(Debug, Clone)]
pub enum Progress {
    Cached { path: PathBuf },
    Step { name: String },
    StepDone { name: String, elapsed: Duration },
    Downloaded { bytes: u64 },
    Done { path: PathBuf, elapsed: Duration },
}

/// A built base image (no guest agent in it).
#[derive(Debug, Clone, Serialize)]
pub struct BaseImage {
    pub name: String,
    pub hash: String,
    pub path: PathBuf,
    pub dir: PathBuf,
    pub apparent_bytes: u64,
    pub allocated_bytes: u64,
    pub build_seconds: f64,
    pub cached: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("spec")]
    Spec(#[from] crate::spec::SpecError),
    #[error("no Debian mirror for {0} in the host's apt sources; set debian.mirror or PANDASTACK_DEBIAN_MIRROR")]
    NoMirror(String),
    #[error("step {step} failed: {command} (log: {log})")]
    Step {
        step: String,
        command: String,
        log: PathBuf,
    },
    #[error("image too small: the tree needs {need_mb} MiB but vm.disk_mb is {disk_mb}; raise vm.disk_mb")]
    TooSmall { need_mb: u64, disk_mb: u32 },
    #[error("build files")]
    Io(#[from] std::io::Error),
}

const MANIFEST: &str = "manifest.json";

fn image_dir(cache: &Path, spec: &TemplateSpec, hash: &str) -> PathBuf {
    cache
        .join("images")
        .join(format!("{}-{}", spec.name, &hash[..16]))
}

fn sizes(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| (m.len(), m.blocks() * 512))
        .unwrap_or((0, 0))
}

fn dir_size(path: &Path) -> u64 {
    Command::new("du")
        .args(["-sb", "--"])
        .arg(path)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Builds (or finds in the cache) the base image for `spec`, in the default cache.
pub fn build_base(
    spec: &TemplateSpec,
    force: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<BaseImage, BuildError> {
    build_base_in(&crate::cache_dir(), spec, force, progress)
}

/// Like [`build_base`], with the cache root given.
pub fn build_base_in(
    cache: &Path,
    spec: &TemplateSpec,
    force: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<BaseImage, BuildError> {
    let hash = spec.hash()?;
    let dir = image_dir(cache, spec, &hash);
    let path = dir.join("base.ext4");
    if !force && dir.join(MANIFEST).is_file() && path.is_file() {
        progress(Progress::Cached { path: path.clone() });
        let (apparent_bytes, allocated_bytes) = sizes(&path);
        let build_seconds = std::fs::read(dir.join(MANIFEST))
            .ok()
            .and_then(|m| serde_json::from_slice::<serde_json::Value>(&m).ok())
            .and_then(|v| v["build_seconds"].as_f64())
            .unwrap_or(0.0);
        return Ok(BaseImage {
            name: spec.name.clone(),
            hash,
            path,
            dir,
            apparent_bytes,
            allocated_bytes,
            build_seconds,
            cached: true,
        });
    }
    let started = Instant::now();
    std::fs::create_dir_all(dir.parent().unwrap_or(Path::new("/")))?;
    let work = dir.with_extension(format!("tmp-{}", std::process::id()));
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let result = build_into(spec, &work, progress);
    let tree = work.join("tree");
    if tree.exists() {
        let _ = std::fs::remove_dir_all(&tree);
    }
    if let Err(e) = result {
        // Keep the log next to where the image would be, drop everything else.
        let failed = dir.with_extension("failed");
        let _ = std::fs::remove_dir_all(&failed);
        let _ = std::fs::create_dir_all(&failed);
        let _ = std::fs::rename(work.join("build.log"), failed.join("build.log"));
        let _ = std::fs::remove_dir_all(&work);
        return Err(match e {
            BuildError::Step { step, command, .. } => BuildError::Step {
                step,
                command,
                log: failed.join("build.log"),
            },
            other => other,
        });
    }
    let build_seconds = started.elapsed().as_secs_f64();
    let (apparent_bytes, allocated_bytes) = sizes(&work.join("base.ext4"));
    let manifest = serde_json::json!({
        "name": spec.name, "hash": hash, "apparent_bytes": apparent_bytes,
        "allocated_bytes": allocated_bytes, "build_seconds": build_seconds,
        "built_at_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    std::fs::write(
        work.join(MANIFEST),
        serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
    )?;
    std::fs::write(
        work.join("spec.toml"),
        toml::to_string(spec).unwrap_or_default(),
    )?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::rename(&work, &dir)?;
    progress(Progress::Done {
        path: path.clone(),
        elapsed: started.elapsed(),
    });
    Ok(BaseImage {
        name: spec.name.clone(),
        hash,
        path,
        dir,
        apparent_bytes,
        allocated_bytes,
        build_seconds,
        cached: false,
    })
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Writes the hook scripts and returns the mmdebstrap arguments.
fn mmdebstrap_args(spec: &TemplateSpec, work: &Path) -> Result<Vec<String>, BuildError> {
    let suite = &spec.debian.suite;
    let mirror = match &spec.debian.mirror {
        Some(m) => m.clone(),
        None => crate::mirror::debian_mirror(suite)
            .ok_or_else(|| BuildError::NoMirror(suite.clone()))?,
    };
    let hooks = work.join("hooks");
    std::fs::create_dir_all(&hooks)?;
    let mut args = vec![
        "--mode=root".to_string(),
        format!("--variant={}", spec.debian.variant),
        format!("--include={}", spec.apt_packages().join(",")),
        "--dpkgopt=path-exclude=/usr/share/man/*".into(),
        "--dpkgopt=path-exclude=/usr/share/info/*".into(),
        "--dpkgopt=path-exclude=/usr/share/doc/*".into(),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright".into(),
        "--dpkgopt=path-exclude=/usr/share/locale/*".into(),
        "--aptopt=APT::Install-Recommends \"false\"".into(),
    ];
    let mut hook = |name: &str, script: String| -> Result<(), BuildError> {
        let file = hooks.join(format!("{}-{name}.sh", args.len()));
        std::fs::write(&file, format!("set -euo pipefail\n{script}\n"))?;
        args.push(format!(
            "--customize-hook=echo '@@step {name}'; bash {} \"$1\"",
            file.display()
        ));
        Ok(())
    };
    if !spec.pip.packages.is_empty() {
        let pkgs: Vec<String> = spec.pip.packages.iter().map(|p| shell_quote(p)).collect();
        hook(
            "pip",
            format!(
                "chroot \"$1\" pip install --break-system-packages --no-cache-dir {}",
                pkgs.join(" ")
            ),
        )?;
    }
    if !spec.npm.packages.is_empty() {
        let pkgs: Vec<String> = spec.npm.packages.iter().map(|p| shell_quote(p)).collect();
        hook("npm", format!("chroot \"$1\" npm install -g --no-fund --no-audit {}\nchroot \"$1\" npm cache clean --force", pkgs.join(" ")))?;
    }
    if !spec.files.is_empty() {
        let mut script = String::new();
        for (i, f) in spec.files.iter().enumerate() {
            let src = match (&f.content, &f.source) {
                (Some(c), _) => {
                    let p = hooks.join(format!("file-{i}"));
                    std::fs::write(&p, c)?;
                    p
                }
                (None, Some(s)) => spec.base_dir.join(s),
                (None, None) => continue,
            };
            // `install` runs inside the chroot, so symlinks in the image resolve inside it.
            script.push_str(&format!(
                "chroot \"$1\" install -D -m {:o} /dev/stdin {} < {}\n",
                f.mode,
                shell_quote(&f.dest),
                shell_quote(&src.to_string_lossy())
            ));
        }
        hook("files", script)?;
    }
    for (i, cmd) in spec.setup.iter().enumerate() {
        let script_path = hooks.join(format!("setup-{i}.cmd"));
        std::fs::write(&script_path, cmd)?;
        hook(
            &format!("setup[{i}]"),
            format!(
                "cp {} \"$1/tmp/pandastack-setup.sh\"\nchroot \"$1\" env DEBIAN_FRONTEND=noninteractive HOME=/root bash -euo pipefail /tmp/pandastack-setup.sh\nrm -f \"$1/tmp/pandastack-setup.sh\"",
                shell_quote(&script_path.to_string_lossy())
            ),
        )?;
    }
    hook("guest-prep", GUEST_PREP.to_string())?;
    args.push(suite.clone());
    args.push(work.join("tree").to_string_lossy().into_owned());
    args.push(format!("deb {mirror} {suite} main"));
    args.push(format!("deb {mirror} {suite}-updates main"));
    if let Some(sec) = crate::mirror::debian_mirror(&format!("{suite}-security")) {
        args.push(format!("deb {sec} {suite}-security main"));
    }
    Ok(args)
}

/// Makes the tree a guest: identity files the agent rewrites per sandbox, no fstab, small.
const GUEST_PREP: &str = r#"r="$1"
echo sandbox > "$r/etc/hostname"
: > "$r/etc/machine-id"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n' > "$r/etc/hosts"
rm -f "$r/etc/resolv.conf"
: > "$r/etc/resolv.conf"
: > "$r/etc/fstab"
mkdir -p "$r/usr/local/sbin"
chroot "$r" apt-get clean
rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/log/*.log "$r"/tmp/* "$r"/root/.cache
"#;

fn build_into(
    spec: &TemplateSpec,
    work: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), BuildError> {
    let log_path = work.join("build.log");
    let log = Arc::new(Mutex::new(std::fs::File::create(&log_path)?));
    let args = mmdebstrap_args(spec, work)?;
    let step_err = |step: &str, command: String| BuildError::Step {
        step: step.into(),
        command,
        log: log_path.clone(),
    };

    let mut current = "bootstrap".to_string();
    let mut step_started = Instant::now();
    progress(Progress::Step {
        name: current.clone(),
    });
    {
        let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(l, "$ mmdebstrap {}", args.join(" "));
    }
    let mut child = Command::new("mmdebstrap")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            step_err(
                "bootstrap",
                format!("run mmdebstrap: {e} (install the mmdebstrap package)"),
            )
        })?;

    // Output of mmdebstrap and its hooks (step markers arrive on either stream) and the size of
    // apt's download cache, all through one channel.
    enum Event {
        Line(String),
        Downloaded(u64),
    }
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let readers_left = Arc::new(std::sync::atomic::AtomicUsize::new(2));
    let mut threads = Vec::new();
    let streams: [Option<Box<dyn std::io::Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ];
    for stream in streams {
        let tx = tx.clone();
        let left = readers_left.clone();
        threads.push(std::thread::spawn(move || {
            if let Some(s) = stream {
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    let _ = tx.send(Event::Line(line));
                }
            }
            left.fetch_sub(1, Ordering::Relaxed);
        }));
    }
    let done = Arc::new(AtomicBool::new(false));
    let archives = work.join("tree/var/cache/apt/archives");
    let done2 = done.clone();
    let poll_tx = tx;
    let poller = std::thread::spawn(move || {
        let mut last = 0;
        while !done2.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1500));
            let now = if archives.is_dir() {
                dir_size(&archives)
            } else {
                0
            };
            if now > last {
                last = now;
                let _ = poll_tx.send(Event::Downloaded(now));
            }
        }
    });
    let mut handle = |ev: Event, current: &mut String, step_started: &mut Instant| match ev {
        Event::Downloaded(bytes) => progress(Progress::Downloaded { bytes }),
        Event::Line(line) => {
            let _ = writeln!(log.lock().unwrap_or_else(|e| e.into_inner()), "{line}");
            if let Some(name) = line.strip_prefix("@@step ") {
                progress(Progress::StepDone {
                    name: current.clone(),
                    elapsed: step_started.elapsed(),
                });
                *current = name.trim().to_string();
                *step_started = Instant::now();
                progress(Progress::Step {
                    name: current.clone(),
                });
            }
        }
    };
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => handle(ev, &mut current, &mut step_started),
            Err(_) => {
                if readers_left.load(Ordering::Relaxed) == 0 {
                    if let Some(st) = child.try_wait()? {
                        break st;
                    }
                }
            }
        }
    };
    done.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let _ = poller.join();
    while let Ok(ev) = rx.try_recv() {
        if let Event::Line(_) = ev {
            handle(ev, &mut current, &mut step_started);
        }
    }
    let _ = std::fs::remove_dir_all(work.join("hooks"));
    if !status.success() {
        return Err(step_err(
            &current,
            format!("mmdebstrap exited with {status}"),
        ));
    }
    progress(Progress::StepDone {
        name: current,
        elapsed: step_started.elapsed(),
    });

    progress(Progress::Step {
        name: "mkfs".into(),
    });
    let t = Instant::now();
    let tree = work.join("tree");
    let need = dir_size(&tree);
    let disk = u64::from(spec.vm.disk_mb) << 20;
    // ext4 metadata and free space for the sandbox: the tree may use at most 85 % of the disk.
    if need * 100 > disk * 85 {
        return Err(BuildError::TooSmall {
            need_mb: need * 100 / 85 / (1 << 20) + 1,
            disk_mb: spec.vm.disk_mb,
        });
    }
    let img = work.join("base.ext4");
    std::fs::File::create(&img)?.set_len(disk)?;
    let out = Command::new("mkfs.ext4")
        .args(["-F", "-q", "-L", "rootfs", "-E", "root_owner=0:0", "-d"])
        .arg(&tree)
        .arg(&img)
        .output()?;
    let _ = log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write_all(&out.stderr);
    if !out.status.success() {
        return Err(step_err("mkfs", "mkfs.ext4 -d".into()));
    }
    progress(Progress::StepDone {
        name: "mkfs".into(),
        elapsed: t.elapsed(),
    });
    Ok(())
}
