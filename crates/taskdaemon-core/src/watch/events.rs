//! Folding the daemon's pushed events into the model. The store stays the truth: a
//! watcher reads it again after an event that changes a record ([`Model::apply`] says
//! which), then folds the events in on top (they may be newer than what it read).

use std::time::Instant;

use super::{Model, RunView, Waiting};
use crate::daemon::events::{DaemonEvent, Subject, WaitReason};
use crate::store::RunStatus;

/// Whether an event tells of a change to the records (a watcher then reads the store
/// again): all but agent lines and tool calls.
pub fn changes_records(e: &DaemonEvent) -> bool {
    !matches!(
        e,
        DaemonEvent::AgentLine { .. } | DaemonEvent::AgentActivity { .. }
    )
}

impl Model {
    /// The run an event is about; a run the model does not know yet goes under its spec
    /// or plan (as the store will have it), else among the standalone runs.
    fn subject_run(&mut self, s: &Subject) -> &mut RunView {
        if !self.runs.contains_key(&s.run) {
            self.place(s);
            self.runs.insert(s.run.clone(), RunView::blank(&s.run));
        }
        let r = self.run_mut(&s.run);
        if r.title.is_empty() {
            r.title = s.title.clone();
        }
        if r.loop_type.is_empty() {
            r.loop_type = s.loop_type.clone();
        }
        r
    }

    fn place(&mut self, s: &Subject) {
        let id = s.run.clone();
        for p in &mut self.plans {
            if let Some(spec) = s.spec.as_ref()
                && let Some(node) = p.specs.iter_mut().find(|n| &n.id == spec)
            {
                node.runs.push(id);
                return;
            }
            if s.spec.is_none() && s.plan.as_ref() == Some(&p.id) {
                p.runs.push(id);
                return;
            }
        }
        self.standalone.push(id);
    }

    /// Fold one pushed event in. Whether it tells of a change to the records (the
    /// watcher then reads the store again): all but agent lines and tool calls.
    pub fn apply(&mut self, e: &DaemonEvent) -> bool {
        use DaemonEvent as E;
        match e {
            E::DaemonStarted { pid, .. } => self.daemon = Some(*pid),
            E::DaemonStopped { .. } => self.daemon = None,
            _ => {}
        }
        let changes = changes_records(e);
        let Some(subject) = e.subject() else {
            return changes;
        };
        if subject.loop_type.is_empty() && !self.runs.contains_key(&subject.run) {
            // About a spec (its merge), not a run.
            if let E::Merged { .. } = e {
                self.spec_merged(&subject.run);
            }
            return changes;
        }
        let r = self.subject_run(subject);
        r.apply(e);
        changes
    }

    fn spec_merged(&mut self, id: &str) {
        for p in &mut self.plans {
            for s in p.specs.iter_mut().filter(|s| s.id == id) {
                s.status = "complete".into();
            }
        }
    }
}

impl RunView {
    fn running(&mut self) {
        if self.status != RunStatus::Running {
            self.since = None;
        }
        self.status = RunStatus::Running;
        self.since.get_or_insert_with(Instant::now);
    }

    fn stopped(&mut self, status: RunStatus) {
        self.status = status;
        self.since = None;
        self.pausing = false;
    }

    fn apply(&mut self, e: &DaemonEvent) {
        use DaemonEvent as E;
        let r = self;
        match e {
            E::RunStarted {
                iteration,
                worktree,
                ..
            } => {
                r.running();
                r.iteration = *iteration;
                r.workdir = Some(worktree.clone());
                r.waiting = None;
                r.note = None;
            }
            E::IterationStarted {
                iteration,
                max_iterations,
                ..
            } => {
                r.running();
                r.iteration = *iteration;
                r.max_iterations = Some(*max_iterations);
                r.live.clear();
            }
            E::AgentLine { line, .. } => {
                if r.live.len() >= super::LIVE_LINES {
                    r.live.remove(0);
                }
                r.live.push(line.clone());
            }
            // (The elapsed time is the store's, going on from when it was read.)
            E::IterationFinished { cost_total_usd, .. } if *cost_total_usd > 0.0 => {
                r.cost_usd = Some(*cost_total_usd);
            }
            E::AgentActivity { tool, detail, .. } => {
                r.last_tool = Some(if detail.is_empty() {
                    tool.clone()
                } else {
                    format!("{tool} {detail}")
                })
            }
            E::Waiting {
                reason,
                until,
                message,
                ..
            } => {
                r.waiting = Some(match reason {
                    WaitReason::UsageLimit | WaitReason::Backoff => Waiting::UsageLimit {
                        until: until.clone().unwrap_or_else(|| message.clone()),
                    },
                    WaitReason::MergeHeld => Waiting::MergeHeld(message.clone()),
                })
            }
            E::WaitOver { .. } => r.waiting = None,
            E::Blocked { reason, .. } => {
                r.stopped(RunStatus::Blocked);
                r.waiting = Some(Waiting::Blocked(reason.clone()));
            }
            E::Decide { question, .. } => {
                r.stopped(RunStatus::Blocked);
                r.waiting = Some(Waiting::Decide(question.clone()));
            }
            E::Complete { .. } => {
                r.stopped(RunStatus::Complete);
                r.waiting = None;
            }
            E::Failed { reason, .. } => {
                r.stopped(RunStatus::Failed);
                r.note = Some(reason.clone());
            }
            E::Stuck { .. } => r.stopped(RunStatus::Failed),
            E::MergeConflict { message, .. } => {
                r.waiting = Some(Waiting::MergeConflict(message.clone()))
            }
            E::MergeHeld { action, .. } => {
                r.waiting = Some(Waiting::MergeHeld(format!("take it with `{action}`")))
            }
            E::Merged { held_on, .. } => {
                r.waiting = held_on.as_ref().map(|b| {
                    Waiting::MergeHeld(format!("on {b}: take it with `git merge --ff-only {b}`"))
                })
            }
            E::Paused { .. } => r.stopped(RunStatus::Paused),
            E::Resumed { .. } => {
                r.stopped(RunStatus::Pending);
                r.waiting = None;
            }
            E::Cancelled { .. } => r.stopped(RunStatus::Stopped),
            E::Interrupted { .. } => {
                r.note = Some("interrupted: resumes on the next daemon start".into())
            }
            _ => {}
        }
    }
}
