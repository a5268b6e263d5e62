//! `taskdaemon start REF`: Start a queued run now (past the concurrency limit), or a paused one.

use clap::Args;
use taskdaemon_core::daemon::control::Action;

use super::Ctx;

#[derive(Debug, Args)]
#[command(after_help = "REF is an id, its hex, or part of its name (see `taskdaemon list`).")]
pub struct StartArgs {
    /// The run, spec or plan.
    pub reference: String,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StartArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    super::record_control::act(Action::Start, &args.reference, args.json, ctx)
}
