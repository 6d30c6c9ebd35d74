//! The metered part of `GET /v1/usage`: the window and grouping a query asks for, the hour rows
//! the control plane's meter wrote summed into totals and groups, as JSON or CSV.

use std::collections::BTreeMap;

use axum::http::{header, HeaderMap};
use pandastack_api_types::{self as wire, UsageDimension};
use pandastack_store::Metered;

use crate::error::{ApiError, ApiResult};
use crate::{rfc3339, ApiState};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// The longest window a query may ask for.
const MAX_SPAN_MS: i64 = 366 * DAY_MS;
/// The query parameters the route takes.
const PARAMS: [&str; 4] = ["from", "to", "group_by", "format"];

/// What a query asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Asked {
    /// Rounded down to its hour.
    pub from_ms: i64,
    pub to_ms: i64,
    pub group_by: Vec<UsageDimension>,
    pub csv: bool,
}

fn field(name: &str, message: impl Into<String>) -> ApiError {
    ApiError::from(wire::FieldError {
        field: name.into(),
        message: message.into(),
    })
}

fn time_of(q: &BTreeMap<String, String>, name: &str) -> ApiResult<Option<i64>> {
    let Some(v) = q.get(name) else {
        return Ok(None);
    };
    let t = time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339)
        .map_err(|_| field(name, format!("{v:?}: an RFC 3339 time")))?;
    Ok(Some((t.unix_timestamp_nanos() / 1_000_000) as i64))
}

/// The start of the calendar month (UTC) `now_ms` is in.
fn month_start(now_ms: i64) -> i64 {
    let t = time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let first = t.date().replace_day(1).unwrap_or(t.date());
    first.midnight().assume_utc().unix_timestamp() * 1000
}

/// The window, grouping and format of a query at `now_ms`: `from` (default: the start of this
/// month, UTC) before `to` (default: now), at most 366 days apart; `group_by` (default `none`);
/// CSV for `format=csv` or an `Accept` of `text/csv`.
pub(crate) fn asked(
    q: &BTreeMap<String, String>,
    headers: &HeaderMap,
    now_ms: i64,
) -> ApiResult<Asked> {
    if let Some(k) = q.keys().find(|k| !PARAMS.contains(&k.as_str())) {
        return Err(field(
            k,
            "unknown parameter (from, to, group_by and format are)",
        ));
    }
    let to = time_of(q, "to")?.unwrap_or(now_ms);
    let from = time_of(q, "from")?.unwrap_or_else(|| month_start(to.min(now_ms)));
    if from >= to {
        return Err(field("from", "before to"));
    }
    if to - from > MAX_SPAN_MS {
        return Err(field("to", "at most 366 days after from"));
    }
    let group_by = match q.get("group_by") {
        Some(v) => wire::parse_group_by(v).map_err(ApiError::from)?,
        None => Vec::new(),
    };
    let csv = match q.get("format").map(String::as_str) {
        Some("csv") => true,
        Some("json") => false,
        Some(v) => return Err(field("format", format!("{v:?}: json or csv"))),
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.split(',').any(|t| t.trim().starts_with("text/csv"))),
    };
    Ok(Asked {
        from_ms: from.div_euclid(HOUR_MS) * HOUR_MS,
        to_ms: to,
        group_by,
        csv,
    })
}

/// One group's sums: the rows' figures and the time databases' VMs ran.
#[derive(Default)]
struct Sum {
    m: Metered,
    database_ms: i64,
}

impl Sum {
    fn add(&mut self, kind: &str, m: &Metered) {
        self.m.add(m);
        if kind == "database" {
            self.database_ms += m.vm_ms;
        }
    }

    fn figures(&self) -> wire::UsageFigures {
        let r = |v: f64| (v * 1e6).round() / 1e6;
        let m = &self.m;
        let n = |v: i64| v.max(0) as u64;
        wire::UsageFigures {
            vcpu_seconds: r(m.vcpu_ms as f64 / 1e3),
            memory_gib_seconds: r(m.memory_mib_ms as f64 / 1024.0 / 1e3),
            storage_gib_hours: r(m.storage_kib_ms as f64 / (1024.0 * 1024.0) / HOUR_MS as f64),
            egress_bytes: n(m.egress_bytes),
            ingress_bytes: n(m.ingress_bytes),
            invocations: n(m.invocations),
            invocation_seconds: r(m.invocation_ms as f64 / 1e3),
            database_seconds: r(self.database_ms as f64 / 1e3),
        }
    }
}

/// A group's key: its day's or hour's start, kind and resource id (each as grouped).
type GroupKey = (Option<i64>, Option<String>, Option<String>);

