//! Cancel a spec's `implement` loop (`taskdaemon cancel SPEC_DIR`): mark it as cancelled,
//! TERM to the process holding `.implement.lock` (it stops its agents and exits), wait
//! until it let go, then delete `.ralph-state.json` (`.progress.md` is kept) and say where
//! it stopped. Returns a report; the binary renders it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::coordinator::TASKS_FILE;
use super::{ImplementState, WorklistError, lock, progress, tasks_md};

#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    #[error(
        "cannot signal the implement loop (pid {pid}) of {spec}: {source}\n  hint: stop it in its own terminal with Ctrl-C"
    )]
    Signal {
        pid: i32,
        spec: PathBuf,
        source: nix::Error,
    },
    #[error(
        "the implement loop (pid {pid}) of {spec} did not stop within {secs}s\n  hint: `kill -9 {pid}`, then run `taskdaemon cancel` again"
    )]
    DidNotStop { pid: i32, spec: PathBuf, secs: u64 },
    #[error(
        "an implement loop holds {0} but its pid is unreadable\n  hint: stop it in its own terminal with Ctrl-C"
    )]
    PidUnreadable(PathBuf),
    #[error(transparent)]
    Worklist(#[from] WorklistError),
}

impl CancelError {
    /// Whether a person must act (exit 64) rather than the harness having failed.
    pub fn is_user_fault(&self) -> bool {
        match self {
            CancelError::Worklist(e) => e.is_user_fault(),
            _ => true,
        }
    }
}

/// What `cancel` did and where the loop was.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CancelReport {
    pub spec_dir: String,
    /// The pid of the loop that was stopped.
    pub stopped_pid: Option<i32>,
    pub state_deleted: bool,
    pub progress_kept: bool,
    /// The task the loop was at.
    pub task_id: Option<String>,
    pub task_title: Option<String>,
    /// Its place in tasks.md (1-based), counting every task.
    pub task_number: Option<usize>,
    pub task_index: Option<usize>,
    pub total_tasks: Option<usize>,
    pub task_iteration: Option<u32>,
    pub done_tasks: usize,
}

/// Stop the loop of `spec` (waiting at most `limit`) and delete its state.
pub fn cancel_implement(spec: &Path, limit: Duration) -> Result<CancelReport, CancelError> {
    let stopped_pid = stop_loop(spec, limit)?;
    // Read after the loop stopped: it saved where it was on its way out.
    let state = match ImplementState::load(spec) {
        Ok(s) => s,
        Err(WorklistError::CorruptState { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let tasks = std::fs::read_to_string(spec.join(TASKS_FILE))
        .map(|t| tasks_md::parse(&t))
        .unwrap_or_default();
    let state_deleted = ImplementState::remove(spec)?;
    lock::clear_cancel(spec)?;
    let at = state
        .as_ref()
        .and_then(|s| tasks.get(s.task_index))
        .or_else(|| tasks.iter().find(|t| !t.done));
    Ok(CancelReport {
        spec_dir: spec.display().to_string(),
        stopped_pid,
        state_deleted,
        progress_kept: progress::path(spec).exists(),
        task_id: at.map(|t| t.id.clone()),
        task_title: at.map(|t| t.title.clone()),
        task_number: at.map(|t| t.index + 1),
        task_index: state.as_ref().map(|s| s.task_index),
        total_tasks: Some(tasks.len()),
        task_iteration: state.as_ref().map(|s| s.task_iteration),
        done_tasks: tasks_md::checked(&tasks),
    })
}

/// TERM to the lock's holder (after the cancel mark), then wait until it let go.
fn stop_loop(spec: &Path, limit: Duration) -> Result<Option<i32>, CancelError> {
    let pid = match lock::holder(spec) {
        None => return Ok(None),
        Some(None) => return Err(CancelError::PidUnreadable(spec.join(lock::RUN_LOCK))),
        Some(Some(pid)) => pid,
    };
    lock::request_cancel(spec)?;
    if let Err(source) = kill(Pid::from_raw(pid), Signal::SIGTERM) {
        lock::clear_cancel(spec)?;
        return Err(CancelError::Signal {
            pid,
            spec: spec.to_path_buf(),
            source,
        });
    }
    let start = Instant::now();
    while lock::holder(spec).is_some() {
        if start.elapsed() > limit {
            return Err(CancelError::DidNotStop {
                pid,
                spec: spec.to_path_buf(),
                secs: limit.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Some(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_running_and_no_state_reports_nothing_done() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(TASKS_FILE), "- [x] 1.1 a\n- [ ] 1.2 b\n").unwrap();
        let r = cancel_implement(d.path(), Duration::from_secs(1)).unwrap();
        assert_eq!(r.stopped_pid, None);
        assert!(!r.state_deleted);
        assert_eq!(r.done_tasks, 1);
        assert_eq!(r.task_id.as_deref(), Some("1.2"));
    }

    #[test]
    fn a_stale_cancel_mark_is_removed_by_the_next_loop() {
        let d = tempfile::tempdir().unwrap();
        lock::request_cancel(d.path()).unwrap();
        assert!(lock::cancel_requested(d.path()));
        let _held = lock::acquire(d.path()).unwrap();
        assert!(!lock::cancel_requested(d.path()));
    }
}
