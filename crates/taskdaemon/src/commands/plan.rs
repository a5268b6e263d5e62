//! `taskdaemon plan new TITLE [--file F] [--deps REF…]` (a plan record in the store); the
//! plan-file subcommands (`validate`, `show`, `diff`, `update`) are in `plan_file.rs`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use taskdaemon_core::store::NewPlan;
use taskdaemon_core::store::paths::absolute;
use taskstore::StoreOptions;

use super::{Ctx, emit, now_ms, open_records, print_json, record_json, resolve_all, store_err};
use crate::outln;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: PlanCommand,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Create a plan record (status draft).
    New(PlanNewArgs),
    /// Check the plan file (.ralph/plan.md or plan.tsx): sections, markers; exit 1 with every problem.
    Validate(super::plan_file::PlanFileArgs),
    /// The plan's sections with their files and markers, or one section whole.
    Show(super::plan_file::ShowArgs),
    /// Plan vs implementation: the scope gates of task N's markers against task-N-pre.
    Diff(super::plan_file::DiffArgs),
    /// Write task.md's requirements into the plan as TASK-N markers (the old plan goes to .ralph/archive/).
    Update(super::plan_file::PlanFileArgs),
}

#[derive(Debug, Args)]
pub struct PlanNewArgs {
    /// The plan's title (one line, at most 256 characters); its id's slug comes from it.
    pub title: String,
    /// The plan's markdown file; a relative path is taken from the current directory and
    /// stored absolute. Default: .taskdaemon/plans/<id>.md
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Records that must be complete before this plan starts: ids, hex, or part of a name.
    #[arg(long, num_args = 1.., value_name = "REF")]
    pub deps: Vec<String>,
    /// Print the new record as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PlanArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let a = match args.command {
        PlanCommand::New(a) => a,
        PlanCommand::Validate(a) => return super::plan_file::validate(a, ctx),
        PlanCommand::Show(a) => return super::plan_file::show(a, ctx),
        PlanCommand::Diff(a) => return super::plan_file::diff(a, ctx),
        PlanCommand::Update(a) => return super::plan_file::update(a, ctx),
    };
    let mut records = open_records(ctx, StoreOptions::default())?;
    let base = ctx.workdir()?;
    let deps = resolve_all(&records, &a.deps)?;
    let plan = records
        .create_plan(
            NewPlan {
                title: a.title,
                file: a.file.map(|f| absolute(&f, &base).display().to_string()),
                deps,
                ..Default::default()
            },
            now_ms(),
        )
        .map_err(store_err)?;
    if a.json {
        let rec = taskdaemon_core::store::AnyRecord::Plan(plan);
        print_json(&record_json(&records, &rec)?)?;
    } else {
        let mut out = String::new();
        outln!(out, "created {}", plan.id);
        // Only a file that exists is printed as the record's file; else where it will go.
        if std::path::Path::new(&plan.file).is_file() {
            outln!(out, "  file: {}", plan.file);
        } else {
            outln!(out, "  document: not written yet; it goes in {}", plan.file);
        }
        emit(&out)?;
    }
    Ok(0)
}
