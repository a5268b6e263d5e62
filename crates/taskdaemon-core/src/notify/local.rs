//! Notices from one engine's events: a foreground `run`/`task`, or one run of the daemon.

use std::path::PathBuf;

use super::{Kind, Notice, Place, next_step, reason_of, wait_reason};
use crate::agent::FailureClass;
use crate::daemon::events::RunFacts;
use crate::engine::EngineEvent;

/// Turns a run's [`EngineEvent`]s into notices, with the run's figures as they go, and
/// the same reasons (`reason_of`, `wait_reason`) and steps as a daemon run's.
#[derive(Debug, Clone)]
pub struct LocalNotices {
    pub repository: PathBuf,
    pub run: String,
    pub title: String,
    /// The daemon's repository when the run is one of its runs (`repository` is then its
    /// worktree).
    pub daemon: Option<PathBuf>,
    facts: RunFacts,
}

impl LocalNotices {
    pub fn new(repository: PathBuf, run: &str, title: &str) -> LocalNotices {
        LocalNotices {
            repository,
            run: run.to_string(),
            title: title.to_string(),
            daemon: None,
            facts: RunFacts::default(),
        }
    }

    fn place(&self) -> Place<'_> {
        match &self.daemon {
            Some(repo) => Place::Daemon {
                repo,
                worktree: Some(&self.repository),
            },
            None => Place::Local(&self.repository),
        }
    }

    fn notice(&self, kind: Kind, reason: &str) -> Notice {
        Notice::new(kind, self.place(), &self.run, &self.title, reason).with_facts(&self.facts)
    }

    /// The notice `e` calls for, if any.
    pub fn on(&mut self, e: &EngineEvent) -> Option<Notice> {
        match e {
            EngineEvent::RunStarted {
                run_id,
                first_iteration,
                ..
            } => {
                if self.run.is_empty() {
                    self.run = run_id.clone();
                }
                self.facts.iterations = first_iteration.saturating_sub(1);
                None
            }
            EngineEvent::IterationFinished {
                iteration,
                commit,
                cost_total_usd,
                duration_ms,
                ..
            } => {
                self.facts.iterations = *iteration;
                self.facts.duration_ms += duration_ms.max(0.0) as u64;
                if *cost_total_usd > 0.0 {
                    self.facts.cost_usd = Some(*cost_total_usd);
                }
                if commit.is_some() {
                    self.facts.commit = commit.clone();
                }
                None
            }
            EngineEvent::Waiting {
                class: FailureClass::UsageLimit,
                until,
                message,
                line,
                ..
            } => {
                let next = next_step(
                    Kind::UsageLimitWait,
                    self.place(),
                    &self.run,
                    None,
                    Some(until),
                );
                Some(
                    self.notice(
                        Kind::UsageLimitWait,
                        &wait_reason(line.as_deref(), message, Some(until)),
                    )
                    .with_next(next),
                )
            }
            EngineEvent::WaitOver {
                class: FailureClass::UsageLimit,
                ..
            } => Some(self.notice(
                Kind::UsageLimitOver,
                "the usage limit was reset; the run goes on",
            )),
            EngineEvent::RunFinished { summary } => self.finished(summary),
            _ => None,
        }
    }

    fn finished(&mut self, summary: &crate::telemetry::RunSummary) -> Option<Notice> {
        let kind = match summary.exit_label.as_str() {
            "COMPLETE" => Kind::Complete,
            "BLOCKED" => Kind::Blocked,
            "DECIDE" => Kind::Decide,
            "STUCK" => Kind::Stuck,
            "INTERRUPTED" => return None,
            _ => Kind::Failed,
        };
        self.facts.iterations = summary.iterations;
        self.facts.duration_ms = summary.duration_ms;
        self.facts.cost_usd = summary.cost_usd;
        let reason = summary
            .outcome
            .as_ref()
            .map(reason_of)
            .unwrap_or_else(|| summary.detail.clone());
        Some(self.notice(kind, &reason))
    }
}

/// The sinks of the config files in force at `dir`: the user's, then the project's (or
/// the file named with `--config`, `explicit`), read as `config::load_layers` reads them:
/// the project's own `.taskdaemon/config.yaml` comes with the repository, so its command
/// hooks and webhooks wait for the user's trust (the second value says what was left
/// out). Unreadable files give no sinks (the run reports those errors itself).
pub fn sinks_for(
    dir: &std::path::Path,
    explicit: Option<&std::path::Path>,
) -> (Vec<super::SinkConfig>, Option<crate::config::Untrusted>) {
    match crate::config::load_layers(dir, explicit) {
        Ok(l) => (l.settings.notify.unwrap_or_default(), l.untrusted),
        Err(_) => (Vec::new(), None),
    }
}

/// Pass a run's events on unchanged, sending the notices they call for to `sinks`. The
/// returned task ends after the events do and the queued notices had up to 10 s to go out.
pub fn tee(
    mut events: tokio::sync::mpsc::UnboundedReceiver<EngineEvent>,
    sinks: &[super::SinkConfig],
    mut local: LocalNotices,
    log: super::Log,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<EngineEvent>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let notifier = super::Notifier::start(sinks, &local.repository.clone(), log);
    let task = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let Some(n) = local.on(&e) {
                notifier.send(n);
            }
            let _ = tx.send(e);
        }
        drop(tx);
        notifier.finish(super::Notifier::EXIT_FLUSH).await;
    });
    (rx, task)
}
