//! The tasks source's unit of work and its judgement: the members of an iteration (one
//! task, or a `[P]` group in worktrees), the verdict on each that finished in task order
//! (a member after one that waits is parked and judged after it), the boxes put back,
//! accepted work landed, and the members that wait undone.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{
    Claimed, Parked, Slot, TaskVerdict, TasksSource, claim_of, record_verdicts, signal_of,
};
use crate::engine::decide::{Claim, WorkVerdict};
use crate::engine::events::WorkEvent;
use crate::engine::source::{Finished, Judged, Member, MemberVerdict};
use crate::engine::{EngineContext, RunState};
use crate::worklist::WorklistError;
use crate::worklist::tasks_md::Task;
use crate::worklist::verify::Failure;

/// What one member left to judge.
struct Judging<'a> {
    task: &'a Task,
    tree: PathBuf,
    base: Option<String>,
    words: &'a str,
    timed_out: bool,
    no_work: Option<&'a str>,
}

impl TasksSource {
    /// The members of the iteration, and their announcements.
    pub(super) fn members(
        &mut self,
        st: &RunState,
        n: u32,
        tasks: &[Task],
        group: &[usize],
        parallel: bool,
        decision: Option<&str>,
    ) -> Result<(Vec<Member>, Vec<WorkEvent>), WorklistError> {
        let mut members = Vec::new();
        let mut announce = Vec::new();
        if parallel && group.len() > 1 {
            announce.push(WorkEvent::GroupStarted {
                iteration: n,
                task_ids: group.iter().map(|i| tasks[*i].id.clone()).collect(),
            });
        }
        for &i in group {
            let tree = if parallel {
                Some(self.worktree(&tasks[i])?)
            } else {
                None
            };
            let cwd = tree.as_ref().map(|(_, p)| p.clone());
            let mut m = self.member(st, n, &tasks[i], cwd, decision)?;
            if let Some(note) = &self.note {
                m.prompt.push_str(note);
            }
            announce.push(self.started(&tasks[i], n, &m, parallel));
            members.push(m);
            self.now.slots.push(Slot {
                task: tasks[i].clone(),
                tree,
            });
        }
        Ok((members, announce))
    }

