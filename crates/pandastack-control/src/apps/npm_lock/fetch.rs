//! Fetching a lockfile's tarballs into the host's tarball cache: `<cache>/<sha512 hex>.tgz`,
//! written under a temporary name and renamed only once its hash matched, so a file in the
//! cache always holds the bytes its name says. The cache is shared by every deploy of the host
//! (the names are hashes of public registry tarballs) and trimmed to [`CACHE_MAX_BYTES`],
//! least recently used first.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha512};
use tokio::io::AsyncWriteExt;

use super::{FastPathError, Package};

/// Downloads at once.
const PARALLEL: usize = 16;
/// Largest tarball taken.
const MAX_TARBALL_BYTES: u64 = 512 << 20;
/// The cache is trimmed back under this after each fetch.
pub const CACHE_MAX_BYTES: u64 = 4 << 30;
/// Longest one download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// What a fetch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FetchStats {
    /// Tarballs downloaded.
    pub downloaded: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Tarballs already in the cache.
    pub cached: usize,
}

/// Makes sure every package's tarball is in `cache`, downloading the missing ones.
pub async fn fetch(
    client: &reqwest::Client,
    packages: &[Package],
    cache: &Path,
) -> Result<FetchStats, FastPathError> {
    tokio::fs::create_dir_all(cache)
        .await
        .map_err(|e| FastPathError::io(format!("create {}", cache.display()), e))?;
    // Owned per download: futures over borrowed items are not `Send` for every lifetime,
    // which the deploy worker's `tokio::spawn` needs.
    let results: Vec<Option<u64>> = futures::stream::iter(packages.iter().cloned())
        .map(|p| {
            let (client, cache) = (client.clone(), cache.to_owned());
            async move { one(&client, &p, &cache).await }
        })
        .buffer_unordered(PARALLEL)
        .try_collect()
        .await?;
    let mut stats = FetchStats::default();
    for r in results {
        match r {
            Some(n) => {
                stats.downloaded += 1;
                stats.bytes += n;
            }
            None => stats.cached += 1,
        }
    }
    let dir = cache.to_owned();
    // Trimming is housekeeping: a failure leaves a larger cache, nothing else.
    let _ = tokio::task::spawn_blocking(move || trim(&dir, CACHE_MAX_BYTES)).await;
    Ok(stats)
}

/// Fetches one tarball unless cached; `Some(bytes)` when it was downloaded.
async fn one(
    client: &reqwest::Client,
    p: &Package,
    cache: &Path,
) -> Result<Option<u64>, FastPathError> {
    let dest = cache.join(p.cache_name());
    if tokio::fs::metadata(&dest).await.is_ok() {
        // Used now: the trim removes the least recently used first.
        let _ = std::fs::File::options()
            .append(true)
            .open(&dest)
            .and_then(|f| f.set_modified(SystemTime::now()));
        return Ok(None);
    }
    let fail = |reason: String| FastPathError::Fetch {
        url: p.url.clone(),
        reason,
    };
    let resp = client
        .get(&p.url)
        .timeout(DOWNLOAD_TIMEOUT)
        .send()
        .await
        .map_err(|e| fail(pandastack_host::error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status())));
    }
    if resp.content_length().is_some_and(|n| n > MAX_TARBALL_BYTES) {
        return Err(fail("larger than 512 MiB".into()));
    }
    let tmp = cache.join(format!(".part-{}", rand_suffix()));
    let result = download(resp, &tmp, p).await;
    match result {
        Ok(n) => {
            tokio::fs::rename(&tmp, &dest)
                .await
                .map_err(|e| FastPathError::io(format!("store {}", dest.display()), e))?;
            Ok(Some(n))
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            Err(e)
        }
    }
}

/// Streams a response into `tmp`, checking its size and SHA-512.
async fn download(resp: reqwest::Response, tmp: &Path, p: &Package) -> Result<u64, FastPathError> {
    let mut file = tokio::fs::File::create(tmp)
        .await
        .map_err(|e| FastPathError::io(format!("create {}", tmp.display()), e))?;
    let mut hash = Sha512::new();
    let mut n: u64 = 0;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| FastPathError::Fetch {
            url: p.url.clone(),
            reason: pandastack_host::error_chain(&e),
        })?;
        n += chunk.len() as u64;
        if n > MAX_TARBALL_BYTES {
            return Err(FastPathError::Fetch {
                url: p.url.clone(),
                reason: "larger than 512 MiB".into(),
            });
        }
        hash.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| FastPathError::io(format!("write {}", tmp.display()), e))?;
    }
    if hash.finalize().as_slice() != p.sha512.as_slice() {
        return Err(FastPathError::Integrity { url: p.url.clone() });
    }
    file.sync_all()
        .await
        .map_err(|e| FastPathError::io(format!("write {}", tmp.display()), e))?;
    Ok(n)
}

fn rand_suffix() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}

/// Removes the least recently used tarballs until `dir` holds at most `max` bytes (and any
/// partial download older than an hour).
pub(crate) fn trim(dir: &Path, max: u64) -> std::io::Result<()> {
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if e.file_name().to_string_lossy().starts_with(".part-") {
            let stale = modified
                .elapsed()
                .is_ok_and(|age| age > Duration::from_secs(3600));
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        total += meta.len();
        files.push((modified, meta.len(), e.path()));
    }
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        std::fs::remove_file(&path)?;
        total -= len;
    }
    Ok(())
}
