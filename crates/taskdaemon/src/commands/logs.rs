//! `taskdaemon logs [REF] [--follow] [--json]`: the iteration logs of a run (of a spec or
//! plan: its latest run), from its worktree, or from the daemon's copy once the worktree is
//! removed; without REF (or with the id of the local run), the local `run`/`task` of this
//! directory (`.ralph/logs`).
//!
//! `--follow` on a daemon run reads on the daemon's events (pushed, not polled) until the
//! run stops; on a local run it follows the files until the run's lock is released.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use taskdaemon_core::agent::readable::{LogReader, readable_log};
use taskdaemon_core::daemon::ipc;
use taskdaemon_core::daemon::{DaemonEvent, DaemonPaths};
use taskdaemon_core::engine::RunState;
use taskdaemon_core::store::{AnyRecord, LoopRun, Records, RunStatus};
use taskdaemon_core::workspace::Workspace;
use taskstore::Filter;

use super::daemon_link;
use super::{Ctx, emit, print_json, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon logs                      # the local run of this directory\n  taskdaemon logs 4d5e6f\n  taskdaemon logs spec-oauth-db -f       # or --follow\n  taskdaemon logs 4d5e6f --json | jq -r .text"
)]
pub struct LogsArgs {
    /// A run, or a spec or plan (its latest run) [default: the local run of this directory].
    pub reference: Option<String>,
    /// Keep printing as the run writes, until it stops running (as `tail -f`).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// One JSON object per piece of a log: `{"run", "file", "text"}`, then `{"run", "status"}`.
    #[arg(long)]
    pub json: bool,
    /// The logs as written: the agents' JSON streams unchanged (else their words, one line per tool call).
    #[arg(long)]
    pub raw: bool,
}

fn latest_run(records: &Records, rec: AnyRecord) -> anyhow::Result<LoopRun> {
    match rec {
        AnyRecord::Run(r) => Ok(r),
        other => {
            let id = other.id().to_string();
            taskdaemon_core::scheduler::runs(records, &[Filter::eq("parent", id.as_str())])
                .map_err(store_err)?
                .pop()
                .ok_or_else(|| user(format!("{id} has no runs yet\n  hint: `taskdaemon status` shows what waits for what")))
        }
    }
}

/// Directories that may hold the run's iteration logs, most likely first.
fn log_dirs(paths: &DaemonPaths, run: &LoopRun) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut bases = Vec::new();
    if let Some(wt) = &run.worktree {
        let wt = PathBuf::from(wt);
        if let Some(name) = wt.file_name() {
            bases.push(paths.kept_logs(&name.to_string_lossy()));
        }
        bases.push(wt.join(".ralph"));
    }
    for b in bases {
        let logs = b.join("logs");
        dirs.extend(taskdaemon_core::workspace::earlier_run_dirs(&logs, &run.id));
        // The current run's logs are at the top of logs/ while run.json names it.
        let state = std::fs::read_to_string(b.join("run.json")).unwrap_or_default();
        if state.contains(&format!("\"run_id\": \"{}\"", run.id)) {
            dirs.push(logs);
        }
    }
    dirs
}

fn iteration_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.starts_with("iteration-") && n.ends_with(".log")
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What was printed of each file, and how.
struct Printer {
    run: String,
    json: bool,
    /// The logs as written, not read through [`LogReader`].
    raw: bool,
    shown: BTreeMap<PathBuf, u64>,
    readers: BTreeMap<PathBuf, LogReader>,
}

impl Printer {
    fn new(run: &str, args: &LogsArgs) -> Printer {
        Printer {
            run: run.to_string(),
            json: args.json,
            raw: args.raw,
            shown: BTreeMap::new(),
            readers: BTreeMap::new(),
        }
    }

    /// Print what the files of `dir` gained since the last look: read, whole lines only
    /// (the rest waits for its end of line), unless raw.
    fn catch_up(&mut self, dir: &Path) -> anyhow::Result<()> {
        for f in iteration_files(dir) {
            let Ok(bytes) = std::fs::read(&f) else {
                continue;
            };
            let from = self.shown.get(&f).copied().unwrap_or(0) as usize;
            let upto = if self.raw {
                bytes.len()
            } else {
                bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
            };
            if upto <= from {
                continue;
            }
            let piece = String::from_utf8_lossy(&bytes[from..upto]);
            let text = if self.raw {
                piece.into_owned()
            } else {
                let reader = self.readers.entry(f.clone()).or_default();
                let mut out = String::new();
                for line in piece.lines() {
                    for l in reader.line(line) {
                        out.push_str(&l);
                        out.push('\n');
                    }
                }
                out
            };
            if self.json {
                print_json(&serde_json::json!({"run": self.run, "file": f, "text": text}))?;
            } else {
                if from == 0 {
                    emit(&format!("==> {} <==\n", f.display()))?;
                }
                emit(&text)?;
            }
            self.shown.insert(f.clone(), upto as u64);
        }
        Ok(())
    }

