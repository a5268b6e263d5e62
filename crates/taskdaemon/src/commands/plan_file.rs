//! `taskdaemon plan validate|show|diff|update`: the plan file of a work tree
//! (`.ralph/plan.md` or `.ralph/plan.tsx`, spec 1 §6–§7).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Args;
use taskdaemon_core::gates::phase::coverage;
use taskdaemon_core::gates::scope::{GitWorld, Severity, scope_gates};
use taskdaemon_core::git::Git;
use taskdaemon_core::git::snapshot::Snapshots;
use taskdaemon_core::lifecycle::TaskFiles;
use taskdaemon_core::lifecycle::parser::{files_for, project_context};
use taskdaemon_core::lifecycle::plan::Plan;
use taskdaemon_core::lifecycle::plan_update::{UpdateWorld, task_requirements, update_plan};
use taskdaemon_core::{clock, fsutil};

use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
pub struct PlanFileArgs {
    /// The plan file [default: .ralph/plan.md, else .ralph/plan.tsx].
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Only this section (by name).
    pub section: Option<String>,
    #[command(flatten)]
    pub common: PlanFileArgs,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The task whose markers to check [default: .ralph/task-counter.txt].
    #[arg(long, value_name = "N")]
    pub task: Option<u32>,
    #[command(flatten)]
    pub common: PlanFileArgs,
}

fn load(ctx: &Ctx, explicit: Option<&Path>) -> anyhow::Result<(PathBuf, Plan, Vec<String>)> {
    let dir = ctx.repo_dir()?;
    let path = match explicit {
        Some(p) => dir.join(p),
        None => Plan::locate(&dir).ok_or_else(|| {
            user(format!(
                "no plan in {}: neither .ralph/plan.md nor .ralph/plan.tsx exists\n  hint: write one (`## section` headings, `Files: …`, markers like `<!-- TASK-1 [ADD]: … -->`), or pass --plan FILE",
                dir.display()
            ))
        })?,
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| user(format!("cannot read the plan {}: {e}", path.display())))?;
    let (plan, parse_problems) = Plan::parse(&path, &text);
    let problems = plan
        .validate(parse_problems)
        .into_iter()
        .map(|p| format!("{}:{}: {}", path.display(), p.line, p.message))
        .collect();
    Ok((dir, plan, problems))
}

