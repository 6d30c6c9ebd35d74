//! Which Debian archive to bootstrap from: read from the host's apt configuration at run time
//! (deb822 `*.sources` and one-line `*.list` / `sources.list` files), never a built-in host name.
//! `PANDASTACK_DEBIAN_MIRROR` or the spec's `debian.mirror` override the main archive.

use std::path::Path;

/// The environment variable that overrides the mirror of the main archive.
pub const MIRROR_ENV: &str = "PANDASTACK_DEBIAN_MIRROR";

/// One apt source entry (a deb822 stanza or a one-line `deb` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub uris: Vec<String>,
    pub suites: Vec<String>,
    pub components: Vec<String>,
}

/// The `deb` entries of a deb822 `.sources` file (disabled stanzas and `deb-src`-only stanzas
/// skipped).
pub fn parse_deb822(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    // Fields of the current stanza; continuation lines (leading space) extend the last field.
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut flush = |fields: &mut Vec<(String, String)>| {
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let words = |name: &str| -> Vec<String> {
            get(name)
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        let enabled = get("Enabled").is_none_or(|v| !v.trim().eq_ignore_ascii_case("no"));
        if enabled && words("Types").iter().any(|t| t == "deb") {
            let entry = AptSource {
                uris: words("URIs"),
                suites: words("Suites"),
                components: words("Components"),
            };
            if !entry.uris.is_empty() && !entry.suites.is_empty() {
                out.push(entry);
            }
        }
        fields.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut fields);
        } else if line.starts_with('#') {
            continue;
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                v.push('\n');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    flush(&mut fields);
    out
}

/// The `deb` lines of a one-line-style `sources.list` file.
pub fn parse_one_line(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace().peekable();
        if words.next() != Some("deb") {
            continue;
        }
        // An options block "[arch=amd64 signed-by=/k.gpg]" may span several words.
        if words.peek().is_some_and(|w| w.starts_with('[')) {
            for w in words.by_ref() {
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            uris: vec![uri.to_owned()],
            suites: vec![suite.to_owned()],
            components: words.map(str::to_owned).collect(),
        });
    }
    out
}

/// Every `deb` entry configured under `etc_apt` (normally `/etc/apt`): `sources.list.d/*.sources`
/// and `*.list` in name order, then `sources.list`, as apt reads them.
pub fn read_apt_sources(etc_apt: &Path) -> Vec<AptSource> {
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir(etc_apt.join("sources.list.d")) {
        let mut paths: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            match p.extension().and_then(|e| e.to_str()) {
                Some("sources") => out.extend(parse_deb822(&text)),
                Some("list") => out.extend(parse_one_line(&text)),
                _ => {}
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string(etc_apt.join("sources.list")) {
        out.extend(parse_one_line(&text));
    }
    out
}

/// Where the main archive's URI came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorOrigin {
    /// `PANDASTACK_DEBIAN_MIRROR`.
    Env,
    /// The spec's `debian.mirror`.
    Spec,
    /// A host entry listing the suite.
    Host,
    /// A host entry for another suite of the same archive (e.g. building trixie on a bookworm
    /// host): Debian archives carry every suite.
    HostOtherSuite,
}

/// The archives to bootstrap `suite` from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianSources {
    pub suite: String,
    pub main: String,
    pub origin: MirrorOrigin,
    /// `<suite>-updates`, if the host uses it.
    pub updates: Option<String>,
    /// `<suite>-security`, if the host uses it (never overridden: it is a different archive).
    pub security: Option<String>,
}

impl DebianSources {
    /// mmdebstrap's positional source arguments, one-line style.
    pub fn mmdebstrap_args(&self, components: &[String]) -> Vec<String> {
        let comps = components.join(" ");
        let s = &self.suite;
        let mut out = vec![format!("deb {} {s} {comps}", self.main)];
        if let Some(u) = &self.updates {
            out.push(format!("deb {u} {s}-updates {comps}"));
        }
        if let Some(u) = &self.security {
            out.push(format!("deb {u} {s}-security {comps}"));
        }
        out
    }
}

fn usable(uri: &str) -> bool {
    ["http://", "https://", "file:/", "mirror+"]
        .iter()
        .any(|s| uri.starts_with(s))
}

fn uri_for<'a>(sources: &'a [AptSource], suite: &str) -> Option<&'a str> {
    sources
        .iter()
        .filter(|e| e.suites.iter().any(|s| s == suite))
        .flat_map(|e| e.uris.iter())
        .map(String::as_str)
        .find(|u| usable(u))
}