/// Workspace `ws`'s metered usage over the window asked, in totals and groups.
pub(crate) async fn metered(app: &ApiState, ws: &str, a: &Asked) -> ApiResult<wire::MeteredUsage> {
    let rows = app.store.usage().hours(ws, a.from_ms, a.to_ms).await?;
    let mut total = Sum::default();
    // Keyed (start, kind, resource) so groups come out in time order.
    let mut groups: BTreeMap<GroupKey, Sum> = BTreeMap::new();
    let has = |d| a.group_by.contains(&d);
    for (k, m) in &rows {
        total.add(&k.kind, m);
        if a.group_by.is_empty() {
            continue;
        }
        let start = if has(UsageDimension::Day) {
            Some(k.hour.div_euclid(DAY_MS) * DAY_MS)
        } else if has(UsageDimension::Hour) {
            Some(k.hour)
        } else {
            None
        };
        let kind = has(UsageDimension::Kind).then(|| k.kind.clone());
        let id = has(UsageDimension::Resource).then(|| k.resource_id.clone());
        groups.entry((start, kind, id)).or_default().add(&k.kind, m);
    }
    Ok(wire::MeteredUsage {
        from: rfc3339(a.from_ms),
        to: rfc3339(a.to_ms),
        group_by: a.group_by.iter().map(|d| d.as_str().to_owned()).collect(),
        totals: total.figures(),
        groups: groups
            .into_iter()
            .map(|((start, kind, resource_id), s)| wire::UsageGroup {
                kind,
                resource_id,
                start: start.map(rfc3339),
                usage: s.figures(),
            })
            .collect(),
    })
}

/// The header of the CSV form.
pub(crate) const CSV_HEADER: &str = "from,to,kind,resource_id,start,vcpu_seconds,\
     memory_gib_seconds,storage_gib_hours,egress_bytes,ingress_bytes,invocations,\
     invocation_seconds,database_seconds";

/// A CSV field, quoted when it must be.
fn cell(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

/// The CSV form: a header row, then one row per group — or one row of the totals, its key
/// columns empty, when nothing is grouped.
pub(crate) fn csv(u: &wire::MeteredUsage) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push_str("\r\n");
    let mut line = |kind: &str, id: &str, start: &str, f: &wire::UsageFigures| {
        let cells = [
            cell(&u.from),
            cell(&u.to),
            cell(kind),
            cell(id),
            cell(start),
            f.vcpu_seconds.to_string(),
            f.memory_gib_seconds.to_string(),
            f.storage_gib_hours.to_string(),
            f.egress_bytes.to_string(),
            f.ingress_bytes.to_string(),
            f.invocations.to_string(),
            f.invocation_seconds.to_string(),
            f.database_seconds.to_string(),
        ];
        out.push_str(&cells.join(","));
        out.push_str("\r\n");
    };
    if u.group_by.is_empty() {
        line("", "", "", &u.totals);
    }
    for g in &u.groups {
        line(
            g.kind.as_deref().unwrap_or(""),
            g.resource_id.as_deref().unwrap_or(""),
            g.start.as_deref().unwrap_or(""),
            &g.usage,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    // 2026-03-15T12:34:56Z
    const NOW: i64 = 1_773_578_096_000;

    #[test]
    fn the_default_window_is_this_month_to_now() {
        let a = asked(&q(&[]), &HeaderMap::new(), NOW).unwrap();
        assert_eq!(rfc3339(a.from_ms), "2026-03-01T00:00:00Z");
        assert_eq!(a.to_ms, NOW);
        assert!(a.group_by.is_empty() && !a.csv);
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, "text/csv".parse().unwrap());
        assert!(asked(&q(&[]), &h, NOW).unwrap().csv);
    }

    #[test]
    fn a_bad_query_names_its_field() {
        for (pairs, name) in [
            (vec![("from", "yesterday")], "from"),
            (vec![("to", "2026-13-01T00:00:00Z")], "to"),
            (
                vec![
                    ("from", "2026-03-02T00:00:00Z"),
                    ("to", "2026-03-01T00:00:00Z"),
                ],
                "from",
            ),
            (
                vec![
                    ("from", "2024-01-01T00:00:00Z"),
                    ("to", "2026-01-01T00:00:00Z"),
                ],
                "to",
            ),
            (vec![("group_by", "week")], "group_by"),
            (vec![("format", "xml")], "format"),
            (vec![("since", "1h")], "since"),
        ] {
            let e = asked(&q(&pairs), &HeaderMap::new(), NOW).unwrap_err();
            assert!(e.message.starts_with(name), "{pairs:?}: {}", e.message);
        }
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_group() {
        let u = wire::MeteredUsage {
            from: "a".into(),
            to: "b".into(),
            group_by: vec!["kind".into(), "resource".into()],
            totals: Default::default(),
            groups: vec![wire::UsageGroup {
                kind: Some("app".into()),
                resource_id: Some("x,y".into()),
                start: None,
                usage: wire::UsageFigures {
                    vcpu_seconds: 1.5,
                    ..Default::default()
                },
            }],
        };
        let text = csv(&u);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(lines[1], "a,b,app,\"x,y\",,1.5,0,0,0,0,0,0,0");
        assert_eq!(lines.len(), 2);
    }
}
