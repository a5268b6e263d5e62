//! Notices from one engine's events: a foreground `run`/`task`, or one run of the daemon.

use std::path::PathBuf;

use super::{Kind, Notice, Place};
use crate::agent::FailureClass;
use crate::engine::EngineEvent;

/// Turns a run's [`EngineEvent`]s into notices. Keeps the last promise's words, so the
/// final notice carries the agent's own reason.
#[derive(Debug, Clone)]
pub struct LocalNotices {
    pub repository: PathBuf,
    pub run: String,
    pub title: String,
    /// The daemon's repository when the run is one of its runs (`repository` is then its
    /// worktree).
    pub daemon: Option<PathBuf>,
    said: Option<String>,
}

impl LocalNotices {
    pub fn new(repository: PathBuf, run: &str, title: &str) -> LocalNotices {
        LocalNotices {
            repository,
            run: run.to_string(),
            title: title.to_string(),
            daemon: None,
            said: None,
        }
    }

    fn notice(&self, kind: Kind, reason: &str) -> Notice {
        let place = match &self.daemon {
            Some(repo) => Place::Daemon {
                repo,
                worktree: Some(&self.repository),
            },
            None => Place::Local(&self.repository),
        };
        Notice::new(kind, place, &self.run, &self.title, reason)
    }

    /// The notice `e` calls for, if any.
    pub fn on(&mut self, e: &EngineEvent) -> Option<Notice> {
        match e {
            EngineEvent::RunStarted { run_id, .. } if self.run.is_empty() => {
                self.run = run_id.clone();
                None
            }
            EngineEvent::Signal { text, .. } => {
                self.said = text.clone();
                None
            }
            EngineEvent::Waiting {
                class: FailureClass::UsageLimit,
                until,
                message,
                line,
                ..
            } => {
                let words = line.clone().unwrap_or_else(|| message.clone());
                Some(self.notice(
                    Kind::UsageLimitWait,
                    &format!("{words} (waiting until {until})"),
                ))
            }
            EngineEvent::WaitOver {
                class: FailureClass::UsageLimit,
                ..
            } => Some(self.notice(Kind::UsageLimitOver, "the usage limit was reset")),
            EngineEvent::RunFinished { summary } => {
                let kind = match summary.exit_label.as_str() {
                    "COMPLETE" => Kind::Complete,
                    "BLOCKED" => Kind::Blocked,
                    "DECIDE" => Kind::Decide,
                    "STUCK" => Kind::Stuck,
                    "INTERRUPTED" => return None,
                    _ => Kind::Failed,
                };
                let reason = match (kind, &self.said) {
                    (Kind::Blocked | Kind::Decide, Some(words)) => words.clone(),
                    _ => summary.detail.clone(),
                };
                Some(self.notice(kind, &reason))
            }
            _ => None,
        }
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
