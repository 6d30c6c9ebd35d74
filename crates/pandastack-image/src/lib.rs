//! Template specs and the root filesystem image builder.
//!
//! A [`TemplateSpec`] (TOML, validated once) says what goes into a sandbox's root filesystem — a
//! Debian suite and packages, pip and npm packages, files, setup commands — and the VM shape.
//! [`ImageCache::build_base`] turns it into a sparse ext4 image with mmdebstrap and
//! `mkfs.ext4 -d`, cached under `$PANDASTACK_CACHE/images/<name>-<hash16>/` by the spec's hash,
//! with progress reported through a callback. [`install_agent`] writes the guest agent into a copy
//! of that image with debugfs, so a new agent build never re-runs the bootstrap;
//! [`ImageCache::rootfs_with_agent`] caches the result per agent hash. [`import_oci`] makes a
//! root filesystem image from an OCI image layout or `docker save` tarball instead; its untrusted
//! layers are unpacked only by a child process in a user namespace, never as root on the host.
//!
//! This crate makes files. It never boots a VM, never mounts an image, and never leaves a mount
//! on the host (chroot steps run in a private mount namespace). The Debian mirror comes from the
//! host's apt configuration, never from a host name built into the code.

mod agent;
mod build;
mod cache;
mod manifest;
pub mod mirror;
mod oci;
mod spec;

pub use agent::{
    file_sha256, install_agent, rootfs_with_agent, AgentImage, InjectError, AGENT_PATH,
};
pub use build::{BaseImage, BuildError, BuildOptions, Progress, BASE_IMAGE};
pub use cache::ImageCache;
pub use manifest::{Manifest, StepTiming};
pub use oci::{
    import_oci, unpack_main, OciError, OciImport, OciOptions, UnpackArgs, UNPACK_ID_BASE,
    UNPACK_ID_COUNT,
};
pub use spec::{
    DebianSpec, FileContent, FileSpec, SpecError, SpecHash, TemplateSpec, Variant, VmShape,
    BUILDER_VERSION,
};
