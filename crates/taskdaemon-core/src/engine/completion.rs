//! The gate pipeline a completion must pass after the validation command, in order:
//! `phase` (a claim in the plan phase is swallowed), then the `scope` gates of the plan's
//! markers for this task. Hard failures block completion and go into `feedback.md` with
//! "attempt n of 5"; the fifth consecutive rejection aborts the task (rolled back to
//! `task-N-pre`, exit 5). Soft failures are only reported.

use std::collections::HashMap;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::state::{RunConfig, RunState};
use super::{EngineContext, EngineError, EngineEvent};
use crate::gates::phase;
use crate::gates::scope::{GateResult, GitWorld, Severity, scope_gates};
use crate::gates::{Validation, run_validation};
use crate::git::Git;
use crate::git::snapshot::Snapshots;
use crate::lifecycle::plan::{MarkerKind, Plan};
use crate::workspace::Workspace;

/// Consecutive rejected completions before the task is aborted.
pub const MAX_GATE_FAILURES: u32 = 5;

pub enum Verdict {
    Complete,
    /// Plan phase: the claim does not count; the next iteration validates the plan.
    Swallowed,
    Rejected {
        attempt: u32,
    },
    Abort {
        reason: String,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> EngineError {
    move |source| EngineError::Io { what, source }
}

pub async fn gates(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Verdict, EngineError> {
    let workdir = &cfg.workdir;
    if phase::swallows_completion(workdir).map_err(io("reading .ralph/phase.txt".into()))? {
        ctx.events.emit(EngineEvent::Gate {
            iteration: n,
            gate: "phase".into(),
            passed: false,
            severity: Severity::Soft,
            message: "completion claimed in the plan phase: ignored; the plan is validated at the top of the next iteration".into(),
        });
        return Ok(Verdict::Swallowed);
    }
    let results = scope(st, cfg, cancel).await?;
    for r in &results {
        ctx.events.emit(EngineEvent::Gate {
            iteration: n,
            gate: r.gate.clone(),
            passed: r.passed,
            severity: r.severity,
            message: r.message.clone(),
        });
    }
    let hard: Vec<&GateResult> = results.iter().filter(|r| r.blocks()).collect();
    if hard.is_empty() {
        st.gate_failures = 0;
        return Ok(Verdict::Complete);
    }
    st.gate_failures += 1;
    let attempt = st.gate_failures;
    if attempt >= MAX_GATE_FAILURES {
        let snaps = Snapshots::open(workdir)?;
        let cause = format!("{attempt} consecutive rejected completions (hard gate failures)");
        let rb = crate::lifecycle::fail_task(&snaps, ws, st.task, &cause)?;
        let reason = match rb {
            Some(r) => format!(
                "{cause}: {}; rolled back to {} (the state it replaced is saved as {})",
                hard[0].message, r.restored.tag, r.saved.tag
            ),
            None => format!(
                "{cause}: {}; not a task, so nothing was rolled back",
                hard[0].message
            ),
        };
        return Ok(Verdict::Abort { reason });
    }
    let list: String = hard.iter().map(|r| format!("- {}\n", r.message)).collect();
    let soft: String = results
        .iter()
        .filter(|r| !r.passed && r.severity == Severity::Soft)
        .map(|r| format!("- {}\n", r.message))
        .collect();
    let text = format!(
        "## Gate failures (attempt {attempt} of {MAX_GATE_FAILURES})\n\n\
The validation passed, but the plan's markers for this task are not met, so the task is not done:\n{list}{}\n\
Fix these first. After {MAX_GATE_FAILURES} rejected completions in a row the task is aborted and rolled back.\n",
        if soft.is_empty() {
            String::new()
        } else {
            format!("\nAlso check (warnings):\n{soft}")
        }
    );
    ws.write_feedback(&text)?;
    Ok(Verdict::Rejected { attempt })
}

/// The scope gates for the run's task, when it has a task, a `task-N-pre` snapshot and a
/// plan with markers for it.
async fn scope(
    st: &RunState,
    cfg: &RunConfig,
    cancel: &CancellationToken,
) -> Result<Vec<GateResult>, EngineError> {
    let Some(task) = st.task else {
        return Ok(Vec::new());
    };
    let workdir = &cfg.workdir;
    let Some(path) = Plan::locate(workdir) else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
    let (plan, _) = Plan::parse(&path, &text);
    if plan.marked_for(task).next().is_none() {
        return Ok(Vec::new());
    }
    let snaps = Snapshots::open(workdir)?;
    let Some(pre) = snaps.task_pre(task)? else {
        return Ok(Vec::new());
    };
    let mut checks = HashMap::new();
    for (_, m) in plan.marked_for(task) {
        if m.kind == MarkerKind::Fix
            && let Some(cmd) = &m.check
            && !checks.contains_key(cmd)
        {
            let v = run_validation(
                Validation {
                    command: cmd,
                    dir: workdir,
                    env: Vec::new(),
                    success_exit_code: 0,
                    timeout: cfg.iteration_timeout(),
                    grace: cfg.kill_grace(),
                },
                cancel,
                |_| {},
            )
            .await
            .map_err(io(format!("running the FIX check `{cmd}`")))?;
            checks.insert(cmd.clone(), v.passed);
        }
    }
    let world = GitWorld {
        workdir: workdir.clone(),
        git: Git::new(Path::new(workdir)),
        baseline: format!("{}^{{commit}}", pre.commit),
        checks,
    };
    Ok(scope_gates(&plan, task, &world))
}
