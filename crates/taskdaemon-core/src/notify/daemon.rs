//! The daemon's notifier: a subscriber of its event broadcast, like any watcher. It never
//! slows the daemon: a lagging subscriber only misses events, and delivery runs in the
//! notifier's own tasks.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::{Kind, Log, Notice, Notifier, SinkConfig};
use crate::daemon::Publisher;
use crate::daemon::events::{DaemonEvent, Subject, WaitReason};

/// How long queued notices may take to go out once the daemon stops.
const FLUSH: Duration = Duration::from_millis(1800);

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
        loop {
            match rx.recv().await {
                Ok(DaemonEvent::DaemonStopped { .. }) | Err(RecvError::Closed) => break,
                Ok(e) => {
                    if let Some(n) = notice_of(&e) {
                        notifier.send(n);
                    }
                }
                Err(RecvError::Lagged(_)) => {}
            }
        }
        // Holding the subscription while the queue drains keeps the daemon waiting for us
        // (it waits about 2 s for its subscribers).
        notifier.finish(FLUSH).await;
        drop(rx);
    }))
}

fn notice(kind: Kind, s: &Subject, reason: &str, action: &str) -> Notice {
    Notice {
        kind,
        repository: s.repo.display().to_string(),
        run: s.run.clone(),
        title: s.title.clone(),
        reason: reason.trim().to_string(),
        action: action.trim().to_string(),
        at: crate::clock::now_rfc3339(),
    }
}

/// The notice a daemon event calls for, if any.
pub fn notice_of(e: &DaemonEvent) -> Option<Notice> {
    let logs = |s: &Subject| {
        super::action_for(
            Kind::Complete,
            super::Place::Daemon {
                repo: &s.repo,
                worktree: None,
            },
            &s.run,
        )
    };
    Some(match e {
        DaemonEvent::Blocked {
            subject,
            reason,
            action,
        } => notice(Kind::Blocked, subject, reason, action),
        DaemonEvent::Decide {
            subject,
            question,
            action,
        } => notice(Kind::Decide, subject, question, action),
        DaemonEvent::Complete { subject } => notice(Kind::Complete, subject, "", &logs(subject)),
        DaemonEvent::Failed {
            subject,
            reason,
            action,
        } => notice(Kind::Failed, subject, reason, action),
        DaemonEvent::Stuck {
            subject,
            iterations,
            action,
        } => notice(
            Kind::Stuck,
            subject,
            &format!("no new commit in {iterations} iterations in a row"),
            action,
        ),
        DaemonEvent::Waiting {
            subject,
            reason: WaitReason::UsageLimit,
            until,
            message,
            action,
        } => {
            let until = until
                .as_deref()
                .map(|u| format!(" (until {u})"))
                .unwrap_or_default();
            let action = action.clone().unwrap_or_else(|| logs(subject));
            notice(
                Kind::UsageLimitWait,
                subject,
                &format!("{message}{until}"),
                &action,
            )
        }
        DaemonEvent::WaitOver {
            subject,
            reason: WaitReason::UsageLimit,
        } => notice(
            Kind::UsageLimitOver,
            subject,
            "the usage limit was reset; the run goes on",
            &logs(subject),
        ),
        DaemonEvent::MergeConflict {
            subject,
            message,
            action,
            ..
        } => notice(Kind::MergeConflict, subject, message, action),
        DaemonEvent::DaemonStopping {
            repo,
            reason,
            interrupted,
        } if reason != "asked to" => {
            let place = super::Place::Daemon {
                repo,
                worktree: None,
            };
            let mut n = Notice::new(
                Kind::DaemonStopped,
                place,
                "",
                "",
                &format!(
                    "stopped by {reason}; {interrupted} run(s) interrupted, they resume on the next start"
                ),
            );
            n.repository = repo.display().to_string();
            n
        }
        _ => return None,
    })
}
