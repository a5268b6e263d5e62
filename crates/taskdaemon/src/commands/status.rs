//! `taskdaemon status [--json]`: the tree plan → specs → runs, each with its status,
//! iteration, elapsed time, cost and why it waits; and whether the daemon runs.

use clap::Args;
use serde_json::{Value, json};
use taskdaemon_core::daemon::ipc::Request;
use taskdaemon_core::store::{AnyRecord, Kind, LoopRun, Records};
use taskstore::Filter;

use super::daemon_link;
use super::{Ctx, emit, print_json, store_err};
use crate::outln;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  taskdaemon status\n  taskdaemon status --json | jq '.plans[].specs[] | {id, status}'\n\n\
`taskdaemon logs REF` shows a run's iteration logs; `taskdaemon show REF` one record in full."
)]
pub struct StatusArgs {
    /// Print the tree as JSON.
    #[arg(long)]
    pub json: bool,
}

fn runs_of(records: &Records, parent: &str) -> anyhow::Result<Vec<LoopRun>> {
    taskdaemon_core::scheduler::runs(records, &[Filter::eq("parent", parent)]).map_err(store_err)
}

fn run_json(r: &LoopRun) -> Value {
    json!({
        "id": r.id, "loop-type": r.loop_type, "status": r.status.as_str(),
        "iteration": r.iteration, "elapsed-ms": r.elapsed_ms, "cost-usd": r.cost_usd,
        "worktree": r.worktree, "note": r.note,
        "phase": r.context.get("phase-number"),
    })
}

fn secs(ms: u64) -> String {
    taskdaemon_core::duration::format_duration(std::time::Duration::from_millis(ms))
}

fn run_line(out: &mut String, indent: &str, r: &LoopRun) {
    let phase = r
        .context
        .get("phase-number")
        .and_then(Value::as_str)
        .map(|p| format!(" phase {p}"))
        .unwrap_or_default();
    outln!(
        out,
        "{indent}run  {:<44} {:<9} {}{phase}  iteration {}  {}{}",
        r.id,
        r.status.as_str(),
        r.loop_type,
        r.iteration,
        secs(r.elapsed_ms),
        r.cost_usd.map(|c| format!("  ${c:.2}")).unwrap_or_default()
    );
    if let Some(n) = &r.note {
        outln!(out, "{indent}     {n}");
    }
}

pub fn run(args: StatusArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    let records = Records::open(&paths.project).map_err(store_err)?;
    let daemon = match daemon_link::call(&paths, &Request::Status) {
        Ok(Some(r)) => r.data,
        _ => Value::Null,
    };
    let mut plans_json = Vec::new();
    let mut out = String::new();
    if daemon.is_null() {
        outln!(out, "daemon: not running (`taskdaemon daemon start`)");
    } else {
        outln!(
            out,
            "daemon: pid {}, {} active of max {}",
            daemon["pid"],
            daemon["active"].as_array().map_or(0, Vec::len),
            daemon["max-loops"]
        );
        for (account, p) in daemon["quota-governor"].as_object().into_iter().flatten() {
            let until = p["until"]
                .as_i64()
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
                .map(taskdaemon_core::agent::failure::describe_local)
                .unwrap_or_default();
            outln!(
                out,
                "quota governor: {account} paused until {until}: {}; restarts: {}",
                p["reason"].as_str().unwrap_or_default(),
                p["slots"]
                    .as_object()
                    .map(|s| s.keys().cloned().collect::<Vec<_>>().join(", "))
                    .unwrap_or_default()
            );
        }
    }
    for p in records.list(Kind::Plan, &[]).map_err(store_err)? {
        let AnyRecord::Plan(p) = p else { continue };
        outln!(
            out,
            "plan {:<44} {:<11} {}",
            p.id,
            p.status.as_str(),
            p.title
        );
        if let Some(n) = &p.note {
            outln!(out, "     {n}");
        }
        let own = runs_of(&records, &p.id)?;
        for r in &own {
            run_line(&mut out, "  ", r);
        }
        let mut specs_json = Vec::new();
        for s in records
            .list(Kind::Spec, &[Filter::eq("parent", p.id.as_str())])
            .map_err(store_err)?
        {
            let readiness = records.readiness(&s).map_err(store_err)?;
            let AnyRecord::Spec(s) = s else { continue };
            outln!(
                out,
                "  spec {:<42} {:<9} {}",
                s.id,
                s.status.as_str(),
                s.title
            );
            if let Some(n) = &s.note {
                outln!(out, "       {n}");
            } else if !readiness.ready && s.status.as_str() == "pending" {
                let w: Vec<String> = readiness
                    .waiting
                    .iter()
                    .map(|(id, st)| format!("{id} ({st})"))
                    .collect();
                outln!(out, "       waiting for {}", w.join(", "));
            }
            let sr = runs_of(&records, &s.id)?;
            for r in &sr {
                run_line(&mut out, "    ", r);
            }
            specs_json.push(json!({
                "id": s.id, "title": s.title, "status": s.status.as_str(), "note": s.note,
                "deps": s.deps, "ready": readiness.ready,
                "runs": sr.iter().map(run_json).collect::<Vec<_>>(),
            }));
        }
        plans_json.push(json!({
            "id": p.id, "title": p.title, "status": p.status.as_str(), "note": p.note,
            "target-branch": p.target_branch,
            "runs": own.iter().map(run_json).collect::<Vec<_>>(),
            "specs": specs_json,
        }));
    }
    let mut standalone = Vec::new();
    for r in records.list(Kind::Run, &[]).map_err(store_err)? {
        let AnyRecord::Run(r) = r else { continue };
        if r.parent.is_none() {
            standalone.push(r);
        }
    }
    if !standalone.is_empty() {
        outln!(out, "runs");
        for r in &standalone {
            run_line(&mut out, "  ", r);
        }
    }
    if args.json {
        print_json(&json!({
            "daemon": daemon,
            "plans": plans_json,
            "runs": standalone.iter().map(run_json).collect::<Vec<_>>(),
        }))?;
    } else {
        emit(&out)?;
    }
    Ok(0)
}
