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

/// Which page of a directory listing to return. Listings are sorted by path, so a page resumes
/// after the last path of the one before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// Only entries whose path sorts after this one (the previous page's
    /// [`DirPage::next_after`]); `None`: from the start.
    pub after: Option<String>,
    /// At most this many entries (a host may return fewer: a page is also bounded in bytes).
    pub limit: u32,
    /// Only entries whose name matches this glob (`pandastack_guest_proto::listing::NamePattern`;
    /// checked by the caller); directories are still descended.
    pub pattern: Option<String>,
}

/// One page of a directory listing, sorted by path.
#[derive(Debug, Clone)]
pub struct DirPage {
    pub entries: Vec<FileInfo>,
    /// The path of the page's last entry when more follow: the next page's
    /// [`ListPage::after`]. `None` at the end.
    pub next_after: Option<String>,
}

/// What changed under a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    Create,
    Modify,
    Delete,
    /// `from` was renamed to `path`.
    Rename,
    /// Events were dropped: what is under `path` may have changed in ways not told.
    Overflow,
}

impl WatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::Create => "create",
            WatchKind::Modify => "modify",
            WatchKind::Delete => "delete",
            WatchKind::Rename => "rename",
            WatchKind::Overflow => "overflow",
        }
    }
}

/// One change under a watched directory (absolute guest paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: WatchKind,
    pub path: String,
    /// The old path of a rename.
    pub from: Option<String>,
    pub dir: bool,
}
