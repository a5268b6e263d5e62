//! Where the model comes from: a daemon (its store, then the events it pushes on its
//! socket), or the foreground loop in this directory (its `.ralph/` files).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use taskdaemon_core::daemon::{DaemonEvent, DaemonPaths, ipc};
use taskdaemon_core::store::Records;
use taskdaemon_core::watch::{Model, local_model};

pub enum Source {
    /// The repository's daemon and its record store.
    Daemon {
        paths: DaemonPaths,
        records: Box<Records>,
        /// The daemon's event stream, while it is there.
        feed: Option<mpsc::Receiver<Feed>>,
        /// Subscribe to the event stream (not for one frame: `--once`).
        follow: bool,
        last: Instant,
    },
    /// A foreground `run`/`task` in this directory.
    Local { dir: PathBuf, last: Instant },
}

/// What the event stream's reader hands the UI.
pub enum Feed {
    Event(Box<DaemonEvent>),
    Gone(String),
}

/// How often the store (or the `.ralph/` files) is read again when no event says a
/// record changed: the view is never more than this behind.
const REREAD: Duration = Duration::from_millis(700);

/// Read the daemon's events on a thread of their own.
fn subscribe(paths: &DaemonPaths) -> Option<mpsc::Receiver<Feed>> {
    if !paths.is_running() {
        return None;
    }
    let socket = paths
        .read_info()
        .map(|i| i.socket)
        .unwrap_or_else(|| paths.socket());
    let sub = ipc::subscribe(&socket).ok()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for e in sub {
            let item = match e {
                Ok(e) => Feed::Event(Box::new(e)),
                Err(e) => {
                    let _ = tx.send(Feed::Gone(format!("the daemon's event stream failed: {e}")));
                    return;
                }
            };
            if tx.send(item).is_err() {
                return;
            }
        }
        let _ = tx.send(Feed::Gone("the daemon stopped".into()));
    });
    Some(rx)
}

impl Source {
    /// The model as it is now (and, with a daemon, its event stream from here on).
    pub fn load(&mut self) -> anyhow::Result<Model> {
        match self {
            Source::Daemon {
                paths,
                records,
                feed,
                follow,
                ..
            } => {
                records.sync().map_err(crate::commands::store_err)?;
                let mut m =
                    Model::load(&paths.project, records).map_err(crate::commands::store_err)?;
                m.daemon = paths
                    .read_info()
                    .filter(|_| paths.is_running())
                    .map(|i| i.pid);
                m.kept_logs = Some(paths.dir.join("logs"));
                if *follow && feed.is_none() {
                    *feed = subscribe(paths);
                }
                Ok(m)
            }
            Source::Local { dir, .. } => Ok(local_model(dir).unwrap_or_else(|| Model {
                repository: dir.clone(),
                ..Model::default()
            })),
        }
    }

    /// The events the stream brought since the last look, and why it ended (if it did).
    fn drain(&mut self) -> (Vec<DaemonEvent>, Option<String>) {
        let mut events = Vec::new();
        let mut gone = None;
        if let Source::Daemon { feed: Some(rx), .. } = self {
            while let Ok(f) = rx.try_recv() {
                match f {
                    Feed::Event(e) => events.push(*e),
                    Feed::Gone(why) => gone = Some(why),
                }
            }
        }
        if gone.is_some()
            && let Source::Daemon { feed, .. } = self
        {
            *feed = None;
        }
        (events, gone)
    }

    /// Bring `model` up to date: the store is read again after an event that changed a
    /// record, and at least every [`REREAD`]; then the events are folded in on top (they
    /// may be newer than the store as read). A line for the status bar when something
    /// changed about the source itself. Whether the store was read.
    pub fn pull(&mut self, model: &mut Model) -> (Option<String>, bool) {
        let (events, gone) = self.drain();
        let now = Instant::now();
        let last = match self {
            Source::Daemon { last, .. } | Source::Local { last, .. } => last,
        };
        let due = last.elapsed() >= REREAD
            || gone.is_some()
            || events.iter().any(taskdaemon_core::watch::changes_records);
        if due {
            *last = now;
        }
        let mut problem = gone.map(|g| format!("{g}; showing the store"));
        if due {
            match self.load() {
                Ok(m) => model.refresh(m, now),
                Err(e) => problem = Some(format!("{e:#}")),
            }
        }
        for e in &events {
            model.apply(e);
        }
        (problem, due)
    }
}
