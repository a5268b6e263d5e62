//! `taskdaemon cancel [TARGET]`: stop a running loop and clean up its state. A directory
//! (or no target: the current spec) cancels that spec's `implement` loop: TERM to the
//! process holding its lock, `.ralph-state.json` deleted, `.progress.md` kept, and where
//! it stopped reported. Any other target is a record (run, spec or plan): its agents are
//! ended through the daemon, its worktree and logs kept, and it is marked stopped.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use taskdaemon_core::lifecycle::cancel::{local_loop, stop_local_loop};
use taskdaemon_core::worklist::cancel;

use super::Ctx;
use super::util::worklist::spec_dir;
use crate::cli::user;

/// How long a loop may take to stop (its agents get TERM, then KILL after their grace).
const STOP_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
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
    if let Some(dir) = local_loop(&ctx.workdir()?, args.target.as_deref()) {
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

/// Stop the foreground loop of `dir` (its state is kept: `run` there resumes it).
fn cancel_local(dir: &Path, json: bool) -> anyhow::Result<i32> {
    let stop = stop_local_loop(dir, STOP_LIMIT).map_err(user)?;
    if json {
        super::print_json(&stop)?;
    } else {
        eprintln!(
            "taskdaemon: cancelled the loop in {} (stopped pid {}{})\n  its state is kept: `taskdaemon run` there resumes it",
            dir.display(),
            stop.stopped_pid,
            stop.run.map(|r| format!(", run {r}")).unwrap_or_default()
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
