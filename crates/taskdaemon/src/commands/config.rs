//! `taskdaemon config show [--json]`: every setting in force and where it came from
//! (the built-in default, a file and line, `--config FILE`, an environment variable).
//! The core computes it (`config::settings_in_force`); `doctor` shows the same sources.

use clap::{Args, Subcommand};
use taskdaemon_core::config;

use super::{Ctx, emit, print_list};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon config show\n  TASKDAEMON_MAX_ITERATIONS=5 taskdaemon config show --json"
)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// Every setting in force, with its value and where it came from. Flags of `run` and `task` override these for one run.
    Show {
        /// Print `{"schema":1,"settings":[{key, value, unset, from, origin}]}` (docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: ConfigArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let What::Show { json } = args.what;
    let dir = ctx.workdir()?;
    let report = config::settings_in_force(&dir, ctx.config.as_deref()).map_err(user)?;
    if json {
        print_list("settings", &rows_json(&report))?;
    } else {
        emit(&table(&report))?;
    }
    Ok(0)
}

/// The keys of `u` under the top-level key `key` (`api` holds `api.openai.base-url`).
fn ignored_under<'a>(u: Option<&'a config::Untrusted>, key: &str) -> Vec<&'a str> {
    u.into_iter()
        .flat_map(|u| u.ignored.iter().copied())
        .filter(|k| k.split('.').next() == Some(key))
        .collect()
}

/// One object per setting: key, value, where it came from; `ignored` where the
/// repository's untrusted config set something under it that was left out.
fn rows_json(report: &config::InForceReport) -> Vec<serde_json::Value> {
    let u = report.untrusted.as_ref();
    report
        .rows
        .iter()
        .map(|r| {
            let mut v = serde_json::json!({"key": r.key, "value": r.json_value(), "unset": r.unset, "from": r.from.to_string(), "origin": r.from});
            let ignored = ignored_under(u, &r.key);
            if let (Some(u), false) = (u, ignored.is_empty()) {
                v["ignored"] = serde_json::json!({
                    "keys": ignored,
                    "file": u.path,
                    "why": "the repository's config is not trusted",
                    "trust": format!("taskdaemon trust {}", u.path.display()),
                });
            }
            v
        })
        .collect()
}

/// The settings as a table; an untrusted repository config's left-out keys after it.
fn table(report: &config::InForceReport) -> String {
    let show = |r: &config::InForce| match (&r.value, &r.unset) {
        (serde_json::Value::Null, Some(means)) => format!("(unset: {means})"),
        (serde_json::Value::Null, None) => "(unset)".to_string(),
        (serde_json::Value::String(s), _) => s.clone(),
        (other, _) => other.to_string(),
    };
    let rows = &report.rows;
    let kw = rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let vw = rows
        .iter()
        .map(|r| show(r).chars().count().min(40))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for r in rows {
        let ignored = ignored_under(report.untrusted.as_ref(), &r.key);
        let note = if ignored.is_empty() {
            String::new()
        } else {
            format!("  (ignored, untrusted: {})", ignored.join(", "))
        };
        outln!(out, "{:kw$}  {:vw$}  {}{note}", r.key, show(r), r.from);
    }
    if let Some(u) = &report.untrusted {
        outln!(out, "{u}");
    }
    out
}
