//! The template spec: what goes into an image, validated once.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped whenever the builder changes what it produces for the same spec.
const BUILDER_VERSION: &str = "pandastack-image/1";

/// Packages every image gets because the guest agent needs them.
pub const AGENT_PACKAGES: &[&str] = &["iproute2"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TemplateSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub debian: Debian,
    #[serde(default)]
    pub pip: Packages,
    #[serde(default)]
    pub npm: Packages,
    #[serde(default)]
    pub files: Vec<FileSpec>,
    /// Shell commands run in the image (bash -euo pipefail), in order.
    #[serde(default)]
    pub setup: Vec<String>,
    #[serde(default)]
    pub vm: Vm,
    /// Directory of the spec file, for `source` paths (not part of the TOML).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Debian {
    #[serde(default = "default_suite")]
    pub suite: String,
    #[serde(default = "default_variant")]
    pub variant: String,
    #[serde(default)]
    pub packages: Vec<String>,
    /// Mirror URI; default: the host's apt sources.
    #[serde(default)]
    pub mirror: Option<String>,
}

impl Default for Debian {
    fn default() -> Self {
        Self {
            suite: default_suite(),
            variant: default_variant(),
            packages: vec![],
            mirror: None,
        }
    }
}

fn default_suite() -> String {
    "bookworm".into()
}
fn default_variant() -> String {
    "minbase".into()
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Packages {
    #[serde(default)]
    pub packages: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// Absolute path in the image.
    pub dest: String,
    #[serde(default)]
    pub content: Option<String>,
    /// Path relative to the spec file.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default = "default_mode")]
    pub mode: u32,
}

fn default_mode() -> u32 {
    0o644
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    #[serde(default = "default_vcpus")]
    pub vcpus: u32,
    #[serde(default = "default_memory")]
    pub memory_mb: u32,
    #[serde(default = "default_disk")]
    pub disk_mb: u32,
}

impl Default for Vm {
    fn default() -> Self {
        Self {
            vcpus: default_vcpus(),
            memory_mb: default_memory(),
            disk_mb: default_disk(),
        }
    }
}

fn default_vcpus() -> u32 {
    1
}
fn default_memory() -> u32 {
    512
}
fn default_disk() -> u32 {
    2048
}

/// A spec that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("read spec {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parse spec {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("invalid spec: {field}: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

fn package_name_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('-')
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-._:=<>@/~^".contains(c))
}

