//! Repacking a lockfile's tarballs into one, laid out as an install leaves `node_modules`.
//!
//! An npm tarball holds the package under one top directory (`package/`, whatever its name);
//! that directory becomes the package's lockfile path. Like npm's own unpacking, only regular
//! files and directories are taken (links and devices are not), a `.gitignore` becomes
//! `.npmignore` (unless the package has one there already), paths that would leave the
//! package (`..`, absolute) are dropped, and modes become 0644/0755 (0755 for a file with an
//! executable bit). The host only reads and writes bytes: nothing lands on its file system but
//! the output tarball, which the VM unpacks.
//!
//! Every directory gets an entry of its own, all with one old time (npm's
//! 1985-10-26T08:15:00Z), and npm's hidden lockfile comes last with the time of packing: tar
//! restores the directories' times, so the hidden lockfile is newer than every package
//! directory and `npm rebuild` trusts it instead of reading each package.json.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Component, Path};
use std::time::SystemTime;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use tar::{EntryType, Header};

use super::{FastPathError, Lock};

/// The time npm gives the files it packs; every file and directory gets it.
const NPM_EPOCH: u64 = 499_162_500;
/// Most bytes the packages may unpack to.
const MAX_UNPACKED_BYTES: u64 = 8 << 30;
/// Most files and directories in all.
const MAX_ENTRIES: u64 = 2_000_000;

/// What a pack wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PackStats {
    /// Regular files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Entries not taken: links, devices, paths out of their package.
    pub skipped: u64,
}

/// Writes the packages of `lock` (their tarballs in `cache`) and the hidden lockfile as one
/// gzip tarball at `out`, paths relative to the project directory.
pub fn pack(lock: &Lock, cache: &Path, out: &Path) -> Result<PackStats, FastPathError> {
    let file =
        File::create(out).map_err(|e| FastPathError::io(format!("create {}", out.display()), e))?;
    let gz = GzEncoder::new(BufWriter::new(file), Compression::fast());
    let mut w = Writer {
        tar: tar::Builder::new(gz),
        dirs: HashSet::new(),
        stats: PackStats::default(),
        entries: 0,
        out,
    };
    w.dir("node_modules")?;
    for p in &lock.packages {
        w.dir(&p.path)?;
        let path = cache.join(p.cache_name());
        let f = File::open(&path)
            .map_err(|e| FastPathError::io(format!("open {}", path.display()), e))?;
        let mut archive = tar::Archive::new(GzDecoder::new(BufReader::new(f)));
        let bad = |e| FastPathError::io(format!("read the tarball of {}", p.path), e);
        let mut npmignores = HashSet::new();
        for entry in archive.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let kind = entry.header().entry_type();
            let rel = inside_package(&entry.path().map_err(bad)?);
            let (Some(rel), true) = (rel, kind.is_file() || kind.is_contiguous() || kind.is_dir())
            else {
                // Links, devices and paths out of the package; a pax global header is no file.
                if !matches!(kind, EntryType::XGlobalHeader) && !entry.path_bytes().is_empty() {
                    w.stats.skipped += 1;
                }
                continue;
            };
            if rel.is_empty() {
                continue;
            }
            let Some(rel) = npm_name(rel, kind, &mut npmignores) else {
                continue;
            };
            let dest = format!("{}/{rel}", p.path);
            if kind.is_dir() {
                w.dir(&dest)?;
                continue;
            }
            let executable = entry.header().mode().unwrap_or(0o644) & 0o111 != 0;
            let size = entry.size();
            w.parents(&dest)?;
            w.file(&dest, size, executable, &mut entry)?;
        }
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(NPM_EPOCH);
    let hidden = &lock.hidden_lockfile;
    w.append(
        "node_modules/.package-lock.json",
        EntryType::Regular,
        0o644,
        hidden.len() as u64,
        now,
        &mut hidden.as_slice(),
    )?;
    let stats = w.stats;
    let gz = w
        .tar
        .into_inner()
        .map_err(|e| FastPathError::io(format!("write {}", out.display()), e))?;
    gz.finish()
        .and_then(|mut b| b.flush())
        .map_err(|e| FastPathError::io(format!("write {}", out.display()), e))?;
    Ok(stats)
}

/// A tarball entry's path without the package's top directory, `/`-joined; `None` when it
/// leaves the package (`..`, absolute) or is not UTF-8.
fn inside_package(path: &Path) -> Option<String> {
    let mut parts = Vec::new();
    let mut top = true;
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(_) if top => top = false,
            Component::Normal(s) => parts.push(s.to_str()?),
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

/// The name npm gives a file when it unpacks it: a `.gitignore` becomes `.npmignore` (npm
/// publishes `.npmignore` files so), unless the package already had one there, when it is
/// dropped (`None`).
fn npm_name(rel: String, kind: EntryType, npmignores: &mut HashSet<String>) -> Option<String> {
    if kind.is_dir() {
        return Some(rel);
    }
    let (dir, base) = rel.rsplit_once('/').unwrap_or(("", &rel));
    match base {
        ".npmignore" => {
            npmignores.insert(rel.clone());
            Some(rel)
        }
        ".gitignore" => {
            let renamed = if dir.is_empty() {
                ".npmignore".to_owned()
            } else {
                format!("{dir}/.npmignore")
            };
            (!npmignores.contains(&renamed)).then_some(renamed)
        }
        _ => Some(rel),
    }
}

struct Writer<'a> {
    tar: tar::Builder<GzEncoder<BufWriter<File>>>,
    dirs: HashSet<String>,
    stats: PackStats,
    entries: u64,
    out: &'a Path,
}

impl Writer<'_> {
    /// Entries for the directories above `path` not written yet.
    fn parents(&mut self, path: &str) -> Result<(), FastPathError> {
        match path.rsplit_once('/') {
            Some((up, _)) => self.dir(up),
            None => Ok(()),
        }
    }

    /// An entry for directory `path`, and for those above it, unless written already.
    fn dir(&mut self, path: &str) -> Result<(), FastPathError> {
        if !self.dirs.contains(path) {
            self.parents(path)?;
            self.dirs.insert(path.to_owned());
            self.append(
                &format!("{path}/"),
                EntryType::Directory,
                0o755,
                0,
                NPM_EPOCH,
                &mut std::io::empty(),
            )?;
        }
        Ok(())
    }

    fn file(
        &mut self,
        path: &str,
        size: u64,
        executable: bool,
        data: &mut dyn Read,
    ) -> Result<(), FastPathError> {
        self.stats.files += 1;
        self.stats.bytes += size;
        if self.stats.bytes > MAX_UNPACKED_BYTES {
            return Err(FastPathError::TooLarge {
                limit: "8 GiB".into(),
            });
        }
        let mode = if executable { 0o755 } else { 0o644 };
        self.append(path, EntryType::Regular, mode, size, NPM_EPOCH, data)
    }

    fn append(
        &mut self,
        path: &str,
        kind: EntryType,
        mode: u32,
        size: u64,
        mtime: u64,
        data: &mut dyn Read,
    ) -> Result<(), FastPathError> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(FastPathError::TooLarge {
                limit: format!("{MAX_ENTRIES} files"),
            });
        }
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(mtime);
        h.set_uid(0);
        h.set_gid(0);
        let out = self.out;
        self.tar
            .append_data(&mut h, path, data)
            .map_err(|e| FastPathError::io(format!("write {}", out.display()), e))
    }
}
