//! An app's source on the host: one commit of a git repository fetched into a directory of
//! the deploy's own, and packed as a gzip tarball for the build VM.
//!
//! Only `git` and `tar` run on the host, never anything from the repository: hooks are off,
//! the host's own git configuration is not read (no `insteadOf` can turn a URL into a path),
//! and nothing asks for credentials on a terminal.
//!
//! **Where git may go.** A user chose the URL, so the host fetches it as it would let a
//! sandbox: over the network only (`https://`, `http://`, `git://`, `ssh://` and scp-like
//! `user@host:path` — never `file://`, a path or a remote helper such as `ext::`, refused
//! before git runs and by `GIT_ALLOW_PROTOCOL` in git itself), and only to addresses the
//! [`OutboundPolicy`] allows (no loopback, link-local, private, CGNAT or metadata address
//! unless the operator allowed it), checked where the connection is made: HTTP(S) goes
//! through a checking proxy ([`FetchProxy`]) that resolves, checks and connects for git —
//! redirects included —; `git://` and SSH connect to the address that was resolved and
//! checked (the URL's host replaced by it; ssh's `HostName`, with the name kept as the host
//! key's alias).
//!
//! An `ssh://` or scp-like (`git@host:path`) URL is fetched with the app's deploy key: the
//! private key is written to a 0600 file in the deploy's directory for the fetch and removed
//! after it, and `ssh` is told to use that key alone (`IdentitiesOnly`, no agent), never to
//! ask (`BatchMode`), and to trust a server's host key the first time it sees it and only
//! that key after, in the app's own `known_hosts` file.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pandastack_outbound::{FetchProxy, OutboundPolicy, Refused};
use tokio::process::Command;

/// Longest a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// Why the source could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `git` failed (its own message).
    #[error("git {what}: {message}")]
    Git { what: &'static str, message: String },
    /// A URL the host does not fetch: a local one, or an address the policy refuses.
    #[error("{0}")]
    Refused(String),
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

/// How git runs for one fetch: its ssh command, and the checking proxy for HTTP(S).
struct GitRun {
    ssh_command: String,
    proxy: Option<String>,
}

/// The transports git may use for a user's URL (`GIT_ALLOW_PROTOCOL`): never `file`, `ext` or
/// another remote helper.
const ALLOWED_PROTOCOLS: &str = "https:http:git:ssh";

impl GitRun {
    async fn git(
        &self,
        dir: &Path,
        what: &'static str,
        args: &[&str],
    ) -> Result<String, SourceError> {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir).args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "advice.detachedHead=false",
        ]);
        if let Some(proxy) = &self.proxy {
            cmd.arg("-c").arg(format!("http.proxy={proxy}"));
        }
        cmd.args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env("SSH_ASKPASS", "/bin/false")
            .env("GIT_SSH_COMMAND", &self.ssh_command)
            .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
            // Not the host's configuration: its `url.*.insteadOf`, proxies or credential
            // helpers are the operator's, not a user's.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            // The checking proxy is the only way out for HTTP(S): nothing bypasses it.
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
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
}

/// How git reaches a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Https,
    Git,
    Ssh,
}

/// Where a git URL leads: its transport, host (as written; IPv6 without brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitTarget {
    pub transport: Transport,
    pub host: String,
    pub port: u16,
}

