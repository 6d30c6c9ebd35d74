//! Images for user-built templates (`POST /v1/templates`): from a spec restricted to what is safe
//! to run as root on this host, or from an OCI image tarball unpacked in a user namespace. The
//! spec's own steps run in a builder VM (see `steps`). The caller records status and bakes the
//! result with [`HostAgent::bake_image`].

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use pandastack_host::{
    error_chain, BuildLogFn, BuildSource, BuiltImage, Shape, SpecRefused, SpecSummary,
};
use pandastack_image::{
    install_agent, BuildOptions, ImageCache, OciOptions, Progress, TemplateSpec,
};
use pandastack_vm::VmDriver;

use crate::{AgentError, HostAgent};

/// What a spec accepted by [`api_spec`] asks for.
pub fn spec_summary(spec: &TemplateSpec) -> SpecSummary {
    let vm = spec.vm();
    SpecSummary {
        name: spec.name().to_owned(),
        description: spec.description().to_owned(),
        shape: Shape {
            vcpus: vm.vcpus,
            memory_mib: vm.memory_mb,
            disk: None,
        },
        disk_mb: vm.disk_mb,
    }
}

/// What the blocking image build works from.
enum ImageSource {
    Spec(Box<TemplateSpec>),
    Oci {
        tarball: PathBuf,
        disk_mb: Option<u32>,
    },
}

/// Parses a spec sent over the API. Only trusted code may run in the root-run builder on the
/// host: the Debian bootstrap from the host's configured mirror (the archive's maintainer
/// scripts). The caller's steps — pip and npm packages, files, `setup` commands — run later in
/// a builder VM (see `pandastack-api`'s template builds). `source` files (paths on the host) and
/// a `mirror` of the caller's choosing are refused.
pub fn api_spec(text: &str) -> Result<TemplateSpec, SpecRefused> {
    let value: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| SpecRefused::Parse(e.message().to_owned()))?;
    if value
        .get("debian")
        .and_then(toml::Value::as_table)
        .is_some_and(|d| d.contains_key("mirror"))
    {
        return Err(SpecRefused::Unsafe("debian.mirror"));
    }
    if let Some(files) = value.get("files").and_then(toml::Value::as_array) {
        if files
            .iter()
            .any(|f| f.as_table().is_some_and(|t| t.contains_key("source")))
        {
            return Err(SpecRefused::Unsafe("files.source"));
        }
    }
    // No `source` is left, so the path is never read; it only names the spec in messages.
    TemplateSpec::from_toml(text, Path::new("/nonexistent/api/spec.toml"))
        .map_err(|e| SpecRefused::Invalid(error_chain(&e)))
}

/// The file a stored upload is fetched to in the build's directory.
const STORED_UPLOAD: &str = "upload.tar";

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Builds the root filesystem of user template version `id` into `work` (created), with
    /// the guest agent installed; `log` gets progress lines. The host part (Debian bootstrap or
    /// OCI unpacking) runs on a blocking thread; a spec's own steps then run in a builder VM.
    pub async fn build_image(
        self: &Arc<Self>,
        id: &str,
        source: BuildSource,
        work: PathBuf,
        log: BuildLogFn,
    ) -> Result<BuiltImage, AgentError> {
        let log = Arc::new(Mutex::new(log));
        let line = {
            let log = Arc::clone(&log);
            move |l: &str| {
                if let Ok(mut f) = log.lock() {
                    f(l)
                }
            }
        };
        // The host builds only a spec's Debian part; its own steps run in a builder VM.
        let mut spec_vm = None;
        let (source, guest_steps) = match source {
            BuildSource::Spec(text) => {
                let spec = api_spec(&text).map_err(|e| AgentError::BuildSteps(e.to_string()))?;
                spec_vm = Some(spec.vm());
                if spec.has_guest_steps() {
                    (
                        ImageSource::Spec(Box::new(spec.without_guest_steps())),
                        Some(spec),
                    )
                } else {
                    (ImageSource::Spec(Box::new(spec)), None)
                }
            }
            BuildSource::Oci { tarball, disk_mb } => (ImageSource::Oci { tarball, disk_mb }, None),
            // A replica's upload: fetched into the build's directory first.
            BuildSource::OciStored {
                ws,
                manifest,
                disk_mb,
            } => {
                let objects = self.cfg.objects.clone().ok_or_else(|| {
                    AgentError::BuildSteps(
                        "this host has no object store to fetch the upload from".to_owned(),
                    )
                })?;
                tokio::fs::create_dir_all(&work).await?;
                let tarball = work.join(STORED_UPLOAD);
                let got = objects.download_file(&ws, &manifest, &tarball).await?;
                line(&format!(
                    "the upload fetched from the object store: {} MiB",
                    got.bytes_downloaded >> 20
                ));
                (ImageSource::Oci { tarball, disk_mb }, None)
            }
        };
        let mut built = self.host_image(id, source, work, line.clone()).await?;
        // The spec's disk limits, which the template is baked with.
        if let (Some(shape), Some(vm)) = (built.shape.as_mut(), spec_vm) {
            shape.disk = self.spec_disk(&vm).map(crate::host::host_disk);
        }
        if let Some(spec) = guest_steps {
            let shape =
                built
                    .shape
                    .map(crate::host::runtime_shape)
                    .unwrap_or(pandastack_runtime::Shape {
                        vcpus: 1,
                        memory_mib: 512,
                        disk: None,
                    });
            let mut line = line;
            crate::steps::run(self, id, shape, &spec, &built.image, &mut line)
                .await
                .map_err(AgentError::BuildSteps)?;
        }
        Ok(built)
    }

    /// The host part of [`Self::build_image`], on a blocking thread.
    async fn host_image(
        &self,
        id: &str,
        source: ImageSource,
        work: PathBuf,
        mut log: impl FnMut(&str) + Send + 'static,
    ) -> Result<BuiltImage, AgentError> {
        let agent = self.cfg.guest_agent.clone();
        let owned = id.to_owned();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&work)?;
            let out = work.join("rootfs.ext4");
            let built = match source {
                ImageSource::Spec(spec) => {
                    let mut progress = |p: Progress| log(&format!("{p:?}"));
                    let img = ImageCache::from_env()
                        .rootfs_with_agent(
                            &spec,
                            &agent,
                            BuildOptions { force: false },
                            &mut progress,
                        )
                        .map_err(|e| image_error(&owned, e))?;
                    // A copy of our own (a reflink where the filesystem has them), so a re-bake
                    // does not depend on the image cache keeping this image.
                    copy_image(&img.path, &out)?;
                    let vm = spec.vm();
                    BuiltImage {
                        image: out,
                        shape: Some(Shape {
                            vcpus: vm.vcpus,
                            memory_mib: vm.memory_mb,
                            disk: None,
                        }),
                        disk_mb: vm.disk_mb,
                        env: Vec::new(),
                    }
                }
                ImageSource::Oci { tarball, disk_mb } => {
                    if !is_static(&agent)? {
                        return Err(image_error(
                            &owned,
                            std::io::Error::other(format!(
                                "guest agent {} is dynamically linked; an image of another \
                                 libc could not start it (build it with \
                                 `-C target-feature=+crt-static`, as scripts/start.sh does)",
                                agent.display()
                            )),
                        ));
                    }
                    let unpacker = std::env::current_exe()?;
                    let oci_work = work.join("oci");
                    let imported = pandastack_image::import_oci(
                        &tarball,
                        &oci_work,
                        &OciOptions { disk_mb, unpacker },
                        &mut log,
                    )
                    .map_err(|e| image_error(&owned, e))?;
                    log("installing the guest agent");
                    install_agent(&imported.image, &agent, &out)
                        .map_err(|e| image_error(&owned, e))?;
                    let _ = std::fs::remove_dir_all(&oci_work);
                    let size = std::fs::metadata(&out)?.len();
                    BuiltImage {
                        image: out,
                        shape: None,
                        disk_mb: size.div_ceil(1 << 20) as u32,
                        env: imported.env,
                    }
                }
            };
            Ok(built)
        })
        .await
        .map_err(|e| image_error(id, e))?
    }
}