/// `plan validate`: exit 0 when valid, 1 with every problem (file:line) otherwise.
pub fn validate(args: PlanFileArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, plan, mut problems) = load(ctx, args.plan.as_deref())?;
    // A mutation task's plan must also cover the current task (what the harness checks
    // before it leaves the plan phase).
    let (_, ws) = ctx.workspace()?;
    let counter = TaskFiles::new(&ws).read_counter().unwrap_or(0);
    if counter > 0 {
        let uncovered = coverage(&dir, &plan, counter)
            .map_err(|e| user(format!("cannot read .ralph/task.md: {e}")))?;
        problems.extend(
            uncovered
                .into_iter()
                .map(|p| format!("{}:{}: {}", plan.path.display(), p.line, p.message)),
        );
    }
    if args.json {
        print_json(&serde_json::json!({
            "plan": plan.path,
            "valid": problems.is_empty(),
            "sections": plan.sections.len(),
            "problems": problems,
        }))?;
    } else if problems.is_empty() {
        println!(
            "{}: valid ({} sections, {} markers)",
            plan.path.display(),
            plan.sections.len(),
            plan.sections.iter().map(|s| s.markers.len()).sum::<usize>()
        );
    } else {
        for p in &problems {
            println!("{p}");
        }
        eprintln!("taskdaemon: the plan has {} problem(s)", problems.len());
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

/// `plan show [SECTION]`.
pub fn show(args: ShowArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (_, plan, _) = load(ctx, args.common.plan.as_deref())?;
    let sections: Vec<_> = match &args.section {
        Some(name) => vec![plan.section(name).ok_or_else(|| {
            let names: Vec<&str> = plan.sections.iter().map(|s| s.name.as_str()).collect();
            user(format!(
                "no section `{name}` in {}\n  hint: its sections are: {}",
                plan.path.display(),
                names.join(", ")
            ))
        })?],
        None => plan.sections.iter().collect(),
    };
    if args.common.json {
        return super::print_list("sections", &sections).map(|()| 0);
    }
    for s in sections {
        println!("{} (line {})", s.name, s.line);
        if !s.files.is_empty() {
            println!("  files: {}", s.files.join(", "));
        }
        for m in &s.markers {
            let task = m.task.map(|t| format!("TASK-{t} ")).unwrap_or_default();
            println!("  {task}[{}] {}", m.kind.label(), m.text);
        }
        if args.section.is_some() {
            println!("\n{}", s.body.trim_end());
        }
    }
    Ok(0)
}

/// `plan diff`: the scope gates of task N against `task-N-pre`, without running FIX checks.
pub fn diff(args: DiffArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, plan, _) = load(ctx, args.common.plan.as_deref())?;
    let (_, ws) = ctx.workspace()?;
    let task = match args.task {
        Some(n) => n,
        None => TaskFiles::new(&ws).read_counter().map_err(user)?,
    };
    let snaps = Snapshots::open(&dir).map_err(user)?;
    let pre = snaps
        .task_pre(task)
        .map_err(user)?
        .ok_or_else(|| {
            user(format!(
                "no task-{task}-pre snapshot to compare with\n  hint: tasks started with `taskdaemon task` have one; pass --task N for another task"
            ))
        })?;
    let world = GitWorld {
        workdir: dir.clone(),
        git: Git::new(&dir),
        baseline: format!("{}^{{commit}}", pre.commit),
        checks: HashMap::new(),
    };
    let mut results = scope_gates(&plan, task, &world);
    // FIX checks are not run here: say so instead of failing them.
    for r in results
        .iter_mut()
        .filter(|r| r.gate.ends_with(":fix") && !r.passed)
    {
        r.passed = true;
        r.message = format!(
            "{} (not run by `plan diff`)",
            r.message.replace(" still fails", "")
        );
    }
    // Exit 1 when a hard gate fails (what would block the task's completion).
    let code = i32::from(results.iter().any(|r| r.blocks()));
    if args.common.json {
        return super::print_list("gates", &results).map(|()| code);
    }
    if results.is_empty() {
        println!("no markers for task {task} in {}", plan.path.display());
    }
    for r in &results {
        let mark = match (r.passed, r.severity) {
            (true, _) => "ok  ",
            (false, Severity::Hard | Severity::Ask) => "FAIL",
            (false, Severity::Soft) => "warn",
        };
        println!("{mark} {}", r.message);
    }
    Ok(code)
}

/// `plan update`: task.md's requirements as markers in the plan; the old plan is kept.
pub fn update(args: PlanFileArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, plan, _) = load(ctx, args.plan.as_deref())?;
    let (_, ws) = ctx.workspace()?;
    let files = TaskFiles::new(&ws);
    let task_md = files.read(&files.task()).map_err(user)?.ok_or_else(|| {
        user(format!(
            "no task: {} does not exist\n  hint: `taskdaemon task \"…\"` writes it",
            files.task().display()
        ))
    })?;
    let (counter, reqs) = task_requirements(&task_md);
    let n = counter.ok_or_else(|| {
        user(format!(
            "{} has no `Counter:` line\n  hint: it is written by `taskdaemon task`",
            files.task().display()
        ))
    })?;
    let old = std::fs::read_to_string(&plan.path)
        .map_err(|e| user(format!("cannot read {}: {e}", plan.path.display())))?;
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let repo_files = project_context(&dir, &ws).files;
    let files_for = |t: &str| files_for(t, &repo_files);
    let world = UpdateWorld {
        read: &read,
        files_for: &files_for,
    };
    let u = update_plan(&plan.path, &old, n, &reqs, &world)
        .map_err(|e| user(format!("{}: not updated: {e}", plan.path.display())))?;
    if !u.changes.is_empty() {
        // Nothing destroyed: the plan as it was goes to .ralph/archive/ first.
        let keep = ws.archive_dir().join(format!(
            "plan-before-task-{n}-{}.{}",
            clock::now().as_second(),
            plan.path
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("md")
        ));
        fsutil::write_atomic(&keep, old.as_bytes()).map_err(|e| {
            user(format!(
                "cannot keep the old plan in {}: {e}",
                keep.display()
            ))
        })?;
        fsutil::write_atomic(&plan.path, u.text.as_bytes())
            .map_err(|e| user(format!("cannot write {}: {e}", plan.path.display())))?;
    }
    if args.json {
        return print_json(
            &serde_json::json!({ "plan": plan.path, "task": n, "changes": u.changes }),
        )
        .map(|()| 0);
    }
    if u.changes.is_empty() {
        println!("{}: already up to date for task {n}", plan.path.display());
    }
    for c in &u.changes {
        println!("{c}");
    }
    Ok(0)
}
