//! The daemon's notifier: a subscriber of its event broadcast, like any watcher. It never
//! slows the daemon: a lagging subscriber only misses events, and delivery runs in the
//! notifier's own tasks. A standalone run's `complete` waits for its merge's outcome, so
//! the notice says merged (and where) or held (and the merge that takes it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::{
    Kind, Log, MergeFacts, MergeOutcome, Notice, Notifier, Place, SinkConfig, next_step, reason_of,
    wait_reason,
};
use crate::daemon::Publisher;
use crate::daemon::events::{DaemonEvent, RunFacts, Subject, WaitReason};
use crate::engine::Outcome;

/// How long queued notices may take to go out once the daemon stops.
const FLUSH: Duration = Duration::from_millis(1800);

/// How long a `complete` notice waits for its merge's outcome before it is sent without
/// it (a merge another machine makes is not seen here).
const MERGE_WAIT: Duration = Duration::from_secs(120);

/// Start notifying from the daemon's events, with the sinks of the config files in force
/// for `repo` (`config`: the file named with `--config`, instead of the project's). `None`
/// when no sink is configured.
pub fn start_for_daemon(
    events: &Publisher,
    repo: &Path,
    config: Option<&Path>,
) -> Option<JoinHandle<()>> {
    // What an untrusted project config had is said by the dispatcher, once.
    let (sinks, _untrusted): (Vec<SinkConfig>, _) = super::sinks_for(repo, config);
    if sinks.is_empty() {
        return None;
    }
    let mut rx = events.subscribe();
    let log: Log = {
        let events = events.clone();
        let repo = repo.to_path_buf();
        Arc::new(move |message| {
            events.emit(DaemonEvent::Note {
                repo: repo.clone(),
                warning: true,
                message,
            })
        })
    };
    let notifier = Notifier::start(&sinks, repo, log);
    Some(tokio::spawn(async move {
        let mut notices = DaemonNotices::default();
        loop {
            // Woken at least every few seconds: a `complete` whose merge outcome never
            // comes is sent after MERGE_WAIT.
            let next = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
            for n in notices.overdue(MERGE_WAIT) {
                notifier.send(n);
            }
            match next {
                Err(_) | Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Ok(DaemonEvent::DaemonStopped { .. }) | Err(RecvError::Closed)) => break,
                Ok(Ok(e)) => {
                    for n in notices.on(&e) {
                        notifier.send(n);
                    }
                }
            }
        }
        for n in notices.flush() {
            notifier.send(n);
        }
        // Holding the subscription while the queue drains keeps the daemon waiting for us
        // (it waits about 2 s for its subscribers).
        notifier.finish(FLUSH).await;
        drop(rx);
    }))
}

/// Turns the daemon's events into notices; remembers each run's worktree and the
/// `complete` notices that wait for their merge.
#[derive(Debug, Default)]
pub struct DaemonNotices {
    worktrees: HashMap<String, PathBuf>,
    /// The figures of a run's last usage-limit wait, for the notice of its end.
    waited: HashMap<String, RunFacts>,
    /// Each with when it began to wait: at most [`MERGE_WAIT`].
    waiting_for_merge: HashMap<String, (Notice, std::time::Instant)>,
}

impl DaemonNotices {
    /// The notices `e` calls for (none, or one; a merge's outcome may release the
    /// `complete` notice that waited for it).
    pub fn on(&mut self, e: &DaemonEvent) -> Vec<Notice> {
        if let DaemonEvent::RunStarted {
            subject, worktree, ..
        } = e
        {
            self.worktrees.insert(subject.run.clone(), worktree.clone());
            // A run that starts again: whatever waited for its last merge goes now.
            return self
                .waiting_for_merge
                .remove(&subject.run)
                .map(|(n, _)| n)
                .into_iter()
                .collect();
        }
        if let Some(n) = self.merge_outcome(e) {
            return n;
        }
        if let DaemonEvent::Waiting { subject, facts, .. } = e {
            self.waited.insert(subject.run.clone(), facts.clone());
        }
        let Some(n) = self.notice_of(e) else {
            return Vec::new();
        };
        if let DaemonEvent::Complete {
            merge_follows: true,
            subject,
            ..
        } = e
        {
            self.waiting_for_merge
                .insert(subject.run.clone(), (n, std::time::Instant::now()));
            return Vec::new();
        }
        vec![n]
    }

    /// The `complete` notices still waiting for a merge (at the daemon's stop).
    pub fn flush(&mut self) -> Vec<Notice> {
        self.waiting_for_merge
            .drain()
            .map(|(_, (n, _))| n)
            .collect()
    }

    /// The `complete` notices that waited `limit` for a merge outcome that did not come
    /// (on a shared queue another machine's daemon may make the merge and say nothing
    /// here): sent as they are, without the merge.
    pub fn overdue(&mut self, limit: Duration) -> Vec<Notice> {
        let late: Vec<String> = self
            .waiting_for_merge
            .iter()
            .filter(|(_, (_, since))| since.elapsed() >= limit)
            .map(|(run, _)| run.clone())
            .collect();
        late.iter()
            .filter_map(|run| self.waiting_for_merge.remove(run).map(|(n, _)| n))
            .collect()
    }

