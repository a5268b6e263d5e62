//! `taskdaemon cancel [TARGET]`: stop a running loop and clean up its state. A directory
//! (or no target: the current spec) cancels that spec's `implement` loop: TERM to the
//! process holding its lock, `.ralph-state.json` deleted, `.progress.md` kept, and where
//! it stopped reported. Any other target is a record (run, spec or plan): its agents are
//! ended through the daemon, its worktree and logs kept, and it is marked stopped.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use taskdaemon_core::engine::RunState;
use taskdaemon_core::worklist::cancel;
use taskdaemon_core::workspace::Workspace;

use super::Ctx;
use super::implement::spec_dir;
use crate::cli::user;

/// How long a loop may take to stop (its agents get TERM, then KILL after their grace).
const STOP_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
taskdaemon cancel                 # the spec named in specs/.current-spec\n  \
taskdaemon cancel specs/login     # that spec's implement loop\n  \
taskdaemon cancel specs/login --json\n  \
taskdaemon cancel 4d5e6f              # a daemon run, spec or plan (id, hex or part of its name)\n\n\
The running `taskdaemon implement` gets SIGTERM, stops its agents (their whole process groups) \
and exits 130; then .ralph-state.json is deleted and .progress.md kept. The next \
`taskdaemon implement` starts again at the first unchecked task.")]
pub struct CancelArgs {
    /// A spec directory [default: specs/<name> from specs/.current-spec, else the current
    /// directory], or a run, spec or plan of the daemon.
    #[arg(value_name = "TARGET")]
    pub target: Option<String>,
    /// The report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CancelArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    if let Some(dir) = local_run(&args, ctx)? {
        return cancel_local(&dir, args.json);
    }
    let dir = match &args.target {
        None => spec_dir(None, ctx)?,
        Some(t) => {
            let p = ctx.workdir()?.join(t);
            if !p.is_dir() {
                return super::record_control::act(
                    taskdaemon_core::daemon::control::Action::Cancel,
                    t,
                    args.json,
                    ctx,
                )
                .map_err(|e| {
                    if e.chain().any(|c| c.is::<crate::cli::UserError>()) {
                        user(format!(
                            "{e:#}\n  note: `{t}` is not a directory either; `taskdaemon cancel SPEC_DIR` cancels a spec's implement loop"
                        ))
                    } else {
                        e
                    }
                });
            }
            spec_dir(Some(Path::new(t)), ctx)?
        }
    };
    cancel_spec(&dir, args.json)
}

/// The directory of a foreground `run`/`task` that `args` names: this directory (no
/// target) or the target directory while a loop holds its `.ralph/run.lock`, or this
/// directory when the target is its run's id.
fn local_run(args: &CancelArgs, ctx: &Ctx) -> anyhow::Result<Option<std::path::PathBuf>> {
    let wd = ctx.workdir()?;
    let dir = match &args.target {
        None => wd,
        Some(t) if wd.join(t).is_dir() => wd.join(t),
        Some(t) => {
            let ws = Workspace::new(&wd);
            let id = RunState::load(&ws).ok().flatten().map(|s| s.run_id);
            if id.is_some_and(|id| id.starts_with(t.as_str())) {
                wd
            } else {
                return Ok(None);
            }
        }
    };
    Ok(Workspace::new(&dir).holder().is_some().then_some(dir))
}

/// Stop the foreground loop of `dir`: TERM to the pid in its run lock (it ends its agents
/// and saves its state, so `taskdaemon run` there resumes it), and wait until it let go.
fn cancel_local(dir: &Path, json: bool) -> anyhow::Result<i32> {
    let ws = Workspace::new(dir);
    let Some(Some(pid)) = ws.holder() else {
        return Err(user(format!(
            "a loop holds {} but its pid is unreadable\n  hint: stop it in its own terminal with Ctrl-C",
            ws.lock_file().display()
        )));
    };
    kill(Pid::from_raw(pid), Signal::SIGTERM).map_err(|e| {
        user(format!(
            "cannot signal the loop (pid {pid}) in {}: {e}\n  hint: stop it in its own terminal with Ctrl-C",
            dir.display()
        ))
    })?;
    let start = Instant::now();
    while ws.holder().is_some() {
        if start.elapsed() > STOP_LIMIT {
            return Err(user(format!(
                "the loop (pid {pid}) in {} did not stop within {}s\n  hint: `kill -9 {pid}`",
                dir.display(),
                STOP_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = RunState::load(&ws).ok().flatten().map(|s| s.run_id);
    if json {
        super::print_json(&serde_json::json!({
            "dir": dir, "run": run, "stopped_pid": pid,
        }))?;
    } else {
        eprintln!(
            "taskdaemon: cancelled the loop in {} (stopped pid {pid}{})\n  its state is kept: `taskdaemon run` there resumes it",
            dir.display(),
            run.map(|r| format!(", run {r}")).unwrap_or_default()
        );
    }
    Ok(0)
}

fn cancel_spec(spec: &Path, json: bool) -> anyhow::Result<i32> {
    let report = cancel::cancel_implement(spec, STOP_LIMIT).map_err(|e| {
        if e.is_user_fault() {
            user(e)
        } else {
            anyhow::Error::new(e)
        }
    })?;
    let (stopped_pid, state_deleted) = (report.stopped_pid, report.state_deleted);
    if json {
        super::print_json(&report)?;
        return Ok(0);
    }
    if stopped_pid.is_none() && !state_deleted {
        eprintln!(
            "taskdaemon: nothing to cancel: no implement loop runs for {} and it has no .ralph-state.json",
            spec.display()
        );
        return Ok(0);
    }
    let mut msg = format!(
        "taskdaemon: cancelled the implement loop of {}",
        spec.display()
    );
    if let Some(pid) = stopped_pid {
        msg.push_str(&format!(" (stopped pid {pid})"));
    }
    if let (Some(id), Some(title)) = (&report.task_id, &report.task_title) {
        let total = report.total_tasks.unwrap_or_default();
        msg.push_str(&format!(
            "\n  stopped at task {id} {title} (task {} of {total}{}); {} of {total} tasks done",
            report.task_number.unwrap_or_default(),
            report
                .task_iteration
                .map(|n| format!(", attempt {n}"))
                .unwrap_or_default(),
            report.done_tasks,
        ));
    }
    msg.push_str(&format!(
        "\n  {} deleted; .progress.md {}\n  hint: `taskdaemon implement` starts again at the first unchecked task",
        if state_deleted { ".ralph-state.json" } else { "no .ralph-state.json was" },
        if report.progress_kept { "kept" } else { "not present" }
    ));
    eprintln!("{msg}");
    Ok(0)
}
