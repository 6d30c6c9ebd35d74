//! Schedules (cron): a cron expression in a time zone that runs a target at each due time —
//! today a command in a fresh sandbox (`sandbox_exec`); a `function` target is to come. Each
//! due time fires at most once, whatever the number of server processes; each firing is a
//! run with its own history row.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// Default time zone of a schedule.
pub const DEFAULT_TIMEZONE: &str = "UTC";
/// Default (and largest) time a `sandbox_exec` command may run, seconds.
pub const DEFAULT_RUN_TIMEOUT_SECONDS: u64 = 300;
pub const MAX_RUN_TIMEOUT_SECONDS: u64 = 86_400;
/// Most retries of a failed run.
pub const MAX_SCHEDULE_RETRIES: u32 = 10;
/// Largest `starting_deadline_seconds`: a year.
pub const MAX_STARTING_DEADLINE_SECONDS: u64 = 365 * 86_400;
/// Largest `payload`, bytes of JSON (it travels in an environment variable).
pub const MAX_PAYLOAD_BYTES: usize = 64 << 10;
/// Largest command, bytes.
const MAX_COMMAND_BYTES: usize = 64 << 10;

/// A schedule name: 1-63 of `[a-z0-9-]`, starting with a letter, not ending with `-`; unique in
/// its workspace.
pub fn validate_schedule_name(field: &str, name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.as_bytes()[0].is_ascii_lowercase()
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "1-63 of [a-z0-9-], starting with a letter and not ending with '-'",
        ))
    }
}

/// What a schedule runs at each due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ScheduleTarget {
    /// A command in a new sandbox of `template`, deleted when the command ends. The schedule's
    /// `payload` is the environment variable `PANDASTACK_PAYLOAD` (JSON).
    SandboxExec(SandboxExecTarget),
    /// A call of function `name` of the schedule's workspace; the schedule's `payload` is the
    /// event. A run succeeds when the handler returns, fails when it raises or times out.
    Function(FunctionTarget),
}

/// `{"type": "function", "name": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionTarget {
    /// The function to call.
    pub name: String,
}

/// `{"type": "sandbox_exec", …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxExecTarget {
    /// Template of the sandbox each run makes.
    pub template: String,
    /// Shell command (`/bin/sh -c`).
    pub command: String,
    /// Extra environment of the command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The command is killed after this long (default 300, at most 86400).
    #[serde(default = "default_timeout")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_seconds: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_RUN_TIMEOUT_SECONDS
}

impl ScheduleTarget {
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            ScheduleTarget::Function(t) => crate::validate_function_name("target.name", &t.name),
            ScheduleTarget::SandboxExec(t) => {
                if !crate::valid_name(&t.template, 128) {
                    return Err(field_error("target.template", "a template name"));
                }
                if t.command.trim().is_empty() || t.command.len() > MAX_COMMAND_BYTES {
                    return Err(field_error("target.command", "1 byte to 64 KiB"));
                }
                if !(1..=MAX_RUN_TIMEOUT_SECONDS).contains(&t.timeout_seconds) {
                    return Err(field_error("target.timeout_seconds", "1 to 86400"));
                }
                for k in t.env.keys() {
                    let mut b = k.bytes();
                    let ok = matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
                        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_');
                    if !ok || k == PAYLOAD_ENV {
                        return Err(field_error(
                            format!("target.env.{k}"),
                            "a variable name ([A-Za-z_][A-Za-z0-9_]*), not PANDASTACK_PAYLOAD",
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

/// The environment variable a `sandbox_exec` command finds the payload in (JSON).
pub const PAYLOAD_ENV: &str = "PANDASTACK_PAYLOAD";

/// What a due time does while a previous run of the schedule is still queued or running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyPolicy {
    /// Run alongside it.
    #[default]
    Allow,
    /// Do not run: the new run is recorded `skipped`.
    Forbid,
    /// Cancel it (its sandbox is deleted) and run the new one.
    Replace,
}

impl ConcurrencyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyPolicy::Allow => "allow",
            ConcurrencyPolicy::Forbid => "forbid",
            ConcurrencyPolicy::Replace => "replace",
        }
    }
}

/// A schedule's configuration as stored (the `spec` of its row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub cron: String,
    pub timezone: String,
    pub target: ScheduleTarget,
    pub payload: serde_json::Value,
    pub concurrency_policy: ConcurrencyPolicy,
    pub starting_deadline_seconds: Option<u64>,
    pub retries: u32,
}

/// `POST /v1/schedules`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleRequest {
    /// 1-63 of `[a-z0-9-]`, starting with a letter; unique in the workspace.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")]
    pub name: String,
    /// Five fields (`*/5 * * * *`: minute hour day-of-month month day-of-week), six with
    /// seconds first (`*/10 * * * * *`), or `@yearly`, `@monthly`, `@weekly`, `@daily`,
    /// `@hourly`.
    pub cron: String,
    /// IANA time zone the expression is read in (default `UTC`), e.g. `Europe/Berlin`.
    #[serde(default)]
    pub timezone: Option<String>,
    pub target: ScheduleTarget,
    /// JSON handed to each run (`PANDASTACK_PAYLOAD` for `sandbox_exec`); default `null`.
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
    #[serde(default)]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// A due time found this many seconds late (the server was down) is recorded `missed`
    /// instead of run; of several missed due times only the latest runs. Unset: the latest
    /// missed due time runs, however late.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31536000)]
    pub starting_deadline_seconds: Option<u64>,
    /// Attempts again after a failed run (non-zero exit, timeout, error), default 0, at most 10.
    #[serde(default)]
    #[schema(maximum = 10)]
    pub retries: Option<u32>,
    /// Create it paused (default false).
    #[serde(default)]
    pub paused: Option<bool>,
}

