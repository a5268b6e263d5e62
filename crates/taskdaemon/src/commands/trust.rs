//! `taskdaemon trust [PATH] | trust --list`, `taskdaemon untrust [PATH]`: which
//! repository config files apply whole. A repository's `.taskdaemon/config.yaml` comes with
//! the clone; until it is trusted, its keys that run commands, name destinations or widen
//! the sandbox are ignored (`taskdaemon_core::config::trust`). Trust is for the content:
//! a changed file is untrusted again.

use std::path::{Path, PathBuf};

use clap::Args;
use taskdaemon_core::config::{project_config_path, trust};

use super::{Ctx, emit, print_json};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon trust                         # this repository's .taskdaemon/config.yaml and loops/*.yaml, as they are now\n  \
taskdaemon trust ~/src/app               # another repository's\n  \
taskdaemon trust --list                  # every trusted file: trusted, changed or missing\n  \
taskdaemon untrust\n\n\
Until you trust it, a repository's config is read without the keys that run commands, name \
destinations or widen access: agent (cmd:, script:), parse-agent (cmd:, script:), validate, \
notify command and webhook, api.*.base-url and api-key-env, the sandbox keys, worktrees-dir \
and the queue keys; and a loop type in .taskdaemon/loops/ that sets a validation command (or \
success exit code) of its own. Read the files first: trusting it lets it run what it names. The list is \
kept in $XDG_DATA_HOME/taskdaemon/trusted (else ~/.local/share/taskdaemon/trusted).")]
pub struct TrustArgs {
    /// The repository (or its .taskdaemon/config.yaml) whose config to trust [default: this repository's].
    #[arg(value_name = "PATH", conflicts_with = "list")]
    pub path: Option<PathBuf>,
    /// List the trusted files and whether each is unchanged, changed or missing.
    #[arg(long)]
    pub list: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon untrust\n  taskdaemon untrust ~/src/app/.taskdaemon/config.yaml"
)]
pub struct UntrustArgs {
    /// The repository (or its .taskdaemon/config.yaml) whose config to stop trusting [default: this repository's].
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TrustArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    if args.list {
        return list(args.json);
    }
    let repo = repository(args.path.as_deref(), ctx)?;
    let done = taskdaemon_core::loops::trust_repository(&repo).map_err(user)?;
    if args.json {
        let files: Vec<serde_json::Value> = done
            .entries
            .iter()
            .map(|e| serde_json::json!({"path": e.path, "hash": e.hash}))
            .collect();
        print_json(&serde_json::json!({"trusted": files, "applies": done.applies}))?;
        return Ok(0);
    }
    let mut out = String::new();
    for e in &done.entries {
        outln!(out, "trusted {} ({})", e.path.display(), e.hash);
    }
    if !done.applies.is_empty() {
        let keys: Vec<String> = done.applies.iter().map(|k| format!("`{k}`")).collect();
        outln!(out, "  now applies: {}", keys.join(", "));
    }
    outln!(
        out,
        "  a change to a file makes it untrusted again; `taskdaemon untrust` takes it back"
    );
    emit(&out)?;
    Ok(0)
}

pub fn run_untrust(args: UntrustArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let repo = repository(args.path.as_deref(), ctx)?;
    let removed = trust::untrust(&repo).map_err(user)?;
    if args.json {
        let paths: Vec<&Path> = removed.iter().map(|e| e.path.as_path()).collect();
        print_json(&serde_json::json!({
            "untrusted": paths, "was-trusted": !removed.is_empty(),
        }))?;
        return Ok(0);
    }
    let mut out = String::new();
    for e in &removed {
        outln!(
            out,
            "untrusted {}: what in it runs commands, names destinations or widens access is ignored again",
            e.path.display()
        );
    }
    if removed.is_empty() {
        outln!(out, "{} was not trusted", trust::key(&repo).display());
    }
    emit(&out)?;
    Ok(0)
}

fn list(json: bool) -> anyhow::Result<i32> {
    let all = trust::entries().map_err(user)?;
    let rows: Vec<(trust::State, &trust::Entry)> =
        all.iter().map(|e| (trust::state(e), e)).collect();
    let word = |s: trust::State| match s {
        trust::State::Trusted => "trusted",
        trust::State::Changed => "changed",
        trust::State::Missing => "missing",
    };
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(s, e)| serde_json::json!({"path": e.path, "hash": e.hash, "state": word(*s)}))
            .collect();
        super::print_list("trusted", &v)?;
        return Ok(0);
    }
    let mut out = String::new();
    if rows.is_empty() {
        outln!(
            out,
            "no repository config is trusted (`taskdaemon trust` in a repository trusts its .taskdaemon/config.yaml)"
        );
    }
    for (s, e) in &rows {
        let note = match s {
            trust::State::Changed => format!(
                " (changed since: ignored until `taskdaemon trust {}`)",
                e.path.display()
            ),
            _ => String::new(),
        };
        outln!(out, "{:8} {}{note}", word(*s), e.path.display());
    }
    emit(&out)?;
    Ok(0)
}

/// The repository PATH names (relative to the work directory), else this one: the work
/// directory when it holds a `.taskdaemon/config.yaml` (as `run` reads it), else the
/// project's directory (the nearest `.taskdaemon/` up to the top level).
fn repository(path: Option<&Path>, ctx: &Ctx) -> anyhow::Result<PathBuf> {
    let work = ctx.workdir()?;
    match path {
        Some(p) => trust::repository_of(&work.join(p)).map_err(user),
        None if project_config_path(&work).exists() => Ok(work),
        None => ctx.project_dir(),
    }
}
