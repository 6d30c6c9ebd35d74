//! Cron expressions as users write them, evaluated in an IANA time zone.
//!
//! Five fields (`minute hour day-of-month month day-of-week`), six with seconds first, or one
//! of `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`. Parsing and
//! the search for the next due time are `croner`'s (POSIX/Vixie semantics: a day-of-month and
//! a day-of-week both given match either); the zone is `chrono-tz`'s compiled-in database.
//! Across a DST change a wall-clock time that does not exist (spring forward) runs at the first
//! instant after the gap, and one that exists twice (fall back) runs once, at its first
//! occurrence; interval fields (`*/5`, `*`) keep their real-time spacing.

use std::str::FromStr;

use chrono::{TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Why an expression or a time zone was refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CronError {
    /// `cron` or `timezone`.
    pub field: &'static str,
    pub message: String,
}

fn cron_error(message: impl Into<String>) -> CronError {
    CronError {
        field: "cron",
        message: message.into(),
    }
}

const FIVE: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const SIX: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];
const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// A parsed expression in its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
    tz: Tz,
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// The IANA time zone `name` (`UTC`, `Europe/Berlin`, …).
pub fn parse_timezone(name: &str) -> Result<Tz, CronError> {
    Tz::from_str(name).map_err(|_| CronError {
        field: "timezone",
        message: format!("{name:?} is not an IANA time zone name (such as UTC or Europe/Berlin)"),
    })
}

/// Parses `expr` read in time zone `timezone`; the error names the field that fails.
pub fn parse(expr: &str, timezone: &str) -> Result<CronSchedule, CronError> {
    let tz = parse_timezone(timezone)?;
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(cron_error("empty expression"));
    }
    if let Some(m) = expr.strip_prefix('@') {
        let lower = format!("@{}", m.to_ascii_lowercase());
        if !MACROS.contains(&lower.as_str()) {
            return Err(cron_error(format!(
                "unknown macro {expr:?} (want one of {})",
                MACROS.join(", ")
            )));
        }
    } else {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let names: &[&str] = match fields.len() {
            5 => &FIVE,
            6 => &SIX,
            n => {
                return Err(cron_error(format!(
                    "{n} fields: want 5 (minute hour day-of-month month day-of-week) or 6 \
                     (second first)"
                )))
            }
        };
        if let Err(e) = parser().parse(expr) {
            // Name the field: the first one that fails with every other field `*`.
            for (i, f) in fields.iter().enumerate() {
                let mut probe = vec!["*"; fields.len()];
                probe[i] = f;
                if let Err(fe) = parser().parse(&probe.join(" ")) {
                    return Err(cron_error(format!(
                        "field {} ({}) {f:?}: {}",
                        i + 1,
                        names[i],
                        reason(&fe)
                    )));
                }
            }
            return Err(cron_error(reason(&e)));
        }
    }
    let cron = parser().parse(expr).map_err(|e| cron_error(reason(&e)))?;
    let s = CronSchedule { cron, tz };
    if s.next_after(pandastack_store::now_ms()).is_none() {
        return Err(cron_error(format!("{expr:?} is never due")));
    }
    Ok(s)
}

/// croner's message without its prefixes.
fn reason(e: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match e {
        E::InvalidPattern(m) | E::IllegalCharacters(m) | E::ComponentError(m) => {
            m.trim_end_matches('.').to_owned()
        }
        other => other.to_string().trim_end_matches('.').to_owned(),
    }
}

