//! `taskdaemon status [--json] [--watch]`: the tree plan → specs → runs, each with its
//! status, iteration, elapsed time, cost and why it waits; and whether the daemon runs.
//! The tree is the core's [`StatusSnapshot`]; `--watch` redraws it on every daemon event.

use clap::Args;
use taskdaemon_core::daemon::DaemonEvent;
use taskdaemon_core::daemon::ipc::{self, Request};
use taskdaemon_core::daemon::local::{self, ForegroundRun};
use taskdaemon_core::daemon::status::{self, RunView, StatusSnapshot};
use taskdaemon_core::store::{LoopKind, Records};

use super::daemon_link;
use super::{Ctx, emit, now_ms, print_json, store_err};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon status\n  taskdaemon status --json | jq '.plans[].specs[] | {id, status}'\n  taskdaemon status --watch\n\n\
`taskdaemon logs REF` shows a run's iteration logs; `taskdaemon show REF` one record in full.\n\n\
Exit codes: 0, or 69 when the shared queue did not answer (the runs and holders shown are the last good read)."
)]
pub struct StatusArgs {
    /// Print the tree as JSON (with --watch: one JSON line per change).
    #[arg(long)]
    pub json: bool,
    /// Keep showing it: redrawn on every change the running daemon reports.
    #[arg(long)]
    pub watch: bool,
}

fn secs(ms: u64) -> String {
    taskdaemon_core::duration::format_duration(std::time::Duration::from_millis(ms))
}

/// A status padded to `width`, coloured when stdout takes colour (NO_COLOR, TERM=dumb
/// and pipes get plain text).
fn painted(status: &str, width: usize) -> String {
    let padded = format!("{status:<width$}");
    crate::out::paint(&padded, crate::out::status_style(status), false)
}

/// The widest word a run's status column holds (`interrupted`).
const RUN_STATUS_WIDTH: usize = 11;

/// What a run is: its loop type, and for a phase run which phase ("phase 1 of 2", not
/// "phase phase 1 of 2").
fn run_kind(r: &RunView) -> String {
    match r.phase.as_ref().and_then(|p| p.as_str()) {
        Some(p) if r.loop_type == LoopKind::Phase => format!("phase {p}"),
        Some(p) => format!("{} phase {p}", r.loop_type),
        None => r.loop_type.to_string(),
    }
}

fn run_line(out: &mut String, indent: &str, r: &RunView, stale: bool) {
    let status = if r.interrupted {
        "interrupted"
    } else {
        r.status.as_str()
    };
    outln!(
        out,
        "{indent}run  {:<44} {} {}  iteration {}{}  {}{}",
        r.id,
        painted(status, RUN_STATUS_WIDTH),
        run_kind(r),
        r.iteration,
        r.last_outcome
            .as_deref()
            .map(|o| format!(" (last: {o})"))
            .unwrap_or_default(),
        secs(r.elapsed_ms),
        r.cost_usd.map(|c| format!("  ${c:.2}")).unwrap_or_default()
    );
    if let Some(h) = &r.held_by {
        let when = if stale {
            " (as of the last read of the queue)"
        } else {
            ""
        };
        outln!(out, "{indent}     held by {h}{when}");
    }
    if r.interrupted {
        outln!(
            out,
            "{indent}     not running: the daemon stopped; it resumes on `taskdaemon daemon start`"
        );
    } else if let Some(n) = &r.note {
        outln!(out, "{indent}     {n}");
    }
}

/// The shared queue's state when it could not be read; whether what is shown is stale.
fn queue_lines(out: &mut String, s: &StatusSnapshot) -> bool {
    let Some(q) = s.queue.as_ref().filter(|q| !q.reachable) else {
        return false;
    };
    outln!(
        out,
        "queue: UNREACHABLE — {}",
        q.problem.as_deref().unwrap_or("no answer")
    );
    match q.holders_read_at_ms {
        Some(ms) => outln!(
            out,
            "  the runs and holders below are as of the last good read ({}), not now",
            jiff::Timestamp::from_millisecond(ms)
                .map(taskdaemon_core::clock::rfc3339)
                .unwrap_or_else(|_| format!("{ms} ms"))
        ),
        None => outln!(
            out,
            "  who holds which run is not known until the queue answers"
        ),
    }
    true
}