impl TemplateSpec {
    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut spec = Self::parse(&text).map_err(|e| match e {
            SpecError::Parse { source, .. } => SpecError::Parse {
                path: path.to_owned(),
                source,
            },
            other => other,
        })?;
        spec.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        spec.validate_sources()?;
        Ok(spec)
    }

    /// Parses and validates spec text (file sources are checked by [`TemplateSpec::load`]).
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let spec: Self = toml::from_str(text).map_err(|e| SpecError::Parse {
            path: PathBuf::new(),
            source: Box::new(e),
        })?;
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> Result<(), SpecError> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 40
            || !n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(invalid("name", "1-40 characters of [a-z0-9-]"));
        }
        if !["minbase", "buildd", "required", "important", "standard"]
            .contains(&self.debian.variant.as_str())
        {
            return Err(invalid(
                "debian.variant",
                "one of minbase, buildd, required, important, standard",
            ));
        }
        if self.debian.suite.is_empty()
            || !self
                .debian
                .suite
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-')
        {
            return Err(invalid(
                "debian.suite",
                "a Debian suite name such as bookworm",
            ));
        }
        for (field, list) in [
            ("debian.packages", &self.debian.packages),
            ("pip.packages", &self.pip.packages),
            ("npm.packages", &self.npm.packages),
        ] {
            if let Some(bad) = list.iter().find(|p| !package_name_ok(p)) {
                return Err(invalid(field, format!("bad package name {bad:?}")));
            }
        }
        let has = |p: &str| self.debian.packages.iter().any(|x| x == p);
        if !self.pip.packages.is_empty() && !has("python3-pip") {
            return Err(invalid(
                "pip.packages",
                "needs python3-pip in debian.packages",
            ));
        }
        if !self.npm.packages.is_empty() && !has("npm") {
            return Err(invalid("npm.packages", "needs npm in debian.packages"));
        }
        for (i, f) in self.files.iter().enumerate() {
            let field = format!("files[{i}]");
            if !f.dest.starts_with('/') || f.dest.contains("..") || f.dest.contains('\0') {
                return Err(invalid(
                    format!("{field}.dest"),
                    "an absolute path without ..",
                ));
            }
            if f.content.is_some() == f.source.is_some() {
                return Err(invalid(field, "exactly one of content or source"));
            }
            if f.mode > 0o7777 {
                return Err(invalid(
                    format!("{field}.mode"),
                    "permission bits (at most 0o7777)",
                ));
            }
        }
        if !(1..=16).contains(&self.vm.vcpus) {
            return Err(invalid("vm.vcpus", "1..=16"));
        }
        if !(128..=65536).contains(&self.vm.memory_mb) {
            return Err(invalid("vm.memory_mb", "128..=65536"));
        }
        if !(256..=1_048_576).contains(&self.vm.disk_mb) {
            return Err(invalid("vm.disk_mb", "256..=1048576"));
        }
        Ok(())
    }

    fn validate_sources(&self) -> Result<(), SpecError> {
        for (i, f) in self.files.iter().enumerate() {
            if let Some(src) = &f.source {
                let p = self.base_dir.join(src);
                if !p.is_file() {
                    return Err(invalid(
                        format!("files[{i}].source"),
                        format!("{} is not a file", p.display()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Packages to install: the spec's plus what the guest agent needs.
    pub fn apt_packages(&self) -> Vec<String> {
        let mut all = self.debian.packages.clone();
        for p in AGENT_PACKAGES {
            if !all.iter().any(|x| x == p) {
                all.push(p.to_string());
            }
        }
        all
    }

    /// Content hash of everything that decides the image: the spec, referenced files, builder
    /// version. Hex, 64 characters.
    pub fn hash(&self) -> Result<String, SpecError> {
        let mut h = Sha256::new();
        h.update(BUILDER_VERSION.as_bytes());
        h.update(
            toml::to_string(self)
                .map_err(|e| invalid("spec", e.to_string()))?
                .as_bytes(),
        );
        for f in &self.files {
            if let Some(src) = &f.source {
                let p = self.base_dir.join(src);
                let data = std::fs::read(&p)
                    .map_err(|e| invalid("files.source", format!("{}: {e}", p.display())))?;
                h.update((data.len() as u64).to_le_bytes());
                h.update(&data);
            }
        }
        Ok(hex::encode(h.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_field(text: &str) -> String {
        match TemplateSpec::parse(text) {
            Err(SpecError::Invalid { field, .. }) => field,
            Err(SpecError::Parse { source, .. }) => format!("parse: {source}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn shipped_specs_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        for name in ["minimal", "base"] {
            let s = TemplateSpec::load(&dir.join(format!("{name}.toml"))).unwrap();
            assert_eq!(s.name, name);
            assert!(s.apt_packages().contains(&"iproute2".to_string()));
        }
    }

    #[test]
    fn defaults_apply() {
        let s = TemplateSpec::parse("name = \"t\"").unwrap();
        assert_eq!(
            (s.debian.suite.as_str(), s.debian.variant.as_str()),
            ("bookworm", "minbase")
        );
        assert_eq!((s.vm.vcpus, s.vm.memory_mb, s.vm.disk_mb), (1, 512, 2048));
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(err_field("name = \"Bad Name\""), "name");
        assert_eq!(err_field("name = \"t\"\n[vm]\nvcpus = 0"), "vm.vcpus");
        assert_eq!(
            err_field("name = \"t\"\n[vm]\nmemory_mb = 64"),
            "vm.memory_mb"
        );
        assert_eq!(
            err_field("name = \"t\"\n[debian]\npackages = [\"-oops\"]"),
            "debian.packages"
        );
        assert_eq!(
            err_field("name = \"t\"\n[pip]\npackages = [\"numpy\"]"),
            "pip.packages"
        );
        assert_eq!(
            err_field("name = \"t\"\n[[files]]\ndest = \"etc/x\"\ncontent = \"a\""),
            "files[0].dest"
        );
        assert_eq!(
            err_field("name = \"t\"\n[[files]]\ndest = \"/etc/x\""),
            "files[0]"
        );
        assert!(err_field("name = \"t\"\ncolour = \"blue\"").contains("unknown field"));
    }

    #[test]
    fn hash_is_stable_and_covers_inputs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "one").unwrap();
        let spec_path = dir.path().join("t.toml");
        std::fs::write(
            &spec_path,
            "name = \"t\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
        )
        .unwrap();
        let a = TemplateSpec::load(&spec_path).unwrap().hash().unwrap();
        assert_eq!(a, TemplateSpec::load(&spec_path).unwrap().hash().unwrap());
        std::fs::write(dir.path().join("f.txt"), "two").unwrap();
        let b = TemplateSpec::load(&spec_path).unwrap().hash().unwrap();
        assert_ne!(a, b, "a changed source file must change the hash");
        std::fs::write(
            &spec_path,
            "name = \"t\"\nsetup = [\"true\"]\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
        )
        .unwrap();
        assert_ne!(b, TemplateSpec::load(&spec_path).unwrap().hash().unwrap());
    }
}
