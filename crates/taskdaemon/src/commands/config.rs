//! `taskdaemon config show [--json]`: every setting in force and where it came from
//! (the built-in default, a file and line, `--config FILE`, an environment variable).
//! The core computes it (`config::settings_in_force`); `doctor` shows the same sources.

use clap::{Args, Subcommand};
use taskdaemon_core::config;

use super::{Ctx, emit, print_json};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  taskdaemon config show\n  TASKDAEMON_MAX_ITERATIONS=5 taskdaemon config show --json"
)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// Every setting in force, with its value and where it came from. Flags of `run` and `task` override these for one run.
    Show {
        /// Print a JSON array of {key, value, from}.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: ConfigArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let What::Show { json } = args.what;
    let dir = ctx.workdir()?;
    let rows = config::settings_in_force(&dir, ctx.config.as_deref()).map_err(user)?;
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| serde_json::json!({"key": r.key, "value": r.value, "from": r.from.to_string(), "origin": r.from}))
            .collect();
        print_json(&v)?;
        return Ok(0);
    }
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "(unset)".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let kw = rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let vw = rows
        .iter()
        .map(|r| show(&r.value).chars().count().min(40))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for r in &rows {
        outln!(out, "{:kw$}  {:vw$}  {}", r.key, show(&r.value), r.from);
    }
    emit(&out)?;
    Ok(0)
}
