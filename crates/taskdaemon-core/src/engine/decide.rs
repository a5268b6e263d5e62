//! The decision of an iteration, as a pure function: from the evidence the other steps
//! gathered (the agent step's result and failure class, the promise, the validation, the
//! completion gates' verdict, HEAD before and after, the tool-call signature), the state
//! (stuck and stall counters) and the config (limits), [`decide`] says what the iteration
//! was ([`IterationOutcome`], which names the CSV label), whether the loop ends (the run
//! [`Outcome`]), the next counters and the feedback for the next prompt. The engine's
//! `iteration` only carries out effects, for every work source (a work list's verdict is
//! [`WorkVerdict`]).

use std::time::Duration;

use serde::{Serialize, Serializer};

use super::Outcome;
use crate::duration::format_duration;
use crate::guards::{self, Limit};
use crate::signals::Signal;

/// What one iteration was; its label is the `outcome` column of summary.csv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IterationOutcome {
    Continue,
    Complete,
    Rejected,
    Blocked,
    Decide,
    Stuck,
    Timeout,
    Interrupted,
    Crashed,
    ValidationMissing,
    PlanPhase,
    StallRecovery,
    Failed,
}

impl IterationOutcome {
    pub fn label(self) -> &'static str {
        match self {
            IterationOutcome::Continue => "continue",
            IterationOutcome::Complete => "complete",
            IterationOutcome::Rejected => "rejected",
            IterationOutcome::Blocked => "blocked",
            IterationOutcome::Decide => "decide",
            IterationOutcome::Stuck => "stuck",
            IterationOutcome::Timeout => "timeout",
            IterationOutcome::Interrupted => "interrupted",
            IterationOutcome::Crashed => "crashed",
            IterationOutcome::ValidationMissing => "validation-missing",
            IterationOutcome::PlanPhase => "plan-phase",
            IterationOutcome::StallRecovery => "stall-recovery",
            IterationOutcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for IterationOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for IterationOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

/// The `validation_passed` column: `true`, `false` or `skipped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationResult {
    Passed,
    Failed,
    Skipped,
}

impl ValidationResult {
    pub fn label(self) -> &'static str {
        match self {
            ValidationResult::Passed => "true",
            ValidationResult::Failed => "false",
            ValidationResult::Skipped => "skipped",
        }
    }
}

impl Serialize for ValidationResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

/// How an attempt of a work source was judged (for the stuck rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Accepted,
    Rejected,
    /// Rejected for changing its own evidence: no progress, whatever it committed.
    Tampered,
    /// Not judged yet (a `[P]` member that finished while an earlier one waits): neither
    /// progress nor its absence.
    Pending,
}

/// A work list's verdict on an iteration's claims (the verification layers, the story
/// rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkVerdict {
    pub claim: Claim,
    /// Every unit of the list is done (and the agent said so where that is the rule).
    pub complete: bool,
}

/// The validation command's run, as evidence.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidationEvidence {
    /// No validation command, or it did not run (a promise ended the iteration first).
    NotRun,
    Passed,
    Failed {
        command: String,
        exit_code: i32,
        timed_out: bool,
        expected: i32,
        output: String,
    },
    /// Exit 127: the command is not there.
    Missing {
        command: String,
        output: String,
    },
    Interrupted,
}

/// The completion gates' verdict on a claim that passed the validation.
#[derive(Debug, Clone, PartialEq)]
pub enum GateVerdict {
    Complete,
    /// Plan phase: the claim does not count.
    Swallowed,
    Rejected {
        /// The agent changed its own evidence: counts toward stuck whatever HEAD did.
        tampered: bool,
    },
    /// The harness cannot measure a requirement and the agent cannot fix that: DECIDE.
    Ask {
        question: String,
    },
    Abort {
        reason: String,
    },
}

/// Everything the steps found out in one iteration.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub iteration: u32,
    pub interrupted: bool,
    pub timed_out: bool,
    /// The timeout was the run's remaining runtime.
    pub cut_by_runtime: bool,
    pub timeout: Option<Duration>,
    /// The agent failed to work (its failure class said so): why.
    pub no_work: Option<String>,
    pub signal: Option<Signal>,
    pub validation: Option<ValidationEvidence>,
    pub gates: Option<GateVerdict>,
    /// A work list's verdict (instead of a validation and gates).
    pub work: Option<WorkVerdict>,
    pub head_before: Option<String>,
    pub head_after: Option<String>,
    pub tool_signature: Option<String>,
    /// The run's cost after this iteration.
    pub cost_usd: f64,
    /// The agents changed git's own files (config, hooks: `git::guard`), named here; they
    /// were put back. The iteration's work is not judged: rejected, and no progress.
    pub git_tampered: Option<String>,
    /// Files that look like secrets which the run's commits add (`crate::secrets`): no
    /// claim is accepted while one does.
    pub secrets: Vec<String>,
}

