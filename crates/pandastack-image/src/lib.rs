//! Template specs and the image builder.
//!
//! A [`TemplateSpec`] (TOML) says what goes into a sandbox's root filesystem: a Debian suite and
//! packages, pip and npm packages, files, setup commands, and the VM shape. [`build_base`] turns a
//! spec into a sparse ext4 image with mmdebstrap and `mkfs.ext4 -d`, cached by the spec's hash;
//! [`install_agent`] writes the guest agent into a copy of it without mounting anything.
//!
//! This crate builds files; it never boots a VM.

mod agent;
mod build;
mod mirror;
mod spec;

pub use agent::{install_agent, rootfs_with_agent, AgentError};
pub use build::{build_base, build_base_in, BaseImage, BuildError, Progress};
pub use mirror::{debian_mirror, parse_deb822, parse_one_line};
pub use spec::{SpecError, TemplateSpec};

use std::path::PathBuf;

/// The cache root: `$PANDASTACK_CACHE` or `/var/cache/pandastack`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("PANDASTACK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/pandastack".into())
}
