//! `taskdaemon snapshot save|list|rollback|diff|status`: rollback points of the whole work
//! tree (spec 1 §4).

use std::time::Duration;

use clap::{Args, Subcommand};
use taskdaemon_core::clock;
use taskdaemon_core::duration::format_duration;
use taskdaemon_core::git::snapshot::{Notice, PrunePolicy, Snapshot, Snapshots, TreeDiff};
use taskdaemon_core::lifecycle;
use taskdaemon_core::workspace::Workspace;

use super::Ctx;
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon snapshot save \"before CTA redesign\"\n  \
taskdaemon snapshot list\n  \
taskdaemon snapshot diff task-2-post\n  \
taskdaemon snapshot rollback task-2-pre\n\n\
A snapshot records the whole work tree (tracked, modified and untracked files; not ignored ones), \
the index and HEAD, as a commit only its tag reaches: your branch and staging area are not touched. \
A rollback first saves the current state as pre-rollback-<seconds>, so it can itself be undone. \
A rollback that was killed is finished (or, if it had changed nothing yet, dropped) by the next \
snapshot command, `run` or `task`, which says so. Snapshot commands run none of your git hooks.")]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub action: Action,
    /// Print as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Save the current state as manual-<unix seconds>.
    Save {
        /// What this snapshot is for.
        message: Option<String>,
    },
    /// All snapshots, oldest first: task, manual, stall and pre-rollback.
    List,
    /// Restore the work tree, index, HEAD and branch exactly as saved in TAG.
    Rollback {
        /// A snapshot's tag (see `taskdaemon snapshot list`).
        tag: String,
    },
    /// Files added, modified and deleted since TAG (committed or not).
    Diff {
        /// A snapshot's tag.
        tag: String,
    },
    /// The last snapshot, whether the work tree differs from it, and uncommitted changes.
    Status,
    /// Remove old snapshot tags: beyond the N newest and/or older than a duration. Lists them first and writes a restore file; keeps the current task's and any another ref names.
    Prune {
        /// Keep this many newest snapshots.
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Only snapshots older than this (7d, 12h, …).
        #[arg(long, value_name = "DUR", value_parser = |s: &str| taskdaemon_core::duration::parse_duration(s))]
        older_than: Option<Duration>,
        /// List what would be removed; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub fn run(args: SnapshotArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, ws) = ctx.workspace()?;
    let snaps = Snapshots::open(&dir).map_err(user)?.reporting_busy();
    // An interrupted rollback or a stale lock is dealt with (and said) before anything.
    let recovered = snaps.recover();
    show_notices(recovered.as_deref().unwrap_or(&[]));
    recovered.map_err(user)?;
    let json = args.json;
    let result = act(args.action, json, &snaps, &ws);
    show_notices(&snaps.take_notices());
    result
}

fn show_notices(notices: &[Notice]) {
    for n in notices {
        eprintln!("taskdaemon: {n}");
    }
}

