//! What an iteration leaves behind: its progress note for the next prompts, one
//! `summary.csv` row per agent, each agent's log closed with the iteration's end, a pause
//! at usage, and the iteration's end announced.

use std::time::{Duration, Instant};

use super::iteration::Iter;
use super::source::{Finished, Judged, MemberVerdict, Unit};
use super::{EngineError, EngineEvent, Outcome, RunState, decide, failures, io_err, prompt};
use crate::duration::format_duration;
use crate::engine::decide::{Claim, IterationOutcome, ValidationResult};
use crate::telemetry::{SummaryRow, WorkTally, write_row_deferred};

/// Where the iteration started.
pub(super) struct Start {
    pub at: Instant,
    pub at_text: String,
    pub head_before: Option<String>,
}

/// Record the iteration and announce its end; the run's outcome when it ends the run.
pub(super) fn finish(
    it: &mut Iter<'_>,
    unit: &Unit,
    done: Vec<Finished>,
    j: &Judged,
    d: decide::Decision,
    start: Start,
    tally: Option<WorkTally>,
) -> Result<Option<Outcome>, EngineError> {
    let commit = (j.head_after.is_some() && j.head_after != start.head_before)
        .then(|| j.head_after.clone().unwrap_or_default());
    let short = commit.as_deref().map(|c| c[..c.len().min(12)].to_string());
    if let Some(first) = done.first() {
        record_progress(it.st, it.n, start.at, first, &d, short.as_deref());
    }
    let duration = start.at.elapsed();
    let single = done.len() == 1;
    for (i, f) in done.iter().enumerate() {
        let v = j.members.get(i).cloned().unwrap_or_default();
        let (outcome, validation, member_commit) = if single {
            (d.outcome, d.validation, short.clone())
        } else {
            member_labels(&v, &d)
        };
        let row = Row {
            mode: &unit.members[f.index].mode,
            outcome,
            validation,
            commit: member_commit,
        };
        record_row(it, duration, &start.at_text, f, &row, tally)?;
    }
    let agents: Duration = done
        .iter()
        .map(|f| f.run.agent.duration)
        .max()
        .unwrap_or_default();
    let decide::Decision {
        outcome: label,
        run_outcome: outcome,
        ..
    } = d;
    let paused = outcome.is_none()
        && done.iter().any(|f| {
            failures::pause_at_usage(
                it.st,
                it.cfg,
                &f.run.parsed.evidence,
                jiff::Timestamp::now(),
            )
        });
    for mut f in done {
        if paused {
            f.log.note(&format!(
                "pause at usage: {}; the next iteration waits for the window's reset",
                it.st.failures.wait_line.as_deref().unwrap_or_default()
            ));
        }
        f.log.note(&format!(
            "iteration {} ended: {}{}",
            it.n,
            label,
            outcome
                .as_ref()
                .map(|o| format!(" → loop ends: {}", o.label()))
                .unwrap_or_default()
        ));
        f.log
            .finish_deferred(it.pending)
            .map_err(io_err(format!("writing the log of iteration {}", it.n)))?;
    }
    let overhead = duration.saturating_sub(agents + j.validation_time);
    it.ctx.events.emit(EngineEvent::IterationFinished {
        iteration: it.n,
        outcome: label.label().to_string(),
        duration_ms: duration.as_secs_f64() * 1000.0,
        overhead_ms: overhead.as_secs_f64() * 1000.0,
        commit: short,
        stuck_count: it.st.stuck_count,
        cost_total_usd: it.st.cost_usd,
    });
    Ok(outcome)
}

/// A group member's own row labels: its claim, unless the iteration ended the run.
fn member_labels(
    v: &MemberVerdict,
    d: &decide::Decision,
) -> (IterationOutcome, ValidationResult, Option<String>) {
    let commit = v
        .commit
        .as_deref()
        .map(|c| c[..c.len().min(12)].to_string());
    match v.claim {
        None | Some(Claim::Pending) => (d.outcome, ValidationResult::Skipped, None),
        Some(Claim::Accepted) => (
            match d.outcome {
                IterationOutcome::Stuck | IterationOutcome::Complete => d.outcome,
                _ => IterationOutcome::Continue,
            },
            ValidationResult::Passed,
            commit,
        ),
        Some(Claim::Rejected | Claim::Tampered) => (
            if d.outcome == IterationOutcome::Stuck {
                d.outcome
            } else {
                IterationOutcome::Rejected
            },
            ValidationResult::Failed,
            None,
        ),
    }
}

/// The iteration's progress note for the next prompts (the last ones only).
fn record_progress(
    st: &mut RunState,
    n: u32,
    started: Instant,
    f: &Finished,
    d: &decide::Decision,
    short: Option<&str>,
) {
    let parsed = &f.run.parsed;
    let mut note = format!(
        "- iteration {n} ({}): agent exit {}, {} tool calls, {}; {}{}",
        format_duration(started.elapsed()),
        f.run.agent.status.code(),
        parsed.tool_calls,
        short
            .map(|c| format!("commit {c}"))
            .unwrap_or_else(|| "no commit".into()),
        d.outcome,
        d.note,
    );
    if let Some(last) = &parsed.last_text {
        // Quoted tags would put promises into the next prompt: keep their text only.
        let last = last
            .replace("<promise>", "[promise: ")
            .replace("</promise>", "]");
        let last: String = last.trim().chars().take(160).collect();
        note.push_str(&format!(". Last words: \"{last}\""));
    }
    st.progress.push(note);
    let keep = st.progress.len().saturating_sub(2 * prompt::PROGRESS_NOTES);
    st.progress.drain(..keep);
}

/// One agent's row, as labelled.
struct Row<'a> {
    mode: &'a str,
    outcome: IterationOutcome,
    validation: ValidationResult,
    commit: Option<String>,
}

/// The agent's row in the summary CSV (written before the run's state is saved). The time
/// waited before the iteration goes on its first row.
fn record_row(
    it: &mut Iter<'_>,
    duration: Duration,
    started_at: &str,
    f: &Finished,
    row: &Row<'_>,
    tally: Option<WorkTally>,
) -> Result<(), EngineError> {
    let parsed = &f.run.parsed;
    let st = &mut *it.st;
    let (done, total) = tally.map(|t| (t.done, t.total)).unwrap_or((0, 0));
    let r = SummaryRow {
        iteration: it.n,
        mode: row.mode.to_string(),
        duration_seconds: format!("{:.3}", duration.as_secs_f64()),
        commit_hash: row.commit.clone().unwrap_or_default(),
        stories_complete: done,
        stories_total: total,
        stuck_count: st.stuck_count,
        timestamp: started_at.to_string(),
        run_id: st.run_id.clone(),
        outcome: row.outcome,
        agent_exit_code: f.run.agent.status.code(),
        validation_passed: row.validation,
        tokens_in: parsed.tokens_in.unwrap_or(0),
        tokens_out: parsed.tokens_out.unwrap_or(0),
        cost_usd: format!("{:.6}", parsed.cost_usd.unwrap_or(0.0)),
        waited_seconds: format!("{:.3}", st.failures.waited_ms as f64 / 1000.0),
    };
    st.failures.waited_ms = 0;
    let csv = it.ws.summary_csv();
    write_row_deferred(&csv, &r, it.pending)
        .map_err(io_err(format!("writing to {}", csv.display())))?;
    Ok(())
}
