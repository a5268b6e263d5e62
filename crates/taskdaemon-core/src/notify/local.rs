//! Notices from one engine's events: a foreground `run`/`task`, or one run of the daemon.

use std::path::PathBuf;

use super::{Kind, Notice};
use crate::agent::FailureClass;
use crate::engine::EngineEvent;

/// Turns a run's [`EngineEvent`]s into notices. Keeps the last promise's words, so the
/// final notice carries the agent's own reason.
#[derive(Debug, Clone)]
pub struct LocalNotices {
    pub repository: PathBuf,
    pub run: String,
    pub title: String,
    said: Option<String>,
}

impl LocalNotices {
    pub fn new(repository: PathBuf, run: &str, title: &str) -> LocalNotices {
        LocalNotices {
            repository,
            run: run.to_string(),
            title: title.to_string(),
            said: None,
        }
    }

    fn notice(&self, kind: Kind, reason: &str) -> Notice {
        Notice::new(kind, &self.repository, &self.run, &self.title, reason)
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
