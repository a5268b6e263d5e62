//! `taskdaemon check-doc plan FILE | specs DIR`: the checks the built-in `plan` and `spec`
//! loops validate with. Exit 0 when the document(s) pass, 1 with every problem otherwise.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use taskdaemon_core::docs;
use taskdaemon_core::store::{Kind, Records, Resolution, ids};

use super::{Ctx, emit, print_json};
use crate::outln;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon check-doc plan .taskdaemon/plans/1a2b3c-plan-oauth.md --review-pass 5\n  \
taskdaemon check-doc specs .taskdaemon/specs/1a2b3c-plan-oauth/\n\n\
The plan and spec loops run these as their validation; the problems go into the next prompt.")]
pub struct CheckDocArgs {
    #[command(subcommand)]
    pub what: What,
    /// Print the result as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// A plan document: a `# Title`, `## ` sections, and all five review passes done.
    Plan {
        /// The plan document (relative paths start at -C DIR, else here).
        file: PathBuf,
        /// The review pass just done (1-5).
        #[arg(long, value_name = "N", default_value_t = docs::REVIEW_PASSES)]
        review_pass: u32,
    },
    /// A directory of spec documents: front matter (title, deps, phases), deps that resolve, no cycle.
    Specs {
        /// The directory of spec documents (relative paths start at -C DIR, else here).
        #[arg(value_name = "DIR")]
        specs_dir: PathBuf,
    },
}

pub fn run(args: CheckDocArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    // Under -C DIR, a relative path names a file there (as every other command's does).
    let base = ctx.workdir()?;
    let (problems, summary, data) = match &args.what {
        What::Plan { file, review_pass } => {
            let file = &base.join(file);
            let c = docs::check_plan(file, *review_pass);
            let summary = format!(
                "plan {}: {} section(s){}",
                c.title.as_deref().unwrap_or("(untitled)"),
                c.sections.len(),
                if c.passed() { ", ok" } else { "" }
            );
            let data = serde_json::to_value(&c)?;
            (c.problems, summary, data)
        }
        What::Specs { specs_dir } => {
            let dir = &base.join(specs_dir);
            // Deps may name specs already in the store; without a store, only the set counts.
            // The main work tree's store, also when the check runs in a loop's worktree.
            let records = ctx
                .repo_dir()
                .ok()
                .and_then(|d| taskdaemon_core::daemon::DaemonPaths::for_repo(&d).ok())
                .and_then(|p| Records::open(&p.project).ok());
            let external = |dep: &str| -> Result<Option<String>, String> {
                let Some(r) = &records else { return Ok(None) };
                match r.resolution(dep) {
                    Resolution::Found(id) if ids::kind_of(&id) == Some(Kind::Spec) => Ok(Some(id)),
                    Resolution::Ambiguous(c) => Err(format!("ambiguous: {}", c.join(", "))),
                    _ => Ok(None),
                }
            };
            let (set, problems) = docs::check_specs(dir, &external);
            let summary = format!("{} spec document(s) in {}", set.docs.len(), dir.display());
            let data = serde_json::json!({
                "specs": set.docs.iter().map(|d| serde_json::json!({
                    "file": d.file, "title": d.title, "deps": d.deps,
                    "phases": d.phases.len(),
                })).collect::<Vec<_>>(),
                "problems": problems,
            });
            (problems, summary, data)
        }
    };
    if args.json {
        print_json(&data)?;
    } else {
        let mut out = String::new();
        outln!(out, "{summary}");
        for p in &problems {
            outln!(out, "  {p}");
        }
        emit(&out)?;
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}
