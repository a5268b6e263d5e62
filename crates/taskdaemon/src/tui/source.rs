//! Where the model comes from: a daemon (its store, then its pushed events), or the
//! foreground loop in this directory (its `.ralph/` files).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use taskdaemon_core::daemon::DaemonPaths;
use taskdaemon_core::store::Records;
use taskdaemon_core::watch::{Model, local_model};

pub enum Source {
    /// The repository's daemon and its record store.
    Daemon {
        paths: DaemonPaths,
        records: Records,
        feed: Option<std::sync::mpsc::Receiver<Feed>>,
        last: Instant,
    },
    /// A foreground `run`/`task` in this directory.
    Local { dir: PathBuf, last: Instant },
}

/// What the daemon's event stream hands the UI.
pub enum Feed {
    Event(serde_json::Value),
    Gone(String),
}

/// How often files are looked at again when no event stream tells us.
const REREAD: Duration = Duration::from_millis(700);

impl Source {
    /// The model as it is now.
    pub fn load(&mut self) -> anyhow::Result<Model> {
        match self {
            Source::Daemon { paths, records, .. } => {
                records.sync().map_err(crate::commands::store_err)?;
                let mut m =
                    Model::load(&paths.project, records).map_err(crate::commands::store_err)?;
                m.daemon = paths
                    .read_info()
                    .filter(|_| paths.is_running())
                    .map(|i| i.pid);
                Ok(m)
            }
            Source::Local { dir, .. } => Ok(local_model(dir).unwrap_or_else(|| Model {
                repository: dir.clone(),
                ..Model::default()
            })),
        }
    }

    /// Bring `model` up to date; a line for the status bar when something went wrong.
    pub fn pull(&mut self, model: &mut Model) -> Option<String> {
        let due = match self {
            Source::Daemon { last, .. } | Source::Local { last, .. } => {
                if last.elapsed() >= REREAD {
                    *last = Instant::now();
                    true
                } else {
                    false
                }
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
