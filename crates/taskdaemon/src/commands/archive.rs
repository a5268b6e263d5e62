//! `taskdaemon archive`: move a finished run's .ralph/ files into .ralph/archive/.

use clap::Args;
use taskdaemon_core::clock;
use taskdaemon_core::telemetry::archive;

use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Move .ralph/logs/ into the archive too (by default logs stay where they are).
    #[arg(long)]
    pub include_logs: bool,
    /// A label for the archive directory name.
    #[arg(long, value_name = "L")]
    pub label: Option<String>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ArchiveArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (_, ws) = ctx.workspace()?;
    let stamp = clock::now().strftime("%Y%m%d-%H%M%S").to_string();
    let report = archive(&ws, &stamp, args.label.as_deref(), args.include_logs).map_err(user)?;
    if args.json {
        print_json(&report)?;
        return Ok(0);
    }
    println!(
        "archived to {}: {}",
        report.dir.display(),
        report.moved.join(", ")
    );
    if !report.logs_included {
        println!(
            "logs stay in {} (use --include-logs to move them too)",
            ws.logs_dir().display()
        );
    }
    Ok(0)
}
