//! Templates on first use: a template that is not baked yet is built from its spec
//! (`<templates_dir>/<name>.toml`, image cached by the spec's hash), cold-booted and snapshotted
//! once; concurrent first uses wait for that one bake.

use std::sync::Arc;

use pandastack_image::{BuildOptions, ImageCache, Progress, TemplateSpec};
use pandastack_runtime::{BakeError, DeviceProfile, Shape, Template, TemplateCheck};
use pandastack_vm::VmDriver;
use tokio::sync::Mutex;

use crate::{AgentError, HostAgent};

/// A template this host can serve: from a spec, baked or not yet.
#[derive(Debug, Clone)]
pub struct TemplateView {
    pub name: String,
    pub description: String,
    pub shape: Shape,
    pub disk_mb: u32,
    /// Set once baked.
    pub baked: Option<Template>,
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// The baked template `name`, building and baking it first if needed. A bake made with a
    /// different network setting than the runtime's (NIC or none) or another number of volume
    /// slots than the agent's is re-baked when the template's spec is at hand, else used as it
    /// is.
    pub async fn template(&self, name: &str) -> Result<Template, AgentError> {
        // `<catalog name>-m<MiB>`: that catalog template with another memory size.
        let (spec_name, memory) = match self.memory_variant(name) {
            Some((base, mib)) => (base, Some(mib)),
            None => (name, None),
        };
        let spec_path = self.cfg.templates_dir.join(format!("{spec_name}.toml"));
        let usable = |t: &Template| {
            (t.network == self.rt.network().is_some() && t.volume_slots == self.cfg.volume_slots)
                || !spec_path.is_file()
        };
        match self.rt.template(name) {
            Ok(t) if usable(&t) => return Ok(t),
            Ok(_) => {}
            Err(BakeError::NotBaked(_)) => {}
            Err(BakeError::InvalidName(_)) => {
                return Err(AgentError::TemplateNotFound(name.into()))
            }
            Err(e) => return Err(e.into()),
        }
        let lock = self.bake_lock(name).await;
        let _baking = lock.lock().await;
        if let Ok(t) = self.rt.template(name) {
            if usable(&t) {
                return Ok(t);
            }
        }
        // Baked by another host of the cluster: no build (see `shared_templates`).
        match self.fetch_template(name).await {
            Ok(Some(t)) => return Ok(t),
            Ok(None) => {}
            Err(e) if spec_path.is_file() => tracing::warn!(
                template = name,
                error = &e as &dyn std::error::Error,
                "fetching the template from the object store failed: building it here"
            ),
            Err(e) => return Err(e),
        }
        if !spec_path.is_file() {
            return Err(AgentError::TemplateNotFound(name.into()));
        }
        let (image, mut shape) = self.spec_image(spec_name, spec_path).await?;
        if let Some(mib) = memory {
            shape.memory_mib = mib;
        }
        tracing::info!(template = name, image = %image.display(), memory_mib = shape.memory_mib, "baking");
        let t = self
            .rt
            .bake_with(name, &image, shape, self.profile())
            .await?;
        tracing::info!(template = name, bake_ms = t.bake_ms, "baked");
        self.publish_later(&t);
        Ok(t)
    }

    /// Bakes `image` as template `name` (replacing an earlier bake of that name once the new one
    /// is complete), serialised with first-use bakes of the same name.
    pub async fn bake_image(
        &self,
        name: &str,
        image: &std::path::Path,
        shape: Shape,
    ) -> Result<Template, AgentError> {
        let lock = self.bake_lock(name).await;
        let _baking = lock.lock().await;
        // Pooled VMs of the old bake can never be used again.
        self.rt.drain_template_pool(name).await;
        let t = self
            .rt
            .bake_with(name, image, shape, self.profile())
            .await?;
        self.publish_later(&t);
        Ok(t)
    }

