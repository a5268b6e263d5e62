//! Recording runs' reports in their records: each report is a change to its run's record;
//! the reports waiting together are written as one store batch (one durable write), and
//! their events go out once it is written.

use std::collections::HashMap;
use std::path::PathBuf;

use super::control::StopAs;
use super::executor::Report;
use super::{DaemonEvent, Dispatcher, end_event, end_status, status};
use crate::engine::Outcome;
use crate::store::{AnyRecord, LoopRun};

/// What one report changes in its run's record.
enum RunChange {
    Started {
        worktree: PathBuf,
        first_iteration: u32,
        resumed: bool,
        /// Let go after `run-started` is sent ([`Report::Started`]).
        announced: tokio::sync::oneshot::Sender<()>,
    },
    Iteration {
        iteration: u32,
        finished: Option<(String, f64)>,
        elapsed_ms: u64,
    },
    Ended {
        result: Result<Outcome, String>,
        stop_as: Option<StopAs>,
        facts: Option<super::events::RunFacts>,
    },
}

impl RunChange {
    fn apply(&self, run: &mut LoopRun) {
        match self {
            RunChange::Started {
                worktree,
                first_iteration,
                ..
            } => {
                run.worktree = Some(worktree.display().to_string());
                run.iteration = *first_iteration;
            }
            RunChange::Iteration {
                iteration,
                finished,
                elapsed_ms,
            } => {
                run.iteration = *iteration;
                run.elapsed_ms = *elapsed_ms;
                if let Some((outcome, cost)) = finished {
                    if *cost > 0.0 {
                        run.cost_usd = Some(*cost);
                    }
                    let mut lines: Vec<&str> = run.progress.lines().collect();
                    let line = format!("iteration {iteration}: {outcome}");
                    lines.push(&line);
                    let keep = lines.len().saturating_sub(20);
                    run.progress = lines[keep..].join("\n");
                }
            }
            RunChange::Ended {
                result, stop_as, ..
            } => {
                let (status, note) = end_status(result, *stop_as, run);
                run.status = status;
                run.note = note;
            }
        }
    }
}

impl Dispatcher {
    /// A report as a change of its run's record; `None` for the end of a run that is no
    /// longer active (stopped meanwhile).
    fn change_of(&mut self, r: Report) -> Option<(String, RunChange)> {
        Some(match r {
            Report::Started {
                run_id,
                worktree,
                first_iteration,
                resumed,
                announced,
            } => (
                run_id,
                RunChange::Started {
                    worktree,
                    first_iteration,
                    resumed,
                    announced,
                },
            ),
            Report::Iteration {
                run_id,
                iteration,
                finished,
                elapsed_ms,
            } => (
                run_id,
                RunChange::Iteration {
                    iteration,
                    finished,
                    elapsed_ms,
                },
            ),
            Report::Finished {
                run_id,
                result,
                facts,
            } => {
                let active = self.active.remove(&run_id)?;
                (
                    run_id,
                    RunChange::Ended {
                        result,
                        stop_as: active.stop_as,
                        facts,
                    },
                )
            }
        })
    }

    /// Apply one report to the records (both backends).
    pub(super) fn apply_report(&mut self, r: Report, now: i64) -> bool {
        self.apply_reports(vec![r], now)
    }

    /// Apply reports to the records, one store batch for all of them (one record write
    /// per run, in the order they came), then send their events in that order.
    pub(super) fn apply_reports(&mut self, reports: Vec<Report>, now: i64) -> bool {
        let more = reports.iter().any(|r| matches!(r, Report::Finished { .. }));
        let changes: Vec<(String, RunChange)> = reports
            .into_iter()
            .filter_map(|r| self.change_of(r))
            .collect();
        if changes.is_empty() {
            return more;
        }
        let runs = self.update_runs(&changes, now);
        for (id, change) in changes {
            match change {
                RunChange::Started {
                    worktree,
                    first_iteration,
                    resumed,
                    announced,
                } => {
                    self.emit(DaemonEvent::RunStarted {
                        subject: self.subject(&id),
                        iteration: first_iteration,
                        worktree,
                        resumed,
                    });
                    let _ = announced.send(());
                }
                RunChange::Iteration { .. } => {}
                RunChange::Ended {
                    result,
                    stop_as,
                    facts,
                } => {
                    if let Some(run) = runs.get(&id) {
                        let subject = status::subject_of(&self.records, run, &self.paths.project);
                        let facts = facts.unwrap_or_else(|| record_facts(run));
                        self.emit(end_event(subject, &result, stop_as, run, facts));
                    }
                }
            }
        }
        more
    }