fn daemon_lines(out: &mut String, s: &StatusSnapshot) {
    let Some(d) = &s.daemon else {
        outln!(out, "daemon: not running (`taskdaemon daemon start`)");
        return;
    };
    outln!(
        out,
        "daemon: pid {}, {} active of max {}",
        d.pid,
        d.active.len(),
        d.max_loops
    );
    for p in d.quota_governor.as_array().into_iter().flatten() {
        let until = p["until"]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(taskdaemon_core::agent::failure::describe_local)
            .unwrap_or_default();
        let restarts: Vec<&str> = p["restarts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["run"].as_str())
            .collect();
        outln!(
            out,
            "quota governor: {} paused until {until}: {}; restarts: {}",
            p["account"].as_str().unwrap_or_default(),
            p["reason"].as_str().unwrap_or_default(),
            restarts.join(", ")
        );
    }
    for lane in d.api_scheduler.as_array().into_iter().flatten() {
        let limit = |k: &str| {
            lane[k]
                .as_u64()
                .map_or("no limit".into(), |n| n.to_string())
        };
        outln!(
            out,
            "api scheduler: {}: {} in flight (max {}), {} waiting, {} requests in the last minute (limit {}), {} tokens (limit {})",
            lane["lane"].as_str().unwrap_or_default(),
            lane["in_flight"],
            lane["max_concurrent"],
            lane["waiting"],
            lane["requests_last_minute"],
            limit("requests_per_minute"),
            lane["tokens_last_minute"],
            limit("tokens_per_minute"),
        );
    }
}

/// The tree as text.
pub fn render(s: &StatusSnapshot) -> String {
    let mut out = String::new();
    let stale = queue_lines(&mut out, s);
    daemon_lines(&mut out, s);
    for p in &s.plans {
        outln!(
            out,
            "plan {:<44} {} {}",
            p.id,
            painted(&p.status, 11),
            p.title
        );
        if let Some(n) = &p.note {
            outln!(out, "     {n}");
        }
        for r in &p.runs {
            run_line(&mut out, "  ", r, stale);
        }
        for sp in &p.specs {
            outln!(
                out,
                "  spec {:<42} {} {}",
                sp.id,
                painted(&sp.status, 9),
                sp.title
            );
            if let Some(n) = &sp.note {
                outln!(out, "       {n}");
            } else if !sp.ready && sp.status == "pending" {
                let w: Vec<String> = sp
                    .waiting
                    .iter()
                    .map(|(id, st)| format!("{id} ({st})"))
                    .collect();
                outln!(out, "       waiting for {}", w.join(", "));
            }
            for r in &sp.runs {
                run_line(&mut out, "    ", r, stale);
            }
        }
    }
    if !s.runs.is_empty() {
        outln!(out, "runs");
        for r in &s.runs {
            run_line(&mut out, "  ", r, stale);
        }
    }
    foreground_lines(&mut out, &s.foreground);
    uncommitted_lines(&mut out, &s.uncommitted);
    out
}

/// The repository's loops in the foreground (not the daemon's).
fn foreground_lines(out: &mut String, runs: &[ForegroundRun]) {
    if runs.is_empty() {
        return;
    }
    outln!(out, "foreground (not the daemon's)");
    for r in runs {
        outln!(
            out,
            "  run  {:<44} {} {}  iteration {}/{}  {}{}",
            r.id,
            painted("running", RUN_STATUS_WIDTH),
            r.loop_type,
            r.iteration,
            r.max_iterations,
            secs(r.elapsed_ms),
            r.cost_usd.map(|c| format!("  ${c:.2}")).unwrap_or_default()
        );
        let pid = r.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
        outln!(out, "       {} (in {}{pid})", r.title, r.dir.display());
    }
}

/// The plan's files git has not got, and the command that commits them.
fn uncommitted_lines(out: &mut String, paths: &[String]) {
    if paths.is_empty() {
        return;
    }
    let shown: Vec<&str> = paths.iter().take(4).map(String::as_str).collect();
    let more = paths.len().saturating_sub(shown.len());
    outln!(
        out,
        "not committed: {}{}",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    outln!(
        out,
        "  hint: `git add .taskdaemon && git commit -m \"taskdaemon: plans\"` keeps them with the repository (a clone or another machine sees the plan)"
    );
}

/// The snapshot: from the daemon when one runs, else from the store.
fn snapshot(paths: &taskdaemon_core::daemon::DaemonPaths) -> anyhow::Result<StatusSnapshot> {
    if let Ok(Some(r)) = daemon_link::call(paths, &Request::Snapshot)
        && r.ok
        && let Ok(s) = serde_json::from_value(r.data)
    {
        return Ok(s);
    }
    let mut records = Records::open(&paths.project).map_err(store_err)?;
    // Held work a person has taken into its target since: its note goes.
    let _ = status::clear_taken_holds(&mut records, &paths.project, now_ms());
    let cache = paths.queue_holders();
    let cache = Some(cache.as_path()).filter(|p| p.parent().is_some_and(std::path::Path::is_dir));
    status::snapshot(&records, None, cache).map_err(store_err)
}

pub fn run(args: StatusArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    if args.watch {
        return watch(&paths, args.json);
    }
    let mut s = snapshot(&paths)?;
    let daemon_pid = s.daemon.as_ref().map(|d| d.pid);
    s.foreground = local::foreground_runs(&paths.project, daemon_pid);
    s.uncommitted = local::uncommitted_records(&paths.project);
    if args.json {
        print_json(&s)?;
    } else {
        emit(&render(&s))?;
    }
    // The shared queue did not answer: what was shown is not the truth of now.
    if s.queue.as_ref().is_some_and(|q| !q.reachable) {
        return Ok(QUEUE_UNREACHABLE);
    }
    Ok(0)
}

/// `status`'s exit code when the shared queue cannot be read (sysexits' EX_UNAVAILABLE).
pub const QUEUE_UNREACHABLE: i32 = 69;

/// Redraw on every event of the daemon's stream (agent lines excepted) until it stops.
fn watch(paths: &taskdaemon_core::daemon::DaemonPaths, json: bool) -> anyhow::Result<i32> {
    if !paths.is_running() {
        return Err(user(format!(
            "no daemon runs for {}, so nothing changes to watch\n  hint: `taskdaemon status` shows the store; `taskdaemon daemon start` starts the daemon",
            paths.project.display()
        )));
    }
    let socket = paths
        .read_info()
        .map(|i| i.socket)
        .unwrap_or_else(|| paths.socket());
    let sub = ipc::subscribe(&socket)?;
    let clear = !json && std::io::IsTerminal::is_terminal(&std::io::stdout());
    for e in sub {
        let e = e?;
        let s = match e {
            DaemonEvent::Snapshot(s) => s,
            DaemonEvent::DaemonStopped { .. } => {
                emit("-- the daemon stopped --\n")?;
                return Ok(0);
            }
            DaemonEvent::AgentLine { .. }
            | DaemonEvent::AgentActivity { .. }
            | DaemonEvent::Lagged { .. } => continue,
            _ => snapshot(paths)?,
        };
        if json {
            print_json(&s)?;
        } else {
            let head = if clear { "\x1b[H\x1b[2J" } else { "" };
            emit(&format!("{head}{}\n", render(&s)))?;
        }
        if crate::out::stdout_closed() {
            return Ok(0);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdaemon_core::store::RunStatus;

    fn view(loop_type: LoopKind, phase: Option<&str>, interrupted: bool) -> RunView {
        RunView {
            id: "r1".into(),
            title: String::new(),
            loop_type,
            status: RunStatus::Running,
            interrupted,
            iteration: 2,
            last_outcome: None,
            elapsed_ms: 1000,
            cost_usd: None,
            worktree: None,
            note: None,
            phase: phase.map(|p| serde_json::Value::String(p.into())),
            held_by: None,
            tasks: Vec::new(),
        }
    }

    #[test]
    fn a_phase_run_says_phase_once_and_every_status_keeps_the_columns() {
        let mut out = String::new();
        run_line(
            &mut out,
            "",
            &view(LoopKind::Phase, Some("1 of 2"), false),
            false,
        );
        assert!(out.contains(" phase 1 of 2  iteration 2"), "{out}");
        assert!(!out.contains("phase phase"), "{out}");
        let (mut a, mut b) = (String::new(), String::new());
        run_line(&mut a, "", &view(LoopKind::Ralph, None, true), false);
        run_line(&mut b, "", &view(LoopKind::Ralph, None, false), false);
        let col = |t: &str| t.lines().next().unwrap().find(" ralph").unwrap();
        assert_eq!(col(&a), col(&b), "interrupted keeps the column:\n{a}{b}");
    }
}