/// A release suite, not a pocket such as `-updates` or `-security`.
fn is_release(suite: &str) -> bool {
    !suite.contains('-') && !suite.contains('/')
}

/// Suites without `-updates` / `-security` pockets.
const NO_POCKETS: &[&str] = &["sid", "unstable", "experimental"];

/// Chooses the archives for `suite` from the host's entries. `override_uri` (env or spec), if
/// given, replaces the main archive and, when the host uses `-updates`, that pocket too.
pub fn resolve(
    host: &[AptSource],
    suite: &str,
    override_uri: Option<(&str, MirrorOrigin)>,
) -> Option<DebianSources> {
    // A release the host lists (e.g. bookworm); its archive carries the other suites too.
    let other_release = host
        .iter()
        .flat_map(|e| {
            e.suites
                .iter()
                .filter(|s| is_release(s))
                .map(move |s| (s.as_str(), e))
        })
        .find(|(_, e)| e.uris.iter().any(|u| usable(u)));
    let listed = uri_for(host, suite);
    let (main, origin) = match (override_uri, listed) {
        (Some((uri, origin)), _) => (uri.to_owned(), origin),
        (None, Some(uri)) => (uri.to_owned(), MirrorOrigin::Host),
        (None, None) => {
            let (_, e) = other_release?;
            let uri = e.uris.iter().find(|u| usable(u))?;
            (uri.clone(), MirrorOrigin::HostOtherSuite)
        }
    };
    // Pockets follow the host: its entries for this suite or, when the suite is not listed, for
    // the release whose archive we use.
    let pocket = |name: &str| -> Option<&str> {
        if let Some(uri) = uri_for(host, &format!("{suite}-{name}")) {
            return Some(uri);
        }
        if listed.is_some() || NO_POCKETS.contains(&suite) {
            return None;
        }
        let (release, _) = other_release?;
        uri_for(host, &format!("{release}-{name}"))
    };
    let updates = pocket("updates").map(|uri| match origin {
        MirrorOrigin::Host => uri.to_owned(),
        _ => main.clone(),
    });
    let security = pocket("security").map(str::to_owned);
    Some(DebianSources {
        suite: suite.to_owned(),
        main,
        origin,
        updates,
        security,
    })
}

