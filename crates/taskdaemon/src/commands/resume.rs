//! `taskdaemon resume REF`: Resume a paused, blocked, stopped or failed run, spec or plan (after a merge conflict: once you resolved it).

use clap::Args;
use taskdaemon_core::daemon::control::Action;

use super::Ctx;

#[derive(Debug, Args)]
#[command(after_help = "REF is an id, its hex, or part of its name (see `taskdaemon list`).")]
pub struct ResumeArgs {
    /// The run, spec or plan.
    pub reference: String,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ResumeArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    super::record_control::act(Action::Resume, &args.reference, args.json, ctx)
}
