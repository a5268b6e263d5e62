//! Carrying out an iteration's decision: the counters and feedback into the state, BLOCKED
//! and DECIDE written for a person (for the loop kind that stopped), the stall guard's
//! recovery (a snapshot and guidance) or its failure (a task's rollback).

use tokio_util::sync::CancellationToken;

use super::iteration::Iter;
use super::source::Finished;
use super::{EngineContext, EngineError, EngineEvent, Outcome, counters, decide, warn};
use crate::clock;
use crate::git::snapshot::Snapshots;
use crate::lifecycle::stall;
use crate::telemetry::IterationLog;

/// Carry out the decision `d` of the iteration whose finished members are `done`.
pub(super) fn apply(
    it: &mut Iter<'_>,
    done: &mut [Finished],
    mut d: decide::Decision,
) -> Result<decide::Decision, EngineError> {
    let n = it.n;
    let before = counters(it.st);
    let st = &mut *it.st;
    st.stuck_count = d.counters.stuck;
    st.stall_count = d.counters.stall;
    st.last_signature = d.counters.last_signature.clone();
    st.stall_recoveries = d.counters.stall_recoveries;
    if d.stuck_counted {
        st.stuck_iterations += 1;
    }
    match &d.feedback {
        decide::Feedback::Keep => {}
        decide::Feedback::Clear => st.previous_errors = None,
        decide::Feedback::Set(t) => st.previous_errors = Some(t.clone()),
    }
    let kind = it.cfg.source.kind();
    match &d.run_outcome {
        Some(Outcome::Blocked { reason }) => {
            it.ws
                .write_blocked(kind, reason, n, &clock::now_rfc3339())?
        }
        Some(Outcome::Decide { question }) => {
            it.ws
                .write_decide(kind, question, n, &clock::now_rfc3339())?
        }
        _ => {}
    }
    let (Some(action), Some(first)) = (d.stall, done.first_mut()) else {
        return Ok(d);
    };
    let snaps = loop_snapshots(&it.cfg.workdir, n, it.ctx, it.cancel)?;
    let recent = first.run.parsed.recent_tools.clone();
    match stall_effect(it, &snaps, &recent, action, &mut d, &mut first.log) {
        Err(EngineError::Lifecycle(e)) if e.is_stopped() => {
            stall_stopped(it, (action, &before), &mut d, &mut first.log, &e)
        }
        r => r?,
    }
    Ok(d)
}

/// The snapshots of a step of iteration `n` that may wait for another holder of a snapshot
/// lock (the stall guard's, a failing task's rollback): a wait that has lasted a second is
/// told as a warning, and the loop's stop ends it.
pub(super) fn loop_snapshots(
    workdir: &std::path::Path,
    n: u32,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Snapshots, EngineError> {
    let events = ctx.events.clone();
    let tell = move |lock: &std::path::Path, pid: Option<i32>| {
        events.emit(EngineEvent::Warning {
            message: format!(
                "iteration {n}: {}",
                crate::git::snapshot::waiting_text(lock, pid)
            ),
        });
    };
    Ok(Snapshots::open(workdir)?
        .stopped_by(cancel)
        .telling_waits_to(std::sync::Arc::new(tell)))
}

/// A stop while the stall guard waited for another holder of the snapshot lock (a stuck
/// save of another loop): its step is not carried out, nothing was saved or rolled back,
/// and the loop ends as interrupted. The guard's counters are as they were `before` this
/// iteration (a resumed run that repeats the same tool calls stalls again at once, and is
/// recovered, or fails, then).
fn stall_stopped(
    it: &mut Iter<'_>,
    (action, before): (decide::StallAction, &decide::Counters),
    d: &mut decide::Decision,
    log: &mut IterationLog,
    e: &crate::lifecycle::LifecycleError,
) {
    let st = &mut *it.st;
    st.stuck_count = before.stuck;
    st.stall_count = before.stall;
    st.stall_recoveries = before.stall_recoveries;
    d.counters.stuck = before.stuck;
    d.counters.stall = before.stall;
    d.counters.stall_recoveries = before.stall_recoveries;
    let what = match action {
        decide::StallAction::Recover { .. } => "recovery (a snapshot and guidance)",
        decide::StallAction::Fail { .. } => "failure of the task (its rollback)",
    };
    d.stall = None;
    d.run_outcome = None;
    d.outcome = decide::IterationOutcome::Interrupted;
    d.note.push_str("; stopped before the stall guard's step");
    let text = format!("stalled, but the stall guard's {what} was not carried out: {e}");
    log.note(&text);
    warn(it.ctx, &format!("iteration {}: {text}", it.n));
}

/// The stall guard's effect: the first stall is recovered (a snapshot and guidance), the
/// second fails the loop, rolling a task back.
fn stall_effect(
    it: &mut Iter<'_>,
    snaps: &Snapshots,
    recent_tools: &[String],
    action: decide::StallAction,
    d: &mut decide::Decision,
    log: &mut IterationLog,
) -> Result<(), EngineError> {
    let (n, st, ws, ctx) = (it.n, &mut *it.st, it.ws, it.ctx);
    let repeats = match action {
        decide::StallAction::Recover { repeats } => {
            let snap = stall::recover(snaps, ws, st.task, n, repeats, recent_tools)?;
            log.note(&format!(
                "stall: the same tool calls {repeats} iterations in a row; saved {}, recovery guidance in .ralph/feedback.md",
                snap.tag
            ));
            ctx.events.emit(EngineEvent::Stall {
                iteration: n,
                repeats,
                recovery: 1,
                snapshot: Some(snap.tag.clone()),
                rolled_back_to: None,
            });
            d.note.push_str(&format!("; stalled, saved {}", snap.tag));
            return Ok(());
        }
        decide::StallAction::Fail { repeats } => repeats,
    };
    let cause = format!("{} stall recoveries", st.stall_recoveries);
    let rb = crate::lifecycle::fail_task(snaps, ws, st.task, &cause)?;
    let reason = match &rb {
        Some(r) => format!(
            "stalled twice (the same tool calls {repeats} iterations in a row after a recovery); rolled back to {} (the stalled state is saved as {})",
            r.restored.tag, r.saved.tag
        ),
        None => format!(
            "stalled twice (the same tool calls {repeats} iterations in a row after a recovery); not a task, so nothing was rolled back"
        ),
    };
    log.note(&reason);
    ctx.events.emit(EngineEvent::Stall {
        iteration: n,
        repeats,
        recovery: st.stall_recoveries,
        snapshot: rb.as_ref().map(|r| r.saved.tag.clone()),
        rolled_back_to: rb.as_ref().map(|r| r.restored.tag.clone()),
    });
    d.run_outcome = Some(Outcome::Failed { reason });
    Ok(())
}
