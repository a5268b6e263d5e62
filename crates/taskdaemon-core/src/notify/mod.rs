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

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use config::{SinkConfig, Target};
pub use daemon::{notice_of, start_for_daemon};
pub use local::{LocalNotices, sinks_for, tee};

/// What happened: the kinds a sink's `events:` filter names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Blocked,
    Decide,
    Complete,
    Failed,
    Stuck,
    /// The agent hit its usage limit; the run waits for the reset.
    UsageLimitWait,
    /// The wait is over; the run goes on.
    UsageLimitOver,
    MergeConflict,
    /// The daemon stopped without being asked to (a crash, a kill).
    DaemonStopped,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Blocked,
        Kind::Decide,
        Kind::Complete,
        Kind::Failed,
        Kind::Stuck,
        Kind::UsageLimitWait,
        Kind::UsageLimitOver,
        Kind::MergeConflict,
        Kind::DaemonStopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Blocked => "blocked",
            Kind::Decide => "decide",
            Kind::Complete => "complete",
            Kind::Failed => "failed",
            Kind::Stuck => "stuck",
            Kind::UsageLimitWait => "usage-limit-wait",
            Kind::UsageLimitOver => "usage-limit-over",
            Kind::MergeConflict => "merge-conflict",
            Kind::DaemonStopped => "daemon-stopped",
        }
    }

    /// The headline of a message of this kind.
    fn headline(self) -> &'static str {
        match self {
            Kind::Blocked => "is BLOCKED",
            Kind::Decide => "asks you to DECIDE",
            Kind::Complete => "is COMPLETE",
            Kind::Failed => "FAILED",
            Kind::Stuck => "is STUCK",
            Kind::UsageLimitWait => "waits for the agent's usage limit to reset",
            Kind::UsageLimitOver => "goes on: the usage-limit wait is over",
            Kind::MergeConflict => "has a MERGE CONFLICT",
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
                | Kind::DaemonStopped
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message: everything a person needs to act without opening a terminal first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Notice {
    #[serde(rename = "event")]
    pub kind: Kind,
    /// The repository's top level.
    pub repository: String,
    /// The run's id (empty for the daemon's own events).
    pub run: String,
    /// The plan, spec or task title.
    pub title: String,
    /// Why, in the agent's words (the BLOCKED reason, the DECIDE question, the agent's
    /// usage-limit line…).
    pub reason: String,
    /// The exact command to act.
    pub action: String,
    pub at: String,
}

impl Notice {
    /// A notice of `kind` about `run`, with the action command for its kind and place.
    pub fn new(kind: Kind, place: Place<'_>, run: &str, title: &str, reason: &str) -> Notice {
        Notice {
            kind,
            repository: place.repository().display().to_string(),
            run: run.to_string(),
            title: title.to_string(),
            reason: reason.trim().to_string(),
            action: action_for(kind, place, run),
            at: crate::clock::now_rfc3339(),
        }
    }

    /// Its kind and run (`blocked of run 2026…`), for a log line about it.
    pub fn describe(&self) -> String {
        if self.run.is_empty() {
            return self.kind.to_string();
        }
        format!("{} of run {}", self.kind, self.run)
    }

    /// One line for a terminal or a desktop notification's summary.
    pub fn summary(&self) -> String {
        let repo = Path::new(&self.repository)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.repository.clone());
        if self.run.is_empty() {
            return format!("taskdaemon in {repo} {}", self.kind.headline());
        }
        let title = if self.title.is_empty() {
            String::new()
        } else {
            format!(" \"{}\"", self.title)
        };
        format!(
            "taskdaemon: run {}{title} in {repo} {}",
            self.run,
            self.kind.headline()
        )
    }

    /// The Slack-compatible text: summary, reason, action.
    pub fn text(&self) -> String {
        let mut t = self.summary();
        if !self.reason.is_empty() {
            t.push_str(&format!("\n> {}", self.reason.replace('\n', "\n> ")));
        }
        t.push_str(&format!("\nrepository: {}", self.repository));
        if self.action.contains('`') {
            // Its commands are quoted already: no backticks around backticks (Markdown
            // and Slack would break them apart).
            t.push_str(&format!("\nnext: {}", self.action));
        } else if !self.action.is_empty() {
            t.push_str(&format!("\nnext: `{}`", self.action));
        }
        t
    }

    /// The webhook's JSON body and the command hook's stdin: the notice and `text`.
    pub fn body(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("text".into(), serde_json::Value::String(self.text()));
        }
        v
    }
}

/// Where a run works, for the command that acts on it.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    /// A foreground `run`/`task` in this directory.
    Local(&'a Path),
    /// A daemon run of the repository `repo`, in `worktree` once it started.
    Daemon {
        repo: &'a Path,
        worktree: Option<&'a Path>,
    },
}

impl Place<'_> {
    pub fn repository(&self) -> &Path {
        match self {
            Place::Local(d) => d,
            Place::Daemon { repo, .. } => repo,
        }
    }
}

fn c_flag(p: &Path) -> String {
    format!(
        "taskdaemon -C {}",
        crate::shell::quote(&p.display().to_string())
    )
}

/// The command a person runs to act on a notice of `kind`.
pub fn action_for(kind: Kind, place: Place<'_>, run: &str) -> String {
    match place {
        Place::Local(dir) => {
            let c = c_flag(dir);
            let logs = crate::shell::quote(&dir.join(".ralph/logs").display().to_string());
            match kind {
                Kind::Blocked => format!("{c} unblock && {c} run --resume"),
                Kind::Decide => format!("{c} answer \"…\" && {c} run --resume"),
                Kind::Failed | Kind::Stuck | Kind::MergeConflict => {
                    format!("ls {logs}; then {c} run --resume")
                }
                Kind::DaemonStopped => format!("{c} daemon start"),
                Kind::Complete | Kind::UsageLimitWait | Kind::UsageLimitOver => {
                    format!("ls {logs}")
                }
            }
        }
        Place::Daemon { repo, worktree } => {
            let c = c_flag(repo);
            let w = c_flag(worktree.unwrap_or(repo));
            match kind {
                Kind::Blocked => format!("{w} unblock && {c} resume {run}"),
                Kind::Decide => format!("{w} answer \"…\" && {c} resume {run}"),
                Kind::MergeConflict => format!("{c} resume {run}"),
                Kind::DaemonStopped => format!("{c} daemon start"),
                Kind::Complete
                | Kind::Failed
                | Kind::Stuck
                | Kind::UsageLimitWait
                | Kind::UsageLimitOver => format!("{c} logs {run}"),
            }
        }
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
