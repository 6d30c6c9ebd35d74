//! Template images a host builds and bakes for the control plane's template builds.

use std::path::PathBuf;

use crate::Shape;

/// What a template image is built from.
#[derive(Debug, Clone)]
pub enum BuildSource {
    /// A spec's text, checked with [`crate::Host::check_spec`]: the Debian part is bootstrapped
    /// on the host, the spec's own steps (packages, files, `setup`) run in a builder VM.
    Spec(String),
    /// An OCI image layout or `docker save` tarball, in the build's directory.
    Oci {
        tarball: PathBuf,
        disk_mb: Option<u32>,
    },
    /// An OCI tarball stored in the object store as chunks of workspace `ws` (a replica's
    /// upload, built on an agent's host, which downloads it into the build's directory first).
    OciStored {
        ws: String,
        manifest: pandastack_objects::Manifest,
        disk_mb: Option<u32>,
    },
}

/// What a spec sent over the API asks for.
#[derive(Debug, Clone)]
pub struct SpecSummary {
    pub name: String,
    pub description: String,
    pub shape: Shape,
    pub disk_mb: u32,
}

/// Why a spec sent over the API was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpecRefused {
    #[error("spec: {0}")]
    Parse(String),
    #[error(
        "spec field `{0}` would read files or fetch packages on the server's host, so it is not \
         accepted over the API; inline the file's `content`, or build from an OCI image tarball"
    )]
    Unsafe(&'static str),
    #[error("spec: {0}")]
    Invalid(String),
}

/// A built root filesystem, guest agent included, ready to bake.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub image: PathBuf,
    /// The spec's shape (a spec build); an OCI build takes the caller's.
    pub shape: Option<Shape>,
    /// The image's size in MiB.
    pub disk_mb: u32,
    /// `KEY=value` entries from the OCI image config.
    pub env: Vec<String>,
}

/// Where a build's progress lines go (called from any thread).
pub type BuildLogFn = Box<dyn FnMut(&str) + Send>;