    /// Re-bakes catalog template `name` from its spec (the image is rebuilt only if the spec
    /// changed).
    pub async fn rebake(&self, name: &str) -> Result<Template, AgentError> {
        let spec_path = self.cfg.templates_dir.join(format!("{name}.toml"));
        if !spec_path.is_file() {
            return Err(AgentError::TemplateNotFound(name.into()));
        }
        let (image, shape) = self.spec_image(name, spec_path).await?;
        self.bake_image(name, &image, shape).await
    }

    /// Checks every baked template's memory image and device state against the seals its bake
    /// recorded (a `stat` per file when nothing changed). A template that is damaged, or was
    /// baked before seals existed, is taken out of service at once — pooled VMs stopped, bake
    /// removed — and baked again in the background from the image it was baked from (else
    /// `fallback_image(name)`, else its catalog spec); creates of it wait for that bake.
    /// Returns what was found for each template that was not intact.
    pub async fn verify_templates(
        self: &Arc<Self>,
        fallback_image: impl Fn(&str) -> Option<std::path::PathBuf>,
    ) -> Result<Vec<(String, TemplateCheck)>, AgentError> {
        let mut found = Vec::new();
        for name in self.rt.baked_templates()? {
            let check = match self.rt.check_template(&name).await {
                Ok(c) => c,
                Err(e) => TemplateCheck::Damaged(format!("unreadable: {e}")),
            };
            if check == TemplateCheck::Intact {
                continue;
            }
            tracing::warn!(template = %name, check = ?check, "template memory image not proven intact: baking it again");
            // From the image of the bake being replaced, else the caller's idea of it, else
            // (catalog templates) the spec.
            let source = self.rt.template(&name).ok().and_then(|t| {
                let image = t
                    .image
                    .filter(|p| p.is_file())
                    .or_else(|| fallback_image(&name).filter(|p| p.is_file()))?;
                Some((image, t.shape))
            });
            let lock = self.bake_lock(&name).await;
            let baking = lock.lock_owned().await;
            self.rt.remove_template(&name).await?;
            let me = Arc::clone(self);
            let owned = name.clone();
            tokio::spawn(async move {
                let _baking = baking;
                match me.bake_again(&owned, source).await {
                    Ok(t) => {
                        tracing::info!(template = %owned, bake_ms = t.bake_ms, "template baked again");
                        me.publish_later(&t);
                    }
                    Err(e) => tracing::error!(
                        template = %owned,
                        error = &e as &dyn std::error::Error,
                        "baking the template again failed: build or bake it again"
                    ),
                }
            });
            found.push((name, check));
        }
        Ok(found)
    }

    /// Bakes `name` from `source` (image and shape) or, without one, from its catalog spec.
    /// The caller holds the template's bake lock.
    async fn bake_again(
        &self,
        name: &str,
        source: Option<(std::path::PathBuf, Shape)>,
    ) -> Result<Template, AgentError> {
        let (image, shape) = match source {
            Some(s) => s,
            None if self.is_catalog(name) => {
                let spec = self.cfg.templates_dir.join(format!("{name}.toml"));
                self.spec_image(name, spec).await?
            }
            None => return Err(AgentError::TemplateNotFound(name.into())),
        };
        Ok(self
            .rt
            .bake_with(name, &image, shape, self.profile())
            .await?)
    }

    /// Removes baked template `name` and its pooled VMs; running sandboxes are not affected.
    /// In a cluster its bakes leave the object store too, so no host fetches it again.
    pub async fn remove_template(&self, name: &str) -> Result<(), AgentError> {
        let lock = self.bake_lock(name).await;
        let _baking = lock.lock().await;
        self.rt.remove_template(name).await?;
        self.unshare_template(name).await
    }

