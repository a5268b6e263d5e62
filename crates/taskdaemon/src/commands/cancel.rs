//! `taskdaemon cancel REF`: Cancel a run, spec or plan: its agent's process group is ended, the worktree and logs are kept, the run is marked stopped.

use clap::Args;
use taskdaemon_core::daemon::control::Action;

use super::Ctx;

#[derive(Debug, Args)]
#[command(after_help = "REF is an id, its hex, or part of its name (see `taskdaemon list`).")]
pub struct CancelArgs {
    /// The run, spec or plan.
    pub reference: String,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CancelArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    super::record_control::act(Action::Cancel, "cancel", &args.reference, args.json, ctx)
}