/// The archives for `suite` on this host: `PANDASTACK_DEBIAN_MIRROR`, else `spec_mirror`, else
/// `/etc/apt`. `None` if there is nothing to use.
pub fn host_debian_sources(suite: &str, spec_mirror: Option<&str>) -> Option<DebianSources> {
    let env = std::env::var(MIRROR_ENV)
        .ok()
        .filter(|m| !m.trim().is_empty());
    let override_uri = match (&env, spec_mirror) {
        (Some(m), _) => Some((m.trim(), MirrorOrigin::Env)),
        (None, Some(m)) => Some((m, MirrorOrigin::Spec)),
        (None, None) => None,
    };
    resolve(
        &read_apt_sources(Path::new("/etc/apt")),
        suite,
        override_uri,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "\
Types: deb
# a comment line inside the stanza
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://disabled.invalid/debian
Suites: trixie
Enabled: no

Types: deb-src
URIs: http://src-only.invalid/debian
Suites: sid
";

    const ONE_LINE: &str = "\
# deb http://commented.invalid/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main non-free
deb-src http://m.invalid/debian bookworm main
deb [ arch=amd64 ] http://m.invalid/debian bookworm-updates main
deb http://security.invalid/debian-security bookworm-security main # trailing comment
";

    #[test]
    fn parses_deb822() {
        let e = parse_deb822(DEB822);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].uris, ["http://mirror.invalid/debian"]);
        assert_eq!(e[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(e[0].components, ["main", "contrib"]);
        assert_eq!(e[1].suites, ["bookworm-security"]);
    }

    #[test]
    fn parses_deb822_with_an_embedded_key_and_crlf() {
        let text = "Types: deb\r\nURIs: http://a.invalid/debian\r\nSuites: bookworm\r\nSigned-By:\r\n -----BEGIN PGP PUBLIC KEY BLOCK-----\r\n .\r\n Suites: fake\r\n -----END PGP PUBLIC KEY BLOCK-----\r\n";
        let e = parse_deb822(text);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].suites, ["bookworm"]);
    }

    #[test]
    fn parses_one_line() {
        let e = parse_one_line(ONE_LINE);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(e[0].uris, ["http://m.invalid/debian"]);
        assert_eq!(e[0].suites, ["bookworm"]);
        assert_eq!(e[0].components, ["main", "non-free"]);
        assert_eq!(e[1].suites, ["bookworm-updates"]);
        assert_eq!(e[2].uris, ["http://security.invalid/debian-security"]);
        assert_eq!(e[2].components, ["main"]);
    }

    #[test]
    fn resolves_from_deb822() {
        let host = parse_deb822(DEB822);
        let s = resolve(&host, "bookworm", None).unwrap();
        assert_eq!(s.main, "http://mirror.invalid/debian");
        assert_eq!(s.origin, MirrorOrigin::Host);
        assert_eq!(s.updates.as_deref(), Some("http://mirror.invalid/debian"));
        assert_eq!(
            s.security.as_deref(),
            Some("http://mirror.invalid/debian-security")
        );
        assert_eq!(
            s.mmdebstrap_args(&["main".into()]),
            [
                "deb http://mirror.invalid/debian bookworm main",
                "deb http://mirror.invalid/debian bookworm-updates main",
                "deb http://mirror.invalid/debian-security bookworm-security main",
            ]
        );
    }

    #[test]
    fn resolves_from_one_line() {
        let host = parse_one_line(ONE_LINE);
        let s = resolve(&host, "bookworm", None).unwrap();
        assert_eq!(s.main, "http://m.invalid/debian");
        assert_eq!(s.updates.as_deref(), Some("http://m.invalid/debian"));
        assert_eq!(
            s.security.as_deref(),
            Some("http://security.invalid/debian-security")
        );
    }

    #[test]
    fn pockets_only_when_the_host_uses_them() {
        let host = parse_one_line("deb http://m.invalid/debian bookworm main\n");
        let s = resolve(&host, "bookworm", None).unwrap();
        assert_eq!((s.updates, s.security), (None, None));
        assert_eq!(
            DebianSources {
                suite: "bookworm".into(),
                main: "http://m.invalid/debian".into(),
                origin: MirrorOrigin::Host,
                updates: None,
                security: None
            }
            .mmdebstrap_args(&["main".into(), "contrib".into()]),
            ["deb http://m.invalid/debian bookworm main contrib"]
        );
    }

    #[test]
    fn an_override_replaces_main_and_updates_but_not_security() {
        let host = parse_deb822(DEB822);
        let s = resolve(
            &host,
            "bookworm",
            Some(("http://local.invalid/debian", MirrorOrigin::Env)),
        )
        .unwrap();
        assert_eq!(s.main, "http://local.invalid/debian");
        assert_eq!(s.origin, MirrorOrigin::Env);
        assert_eq!(s.updates.as_deref(), Some("http://local.invalid/debian"));
        assert_eq!(
            s.security.as_deref(),
            Some("http://mirror.invalid/debian-security")
        );
        // With no host sources at all, the override alone is enough.
        let s = resolve(
            &[],
            "bookworm",
            Some(("http://local.invalid/debian", MirrorOrigin::Spec)),
        )
        .unwrap();
        assert_eq!(
            (s.main.as_str(), s.updates, s.security),
            ("http://local.invalid/debian", None, None)
        );
    }

    #[test]
    fn another_suite_borrows_the_hosts_archive() {
        let host = parse_deb822(DEB822);
        let s = resolve(&host, "trixie", None).unwrap();
        assert_eq!(s.main, "http://mirror.invalid/debian");
        assert_eq!(s.origin, MirrorOrigin::HostOtherSuite);
        assert_eq!(s.updates.as_deref(), Some("http://mirror.invalid/debian"));
        assert_eq!(
            s.security.as_deref(),
            Some("http://mirror.invalid/debian-security")
        );
        assert_eq!(resolve(&[], "bookworm", None), None);
        // sid has no -updates or -security pockets.
        let sid = resolve(&host, "sid", None).unwrap();
        assert_eq!((sid.updates, sid.security), (None, None));
    }

    #[test]
    fn reads_an_etc_apt_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sources.list.d")).unwrap();
        std::fs::write(dir.path().join("sources.list.d/debian.sources"), DEB822).unwrap();
        std::fs::write(dir.path().join("sources.list.d/extra.list"), ONE_LINE).unwrap();
        std::fs::write(
            dir.path().join("sources.list.d/ignored.list.disabled"),
            "deb http://no.invalid/ bookworm main\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("sources.list"),
            "deb http://last.invalid/debian bookworm main\n",
        )
        .unwrap();
        let all = read_apt_sources(dir.path());
        assert_eq!(all.len(), 2 + 3 + 1);
        // The first entry for the suite wins, as the files are read in apt's order.
        assert_eq!(
            resolve(&all, "bookworm", None).unwrap().main,
            "http://mirror.invalid/debian"
        );
    }
}
