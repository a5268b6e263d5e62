//! `taskdaemon implement [SPEC_DIR]`: run a spec's tasks.md (spec 5) — one task per fresh
//! agent, `[P]` groups in parallel worktrees, `[VERIFY]` checkpoints for a QA agent, every
//! completion checked by five verification layers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use taskdaemon_core::config::Dur;
use taskdaemon_core::worklist::{self, config::TasksRun};

use super::Ctx;
use super::util::worklist::{
    layers, repo_of, run_worklist, spec_dir, verify_warnings, worklist_err,
};
use super::util::{LoopFlags, dur};
use crate::cli::user;

const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon implement specs/login --agent claude\n  \
taskdaemon implement                      # the spec named in specs/.current-spec\n  \
taskdaemon implement specs/login --max-task-iterations 3 --json\n  \
taskdaemon cancel specs/login             # stop it; .progress.md is kept\n\n\
tasks.md: `- [ ] 1.2 [P] Title` items with indented **Do**, **Files**, **Done when**, **Verify**, \
**Commit** fields. Consecutive [P] tasks run at the same time, each in its own git worktree, and \
their commits land in task order; [VERIFY] tasks go to a QA agent that must answer \
VERIFICATION_PASS or VERIFICATION_FAIL. A task is complete only when the agent said \
TASK_COMPLETE without asking for manual work, checked its box, committed the spec files, and the \
task's Verify command passes. State: <spec>/.ralph-state.json (resumed by the next implement).\n\n\
An agent may end its answer with <promise>BLOCKED: reason</promise> (.ralph/blocked.txt, exit 2; \
`taskdaemon unblock` then run again) or <promise>DECIDE: question</promise> (.ralph/decide.txt, \
exit 3; `taskdaemon answer \"…\"` then run again: the answer goes into the next prompt). Every \
agent invocation adds a row to .ralph/logs/summary.csv (mode implement or qa).\n\n\
The loop is the engine's, as `run`'s: a usage limit waits for its reset and retries the same attempt (--on-usage-limit, --max-wait, --pause-at-usage), overloads back off (--retry-backoff, --max-retries), a quiet agent is reported (--quiet-warning), and the run resumes where it stopped.\n\n\
Exit codes: 0 ALL_TASKS_COMPLETE, 1 a limit (iterations, --max-cost, --max-runtime) or an agent failure that would not end, 2 blocked, 3 decide, 4 stuck (--max-stuck iterations in a row without a new commit), 5 a task kept failing or the agents stalled, 64 usage, 130 interrupted or cancelled.")]
pub struct ImplementArgs {
    /// The spec directory with tasks.md [default: specs/<name> from specs/.current-spec, else the current directory].
    #[arg(value_name = "SPEC_DIR")]
    pub spec_dir: Option<PathBuf>,
    /// Attempts per task before the loop stops with exit 5; the loop's limit is tasks × N × 2 iterations.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_task_iterations: u32,
    #[command(flatten)]
    pub flags: LoopFlags,
    /// Time limit of a task's Verify command [default: 10m].
    #[arg(long, value_name = "DUR", value_parser = dur)]
    pub verify_timeout: Option<Dur>,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ImplementArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let spec = spec_dir(args.spec_dir.as_deref(), ctx)?;
    let repo = repo_of(&spec)?;
    // Everything that can be wrong is checked before anything changes.
    worklist::coordinator::preflight(&spec, &repo).map_err(worklist_err)?;
    let (settings, registry) = layers(&repo, &args.flags, ctx)?;
    let text = std::fs::read(spec.join(worklist::coordinator::TASKS_FILE)).unwrap_or_default();
    let tasks = worklist::tasks_md::parse(&String::from_utf8_lossy(&text));
    let run = TasksRun {
        spec_dir: spec.clone(),
        max_task_iterations: args.max_task_iterations,
        verify_timeout: Some(
            args.verify_timeout
                .map(|d| d.0)
                .unwrap_or(DEFAULT_VERIFY_TIMEOUT),
        ),
        tasks: tasks.len(),
    };
    let cfg = worklist::config::tasks_config(&repo, &run, &settings, &registry).map_err(user)?;
    verify_warnings(&verify_commands(&spec), &repo);
    run_worklist(&repo, &spec, cfg, args.json)
}

/// The Verify commands of the tasks still open.
fn verify_commands(spec: &Path) -> Vec<String> {
    let text = std::fs::read(spec.join(worklist::coordinator::TASKS_FILE)).unwrap_or_default();
    let mut cmds: Vec<String> = worklist::tasks_md::parse(&String::from_utf8_lossy(&text))
        .iter()
        .filter(|t| !t.done)
        .filter_map(|t| t.verify_command())
        .collect();
    cmds.dedup();
    cmds
}
