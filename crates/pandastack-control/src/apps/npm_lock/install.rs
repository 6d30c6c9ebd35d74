//! The fast path in a deploy: between the dependency cache and the install step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pandastack_host::error_chain;

use super::{fetch, pack, FastPathError, Lock, LOCKFILE};
use crate::apps::deploy::{DeployCause, Run, VM_UNPACK};
use crate::apps::deps;
use crate::apps::detect::{BuildPlan, NPM_CI};
use crate::apps::{Shared, APP_DIR};

/// The repacked packages in the deploy's directory (removed after the upload, and by the
/// deploy job's end for a job cut off).
pub(crate) const PACKED: &str = "node_modules.tar.gz";
/// Longest the registry may take to answer a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

impl Shared {
    /// The host's tarball cache: `<data>/npm-tarballs/`, beside the deploys' directory.
    fn npm_cache(&self) -> PathBuf {
        self.dir.with_file_name("npm-tarballs")
    }

    /// Installs an npm project's packages by the fast path when it takes the project: fetched
    /// on the host, unpacked in the VM. Returns the command that completes the install in the
    /// VM (`npm rebuild` and the root's install scripts), or `None` when `npm ci` installs
    /// (the log says why). `Err` only for the state store.
    pub(in crate::apps) async fn npm_fast_path(
        &self,
        run: &mut Run,
        sandbox: &str,
        plan: &BuildPlan,
        src: &Path,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<String>, DeployCause> {
        let npm_locked = plan.install.as_deref() == Some(NPM_CI)
            && plan.cache_files.iter().any(|f| f == LOCKFILE);
        if !npm_locked {
            return Ok(None);
        }
        let t = Instant::now();
        let out = self.deploy_dir(&run.row.id).join(PACKED);
        let fetched = self.fetch_and_pack(src, env, &out).await;
        let (lock, note) = match fetched {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_file(&out);
                run.log.line(&format!(
                    "install: npm installs the lockfile itself ({})",
                    error_chain(&e)
                ));
                return Ok(None);
            }
        };
        run.log.line(&format!("install: {note}"));
        self.phase_done(run, "install_fetch", t).await?;
        let t = Instant::now();
        // Like `npm ci`, whatever node_modules the source had goes first.
        let unpacked = self
            .unpack_in_vm(
                sandbox,
                &out,
                "packages",
                &format!("rm -rf {APP_DIR}/node_modules && "),
            )
            .await;
        let _ = std::fs::remove_file(&out);
        if let Err(e) = unpacked {
            run.log
                .line(&format!("install: {e}; npm installs the lockfile itself"));
            // npm then installs into a clean node_modules.
            let clean = format!("rm -rf {APP_DIR}/node_modules {VM_UNPACK}");
            let _ = deps::run(self.host.as_ref(), sandbox, &clean).await;
            return Ok(None);
        }
        self.phase_done(run, "install_unpack", t).await?;
        Ok(Some(lock.after_unpack()))
    }

    /// Reads the lockfile, fetches its packages and packs them at `out`; the lock and a
    /// line for the log.
    async fn fetch_and_pack(
        &self,
        src: &Path,
        env: &BTreeMap<String, String>,
        out: &Path,
    ) -> Result<(Lock, String), FastPathError> {
        let lock = Lock::read(src, env)?;
        let client = reqwest::Client::builder()
            .user_agent(concat!("pandastack/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| FastPathError::Fetch {
                url: super::REGISTRY.into(),
                reason: error_chain(&e),
            })?;
        let cache = self.npm_cache();
        let got = fetch(&client, &lock.packages, &cache).await?;
        let out = out.to_owned();
        let (lock, packed) = tokio::task::spawn_blocking(move || {
            let packed = pack(&lock, &cache, &out);
            (lock, packed)
        })
        .await
        .map_err(|e| FastPathError::io("pack the packages", std::io::Error::other(e)))?;
        let packed = packed?;
        let mut note = format!(
            "{} packages of {LOCKFILE} fetched on the host ({} downloaded, {:.1} MiB; {} from \
             its cache; each checked against its SHA-512) and repacked: {} files, {:.1} MiB",
            lock.packages.len(),
            got.downloaded,
            got.bytes as f64 / 1048576.0,
            got.cached,
            packed.files,
            packed.bytes as f64 / 1048576.0
        );
        if packed.skipped > 0 {
            note.push_str(&format!(
                "; {} links and special files skipped, as npm does",
                packed.skipped
            ));
        }
        if !lock.other_platform.is_empty() {
            note.push_str(&format!(
                "; optional packages for another platform left out: {}",
                lock.other_platform.join(", ")
            ));
        }
        note.push_str(&format!(
            "; the VM unpacks them and runs `{}`",
            lock.after_unpack()
        ));
        Ok((lock, note))
    }
}
