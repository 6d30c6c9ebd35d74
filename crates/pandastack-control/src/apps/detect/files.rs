//! The repository's files: at most [`MAX_READ`] bytes of a few files near the top, never
//! through a symlink; directories are listed at most [`MAX_ENTRIES`] entries each.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::node::PackageJson;
use super::procfile::web_line;
use super::python::Python;
use super::DetectError;

/// The most of any one file that is read.
pub(super) const MAX_READ: u64 = 1 << 20;

/// The most entries of one directory that are looked at.
pub(super) const MAX_ENTRIES: usize = 256;

/// What a directory entry is (symlinks and other kinds are not listed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    File,
    Dir,
}

/// What was read of the repository.
pub(super) struct Facts {
    root: PathBuf,
    pub(super) package: Option<PackageJson>,
    pub(super) python: Option<Python>,
    /// None: no Procfile; Some(None): one without a `web:` line.
    pub(super) procfile: Option<Option<String>>,
    /// Decisions made while reading.
    pub(super) notes: Vec<String>,
}

/// The text of a file, at most [`MAX_READ`] bytes of it, invalid UTF-8 replaced.
pub(super) struct Text {
    pub(super) text: String,
    pub(super) whole: bool,
}

impl Facts {
    pub(super) fn load(root: &Path) -> Result<Facts, DetectError> {
        if !fs::metadata(root).is_ok_and(|m| m.is_dir()) {
            return Err(DetectError::NotADirectory(root.to_path_buf()));
        }
        let mut f = Facts {
            root: root.to_path_buf(),
            package: None,
            python: None,
            procfile: None,
            notes: Vec::new(),
        };
        if let Some(t) = f.read("package.json") {
            if !t.whole {
                return Err(DetectError::PackageJsonTooLarge);
            }
            f.package = Some(PackageJson::parse(&t.text)?);
        }
        if f.read("requirements.txt").is_some_and(|t| !t.whole) {
            f.notes
                .push("requirements.txt: larger than 1 MiB; read the first 1 MiB".into());
        }
        f.python = Python::load(&f);
        f.procfile = f.read("Procfile").map(|t| web_line(&t.text));
        Ok(f)
    }

    pub(super) fn pkg(&self) -> Option<&PackageJson> {
        self.package.as_ref()
    }

    pub(super) fn requires(&self, name: &str) -> bool {
        self.python.as_ref().is_some_and(|p| p.names.contains(name))
    }

    pub(super) fn has(&self, name: &str) -> bool {
        regular_file(&self.root, name).is_some()
    }

    /// Whether `name` is a directory reached through directories only.
    pub(super) fn is_dir(&self, name: &str) -> bool {
        name.is_empty() || within(&self.root, name, false).is_some()
    }

    /// The regular files and directories in `dir` ("" for the top), sorted by name: at most
    /// [`MAX_ENTRIES`] entries of it are looked at; hidden ones are left out.
    pub(super) fn list(&self, dir: &str) -> Vec<(String, Kind)> {
        let path = if dir.is_empty() {
            Some(self.root.clone())
        } else {
            within(&self.root, dir, false)
        };
        let Some(entries) = path.and_then(|p| fs::read_dir(p).ok()) else {
            return Vec::new();
        };
        let mut out: Vec<(String, Kind)> = entries
            .take(MAX_ENTRIES)
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                let kind = e.file_type().ok()?;
                let kind = if kind.is_file() {
                    Kind::File
                } else if kind.is_dir() {
                    Kind::Dir
                } else {
                    return None;
                };
                (!name.starts_with('.')).then_some((name, kind))
            })
            .collect();
        out.sort();
        out
    }

    pub(super) fn read(&self, name: &str) -> Option<Text> {
        let path = regular_file(&self.root, name)?;
        let mut bytes = Vec::new();
        let file = fs::File::open(path).ok()?;
        file.take(MAX_READ + 1).read_to_end(&mut bytes).ok()?;
        let whole = bytes.len() as u64 <= MAX_READ;
        bytes.truncate(MAX_READ as usize);
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text).to_string();
        Some(Text { text, whole })
    }
}

/// `root/name` if it is a regular file reached through directories only (no symlinks).
fn regular_file(root: &Path, name: &str) -> Option<PathBuf> {
    within(root, name, true)
}

/// `root/name` if it is a directory reached through directories only.
pub(super) fn within_dir(root: &Path, name: &str) -> Option<PathBuf> {
    within(root, name, false)
}

/// `root/name` if it is a regular file (`file`) or a directory reached through directories
/// only (no symlinks, no `..`).
fn within(root: &Path, name: &str, file: bool) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    let mut parts = name.split('/').peekable();
    while let Some(part) = parts.next() {
        if part.is_empty() || part == "." || part == ".." {
            return None;
        }
        path.push(part);
        let meta = fs::symlink_metadata(&path).ok()?;
        let last = parts.peek().is_none();
        let ok = if last && file {
            meta.is_file()
        } else {
            meta.is_dir()
        };
        if !ok {
            return None;
        }
    }
    Some(path)
}
