//! The dependency cache of an app: what its install made (`node_modules`, `.venv`), packed
//! after a successful install and kept in the object store as a blob
//! (`ws/<ws>/blobs/app-deps/<app id>/<key>.tar.gz`), keyed by the SHA-256 of the install
//! command, the Node.js major and the files that decide the install (the lockfile,
//! `requirements.txt`). A deploy whose key is stored unpacks it instead of installing; so a
//! redeploy with an unchanged lockfile skips the install, on any host that reaches the store.

use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use pandastack_host::{error_chain, ExecSpec, Host};
use pandastack_objects::{Objects, ObjectsError};
use sha2::{Digest, Sha256};

use super::detect::{BuildPlan, NODE_MAJOR};
use super::APP_DIR;

/// Blob kind of dependency caches.
const KIND: &str = "app-deps";
/// Largest cache kept (a bigger install is simply not cached).
const MAX_BYTES: usize = 1 << 30;
/// Largest piece of a cache sent to the VM at once.
const PIECE: usize = 1 << 20;
/// Where the cache is packed (then compressed, fast: `gzip -1`) and unpacked in the VM.
const VM_TAR: &str = "/tmp/pandastack-deps.tar";
const VM_TARBALL: &str = "/tmp/pandastack-deps.tar.gz";

/// The cache key of `plan` for the source in `src` (`None`: nothing to cache — no install,
/// no cache directories, or none of the files that decide the install).
pub fn key(plan: &BuildPlan, src: &Path) -> Option<String> {
    let install = plan.install.as_deref()?;
    if plan.cache_dirs.is_empty() || plan.cache_files.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(b"pandastack-app-deps-v1\0");
    h.update(format!("node{NODE_MAJOR}\0").as_bytes());
    h.update(plan.setup.as_deref().unwrap_or_default().as_bytes());
    h.update(b"\0");
    h.update(install.as_bytes());
    h.update(b"\0");
    for f in &plan.cache_files {
        let bytes = std::fs::read(src.join(f)).ok()?;
        h.update(f.as_bytes());
        h.update(b"\0");
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Some(
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
    )
}

/// Unpacks the stored cache `key` into the VM's app directory. `Ok(false)`: not stored.
pub async fn restore(
    objects: &Objects,
    host: &dyn Host,
    ws: &str,
    app: &str,
    sandbox: &str,
    key: &str,
) -> Result<bool, String> {
    let blob = match objects
        .get_blob(ws, KIND, app, &format!("{key}.tar.gz"))
        .await
    {
        Ok(b) => b,
        Err(ObjectsError::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(format!("read the dependency cache: {}", error_chain(&e))),
    };
    // In pieces: one message to the guest agent carries at most a few MiB.
    let pieces: Vec<Result<Bytes, String>> = (0..blob.len())
        .step_by(PIECE)
        .map(|i| Ok(blob.slice(i..(i + PIECE).min(blob.len()))))
        .collect();
    let body = futures::stream::iter(pieces).boxed();
    host.write_file(sandbox, VM_TARBALL, body)
        .await
        .map_err(|e| format!("copy the dependency cache: {}", error_chain(&e)))?;
    run(
        host,
        sandbox,
        &format!("tar -xzf {VM_TARBALL} -C {APP_DIR} && rm -f {VM_TARBALL}"),
    )
    .await?;
    Ok(true)
}

/// Packs the install's directories in the VM and stores them as cache `key`. Returns the
/// size stored (`None`: too large to keep).
pub async fn save(
    objects: &Objects,
    host: &dyn Host,
    ws: &str,
    app: &str,
    sandbox: &str,
    key: &str,
    plan: &BuildPlan,
) -> Result<Option<usize>, String> {
    let dirs: Vec<String> = plan
        .cache_dirs
        .iter()
        .map(|d| format!("'{}'", d.replace('\'', "'\\''")))
        .collect();
    let pack = format!(
        "cd {APP_DIR} && set -- && for d in {}; do [ -e \"$d\" ] && set -- \"$@\" \"$d\"; done; \
         [ $# -gt 0 ] && tar -cf {VM_TAR} \"$@\" && gzip -1 -f {VM_TAR}",
        dirs.join(" ")
    );
    run(host, sandbox, &pack).await?;
    let mut stream = host
        .read_file(sandbox, VM_TARBALL)
        .await
        .map_err(|e| format!("read the packed dependencies: {}", error_chain(&e)))?;
    let mut buf = BytesMut::new();
    while let Some(piece) = stream.next().await {
        let piece =
            piece.map_err(|e| format!("read the packed dependencies: {}", error_chain(&e)))?;
        buf.extend_from_slice(&piece);
        if buf.len() > MAX_BYTES {
            let _ = run(host, sandbox, &format!("rm -f {VM_TARBALL}")).await;
            return Ok(None);
        }
    }
    let _ = run(host, sandbox, &format!("rm -f {VM_TARBALL}")).await;
    let size = buf.len();
    match objects
        .put_blob(ws, KIND, app, &format!("{key}.tar.gz"), Bytes::from(buf))
        .await
    {
        // Another deploy of the same dependencies stored its own packing first (a tarball's
        // bytes differ with file times): that one serves.
        Ok(()) | Err(ObjectsError::Conflict { .. }) => Ok(Some(size)),
        Err(e) => Err(format!("store the dependency cache: {}", error_chain(&e))),
    }
}

/// Removes every cache of an app.
pub async fn forget(objects: &Objects, ws: &str, app: &str) -> Result<(), ObjectsError> {
    for b in objects.list_blobs(ws, KIND, app).await? {
        objects.delete_blob(ws, KIND, app, &b.name).await?;
    }
    Ok(())
}

/// Runs `shell` in the VM as root; a non-zero exit is an error with its stderr.
pub(super) async fn run(host: &dyn Host, sandbox: &str, shell: &str) -> Result<(), String> {
    let out = host
        .exec(
            sandbox,
            ExecSpec {
                shell: shell.to_owned(),
                timeout: Duration::from_secs(600),
                max_output_bytes: 64 * 1024,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| error_chain(&e))?;
    if out.exit_code != 0 || out.timed_out {
        return Err(format!(
            "`{shell}` failed ({}): {}",
            out.exit_code,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}
