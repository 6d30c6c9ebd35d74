//! The build and start commands of a plan: the request's overrides, else a Procfile `web:`
//! line (start only), else the matched rule's.

use std::path::{Component, Path};

use super::django::django_start;
use super::files::Facts;
use super::node::{node_start, Manager, PackageJson};
use super::procfile::with_path;
use super::pystart::{asgi_start, flask_start, python_start};
use super::{
    clip, quote, Build, BuildPlan, DetectError, Overrides, Rule, ServedBy, Start, STATIC_NOTE,
    STATIC_SERVER,
};

pub(super) fn build(
    o: &Overrides,
    rule: &Rule,
    pkg: Option<&PackageJson>,
    m: Option<&Manager>,
    d: &mut Vec<String>,
) -> Option<String> {
    if let Some(cmd) = &o.build_command {
        d.push(format!("build: `{cmd}` (override from the request)"));
        return Some(cmd.clone());
    }
    let (Build::Script(fallback), Some(pkg), Some(m)) = (&rule.build, pkg, m) else {
        d.push("build: none".into());
        return None;
    };
    let cmd = if pkg.script("build").is_some() {
        let cmd = m.run("build");
        d.push(format!("build: `{cmd}` (script `build`)"));
        cmd
    } else if let Some(bin) = fallback {
        let cmd = format!("{} {bin}", m.pm.exec());
        d.push(format!("build: `{cmd}` (no `build` script)"));
        cmd
    } else {
        d.push("build: none (no `build` script)".into());
        return None;
    };
    Some(cmd)
}

/// Sets the start, and with it the runtime and the output directory: the request's start
/// command, else the request's output directory (static), else a Procfile `web:` line, else
/// the rule's.
pub(super) fn start(
    f: &Facts,
    o: &Overrides,
    rule: &Rule,
    m: Option<&Manager>,
    eco: Option<ServedBy>,
    plan: &mut BuildPlan,
) -> Result<(), DetectError> {
    let d = &mut plan.decisions;
    let requested_dir = match &o.output_dir {
        Some(dir) => Some(checked_output_dir(dir)?),
        None => None,
    };
    let procfile = f.procfile.as_ref();
    let (cmd, output) = if let Some(cmd) = &o.start_command {
        d.push(format!("start: `{cmd}` (override from the request)"));
        (cmd.clone(), requested_dir)
    } else if let Some(dir) = requested_dir {
        d.push(format!(
            "start: static server over {dir} (output_dir from the request); {STATIC_NOTE}"
        ));
        (static_start(&dir), Some(dir))
    } else if let Some(Some(web)) = procfile {
        d.push("start: Procfile web line".into());
        (with_path(web, eco.as_ref()), None)
    } else {
        if let Some(None) = procfile {
            if !rule.flexible() {
                d.push("Procfile: no `web:` line; ignored".into());
            }
        }
        rule_start(f, rule, m, d)?
    };
    let serves_static = output.is_some() && o.start_command.is_none();
    plan.runtime = if serves_static {
        ServedBy::Static
    } else if rule.runtime == ServedBy::Python
        || (rule.runtime == ServedBy::Node && !rule.flexible())
    {
        rule.runtime.clone()
    } else {
        eco.unwrap_or_else(|| runtime_of(&cmd))
    };
    if let Some(dir) = &output {
        let from = if o.output_dir.is_some() {
            "override from the request".to_string()
        } else {
            format!("{}'s output", rule.name)
        };
        plan.decisions.push(format!("output: {dir} ({from})"));
    }
    plan.start = cmd;
    plan.output_dir = output;
    Ok(())
}

/// The rule's own start: (command, output directory).
fn rule_start(
    f: &Facts,
    rule: &Rule,
    m: Option<&Manager>,
    d: &mut Vec<String>,
) -> Result<(String, Option<String>), DetectError> {
    let exec = m.map_or("npx", |m| m.pm.exec());
    let (cmd, why, output) = match &rule.start {
        Start::Static => {
            let dir = rule.output_dir.unwrap_or(".").to_string();
            let why = format!("static server over {dir}");
            (static_start(&dir), why, Some(dir))
        }
        Start::Exec(bin) => (format!("{exec} {bin}"), String::new(), None),
        Start::Shell(cmd) => (cmd.to_string(), String::new(), None),
        Start::Node => {
            let (cmd, why) = node_start(f, m)?;
            (cmd, why, None)
        }
        Start::Flask => python_entry(flask_start(f, d)?),
        Start::FastApi => python_entry(asgi_start(f, rule.name, d)?),
        Start::Django => python_entry(django_start(f)?),
        Start::Python => python_entry(python_start(f)?),
        Start::Procfile => return Err(DetectError::ProcfileWithoutWeb),
        Start::Refuse(advice) => {
            return Err(DetectError::Unsupported {
                framework: rule.name,
                advice,
            })
        }
    };
    let mut line = format!("start: `{cmd}`");
    let why = [why.as_str(), rule.note]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if !why.is_empty() {
        line += &format!(" ({why})");
    }
    d.push(line);
    Ok((cmd, output))
}

fn python_entry((cmd, why): (String, String)) -> (String, String, Option<String>) {
    (cmd, why, None)
}

fn static_start(dir: &str) -> String {
    format!("node {STATIC_SERVER} {}", quote(dir))
}

/// A guess at the runtime of a command when no files say it.
fn runtime_of(cmd: &str) -> ServedBy {
    let first = cmd.split_whitespace().next().unwrap_or("");
    let name = first.rsplit('/').next().unwrap_or(first);
    if [
        "python",
        "gunicorn",
        "uvicorn",
        "flask",
        "hypercorn",
        "daphne",
    ]
    .iter()
    .any(|p| name.starts_with(p))
    {
        ServedBy::Python
    } else {
        ServedBy::Node
    }
}

/// A relative directory inside the repository, or an error.
fn checked_output_dir(dir: &str) -> Result<String, DetectError> {
    let path = Path::new(dir);
    let inside = !dir.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(dir.to_string())
    } else {
        Err(DetectError::BadOutputDir(clip(dir)))
    }
}
