//! Notifications: tell a person at once when a loop needs them, finished or waits.
//!
//! `notify:` in the user's or the project's config lists sinks (a webhook, a desktop
//! notification, a command hook), each with an optional `events:` filter. A [`Notice`]
//! names the repository, the run and its title, the reason in the agent's words and the
//! exact command to act. [`Notifier::send`] never blocks: each sink has a bounded queue and
//! its own task that delivers with a timeout and bounded retries with backoff; a sink's
//! failures are reported once (not per message) through the log callback.

mod config;
mod daemon;
mod deliver;
mod local;
mod next;
mod notice;
mod render;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use config::{Format, SinkConfig, Target};
pub use daemon::{DaemonNotices, start_for_daemon};
pub use local::{LocalNotices, sinks_for, tee};
pub use next::{Next, Place, next_step, reason_of, wait_reason};
pub use notice::{MergeFacts, MergeOutcome, Notice, SCHEMA};

/// What happened: the kinds a sink's `events:` filter names.
/// Written in snake_case (`usage_limit_wait`), as in the payload's `event`; the kebab-case
/// spelling of earlier versions (`usage-limit-wait`) is still read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Blocked,
    Decide,
    Complete,
    Failed,
    Stuck,
    /// The agent hit its usage limit; the run waits for the reset.
    #[serde(alias = "usage-limit-wait")]
    UsageLimitWait,
    /// The wait is over; the run goes on.
    #[serde(alias = "usage-limit-over")]
    UsageLimitOver,
    #[serde(alias = "merge-conflict")]
    MergeConflict,
    /// Finished work waits on `taskdaemon/integration/<target>` (the target is checked
    /// out) for a merge a person makes, and no `complete` notice says so (a spec's merge).
    #[serde(alias = "merge-held")]
    MergeHeld,
    /// The daemon stopped without being asked to (a crash, a kill).
    #[serde(alias = "daemon-stopped")]
    DaemonStopped,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Blocked,
        Kind::Decide,
        Kind::Complete,
        Kind::Failed,
        Kind::Stuck,
        Kind::UsageLimitWait,
        Kind::UsageLimitOver,
        Kind::MergeConflict,
        Kind::MergeHeld,
        Kind::DaemonStopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Blocked => "blocked",
            Kind::Decide => "decide",
            Kind::Complete => "complete",
            Kind::Failed => "failed",
            Kind::Stuck => "stuck",
            Kind::UsageLimitWait => "usage_limit_wait",
            Kind::UsageLimitOver => "usage_limit_over",
            Kind::MergeConflict => "merge_conflict",
            Kind::MergeHeld => "merge_held",
            Kind::DaemonStopped => "daemon_stopped",
        }
    }

    /// The headline of a message of this kind.
    pub(crate) fn headline(self) -> &'static str {
        match self {
            Kind::Blocked => "is BLOCKED",
            Kind::Decide => "asks you to DECIDE",
            Kind::Complete => "is COMPLETE",
            Kind::Failed => "FAILED",
            Kind::Stuck => "is STUCK",
            Kind::UsageLimitWait => "waits for the agent's usage limit to reset",
            Kind::UsageLimitOver => "goes on: the usage-limit wait is over",
            Kind::MergeConflict => "has a MERGE CONFLICT",
            Kind::MergeHeld => "is merged and HELD for you to take",
            Kind::DaemonStopped => "stopped unexpectedly",
        }
    }

    /// Whether a person must act (desktop urgency).
    pub fn needs_a_person(self) -> bool {
        matches!(
            self,
            Kind::Blocked
                | Kind::Decide
                | Kind::Failed
                | Kind::Stuck
                | Kind::MergeConflict
                | Kind::MergeHeld
                | Kind::DaemonStopped
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many notices a sink may hold before new ones are dropped.
pub const QUEUE: usize = 64;

/// Where a notifier reports its own trouble (once per sink).
pub type Log = Arc<dyn Fn(String) + Send + Sync>;

struct Sink {
    config: SinkConfig,
    tx: mpsc::Sender<Arc<Notice>>,
    full_reported: AtomicBool,
    pending: Pending,
}

/// What a sink was handed and has not finished with (delivered or given up), oldest
/// first: what a stop drops, named in its log line.
pub(crate) type Pending = Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// The running sinks. Cheap to share behind an `Arc`.
pub struct Notifier {
    sinks: Vec<Sink>,
    tasks: Vec<JoinHandle<()>>,
    log: Log,
    /// Ends every delivery at once (a request in flight, a retry's wait; a hook gets its
    /// TERM): [`Notifier::finish`] once its time is up.
    stop: tokio_util::sync::CancellationToken,
}

impl Notifier {
    /// Start one delivery task per sink (inside a tokio runtime). `cwd` is where command
    /// hooks run.
    pub fn start(configs: &[SinkConfig], cwd: &Path, log: Log) -> Notifier {
        let mut sinks = Vec::new();
        let mut tasks = Vec::new();
        let stop = tokio_util::sync::CancellationToken::new();
        for c in configs {
            let (tx, rx) = mpsc::channel(QUEUE);
            let pending = Pending::default();
            let d =
                deliver::Deliverer::new(c.clone(), cwd.to_path_buf(), log.clone(), stop.clone());
            tasks.push(tokio::spawn(d.run(rx, pending.clone())));
            sinks.push(Sink {
                config: c.clone(),
                tx,
                full_reported: AtomicBool::new(false),
                pending,
            });
        }
        Notifier {
            sinks,
            tasks,
            log,
            stop,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// Queue `n` for every sink whose filter takes its kind. Never waits: a full queue drops
    /// the notice (reported once per sink).
    pub fn send(&self, n: Notice) {
        let n = Arc::new(n);
        for s in &self.sinks {
            if !s.config.wants(n.kind) {
                continue;
            }
            // Listed before it is queued: the delivery task takes it off when done.
            let mut pending = s.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.push_back(n.describe());
            if s.tx.try_send(n.clone()).is_err() {
                pending.pop_back();
                if !s.full_reported.swap(true, Ordering::Relaxed) {
                    (self.log)(format!(
                        "notify: {} is not keeping up ({QUEUE} notices queued); newer ones are dropped",
                        s.config.describe()
                    ));
                }
            }
        }
    }

    /// How long a foreground loop's queued notices may take to go out at its exit (a
    /// receiver that hangs delays the exit no longer than this).
    pub const EXIT_FLUSH: Duration = Duration::from_secs(3);

    /// After [`Notifier::EXIT_FLUSH`] (or a daemon's flush), how long the deliveries have to
    /// end once stopped: a request in flight ends at once, a hook's process group gets TERM
    /// and KILL after its grace (`deliver::GRACE`); then what is left is aborted.
    const STOP_GRACE: Duration = Duration::from_millis(2500);

    /// Stop taking notices and give the queued ones up to `within` to go out; then end the
    /// deliveries (bounded by [`Self::STOP_GRACE`]) and log, per sink, the notices dropped.
    pub async fn finish(self, within: Duration) {
        let Notifier {
            sinks,
            mut tasks,
            log,
            stop,
        } = self;
        let pendings: Vec<(String, Pending)> = sinks
            .into_iter()
            .map(|s| (s.config.describe(), s.pending))
            .collect();
        if tokio::time::timeout(within, join_all(&mut tasks))
            .await
            .is_err()
        {
            stop.cancel();
            let _ = tokio::time::timeout(Self::STOP_GRACE, join_all(&mut tasks)).await;
            for t in &tasks {
                t.abort();
            }
        }
        for (sink, pending) in pendings {
            let left: Vec<String> = pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .collect();
            if !left.is_empty() {
                log(format!(
                    "notify: {sink}: {} notice(s) not delivered within {} of the stop, dropped: {}",
                    left.len(),
                    crate::duration::format_duration(within),
                    left.join(", ")
                ));
            }
        }
    }
}

async fn join_all(tasks: &mut [JoinHandle<()>]) {
    for t in tasks.iter_mut() {
        if !t.is_finished() {
            let _ = t.await;
        }
    }
}

#[cfg(test)]
mod tests;