    fn place<'a>(&'a self, s: &'a Subject, facts: Option<&'a RunFacts>) -> Place<'a> {
        let worktree = facts
            .and_then(|f| f.worktree.as_deref())
            .or_else(|| self.worktrees.get(&s.run).map(PathBuf::as_path));
        Place::Daemon {
            repo: &s.repo,
            worktree,
        }
    }

    fn notice(&self, kind: Kind, s: &Subject, reason: &str, facts: &RunFacts) -> Notice {
        Notice::new(kind, self.place(s, Some(facts)), &s.run, &s.title, reason).with_facts(facts)
    }

    /// What a merge's end does to the `complete` notice waiting for it: `None` when `e` is
    /// no merge event.
    fn merge_outcome(&mut self, e: &DaemonEvent) -> Option<Vec<Notice>> {
        let held = |branch: &str, target: &str, ib: &str, checkout: &Path| MergeFacts {
            outcome: MergeOutcome::Held,
            target: target.to_string(),
            branch: Some(branch.to_string()),
            integration_branch: Some(ib.to_string()),
            checkout: Some(checkout.display().to_string()),
        };
        match e {
            // A held merge: `merge-held` follows at once and says where.
            DaemonEvent::Merged {
                held_on: Some(_), ..
            } => Some(Vec::new()),
            DaemonEvent::Merged {
                subject,
                branch,
                target,
                held_on: None,
            } => {
                let m = MergeFacts {
                    outcome: MergeOutcome::Merged,
                    target: target.clone(),
                    branch: Some(branch.clone()),
                    integration_branch: None,
                    checkout: None,
                };
                Some(self.release(subject, m).into_iter().collect())
            }
            DaemonEvent::MergeHeld {
                subject,
                branch,
                target,
                integration_branch,
                checkout,
                message,
                ..
            } => {
                let m = held(branch, target, integration_branch, checkout);
                if let Some(n) = self.release(subject, m.clone()) {
                    return Some(vec![n]);
                }
                let place = self.place(subject, None);
                let mut n = Notice::new(
                    Kind::MergeHeld,
                    place,
                    &subject.run,
                    &subject.title,
                    message,
                );
                n = n.with_next(next_step(
                    Kind::MergeHeld,
                    place,
                    &subject.run,
                    Some(&m),
                    None,
                ));
                n.merge = Some(m);
                Some(vec![n])
            }
            DaemonEvent::MergeConflict { subject, .. } | DaemonEvent::Failed { subject, .. } => {
                // The run's own notice says what happened to its work; its figures are
                // those of the `complete` that waited.
                let (waited, _) = self.waiting_for_merge.remove(&subject.run)?;
                let mut n = self.notice_of(e)?;
                n.iterations = waited.iterations;
                n.duration_ms = waited.duration_ms;
                n.cost_usd = waited.cost_usd;
                n.commit = waited.commit;
                Some(vec![n])
            }
            _ => None,
        }
    }

    /// The `complete` notice of `s` that waited, now saying where its work went.
    fn release(&mut self, s: &Subject, m: MergeFacts) -> Option<Notice> {
        let (mut n, _) = self.waiting_for_merge.remove(&s.run)?;
        let place = self.place(s, None);
        n = n.with_next(next_step(Kind::Complete, place, &s.run, Some(&m), None));
        n.merge = Some(m);
        Some(n)
    }

    /// The notice a daemon event calls for, if any.
    fn notice_of(&self, e: &DaemonEvent) -> Option<Notice> {
        Some(match e {
            DaemonEvent::Blocked {
                subject,
                reason,
                facts,
                ..
            } => self.notice(Kind::Blocked, subject, reason, facts),
            DaemonEvent::Decide {
                subject,
                question,
                facts,
                ..
            } => self.notice(Kind::Decide, subject, question, facts),
            DaemonEvent::Complete {
                subject,
                reason,
                facts,
                ..
            } => self.notice(Kind::Complete, subject, reason, facts),
            DaemonEvent::Failed {
                subject,
                reason,
                facts,
                ..
            } => self.notice(Kind::Failed, subject, reason, facts),
            DaemonEvent::Stuck {
                subject,
                iterations,
                facts,
                ..
            } => self.notice(
                Kind::Stuck,
                subject,
                &reason_of(&Outcome::Stuck {
                    iterations: *iterations,
                }),
                facts,
            ),
            DaemonEvent::Waiting {
                reason: WaitReason::UsageLimit,
                ..
            }
            | DaemonEvent::WaitOver {
                reason: WaitReason::UsageLimit,
                ..
            } => return self.wait_notice(e),
            DaemonEvent::MergeConflict {
                subject, message, ..
            } => {
                let place = self.place(subject, None);
                Notice::new(
                    Kind::MergeConflict,
                    place,
                    &subject.run,
                    &subject.title,
                    message,
                )
            }
            DaemonEvent::DaemonStopping {
                repo,
                reason,
                interrupted,
            } if reason != "asked to" => Notice::new(
                Kind::DaemonStopped,
                Place::Daemon {
                    repo,
                    worktree: None,
                },
                "",
                "",
                &format!(
                    "stopped by {reason}; {interrupted} run(s) interrupted, they resume on the next start"
                ),
            ),
            _ => return None,
        })
    }

    /// The notice of a usage-limit wait or its end.
    fn wait_notice(&self, e: &DaemonEvent) -> Option<Notice> {
        Some(match e {
            DaemonEvent::Waiting {
                subject,
                reason: WaitReason::UsageLimit,
                until,
                message,
                line,
                facts,
                ..
            } => {
                let place = self.place(subject, Some(facts));
                let next = next_step(
                    Kind::UsageLimitWait,
                    place,
                    &subject.run,
                    None,
                    until.as_deref(),
                );
                self.notice(
                    Kind::UsageLimitWait,
                    subject,
                    &wait_reason(line.as_deref(), message, until.as_deref()),
                    facts,
                )
                .with_next(next)
            }
            DaemonEvent::WaitOver {
                subject,
                reason: WaitReason::UsageLimit,
            } => {
                let facts = self.waited.get(&subject.run).cloned().unwrap_or_default();
                self.notice(
                    Kind::UsageLimitOver,
                    subject,
                    "the usage limit was reset; the run goes on",
                    &facts,
                )
            }
            _ => return None,
        })
    }
}
