//! `taskdaemon implement [SPEC_DIR]`: run a spec's tasks.md (spec 5) — one task per fresh
//! agent, `[P]` groups in parallel worktrees, `[VERIFY]` checkpoints for a QA agent, every
//! completion checked by five verification layers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use taskdaemon_core::config::Dur;
use taskdaemon_core::worklist::{self, ImplementConfig};

use super::Ctx;
use super::util::worklist::{
    AgentFlags, LimitFlags, check_agent, drive, repo_of, spec_dir, take_over_worklist, worklist_err,
};
use super::util::{dur, hold_for_loop};

const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
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
Exit codes: 0 ALL_TASKS_COMPLETE, 1 a limit (iterations, --max-cost, --max-runtime), 2 blocked, 3 decide, 4 stuck, 5 a task kept failing or the agents stalled, 64 usage, 130 interrupted or cancelled.")]
pub struct ImplementArgs {
    /// The spec directory with tasks.md [default: specs/<name> from specs/.current-spec, else the current directory].
    #[arg(value_name = "SPEC_DIR")]
    pub spec_dir: Option<PathBuf>,
    /// Attempts per task before the loop stops with exit 5; the loop's limit is tasks × N × 2 iterations.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_task_iterations: u32,
    #[command(flatten)]
    pub agent: AgentFlags,
    #[command(flatten)]
    pub limits: LimitFlags,
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
    let setup = args.agent.resolve(&spec, ctx)?;
    let limits = args.limits.limits()?;
    let verify = verify_commands(&spec);
    check_agent(&setup, &verify, &repo)?;
    let _lock = worklist::lock::acquire(&spec).map_err(worklist_err)?;
    // No snapshot rollback may change the work tree under the loop.
    let _no_rollback = hold_for_loop(&repo)?;
    take_over_worklist(&spec, &setup)?;
    let allow_test_changes = args.limits.allow_test_changes(&repo, ctx)?;
    let cfg = ImplementConfig {
        allow_test_changes,
        spec_dir: spec,
        repo,
        setup,
        max_task_iterations: args.max_task_iterations,
        limits,
        verify_timeout: Some(
            args.verify_timeout
                .map(|d| d.0)
                .unwrap_or(DEFAULT_VERIFY_TIMEOUT),
        ),
    };
    let result = drive(args.json, |events, cancel| async move {
        worklist::implement(&cfg, &events, &cancel).await
    })?;
    Ok(result.outcome.exit_code())
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
