//! `taskdaemon edit REF [--status S] [--title T] [--file F] [--add-dep REF…] [--remove-dep REF…]`

use std::path::PathBuf;

use clap::Args;
use taskdaemon_core::store::AnyRecord;
use taskdaemon_core::store::paths::absolute;
use taskstore::StoreOptions;

use super::{Ctx, emit, now_ms, open_records, print_json, record_json, resolve_all, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
pub struct EditArgs {
    /// The record: id, hex, or part of its name.
    pub reference: String,
    /// New status (one of the record kind's statuses).
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// New title (plans and specs).
    #[arg(long)]
    pub title: Option<String>,
    /// New markdown file (plans and specs); relative paths are taken from the current directory.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Add deps: records that must be complete first. A dep that would close a cycle is refused.
    #[arg(long, num_args = 1.., value_name = "REF")]
    pub add_dep: Vec<String>,
    /// Remove deps.
    #[arg(long, num_args = 1.., value_name = "REF")]
    pub remove_dep: Vec<String>,
    /// Print the changed record as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: EditArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let mut records = open_records(ctx, StoreOptions::default())?;
    let mut rec = records.find(&args.reference).map_err(store_err)?;
    let before = rec.to_json();
    if let Some(s) = &args.status {
        rec.set_status(s).map_err(store_err)?;
    }
    let base = ctx.workdir()?;
    match &mut rec {
        AnyRecord::Plan(p) => {
            if let Some(t) = args.title {
                p.title = t;
            }
            if let Some(f) = &args.file {
                p.file = absolute(f, &base).display().to_string();
            }
        }
        AnyRecord::Spec(s) => {
            if let Some(t) = args.title {
                s.title = t;
            }
            if let Some(f) = &args.file {
                s.file = absolute(f, &base).display().to_string();
            }
        }
        AnyRecord::Run(_) => {
            if args.title.is_some() || args.file.is_some() {
                return Err(user(
                    "runs have no title or file\n  hint: change a run's status or deps",
                ));
            }
        }
    }
    let add = resolve_all(&records, &args.add_dep)?;
    let remove = resolve_all(&records, &args.remove_dep)?;
    let deps = rec.deps_mut();
    deps.retain(|d| !remove.contains(d));
    for d in add {
        if !deps.contains(&d) {
            deps.push(d);
        }
    }
    // Nothing asked for differs from what is stored: say so, write nothing.
    if rec.to_json() == before {
        if args.json {
            let mut v = record_json(&records, &rec)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("changed".into(), false.into());
            }
            print_json(&v)?;
        } else {
            emit(&format!(
                "nothing changed: {} already has those values\n  hint: pass --status, --title, --file, --add-dep or --remove-dep with a new value\n",
                rec.id()
            ))?;
        }
        return Ok(0);
    }
    let rec = records.update(rec, now_ms()).map_err(store_err)?;
    if args.json {
        print_json(&record_json(&records, &rec)?)?;
    } else {
        emit(&format!("updated {}\n", rec.id()))?;
    }
    Ok(0)
}