/// Whether the ELF executable at `path` has no program interpreter (is statically linked).
fn is_static(path: &Path) -> Result<bool, AgentError> {
    let bytes = std::fs::read(path)?;
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if !bytes.starts_with(b"\x7fELF") || bytes.get(4) != Some(&2) {
        return Err(AgentError::Io(std::io::Error::other(format!(
            "{} is not a 64-bit ELF executable",
            path.display()
        ))));
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return Ok(false);
    };
    const PT_INTERP: u32 = 3;
    Ok((0..usize::from(phnum)).all(|i| {
        let at = phoff as usize + i * usize::from(phentsize);
        bytes
            .get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) != PT_INTERP)
    }))
}

/// Copies an image with `cp --reflink=auto --sparse=always` (shares blocks where it can).
fn copy_image(from: &Path, to: &Path) -> Result<(), AgentError> {
    let status = std::process::Command::new("cp")
        .args(["--reflink=auto", "--sparse=always", "--"])
        .arg(from)
        .arg(to)
        .status()?;
    if !status.success() {
        return Err(AgentError::Io(std::io::Error::other(format!(
            "cp {} {}: {status}",
            from.display(),
            to.display()
        ))));
    }
    Ok(())
}

fn image_error(name: &str, e: impl std::error::Error + Send + Sync + 'static) -> AgentError {
    AgentError::Image {
        name: name.to_owned(),
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_executables_are_told_apart() {
        // This test binary is linked dynamically (it has an interpreter).
        let me = std::env::current_exe().unwrap();
        assert!(!is_static(&me).unwrap());
        assert!(is_static(Path::new("/etc/hostname")).is_err());
        // busybox-static (scripts/setup-host.sh installs it) has none.
        assert!(is_static(Path::new("/bin/busybox")).unwrap());
    }

    #[test]
    fn api_specs_refuse_host_files_and_mirrors() {
        let base = "name = \"t\"\n[debian]\npackages = [\"python3\"]\n";
        assert!(api_spec(base).is_ok());
        // Steps that run code go to the builder VM: accepted.
        let steps = "setup = [\"id\"]\nname = \"t\"\n[debian]\npackages = [\"python3-pip\", \"npm\"]\n[pip]\npackages = [\"x\"]\n[npm]\npackages = [\"y\"]\n";
        let spec = api_spec(steps).unwrap();
        assert!(spec.has_guest_steps());
        assert!(!spec.without_guest_steps().has_guest_steps());
        let mirror = "name = \"t\"\n[debian]\nmirror = \"http://evil/\"\n";
        assert!(matches!(
            api_spec(mirror),
            Err(SpecRefused::Unsafe("debian.mirror"))
        ));
        let source = format!("{base}[[files]]\ndest = \"/x\"\nsource = \"/etc/shadow\"\n");
        assert!(matches!(
            api_spec(&source),
            Err(SpecRefused::Unsafe("files.source"))
        ));
        let inline = format!("{base}[[files]]\ndest = \"/etc/x\"\ncontent = \"hi\"\n");
        assert!(api_spec(&inline).is_ok());
        assert!(matches!(api_spec("name = "), Err(SpecRefused::Parse(_))));
        assert!(matches!(
            api_spec("name = \"BAD NAME\""),
            Err(SpecRefused::Invalid(_))
        ));
    }
}
