//! `start | pause | resume | cancel REF` on a plan, spec or run: the change to the records,
//! and which active runs must be interrupted (and into which status). The daemon applies it
//! and stops the processes; without a daemon the CLI applies it to the store alone.

use taskstore::Filter;

use crate::scheduler::{runs, specs};
use crate::store::{
    AnyRecord, LoopKind, LoopRun, PlanStatus, Records, RunStatus, SpecStatus, StoreError,
};
use crate::workspace::Workspace;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Start,
    Pause,
    Resume,
    Cancel,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "start" => Action::Start,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "cancel" => Action::Cancel,
            _ => return None,
        })
    }
}

/// What an active run's process ends as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAs {
    Paused,
    Stopped,
}

/// The note of a running run asked to pause: it stops when its iteration ends.
pub const PAUSING_NOTE: &str =
    "pausing: stops when its iteration ends (pause it again, or `pause --force`, to stop it now)";

/// Whether a run's note says it pauses when its iteration ends.
pub fn is_pausing(note: Option<&str>) -> bool {
    note == Some(PAUSING_NOTE)
}

#[derive(Debug, Default)]
pub struct Applied {
    /// What happened, one line per record.
    pub lines: Vec<String>,
    /// Active runs to interrupt now.
    pub stop: Vec<(String, StopAs)>,
    /// Active runs to pause when their iteration ends (their note says so).
    pub pause_after: Vec<String>,
    /// Runs to start now, past the concurrency limits.
    pub start_now: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot {action} {id}: it is {status}\n  hint: {hint}")]
    Refused {
        action: &'static str,
        id: String,
        status: String,
        hint: String,
    },
}

/// How a control request applies: when it happens and which runs have a live process.
pub struct Scope<'a> {
    pub now: i64,
    /// Whether a run has a live process in the daemon.
    pub active: &'a dyn Fn(&str) -> bool,
    /// A pause stops a live run at once (its iteration is done again when it goes on);
    /// without it the run stops when its iteration ends, unless it was pausing already.
    pub force: bool,
}

/// Apply `action` to the record `reference` names.
pub fn apply(
    records: &mut Records,
    action: Action,
    reference: &str,
    scope: &Scope,
) -> Result<Applied, ControlError> {
    let now = scope.now;
    let record = records.find(reference)?;
    let mut out = Applied::default();
    match record {
        AnyRecord::Run(run) => {
            let done = on_run(records, action, run, scope, &mut out, true)?;
            if !done {
                return Ok(out);
            }
        }
        AnyRecord::Spec(mut spec) => {
            let children = runs(records, &[Filter::eq("parent", spec.id.as_str())])?;
            for r in children {
                on_run(records, action, r, scope, &mut out, false)?;
            }
            let (status, note) = match action {
                // Nothing more of it starts until it is resumed (its running phase was paused above).
                Action::Pause
                    if matches!(
                        spec.status,
                        SpecStatus::Pending | SpecStatus::Running | SpecStatus::Blocked
                    ) =>
                {
                    (SpecStatus::Paused, None)
                }
                Action::Pause => (spec.status, spec.note.clone()),
                Action::Cancel => (SpecStatus::Failed, Some("cancelled by a person".into())),
                Action::Start | Action::Resume => {
                    let started = runs(records, &[Filter::eq("parent", spec.id.as_str())])?
                        .iter()
                        .any(|r| r.loop_type == LoopKind::Phase);
                    if spec.status == SpecStatus::Complete {
                        return Err(refused(action, &spec.id, "complete", "nothing to do"));
                    }
                    (
                        if started {
                            SpecStatus::Running
                        } else {
                            SpecStatus::Pending
                        },
                        None,
                    )
                }
            };
            if status != spec.status || note != spec.note {
                out.lines
                    .push(format!("spec {}: {} -> {status}", spec.id, spec.status));
                spec.status = status;
                spec.note = note;
                records.update(AnyRecord::Spec(spec), now)?;
            }
        }
        AnyRecord::Plan(mut plan) => {
            let own = runs(records, &[Filter::eq("parent", plan.id.as_str())])?;
            for r in own {
                on_run(records, action, r, scope, &mut out, false)?;
            }
            for s in specs(records, &[Filter::eq("parent", plan.id.as_str())])? {
                if s.status != SpecStatus::Complete {
                    let more = apply(records, action, &s.id, scope)?;
                    out.lines.extend(more.lines);
                    out.stop.extend(more.stop);
                    out.pause_after.extend(more.pause_after);
                    out.start_now.extend(more.start_now);
                }
            }
            let paused = action == Action::Pause
                && matches!(
                    plan.status,
                    PlanStatus::Draft | PlanStatus::Ready | PlanStatus::InProgress
                );
            let status = match action {
                Action::Pause if paused => PlanStatus::Paused,
                Action::Pause => plan.status,
                Action::Cancel => PlanStatus::Cancelled,
                Action::Start | Action::Resume => match plan.status {
                    // A plan goes on from what its records say (a draft whose plan run is
                    // complete is ready again on the next pass).
                    PlanStatus::Failed | PlanStatus::Cancelled | PlanStatus::Paused => {
                        if specs(records, &[Filter::eq("parent", plan.id.as_str())])?.is_empty()
                            && !runs(records, &[Filter::eq("parent", plan.id.as_str())])?
                                .iter()
                                .any(|r| {
                                    r.loop_type == LoopKind::Spec && r.status == RunStatus::Complete
                                })
                        {
                            PlanStatus::Draft
                        } else {
                            PlanStatus::InProgress
                        }
                    }
                    s => s,
                },
            };
            let note = None;
            if status != plan.status || note != plan.note {
                out.lines
                    .push(format!("plan {}: {} -> {status}", plan.id, plan.status));
                plan.status = status;
                plan.note = note;
                records.update(AnyRecord::Plan(plan), now)?;
            }
        }
    }
    Ok(out)
}