    fn end(&self, status: &str, line: &str) -> anyhow::Result<()> {
        if self.json {
            print_json(&serde_json::json!({"run": self.run, "status": status}))
        } else {
            emit(&format!("{line}\n"))
        }
    }
}

pub fn run(args: LogsArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let Some(reference) = args.reference.clone() else {
        return local(ctx, None, &args);
    };
    let paths = daemon_link::paths(ctx)?;
    let found = Records::open(&paths.project)
        .map_err(store_err)
        .and_then(|r| r.find(&reference).map_err(store_err).map(|rec| (r, rec)));
    match found {
        Ok((records, rec)) => daemon_run(&paths, records, rec, &args),
        Err(e) => {
            let (_, ws) = ctx.workspace()?;
            match local_dir(&ws, Some(&reference)) {
                Ok(Some(_)) => local(ctx, Some(&reference), &args),
                Ok(None) | Err(_) => Err(e),
            }
        }
    }
}

fn is_active(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Running | RunStatus::Pending | RunStatus::Rebasing
    )
}

/// The iteration logs the queue holds (the last 256 KiB of each), as the daemons put them
/// there after each iteration; `--follow` looks again every second until the run ends.
fn queue_logs(records: &mut Records, mut run: LoopRun, args: &LogsArgs) -> anyhow::Result<i32> {
    let mut shown = 0u32;
    loop {
        for (n, text) in records.logs(&run.id).map_err(store_err)? {
            if n <= shown {
                continue;
            }
            let text = if args.raw { text } else { readable_log(&text) };
            if args.json {
                print_json(&serde_json::json!({"run": run.id, "iteration": n, "text": text}))?;
            } else {
                emit(&format!(
                    "==> run {} iteration {n} (from the queue) <==\n{text}",
                    run.id
                ))?;
            }
            shown = n;
        }
        if !args.follow || !is_active(run.status) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        records.sync().map_err(store_err)?;
        if let Ok(Some(AnyRecord::Run(r))) = records.get(&run.id) {
            run = r;
        }
    }
    if shown == 0 && !args.json {
        emit(&format!(
            "run {} ({}) has no iteration logs yet\n",
            run.id,
            run.status.as_str()
        ))?;
    } else if args.json {
        print_json(&serde_json::json!({"run": run.id, "status": run.status.as_str()}))?;
    }
    Ok(0)
}

