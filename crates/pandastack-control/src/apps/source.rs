//! An app's source on the host: one commit of a git repository fetched into a directory of
//! the deploy's own, and packed as a gzip tarball for the build VM.
//!
//! Only `git` and `tar` run on the host, never anything from the repository: hooks are off,
//! `protocol.file.allow` stays git's default, and nothing asks for credentials on a terminal.
//!
//! An `ssh://` or scp-like (`git@host:path`) URL is fetched with the app's deploy key: the
//! private key is written to a 0600 file in the deploy's directory for the fetch and removed
//! after it, and `ssh` is told to use that key alone (`IdentitiesOnly`, no agent), never to
//! ask (`BatchMode`), and to trust a server's host key the first time it sees it and only
//! that key after, in the app's own `known_hosts` file.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// Longest a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// Why the source could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `git` failed (its own message).
    #[error("git {what}: {message}")]
    Git { what: &'static str, message: String },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A fetched commit: its directory (the work tree, without `.git`) and its id.
pub struct Fetched {
    pub dir: PathBuf,
    pub commit: String,
}

/// How `ssh` authenticates a fetch: the app's deploy key and its `known_hosts` file.
pub struct SshAuth<'a> {
    /// The private key, OpenSSH format.
    pub private_key: &'a str,
    /// The app's own `known_hosts` (made on first use; its directory too).
    pub known_hosts: &'a Path,
}

/// `s` quoted for the shell git runs `GIT_SSH_COMMAND` with.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The deploy key's file in a deploy's directory while a fetch runs.
pub const KEY_FILE: &str = "deploy_key";

/// The app's deploy key in a 0600 file for the length of a fetch (removed when dropped).
struct KeyFile(PathBuf);

