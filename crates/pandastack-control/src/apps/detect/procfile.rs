//! Procfiles (Heroku's): the `web:` line is the start command.

use super::ServedBy;

/// The command of a Procfile's `web:` line.
pub(super) fn web_line(procfile: &str) -> Option<String> {
    procfile.lines().find_map(|line| {
        let (kind, cmd) = line.split_once(':')?;
        let cmd = cmd.trim();
        (kind.trim() == "web" && !cmd.is_empty()).then(|| cmd.to_string())
    })
}

/// A Procfile line, with the installed tools on `PATH` (Heroku's buildpacks put them there).
pub(super) fn with_path(web: &str, eco: Option<&ServedBy>) -> String {
    match eco {
        Some(ServedBy::Node) => format!("export PATH=\"$PWD/node_modules/.bin:$PATH\"; {web}"),
        Some(ServedBy::Python) => format!("export PATH=\"$PWD/.venv/bin:$PATH\"; {web}"),
        _ => web.to_string(),
    }
}
