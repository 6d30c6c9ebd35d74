//! Files inside a sandbox.

/// What kind of thing a guest path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
        }
    }
}

/// Metadata of a guest path.
#[derive(Debug, Clone)]
pub struct FileInfo {
    pub name: String,
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits (mode & 0o7777).
    pub mode: u32,
    pub mtime_ms: i64,
    /// Where a symlink points.
    pub symlink_target: Option<String>,
}
