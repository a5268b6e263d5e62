//! `taskdaemon unblock`: show why the loop stopped BLOCKED, and clear it.

use clap::Args;

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
        print_json(&serde_json::json!({ "was_blocked": removed.is_some(), "text": removed }))?;
        return Ok(0);
    }
    match removed {
        Some(text) => {
            println!("{}", text.trim());
            println!(
                "\nunblocked: removed {}. Continue with `taskdaemon run --resume`.",
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