    /// Judge the finished members, then the parked ones when none waits any more.
    pub(super) async fn judge_unit(
        &mut self,
        st: &RunState,
        done: &[Finished],
        head: Option<String>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Judged, WorklistError> {
        let after = self.read_tasks()?;
        let parallel = self.now.slots.iter().any(|s| s.tree.is_some());
        let mut group: Vec<usize> = self.now.slots.iter().map(|s| s.task.index).collect();
        group.extend(self.parked.iter().map(|p| p.task.index));
        let first_wait = self
            .now
            .waiting
            .iter()
            .filter_map(|w| self.now.slots.get(*w).map(|s| s.task.index))
            .min();
        let mut j = Judged {
            head_after: head.clone(),
            ..Judged::default()
        };
        let mut verdicts: Vec<TaskVerdict> = Vec::new();
        let mut failed = Vec::new();
        let parked_before = self.parked.len();
        for f in done {
            let task = self.now.slots[f.index].task.clone();
            if cancel.is_cancelled() {
                j.interrupted = true;
            }
            if j.interrupted {
                self.abandon_members(&[f.index], ctx)?;
                j.members.push(MemberVerdict::default());
                continue;
            }
            if let Some(s) = signal_of(&f.run.parsed.words) {
                j.signal.get_or_insert(s);
                failed.push(task.index);
                j.members.push(MemberVerdict::default());
                continue;
            }
            if parallel && first_wait.is_some_and(|w| task.index > w) {
                self.park(f, &after)?;
                j.members.push(MemberVerdict::default());
                continue;
            }
            let tree = self.now.slots[f.index]
                .tree
                .as_ref()
                .map(|(_, p)| p.clone())
                .unwrap_or_else(|| self.repo.clone());
            let base = if parallel {
                self.now.base.clone()
            } else {
                st.last_head.clone()
            };
            let c = Judging {
                task: &task,
                tree,
                base,
                words: &f.run.parsed.words,
                timed_out: f.run.agent.timed_out,
                no_work: f.no_work.as_deref(),
            };
            match self
                .judge_one(&c, &after, &group, parallel, ctx, cancel)
                .await?
            {
                None => {
                    j.interrupted = true;
                    self.abandon_members(&[f.index], ctx)?;
                    j.members.push(MemberVerdict::default());
                }
                Some((v, commit)) => {
                    j.members.push(MemberVerdict {
                        claim: Some(claim_of(v.1.as_ref().err().map_or(&[][..], |f| f))),
                        commit,
                    });
                    if v.1.is_err() {
                        failed.push(task.index);
                    }
                    verdicts.push(v);
                }
            }
        }
        if parallel && first_wait.is_none() && !j.interrupted {
            j.interrupted = self
                .judge_parked(&after, &group, &mut verdicts, &mut failed, ctx, cancel)
                .await?;
        }
        if parallel {
            j.head_after = self.git.head()?;
        }
        self.settle_boxes(&after, &group, &verdicts, &failed, parallel, ctx)?;
        self.remove_trees(ctx);
        self.now.failed = record_verdicts(&mut self.state, &verdicts);
        self.state.parallel_group = None;
        let parked_now = self.parked.len() > parked_before;
        j.work = Some(WorkVerdict {
            claim: if verdicts.is_empty() && parked_now && j.signal.is_none() {
                Claim::Pending
            } else {
                iteration_claim(&verdicts)
            },
            complete: self.parked.is_empty() && self.read_tasks()?.iter().all(|t| t.done),
        });
        Ok(j)
    }

    /// One claim's verdict, and its commits landed when accepted (`None`: the run's stop
    /// cut its Verify command short: no verdict).
    async fn judge_one(
        &self,
        c: &Judging<'_>,
        after: &[Task],
        group: &[usize],
        parallel: bool,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Option<(TaskVerdict, Option<String>)>, WorklistError> {
        let others: Vec<usize> = group
            .iter()
            .copied()
            .filter(|g| *g != c.task.index)
            .collect();
        let claimed = Claimed {
            task: c.task,
            words: c.words,
            timed_out: c.timed_out,
            no_work: c.no_work,
            tree: &c.tree,
            tasks_after: after,
            group: &others,
        };
        let Some(mut failures) = self.verdict(&claimed, ctx, cancel).await? else {
            return Ok(None);
        };
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let mut commits = Vec::new();
        if failures.is_empty() {
            commits = self.commits_since(&c.tree, c.base.as_deref())?;
            if parallel && let Err(msg) = self.cherry_pick(&commits) {
                failures.push(Failure {
                    layer: 2,
                    message: format!(
                        "the commits of task {} do not apply on top of the tasks before it: {msg}. Touch only the task's own files",
                        c.task.id
                    ),
                });
            }
        }
        let last = commits.last().cloned();
        if failures.is_empty() {
            self.evidence.done(c.task);
            ctx.events.work(WorkEvent::TaskCompleted {
                task_id: c.task.id.clone(),
                task_index: c.task.index,
                commits: commits.clone(),
            });
            Ok(Some(((c.task.index, Ok(commits)), last)))
        } else {
            self.reject(c.task, &failures, ctx);
            Ok(Some(((c.task.index, Err(failures)), None)))
        }
    }

    /// Keep a finished member for later: its worktree stays, its box goes back until it is
    /// judged.
    fn park(&mut self, f: &Finished, after: &[Task]) -> Result<(), WorklistError> {
        let slot = &mut self.now.slots[f.index];
        let Some(tree) = slot.tree.take() else {
            return Ok(());
        };
        let task = slot.task.clone();
        let checked = after
            .get(task.index)
            .is_some_and(|t| t.done && t.id == task.id);
        self.restore_boxes(&[task.index], &self.now.checked_before.clone())?;
        let parked = Parked {
            base: self.now.base.clone().unwrap_or_default(),
            task,
            tree,
            words: f.run.parsed.words.clone(),
            timed_out: f.run.agent.timed_out,
            no_work: f.no_work.clone(),
            checked,
        };
        self.pin(&parked);
        self.parked.push(parked);
        Ok(())
    }

    /// The parked members, judged and landed after the members before them; `true` when the
    /// run's stop left one without a verdict (it stays parked).
    async fn judge_parked(
        &mut self,
        after: &[Task],
        group: &[usize],
        verdicts: &mut Vec<TaskVerdict>,
        failed: &mut Vec<usize>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<bool, WorklistError> {
        let mut parked = std::mem::take(&mut self.parked);
        let mut stopped = false;
        parked.sort_by_key(|p| p.task.index);
        for p in parked {
            // Its box as it left it.
            let mut seen = after.to_vec();
            if let Some(t) = seen.get_mut(p.task.index)
                && t.id == p.task.id
            {
                t.done = p.checked;
            }
            let c = Judging {
                task: &p.task,
                tree: p.tree.1.clone(),
                base: Some(p.base.clone()),
                words: &p.words,
                timed_out: p.timed_out,
                no_work: p.no_work.as_deref(),
            };
            let judged = self.judge_one(&c, &seen, group, true, ctx, cancel).await?;
            let Some((v, _)) = judged else {
                // No verdict (the run's stop): it stays parked, its commits kept.
                stopped = true;
                self.parked.push(p);
                continue;
            };
            self.unpin(&p);
            super::remove_tree(&self.repo, &p.tree.0, &p.tree.1, ctx);
            if v.1.is_err() {
                failed.push(p.task.index);
            } else {
                self.set_box(p.task.index, true)?;
            }
            verdicts.push(v);
        }
        Ok(stopped)
    }

    /// The boxes that must not be checked go back, a group's progress merged and its spec
    /// files committed.
    fn settle_boxes(
        &self,
        after: &[Task],
        group: &[usize],
        verdicts: &[TaskVerdict],
        failed: &[usize],
        parallel: bool,
        ctx: &EngineContext,
    ) -> Result<(), WorklistError> {
        self.put_back(&self.read_tasks()?, group, failed, parallel, ctx)?;
        if !parallel {
            return Ok(());
        }
        let id_of = |i: &usize| after.get(*i).map(|t| t.id.clone());
        let ids: Vec<String> = group.iter().filter_map(id_of).collect();
        let done: Vec<String> = verdicts
            .iter()
            .filter(|(_, r)| r.is_ok())
            .filter_map(|(i, _)| id_of(i))
            .collect();
        let rejected: Vec<String> = failed.iter().filter_map(id_of).collect();
        self.land_group(&ids, &done, &rejected, ctx)
    }

    /// Members that wait or stop: their boxes back (for a single task every box it changed;
    /// for a group member its own and any outside the group), their worktrees removed.
    pub(super) fn abandon_members(
        &mut self,
        members: &[usize],
        ctx: &EngineContext,
    ) -> Result<(), WorklistError> {
        let before = self.now.checked_before.clone();
        let now = self.read_tasks()?;
        let parallel = self.now.slots.iter().any(|s| s.tree.is_some());
        let group: BTreeSet<usize> = self
            .now
            .slots
            .iter()
            .map(|s| s.task.index)
            .chain(self.parked.iter().map(|p| p.task.index))
            .collect();
        let mut restore: Vec<usize> = now
            .iter()
            .filter(|t| !parallel || !group.contains(&t.index))
            .map(|t| t.index)
            .collect();
        for m in members {
            self.now.waiting.insert(*m);
            if let Some(slot) = self.now.slots.get_mut(*m) {
                restore.push(slot.task.index);
                if let Some((name, path)) = slot.tree.take() {
                    super::remove_tree(&self.repo, &name, &path, ctx);
                }
            }
        }
        self.restore_boxes(&restore, &before)
    }
}

/// The iteration's claim: accepted when any task was, tampered when every one changed its
/// evidence, else rejected.
fn iteration_claim(verdicts: &[TaskVerdict]) -> Claim {
    let claims: Vec<Claim> = verdicts
        .iter()
        .map(|(_, r)| claim_of(r.as_ref().err().map_or(&[][..], |f| f)))
        .collect();
    if claims.contains(&Claim::Accepted) {
        Claim::Accepted
    } else if !claims.is_empty() && claims.iter().all(|c| *c == Claim::Tampered) {
        Claim::Tampered
    } else {
        Claim::Rejected
    }
}