/// The counters the decision reads and moves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub stuck: u32,
    pub stall: u32,
    pub last_signature: Option<String>,
    pub stall_recoveries: u32,
}

/// The config the decision reads.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub max_iterations: u32,
    pub max_cost: Option<f64>,
    pub max_stuck: u32,
    pub max_stall: u32,
    /// `--completion-promise`: a passing validation alone does not complete.
    pub promise_required: bool,
    pub has_validation: bool,
}

/// What the next prompt is told about this iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    Keep,
    Clear,
    Set(String),
}

/// The stall guard's effect to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallAction {
    /// A snapshot and guidance; the agent gets a fresh start.
    Recover { repeats: u32 },
    /// The second stall: roll the task back and fail.
    Fail { repeats: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub outcome: IterationOutcome,
    pub validation: ValidationResult,
    pub run_outcome: Option<Outcome>,
    pub counters: Counters,
    pub feedback: Feedback,
    pub stall: Option<StallAction>,
    /// Added to the iteration's progress note.
    pub note: String,
    /// The claim was rejected (by the validation or the gates): say why.
    pub rejected: Option<String>,
    /// The stuck guard counted this iteration (for the run's stuck-iterations total).
    pub stuck_counted: bool,
}

/// Whether the evidence so far says done (the completion gates run next): `Some(verified)`.
/// `None`: no gates.
pub fn completing(ev: &Evidence, policy: &Policy) -> Option<bool> {
    if ev.interrupted || ev.timed_out || ev.no_work.is_some() {
        return None;
    }
    let claimed = ev.signal == Some(Signal::Complete);
    match ev
        .validation
        .as_ref()
        .unwrap_or(&ValidationEvidence::NotRun)
    {
        ValidationEvidence::NotRun if !policy.has_validation => claimed.then_some(false),
        ValidationEvidence::Passed if claimed || !policy.promise_required => Some(true),
        _ => None,
    }
}

/// Decide the iteration.
pub fn decide(ev: &Evidence, st: &Counters, policy: &Policy) -> Decision {
    let mut d = Decision {
        outcome: IterationOutcome::Continue,
        validation: ValidationResult::Skipped,
        run_outcome: None,
        counters: st.clone(),
        feedback: Feedback::Keep,
        stall: None,
        note: String::new(),
        rejected: None,
        stuck_counted: false,
    };
    let counts_for_stuck = agent_rules(ev, policy, &mut d);
    if counts_for_stuck && d.run_outcome.is_none() {
        guard_rules(ev, policy, &mut d);
    } else if new_commit(ev) && !ev.timed_out {
        // An interrupted iteration that committed still made progress.
        d.counters.stuck = 0;
    }
    if d.run_outcome.is_none()
        && let Some(limit) = guards::limit_reached(
            ev.iteration,
            policy.max_iterations,
            Duration::ZERO,
            None,
            ev.cost_usd,
            policy.max_cost,
        )
    {
        d.run_outcome = Some(Outcome::LimitReached { limit });
    }
    d
}

/// What the next prompt says about an iteration whose agents changed git's own `files`.
pub fn git_tampered_feedback(iteration: u32, files: &str) -> String {
    format!(
        "Iteration {iteration} changed git's own files ({files}). taskdaemon put them back and did not accept the iteration's work. Never edit .git/config, .git/hooks, .git/commondir or a worktree's .git file (no `git config`, no hooks): change the project's files and commit them with plain `git add` and `git commit`."
    )
}

fn new_commit(ev: &Evidence) -> bool {
    ev.head_after.is_some() && ev.head_after != ev.head_before
}