fn daemon_run(
    paths: &DaemonPaths,
    mut records: Records,
    rec: AnyRecord,
    args: &LogsArgs,
) -> anyhow::Result<i32> {
    let reference = rec.id().to_string();
    let mut run = latest_run(&records, rec)?;
    let mut p = Printer::new(&run.id, args);
    let dir = |run: &LoopRun| {
        log_dirs(paths, run)
            .into_iter()
            .find(|d| !iteration_files(d).is_empty())
    };
    if records.queue().is_some() {
        // Shared queue: its set of iteration logs is the run's, whichever machines ran
        // them (this machine's files may lack another's iterations, or hold one a killed
        // daemon's agent wrote that never counted). Only a run followed while it works
        // here is read from its files, which show the iteration under way.
        let here = dir(&run);
        let live_here = args.follow && is_active(run.status) && here.is_some();
        if here.is_none() || (!live_here && !records.logs(&run.id).map_err(store_err)?.is_empty()) {
            return queue_logs(&mut records, run, args);
        }
    }
    if let Some(d) = dir(&run) {
        p.catch_up(&d)?;
    } else if !args.follow || !is_active(run.status) {
        p.end(
            run.status.as_str(),
            &format!(
                "run {} ({}) has no iteration logs yet",
                run.id,
                run.status.as_str()
            ),
        )?;
        return Ok(0);
    }
    if !args.follow || !is_active(run.status) {
        return Ok(0);
    }
    let socket = paths.read_info().map(|i| i.socket);
    let sub = match socket.filter(|_| paths.is_running()) {
        Some(s) => ipc::subscribe(&s)?,
        None => {
            p.end(
                run.status.as_str(),
                &format!(
                    "-- run {} is {}, and no daemon runs: `taskdaemon daemon start` goes on with it --",
                    run.id,
                    run.status.as_str()
                ),
            )?;
            return Ok(0);
        }
    };
    // The events are read on a thread; every second without one, the record is read again:
    // a run that ended while this subscribed (its end events sent before the follower was
    // listening) is then seen without waiting for an event that will not come.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for e in sub {
            if tx.send(e).is_err() {
                return;
            }
        }
    });
    loop {
        let e = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(e) => Some(e?),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if matches!(e, Some(DaemonEvent::DaemonStopped { .. })) {
            p.end(
                "interrupted",
                &format!(
                    "-- the daemon stopped; run {} resumes on its next start --",
                    run.id
                ),
            )?;
            return Ok(0);
        }
        if let Some(e) = &e {
            let about = e.subject().is_some_and(|s| {
                s.run == run.id
                    || s.spec.as_deref() == Some(reference.as_str())
                    || s.plan.as_deref() == Some(reference.as_str())
            });
            if !about && !matches!(e, DaemonEvent::Snapshot(_) | DaemonEvent::Lagged { .. }) {
                continue;
            }
        }
        let _ = records.sync();
        if let Ok(rec) = records.find(&reference) {
            let newer = latest_run(&records, rec)?;
            if newer.id != run.id {
                if let Some(d) = dir(&run) {
                    p.catch_up(&d)?;
                }
                emit(&format!("-- next: run {} --\n", newer.id))?;
                p = Printer::new(&newer.id, args);
            }
            run = newer;
        }
        if let Some(d) = dir(&run) {
            p.catch_up(&d)?;
        }
        if !is_active(run.status) || crate::out::stdout_closed() {
            p.end(
                run.status.as_str(),
                &format!("-- run {} is {} --", run.id, run.status.as_str()),
            )?;
            return Ok(0);
        }
    }
    Ok(0)
}

/// The log directory of the local run `reference` (none: the current one) of `ws`.
/// `Err`: the current run is asked for, its state is damaged and there are no logs to
/// show anyway.
fn local_dir(ws: &Workspace, reference: Option<&str>) -> anyhow::Result<Option<(String, PathBuf)>> {
    let current = match (RunState::load(ws), reference) {
        (Ok(st), _) => st.map(|s| s.run_id),
        // A reference names a run set aside (or the current one, unknowable now).
        (Err(_), Some(_)) => None,
        (Err(e), None) if iteration_files(&ws.logs_dir()).is_empty() => return Err(user(e)),
        // Damaged: its logs are still there to show, under no run id.
        (Err(e), None) => {
            eprintln!(
                "taskdaemon: warning: {e}\ntaskdaemon: showing the logs in {} anyway",
                ws.logs_dir().display()
            );
            Some("(run.json unreadable)".into())
        }
    };
    Ok(match (reference, current) {
        (None, Some(id)) => Some((id, ws.logs_dir())),
        (Some(r), Some(id)) if id.starts_with(r) => Some((id, ws.logs_dir())),
        (Some(r), _) => ws
            .earlier_run_logs(r)
            .into_iter()
            .find(|d| !iteration_files(d).is_empty())
            .map(|d| (r.to_string(), d)),
        (None, None) => None,
    })
}

/// A local run (`run`, `task`) of this directory: its files; `--follow` until its lock goes.
fn local(ctx: &Ctx, reference: Option<&str>, args: &LogsArgs) -> anyhow::Result<i32> {
    let (dir, ws) = ctx.workspace()?;
    let Some((id, logs)) = local_dir(&ws, reference)? else {
        return Err(user(format!(
            "no local run in {} (no .ralph/run.json)\n  hint: name a daemon run: `taskdaemon status` lists them",
            dir.display()
        )));
    };
    let mut p = Printer::new(&id, args);
    loop {
        // Read whether it still runs first: what it wrote before ending is then read below.
        let running = args.follow && ws.is_locked();
        p.catch_up(&logs)?;
        if !running || crate::out::stdout_closed() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let state = RunState::load(&ws).ok().flatten();
    let status = state
        .as_ref()
        .and_then(|s| s.outcome.as_ref())
        .map(|o| o.label().to_string())
        .unwrap_or_else(|| {
            if ws.is_locked() {
                "running".into()
            } else {
                "stopped".into()
            }
        });
    if args.follow || args.json {
        p.end(&status, &format!("-- run {id} is {status} --"))?;
    }
    Ok(0)
}
