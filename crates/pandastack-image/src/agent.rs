//! The guest agent goes into a copy of the base image, written with debugfs: no mount, no loop
//! device, and an agent rebuild never re-runs the bootstrap.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use sha2::{Digest, Sha256};

use crate::build::{find_tool, BaseImage, BuildError, BuildOptions, Progress};
use crate::cache::{sibling, CacheLock, ImageCache};
use crate::spec::TemplateSpec;

/// Where the agent lives in every image (the kernel command line names it as init).
pub const AGENT_PATH: &str = "/usr/local/sbin/pandastack-guest";

/// Agent images kept per base image (the newest by use); older ones are deleted. Two: the agent a
/// server runs and the one before it (a server not yet restarted), each a full copy of the base.
const KEEP_AGENT_IMAGES: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("agent binary {path}")]
    Agent {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("copy {from} to {to}: {message}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        message: String,
    },
    #[error("debugfs {request:?} on {image}: {message}")]
    Debugfs {
        image: PathBuf,
        request: String,
        message: String,
    },
    #[error("agent in {image} is not as written: {problem}")]
    Verify { image: PathBuf, problem: String },
    #[error("base image")]
    Build(#[from] BuildError),
    #[error("image cache {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An image with the agent installed.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentImage {
    /// `<image dir>/rootfs-<agenthash16>.ext4`
    pub path: PathBuf,
    /// SHA-256 of the agent binary, hex.
    pub agent_sha256: String,
    pub base: BaseImage,
    /// Found in the cache rather than written now.
    pub cached: bool,
}

/// Runs one debugfs request; debugfs exits 0 even when a request fails, so anything on stderr
/// after its version banner is an error.
fn debugfs(
    debugfs: &Path,
    image: &Path,
    write: bool,
    request: &str,
) -> Result<String, InjectError> {
    let mut cmd = Command::new(debugfs);
    if write {
        cmd.arg("-w");
    }
    let fail = |message: String| InjectError::Debugfs {
        image: image.to_owned(),
        request: request.to_owned(),
        message,
    };
    let out = cmd
        .args(["-R", request])
        .arg(image)
        .output()
        .map_err(|e| fail(format!("run debugfs: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("debugfs "))
        .collect();
    if !out.status.success() || !errors.is_empty() {
        return Err(fail(format!("{} ({})", errors.join("; "), out.status)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The token after `label` in debugfs `stat` output (`Mode:` → `0755`).
fn stat_field<'a>(stat: &'a str, label: &str) -> Option<&'a str> {
    let mut words = stat.split_whitespace();
    words.find(|w| *w == label)?;
    words.next()
}

/// SHA-256 of a file, hex.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Copies `base` to `out` (a reflink where the file system can, else a sparse copy) and writes
/// `agent` into it as [`AGENT_PATH`], mode 0755, owned by root. `out` appears only when complete
/// and verified.
pub fn install_agent(base: &Path, agent: &Path, out: &Path) -> Result<(), InjectError> {
    let agent_err = |source| InjectError::Agent {
        path: agent.to_owned(),
        source,
    };
    let agent = agent.canonicalize().map_err(agent_err)?;
    let agent_md = std::fs::metadata(&agent).map_err(agent_err)?;
    if !agent_md.is_file() {
        return Err(agent_err(std::io::Error::other("not a regular file")));
    }
    let agent_str = agent.to_string_lossy();
    if agent_str.contains(['"', '\n']) {
        return Err(agent_err(std::io::Error::other(
            "the path cannot be passed to debugfs (contains '\"' or a newline)",
        )));
    }
    let agent_sha = file_sha256(&agent).map_err(agent_err)?;
    let dbg = find_tool("debugfs", "e2fsprogs")?;

    let tmp = sibling(out, &format!(".partial-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let cp = Command::new("cp")
        .args(["--reflink=auto", "--sparse=always", "--"])
        .arg(base)
        .arg(&tmp)
        .output();
    let copy_err = |message: String| InjectError::Copy {
        from: base.to_owned(),
        to: tmp.clone(),
        message,
    };
    match cp {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(copy_err(
                String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            ));
        }
        Err(e) => return Err(copy_err(format!("run cp: {e}"))),
    }

    let result = (|| {
        let existing = debugfs(&dbg, &tmp, false, &format!("stat {AGENT_PATH}"));
        if existing.is_ok_and(|s| s.contains("Inode:")) {
            debugfs(&dbg, &tmp, true, &format!("rm {AGENT_PATH}"))?;
        }
        debugfs(
            &dbg,
            &tmp,
            true,
            &format!("write \"{agent_str}\" {AGENT_PATH}"),
        )?;
        for (field, value) in [("mode", "0100755"), ("uid", "0"), ("gid", "0")] {
            debugfs(
                &dbg,
                &tmp,
                true,
                &format!("set_inode_field {AGENT_PATH} {field} {value}"),
            )?;
        }
        verify(&dbg, &tmp, agent_md.len(), &agent_sha)
    })();
    match result.and_then(|()| {
        std::fs::rename(&tmp, out).map_err(|source| InjectError::Cache {
            path: out.to_owned(),
            source,
        })
    }) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Reads the agent back: a root-owned 0755 regular file with the agent's exact bytes.
fn verify(dbg: &Path, image: &Path, size: u64, sha256: &str) -> Result<(), InjectError> {
    let problem = |problem: String| InjectError::Verify {
        image: image.to_owned(),
        problem,
    };
    let stat = debugfs(dbg, image, false, &format!("stat {AGENT_PATH}"))?;
    let want = [
        ("Type:", "regular".to_string()),
        ("Mode:", "0755".into()),
        ("User:", "0".into()),
        ("Group:", "0".into()),
        ("Size:", size.to_string()),
    ];
    for (label, value) in want {
        if stat_field(&stat, label) != Some(value.as_str()) {
            return Err(problem(format!(
                "{label} {:?}, want {value}",
                stat_field(&stat, label)
            )));
        }
    }
    let dumped = sibling(image, ".agent-check");
    let _ = std::fs::remove_file(&dumped);
    let dump = debugfs(
        dbg,
        image,
        false,
        &format!("dump {AGENT_PATH} \"{}\"", dumped.to_string_lossy()),
    );
    let sha =
        dump.and_then(|_| file_sha256(&dumped).map_err(|e| problem(format!("read back: {e}"))));
    let _ = std::fs::remove_file(&dumped);
    if sha? != sha256 {
        return Err(problem("content differs from the agent binary".into()));
    }
    Ok(())
}

impl ImageCache {
    /// The image for `spec` with `agent` installed: `<image dir>/rootfs-<agenthash16>.ext4`,
    /// from the cache or made now (building the base image first if needed).
    pub fn rootfs_with_agent(
        &self,
        spec: &TemplateSpec,
        agent: &Path,
        options: BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<AgentImage, InjectError> {
        let agent_sha256 = file_sha256(agent).map_err(|source| InjectError::Agent {
            path: agent.to_owned(),
            source,
        })?;
        let hash = spec.hash().map_err(BuildError::from)?;
        let dir = self.image_dir(spec, &hash);
        let out = dir.join(format!("rootfs-{}.ext4", &agent_sha256[..16]));
        let hit = |base: BaseImage, progress: &mut dyn FnMut(Progress)| {
            // Pruning keeps the most recently used agent images.
            if let Ok(f) = std::fs::File::options().write(true).open(&out) {
                let _ = f.set_modified(SystemTime::now());
            }
            progress(Progress::Cached { image: out.clone() });
            AgentImage {
                path: out.clone(),
                agent_sha256: agent_sha256.clone(),
                base,
                cached: true,
            }
        };
        if !options.force && out.is_file() {
            if let Some(base) = self.find_base(&dir) {
                return Ok(hit(base, progress));
            }
        }
        let _lock = CacheLock::acquire(&dir, |lock| {
            progress(Progress::Waiting {
                lock: lock.to_owned(),
            })
        })
        .map_err(|source| InjectError::Cache {
            path: dir.clone(),
            source,
        })?;
        let base = self.build_base_locked(spec, &hash, &dir, options, &mut *progress)?;
        if !options.force && out.is_file() {
            return Ok(hit(base, progress));
        }
        progress(Progress::StepStarted {
            step: "install-agent".into(),
        });
        let t = Instant::now();
        install_agent(&base.path, agent, &out)?;
        progress(Progress::StepFinished {
            step: "install-agent".into(),
            elapsed: t.elapsed(),
        });
        prune_agent_images(&dir, KEEP_AGENT_IMAGES);
        Ok(AgentImage {
            path: out,
            agent_sha256,
            base,
            cached: false,
        })
    }
}

/// Deletes all but the `keep` most recently used `rootfs-*.ext4` in `dir`.
fn prune_agent_images(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut images: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("rootfs-") && n.ends_with(".ext4")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    images.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, path) in images.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}

/// The cached image for `spec` with `agent` installed, in `$PANDASTACK_CACHE`, built if needed.
pub fn rootfs_with_agent(spec: &TemplateSpec, agent: &Path) -> Result<PathBuf, InjectError> {
    ImageCache::from_env()
        .rootfs_with_agent(spec, agent, BuildOptions::default(), &mut |_| {})
        .map(|image| image.path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const STAT: &str = "Inode: 7934   Type: regular    Mode:  0755   Flags: 0x80000
Generation: 0    Version: 0x00000000:00000000
User:     0   Group:     0   Project:     0   Size: 35664
File ACL: 0
Size of extra inode fields: 32
";

    #[test]
    fn reads_debugfs_stat_fields() {
        assert_eq!(stat_field(STAT, "Type:"), Some("regular"));
        assert_eq!(stat_field(STAT, "Mode:"), Some("0755"));
        assert_eq!(stat_field(STAT, "User:"), Some("0"));
        assert_eq!(stat_field(STAT, "Group:"), Some("0"));
        assert_eq!(stat_field(STAT, "Size:"), Some("35664"));
        assert_eq!(stat_field(STAT, "Nope:"), None);
    }

    #[test]
    fn prunes_the_least_recently_used_agent_images() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        for (i, name) in [
            "rootfs-a.ext4",
            "rootfs-b.ext4",
            "rootfs-c.ext4",
            "base.ext4",
        ]
        .iter()
        .enumerate()
        {
            let f = std::fs::File::create(dir.path().join(name)).unwrap();
            f.set_modified(now - Duration::from_secs(100 * i as u64))
                .unwrap();
        }
        prune_agent_images(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["base.ext4", "rootfs-a.ext4", "rootfs-b.ext4"]);
    }

    /// A real ext4 image made by mkfs.ext4 (no root needed): the agent is written, verified and
    /// replaced by a second install; the base image is untouched.
    #[test]
    fn installs_the_agent_into_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("usr/local/sbin")).unwrap();
        let base = dir.path().join("base.ext4");
        std::fs::File::create(&base)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let st = Command::new(find_tool("mkfs.ext4", "e2fsprogs").unwrap())
            .args(["-F", "-q", "-E", "root_owner=0:0", "-d"])
            .arg(&tree)
            .arg(&base)
            .status()
            .unwrap();
        assert!(st.success());
        let agent = dir.path().join("my agent");
        std::fs::write(&agent, b"#!/bin/sh\necho agent\n").unwrap();
        let out = dir.path().join("rootfs.ext4");
        install_agent(&base, &agent, &out).unwrap();
        let dbg = find_tool("debugfs", "e2fsprogs").unwrap();
        let stat = debugfs(&dbg, &out, false, &format!("stat {AGENT_PATH}")).unwrap();
        assert_eq!(stat_field(&stat, "Mode:"), Some("0755"));
        assert!(debugfs(&dbg, &base, false, &format!("stat {AGENT_PATH}")).is_err());

        // Installing into an image that already has an agent replaces it.
        std::fs::write(&agent, b"#!/bin/sh\necho agent v2\n").unwrap();
        let out2 = dir.path().join("rootfs2.ext4");
        install_agent(&out, &agent, &out2).unwrap();
        let cat = debugfs(&dbg, &out2, false, &format!("cat {AGENT_PATH}")).unwrap();
        assert_eq!(cat, "#!/bin/sh\necho agent v2\n");

        let err = install_agent(&base, &dir.path().join("missing"), &out2).unwrap_err();
        assert!(matches!(err, InjectError::Agent { .. }), "{err:?}");
    }
}