/// The agent's result, its promise, the validation and the gates. Returns whether the
/// iteration counts for the stuck and stall guards.
fn agent_rules(ev: &Evidence, policy: &Policy, d: &mut Decision) -> bool {
    if ev.interrupted {
        d.outcome = IterationOutcome::Interrupted;
        d.run_outcome = Some(Outcome::Interrupted);
        return false;
    }
    if let Some(files) = &ev.git_tampered {
        d.outcome = IterationOutcome::Rejected;
        d.validation = ValidationResult::Failed;
        d.note.push_str(&format!(
            "; rejected: git's own files changed ({files}), put back"
        ));
        d.feedback = Feedback::Set(git_tampered_feedback(ev.iteration, files));
        d.rejected = Some(format!("git's own files changed: {files}"));
        return true;
    }
    if ev.timed_out {
        d.outcome = IterationOutcome::Timeout;
        let limit = ev.timeout.map(format_duration).unwrap_or_default();
        d.feedback = Feedback::Set(format!(
            "Iteration {} was stopped after {limit}: the agent did not finish in time. Take smaller steps and commit as you go.",
            ev.iteration
        ));
        d.note.push_str("; timed out");
        if ev.cut_by_runtime {
            d.run_outcome = Some(Outcome::LimitReached {
                limit: Limit::MaxRuntime,
            });
        }
        return true;
    }
    if let Some(reason) = &ev.no_work {
        // An agent that failed to work never completes, whatever the validation says.
        d.outcome = IterationOutcome::Crashed;
        d.note.push_str("; the agent crashed");
        d.feedback = Feedback::Set(reason.clone());
        return true;
    }
    match &ev.signal {
        Some(Signal::Blocked(reason)) => {
            d.outcome = IterationOutcome::Blocked;
            d.run_outcome = Some(Outcome::Blocked {
                reason: reason.clone(),
            });
            return true;
        }
        Some(Signal::Decide(question)) => {
            d.outcome = IterationOutcome::Decide;
            d.run_outcome = Some(Outcome::Decide {
                question: question.clone(),
            });
            return true;
        }
        _ => {}
    }
    let counts = if let Some(w) = &ev.work {
        work_rules(w, d);
        w.claim != Claim::Pending
    } else {
        let counts = validation_rules(ev, policy, d);
        if counts {
            gate_rules(ev, policy, d);
        }
        counts
    };
    if counts && !ev.secrets.is_empty() {
        secret_rules(ev, d);
    }
    counts
}

/// The run's commits add files that look like secrets: whatever was claimed, the work is
/// rejected (a completion does not end the run), and the next prompt says which files and
/// how to take them out of the commits.
fn secret_rules(ev: &Evidence, d: &mut Decision) {
    if matches!(
        d.outcome,
        IterationOutcome::ValidationMissing | IterationOutcome::Decide | IterationOutcome::Failed
    ) {
        return;
    }
    let names = crate::secrets::list(&ev.secrets);
    d.outcome = IterationOutcome::Rejected;
    if matches!(d.run_outcome, Some(Outcome::Complete { .. })) {
        d.run_outcome = None;
    }
    if d.validation == ValidationResult::Passed {
        d.validation = ValidationResult::Failed;
    }
    d.rejected = Some(format!(
        "the run's commits add files that look like secrets: {names}"
    ));
    d.note
        .push_str(&format!("; commits add secret-looking files: {names}"));
    let text = crate::secrets::take_out(&ev.secrets);
    d.feedback = match std::mem::replace(&mut d.feedback, Feedback::Keep) {
        Feedback::Set(other) => Feedback::Set(format!("{text}\n\n{other}")),
        _ => Feedback::Set(text),
    };
}

/// A work list's verdict: its claims were accepted (and the list may be done) or rejected.
fn work_rules(w: &WorkVerdict, d: &mut Decision) {
    match (w.claim, w.complete) {
        (Claim::Accepted, true) => {
            d.validation = ValidationResult::Passed;
            d.outcome = IterationOutcome::Complete;
            d.run_outcome = Some(Outcome::Complete { verified: true });
        }
        (Claim::Accepted, false) => d.validation = ValidationResult::Passed,
        (Claim::Pending, _) => d.note.push_str("; judged once the member before it is"),
        (Claim::Rejected | Claim::Tampered, _) => {
            d.validation = ValidationResult::Failed;
            d.outcome = IterationOutcome::Rejected;
        }
    }
}

