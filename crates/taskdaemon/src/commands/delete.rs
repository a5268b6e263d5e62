//! `taskdaemon delete REF [--json]`: delete a plan, spec or run record. Refused while
//! another record names it as parent or dep (no cascade: delete those first, or
//! `edit --remove-dep`), and while a run is running. The record is saved first to the git
//! directory's `taskdaemon/deleted/ID-TIME.json`.

use clap::Args;
use taskdaemon_core::git::Git;
use taskdaemon_core::store::{AnyRecord, RunStatus};
use taskstore::StoreOptions;

use super::{Ctx, emit, now_ms, open_records, print_json, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon delete 4d5e6f\n  taskdaemon delete plan-old-idea --json\n\n\
A record that others name (as parent or dep) is not deleted: delete those first, or drop the dep with \
`taskdaemon edit REF --remove-dep ID`. There is no --force cascade."
)]
pub struct DeleteArgs {
    /// The record: id, hex, or part of its name.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Print {"deleted": ID, "saved": FILE} as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DeleteArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let mut records = open_records(ctx, StoreOptions::default())?;
    let rec = records.find(&args.reference).map_err(store_err)?;
    let id = rec.id().to_string();
    if let AnyRecord::Run(r) = &rec
        && matches!(r.status, RunStatus::Running | RunStatus::Rebasing)
    {
        return Err(user(format!(
            "run {id} is {}: not deleted\n  hint: `taskdaemon cancel {id}` first",
            r.status.as_str()
        )));
    }
    let by: Vec<String> = records
        .referencing(&id)
        .map_err(store_err)?
        .into_iter()
        .filter(|r| *r != id)
        .collect();
    if !by.is_empty() {
        return Err(user(format!(
            "{id} is named by {} as parent or dep: not deleted\n  hint: delete those first, or `taskdaemon edit REF --remove-dep {id}`",
            by.join(", ")
        )));
    }
    // Saved before anything is destroyed.
    let dir = Git::new(ctx.project_dir()?)
        .common_dir()
        .map_err(user)?
        .join("taskdaemon/deleted");
    let now = now_ms();
    let saved = dir.join(format!("{id}-{now}.json"));
    let text = serde_json::to_string_pretty(&rec.to_json())? + "\n";
    std::fs::create_dir_all(&dir)
        .and_then(|()| taskdaemon_core::fsutil::write_atomic(&saved, text.as_bytes()))
        .map_err(|e| {
            user(format!(
                "cannot save the record to {}: {e}\n  hint: nothing was deleted",
                saved.display()
            ))
        })?;
    records.delete(&id, now).map_err(store_err)?;
    if args.json {
        print_json(&serde_json::json!({"deleted": id, "saved": saved}))?;
    } else {
        emit(&format!("deleted {id}\n  saved as {}\n", saved.display()))?;
    }
    Ok(0)
}
