//! Templates that move between hosts. In a cluster ([`HostAgent::share_templates`]) every
//! template an agent bakes, and every one it holds when sharing starts, is uploaded to the
//! shared object store in the background as content-addressed chunks (all-zero chunks are
//! holes and never stored; a chunk two bakes or templates share is stored once). An agent
//! asked for a template it does not hold takes the newest durable bake from there instead of
//! building and baking it again.
//!
//! ```text
//!   ws/platform/manifests/template-files/<name>.<bake id>.<file>.json   rootfs, mem, state, image
//!   ws/platform/records/templates/<name>.<bake id>.json                 written last: durable
//!
//!   a host without <name>:  newest record of <name>
//!     ├─ same compatibility key, NIC and volume slots ─► fetch rootfs, mem, state; install
//!     │                                                  (the origin's seals checked; its bake id)
//!     ├─ another key (QEMU, kernel, accelerator, CPU) ─► fetch the image; bake it here
//!     └─ none ─────────────────────────────────────────► the catalog spec (build and bake)
//! ```
//!
//! A record is written only after every file of its bake is stored, so a record never names a
//! missing chunk. A bake replaced (a rebake) has its older records removed once the new one is
//! durable; removing a template removes its records, so no host fetches it again. Templates are
//! platform objects: they live under the namespace [`NAMESPACE`], which no workspace id
//! (`ws-…`) can name.

use std::path::Path;
use std::sync::{Arc, Weak};

use pandastack_objects::{Objects, ObjectsError, DEFAULT_CHUNK_SIZE};
use pandastack_runtime::{Template, TemplateCheck};
use pandastack_vm::VmDriver;
use serde::{Deserialize, Serialize};

use crate::{AgentError, HostAgent};

/// The object store namespace of platform objects (in place of a workspace id).
pub const NAMESPACE: &str = "platform";
/// Records of durable bakes.
const RECORDS: &str = "templates";
/// Manifests of the bakes' files.
const FILES: &str = "template-files";
/// The files of a bake another host installs as it is: their name in the store and in the
/// template's directory.
const BAKE_FILES: [(&str, &str); 3] = [
    ("rootfs", "rootfs.ext4"),
    ("mem", "mem"),
    ("state", "state"),
];
/// The image a bake was made from, stored beside them when its host has it.
const IMAGE: &str = "image";

/// A durable bake, as its record says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedBake {
    /// The bake as its host wrote it (`template.json`; paths are that host's).
    pub template: Template,
    /// The compatibility key of the host that baked it: its memory image restores only on an
    /// equal one.
    pub compat_key: String,
    /// The host that baked it.
    pub host: String,
    /// Unix ms when its last file was stored.
    pub durable_at_ms: i64,
    /// Whether the image it was baked from is stored too (a host with another key bakes that).
    pub image: bool,
}

/// How this agent shares templates (set once, by [`HostAgent::share_templates`]).
pub(crate) struct Sharing<D: VmDriver> {
    pub(crate) objects: Objects,
    pub(crate) compat_key: String,
    pub(crate) host: String,
    /// The agent itself, for uploads in the background.
    agent: Weak<HostAgent<D>>,
}

fn record_id(name: &str, bake_id: &str) -> String {
    format!("{name}.{bake_id}")
}

