//! `taskdaemon pause REF`: Pause a run (its agent is stopped; `resume` continues at the next iteration), or every run of a spec or plan.

use clap::Args;
use taskdaemon_core::daemon::control::Action;

use super::Ctx;

#[derive(Debug, Args)]
#[command(after_help = "REF is an id, its hex, or part of its name (see `taskdaemon list`).")]
pub struct PauseArgs {
    /// The run, spec or plan.
    pub reference: String,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PauseArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    super::record_control::act(Action::Pause, &args.reference, args.json, ctx)
}