fn refused(action: Action, id: &str, status: &str, hint: &str) -> ControlError {
    ControlError::Refused {
        action: action.as_str(),
        id: id.to_string(),
        status: status.to_string(),
        hint: hint.to_string(),
    }
}

/// One run. `strict`: the run was named itself, so an action that does not apply is an
/// error (for runs reached through a spec or plan it is skipped). Returns whether the
/// caller should go on.
fn on_run(
    records: &mut Records,
    action: Action,
    mut run: LoopRun,
    scope: &Scope,
    out: &mut Applied,
    strict: bool,
) -> Result<bool, ControlError> {
    let now = scope.now;
    let live = (scope.active)(&run.id);
    let new = match (action, run.status) {
        (Action::Pause, RunStatus::Running)
            if live && (scope.force || is_pausing(run.note.as_deref())) =>
        {
            out.stop.push((run.id.clone(), StopAs::Paused));
            out.lines.push(format!(
                "run {}: pausing now (iteration {} is stopped and done again on resume)",
                run.id, run.iteration
            ));
            return Ok(true);
        }
        (Action::Pause, RunStatus::Running) if live => {
            out.pause_after.push(run.id.clone());
            out.lines.push(format!(
                "run {}: pauses when iteration {} ends (pause it again, or `pause --force`, to stop it now)",
                run.id, run.iteration
            ));
            run.note = Some(PAUSING_NOTE.to_string());
            records.update(AnyRecord::Run(run), now)?;
            return Ok(true);
        }
        (Action::Pause, RunStatus::Running | RunStatus::Pending) => RunStatus::Paused,
        (Action::Cancel, RunStatus::Running | RunStatus::Rebasing) if live => {
            out.stop.push((run.id.clone(), StopAs::Stopped));
            out.lines.push(format!("run {}: cancelling", run.id));
            return Ok(true);
        }
        (
            Action::Cancel,
            RunStatus::Running
            | RunStatus::Pending
            | RunStatus::Paused
            | RunStatus::Blocked
            | RunStatus::Rebasing,
        ) => RunStatus::Stopped,
        (Action::Resume | Action::Start, RunStatus::Running) if live => {
            if strict {
                return Err(refused(action, &run.id, "running", "it is running already"));
            }
            return Ok(true);
        }
        (
            Action::Resume | Action::Start,
            RunStatus::Paused
            | RunStatus::Blocked
            | RunStatus::Stopped
            | RunStatus::Failed
            | RunStatus::Pending
            | RunStatus::Running,
        ) => {
            // A standalone run blocked on its merge goes back to merging; anything else runs.
            let merge_again = run.status == RunStatus::Blocked
                && run.note.as_deref().is_some_and(|n| n.starts_with("merge"));
            if let Some(wt) = &run.worktree {
                // The person has dealt with the agent's BLOCKED: clear it so the loop runs.
                let _ = Workspace::new(std::path::Path::new(wt)).remove_blocked();
            }
            if action == Action::Start && !merge_again {
                out.start_now.push(run.id.clone());
            }
            if merge_again {
                RunStatus::Rebasing
            } else {
                RunStatus::Pending
            }
        }
        (_, status) => {
            if strict {
                let hint = match status {
                    RunStatus::Complete => "it is finished",
                    _ => "see `taskdaemon status`",
                };
                return Err(refused(action, &run.id, status.as_str(), hint));
            }
            return Ok(true);
        }
    };
    out.lines
        .push(format!("run {}: {} -> {new}", run.id, run.status));
    run.status = new;
    if new != RunStatus::Rebasing {
        run.note = None;
    }
    let parent = run.parent.clone();
    let loop_type = run.loop_type.clone();
    records.update(AnyRecord::Run(run), now)?;
    if strict
        && matches!(action, Action::Resume | Action::Start)
        && let Some(p) = parent
    {
        wake_parent(records, &p, &loop_type, now, out)?;
    }
    Ok(true)
}

/// A run named itself and resumed: the spec or plan it stopped goes on with it.
fn wake_parent(
    records: &mut Records,
    parent: &str,
    loop_type: &LoopKind,
    now: i64,
    out: &mut Applied,
) -> Result<(), ControlError> {
    match records.get(parent)? {
        Some(AnyRecord::Spec(mut s))
            if matches!(
                s.status,
                SpecStatus::Blocked | SpecStatus::Failed | SpecStatus::Paused
            ) =>
        {
            out.lines
                .push(format!("spec {}: {} -> running", s.id, s.status));
            s.status = SpecStatus::Running;
            s.note = None;
            records.update(AnyRecord::Spec(s), now)?;
        }
        Some(AnyRecord::Plan(mut p))
            if matches!(
                p.status,
                PlanStatus::Failed | PlanStatus::Cancelled | PlanStatus::Paused
            ) || p.note.is_some() =>
        {
            let status = if *loop_type == LoopKind::Plan {
                PlanStatus::Draft
            } else {
                PlanStatus::InProgress
            };
            out.lines
                .push(format!("plan {}: {} -> {status}", p.id, p.status));
            p.status = status;
            p.note = None;
            records.update(AnyRecord::Plan(p), now)?;
        }
        _ => {}
    }
    Ok(())
}
