//! The TOML file format of a template spec, exactly as written. Strict: unknown fields are
//! errors. Nothing here is trusted until [`super::TemplateSpec`] has validated it.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub debian: RawDebian,
    #[serde(default)]
    pub pip: RawPackages,
    #[serde(default)]
    pub npm: RawPackages,
    #[serde(default)]
    pub files: Vec<RawFile>,
    #[serde(default)]
    pub setup: Vec<String>,
    #[serde(default)]
    pub vm: RawVm,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDebian {
    pub suite: Option<String>,
    pub variant: Option<String>,
    pub components: Option<Vec<String>>,
    #[serde(default)]
    pub packages: Vec<String>,
    pub mirror: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPackages {
    #[serde(default)]
    pub packages: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub dest: String,
    pub content: Option<String>,
    pub source: Option<String>,
    /// Octal permission bits as a string ("0644"): a TOML integer cannot tell `644` from `0o1204`.
    pub mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVm {
    pub vcpus: Option<u32>,
    pub memory_mb: Option<u32>,
    pub disk_mb: Option<u32>,
    pub disk_mbps: Option<u32>,
    pub disk_iops: Option<u32>,
}
