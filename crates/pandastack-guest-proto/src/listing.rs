//! Directory listings a page at a time: the guest agent answers `Files.List` with one page of
//! the sorted listing, and the host cuts an agent's whole answer (agents older than paging
//! ignore `after` and `limit`) to the same page with the same function.

use crate::v1;

/// Entries a listing page holds when the request names no limit.
pub const LIST_DEFAULT_LIMIT: u32 = 1000;
/// The most entries one listing page holds, whatever the request asks.
pub const LIST_MAX_LIMIT: u32 = 5000;
/// What one listing page's entries may weigh encoded: half of gRPC's 4 MiB message limit, so a
/// page of long names (a path can be 4 KiB, a symlink target as much again) always fits.
pub const LIST_PAGE_BYTES: usize = 2 << 20;

/// The page of `sorted` (entries sorted by path) a listing request asks for: at most `limit`
/// entries (0: the default; clamped) whose path sorts after `after` (empty: from the start),
/// fewer when more would pass [`LIST_PAGE_BYTES`]. `next_after` names the page's last path when
/// entries remain. A page always holds at least one entry when any remain (one entry is far
/// below the bound), and it never ends between entries of equal paths (names that are not UTF-8
/// can share a lossy path): a cursor that split them would skip the rest.
pub fn page(sorted: Vec<v1::FileInfo>, after: &str, limit: u32) -> v1::ListResponse {
    let limit = match limit {
        0 => LIST_DEFAULT_LIMIT,
        n => n.clamp(1, LIST_MAX_LIMIT),
    } as usize;
    let start = if after.is_empty() {
        0
    } else {
        sorted.partition_point(|e| e.path.as_str() <= after)
    };
    let mut end = start;
    let mut bytes = 0;
    while end < sorted.len() {
        let same_path = end > start && sorted[end].path == sorted[end - 1].path;
        let weight = entry_weight(&sorted[end]);
        let full = end - start >= limit || bytes + weight > LIST_PAGE_BYTES;
        if full && end > start && !same_path {
            break;
        }
        bytes += weight;
        end += 1;
    }
    let next_after = if end < sorted.len() && end > start {
        sorted[end - 1].path.clone()
    } else {
        String::new()
    };
    let entries = sorted.into_iter().skip(start).take(end - start).collect();
    v1::ListResponse {
        entries,
        next_after,
    }
}

/// What `entry` adds to an encoded `ListResponse`: its field key, length and bytes.
fn entry_weight(entry: &v1::FileInfo) -> usize {
    let len = prost::Message::encoded_len(entry);
    1 + prost::length_delimiter_len(len) + len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> v1::FileInfo {
        v1::FileInfo {
            name: path.rsplit('/').next().unwrap_or_default().into(),
            path: path.into(),
            ..Default::default()
        }
    }

    fn sorted(n: usize) -> Vec<v1::FileInfo> {
        (0..n).map(|i| entry(&format!("/d/f{i:05}"))).collect()
    }

    fn paths(r: &v1::ListResponse) -> Vec<&str> {
        r.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn pages_follow_the_path_order_from_after() {
        let r = page(sorted(5), "", 2);
        assert_eq!(paths(&r), ["/d/f00000", "/d/f00001"]);
        assert_eq!(r.next_after, "/d/f00001");
        let r = page(sorted(5), &r.next_after, 2);
        assert_eq!(paths(&r), ["/d/f00002", "/d/f00003"]);
        let r = page(sorted(5), &r.next_after, 2);
        assert_eq!(paths(&r), ["/d/f00004"]);
        assert_eq!(r.next_after, "", "the last page names no next one");
        // `after` need not be a listed path: entries after it in path order.
        let r = page(sorted(5), "/d/f00002x", 10);
        assert_eq!(paths(&r), ["/d/f00003", "/d/f00004"]);
        assert_eq!(r.next_after, "");
        // Past the end, and an empty directory: an empty last page.
        assert!(page(sorted(5), "/z", 10).entries.is_empty());
        let r = page(Vec::new(), "", 10);
        assert!(r.entries.is_empty() && r.next_after.is_empty());
    }

    #[test]
    fn limits_default_and_clamp() {
        let r = page(sorted(1200), "", 0);
        assert_eq!(r.entries.len(), LIST_DEFAULT_LIMIT as usize);
        assert_eq!(r.next_after, "/d/f00999");
        let r = page(sorted(6000), "", u32::MAX);
        assert_eq!(r.entries.len(), LIST_MAX_LIMIT as usize);
        let r = page(sorted(3), "", 1);
        assert_eq!(
            (paths(&r), r.next_after.as_str()),
            (vec!["/d/f00000"], "/d/f00000")
        );
        // Exactly `limit` left: no next page.
        let r = page(sorted(3), "", 3);
        assert_eq!((r.entries.len(), r.next_after.as_str()), (3, ""));
    }

    #[test]
    fn a_page_stays_under_its_byte_bound() {
        // 4 KiB paths: 5,000 of them would weigh 20 MiB.
        let long = "x".repeat(4000);
        let all: Vec<_> = (0..2000)
            .map(|i| entry(&format!("/d/{i:05}{long}")))
            .collect();
        let (mut after, mut seen) = (String::new(), Vec::new());
        loop {
            let r = page(all.clone(), &after, LIST_MAX_LIMIT);
            let bytes = prost::Message::encoded_len(&r);
            assert!(bytes <= LIST_PAGE_BYTES + 8192, "{bytes} bytes");
            assert!(!r.entries.is_empty());
            seen.extend(r.entries.iter().map(|e| e.path.clone()));
            if r.next_after.is_empty() {
                break;
            }
            assert!(r.entries.len() < 2000, "the bound cut the page");
            assert_eq!(Some(&r.next_after), seen.last());
            after = r.next_after;
        }
        let want: Vec<_> = all.into_iter().map(|e| e.path).collect();
        assert_eq!(seen, want, "every entry exactly once, in order");
    }

    #[test]
    fn a_page_never_splits_equal_paths() {
        let all = vec![entry("/d/a"), entry("/d/b"), entry("/d/b"), entry("/d/c")];
        let r = page(all.clone(), "", 2);
        assert_eq!(paths(&r), ["/d/a", "/d/b", "/d/b"]);
        assert_eq!(r.next_after, "/d/b");
        let r = page(all, &r.next_after, 2);
        assert_eq!((paths(&r), r.next_after.as_str()), (vec!["/d/c"], ""));
    }
}

/// A listing's name filter: a shell glob (`*`, `?`, `[abc]`, `[!abc]`) matched against an
/// entry's name (never its directory), so `*.py` finds Python files at every depth listed.
#[derive(Debug, Clone)]
pub struct NamePattern(glob::Pattern);

/// The longest name pattern accepted (a name is at most 255 bytes; a glob can be longer).
pub const MAX_NAME_PATTERN: usize = 1024;

impl NamePattern {
    /// `pattern` compiled; `Err` says why it is not a glob (an unclosed `[`, too long).
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.len() > MAX_NAME_PATTERN {
            return Err(format!("longer than {MAX_NAME_PATTERN} bytes"));
        }
        if pattern.contains('/') || pattern.contains('\0') {
            return Err("matches a name: no '/' or NUL".into());
        }
        glob::Pattern::new(pattern)
            .map(Self)
            .map_err(|e| e.msg.to_owned())
    }

    /// Whether the entry named `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        self.0.matches_with(
            name,
            glob::MatchOptions {
                case_sensitive: true,
                require_literal_separator: true,
                require_literal_leading_dot: false,
            },
        )
    }
}
