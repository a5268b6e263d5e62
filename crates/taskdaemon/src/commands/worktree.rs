//! `taskdaemon worktree list|prune`: the loops' git worktrees (issue 5).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;
use taskdaemon_core::config;
use taskdaemon_core::git::worktree::DEFAULT_BASE;
use taskdaemon_core::git::{Pruned, WorktreeInfo, Worktrees};
use taskdaemon_core::store::store_dir;
use taskstore::StoreOptions;

use super::{Ctx, emit, open_records, print_json, store_err};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon worktree list\n  \
taskdaemon worktree list --json\n  \
taskdaemon worktree prune\n  \
taskdaemon worktree prune --force\n\n\
Each loop works in its own git worktree under worktrees-dir (default .taskdaemon/worktrees, \
which taskdaemon adds to .git/info/exclude), named after its record id. A worktree is reused when \
its loop resumes, removed after a successful merge, and kept when the loop fails, for inspection. \
`prune` removes the worktrees of finished records (complete, cancelled, stopped) and registrations \
whose directory is gone; it keeps worktrees with uncommitted changes, and ones whose name is no \
record, unless --force. Branches are never deleted by prune.")]
pub struct WorktreeArgs {
    #[command(subcommand)]
    pub action: Action,
    /// Print as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// The worktrees directory (overrides the worktrees-dir setting).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "TASKDAEMON_WORKTREES_DIR"
    )]
    pub worktrees_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Every worktree under the worktrees directory: branch, commit, uncommitted changes, record status.
    List,
    /// Remove the worktrees of finished records and stale registrations.
    Prune {
        /// Also remove worktrees with uncommitted changes, and ones named after no record.
        #[arg(long)]
        force: bool,
    },
}

/// A worktree as listed: git's view plus its record's status.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
struct Listed {
    #[serde(flatten)]
    info: WorktreeInfo,
    /// The status of the record it is named after; `None` when there is no such record.
    status: Option<String>,
}

/// Statuses whose worktree prune may remove.
const FINISHED: &[&str] = &["complete", "cancelled", "stopped"];

pub fn run(args: WorktreeArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.repo_dir()?;
    let project = ctx.project_dir()?;
    let base = match args.worktrees_dir {
        Some(d) => {
            config::check_worktrees_dir(&d).map_err(|e| user(taskdaemon_core::yaml::hinted(&e)))?;
            d
        }
        None => {
            let layers = config::load_layers(&project, ctx.config.as_deref()).map_err(user)?;
            super::util::warn_untrusted(layers.untrusted.as_ref());
            layers
                .settings
                .worktrees_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_BASE))
        }
    };
    let wt = Worktrees::open(&dir, &base).map_err(user)?;
    let records = if store_dir(&project).exists() {
        Some(open_records(ctx, StoreOptions::default())?)
    } else {
        None
    };
    let status_of = |name: &str| -> anyhow::Result<Option<String>> {
        let Some(r) = &records else { return Ok(None) };
        Ok(r.get(name)
            .map_err(store_err)?
            .map(|rec| rec.status().to_string()))
    };
    match args.action {
        Action::List => {
            let all = wt.list().map_err(user)?;
            let listed = all
                .into_iter()
                .map(|info| {
                    let status = status_of(&info.name)?;
                    Ok(Listed { info, status })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            if args.json {
                return super::print_list("worktrees", &listed).map(|_| 0);
            }
            emit(&render_list(wt.base(), &listed))?;
        }
        Action::Prune { force } => {
            let finished = |name: &str| match records.as_ref().map(|r| r.get(name)) {
                Some(Ok(Some(rec))) => FINISHED.contains(&rec.status()),
                Some(Ok(None)) | None => force,
                // Unreadable: keep it.
                Some(Err(_)) => false,
            };
            let mut report = wt.prune(&finished, force).map_err(user)?;
            for k in &mut report.kept {
                if k.reason == "not finished" {
                    k.reason = match status_of(&k.name)? {
                        Some(s) => format!("its record is {s}"),
                        None => "no record has this id (--force removes it)".into(),
                    };
                }
            }
            if args.json {
                return print_json(&report).map(|_| 0);
            }
            let mut out = String::new();
            if report.removed.is_empty() && report.kept.is_empty() {
                outln!(out, "no worktrees under {}", wt.base().display());
            }
            for p in &report.removed {
                outln!(out, "removed {}{}: {}", p.name, branch_note(p), p.reason);
            }
            for p in &report.kept {
                outln!(out, "kept    {}{}: {}", p.name, branch_note(p), p.reason);
            }
            emit(&out)?;
        }
    }
    Ok(0)
}

fn branch_note(p: &Pruned) -> String {
    p.branch
        .as_deref()
        .map(|b| format!(" (branch {b})"))
        .unwrap_or_default()
}

fn render_list(base: &Path, all: &[Listed]) -> String {
    let mut out = String::new();
    if all.is_empty() {
        outln!(
            out,
            "no worktrees under {}\n  hint: the daemon makes one per running spec",
            base.display()
        );
        return out;
    }
    // Each column as wide as its widest cell (long branch names included), with a header.
    let rows: Vec<[String; 5]> = all
        .iter()
        .map(|l| {
            let i = &l.info;
            let state = if i.missing {
                "missing (stale: `taskdaemon worktree prune` clears it)"
            } else if i.dirty {
                "uncommitted changes"
            } else {
                "clean"
            };
            [
                i.name.clone(),
                i.head
                    .as_deref()
                    .map(|h| h[..h.len().min(8)].to_string())
                    .unwrap_or_else(|| "-".into()),
                i.branch.clone().unwrap_or_else(|| "(detached)".into()),
                l.status.clone().unwrap_or_else(|| "-".into()),
                format!("{state}{}", if i.locked { ", locked" } else { "" }),
            ]
        })
        .collect();
    let header = ["NAME", "HEAD", "BRANCH", "RECORD", "STATE"].map(String::from);
    let w: Vec<usize> = (0..4)
        .map(|c| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in std::iter::once(&header).chain(&rows) {
        outln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        );
    }
    out
}
