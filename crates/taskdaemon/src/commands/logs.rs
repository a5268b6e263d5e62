//! `taskdaemon logs REF [--follow]`: the iteration logs of a run (of a spec or plan: its
//! latest run), from its worktree, or from the daemon's copy once the worktree is removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use taskdaemon_core::daemon::DaemonPaths;
use taskdaemon_core::store::{AnyRecord, LoopRun, Records, RunStatus};
use taskstore::Filter;

use super::daemon_link;
use super::{Ctx, emit, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  taskdaemon logs 4d5e6f\n  taskdaemon logs spec-oauth-db --follow"
)]
pub struct LogsArgs {
    /// A run, or a spec or plan (its latest run).
    pub reference: String,
    /// Keep printing as the run writes, until it stops running (no -f: -f means "from FILE").
    #[arg(long)]
    pub follow: bool,
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
        dirs.push(b.join("logs").join(&run.id));
        // The current run's logs are at the top of logs/ while run.json names it.
        let state = std::fs::read_to_string(b.join("run.json")).unwrap_or_default();
        if state.contains(&format!("\"run_id\": \"{}\"", run.id)) {
            dirs.push(b.join("logs"));
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

pub fn run(args: LogsArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    let mut records = Records::open(&paths.project).map_err(store_err)?;
    let rec = records.find(&args.reference).map_err(store_err)?;
    let reference = rec.id().to_string();
    let mut run = latest_run(&records, rec)?;
    let mut shown: std::collections::BTreeMap<PathBuf, u64> = Default::default();
    let mut last_look = false;
    loop {
        let dir = log_dirs(&paths, &run)
            .into_iter()
            .find(|d| !iteration_files(d).is_empty());
        if let Some(dir) = &dir {
            for f in iteration_files(dir) {
                let Ok(bytes) = std::fs::read(&f) else {
                    continue;
                };
                let from = shown.get(&f).copied().unwrap_or(0) as usize;
                if bytes.len() > from {
                    if from == 0 {
                        emit(&format!("==> {} <==\n", f.display()))?;
                    }
                    emit(&String::from_utf8_lossy(&bytes[from..]))?;
                    shown.insert(f.clone(), bytes.len() as u64);
                }
            }
        }
        if !args.follow || crate::out::stdout_closed() {
            if dir.is_none() {
                emit(&format!(
                    "run {} ({}) has no iteration logs yet\n",
                    run.id,
                    run.status.as_str()
                ))?;
            }
            return Ok(0);
        }
        if last_look {
            emit(&format!(
                "-- run {} is {} --\n",
                run.id,
                run.status.as_str()
            ))?;
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(300));
        let _ = records.sync();
        // The run as it is now (its worktree appears when it starts); for a spec or plan,
        // its newest run (the next phase).
        if let Ok(rec) = records.find(&reference) {
            let newer = latest_run(&records, rec)?;
            if newer.id != run.id {
                emit(&format!("-- next: run {} --\n", newer.id))?;
                shown.clear();
            }
            run = newer;
        }
        // One more read once it stopped, for what it wrote last.
        last_look = !matches!(
            run.status,
            RunStatus::Running | RunStatus::Pending | RunStatus::Rebasing
        );
    }
}
