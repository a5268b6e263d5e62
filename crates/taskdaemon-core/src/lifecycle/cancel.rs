//! `cancel` of a foreground loop (`run`, `task`): which loop a target names, and stopping
//! it — TERM to the pid in its `.ralph/run.lock` (it ends its agents and saves its state,
//! so `run --resume` there goes on), then waiting until it lets go of the lock. A spec
//! directory's `implement` loop is `worklist::cancel`; a daemon record is
//! `daemon::control`. Nothing here prints.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::engine::RunState;
use crate::workspace::Workspace;

/// The directory of a foreground loop that `target` names, from `workdir`: this directory
/// (no target) or the target directory while a loop holds its run lock, or this directory
/// when the target is (a prefix of) its run's id. `None`: the target is something else.
pub fn local_loop(workdir: &Path, target: Option<&str>) -> Option<PathBuf> {
    let dir = match target {
        None => workdir.to_path_buf(),
        Some(t) if workdir.join(t).is_dir() => workdir.join(t),
        Some(t) => {
            let ws = Workspace::new(workdir);
            let id = RunState::load(&ws).ok().flatten().map(|s| s.run_id);
            if !id.is_some_and(|id| id.starts_with(t)) {
                return None;
            }
            workdir.to_path_buf()
        }
    };
    Workspace::new(&dir).holder().is_some().then_some(dir)
}

/// A foreground loop that was stopped.
#[derive(Debug, Clone, Serialize)]
pub struct LocalStop {
    pub dir: PathBuf,
    /// Its run, from its saved state.
    pub run: Option<String>,
    pub stopped_pid: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalStopError {
    #[error(
        "a loop holds {} but its pid is unreadable\n  hint: stop it in its own terminal with Ctrl-C",
        lock.display()
    )]
    NoPid { lock: PathBuf },
    #[error(
        "cannot signal the loop (pid {pid}) in {}: {source}\n  hint: stop it in its own terminal with Ctrl-C",
        dir.display()
    )]
    Signal {
        pid: i32,
        dir: PathBuf,
        source: nix::Error,
    },
    #[error(
        "the loop (pid {pid}) in {} did not stop within {}s\n  hint: `kill -9 {pid}`",
        dir.display(),
        limit.as_secs()
    )]
    TooSlow {
        pid: i32,
        dir: PathBuf,
        limit: Duration,
    },
}

/// Stop the foreground loop of `dir`, waiting at most `limit` for it to let go.
pub fn stop_local_loop(dir: &Path, limit: Duration) -> Result<LocalStop, LocalStopError> {
    let ws = Workspace::new(dir);
    let Some(Some(pid)) = ws.holder() else {
        return Err(LocalStopError::NoPid {
            lock: ws.lock_file(),
        });
    };
    kill(Pid::from_raw(pid), Signal::SIGTERM).map_err(|source| LocalStopError::Signal {
        pid,
        dir: dir.to_path_buf(),
        source,
    })?;
    let start = Instant::now();
    while ws.holder().is_some() {
        if start.elapsed() > limit {
            return Err(LocalStopError::TooSlow {
                pid,
                dir: dir.to_path_buf(),
                limit,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(LocalStop {
        dir: dir.to_path_buf(),
        run: RunState::load(&ws).ok().flatten().map(|s| s.run_id),
        stopped_pid: pid,
    })
}
