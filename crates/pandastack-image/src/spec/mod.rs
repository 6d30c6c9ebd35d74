//! The template spec: what goes into an image and the VM shape, validated once.
//!
//! A spec is a TOML file (see `templates/*.toml`). [`TemplateSpec::load`] parses it strictly
//! (unknown fields are errors) and validates every field; an error names the offending field. The
//! resulting value cannot be built any other way, so code that holds a `TemplateSpec` never
//! re-checks it. [`TemplateSpec::hash`] keys the image cache.

mod raw;
mod validate;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped whenever the builder produces a different image for the same spec, so the cache
/// never serves an image built by an older builder.
pub const BUILDER_VERSION: &str = "pandastack-image/2";

/// A validated template spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateSpec {
    name: String,
    description: String,
    debian: DebianSpec,
    pip: Vec<String>,
    npm: Vec<String>,
    files: Vec<FileSpec>,
    setup: Vec<String>,
    vm: VmShape,
    /// Where the spec came from; not part of the hash (the same spec anywhere is the same image).
    #[serde(skip)]
    origin: Origin,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Origin {
    path: PathBuf,
    text: String,
}

/// The `[debian]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DebianSpec {
    pub suite: String,
    pub variant: Variant,
    pub components: Vec<String>,
    pub packages: Vec<String>,
    /// Mirror URI overriding the host's apt sources.
    pub mirror: Option<String>,
}

/// mmdebstrap variants that give a tree a chroot step can run bash in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    Essential,
    Apt,
    Minbase,
    Buildd,
    Required,
    Important,
    Standard,
}

impl Variant {
    pub const ALL: [Variant; 7] = [
        Variant::Essential,
        Variant::Apt,
        Variant::Minbase,
        Variant::Buildd,
        Variant::Required,
        Variant::Important,
        Variant::Standard,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Essential => "essential",
            Variant::Apt => "apt",
            Variant::Minbase => "minbase",
            Variant::Buildd => "buildd",
            Variant::Required => "required",
            Variant::Important => "important",
            Variant::Standard => "standard",
        }
    }
}

/// One `[[files]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileSpec {
    /// Absolute, normalised path in the image.
    pub dest: String,
    pub content: FileContent,
    /// Permission bits (at most 0o7777); the file is owned by root.
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum FileContent {
    Inline(String),
    Source {
        /// As written in the spec (relative to the spec file); this is what the hash sees,
        /// together with the file's bytes.
        source: String,
        /// Resolved on the host.
        #[serde(skip)]
        path: PathBuf,
    },
}

/// The `[vm]` table: the shape a template is baked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmShape {
    pub vcpus: u32,
    pub memory_mb: u32,
    pub disk_mb: u32,
    /// How fast its sandboxes' VMs may use their disks (root and volumes together), in MiB/s
    /// and I/O operations per second; `None`: the server's default (`--vm-disk-mbps`,
    /// `--vm-disk-iops`). A create may ask for its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mbps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_iops: Option<u32>,
}

/// The most a template spec may ask for in `vm.disk_mbps` and `vm.disk_iops` (a server caps a
/// create's own at its `--vm-disk-mbps-max` and `--vm-disk-iops-max`).
pub const MAX_DISK_MBPS: u32 = 1 << 20;
pub const MAX_DISK_IOPS: u32 = 10_000_000;

/// The spec's content hash (SHA-256, hex).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpecHash(String);

impl SpecHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 16 hex digits, used in directory names.
    pub fn short(&self) -> &str {
        &self.0[..16]
    }
}

