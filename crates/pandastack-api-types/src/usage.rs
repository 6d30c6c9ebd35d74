//! Metered usage (`GET /v1/usage?from=&to=&group_by=`): what a workspace's resources used over
//! a window, in totals and in groups.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A dimension usage can be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UsageDimension {
    /// The resource kind (`sandbox`, `database`, `app`, `function`, `volume`, …).
    Kind,
    /// The resource (its kind and id; a database's id, an app's or a function's name).
    Resource,
    /// The UTC day.
    Day,
    /// The UTC hour.
    Hour,
}

impl UsageDimension {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageDimension::Kind => "kind",
            UsageDimension::Resource => "resource",
            UsageDimension::Day => "day",
            UsageDimension::Hour => "hour",
        }
    }
}

/// `group_by`: `none`, or a comma list of `kind`, `resource` and one of `day` or `hour`
/// (`resource` implies `kind`); in a fixed order, without repeats.
pub fn parse_group_by(v: &str) -> Result<Vec<UsageDimension>, crate::FieldError> {
    let bad = |m: String| crate::field_error("group_by", m);
    let mut out = Vec::new();
    if v.trim() == "none" {
        return Ok(out);
    }
    for part in v.split(',').map(str::trim) {
        let d = match part {
            "kind" => UsageDimension::Kind,
            "resource" => UsageDimension::Resource,
            "day" => UsageDimension::Day,
            "hour" => UsageDimension::Hour,
            _ => {
                return Err(bad(format!(
                    "{part:?}: none, or a comma list of kind, resource, day, hour"
                )))
            }
        };
        if !out.contains(&d) {
            out.push(d);
        }
    }
    if out.contains(&UsageDimension::Day) && out.contains(&UsageDimension::Hour) {
        return Err(bad("day or hour, not both".into()));
    }
    if out.contains(&UsageDimension::Resource) && !out.contains(&UsageDimension::Kind) {
        out.push(UsageDimension::Kind);
    }
    out.sort();
    Ok(out)
}

/// What was used. Times are of running VMs (from their readings), storage of what was kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageFigures {
    /// vCPUs times seconds their VMs ran.
    pub vcpu_seconds: f64,
    /// GiB of configured memory times seconds their VMs ran.
    pub memory_gib_seconds: f64,
    /// GiB kept (volumes and their snapshots at their size, volume backups, snapshots,
    /// hibernation images, template builds) times hours.
    pub storage_gib_hours: f64,
    /// Bytes the VMs sent.
    pub egress_bytes: u64,
    /// Bytes the VMs received.
    pub ingress_bytes: u64,
    /// Function invocations that ran.
    pub invocations: u64,
    /// Their handlers' time.
    pub invocation_seconds: f64,
    /// Seconds managed databases' VMs ran (their compute time).
    pub database_seconds: f64,
}

/// The usage of one group: its key (the dimensions grouped by) and figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageGroup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// Start of the group's day or hour (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    pub usage: UsageFigures,
}

/// Metered usage of the caller's workspace over `[from, to)` (hours are the resolution: `from`
/// is rounded down to its hour).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MeteredUsage {
    /// RFC 3339.
    pub from: String,
    /// RFC 3339.
    pub to: String,
    /// The dimensions of `groups` (empty: totals only).
    pub group_by: Vec<String>,
    pub totals: UsageFigures,
    #[serde(default)]
    pub groups: Vec<UsageGroup>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_by_parses_in_order_and_refuses_the_rest() {
        use UsageDimension::*;
        assert_eq!(parse_group_by("none").unwrap(), vec![]);
        assert_eq!(parse_group_by("day, kind").unwrap(), vec![Kind, Day]);
        assert_eq!(parse_group_by("resource").unwrap(), vec![Kind, Resource]);
        assert_eq!(parse_group_by("hour,hour").unwrap(), vec![Hour]);
        for bad in ["", "week", "day,hour", "kind,"] {
            assert_eq!(parse_group_by(bad).unwrap_err().field, "group_by", "{bad}");
        }
    }
}
