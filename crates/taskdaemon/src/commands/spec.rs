//! `taskdaemon spec new TITLE --parent REF [--deps REF…] [--file F] [--phase "NAME: DESC"…]`

use std::path::PathBuf;

use clap::{Args, Subcommand};
use taskdaemon_core::store::paths::absolute;
use taskdaemon_core::store::{AnyRecord, NewSpec, Phase};
use taskstore::StoreOptions;

use super::{Ctx, emit, now_ms, open_records, print_json, record_json, resolve_all, store_err};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
pub struct SpecArgs {
    #[command(subcommand)]
    pub command: SpecCommand,
}

#[derive(Debug, Subcommand)]
pub enum SpecCommand {
    /// Create a spec under a parent (usually a plan), status pending.
    New(SpecNewArgs),
}

#[derive(Debug, Args)]
pub struct SpecNewArgs {
    /// The spec's title (one line, at most 256 characters); its id's slug comes from it.
    pub title: String,
    /// The record this spec belongs to (usually a plan): id, hex, or part of its name.
    #[arg(long, value_name = "REF")]
    pub parent: String,
    /// Records that must be complete before this spec starts: ids, hex, or part of a name.
    #[arg(long, num_args = 1.., value_name = "REF")]
    pub deps: Vec<String>,
    /// The spec's markdown file; relative paths are taken from the current directory and
    /// stored absolute. Default: .taskdaemon/specs/<id>.md
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// A phase, as "NAME: DESCRIPTION"; repeat for each phase, in order.
    #[arg(long = "phase", value_name = "NAME: DESC")]
    pub phases: Vec<String>,
    /// Print the new record as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SpecArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let SpecCommand::New(a) = args.command;
    let phases = a
        .phases
        .iter()
        .map(|p| Phase::parse(p).map_err(user))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut records = open_records(ctx, StoreOptions::default())?;
    let base = ctx.workdir()?;
    let parent = records.resolve(&a.parent).map_err(store_err)?;
    let deps = resolve_all(&records, &a.deps)?;
    let spec = records
        .create_spec(
            NewSpec {
                title: a.title,
                parent,
                file: a.file.map(|f| absolute(&f, &base).display().to_string()),
                deps,
                phases,
                ..Default::default()
            },
            now_ms(),
        )
        .map_err(store_err)?;
    let rec = AnyRecord::Spec(spec);
    if a.json {
        print_json(&record_json(&records, &rec)?)?;
    } else {
        let mut out = String::new();
        outln!(out, "created {}", rec.id());
        if let AnyRecord::Spec(s) = &rec {
            outln!(out, "  parent: {}", s.parent);
            // Only a file that exists is printed as the record's file; else where it will go.
            if std::path::Path::new(&s.file).is_file() {
                outln!(out, "  file: {}", s.file);
            } else {
                outln!(out, "  document: not written yet; it goes in {}", s.file);
            }
        }
        let r = records.readiness(&rec).map_err(store_err)?;
        if !r.ready {
            outln!(
                out,
                "  not ready: waiting for {}",
                r.waiting
                    .iter()
                    .map(|(id, st)| format!("{id} ({st})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        emit(&out)?;
    }
    Ok(0)
}