/// `snapshot prune`: the plan listed, then (unless a dry run) carried out.
fn prune(
    keep: Option<usize>,
    older_than: Option<Duration>,
    dry_run: bool,
    json: bool,
    snaps: &Snapshots,
    ws: &Workspace,
) -> anyhow::Result<i32> {
    if keep.is_none() && older_than.is_none() {
        return Err(user(
            "say which snapshots to prune\n  hint: `--keep N` (keep the N newest), `--older-than 30d`, or both; add --dry-run to look first",
        ));
    }
    let now = clock::now().as_millisecond();
    let policy = PrunePolicy {
        keep,
        before_ms: older_than.map(|d| now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        current_task: lifecycle::TaskFiles::new(ws)
            .read_counter()
            .ok()
            .filter(|n| *n > 0),
    };
    let plan = snaps.prune_plan(&policy).map_err(user)?;
    if !json {
        for k in &plan.kept_because {
            println!("keep    {}: {}", k.tag, k.why);
        }
        for s in &plan.remove {
            let verb = if dry_run { "would remove" } else { "remove" };
            println!(
                "{verb} {}  {}  {}",
                s.tag,
                when(s.time_ms),
                s.message.lines().next().unwrap_or("")
            );
        }
        if plan.remove.is_empty() {
            println!("nothing to prune");
        }
    }
    if dry_run {
        if json {
            print_snapshots(
                &serde_json::json!({"dry_run": true, "remove": plan.remove, "kept": plan.kept_because}),
            )?;
        }
        return Ok(0);
    }
    let done = snaps.prune(&plan, now).map_err(user)?;
    if json {
        print_snapshots(
            &serde_json::json!({"removed": done.removed, "kept": plan.kept_because, "restore_file": done.restore_file}),
        )?;
    } else if let Some(f) = &done.restore_file {
        println!(
            "removed {} snapshot(s); to restore one, run its line of {}",
            done.removed.len(),
            f.display()
        );
    }
    Ok(0)
}

fn act(action: Action, json: bool, snaps: &Snapshots, ws: &Workspace) -> anyhow::Result<i32> {
    match action {
        Action::Prune {
            keep,
            older_than,
            dry_run,
        } => return prune(keep, older_than, dry_run, json, snaps, ws),
        Action::Save { message } => {
            let s = lifecycle::save_manual(snaps, ws, message.as_deref().unwrap_or(""))
                .map_err(user)?;
            if json {
                print_snapshots(&s)?;
            } else {
                println!("saved {} ({})", s.tag, short(&s.commit));
                for p in &s.skipped {
                    eprintln!(
                        "taskdaemon: warning: {p} is a git repository without a commit: not in the snapshot (commit in it, or add it to .gitignore)"
                    );
                }
                println!("  undo later with: taskdaemon snapshot rollback {}", s.tag);
            }
        }
        Action::List => {
            let all = snaps.list().map_err(user)?;
            if json {
                print_snapshots(&serde_json::json!({"snapshots": all}))?;
            } else if all.is_empty() {
                println!(
                    "no snapshots yet\n  hint: `taskdaemon snapshot save \"message\"`, or start a task with `taskdaemon task \"…\"`"
                );
            } else {
                let width = all.iter().map(|s| s.tag.len()).max().unwrap_or(0);
                for s in &all {
                    println!(
                        "{:width$}  {}  {:>7}  {}",
                        s.tag,
                        when(s.time_ms),
                        s.task.map(|n| format!("task {n}")).unwrap_or_default(),
                        s.message.lines().next().unwrap_or(""),
                    );
                }
            }
        }
        Action::Rollback { tag } => {
            let r = lifecycle::rollback(snaps, ws, &tag).map_err(user)?;
            if json {
                print_snapshots(&r)?;
            } else {
                let at = match (&r.restored.branch, &r.restored.head) {
                    (Some(b), Some(h)) => format!(
                        "branch {} at {}",
                        b.trim_start_matches("refs/heads/"),
                        short(h)
                    ),
                    (None, Some(h)) => format!("detached HEAD at {}", short(h)),
                    (Some(b), None) => {
                        format!("unborn branch {}", b.trim_start_matches("refs/heads/"))
                    }
                    (None, None) => "HEAD".into(),
                };
                println!(
                    "rolled back to {} ({at}); {} file(s) changed",
                    r.restored.tag,
                    r.changed.len()
                );
                println!(
                    "the state before was saved as {}\n  undo this rollback with: taskdaemon snapshot rollback {}",
                    r.saved.tag, r.saved.tag
                );
                if !r.kept.is_empty() {
                    println!(
                        "kept {} where it is: it looks like a secret, and a rollback never removes one (untracked now)",
                        r.kept.join(", ")
                    );
                }
            }
        }
        Action::Diff { tag } => {
            let d = snaps.diff(&tag).map_err(user)?;
            if json {
                print_snapshots(&d)?;
            } else {
                print_diff(&d);
                println!(
                    "{} added, {} modified, {} deleted since {tag}",
                    d.added.len(),
                    d.modified.len(),
                    d.deleted.len()
                );
            }
        }
        Action::Status => {
            let st = snaps.status().map_err(user)?;
            if json {
                print_snapshots(&st)?;
            } else {
                match &st.last {
                    None => println!("last snapshot: none yet"),
                    Some(s) => println!("last snapshot: {}", describe(s)),
                }
                if let Some(d) = &st.changed_since_last {
                    if d.is_empty() {
                        println!("work tree:     same as the last snapshot");
                    } else {
                        println!(
                            "work tree:     {} file(s) differ from it (see `taskdaemon snapshot diff {}`)",
                            d.len(),
                            st.last.as_ref().map(|s| s.tag.as_str()).unwrap_or("")
                        );
                    }
                }
                println!("uncommitted:   {} change(s) (git status)", st.uncommitted);
            }
        }
    }
    Ok(0)
}

fn short(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

fn describe(s: &Snapshot) -> String {
    let ago = clock::now()
        .as_millisecond()
        .saturating_sub(s.time_ms)
        .max(0);
    let ago = format_duration(Duration::from_millis(u64::try_from(ago).unwrap_or(0)));
    format!(
        "{} ({}{} ago, {}) \"{}\"",
        s.tag,
        s.task.map(|n| format!("task {n}, ")).unwrap_or_default(),
        ago,
        when(s.time_ms),
        s.message.lines().next().unwrap_or("")
    )
}

fn print_diff(d: &TreeDiff) {
    for (mark, paths) in [("A", &d.added), ("M", &d.modified), ("D", &d.deleted)] {
        for p in paths {
            println!("{mark} {p}");
        }
    }
}

/// A snapshot document: every snapshot in it (an object with `time_ms`) also gets
/// `saved_at`, that time as RFC 3339 (docs/json.md: times are RFC 3339).
fn print_snapshots(v: &impl serde::Serialize) -> anyhow::Result<()> {
    fn stamp(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                let at = m
                    .get("time_ms")
                    .and_then(serde_json::Value::as_i64)
                    .and_then(taskdaemon_core::json::time_of_ms);
                if let Some(at) = at {
                    m.insert("saved_at".into(), at.into());
                }
                m.values_mut().for_each(stamp);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(stamp),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(v)?;
    stamp(&mut v);
    super::print_json(&v)
}
