//! One way to report an error (#37 item 4), checked from the source: a log line that prints
//! an error's `Display` (or `Debug`) shows only its outer message ("vm"), and the cause, the
//! useful part, is lost. Shipping code logs the error itself,
//!
//! ```text
//! tracing::warn!(error = &e as &dyn std::error::Error, "...");
//! ```
//!
//! which tracing-subscriber's fmt layer prints as `error=vm error.sources=[start the VM, ...]`;
//! where a `String` is needed (a build log, a message returned to a user) it uses the one chain
//! formatter, `pandastack_host::error_chain`. An error that only exists as such text (a
//! `Result<_, String>`) is logged as a string value, `error = message.as_str()`.
//!
//! This test scans `crates/*/src` as text (test modules and test-only files skipped) and fails
//! on a tracing macro (`trace!` .. `error!`, `event!`) with
//! - a field `error = %…`, `error = ?…`, `err = %…`, `err = ?…` (or `… .to_string()`),
//! - a shorthand field `%e`, `?e`, `%err`, `%error`, …,
//! - an error variable (`e`, `err`, `error`, `…_err`, `…_error`) formatted into the message:
//!   `"…{e}"`, `"…{err:?}"`, `"…{}", e`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const MACROS: &[&str] = &["trace", "debug", "info", "warn", "error", "event"];
const FIX: &str = "log the error itself, `error = &e as &dyn std::error::Error` (the fmt layer \
                   prints its sources); an error that is already text (a String made with \
                   `pandastack_host::error_chain`): `error = text.as_str()`";