fn validate_common(
    payload: Option<&serde_json::Value>,
    deadline: Option<u64>,
    retries: Option<u32>,
) -> Result<(), FieldError> {
    if let Some(p) = payload {
        if p.to_string().len() > MAX_PAYLOAD_BYTES {
            return Err(field_error("payload", "at most 64 KiB of JSON"));
        }
    }
    if deadline.is_some_and(|d| d == 0 || d > MAX_STARTING_DEADLINE_SECONDS) {
        return Err(field_error(
            "starting_deadline_seconds",
            format!("1 to {MAX_STARTING_DEADLINE_SECONDS} (a year)"),
        ));
    }
    if retries.is_some_and(|r| r > MAX_SCHEDULE_RETRIES) {
        return Err(field_error("retries", "0 to 10"));
    }
    Ok(())
}

impl CreateScheduleRequest {
    /// Checks what can be checked without a cron parser (the server parses `cron` and
    /// `timezone`).
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_schedule_name("name", &self.name)?;
        self.target.validate()?;
        validate_common(
            self.payload.as_ref(),
            self.starting_deadline_seconds,
            self.retries,
        )
    }

    pub fn spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            cron: self.cron.trim().to_owned(),
            timezone: self
                .timezone
                .clone()
                .unwrap_or_else(|| DEFAULT_TIMEZONE.into()),
            target: self.target.clone(),
            payload: self.payload.clone().unwrap_or(serde_json::Value::Null),
            concurrency_policy: self.concurrency_policy.unwrap_or_default(),
            starting_deadline_seconds: self.starting_deadline_seconds,
            retries: self.retries.unwrap_or(0),
        }
    }
}

/// `PATCH /v1/schedules/{name}`: the fields given replace the schedule's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateScheduleRequest {
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub target: Option<ScheduleTarget>,
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
    #[serde(default)]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// `0` removes the deadline; at most 31536000 (a year).
    #[serde(default)]
    #[schema(maximum = 31536000)]
    pub starting_deadline_seconds: Option<u64>,
    #[serde(default)]
    #[schema(maximum = 10)]
    pub retries: Option<u32>,
}

impl UpdateScheduleRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(t) = &self.target {
            t.validate()?;
        }
        validate_common(
            self.payload.as_ref(),
            self.starting_deadline_seconds.filter(|&d| d > 0),
            self.retries,
        )
    }

    /// `spec` with this request's fields.
    pub fn apply(&self, mut spec: ScheduleSpec) -> ScheduleSpec {
        if let Some(c) = &self.cron {
            spec.cron = c.trim().to_owned();
        }
        if let Some(t) = &self.timezone {
            spec.timezone = t.clone();
        }
        if let Some(t) = &self.target {
            spec.target = t.clone();
        }
        if let Some(p) = &self.payload {
            spec.payload = p.clone();
        }
        if let Some(p) = self.concurrency_policy {
            spec.concurrency_policy = p;
        }
        if let Some(d) = self.starting_deadline_seconds {
            spec.starting_deadline_seconds = (d > 0).then_some(d);
        }
        if let Some(r) = self.retries {
            spec.retries = r;
        }
        spec
    }
}

/// A schedule.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Schedule {
    pub id: String,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub target: ScheduleTarget,
    pub payload: serde_json::Value,
    pub concurrency_policy: ConcurrencyPolicy,
    pub starting_deadline_seconds: Option<u64>,
    pub retries: u32,
    pub paused: bool,
    /// The next due time (RFC 3339, UTC); `null` while paused.
    pub next_run_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// How a run came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunTrigger {
    /// A due time of the cron expression.
    Scheduled,
    /// `POST /v1/schedules/{name}/run`.
    Manual,
}