impl GitTarget {
    /// Reads a git URL; refuses what the host does not fetch (a path, `file://`, a remote
    /// helper, an unknown scheme) with the reason.
    pub fn parse(url: &str) -> Result<Self, SourceError> {
        let local = || {
            SourceError::Refused(format!(
                "{url:?} is on the server's own disk: sources are fetched over the network only \
                 (https://, http://, git://, ssh:// or user@host:path); upload a directory instead"
            ))
        };
        if url.starts_with('/') || url.starts_with('.') || url.starts_with('~') {
            return Err(local());
        }
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let bad = |why: &str| SourceError::Refused(format!("git URL {url:?}: {why}"));
        let transport = match scheme.as_deref() {
            Some("https") => Transport::Https,
            Some("http") => Transport::Http,
            Some("git") => Transport::Git,
            Some("ssh") | Some("git+ssh") | Some("ssh+git") => Transport::Ssh,
            Some("file") => return Err(local()),
            Some(other) => return Err(bad(&format!("the {other}:// scheme is not fetched"))),
            None => {
                let Some((authority, _)) = pandastack_api_types::scp_like_git_url(url) else {
                    return Err(local());
                };
                if url.contains("::") && !authority.contains('[') {
                    return Err(bad("git's remote helpers (name::address) are not run"));
                }
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                if host.is_empty() {
                    return Err(bad("no host"));
                }
                return Ok(Self {
                    transport: Transport::Ssh,
                    host: host.to_owned(),
                    port: 22,
                });
            }
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            None => return Err(bad("no host")),
        };
        let port = parsed.port().unwrap_or(match transport {
            Transport::Http => 80,
            Transport::Https => 443,
            Transport::Git => 9418,
            Transport::Ssh => 22,
        });
        Ok(Self {
            transport,
            host,
            port,
        })
    }

    /// The target checked without resolving it (IP literals, `localhost`): what a request
    /// can be refused for at once.
    pub fn check_literal(&self, policy: &OutboundPolicy) -> Result<(), SourceError> {
        policy
            .check_literal(&self.host, self.port)
            .map_err(|e| SourceError::Refused(e.to_string()))
    }

    /// The first address of the host that the policy allows (all must be).
    async fn resolve(&self, policy: &OutboundPolicy) -> Result<std::net::IpAddr, SourceError> {
        match policy.resolve(&self.host, self.port).await {
            Ok(addrs) => Ok(addrs[0].ip()),
            Err(e @ Refused::Internal { .. }) => Err(SourceError::Refused(e.to_string())),
            Err(e) => Err(SourceError::Git {
                what: "fetch",
                message: pandastack_host::error_chain(&e),
            }),
        }
    }
}

/// `GIT_SSH_COMMAND` of a fetch without a deploy key (never asks, trusts on first use).
/// Neither variant reads the host's ssh configuration (`-F /dev/null`): its `ProxyCommand`s
/// and host aliases are the operator's.
const SSH_PLAIN: &str = "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=accept-new";

/// Fetches `git_ref` (branch, tag or commit) of `url` into `dir/src` (replacing what is
/// there): one commit, no history where the server allows it. `ssh` is the app's deploy key,
/// used when the URL is an SSH one (`ssh://`, `git@host:path`). Every connection keeps to
/// `policy` (see the module's doc).
pub async fn fetch(
    url: &str,
    git_ref: &str,
    dir: &Path,
    ssh: Option<SshAuth<'_>>,
    policy: &OutboundPolicy,
) -> Result<Fetched, SourceError> {
    let target = GitTarget::parse(url)?;
    target.check_literal(policy)?;
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(|source| SourceError::Io {
        what: "source directory",
        source,
    })?;
    // Where the connection goes: through the checking proxy, or to a checked address.
    let mut fetch_url = url.to_owned();
    let (mut proxy, mut pin_ssh) = (None, String::new());
    match target.transport {
        Transport::Http | Transport::Https => {
            proxy = Some(FetchProxy::start(policy.clone()).await.map_err(|source| {
                SourceError::Io {
                    what: "start the fetch proxy",
                    source,
                }
            })?);
        }
        Transport::Git => {
            let ip = target.resolve(policy).await?;
            let mut u = url::Url::parse(url).map_err(|e| SourceError::Refused(e.to_string()))?;
            u.set_ip_host(ip)
                .map_err(|()| SourceError::Refused(format!("git URL {url:?}: no host")))?;
            fetch_url = u.to_string();
        }
        Transport::Ssh => {
            let ip = target.resolve(policy).await?;
            let alias = if target.port == 22 {
                target.host.clone()
            } else {
                format!("[{}]:{}", target.host, target.port)
            };
            pin_ssh = format!(
                " -o HostName={} -o HostKeyAlias={}",
                sh_quote(&ip.to_string()),
                sh_quote(&alias)
            );
        }
    }
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
                "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes \
                 -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={} -o LogLevel=ERROR",
                sh_quote(&key.0.to_string_lossy()),
                sh_quote(&auth.known_hosts.to_string_lossy()),
            );
            (Some(key), command)
        }
        None => (None, SSH_PLAIN.to_owned()),
    };
    let run = GitRun {
        ssh_command: ssh_command + &pin_ssh,
        proxy: proxy.as_ref().map(FetchProxy::url),
    };
    let fetched = checkout(&run, &src, &fetch_url, git_ref).await;
    // A fetch the proxy refused says why, not git's paraphrase ("returned error: 403").
    if let (Err(_), Some(p)) = (&fetched, proxy.take()) {
        if let Some(reason) = p.refusals().into_iter().next() {
            return Err(SourceError::Refused(reason));
        }
    }
    let commit = fetched?;
    std::fs::remove_dir_all(src.join(".git")).map_err(|source| SourceError::Io {
        what: "remove .git",
        source,
    })?;
    Ok(Fetched { dir: src, commit })
}