/// A variable name that holds an error, by convention.
fn is_error_name(name: &str) -> bool {
    matches!(name, "e" | "err" | "error") || name.ends_with("_err") || name.ends_with("_error")
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `src` with comments blanked and the insides of string and char literals blanked (quotes
/// kept), byte for byte: offsets and lines stay those of `src`.
fn mask(src: &str) -> Vec<u8> {
    let s = src.as_bytes();
    let mut out = s.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let prev_ident = i > 0 && is_ident_byte(s[i - 1]);
        match s[i] {
            b'/' if s.get(i + 1) == Some(&b'/') => {
                let end = s[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(s.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if s.get(i + 1) == Some(&b'*') => {
                let (mut j, mut depth) = (i + 2, 1);
                while j < s.len() && depth > 0 {
                    if s[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if s[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            // Raw strings: r"…", r#"…"#, br#"…"#.
            b'r' if (!prev_ident
                || (i > 0 && s[i - 1] == b'b' && (i < 2 || !is_ident_byte(s[i - 2]))))
                && matches!(s.get(i + 1), Some(b'"' | b'#')) =>
            {
                let hashes = s[i + 1..].iter().take_while(|&&b| b == b'#').count();
                if s.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let body = i + 2 + hashes;
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let end = s[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(s.len(), |n| body + n);
                blank(&mut out, body, end);
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < s.len() && s[j] != b'"' {
                    j += if s[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j.min(s.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), or a lifetime or label ('a), left alone.
                if s.get(i + 1) == Some(&b'\\') {
                    let mut j = i + 2;
                    while j < s.len() && s[j] != b'\'' {
                        j += 1;
                    }
                    blank(&mut out, i + 1, j);
                    i = j + 1;
                } else {
                    let len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if s.get(i + 1 + len) == Some(&b'\'') {
                        blank(&mut out, i + 1, i + 1 + len);
                        i += len + 2;
                    } else {
                        i += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The offset just past the bracket that closes the one at `open` (in masked text).
fn matching(m: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, &b) in m.iter().enumerate().skip(open) {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    m.len()
}

/// Byte ranges of items under `#[cfg(test)]`, and the names of out-of-line `mod NAME;` among
/// them.
fn test_items(m: &[u8]) -> (Vec<(usize, usize)>, Vec<String>) {
    let text = String::from_utf8_lossy(m);
    let (mut ranges, mut mods) = (Vec::new(), Vec::new());
    for (start, _) in text.match_indices("#[cfg(test)]") {
        let mut i = start + "#[cfg(test)]".len();
        // Further attributes, then the item up to its `;` or its closing brace.
        loop {
            while i < m.len() && m[i].is_ascii_whitespace() {
                i += 1;
            }
            if m[i..].starts_with(b"#[") {
                i = matching(m, i + 1);
            } else {
                break;
            }
        }
        let item = i;
        let mut j = i;
        while j < m.len() && m[j] != b';' && m[j] != b'{' {
            if m[j] == b'(' || m[j] == b'[' {
                j = matching(m, j);
            } else {
                j += 1;
            }
        }
        let end = if j < m.len() && m[j] == b'{' {
            matching(m, j)
        } else {
            let words: Vec<&str> = text[item..j].split_whitespace().collect();
            if let ["mod", name] | ["pub", "mod", name] | ["pub(crate)", "mod", name] =
                words.as_slice()
            {
                mods.push(name.to_string());
            }
            j + 1
        };
        ranges.push((start, end));
    }
    (ranges, mods)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The directory that holds `file`'s child modules.
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().expect("a parent");
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
        None => parent.to_path_buf(),
    }
}

/// Top-level comma-separated pieces of `m[from..to]`, as ranges.
fn args(m: &[u8], from: usize, to: usize) -> Vec<(usize, usize)> {
    let (mut out, mut start, mut i) = (Vec::new(), from, from);
    while i < to {
        match m[i] {
            b'(' | b'[' | b'{' => {
                i = matching(m, i);
                continue;
            }
            b',' => {
                out.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push((start, to));
    out.retain(|(a, b)| !m[*a..*b].iter().all(u8::is_ascii_whitespace));
    out
}

/// What is wrong with tracing macro arguments `src[from..to]`, if anything.
fn problems(src: &str, m: &[u8], from: usize, to: usize) -> Vec<String> {
    let mut found = Vec::new();
    let pieces = args(m, from, to);
    let mut message_seen = false;
    for &(a, b) in &pieces {
        let masked = String::from_utf8_lossy(&m[a..b]).trim().to_string();
        let original = src[a..b].trim();
        if masked.starts_with('"') {
            // The message: named error arguments formatted into it.
            message_seen = true;
            let mut rest = original;
            while let Some(open) = rest.find('{') {
                rest = &rest[open + 1..];
                if rest.starts_with('{') {
                    rest = &rest[1..];
                    continue;
                }
                let inner = rest.split('}').next().unwrap_or("");
                let name = inner.split(':').next().unwrap_or("").trim();
                if is_error_name(name) {
                    found.push(format!("`{{{inner}}}` in the message"));
                }
            }
            continue;
        }
        let compact: String = masked.split_whitespace().collect();
        if let Some(name) = compact.strip_prefix(['%', '?']) {
            if is_error_name(name) {
                found.push(format!("field `{compact}`"));
            }
            continue;
        }
        if let Some((field, value)) = masked.split_once('=') {
            let (field, value) = (field.trim(), value.trim());
            if value.starts_with('=') || field.ends_with(['!', '<', '>']) {
                continue; // a comparison
            }
            let short = value.starts_with(['%', '?']) || value.ends_with(".to_string()");
            if matches!(field, "error" | "err") && short {
                let shown: String = original.split_whitespace().collect::<Vec<_>>().join(" ");
                found.push(format!("field `{shown}`"));
            }
            continue;
        }
        // A positional argument of the message.
        let plain = compact.trim_start_matches('&');
        if message_seen && is_error_name(plain) {
            found.push(format!("`{compact}` formatted into the message"));
        }
    }
    found
}

/// Every short-form error log in shipping source under `root/crates/*/src`, as
/// "file:line: what".
fn short_forms(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        rust_files(
            &entry.expect("crates/ entry").path().join("src"),
            &mut files,
        );
    }
    files.sort();
    let texts: Vec<(PathBuf, String, Vec<u8>)> = files
        .into_iter()
        .map(|f| {
            let src = std::fs::read_to_string(&f).expect("a readable source file");
            let m = mask(&src);
            (f, src, m)
        })
        .collect();
    // Files that are `#[cfg(test)] mod NAME;`: NAME.rs and everything under NAME/.
    let mut test_only = BTreeSet::new();
    for (f, _, m) in &texts {
        for name in test_items(m).1 {
            test_only.insert(module_dir(f).join(&name));
            test_only.insert(module_dir(f).join(format!("{name}.rs")));
        }
    }
    let mut out = Vec::new();
    for (f, src, m) in &texts {
        if test_only.iter().any(|t| f.starts_with(t)) {
            continue;
        }
        let skip = test_items(m).0;
        for name in MACROS {
            let pat = format!("{name}!(");
            let text = String::from_utf8_lossy(m);
            for (at, _) in text.match_indices(&pat) {
                if at > 0 && is_ident_byte(m[at - 1]) {
                    continue;
                }
                if skip.iter().any(|&(a, b)| (a..b).contains(&at)) {
                    continue;
                }
                let open = at + name.len() + 1;
                let close = matching(m, open) - 1;
                for what in problems(src, m, open + 1, close) {
                    let line = 1 + m[..at].iter().filter(|&&b| b == b'\n').count();
                    let rel = f.strip_prefix(root).unwrap_or(f);
                    out.push((rel.to_path_buf(), line, format!("{what} in {name}!")));
                }
            }
        }
    }
    out.sort();
    out.into_iter()
        .map(|(f, line, what)| format!("{}:{line}: {what}", f.display()))
        .collect()
}

#[test]
fn errors_are_logged_with_their_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().expect("the workspace root");
    let found = short_forms(&root);
    assert!(
        found.is_empty(),
        "{} error log(s) print only the outer message; {FIX}:\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

/// The scanner itself, on known text.
#[test]
fn the_scanner_finds_short_forms_and_only_them() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("crates/x/src");
    std::fs::create_dir_all(src.join("helpers")).expect("mkdir");
    std::fs::write(
        src.join("lib.rs"),
        r##"
fn a() {
    tracing::warn!(error = %e, "one");
    warn!(
        sandbox = %id,
        err = ?err,
        "two"
    );
    tracing::debug!(%error, "three");
    tracing::info!("four: {e}");
    tracing::info!("five: {}", e);
    tracing::error!(error = %pandastack_host::error_chain(&e), "six");
    tracing::warn!(error = &e as &dyn std::error::Error, "fine: {{e}} {id}");
    tracing::warn!(reason = %why, ok = a == b, "fine");
    let s = "tracing::warn!(error = %e)"; // warn!(error = %e) in a comment
    let c = '{';
    my_error!(error = %e);
}
#[cfg(test)]
mod tests {
    fn t() { tracing::warn!(error = %e, "in a test"); let c = '}'; }
}
#[cfg(test)]
mod helpers;
"##,
    )
    .expect("write lib.rs");
    std::fs::write(src.join("helpers.rs"), "fn h() { warn!(error = %e); }\n").expect("write");
    let found = short_forms(dir.path());
    let want = [
        "crates/x/src/lib.rs:3: field `error = %e` in warn!",
        "crates/x/src/lib.rs:4: field `err = ?err` in warn!",
        "crates/x/src/lib.rs:9: field `%error` in debug!",
        "crates/x/src/lib.rs:10: `{e}` in the message in info!",
        "crates/x/src/lib.rs:11: `e` formatted into the message in info!",
        "crates/x/src/lib.rs:12: field `error = %pandastack_host::error_chain(&e)` in error!",
    ];
    assert_eq!(found, want);
}