    /// `<catalog name>-m<MiB>` (MiB from 128 to 65536, written without leading zeros) names
    /// that catalog template baked with another memory size (a managed database's
    /// `memory_mb`): its base name and size. The image is the base's; only the bake differs.
    pub fn memory_variant<'a>(&self, name: &'a str) -> Option<(&'a str, u32)> {
        let (base, mib) = name.rsplit_once("-m")?;
        let n: u32 = mib.parse().ok()?;
        (n.to_string() == mib && (128..=65_536).contains(&n) && self.is_catalog(base))
            .then_some((base, n))
    }

    /// Whether `name` is a catalog template (a spec in the templates directory).
    pub fn is_catalog(&self, name: &str) -> bool {
        !name.is_empty()
            && !name.contains(['/', '.'])
            && self
                .cfg
                .templates_dir
                .join(format!("{name}.toml"))
                .is_file()
    }

    /// The devices every bake of this agent gets.
    pub(crate) fn profile(&self) -> DeviceProfile {
        DeviceProfile {
            volume_slots: self.cfg.volume_slots,
        }
    }

    /// The guest agent binary put into template images.
    pub fn guest_agent(&self) -> &std::path::Path {
        &self.cfg.guest_agent
    }

    pub(crate) async fn bake_lock(&self, name: &str) -> Arc<Mutex<()>> {
        let mut bakes = self.bakes.lock().await;
        Arc::clone(
            bakes
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Mutex::new(()))),
        )
    }

    /// Builds (or finds cached) the image of the spec at `spec_path`, with the guest agent.
    /// The disk limits a template spec names (`None`: it names none), with the runtime's
    /// default for the one it leaves out.
    pub(crate) fn spec_disk(
        &self,
        vm: &pandastack_image::VmShape,
    ) -> Option<pandastack_vm::DiskLimits> {
        (vm.disk_mbps.is_some() || vm.disk_iops.is_some()).then(|| {
            self.rt
                .disk_limits(Shape::new(0, 0))
                .with(vm.disk_mbps.map(u64::from), vm.disk_iops.map(u64::from))
        })
    }

    async fn spec_image(
        &self,
        name: &str,
        spec_path: std::path::PathBuf,
    ) -> Result<(std::path::PathBuf, Shape), AgentError> {
        let agent = self.cfg.guest_agent.clone();
        let owned = name.to_owned();
        let (image, vm) = tokio::task::spawn_blocking(move || {
            let spec = TemplateSpec::load(&spec_path).map_err(|e| image_error(&owned, e))?;
            let mut log =
                |p: Progress| tracing::info!(template = %owned, progress = ?p, "image build");
            let img = ImageCache::from_env()
                .rootfs_with_agent(&spec, &agent, BuildOptions { force: false }, &mut log)
                .map_err(|e| image_error(&owned, e))?;
            Ok::<_, AgentError>((img.path, spec.vm()))
        })
        .await
        .map_err(|e| image_error(name, e))??;
        Ok((
            image,
            Shape {
                vcpus: vm.vcpus,
                memory_mib: vm.memory_mb,
                disk: self.spec_disk(&vm),
            },
        ))
    }

    /// Templates this host can serve: every spec in the templates directory.
    pub fn templates(&self) -> Result<Vec<TemplateView>, AgentError> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.cfg.templates_dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let Ok(spec) = TemplateSpec::load(&path) else {
                tracing::warn!(spec = %path.display(), "skipping invalid template spec");
                continue;
            };
            let vm = spec.vm();
            out.push(TemplateView {
                name: spec.name().to_owned(),
                description: spec.description().to_owned(),
                shape: Shape {
                    vcpus: vm.vcpus,
                    memory_mib: vm.memory_mb,
                    disk: self.spec_disk(&vm),
                },
                disk_mb: vm.disk_mb,
                baked: self.rt.template(spec.name()).ok(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

fn image_error(name: &str, e: impl std::error::Error + Send + Sync + 'static) -> AgentError {
    AgentError::Image {
        name: name.to_owned(),
        source: Box::new(e),
    }
}