/// Fetches and checks out `git_ref` of `url` in `src`; the commit id.
async fn checkout(
    run: &GitRun,
    src: &Path,
    url: &str,
    git_ref: &str,
) -> Result<String, SourceError> {
    run.git(src, "init", &["init", "--quiet"]).await?;
    // `--` ends the options: a URL or ref cannot be taken for one (both are validated too).
    let shallow = run
        .git(
            src,
            "fetch",
            &["fetch", "--quiet", "--depth", "1", "--", url, git_ref],
        )
        .await;
    if let Err(e) = shallow {
        // A commit id a server does not serve by itself: fetch everything, then look it up.
        let is_commit = git_ref.len() >= 7 && git_ref.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_commit {
            return Err(e);
        }
        run.git(
            src,
            "fetch",
            &[
                "fetch",
                "--quiet",
                "--",
                url,
                "+refs/heads/*:refs/remotes/origin/*",
            ],
        )
        .await?;
        run.git(src, "checkout", &["checkout", "--quiet", git_ref])
            .await?;
    } else {
        run.git(src, "checkout", &["checkout", "--quiet", "FETCH_HEAD"])
            .await?;
    }
    run.git(src, "rev-parse", &["rev-parse", "HEAD"]).await
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
        let loopback = OutboundPolicy::new(vec!["127.0.0.1".parse().unwrap()]);
        let err = fetch(
            &format!("ssh://git@127.0.0.1:{port}/srv/x.git"),
            "main",
            d.path(),
            Some(SshAuth {
                private_key: &key,
                known_hosts: &known,
            }),
            &loopback,
        )
        .await
        .err()
        .expect("nothing listens there");
        assert!(err.to_string().contains("git fetch"), "{err}");
        assert!(!d.path().join(KEY_FILE).exists());
        assert!(known.parent().unwrap().is_dir());
    }

    #[test]
    fn targets() {
        let t = |u: &str| GitTarget::parse(u).map(|t| (t.transport, t.host, t.port));
        assert_eq!(
            t("https://git.example.com/a.git").unwrap(),
            (Transport::Https, "git.example.com".into(), 443)
        );
        assert_eq!(
            t("http://127.0.0.1:8080/a.git").unwrap(),
            (Transport::Http, "127.0.0.1".into(), 8080)
        );
        assert_eq!(
            t("git://[::1]/a.git").unwrap(),
            (Transport::Git, "::1".into(), 9418)
        );
        assert_eq!(
            t("ssh://git@h.example:2222/srv/a.git").unwrap(),
            (Transport::Ssh, "h.example".into(), 2222)
        );
        assert_eq!(
            t("git@[fd00::1]:a.git").unwrap(),
            (Transport::Ssh, "fd00::1".into(), 22)
        );
        for local in [
            "/srv/a.git",
            "file:///srv/a.git",
            "FILE:///x",
            "./a",
            "~/a",
            "a.git",
        ] {
            let e = t(local).unwrap_err().to_string();
            assert!(e.contains("on the server's own disk"), "{local}: {e}");
        }
        for other in ["ext::sh -c touch% /tmp/pwned", "fd::17", "ftp://h/a.git"] {
            assert!(t(other).is_err(), "{other}");
        }
    }

    /// A bare repository `<root>/site.git` with one commit on `main`.
    fn bare_repo(root: &Path) -> PathBuf {
        let run = |dir: &Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .current_dir(dir)
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        let (bare, work) = (root.join("site.git"), root.join("work"));
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        run(&bare, &["init", "-q", "--bare", "--initial-branch=main"]);
        run(&work, &["init", "-q", "--initial-branch=main"]);
        std::fs::write(work.join("index.html"), "secret\n").unwrap();
        run(&work, &["add", "-A"]);
        run(&work, &["commit", "-q", "-m", "v1"]);
        run(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        bare
    }

    /// Local sources and loopback addresses are refused before anything is fetched; a file
    /// the server could read stays unread.
    #[tokio::test]
    async fn local_and_loopback_sources_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let bare = bare_repo(d.path());
        let strict = OutboundPolicy::default();
        let work = d.path().join("deploy");
        std::fs::create_dir_all(&work).unwrap();
        for url in [
            format!("file://{}", bare.display()),
            bare.display().to_string(),
            "http://127.0.0.1:9/site.git".into(),
            "https://localhost/site.git".into(),
            "git://[::1]/site.git".into(),
            "ssh://git@169.254.169.254/site.git".into(),
            "git@10.0.0.1:site.git".into(),
        ] {
            let e = fetch(&url, "main", &work, None, &strict)
                .await
                .err()
                .unwrap();
            assert!(matches!(e, SourceError::Refused(_)), "{url}: {e}");
            assert!(!work.join("src").join("index.html").exists(), "{url}");
        }
    }

    /// A `git daemon` on loopback: refused by default, fetched when the operator allows its
    /// address (the fetch connects to the checked address).
    #[tokio::test]
    async fn git_protocol_keeps_to_the_policy() {
        let d = tempfile::tempdir().unwrap();
        bare_repo(d.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The daemon's own binary, not `git daemon`: killing the `git` wrapper would leave its
        // child serving, holding the test's output open (a test runner waiting for its end
        // waits for ever).
        let exec_path = std::process::Command::new("git")
            .arg("--exec-path")
            .output()
            .unwrap();
        let exec_path = String::from_utf8(exec_path.stdout).unwrap();
        let mut daemon = std::process::Command::new(Path::new(exec_path.trim()).join("git-daemon"))
            .args([
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", d.path().display()),
            ])
            .arg(d.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("git://localhost:{port}/site.git");
        let work = d.path().join("deploy");
        std::fs::create_dir_all(&work).unwrap();
        let e = fetch(&url, "main", &work, None, &OutboundPolicy::default())
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("loopback"), "{e}");
        let allowed = OutboundPolicy::new(vec![format!("localhost:{port}").parse().unwrap()]);
        let mut got = None;
        for _ in 0..50 {
            match fetch(&url, "main", &work, None, &allowed).await {
                Ok(f) => {
                    got = Some(f);
                    break;
                }
                // The daemon may not listen yet.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let _ = daemon.kill();
        let _ = daemon.wait();
        let f = got.expect("fetched from the allowed daemon");
        assert_eq!(
            std::fs::read_to_string(f.dir.join("index.html")).unwrap(),
            "secret\n"
        );
    }

    /// An allowed HTTP server that redirects to a loopback address it was not allowed: the
    /// fetch fails with the proxy's reason, and nothing reaches the redirect's target.
    #[tokio::test]
    async fn redirect_to_loopback_is_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_port = target.local_addr().unwrap().port();
        let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = std::sync::Arc::clone(&reached);
        tokio::spawn(async move {
            while let Ok(_c) = target.accept().await {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_port = front.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = front.accept().await {
                let mut buf = vec![0; 4096];
                let _ = c.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:{target_port}/site.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = c.write_all(reply.as_bytes()).await;
            }
        });
        let d = tempfile::tempdir().unwrap();
        let allowed = OutboundPolicy::new(vec![format!("127.0.0.1:{front_port}").parse().unwrap()]);
        let url = format!("http://127.0.0.1:{front_port}/site.git");
        let e = fetch(&url, "main", d.path(), None, &allowed)
            .await
            .err()
            .unwrap();
        let SourceError::Refused(why) = &e else {
            panic!("not a refusal: {e}");
        };
        assert!(
            why.contains("127.0.0.1") && why.contains("loopback"),
            "{why}"
        );
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
