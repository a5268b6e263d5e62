//! Folding the daemon's pushed events into the model.

use std::path::{Path, PathBuf};

use super::{Model, PlanNode, RunView, SpecNode, Waiting, waiting_from_note};
use crate::daemon::events::{DaemonEvent, Subject, WaitReason};
use crate::daemon::status::{self, StatusSnapshot};
use crate::store::RunStatus;

impl RunView {
    fn from_status(r: &status::RunView) -> RunView {
        RunView {
            id: r.id.clone(),
            title: r.title.clone(),
            loop_type: r.loop_type.to_string(),
            status: r.status,
            iteration: r.iteration,
            max_iterations: None,
            phase: r.phase.as_ref().map(|p| match p.as_str() {
                Some(s) => s.to_string(),
                None => p.to_string(),
            }),
            last_tool: None,
            elapsed_ms: r.elapsed_ms,
            cost_usd: r.cost_usd,
            waiting: r.note.as_deref().and_then(waiting_from_note),
            workdir: r.worktree.as_ref().map(PathBuf::from),
            note: r.note.clone(),
            tasks: r.tasks.clone(),
            live: Vec::new(),
        }
    }
}

impl Model {
    /// The model of a `snapshot` (what `status --json` holds).
    pub fn from_snapshot(repository: &Path, s: &StatusSnapshot) -> Model {
        let mut m = Model {
            repository: repository.to_path_buf(),
            daemon: s.daemon.as_ref().map(|d| d.pid),
            ..Model::default()
        };
        let add = |m: &mut Model, runs: &[status::RunView]| -> Vec<String> {
            runs.iter()
                .map(|r| {
                    m.runs.insert(r.id.clone(), RunView::from_status(r));
                    r.id.clone()
                })
                .collect()
        };
        for p in &s.plans {
            let runs = add(&mut m, &p.runs);
            let specs = p
                .specs
                .iter()
                .map(|sp| SpecNode {
                    id: sp.id.clone(),
                    title: sp.title.clone(),
                    status: sp.status.clone(),
                    runs: add(&mut m, &sp.runs),
                })
                .collect();
            m.plans.push(PlanNode {
                id: p.id.clone(),
                title: p.title.clone(),
                status: p.status.clone(),
                runs,
                specs,
            });
        }
        m.standalone = add(&mut m, &s.runs);
        m
    }

    fn subject_run(&mut self, s: &Subject) -> &mut RunView {
        let r = self.run_mut(&s.run);
        if r.title.is_empty() {
            r.title = s.title.clone();
        }
        if r.loop_type.is_empty() {
            r.loop_type = s.loop_type.clone();
        }
        r
    }

    /// Fold one pushed event in.
    pub fn apply(&mut self, e: &DaemonEvent) {
        use DaemonEvent as E;
        match e {
            E::Snapshot(s) => *self = Model::from_snapshot(&self.repository.clone(), s),
            E::DaemonStarted { pid, .. } => self.daemon = Some(*pid),
            E::DaemonStopped { .. } => self.daemon = None,
            _ => {}
        }
        let Some(subject) = e.subject() else { return };
        if subject.loop_type.is_empty() && !self.runs.contains_key(&subject.run) {
            // About a spec (its merge), not a run.
            return;
        }
        let r = self.subject_run(subject);
        match e {
            E::RunStarted {
                iteration,
                worktree,
                ..
            } => {
                r.status = RunStatus::Running;
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
                r.status = RunStatus::Running;
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
            E::IterationFinished {
                duration_ms,
                cost_total_usd,
                ..
            } => {
                r.elapsed_ms += duration_ms;
                if *cost_total_usd > 0.0 {
                    r.cost_usd = Some(*cost_total_usd);
                }
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
                r.status = RunStatus::Blocked;
                r.waiting = Some(Waiting::Blocked(reason.clone()));
            }
            E::Decide { question, .. } => {
                r.status = RunStatus::Blocked;
                r.waiting = Some(Waiting::Decide(question.clone()));
            }
            E::Complete { .. } => {
                r.status = RunStatus::Complete;
                r.waiting = None;
            }
            E::Failed { reason, .. } => {
                r.status = RunStatus::Failed;
                r.note = Some(reason.clone());
            }
            E::Stuck { .. } => r.status = RunStatus::Failed,
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
            E::Paused { .. } => r.status = RunStatus::Paused,
            E::Resumed { .. } => {
                r.status = RunStatus::Pending;
                r.waiting = None;
            }
            E::Cancelled { .. } => r.status = RunStatus::Stopped,
            E::Interrupted { .. } => {
                r.note = Some("interrupted: resumes on the next daemon start".into())
            }
            _ => {}
        }
    }
}
