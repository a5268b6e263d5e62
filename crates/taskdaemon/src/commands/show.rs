//! `taskdaemon show REF [--json]`: one record, found by id, hex, or part of its name.

use clap::Args;
use taskdaemon_core::store::AnyRecord;
use taskstore::{Filter, StoreOptions};

use super::{Ctx, emit, fmt_ms, open_records, print_json, record_json, store_err};
use crate::outln;

#[derive(Debug, Args)]
#[command(
    after_help = "A reference resolves, first rule that matches deciding: the full id \
(3f9a1c-spec-oauth-endpoints); its hex (3f9a1c); the start of the name after the hex \
(spec-oauth); a part of it (endpoints). Several matches are listed, not guessed."
)]
pub struct ShowArgs {
    /// Id, hex, or part of the name.
    pub reference: String,
    /// Print the record as JSON (with kind, ready and waiting-for).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ShowArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let records = open_records(ctx, StoreOptions::default())?;
    let rec = records.find(&args.reference).map_err(store_err)?;
    if args.json {
        print_json(&record_json(&records, &rec)?)?;
        return Ok(0);
    }
    let readiness = records.readiness(&rec).map_err(store_err)?;
    let mut out = String::new();
    outln!(out, "Found: {}", rec.id());
    field(&mut out, "kind", rec.kind().tag());
    match &rec {
        AnyRecord::Plan(p) => field(&mut out, "title", &p.title),
        AnyRecord::Spec(s) => field(&mut out, "title", &s.title),
        AnyRecord::Run(r) => field(&mut out, "loop-type", r.loop_type.as_str()),
    }
    field(&mut out, "status", rec.status());
    if readiness.ready {
        field(&mut out, "ready", "yes");
    } else {
        let waiting: Vec<String> = readiness
            .waiting
            .iter()
            .map(|(id, st)| format!("{id} ({st})"))
            .collect();
        field(
            &mut out,
            "ready",
            &format!("no: waiting for {}", waiting.join(", ")),
        );
    }
    if let Some(p) = rec.parent() {
        field(&mut out, "parent", p);
    }
    if !rec.deps().is_empty() {
        field(&mut out, "deps", &rec.deps().join(", "));
    }
    match &rec {
        AnyRecord::Plan(p) => field(&mut out, "file", &p.file),
        AnyRecord::Spec(s) => {
            field(&mut out, "file", &s.file);
            if !s.phases.is_empty() {
                outln!(out, "  phases:");
                for (i, ph) in s.phases.iter().enumerate() {
                    if ph.description.is_empty() {
                        outln!(out, "    {}. {}", i + 1, ph.name);
                    } else {
                        outln!(out, "    {}. {}: {}", i + 1, ph.name, ph.description);
                    }
                }
            }
        }
        AnyRecord::Run(r) => {
            field(&mut out, "iteration", &r.iteration.to_string());
            if let Some(w) = &r.worktree {
                field(&mut out, "worktree", w);
            }
            if !r.progress.is_empty() {
                field(&mut out, "progress", &r.progress);
            }
            if !r.context.is_empty() {
                field(
                    &mut out,
                    "context",
                    &serde_json::Value::Object(r.context.to_map()).to_string(),
                );
            }
        }
    }
    field(&mut out, "created", &fmt_ms(rec.created_at()));
    field(&mut out, "updated", &fmt_ms(rec.updated_at()));
    let mut children = Vec::new();
    for k in taskdaemon_core::store::Kind::ALL {
        for c in records
            .list(k, &[Filter::eq("parent", rec.id())])
            .map_err(store_err)?
        {
            children.push(format!("{} ({})", c.id(), c.status()));
        }
    }
    if !children.is_empty() {
        outln!(out, "  children:");
        for c in children {
            outln!(out, "    {c}");
        }
    }
    emit(&out)?;
    Ok(0)
}

fn field(out: &mut String, k: &str, v: &str) {
    outln!(out, "  {:<10}{v}", format!("{k}:"));
}