impl CronSchedule {
    /// The first due time strictly after `ms` (unix ms; due times are whole seconds), or
    /// `None` when there is none (in the next few years).
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let from = Utc
            .timestamp_opt(ms.div_euclid(1000), 0)
            .single()?
            .with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&from, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// Due times in `(after, until]`, oldest first: the newest `max` of them (searched
    /// backwards from `until`, so a long gap costs no more than a short one).
    pub fn due_between(&self, after: i64, until: i64, max: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let Some(end) = Utc.timestamp_opt(until.div_euclid(1000), 0).single() else {
            return out;
        };
        let mut cursor = end.with_timezone(&self.tz);
        let mut inclusive = true;
        while out.len() < max {
            match self.cron.find_previous_occurrence(&cursor, inclusive) {
                Ok(t) if t.timestamp_millis() > after => {
                    out.push(t.timestamp_millis());
                    cursor = t;
                    inclusive = false;
                }
                _ => break,
            }
        }
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    fn iso(ms: i64) -> String {
        Utc.timestamp_millis_opt(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    #[test]
    fn five_and_six_fields_and_macros() {
        let s = parse("*/5 * * * *", "UTC").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-01T10:02:30Z")).unwrap()),
            "2025-01-01T10:05:00Z"
        );
        // Strictly after: a due time is not due again.
        assert_eq!(
            iso(s.next_after(ms("2025-01-01T10:05:00Z")).unwrap()),
            "2025-01-01T10:10:00Z"
        );
        let s = parse("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-01T10:02:31.500Z")).unwrap()),
            "2025-01-01T10:02:40Z"
        );
        let s = parse("@hourly", "UTC").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-01T10:02:30Z")).unwrap()),
            "2025-01-01T11:00:00Z"
        );
        let s = parse("@daily", "UTC").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-01T10:02:30Z")).unwrap()),
            "2025-01-02T00:00:00Z"
        );
        let s = parse("0 9 * * MON-FRI", "UTC").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-04T10:00:00Z")).unwrap()), // a Saturday
            "2025-01-06T09:00:00Z"
        );
        parse("@WEEKLY", "UTC").unwrap();
    }

    #[test]
    fn bad_expressions_say_where() {
        let e = parse("* * * *", "UTC").unwrap_err();
        assert_eq!(e.field, "cron");
        assert!(e.message.starts_with("4 fields: want 5"), "{e}");
        let e = parse("*/5 25 * * *", "UTC").unwrap_err();
        assert!(e.message.starts_with("field 2 (hour) \"25\""), "{e}");
        let e = parse("61 * * * * *", "UTC").unwrap_err();
        assert!(e.message.starts_with("field 1 (second) \"61\""), "{e}");
        let e = parse("* * * 13 *", "UTC").unwrap_err();
        assert!(e.message.starts_with("field 4 (month)"), "{e}");
        let e = parse("* * * * * * *", "UTC").unwrap_err();
        assert!(e.message.starts_with("7 fields"), "{e}");
        let e = parse("*/x * * * *", "UTC").unwrap_err();
        assert!(e.message.starts_with("field 1 (minute)"), "{e}");
        let e = parse("@fortnightly", "UTC").unwrap_err();
        assert!(e.message.contains("unknown macro"), "{e}");
        let e = parse("", "UTC").unwrap_err();
        assert_eq!(e.message, "empty expression");
        let e = parse("0 0 30 2 *", "UTC").unwrap_err();
        assert!(e.message.contains("never due"), "{e}");
        let e = parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(e.field, "timezone");
    }

    #[test]
    fn time_zones_and_dst() {
        // 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
        let s = parse("0 9 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            iso(s.next_after(ms("2025-01-10T12:00:00Z")).unwrap()),
            "2025-01-11T08:00:00Z"
        );
        assert_eq!(
            iso(s.next_after(ms("2025-07-10T12:00:00Z")).unwrap()),
            "2025-07-11T07:00:00Z"
        );
        // Spring forward (2025-03-30, 02:00 → 03:00 in Berlin): 02:30 does not exist that day;
        // the run is at the first instant after the gap (03:00 CEST = 01:00 UTC), once.
        let s = parse("30 2 * * *", "Europe/Berlin").unwrap();
        let d = s.due_between(ms("2025-03-29T00:00:00Z"), ms("2025-04-01T00:00:00Z"), 10);
        let d: Vec<String> = d.into_iter().map(iso).collect();
        assert_eq!(
            d,
            [
                "2025-03-29T01:30:00Z",
                "2025-03-30T01:00:00Z",
                "2025-03-31T00:30:00Z"
            ]
        );
        // Fall back (2025-10-26, 03:00 → 02:00): 02:30 happens twice; it runs once.
        let d = s.due_between(ms("2025-10-25T00:00:00Z"), ms("2025-10-28T00:00:00Z"), 10);
        let d: Vec<String> = d.into_iter().map(iso).collect();
        assert_eq!(
            d,
            [
                "2025-10-25T00:30:00Z",
                "2025-10-26T00:30:00Z",
                "2025-10-27T01:30:00Z"
            ]
        );
        // An interval keeps real-time spacing through the change.
        let s = parse("0 */1 * * *", "America/New_York").unwrap();
        let d = s.due_between(ms("2025-03-09T05:30:00Z"), ms("2025-03-09T08:30:00Z"), 10);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn due_between_keeps_the_newest() {
        let s = parse("* * * * * *", "UTC").unwrap();
        let t = ms("2025-01-01T00:00:00Z");
        let d = s.due_between(t, t + 10_000, 3);
        assert_eq!(d, vec![t + 8_000, t + 9_000, t + 10_000]);
    }
}
