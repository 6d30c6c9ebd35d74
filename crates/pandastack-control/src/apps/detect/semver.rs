//! npm version ranges: enough of node-semver for `engines.node`; pre-release tags are dropped.

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct Version(pub(super) u64, pub(super) u64, pub(super) u64);

impl Version {
    fn next_major(self) -> Version {
        Version(self.0.saturating_add(1), 0, 0)
    }
    fn next_minor(self) -> Version {
        Version(self.0, self.1.saturating_add(1), 0)
    }
    fn next_patch(self) -> Version {
        Version(self.0, self.1, self.2.saturating_add(1))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The versions `lo <= v < hi` (no `hi`: no upper bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Interval {
    lo: Version,
    hi: Option<Version>,
}

impl Interval {
    const ALL: Interval = Interval {
        lo: Version(0, 0, 0),
        hi: None,
    };
    const NONE: Interval = Interval {
        lo: Version(0, 0, 0),
        hi: Some(Version(0, 0, 0)),
    };

    fn from(lo: Version) -> Interval {
        Interval { lo, hi: None }
    }
    fn below(hi: Version) -> Interval {
        Interval {
            lo: Version(0, 0, 0),
            hi: Some(hi),
        }
    }
    fn between(lo: Version, hi: Version) -> Interval {
        Interval { lo, hi: Some(hi) }
    }

    fn and(self, other: Interval) -> Interval {
        let hi = match (self.hi, other.hi) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Interval {
            lo: self.lo.max(other.lo),
            hi,
        }
    }

    fn admits(self, v: Version) -> bool {
        self.lo <= v && self.hi.is_none_or(|hi| v < hi)
    }

    fn is_empty(self) -> bool {
        self.hi.is_some_and(|hi| hi <= self.lo)
    }
}

/// An npm version range: intervals joined by `||`.
#[derive(Debug)]
pub(super) struct Range(Vec<Interval>);

impl Range {
    pub(super) fn parse(s: &str) -> Option<Range> {
        s.split("||")
            .map(range_set)
            .collect::<Option<_>>()
            .map(Range)
    }

    pub(super) fn admits(&self, v: Version) -> bool {
        self.0.iter().any(|i| i.admits(v))
    }

    /// Whether some version of this major is in the range.
    pub(super) fn meets_major(&self, major: u64) -> bool {
        let all = Interval::between(Version(major, 0, 0), Version(major, 0, 0).next_major());
        self.0.iter().any(|i| !i.and(all).is_empty())
    }
}

/// One `||` part: comparators that must all hold, or a hyphen range `a - b`.
fn range_set(s: &str) -> Option<Interval> {
    let words: Vec<&str> = s.split_whitespace().collect();
    if let [a, "-", b] = words[..] {
        let (a, b) = (Partial::parse(a)?, Partial::parse(b)?);
        let lo = Interval::from(a.low());
        return Some(match b.major {
            None => lo,
            Some(_) => lo.and(Interval::below(b.after())),
        });
    }
    let mut set = Interval::ALL;
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        // `>= 20` is `>=20`.
        let joined;
        let word = if word.chars().all(|c| "<>=^~".contains(c)) {
            joined = format!("{word}{}", words.next()?);
            joined.as_str()
        } else {
            word
        };
        set = set.and(comparator(word)?);
    }
    Some(set)
}

fn comparator(word: &str) -> Option<Interval> {
    const OPS: [&str; 8] = ["<=", ">=", "~>", "<", ">", "=", "^", "~"];
    let (op, rest) = OPS
        .iter()
        .find_map(|op| word.strip_prefix(op).map(|rest| (*op, rest)))
        .unwrap_or(("", word));
    let p = Partial::parse(rest)?;
    if p.major.is_none() {
        return Some(match op {
            "<" | ">" => Interval::NONE,
            _ => Interval::ALL,
        });
    }
    let (lo, after) = (p.low(), p.after());
    Some(match op {
        "" | "=" => Interval::between(lo, after),
        ">=" => Interval::from(lo),
        ">" => Interval::from(after),
        "<" => Interval::below(lo),
        "<=" => Interval::below(after),
        "~" | "~>" if p.minor.is_some() => Interval::between(lo, lo.next_minor()),
        "~" | "~>" => Interval::between(lo, lo.next_major()),
        _ => {
            // `^`: up to the next change of the leftmost non-zero part.
            let hi = match (lo, p.minor, p.patch) {
                (Version(1.., _, _), _, _) | (_, None, _) => lo.next_major(),
                (Version(0, 1.., _), _, _) | (_, _, None) => lo.next_minor(),
                _ => lo.next_patch(),
            };
            Interval::between(lo, hi)
        }
    })
}

/// A version with parts left out or wild (`20`, `20.x`, `20.9.*`).
struct Partial {
    major: Option<u64>,
    minor: Option<u64>,
    patch: Option<u64>,
}

impl Partial {
    fn parse(s: &str) -> Option<Partial> {
        let s = s.trim_start_matches(['v', '=']);
        let s = s.split(['+', '-']).next().unwrap_or("");
        let mut parts = [None; 3];
        if !s.is_empty() {
            let split: Vec<&str> = s.split('.').collect();
            if split.len() > 3 {
                return None;
            }
            for (slot, part) in parts.iter_mut().zip(split) {
                if matches!(part, "x" | "X" | "*") {
                    break;
                }
                let digits = !part.is_empty() && part.len() <= 12;
                if !digits || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                *slot = Some(part.parse().ok()?);
            }
        }
        let [major, minor, patch] = parts;
        Some(Partial {
            major,
            minor: major.and(minor),
            patch: major.and(minor).and(patch),
        })
    }

    fn low(&self) -> Version {
        Version(
            self.major.unwrap_or(0),
            self.minor.unwrap_or(0),
            self.patch.unwrap_or(0),
        )
    }

    /// The first version past the ones this names: `20` → 21.0.0, `20.9` → 20.10.0.
    fn after(&self) -> Version {
        let lo = self.low();
        match (self.minor, self.patch) {
            (None, _) => lo.next_major(),
            (Some(_), None) => lo.next_minor(),
            _ => lo.next_patch(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ranges_read_like_npm() {
        let v = |s: &str| {
            let n: Vec<u64> = s.split('.').map(|p| p.parse().unwrap()).collect();
            Version(n[0], n[1], n[2])
        };
        let cases = [
            ("^1.2.3", "1.9.9", true),
            ("^1.2.3", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            ("^0.0.3", "0.0.4", false),
            ("~1.2", "1.2.9", true),
            ("~1.2", "1.3.0", false),
            (">1.2", "1.2.9", false),
            (">1.2", "1.3.0", true),
            ("<=1.2", "1.2.9", true),
            ("<=1.2.3", "1.2.4", false),
            ("1.2.3 - 2.3", "2.3.9", true),
            ("1.2.3 - 2.3", "2.4.0", false),
            ("1.2.3 - 2.3.4", "2.3.4", true),
            (">=1.0.0 <2", "1.5.0", true),
            (">=1.0.0 <2", "2.0.0", false),
            ("=1.2.3", "1.2.3", true),
            ("v1.2.3", "1.2.4", false),
            ("1.x || >=3", "2.0.0", false),
            ("1.x || >=3", "3.1.0", true),
            ("20.0.0-rc.1", "20.0.0", true),
        ];
        for (range, version, admitted) in cases {
            let r = Range::parse(range).unwrap_or_else(|| panic!("{range}"));
            assert_eq!(r.admits(v(version)), admitted, "{range} admits {version}");
        }
        for bad in ["latest", ">=", "1.2.3.4", "abc || 1"] {
            assert!(Range::parse(bad).is_none(), "{bad}");
        }
    }
}
