//! `taskdaemon list [plans|specs|runs] [--status S] [--parent REF] [--json]`

use clap::{Args, ValueEnum};
use taskdaemon_core::store::{AnyRecord, Kind};
use taskstore::{Filter, StoreOptions};

use super::{Ctx, emit, open_records, print_list, record_json, store_err};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Which {
    Plans,
    Specs,
    Runs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this kind (default: all).
    #[arg(value_enum)]
    pub which: Option<Which>,
    /// Only records with this status.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// Only records under this parent: id, hex, or part of its name.
    #[arg(long, value_name = "REF")]
    pub parent: Option<String>,
    /// Print a JSON array of records (with kind, ready and waiting-for).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ListArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let kinds: Vec<Kind> = match args.which {
        Some(Which::Plans) => vec![Kind::Plan],
        Some(Which::Specs) => vec![Kind::Spec],
        Some(Which::Runs) => vec![Kind::Run],
        None => Kind::ALL.to_vec(),
    };
    // A status only some kinds have narrows the kinds; one no kind has is an error.
    let kinds: Vec<Kind> = match &args.status {
        None => kinds,
        Some(s) => {
            let with: Vec<Kind> = kinds
                .iter()
                .copied()
                .filter(|k| k.statuses().contains(&s.as_str()))
                .collect();
            if with.is_empty() {
                let mut known: Vec<&str> = kinds
                    .iter()
                    .flat_map(|k| k.statuses().iter().copied())
                    .collect();
                known.sort();
                known.dedup();
                return Err(user(format!(
                    "status: `{s}` is not a status of {}\n  hint: use one of: {}",
                    kinds
                        .iter()
                        .map(|k| format!("{k}s"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    known.join(", ")
                )));
            }
            with
        }
    };
    let records = open_records(ctx, StoreOptions::default())?;
    let mut filters = Vec::new();
    if let Some(s) = &args.status {
        filters.push(Filter::eq("status", s.as_str()));
    }
    if let Some(p) = &args.parent {
        let id = records.resolve(p).map_err(store_err)?;
        filters.push(Filter::eq("parent", id));
    }
    let mut rows = Vec::new();
    for k in kinds {
        rows.extend(records.list(k, &filters).map_err(store_err)?);
    }
    if args.json {
        let all = rows
            .iter()
            .map(|r| record_json(&records, r))
            .collect::<anyhow::Result<Vec<_>>>()?;
        print_list("records", &all)?;
        return Ok(0);
    }
    if rows.is_empty() {
        emit("no records\n")?;
        return Ok(0);
    }
    let mut out = String::new();
    let w = rows.iter().map(|r| r.id().len()).max().unwrap_or(2).max(2);
    outln!(
        out,
        "{:<w$}  {:<4}  {:<11}  {:<5}  TITLE",
        "ID",
        "KIND",
        "STATUS",
        "READY"
    );
    for r in &rows {
        let ready = if records.is_ready(r).map_err(store_err)? {
            "yes"
        } else {
            "no"
        };
        // A run's title says what it works on (its phase, task or plan), not only `ralph`.
        let title = match r {
            AnyRecord::Run(run) => {
                let parent = run
                    .parent
                    .as_deref()
                    .and_then(|p| records.get(p).ok().flatten())
                    .map(|p| p.title().to_string());
                taskdaemon_core::report::run_title(run, parent.as_deref())
            }
            other => other.title().to_string(),
        };
        let status = crate::out::paint(
            &format!("{:<11}", r.status()),
            crate::out::status_style(r.status()),
            false,
        );
        outln!(
            out,
            "{:<w$}  {:<4}  {status}  {:<5}  {title}",
            r.id(),
            r.kind().tag(),
            ready,
        );
    }
    emit(&out)?;
    Ok(0)
}
