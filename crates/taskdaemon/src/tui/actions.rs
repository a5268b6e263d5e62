//! What the keys do to runs: through the daemon's socket, or on a run's `.ralph/` files.

use std::time::Duration;

use taskdaemon_core::daemon::control::Action as Verb;
use taskdaemon_core::daemon::ipc::{self, Request};
use taskdaemon_core::workspace::Workspace;

use super::app::App;
use super::source::Source;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `pause`, `resume`, `start` or `cancel` through the daemon.
    Control { verb: Verb, run: String },
    /// Remove the run's BLOCKED file and resume it.
    Unblock { run: String },
    /// Write the answer to the run's DECIDE and resume it.
    Answer { run: String, text: String },
    /// `taskdaemon report RUN`.
    Report { run: String },
}

impl Action {
    pub fn describe(&self) -> String {
        match self {
            Action::Control { verb, run } => format!("{} {run}", verb.as_str()),
            Action::Unblock { run } => format!("unblock {run}"),
            Action::Answer { run, .. } => format!("answer {run}"),
            Action::Report { run } => format!("report {run}"),
        }
    }

    /// Whether it ends or throws away something: asked for confirmation first.
    pub fn destroys(&self) -> bool {
        matches!(
            self,
            Action::Control {
                verb: Verb::Cancel,
                ..
            } | Action::Unblock { .. }
        )
    }
}

/// Do `a`; the line for the status bar.
pub fn perform(app: &mut App, a: &Action) -> String {
    let result = match a {
        Action::Control { verb, run } => control(app, *verb, run),
        Action::Unblock { run } => unblock(app, run),
        Action::Answer { run, text } => answer(app, run, text),
        Action::Report { run } => report(app, run),
    };
    match result {
        Ok(line) => line,
        Err(e) => format!("{}: {e}", a.describe()),
    }
}

fn control(app: &App, verb: Verb, run: &str) -> Result<String, String> {
    let name = verb.as_str();
    if let (Source::Local { dir, .. }, Verb::Cancel) = (&app.source, verb) {
        return cancel_foreground(dir);
    }
    let Source::Daemon { paths, .. } = &app.source else {
        return Err(format!(
            "a foreground loop cannot be told to {name}: `c` cancels it (it resumes with `taskdaemon run --resume`)"
        ));
    };
    let socket = paths
        .read_info()
        .map(|i| i.socket)
        .unwrap_or_else(|| paths.socket());
    let req = Request::Control {
        action: verb,
        reference: run.to_string(),
        // A second pause of a run that is pausing stops it at once (the daemon's rule).
        force: false,
    };
    let resp = ipc::call(&socket, &req, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    if resp.ok {
        Ok(first_line(&resp.message, &format!("{name}: done")))
    } else {
        Err(first_line(&resp.message, "refused"))
    }
}

/// `taskdaemon -C DIR cancel`: TERM to the foreground loop holding the run lock there (it
/// stops its agents and can be resumed with `run --resume`).
fn cancel_foreground(dir: &std::path::Path) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg("-C")
        .arg(dir)
        .arg("cancel")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(first_line(&text, "cancelled"))
    } else {
        Err(first_line(&text, "cancel failed"))
    }
}

fn first_line(s: &str, or: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(or)
        .to_string()
}

fn workspace_of(app: &App, run: &str) -> Result<Workspace, String> {
    app.model
        .runs
        .get(run)
        .and_then(|r| r.workdir.as_ref())
        .map(|d| Workspace::new(d))
        .ok_or_else(|| format!("run {run} has no work directory yet"))
}

fn unblock(app: &mut App, run: &str) -> Result<String, String> {
    let ws = workspace_of(app, run)?;
    let removed = ws.remove_blocked().map_err(|e| e.to_string())?;
    let what = if removed.is_some() {
        "unblocked"
    } else {
        "was not blocked"
    };
    resume_after(app, run, what)
}

fn answer(app: &mut App, run: &str, text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("the answer is empty; press `a` and type it".into());
    }
    let ws = workspace_of(app, run)?;
    ws.answer(text).map_err(|e| e.to_string())?;
    resume_after(app, run, "answered")
}

/// A daemon run goes on at once; a foreground one with `taskdaemon run --resume`.
fn resume_after(app: &App, run: &str, what: &str) -> Result<String, String> {
    match &app.source {
        Source::Daemon { .. } => {
            let line = control(app, Verb::Resume, run)?;
            Ok(format!("{what}; {line}"))
        }
        Source::Local { .. } => Ok(format!("{what}; continue with `taskdaemon run --resume`")),
    }
}

fn report(app: &App, run: &str) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg("-C")
        .arg(&app.model.repository)
        .args(["report", run])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        return Ok(first_line(&format!("{stdout}\n{stderr}"), "report written"));
    }
    if stderr.contains("unrecognized subcommand") {
        let logs = workspace_of(app, run).map(|ws| ws.logs_dir().display().to_string());
        return Ok(format!(
            "`taskdaemon report` is not in this build; the run's logs are in {}",
            logs.unwrap_or_else(|e| e)
        ));
    }
    Err(first_line(&stderr, "report failed"))
}

/// Write the visible iteration's log to `.ralph/exports/` of the repository (ignored by
/// git), never into the repository itself.
pub fn export(app: &App) -> String {
    let Some(r) = app.selected_run() else {
        return "no run selected".into();
    };
    let lines = app.log.all();
    if lines.is_empty() {
        return "the log is empty: nothing to export".into();
    }
    match taskdaemon_core::watch::export_log(&app.model.repository, &r.id, r.iteration, &lines) {
        Ok(path) => format!("exported {} lines to {}", lines.len(), path.display()),
        Err(e) => format!("export failed: {e}"),
    }
}
