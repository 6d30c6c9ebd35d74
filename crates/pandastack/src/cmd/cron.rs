//! `pandastack cron …` (alias `schedule`): schedules on a running server through the `/v1`
//! API — add (a cron expression that runs a command in a fresh sandbox, or calls a function, at
//! each due time), ls, get, runs (the history, newest first), run (now), pause, resume and rm.

use std::process::ExitCode;

use anyhow::Context;
use pandastack_client::types::{
    ConcurrencyPolicy, CreateScheduleRequest, FunctionTarget, SandboxExecTarget, Schedule,
    ScheduleRun, ScheduleTarget, DEFAULT_RUN_TIMEOUT_SECONDS,
};
use pandastack_client::Client;

use super::client_util::{client, parse_pairs, print_json, run_reported, ConnArgs, Table};

#[derive(Debug, clap::Args)]
pub struct CronArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: CronCmd,
}

#[derive(Debug, clap::Subcommand)]
enum CronCmd {
    /// Add a schedule: at each due time of --cron, --command runs in a new sandbox of
    /// --template (deleted after), with --payload in $PANDASTACK_PAYLOAD; or, with
    /// --function, the function is called with --payload as its event.
    Add(AddArgs),
    /// List schedules with their next due time.
    Ls(Json),
    /// Show one schedule.
    Get(NameJson),
    /// A schedule's runs, newest first.
    Runs(RunsArgs),
    /// Run a schedule's command now (a manual run).
    Run(NameJson),
    /// Stop a schedule from firing until resumed.
    Pause(NameJson),
    /// Let a paused schedule fire again (from now on).
    Resume(NameJson),
    /// Delete schedules (runs under way are cancelled) and their history.
    Rm(RmArgs),
}

#[derive(Debug, clap::Args)]
struct Json {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct NameJson {
    /// Schedule name or id.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Policy {
    Allow,
    Forbid,
    Replace,
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    /// Schedule name: 1-63 of [a-z0-9-], starting with a letter.
    name: String,
    /// Cron expression: 5 fields ('*/5 * * * *'), 6 with seconds first, or @hourly, @daily, …
    #[arg(long, value_name = "EXPR")]
    cron: String,
    /// IANA time zone the expression is read in (default UTC).
    #[arg(long, value_name = "TZ")]
    timezone: Option<String>,
    /// Template of each run's sandbox.
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Shell command to run.
    #[arg(long, value_name = "CMD", required_unless_present = "function")]
    command: Option<String>,
    /// Call this function instead of running a command (the payload is its event).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["command", "env"])]
    function: Option<String>,
    /// JSON handed to each run as $PANDASTACK_PAYLOAD.
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// An environment variable of the command (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// What a due time does while a previous run is under way (default allow).
    #[arg(long, value_enum)]
    policy: Option<Policy>,
    /// Due times found later than this (the server was down) are recorded missed.
    #[arg(long, value_name = "SECONDS")]
    deadline: Option<u64>,
    /// Attempts again after a failed run (0 to 10).
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// Longest a run's command may take.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_RUN_TIMEOUT_SECONDS)]
    timeout: u64,
    /// Create it paused.
    #[arg(long)]
    paused: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RunsArgs {
    /// Schedule name or id.
    name: String,
    /// How many (newest first).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Print JSON (with each run's output).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// Schedule names or ids.
    #[arg(required = true)]
    names: Vec<String>,
}

pub async fn run(args: CronArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

fn show(s: &Schedule, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(s);
    }
    SCHEDULES.print(std::slice::from_ref(s), false)
}

fn schedule_row(s: &Schedule) -> Vec<String> {
    vec![
        s.name.clone(),
        s.cron.clone(),
        s.timezone.clone(),
        s.concurrency_policy.as_str().to_owned(),
        s.paused.to_string(),
        s.next_run_at.clone().unwrap_or_else(|| "-".into()),
    ]
}

fn run_row(r: &ScheduleRun) -> Vec<String> {
    vec![
        r.id.clone(),
        r.due_at.clone(),
        serde_json::to_value(r.trigger)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        r.state.as_str().to_owned(),
        r.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        r.error.clone().unwrap_or_default(),
    ]
}

async fn dispatch(c: Client, cmd: CronCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        CronCmd::Add(a) => {
            let payload = a
                .payload
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .context("--payload: not JSON")?;
            let req = CreateScheduleRequest {
                name: a.name,
                cron: a.cron,
                timezone: a.timezone,
                target: match (a.function, a.command) {
                    (Some(name), _) => ScheduleTarget::Function(FunctionTarget { name }),
                    (None, command) => ScheduleTarget::SandboxExec(SandboxExecTarget {
                        template: a.template,
                        command: command.unwrap_or_default(),
                        env: parse_pairs("env", &a.env)?,
                        timeout_seconds: a.timeout,
                    }),
                },
                payload,
                concurrency_policy: a.policy.map(|p| match p {
                    Policy::Allow => ConcurrencyPolicy::Allow,
                    Policy::Forbid => ConcurrencyPolicy::Forbid,
                    Policy::Replace => ConcurrencyPolicy::Replace,
                }),
                starting_deadline_seconds: a.deadline,
                retries: Some(a.retries),
                paused: Some(a.paused),
            };
            show(&c.create_schedule(&req).await?, a.json)?;
        }
        CronCmd::Ls(a) => {
            let all = c.list_all_schedules().await?;
            SCHEDULES.print(&all, a.json)?;
        }
        CronCmd::Get(a) => show(&c.get_schedule(&a.name).await?, a.json)?,
        CronCmd::Runs(a) => {
            let page = c
                .list_schedule_runs(&a.name, Some(a.limit.clamp(1, 1000)), None)
                .await?;
            RUNS.print(&page.data, a.json)?;
        }
        CronCmd::Run(a) => {
            let r = c.run_schedule(&a.name).await?;
            if a.json {
                print_json(&r)?;
            } else {
                println!("{} {}", r.id, r.state.as_str());
            }
        }
        CronCmd::Pause(a) => show(&c.pause_schedule(&a.name).await?, a.json)?,
        CronCmd::Resume(a) => show(&c.resume_schedule(&a.name).await?, a.json)?,
        CronCmd::Rm(a) => {
            for n in &a.names {
                c.delete_schedule(n).await?;
                println!("{n} deleted");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `cron ls` and `cron get` shows (`--json`: the objects).
const SCHEDULES: Table<Schedule> = Table {
    header: &["NAME", "CRON", "TIMEZONE", "POLICY", "PAUSED", "NEXT RUN"],
    row: schedule_row,
};

/// What `cron runs` shows (`--json`: the objects).
const RUNS: Table<ScheduleRun> = Table {
    header: &["RUN", "DUE", "TRIGGER", "STATE", "EXIT", "ERROR"],
    row: run_row,
};

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: CronCmd,
    }

    fn add(args: &[&str]) -> Result<AddArgs, clap::Error> {
        let mut argv = vec!["cron", "add"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.cmd {
            CronCmd::Add(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn add_takes_a_command_or_a_function() {
        let a = add(&["n", "--cron", "* * * * *", "--command", "echo hi"]).unwrap();
        assert_eq!(a.command.as_deref(), Some("echo hi"));
        let a = add(&["n", "--cron", "* * * * *", "--function", "stats"]).unwrap();
        assert_eq!(a.function.as_deref(), Some("stats"));
        assert!(add(&["n", "--cron", "* * * * *"]).is_err());
        assert!(add(&[
            "n",
            "--cron",
            "* * * * *",
            "--command",
            "x",
            "--function",
            "f"
        ])
        .is_err());
    }
}
