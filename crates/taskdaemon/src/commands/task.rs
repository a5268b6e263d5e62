//! `taskdaemon task "MESSAGE"`: a new task on an existing project (spec 1 §3). Snapshot
//! `task-N-pre`, reset the task files, run the loop, snapshot `task-N-post` on verified
//! completion.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use taskdaemon_core::engine::Outcome;
use taskdaemon_core::git::Git;
use taskdaemon_core::git::snapshot::{Kind, Snapshots};
use taskdaemon_core::lifecycle;
use taskdaemon_core::telemetry::RunSummary;
use taskdaemon_core::workspace::{IGNORED, Workspace};

use super::run::{RunFlags, drive, hold_for_loop, new_state, refuse_if_waiting_for_a_human};
use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
taskdaemon task \"add a mul command\" --agent claude --validate \"cargo test\"\n  \
taskdaemon task -f request.md --agent 'script:agent.yaml'\n\n\
Before the loop starts, the whole project is saved as task-N-pre (not for the first task of an \
empty project); .ralph/summary.md and feedback.md are cleared, the previous task gets a line in \
.ralph/task-history.md and .ralph/task.md holds the new task. When the loop completes with its \
evidence verified the result is saved as task-N-post. Otherwise `taskdaemon snapshot rollback \
task-N-pre` undoes the task.")]
pub struct TaskArgs {
    /// The new task, in your words.
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,
    /// Read the message from FILE (`-` for stdin).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "message")]
    pub message_file: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

impl TaskArgs {
    fn message(&self) -> anyhow::Result<String> {
        if let Some(m) = &self.message {
            return Ok(m.clone());
        }
        let Some(file) = &self.message_file else {
            return Err(user(
                "no task given\n  hint: `taskdaemon task \"what to do next\"` or `taskdaemon task -f request.md`",
            ));
        };
        if file.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the task from stdin")?;
            return Ok(s);
        }
        std::fs::read_to_string(file)
            .map_err(|e| user(format!("cannot read message file {}: {e}", file.display())))
    }
}

pub fn run(args: TaskArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, ws) = ctx.workspace()?;
    if let Some(code) = refuse_if_waiting_for_a_human(&ws)? {
        return Ok(code);
    }
    let message = args.message()?;
    let _lock = ws.lock().map_err(user)?;
    let _no_rollback = hold_for_loop(&dir)?;
    // Settings are checked before anything changes on disk.
    let mut state = new_state(
        &dir,
        &ws,
        message.clone(),
        &args.flags.settings(),
        ctx.config.as_deref(),
    )?;
    // The pre-task snapshot must not capture logs and runtime files.
    Git::new(&dir).ensure_excluded(IGNORED).map_err(user)?;
    let snaps = Snapshots::open(&dir).map_err(user)?;
    let start = lifecycle::begin_task(&snaps, &ws, &message).map_err(user)?;
    if args.json {
        print_json(&serde_json::json!({
            "event": "task_started",
            "task": start.number,
            "pre_snapshot": start.pre.as_ref().map(|s| &s.tag),
            "history": start.history_line,
        }))?;
    } else {
        match &start.pre {
            Some(s) => eprintln!(
                "taskdaemon: task {}: saved the project as {} (undo the task with `taskdaemon snapshot rollback {}`)",
                start.number, s.tag, s.tag
            ),
            None => eprintln!(
                "taskdaemon: task {}: empty project, no pre-task snapshot",
                start.number
            ),
        }
    }
    state.config.task = start.task_text.clone();
    state.task = Some(start.number);
    let (outcome, summary) = drive(&ws, state, false, args.json)?;
    finish(&dir, &ws, start.number, &outcome, &summary, args.json)?;
    Ok(summary.exit_code)
}

/// After the loop of task `number` ended (also when `run --resume` finished it).
pub fn finish(
    dir: &Path,
    ws: &Workspace,
    number: u32,
    outcome: &Outcome,
    summary: &RunSummary,
    json: bool,
) -> anyhow::Result<()> {
    let snaps = Snapshots::open(dir).map_err(user)?;
    let post =
        lifecycle::finish_task(&snaps, ws, number, outcome, summary.iterations).map_err(user)?;
    // The pre snapshot is `task-N-pre` unless that name was taken (then `task-N-pre-2`…).
    let pre = snaps
        .list()
        .map_err(user)?
        .into_iter()
        .rfind(|s| s.kind == Kind::TaskPre && s.task == Some(number))
        .map(|s| s.tag);
    let has_pre = pre.is_some();
    let pre = pre.unwrap_or_default();
    if json {
        return print_json(&serde_json::json!({
            "event": "task_finished",
            "task": number,
            "outcome": outcome.label(),
            "post_snapshot": post.as_ref().map(|s| &s.tag),
            "rollback": has_pre.then(|| format!("taskdaemon snapshot rollback {pre}")),
        }));
    }
    match (&post, has_pre) {
        (Some(s), _) => eprintln!("taskdaemon: task {number} complete: saved as {}", s.tag),
        (None, _) if matches!(outcome, Outcome::Failed { .. }) => {
            eprintln!("taskdaemon: task {number} failed: {}", outcome.detail())
        }
        (None, true) => eprintln!(
            "taskdaemon: task {number} did not complete ({}); no post snapshot.\n  to undo it: taskdaemon snapshot rollback {pre}",
            outcome.label()
        ),
        (None, false) => eprintln!(
            "taskdaemon: task {number} did not complete ({}); it was the first task of an empty project, so there is nothing to roll back to",
            outcome.label()
        ),
    }
    Ok(())
}
