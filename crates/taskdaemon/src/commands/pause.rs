//! `taskdaemon pause REF`: Pause a run when its iteration ends (`resume` goes on at the next one), or every run of a spec or plan; `--force` (or a second pause) stops it at once.

use clap::Args;
use taskdaemon_core::daemon::control::Action;

use super::Ctx;

#[derive(Debug, Args)]
#[command(
    after_help = "REF is an id, its hex, or part of its name (see `taskdaemon list`).\n\n\
A running run finishes the iteration under way, then pauses: that iteration counts, and `taskdaemon resume REF` starts the next one. \
Pausing it again while it waits for that (or `--force`) stops it at once: the stopped iteration does not count and is done again on resume.\n\n\
Examples:\n  taskdaemon pause 3f2a\n  taskdaemon pause --force 3f2a"
)]
pub struct PauseArgs {
    /// The run, spec or plan.
    pub reference: String,
    /// Stop a running run at once instead of when its iteration ends (that iteration is done again on resume).
    #[arg(long)]
    pub force: bool,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PauseArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    super::record_control::act_with(Action::Pause, &args.reference, args.json, args.force, ctx)
}