impl RunTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            RunTrigger::Scheduled => "scheduled",
            RunTrigger::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "scheduled" => RunTrigger::Scheduled,
            "manual" => RunTrigger::Manual,
            _ => return None,
        })
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Running,
    /// Exit code 0.
    Succeeded,
    /// Non-zero exit, timeout or error, after its retries.
    Failed,
    /// Not run: a previous run was still going (`concurrency_policy: forbid`).
    Skipped,
    /// Not run: found past `starting_deadline_seconds` (the server was down), or an older
    /// due time of several missed.
    Missed,
    /// Stopped by a newer run (`concurrency_policy: replace`) or the schedule's deletion.
    Cancelled,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Skipped => "skipped",
            RunState::Missed => "missed",
            RunState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => RunState::Queued,
            "running" => RunState::Running,
            "succeeded" => RunState::Succeeded,
            "failed" => RunState::Failed,
            "skipped" => RunState::Skipped,
            "missed" => RunState::Missed,
            "cancelled" => RunState::Cancelled,
            _ => return None,
        })
    }

    /// Whether the run is over.
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }
}

/// One run of a schedule.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ScheduleRun {
    pub id: String,
    pub schedule: String,
    /// The due time it is for (RFC 3339, UTC); for a manual run, when it was asked for.
    pub due_at: String,
    pub trigger: RunTrigger,
    pub state: RunState,
    /// Attempts so far (retries count).
    pub attempt: u32,
    /// The sandbox of its latest attempt (deleted when the attempt ends).
    pub sandbox_id: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    /// Stdout then stderr of the command (at most 64 KiB, from the start).
    pub output: Option<String>,
    pub error: Option<String>,
    /// When the run was recorded: `created_at - due_at` is the dispatch delay.
    pub created_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_strict_and_tagged() {
        let t: ScheduleTarget = serde_json::from_str(
            r#"{"type":"sandbox_exec","template":"minimal","command":"echo hi"}"#,
        )
        .unwrap();
        let ScheduleTarget::SandboxExec(e) = &t else {
            panic!("not sandbox_exec: {t:?}");
        };
        assert_eq!(e.timeout_seconds, DEFAULT_RUN_TIMEOUT_SECONDS);
        assert!(serde_json::from_str::<ScheduleTarget>(
            r#"{"type":"sandbox_exec","template":"minimal","command":"x","bogus":1}"#
        )
        .is_err());
        assert!(serde_json::from_str::<ScheduleTarget>(
            r#"{"type":"function","template":"minimal","command":"x"}"#
        )
        .is_err());
        let back = serde_json::to_value(&t).unwrap();
        assert_eq!(back["type"], "sandbox_exec");
        let f: ScheduleTarget =
            serde_json::from_str(r#"{"type":"function","name":"hello"}"#).unwrap();
        assert!(f.validate().is_ok());
        let bad: ScheduleTarget =
            serde_json::from_str(r#"{"type":"function","name":"No"}"#).unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "target.name");
    }

    #[test]
    fn requests_validate() {
        let mut r: CreateScheduleRequest = serde_json::from_str(
            r#"{"name":"nightly","cron":"0 3 * * *","target":{"type":"sandbox_exec","template":"minimal","command":"true"}}"#,
        )
        .unwrap();
        r.validate().unwrap();
        assert_eq!(r.spec().timezone, "UTC");
        r.retries = Some(11);
        assert_eq!(r.validate().unwrap_err().field, "retries");
        r.retries = None;
        for (d, ok) in [(0, false), (1, true), (MAX_STARTING_DEADLINE_SECONDS, true)] {
            r.starting_deadline_seconds = Some(d);
            assert_eq!(r.validate().is_ok(), ok, "{d}");
        }
        // Past a year (the fuzzer sent 2^63, which overflowed the scheduler's milliseconds).
        for d in [MAX_STARTING_DEADLINE_SECONDS + 1, 1 << 63] {
            r.starting_deadline_seconds = Some(d);
            let e = r.validate().unwrap_err();
            assert_eq!(e.field, "starting_deadline_seconds");
            let patch = UpdateScheduleRequest {
                starting_deadline_seconds: Some(d),
                ..Default::default()
            };
            assert_eq!(patch.validate().unwrap_err().field, e.field);
        }
        // In a patch 0 removes the deadline.
        let patch = UpdateScheduleRequest {
            starting_deadline_seconds: Some(0),
            ..Default::default()
        };
        patch.validate().unwrap();
        r.starting_deadline_seconds = None;
        r.name = "Bad".into();
        assert_eq!(r.validate().unwrap_err().field, "name");
        assert!(serde_json::from_str::<CreateScheduleRequest>(
            r#"{"name":"x","cron":"* * * * *","target":{"type":"sandbox_exec","template":"m","command":"c"},"extra":1}"#
        )
        .is_err());
    }
}