fn file_id(name: &str, bake_id: &str, file: &str) -> String {
    format!("{name}.{bake_id}.{file}")
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Shares templates through `objects` from now on (a cluster's agent; see the module doc):
    /// bakes are uploaded as they are made, and a template this host lacks is fetched. Every
    /// template held now whose bake is not durable yet is uploaded in the background. Once:
    /// a second call is ignored.
    pub fn share_templates(self: &Arc<Self>, objects: Objects, compat_key: &str, host: &str) {
        let sharing = Sharing {
            objects,
            compat_key: compat_key.to_owned(),
            host: host.to_owned(),
            agent: Arc::downgrade(self),
        };
        if self.sharing.set(sharing).is_err() {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let names = match me.rt.baked_templates() {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "listing baked templates to share failed"
                    );
                    return;
                }
            };
            for name in names {
                if let Ok(t) = me.rt.template(&name) {
                    me.publish(t, false).await;
                }
            }
        });
    }

    /// Uploads bake `t` in the background (sharing only; nothing if it is durable already).
    pub(crate) fn publish_later(&self, t: &Template) {
        let Some(me) = self.sharing.get().and_then(|s| s.agent.upgrade()) else {
            return;
        };
        let t = t.clone();
        tokio::spawn(async move { me.publish(t, true).await });
    }

    /// Uploads bake `t` and writes its record, then removes the records of older bakes of its
    /// name made for the same hosts (compatibility key and devices). Holds the template's bake
    /// lock throughout, so no rebake replaces the files while they are read (and a bake
    /// replaced before is not uploaded). A bake held when sharing starts (not `fresh`) is
    /// offered only if no bake for the same hosts is stored: it may be one another host
    /// replaced since (a rebake), which must not come back as the newest. Failures are logged:
    /// the bake stays local.
    async fn publish(&self, t: Template, fresh: bool) {
        let Some(s) = self.sharing.get() else { return };
        let lock = self.bake_lock(&t.name).await;
        let _baking = lock.lock().await;
        if self.rt.template(&t.name).ok().map(|now| now.bake_id) != Some(t.bake_id.clone()) {
            return;
        }
        let started = std::time::Instant::now();
        match self.upload_bake(s, &t, fresh).await {
            Ok(true) => tracing::info!(
                template = %t.name,
                bake_id = %t.bake_id,
                upload_ms = started.elapsed().as_millis() as u64,
                "template durable in the object store"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                template = %t.name,
                bake_id = %t.bake_id,
                error = &e as &dyn std::error::Error,
                "uploading the template failed: it is served from this host only"
            ),
        }
    }

    /// [`HostAgent::publish`]'s work: `Ok(false)` when there was nothing to do.
    async fn upload_bake(
        &self,
        s: &Sharing<D>,
        t: &Template,
        fresh: bool,
    ) -> Result<bool, AgentError> {
        let id = record_id(&t.name, &t.bake_id);
        if t.bake_id.is_empty() || t.seals.is_none() {
            return Ok(false);
        }
        let stored = self.records_of(s, &t.name).await?;
        if stored.iter().any(|(r, _)| *r == id)
            || (!fresh && stored.iter().any(|(_, b)| self.fits_here(s, b)))
        {
            return Ok(false);
        }
        // Only what the bake sealed is offered to other hosts.
        if self.rt.check_template(&t.name).await? != TemplateCheck::Intact {
            return Ok(false);
        }
        let image = t.image.as_deref().filter(|p| p.is_file());
        let mut files: Vec<(&str, std::path::PathBuf)> = BAKE_FILES
            .iter()
            .map(|&(kind, file)| (kind, t.dir.join(file)))
            .collect();
        if let Some(p) = image {
            files.push((IMAGE, p.to_owned()));
        }
        for (file, path) in &files {
            let up = s
                .objects
                .upload_file(NAMESPACE, path, DEFAULT_CHUNK_SIZE)
                .await?;
            s.objects
                .put_manifest(
                    NAMESPACE,
                    FILES,
                    &file_id(&t.name, &t.bake_id, file),
                    &up.manifest,
                )
                .await?;
        }
        let record = SharedBake {
            template: t.clone(),
            compat_key: s.compat_key.clone(),
            host: s.host.clone(),
            durable_at_ms: now_ms(),
            image: image.is_some(),
        };
        let json = serde_json::to_value(&record).expect("a record serialises");
        s.objects.put_record(NAMESPACE, RECORDS, &id, &json).await?;
        // Older bakes of this name for the same hosts are not fetched again.
        for (old, bake) in self.records_of(s, &t.name).await? {
            if old != id && self.fits_here(s, &bake) && bake.durable_at_ms <= record.durable_at_ms {
                forget_bake(s, &t.name, &bake.template.bake_id).await?;
            }
        }
        Ok(true)
    }

    /// The durable bakes of template `name`: record id and record.
    async fn records_of(
        &self,
        s: &Sharing<D>,
        name: &str,
    ) -> Result<Vec<(String, SharedBake)>, AgentError> {
        let prefix = format!("{name}.");
        let mut out = Vec::new();
        for id in s.objects.list_records(NAMESPACE, RECORDS).await? {
            if !id.starts_with(&prefix) || id[prefix.len()..].contains('.') {
                continue;
            }
            let raw = match s.objects.get_record(NAMESPACE, RECORDS, &id).await {
                Ok(r) => r,
                // Removed meanwhile.
                Err(ObjectsError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            match serde_json::from_value::<SharedBake>(raw) {
                Ok(b) if b.template.name == name => out.push((id, b)),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(record = %id, error = &e as &dyn std::error::Error, "unreadable template record skipped")
                }
            }
        }
        Ok(out)
    }

    /// Whether this host can install bake `b` as it is: the same compatibility key, NIC
    /// setting and volume slots.
    fn fits_here(&self, s: &Sharing<D>, b: &SharedBake) -> bool {
        b.compat_key == s.compat_key
            && b.template.network == self.rt.network().is_some()
            && b.template.volume_slots == self.cfg.volume_slots
    }

    /// The durable bake of template `name` this host would take (sharing only): the newest it
    /// can install as it is, else the newest whose image is stored (baked here), else the
    /// newest.
    pub async fn shared_bake(&self, name: &str) -> Result<Option<SharedBake>, AgentError> {
        let Some(s) = self.sharing.get() else {
            return Ok(None);
        };
        let bakes: Vec<SharedBake> = self
            .records_of(s, name)
            .await?
            .into_iter()
            .map(|(_, b)| b)
            .collect();
        let newest = |keep: &dyn Fn(&SharedBake) -> bool| {
            bakes
                .iter()
                .filter(|b| keep(b))
                .max_by_key(|b| b.durable_at_ms)
                .cloned()
        };
        Ok(newest(&|b| self.fits_here(s, b))
            .or_else(|| newest(&|b| b.image))
            .or_else(|| newest(&|_| true)))
    }

    /// This host's bake of template `name` as a source of chunks for downloading a disk made
    /// from it (a snapshot's, a moving sandbox's: their unchanged ranges are the bake's): its
    /// root filesystem and the manifest it was stored with. `None` when the template is not
    /// here or its bake is not stored.
    pub(crate) async fn rootfs_to_reuse(
        &self,
        name: &str,
    ) -> Option<(std::path::PathBuf, pandastack_objects::Manifest)> {
        let s = self.sharing.get()?;
        let t = self.rt.template(name).ok()?;
        let manifest = s
            .objects
            .get_manifest(NAMESPACE, FILES, &file_id(name, &t.bake_id, "rootfs"))
            .await
            .ok()?;
        Some((t.rootfs(), manifest))
    }

    /// Takes template `name` from the object store, if a host made it durable there (see the
    /// module doc): `None` when no bake of it is stored (or this agent does not share). The
    /// caller holds the template's bake lock.
    pub(crate) async fn fetch_template(&self, name: &str) -> Result<Option<Template>, AgentError> {
        let Some(s) = self.sharing.get() else {
            return Ok(None);
        };
        let Some(bake) = self.shared_bake(name).await? else {
            return Ok(None);
        };
        let t = &bake.template;
        let started = std::time::Instant::now();
        if self.fits_here(s, &bake) {
            let staged = self.rt.template_staging(name)?;
            let fetched = async {
                for (kind, file) in BAKE_FILES {
                    self.fetch_file(s, t, kind, &staged.join(file)).await?;
                }
                Ok::<_, AgentError>(())
            }
            .await;
            if let Err(e) = fetched {
                let _ = std::fs::remove_dir_all(&staged);
                return Err(e);
            }
            let installed = self.rt.install_template(t.clone(), &staged).await?;
            tracing::info!(
                template = name,
                bake_id = %installed.bake_id,
                from_host = %bake.host,
                fetch_ms = started.elapsed().as_millis() as u64,
                "template fetched from the object store"
            );
            return Ok(Some(installed));
        }
        if !bake.image {
            return Ok(None);
        }
        // Another compatibility key or other devices: the image, baked here.
        let images = self.rt.data().root().join("template-images");
        std::fs::create_dir_all(&images)?;
        let image = images.join(format!("{}.ext4", record_id(name, &t.bake_id)));
        if !image.is_file() {
            self.fetch_file(s, t, IMAGE, &image).await?;
        }
        tracing::info!(
            template = name,
            from_host = %bake.host,
            their_key = %bake.compat_key,
            fetch_ms = started.elapsed().as_millis() as u64,
            "template image fetched: baking it here (another compatibility key or devices)"
        );
        let baked = self
            .rt
            .bake_with(name, &image, t.shape, self.profile())
            .await?;
        self.publish_later(&baked);
        Ok(Some(baked))
    }

    async fn fetch_file(
        &self,
        s: &Sharing<D>,
        t: &Template,
        file: &str,
        dest: &Path,
    ) -> Result<(), AgentError> {
        let manifest = s
            .objects
            .get_manifest(NAMESPACE, FILES, &file_id(&t.name, &t.bake_id, file))
            .await?;
        s.objects.download_file(NAMESPACE, &manifest, dest).await?;
        Ok(())
    }

    /// Removes every durable bake of template `name` from the object store (sharing only).
    pub(crate) async fn unshare_template(&self, name: &str) -> Result<(), AgentError> {
        let Some(s) = self.sharing.get() else {
            return Ok(());
        };
        for (_, bake) in self.records_of(s, name).await? {
            forget_bake(s, name, &bake.template.bake_id).await?;
        }
        Ok(())
    }
}

/// Removes a bake's record first (no host fetches it from then on), then its manifests. The
/// chunks stay while other manifests name them (the chunk collector takes the others).
async fn forget_bake<D: VmDriver>(
    s: &Sharing<D>,
    name: &str,
    bake_id: &str,
) -> Result<(), AgentError> {
    s.objects
        .delete_record(NAMESPACE, RECORDS, &record_id(name, bake_id))
        .await?;
    for file in BAKE_FILES.map(|(kind, _)| kind).into_iter().chain([IMAGE]) {
        s.objects
            .delete_manifest(NAMESPACE, FILES, &file_id(name, bake_id, file))
            .await?;
    }
    Ok(())
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
