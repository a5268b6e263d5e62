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

/// How often files are looked at again when no event stream tells us.
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
                ..
            } => {
                records.sync().map_err(crate::commands::store_err)?;
                let mut m =
                    Model::load(&paths.project, records).map_err(crate::commands::store_err)?;
                m.daemon = paths
                    .read_info()
                    .filter(|_| paths.is_running())
                    .map(|i| i.pid);
                if feed.is_none() {
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

    /// Bring `model` up to date; a line for the status bar when something changed about
    /// the source itself.
    pub fn pull(&mut self, model: &mut Model) -> Option<String> {
        if let Source::Daemon { feed: Some(rx), .. } = self {
            let mut gone = None;
            while let Ok(f) = rx.try_recv() {
                match f {
                    Feed::Event(e) => model.apply(&e),
                    Feed::Gone(why) => gone = Some(why),
                }
            }
            let gone = gone?;
            if let Source::Daemon { feed, .. } = self {
                *feed = None;
            }
            return Some(format!("{gone}; showing the store"));
        }
        let due = match self {
            Source::Daemon { last, .. } | Source::Local { last, .. } => {
                let due = last.elapsed() >= REREAD;
                if due {
                    *last = Instant::now();
                }
                due
            }
        };
        if !due {
            return None;
        }
        match self.load() {
            Ok(m) => {
                *model = m;
                None
            }
            Err(e) => Some(format!("{e:#}")),
        }
    }
}