impl KeyFile {
    fn write(dir: &Path, key: &str) -> Result<Self, SourceError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(KEY_FILE);
        let _ = std::fs::remove_file(&path);
        let io = |source| SourceError::Io {
            what: "write the deploy key",
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let file = Self(path);
        f.write_all(key.as_bytes()).map_err(io)?;
        // `ssh` reads a key file only when its last line ends.
        if !key.ends_with('\n') {
            f.write_all(b"\n").map_err(io)?;
        }
        Ok(file)
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn git(
    dir: &Path,
    what: &'static str,
    args: &[&str],
    ssh_command: &str,
) -> Result<String, SourceError> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "advice.detachedHead=false",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "/bin/false")
        .env("SSH_ASKPASS", "/bin/false")
        .env("GIT_SSH_COMMAND", ssh_command)
        // Only the deploy key authenticates: not the host's agent.
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = cmd.output();
    let out = tokio::time::timeout(FETCH_TIMEOUT, out)
        .await
        .map_err(|_| SourceError::Git {
            what,
            message: format!("timed out after {FETCH_TIMEOUT:?}"),
        })?
        .map_err(|source| SourceError::Io {
            what: "run git",
            source,
        })?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(SourceError::Git {
            what,
            message: if message.is_empty() {
                format!("exit status {}", out.status)
            } else {
                message
            },
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `GIT_SSH_COMMAND` of a fetch without a deploy key (never asks, trusts on first use).
const SSH_PLAIN: &str = "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new";

/// Fetches `git_ref` (branch, tag or commit) of `url` into `dir/src` (replacing what is
/// there): one commit, no history where the server allows it. `ssh` is the app's deploy key,
/// used when the URL is an SSH one (`ssh://`, `git@host:path`).
pub async fn fetch(
    url: &str,
    git_ref: &str,
    dir: &Path,
    ssh: Option<SshAuth<'_>>,
) -> Result<Fetched, SourceError> {
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(|source| SourceError::Io {
        what: "source directory",
        source,
    })?;
    // The key file lives as long as this call (removed on every way out).
    let (_key, ssh_command) = match ssh.filter(|_| pandastack_api_types::git_url_uses_ssh(url)) {
        Some(auth) => {
            if let Some(parent) = auth.known_hosts.parent() {
                std::fs::create_dir_all(parent).map_err(|source| SourceError::Io {
                    what: "known_hosts directory",
                    source,
                })?;
            }
            let key = KeyFile::write(dir, auth.private_key)?;
            let command = format!(
                "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes \
                 -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={} -o LogLevel=ERROR",
                sh_quote(&key.0.to_string_lossy()),
                sh_quote(&auth.known_hosts.to_string_lossy()),
            );
            (Some(key), command)
        }
        None => (None, SSH_PLAIN.to_owned()),
    };
    let ssh = ssh_command.as_str();
    git(&src, "init", &["init", "--quiet"], ssh).await?;
    // `--` ends the options: a URL or ref cannot be taken for one (both are validated too).
    let shallow = git(
        &src,
        "fetch",
        &["fetch", "--quiet", "--depth", "1", "--", url, git_ref],
        ssh,
    )
    .await;
    if let Err(e) = shallow {
        // A commit id a server does not serve by itself: fetch everything, then look it up.
        let is_commit = git_ref.len() >= 7 && git_ref.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_commit {
            return Err(e);
        }
        git(
            &src,
            "fetch",
            &[
                "fetch",
                "--quiet",
                "--",
                url,
                "+refs/heads/*:refs/remotes/origin/*",
            ],
            ssh,
        )
        .await?;
        git(&src, "checkout", &["checkout", "--quiet", git_ref], ssh).await?;
    } else {
        git(
            &src,
            "checkout",
            &["checkout", "--quiet", "FETCH_HEAD"],
            ssh,
        )
        .await?;
    }
    let commit = git(&src, "rev-parse", &["rev-parse", "HEAD"], ssh).await?;
    std::fs::remove_dir_all(src.join(".git")).map_err(|source| SourceError::Io {
        what: "remove .git",
        source,
    })?;
    Ok(Fetched { dir: src, commit })
}

/// Packs `src` as `dir/src.tar.gz` (numeric owners root, so the VM's tar makes them root's).
pub async fn pack(src: &Path, dir: &Path) -> Result<PathBuf, SourceError> {
    let tarball = dir.join("src.tar.gz");
    let out = Command::new("tar")
        .arg("-C")
        .arg(src)
        .args(["--numeric-owner", "--owner=0", "--group=0", "-czf"])
        .arg(&tarball)
        .arg(".")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| SourceError::Io {
            what: "run tar",
            source,
        })?;
    if !out.status.success() {
        return Err(SourceError::Git {
            what: "pack",
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(tarball)
}

/// Largest upload a deploy takes (compressed), and largest tree it may unpack to.
pub const MAX_UPLOAD_BYTES: u64 = 512 << 20;
const MAX_UNPACKED_BYTES: u64 = 2 << 30;
const MAX_ENTRIES: usize = 200_000;

/// Unpacks an uploaded gzip tarball into `dir/src` (replacing what is there), as the host
/// unpacks untrusted input: regular files and directories only (symlinks, hard links, devices
/// and FIFOs are skipped and counted), no path outside the tree (`tar`'s `unpack_in` refuses
/// `..` and absolute paths), modes without setuid/setgid/sticky bits, bounded in entries and
/// bytes. Returns the tree and a pseudo commit id (the SHA-256 of the upload).
pub fn unpack_upload(tarball: &Path, dir: &Path) -> Result<(Fetched, usize), SourceError> {
    use sha2::{Digest, Sha256};
    let io = |what: &'static str| move |source: std::io::Error| SourceError::Io { what, source };
    let bad = |message: String| SourceError::Git {
        what: "upload",
        message,
    };
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(io("source directory"))?;
    let mut hash = Sha256::new();
    let bytes = std::fs::read(tarball).map_err(io("read the upload"))?;
    hash.update(&bytes);
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let (mut entries, mut total, mut skipped) = (0usize, 0u64, 0usize);
    for entry in archive
        .entries()
        .map_err(|e| bad(format!("not a gzip tarball: {e}")))?
    {
        let mut entry = entry.map_err(|e| bad(format!("not a gzip tarball: {e}")))?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            skipped += 1;
            continue;
        }
        total += entry.header().size().unwrap_or(0);
        if total > MAX_UNPACKED_BYTES {
            return Err(bad(format!(
                "unpacks to more than {} MiB",
                MAX_UNPACKED_BYTES >> 20
            )));
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        entry.set_preserve_permissions(false);
        entry.set_unpack_xattrs(false);
        entry.set_preserve_mtime(true);
        let path = entry
            .path()
            .map_err(|e| bad(format!("entry name: {e}")))?
            .into_owned();
        let unpacked = entry
            .unpack_in(&src)
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        if unpacked && kind.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(
                src.join(&path),
                std::fs::Permissions::from_mode(mode | 0o600),
            );
        }
    }
    let commit = hash
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok((
        Fetched {
            dir: src,
            commit: format!("upload:{}", &commit[..16]),
        },
        skipped,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_is_private_and_goes_away() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = KeyFile::write(d.path(), "KEY").unwrap();
        let meta = std::fs::metadata(&f.0).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&f.0).unwrap(), "KEY\n");
        drop(f);
        assert!(!d.path().join(KEY_FILE).exists());
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    }

    /// An SSH fetch that cannot reach its server fails with ssh's reason and leaves no key
    /// file behind; the app's known_hosts directory is made for it.
    #[tokio::test]
    async fn ssh_fetch_failure_cleans_up() {
        let d = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let known = d.path().join("kh").join("app-1");
        let key = crate::apps::new_deploy_key("t").unwrap();
        let err = fetch(
            &format!("ssh://git@127.0.0.1:{port}/srv/x.git"),
            "main",
            d.path(),
            Some(SshAuth {
                private_key: &key,
                known_hosts: &known,
            }),
        )
        .await
        .err()
        .expect("nothing listens there");
        assert!(err.to_string().contains("git fetch"), "{err}");
        assert!(!d.path().join(KEY_FILE).exists());
        assert!(known.parent().unwrap().is_dir());
    }
}