impl std::fmt::Display for SpecHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A spec that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("read spec {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Syntax errors, wrong types and unknown fields; the TOML error shows the line and key.
    #[error("parse spec {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("spec {path}: {field}: {problem}")]
    Invalid {
        path: PathBuf,
        field: String,
        problem: String,
    },
    #[error("read {path} (files[{index}].source of spec {spec})")]
    ReadSource {
        spec: PathBuf,
        index: usize,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpecError {
    /// The field a validation error is about (`vm.vcpus`, `files[2].dest`, …).
    pub fn field(&self) -> Option<&str> {
        match self {
            SpecError::Invalid { field, .. } => Some(field),
            SpecError::ReadSource { .. } => Some("files.source"),
            _ => None,
        }
    }
}

impl TemplateSpec {
    /// Reads, parses and validates a spec file; `source` paths are relative to its directory.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses and validates spec text as if it had been read from `spec_path` (which need not
    /// exist; `source` files are resolved against its directory and must exist).
    pub fn from_toml(text: &str, spec_path: &Path) -> Result<Self, SpecError> {
        let raw: raw::RawSpec = toml::from_str(text).map_err(|e| SpecError::Parse {
            path: spec_path.to_owned(),
            source: Box::new(e),
        })?;
        let mut spec =
            validate::validate(raw, spec_path).map_err(|(field, problem)| SpecError::Invalid {
                path: spec_path.to_owned(),
                field,
                problem,
            })?;
        spec.origin = Origin {
            path: spec_path.to_owned(),
            text: text.to_owned(),
        };
        Ok(spec)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn description(&self) -> &str {
        &self.description
    }
    pub fn debian(&self) -> &DebianSpec {
        &self.debian
    }
    /// Python packages for `pip install` (empty: no pip step).
    pub fn pip_packages(&self) -> &[String] {
        &self.pip
    }
    /// Node packages for `npm install -g` (empty: no npm step).
    pub fn npm_packages(&self) -> &[String] {
        &self.npm
    }
    pub fn files(&self) -> &[FileSpec] {
        &self.files
    }
    /// Shell commands run in the image with `bash -euo pipefail`, in order.
    pub fn setup(&self) -> &[String] {
        &self.setup
    }
    /// Whether the spec has steps that run code in the image (pip, npm, setup) or write files.
    pub fn has_guest_steps(&self) -> bool {
        !(self.pip.is_empty()
            && self.npm.is_empty()
            && self.files.is_empty()
            && self.setup.is_empty())
    }

    /// This spec with only its Debian part: what a builder VM starts from before it runs the
    /// steps itself (see `pandastack-api`'s template builds).
    pub fn without_guest_steps(&self) -> TemplateSpec {
        TemplateSpec {
            pip: Vec::new(),
            npm: Vec::new(),
            files: Vec::new(),
            setup: Vec::new(),
            ..self.clone()
        }
    }

    pub fn vm(&self) -> VmShape {
        self.vm
    }
    /// The spec file this came from.
    pub fn path(&self) -> &Path {
        &self.origin.path
    }
    /// The spec text as written (copied next to the built image).
    pub fn text(&self) -> &str {
        &self.origin.text
    }

    /// The content hash of everything that decides the image: the builder version, the
    /// validated spec in canonical form (defaults filled in, so spelling a default out does not
    /// change it) and the bytes of every `source` file.
    pub fn hash(&self) -> Result<SpecHash, SpecError> {
        let mut h = Sha256::new();
        h.update(BUILDER_VERSION.as_bytes());
        h.update([0]);
        // Serialising plain strings, numbers and enums to JSON cannot fail.
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        h.update((canonical.len() as u64).to_le_bytes());
        h.update(&canonical);
        for (index, f) in self.files.iter().enumerate() {
            if let FileContent::Source { path, .. } = &f.content {
                let read_err = |source| SpecError::ReadSource {
                    spec: self.origin.path.clone(),
                    index,
                    path: path.clone(),
                    source,
                };
                let mut file = std::fs::File::open(path).map_err(read_err)?;
                let len = file.metadata().map_err(read_err)?.len();
                h.update((index as u64).to_le_bytes());
                h.update(len.to_le_bytes());
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = file.read(&mut buf).map_err(read_err)?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
        }
        Ok(SpecHash(hex::encode(h.finalize())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
    }

    #[test]
    fn shipped_specs_parse() {
        let minimal = TemplateSpec::load(&templates_dir().join("minimal.toml")).unwrap();
        assert_eq!(minimal.name(), "minimal");
        assert!(minimal.debian().packages.iter().any(|p| p == "python3"));
        assert!(minimal.pip_packages().is_empty());
        assert_eq!(minimal.vm().vcpus, 1);
        assert_eq!(minimal.vm().memory_mb, 512);

        let base = TemplateSpec::load(&templates_dir().join("base.toml")).unwrap();
        assert_eq!(base.name(), "base");
        for p in [
            "python3-pip",
            "python3-venv",
            "nodejs",
            "npm",
            "golang",
            "git",
        ] {
            assert!(base.debian().packages.iter().any(|x| x == p), "{p}");
        }
        assert_eq!(
            base.vm(),
            VmShape {
                vcpus: 2,
                memory_mb: 2048,
                disk_mb: 8192,
                disk_mbps: None,
                disk_iops: None,
            }
        );
    }

    #[test]
    fn every_shipped_spec_parses_and_is_named_after_its_file() {
        let mut n = 0;
        for e in std::fs::read_dir(templates_dir()).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "toml") {
                let spec =
                    TemplateSpec::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert_eq!(Some(spec.name()), p.file_stem().and_then(|s| s.to_str()));
                n += 1;
            }
        }
        assert!(n >= 6);
        let ci = TemplateSpec::load(&templates_dir().join("code-interpreter.toml")).unwrap();
        for p in [
            "python3-numpy",
            "python3-pandas",
            "python3-matplotlib",
            "nodejs",
        ] {
            assert!(ci.debian().packages.iter().any(|x| x == p), "{p}");
        }
    }

    fn hash_of(dir: &Path, text: &str) -> SpecHash {
        let p = dir.join("t.toml");
        std::fs::write(&p, text).unwrap();
        TemplateSpec::load(&p).unwrap().hash().unwrap()
    }

    #[test]
    fn hash_is_stable() {
        let dir = tempfile::tempdir().unwrap();
        let text = "name = \"t\"\nsetup = [\"true\"]\n";
        let a = hash_of(dir.path(), text);
        assert_eq!(a, hash_of(dir.path(), text));
        assert_eq!(a.as_str().len(), 64);
        assert_eq!(a.short(), &a.as_str()[..16]);
        // Formatting, comments and spelled-out defaults do not change what is built.
        let same = "# comment\nname    = \"t\"\nsetup = [ \"true\" ]\n[debian]\nsuite = \"bookworm\"\nvariant = \"minbase\"\n[vm]\ndisk_mb = 2048\n";
        assert_eq!(a, hash_of(dir.path(), same));
        // The same spec in another directory is the same image.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(a, hash_of(other.path(), text));
    }

    #[test]
    fn hash_changes_with_every_input() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "one").unwrap();
        let base = "name = \"t\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n";
        let h0 = hash_of(dir.path(), base);
        let variants = [
            "name = \"u\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\ndescription = \"d\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\nsetup = [\"true\"]\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\n[debian]\npackages = [\"jq\"]\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\n[debian]\nsuite = \"trixie\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\n[debian]\nmirror = \"http://m.invalid/debian\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
            "name = \"t\"\n[[files]]\ndest = \"/g\"\nsource = \"f.txt\"\n",
            "name = \"t\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\nmode = \"0600\"\n",
            "name = \"t\"\n[[files]]\ndest = \"/f\"\ncontent = \"one\"\n",
            "name = \"t\"\n[vm]\ndisk_mb = 4096\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
        ];
        let mut seen = vec![h0.clone()];
        for v in variants {
            let h = hash_of(dir.path(), v);
            assert!(!seen.contains(&h), "hash did not change for {v:?}");
            seen.push(h);
        }
        // A changed source file changes the hash; the same spec text otherwise.
        std::fs::write(dir.path().join("f.txt"), "two").unwrap();
        let h1 = hash_of(dir.path(), base);
        assert_ne!(h0, h1, "a changed source file must change the hash");
        std::fs::write(dir.path().join("f.txt"), "one").unwrap();
        assert_eq!(h0, hash_of(dir.path(), base));
    }

    #[test]
    fn a_source_file_removed_after_loading_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "one").unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "name = \"t\"\n[[files]]\ndest = \"/f\"\nsource = \"f.txt\"\n",
        )
        .unwrap();
        let spec = TemplateSpec::load(&p).unwrap();
        std::fs::remove_file(dir.path().join("f.txt")).unwrap();
        let err = spec.hash().unwrap_err();
        assert!(
            matches!(err, SpecError::ReadSource { index: 0, .. }),
            "{err:?}"
        );
    }
}
