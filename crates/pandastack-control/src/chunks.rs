//! The object store's chunk collector: once an hour, every workspace's chunks that no manifest
//! names and that were not written for a day ([`GC_GRACE`]) are deleted
//! ([`Objects::collect_chunks`]). Deleting a snapshot, a template's bake, a backup or a moved
//! sandbox's image removes its record and manifests at once (nothing can restore it from then
//! on); this takes the bytes back. Every replica of a cluster runs it: deletes are idempotent,
//! so two passes at once cost listings, not correctness.

use std::time::Duration;

use pandastack_objects::{Collected, Objects, GC_GRACE};

/// Between passes.
const COLLECT_EVERY: Duration = Duration::from_secs(60 * 60);

/// Before the first pass: a starting server has other work.
const FIRST_AFTER: Duration = Duration::from_secs(10 * 60);

/// Runs [`collect_all`] with [`GC_GRACE`] every [`COLLECT_EVERY`], for the life of the process.
pub(crate) async fn collector(objects: Objects) {
    tokio::time::sleep(FIRST_AFTER).await;
    loop {
        collect_all(&objects, GC_GRACE).await;
        tokio::time::sleep(COLLECT_EVERY).await;
    }
}

/// One pass over every workspace of the store (`grace`: see [`Objects::collect_chunks`]); a
/// workspace that fails is logged and skipped. Returns the totals.
pub async fn collect_all(objects: &Objects, grace: Duration) -> Collected {
    let mut total = Collected::default();
    let workspaces = match objects.list_workspaces().await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "chunk collector: could not list the workspaces"
            );
            return total;
        }
    };
    for ws in workspaces {
        match objects.collect_chunks(&ws, grace).await {
            Ok(c) => {
                total.manifests += c.manifests;
                total.referenced += c.referenced;
                total.young += c.young;
                total.deleted += c.deleted;
                total.bytes_deleted += c.bytes_deleted;
            }
            Err(e) => tracing::warn!(
                workspace = %ws,
                error = &e as &dyn std::error::Error,
                "chunk collector: workspace skipped, nothing of it deleted"
            ),
        }
    }
    tracing::info!(
        manifests = total.manifests,
        referenced = total.referenced,
        young = total.young,
        deleted = total.deleted,
        bytes_deleted = total.bytes_deleted,
        "chunk collector: pass done"
    );
    total
}
