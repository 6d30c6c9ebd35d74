//! The Debian mirror, read from the host's apt configuration (never a built-in host name).

use std::path::Path;

/// URIs of deb822 stanzas (`*.sources`) whose Suites include `suite`.
pub fn parse_deb822(text: &str, suite: &str) -> Vec<String> {
    let mut found = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
            })
        };
        let types = field("Types").unwrap_or_default();
        let suites = field("Suites").unwrap_or_default();
        if !types.split_whitespace().any(|t| t == "deb")
            || !suites.split_whitespace().any(|s| s == suite)
        {
            continue;
        }
        if let Some(uris) = field("URIs") {
            found.extend(uris.split_whitespace().map(str::to_owned));
        }
    }
    found
}

/// URIs of one-line `deb` entries (`sources.list`) for `suite`.
pub fn parse_one_line(text: &str, suite: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split('#').next()?.split_whitespace().collect();
            if words.first() != Some(&"deb") {
                return None;
            }
            // Skip an options block like "[arch=amd64 signed-by=…]", which may span words.
            let mut i = 1;
            if words.get(1).is_some_and(|w| w.starts_with('[')) {
                while i < words.len() && !words[i].ends_with(']') {
                    i += 1;
                }
                i += 1;
            }
            let (uri, s) = (words.get(i)?, words.get(i + 1)?);
            (*s == suite).then(|| uri.to_string())
        })
        .collect()
}

/// The mirror URI for `suite`: `PANDASTACK_DEBIAN_MIRROR`, else the host's apt sources.
pub fn debian_mirror(suite: &str) -> Option<String> {
    if let Ok(m) = std::env::var("PANDASTACK_DEBIAN_MIRROR") {
        if !m.is_empty() {
            return Some(m);
        }
    }
    let mut uris = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            match p.extension().and_then(|e| e.to_str()) {
                Some("sources") => uris.extend(parse_deb822(&text, suite)),
                Some("list") => uris.extend(parse_one_line(&text, suite)),
                _ => {}
            }
        }
    }
    let main = Path::new("/etc/apt/sources.list");
    if let Ok(text) = std::fs::read_to_string(main) {
        uris.extend(parse_one_line(&text, suite));
    }
    uris.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822() {
        let text = "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            parse_deb822(text, "bookworm"),
            ["http://mirror.invalid/debian"]
        );
        assert_eq!(
            parse_deb822(text, "bookworm-security"),
            ["http://mirror.invalid/debian-security"]
        );
        assert!(parse_deb822(text, "trixie").is_empty());
    }

    #[test]
    fn one_line() {
        let text = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main\ndeb-src http://m.invalid/debian bookworm main\ndeb http://m.invalid/debian bookworm-updates main\n";
        assert_eq!(
            parse_one_line(text, "bookworm"),
            ["http://m.invalid/debian"]
        );
        assert_eq!(
            parse_one_line(text, "bookworm-updates"),
            ["http://m.invalid/debian"]
        );
    }
}