    /// Each changed run read once, changed, and all of them written in one batch (a run
    /// whose record would change only in its elapsed time is not written); when the
    /// batch is refused (someone changed a run meanwhile), each run on its own as
    /// [`Self::update_run`] does. On the shared queue, a batch the database does not answer
    /// is kept in its journal (and so is every later change of a run whose writes wait
    /// there). The runs as changed, by id.
    fn update_runs(
        &mut self,
        changes: &[(String, RunChange)],
        now: i64,
    ) -> HashMap<String, LoopRun> {
        let mut ids: Vec<&str> = Vec::new();
        for (id, _) in changes {
            if !ids.contains(&id.as_str()) {
                ids.push(id);
            }
        }
        let apply_all = |id: &str, run: &mut LoopRun| {
            for (_, c) in changes.iter().filter(|(i, _)| i == id) {
                c.apply(run);
            }
        };
        let mut runs = HashMap::new();
        let mut batch = Vec::new();
        for id in &ids {
            if let Some((base, before)) = self.run_as_known(id) {
                let mut run = before.clone();
                apply_all(id, &mut run);
                // Local records only (the shared queue's takeover reads the elapsed time): a
                // change of nothing but the elapsed time (an iteration's start) is not worth a
                // durable write; the iteration's end writes the time.
                let only_elapsed = self.queue.is_none()
                    && LoopRun {
                        elapsed_ms: before.elapsed_ms,
                        ..run.clone()
                    } == before;
                if !only_elapsed {
                    batch.push((base, id.to_string()));
                }
                runs.insert(id.to_string(), run);
            }
        }
        let records: Vec<(i64, LoopRun)> = batch
            .iter()
            .filter_map(|(base, id)| runs.get(id).cloned().map(|r| (*base, r)))
            .collect();
        if records.is_empty() || self.keep_if_waiting(&records) {
            return runs;
        }
        let written = records.iter().map(|(_, r)| AnyRecord::Run(r.clone()));
        match self.records.update_batch(written.collect(), now) {
            Ok(_) => return runs,
            Err(e) if self.queue.is_some() && e.is_connection_lost() => {
                self.keep_for_queue(records);
                return runs;
            }
            Err(_) => {}
        }
        let _ = self.records.sync();
        let mut runs = HashMap::new();
        for id in ids {
            let mut changed = None;
            self.update_run(id, now, |run| {
                apply_all(id, run);
                changed = Some(run.clone());
            });
            runs.extend(changed.map(|r| (id.to_string(), r)));
        }
        runs
    }

    /// A run's record as this daemon knows it, with the `updated-at` of the stored version
    /// it was made from: the newest version kept in the queue's journal, else the store's.
    fn run_as_known(&self, id: &str) -> Option<(i64, LoopRun)> {
        if let Some((base, run)) = self.queue.as_ref().and_then(|q| q.journal.pending_run(id)) {
            return Some((base, run.clone()));
        }
        match self.records.get(id) {
            Ok(Some(AnyRecord::Run(run))) => Some((run.updated_at, run)),
            _ => None,
        }
    }

    /// On the shared queue, while writes of any of `runs` wait in the journal: these join
    /// them (they are made in order once the database answers). Whether they were kept.
    fn keep_if_waiting(&mut self, runs: &[(i64, LoopRun)]) -> bool {
        let waiting = self
            .queue
            .as_ref()
            .is_some_and(|q| runs.iter().any(|(_, r)| q.journal.holds(&r.id)));
        if waiting {
            self.keep_for_queue(runs.to_vec());
        }
        waiting
    }

    /// Keep runs' new records in the queue's journal (the database did not answer).
    fn keep_for_queue(&mut self, runs: Vec<(i64, LoopRun)>) {
        let Some(q) = self.queue.as_mut() else { return };
        let mut lines: Vec<String> = q.answered(false).into_iter().collect();
        for (base, run) in runs {
            lines.extend(q.keep(super::journal::Write::Run {
                base,
                run: Box::new(run),
            }));
        }
        for l in lines {
            self.note(l);
        }
    }

    /// Read, change and store a run, once more if someone changed it meanwhile (on the
    /// shared queue, kept in its journal when the database does not answer).
    pub(super) fn update_run(&mut self, id: &str, now: i64, mut f: impl FnMut(&mut LoopRun)) {
        for _ in 0..2 {
            let Some((base, mut run)) = self.run_as_known(id) else {
                return;
            };
            f(&mut run);
            if self.keep_if_waiting(&[(base, run.clone())]) {
                return;
            }
            match self.records.update(AnyRecord::Run(run.clone()), now) {
                Ok(_) => return,
                Err(e) if self.queue.is_some() && e.is_connection_lost() => {
                    self.keep_for_queue(vec![(base, run)]);
                    return;
                }
                Err(e) => {
                    let _ = self.records.sync();
                    self.note(format!("updating run {id}: {e}"));
                }
            }
        }
    }
}

/// A run's figures as its record has them (when the engine did not run this time).
fn record_facts(run: &LoopRun) -> super::events::RunFacts {
    super::events::RunFacts {
        iterations: run.iteration.saturating_sub(1),
        duration_ms: run.elapsed_ms,
        cost_usd: run.cost_usd,
        commit: None,
        worktree: run.worktree.as_ref().map(PathBuf::from),
    }
}
