//! `taskdaemon unblock`: show why the loop stopped BLOCKED, and clear it.

use clap::Args;
use taskdaemon_core::workspace::StoppedLoop;

use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
pub struct UnblockArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: UnblockArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (_, ws) = ctx.workspace()?;
    let removed = ws.remove_blocked().map_err(user)?;
    if args.json {
        let next = removed
            .as_deref()
            .map(|t| StoppedLoop::of_file(t).continue_command());
        print_json(
            &serde_json::json!({ "was_blocked": removed.is_some(), "text": removed, "next": next }),
        )?;
        return Ok(0);
    }
    match removed {
        Some(text) => {
            let next = StoppedLoop::of_file(&text).continue_command();
            println!("{}", text.trim());
            println!(
                "\nunblocked: removed {}. Continue with `{next}`.",
                ws.blocked_file().display()
            );
        }
        None => println!(
            "nothing is blocked here ({} does not exist)",
            ws.blocked_file().display()
        ),
    }
    Ok(0)
}
