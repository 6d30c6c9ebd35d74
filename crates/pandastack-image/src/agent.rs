//! Writing the guest agent into an image, without mounting it (debugfs edits the ext4 file).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::build::{build_base, BuildError, Progress};
use crate::spec::TemplateSpec;

/// Where the agent lives in every image (the kernel command line names it as init).
pub const AGENT_PATH: &str = "/usr/local/sbin/pandastack-guest";

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent binary {0} not found")]
    MissingAgent(PathBuf),
    #[error("copy image")]
    Copy(#[source] std::io::Error),
    #[error("debugfs {op}: {message}")]
    Debugfs { op: &'static str, message: String },
    #[error("base image")]
    Build(#[from] BuildError),
    #[error("agent image i/o")]
    Io(#[from] std::io::Error),
}

fn debugfs(
    image: &Path,
    write: bool,
    request: &str,
    op: &'static str,
) -> Result<String, AgentError> {
    let mut cmd = Command::new("debugfs");
    if write {
        cmd.arg("-w");
    }
    let out = cmd
        .args(["-R", request])
        .arg(image)
        .output()
        .map_err(|e| AgentError::Debugfs {
            op,
            message: format!("run debugfs: {e} (install e2fsprogs)"),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // debugfs exits 0 even when a request fails; errors show up on stderr after the banner.
    let failed = !out.status.success()
        || stderr
            .lines()
            .skip(1)
            .any(|l| !l.trim().is_empty() && !l.starts_with("debugfs "));
    if failed {
        return Err(AgentError::Debugfs {
            op,
            message: stderr.trim().to_string(),
        });
    }
    Ok(stdout)
}

/// Copies `base` to `out` (reflink or sparse copy) and installs `agent` as AGENT_PATH.
pub fn install_agent(base: &Path, agent: &Path, out: &Path) -> Result<(), AgentError> {
    if !agent.is_file() {
        return Err(AgentError::MissingAgent(agent.to_owned()));
    }
    let tmp = out.with_extension("partial");
    let _ = std::fs::remove_file(&tmp);
    let status = Command::new("cp")
        .args(["--reflink=auto", "--sparse=always", "--"])
        .arg(base)
        .arg(&tmp)
        .status()
        .map_err(AgentError::Copy)?;
    if !status.success() {
        return Err(AgentError::Copy(std::io::Error::other("cp failed")));
    }
    let result = (|| {
        let _ = debugfs(&tmp, true, &format!("rm {AGENT_PATH}"), "rm");
        debugfs(
            &tmp,
            true,
            &format!("write {} {AGENT_PATH}", agent.display()),
            "write",
        )?;
        for (field, value) in [("mode", "0100755"), ("uid", "0"), ("gid", "0")] {
            debugfs(
                &tmp,
                true,
                &format!("set_inode_field {AGENT_PATH} {field} {value}"),
                "set_inode_field",
            )?;
        }
        let stat = debugfs(&tmp, false, &format!("stat {AGENT_PATH}"), "stat")?;
        let size = std::fs::metadata(agent)?.len();
        if !stat.contains(&format!("Size: {size}")) || !stat.contains("Mode:  0755") {
            return Err(AgentError::Debugfs {
                op: "verify",
                message: format!("agent not written as expected: {stat}"),
            });
        }
        Ok(())
    })();
    match result {
        Ok(()) => {
            std::fs::rename(&tmp, out)?;
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn file_hash(path: &Path) -> std::io::Result<String> {
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

/// The image for `spec` with `agent` installed, from the cache or built now.
pub fn rootfs_with_agent(
    spec: &TemplateSpec,
    agent: &Path,
    force: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf, AgentError> {
    if !agent.is_file() {
        return Err(AgentError::MissingAgent(agent.to_owned()));
    }
    let base = build_base(spec, force, progress)?;
    let out = base
        .dir
        .join(format!("rootfs-{}.ext4", &file_hash(agent)?[..16]));
    if !out.is_file() || force {
        progress(Progress::Step {
            name: "install-agent".into(),
        });
        install_agent(&base.path, agent, &out)?;
        // Older agent builds of this image are dead weight.
        if let Ok(entries) = std::fs::read_dir(&base.dir) {
            for e in entries.flatten() {
                let p = e.path();
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("rootfs-") && p != out {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
    }
    Ok(out)
}