/// The validation's verdict on the state (and on a claim).
fn validation_rules(ev: &Evidence, policy: &Policy, d: &mut Decision) -> bool {
    let claimed = ev.signal == Some(Signal::Complete);
    match ev
        .validation
        .as_ref()
        .unwrap_or(&ValidationEvidence::NotRun)
    {
        ValidationEvidence::NotRun => {}
        ValidationEvidence::Missing { command, output } => {
            d.validation = ValidationResult::Failed;
            d.outcome = IterationOutcome::ValidationMissing;
            d.run_outcome = Some(Outcome::ValidationMissing {
                command: command.clone(),
                output: output.clone(),
            });
        }
        ValidationEvidence::Interrupted => {
            d.validation = ValidationResult::Failed;
            d.outcome = IterationOutcome::Interrupted;
            d.run_outcome = Some(Outcome::Interrupted);
            return false;
        }
        ValidationEvidence::Passed => {
            d.validation = ValidationResult::Passed;
            d.feedback = Feedback::Clear;
            if policy.promise_required && !claimed {
                d.note
                    .push_str("; validation passes, waiting for the completion promise");
            }
        }
        ValidationEvidence::Failed {
            command,
            exit_code,
            timed_out,
            expected,
            output,
        } => {
            d.validation = ValidationResult::Failed;
            d.feedback = Feedback::Set(format!(
                "$ {command}\n(exit code {exit_code}{}, expected {expected})\n{}",
                if *timed_out { ", timed out" } else { "" },
                output.trim_end()
            ));
            if claimed {
                d.outcome = IterationOutcome::Rejected;
                d.rejected = Some(format!(
                    "COMPLETE claimed but validation failed (exit {exit_code}); its output goes into the next prompt"
                ));
            }
        }
    }
    true
}

/// The completion gates' last word on evidence that says done.
fn gate_rules(ev: &Evidence, policy: &Policy, d: &mut Decision) {
    let Some(verified) = completing(ev, policy) else {
        return;
    };
    match &ev.gates {
        None | Some(GateVerdict::Complete) => {
            d.outcome = IterationOutcome::Complete;
            d.run_outcome = Some(Outcome::Complete { verified });
        }
        Some(GateVerdict::Swallowed) => {
            d.outcome = IterationOutcome::PlanPhase;
            d.note.push_str("; completion ignored in the plan phase");
        }
        Some(GateVerdict::Rejected { .. }) => {
            d.outcome = IterationOutcome::Rejected;
        }
        Some(GateVerdict::Ask { question }) => {
            d.outcome = IterationOutcome::Decide;
            d.run_outcome = Some(Outcome::Decide {
                question: question.clone(),
            });
        }
        Some(GateVerdict::Abort { reason }) => {
            d.outcome = IterationOutcome::Failed;
            d.run_outcome = Some(Outcome::Failed {
                reason: reason.clone(),
            });
        }
    }
}

/// Stall first (its recovery gives the agent a fresh start and clears the stuck count),
/// then stuck.
fn guard_rules(ev: &Evidence, policy: &Policy, d: &mut Decision) {
    let c = &mut d.counters;
    c.stall = guards::next_stall_count(
        c.last_signature.as_deref(),
        c.stall,
        ev.tool_signature.as_deref(),
    );
    c.last_signature = ev.tool_signature.clone();
    if policy.max_stall > 0 && c.stall >= policy.max_stall {
        let repeats = c.stall;
        c.stall = 0;
        c.stall_recoveries += 1;
        if c.stall_recoveries == 1 {
            d.stall = Some(StallAction::Recover { repeats });
            d.outcome = IterationOutcome::StallRecovery;
            c.stuck = 0;
            return;
        }
        d.stall = Some(StallAction::Fail { repeats });
        d.outcome = IterationOutcome::Failed;
        d.run_outcome = Some(Outcome::Failed {
            reason: format!(
                "stalled twice (the same tool calls {repeats} iterations in a row after a recovery)"
            ),
        });
        return;
    }
    let tampered = matches!(ev.gates, Some(GateVerdict::Rejected { tampered: true }))
        || ev.work.is_some_and(|w| w.claim == Claim::Tampered)
        || ev.git_tampered.is_some();
    c.stuck = if tampered {
        // A commit that changes the evidence is no progress.
        c.stuck + 1
    } else {
        guards::next_stuck_count(
            c.stuck,
            ev.head_before.as_deref(),
            ev.head_after.as_deref(),
            ev.timed_out,
        )
    };
    d.stuck_counted = c.stuck > 0;
    if guards::is_stuck(c.stuck, policy.max_stuck) {
        d.outcome = IterationOutcome::Stuck;
        d.run_outcome = Some(Outcome::Stuck {
            iterations: c.stuck,
        });
    }
}

#[cfg(test)]
mod tests;
