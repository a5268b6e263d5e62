//! Locks of a spec directory: `.implement.lock` (held exclusively by the running
//! `implement`, with its pid inside, so `cancel` can find and stop it) and `.tasks.md.lock`
//! (taken around every checkbox mark, by the harness and by agents in a parallel group:
//! `flock <spec>/.tasks.md.lock sed -i …`).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::WorklistError;

pub const RUN_LOCK: &str = ".implement.lock";
pub const TASKS_LOCK: &str = ".tasks.md.lock";
/// Written by `cancel` before it stops the loop: the loop's last words then say that its
/// state is deleted, not kept. Removed by `cancel` when done, or by the next loop's start.
pub const CANCEL_MARK: &str = ".implement.cancel";

/// The running loop's lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct RunLock {
    _lock: crate::pidlock::PidLock,
}

/// Never through a link: a committed `.implement.lock -> ~/file` would be truncated.
fn open(path: &Path) -> Result<File, WorklistError> {
    crate::fsutil::open_lock_file(path).map_err(WorklistError::io(path))
}

/// Take the run lock of `spec_dir`, or say who holds it.
pub fn acquire(spec_dir: &Path) -> Result<RunLock, WorklistError> {
    let path = spec_dir.join(RUN_LOCK);
    match crate::pidlock::acquire(&path) {
        Ok(l) => {
            // A mark left by a `cancel` that died belongs to a loop that is gone.
            clear_cancel(spec_dir)?;
            Ok(RunLock { _lock: l })
        }
        Err(crate::pidlock::LockError::Held(pid)) => Err(WorklistError::Busy {
            spec: spec_dir.to_path_buf(),
            pid: pid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "unknown".into()),
        }),
        Err(crate::pidlock::LockError::Io(e)) => Err(WorklistError::io(&path)(e)),
    }
}

/// `Some(pid)` while a loop holds the run lock (`Some(None)`: held, pid unreadable);
/// `None` when no loop runs.
pub fn holder(spec_dir: &Path) -> Option<Option<i32>> {
    crate::pidlock::holder(&spec_dir.join(RUN_LOCK))
}

/// Mark the loop of `spec_dir` as being cancelled (before it gets its TERM).
pub fn request_cancel(spec_dir: &Path) -> Result<(), WorklistError> {
    let path = spec_dir.join(CANCEL_MARK);
    crate::fsutil::write_atomic(&path, format!("{}\n", std::process::id()).as_bytes())
        .map_err(WorklistError::io(&path))
}

/// Whether `cancel` is stopping the loop of `spec_dir`.
pub fn cancel_requested(spec_dir: &Path) -> bool {
    std::fs::symlink_metadata(spec_dir.join(CANCEL_MARK)).is_ok_and(|m| m.is_file())
}

/// Remove the cancel mark (none is fine).
pub fn clear_cancel(spec_dir: &Path) -> Result<(), WorklistError> {
    let path = spec_dir.join(CANCEL_MARK);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WorklistError::io(&path)(e)),
        _ => Ok(()),
    }
}

pub fn tasks_lock_path(spec_dir: &Path) -> PathBuf {
    spec_dir.join(TASKS_LOCK)
}

/// Run `f` holding the tasks.md lock (blocking).
pub fn with_tasks_lock<T>(
    spec_dir: &Path,
    f: impl FnOnce() -> Result<T, WorklistError>,
) -> Result<T, WorklistError> {
    let path = tasks_lock_path(spec_dir);
    let file = open(&path)?;
    file.lock().map_err(WorklistError::io(&path))?;
    let r = f();
    let _ = file.unlock();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_is_busy_and_names_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        assert!(holder(dir.path()).is_none());
        let held = acquire(dir.path()).unwrap();
        assert_eq!(holder(dir.path()), Some(Some(std::process::id() as i32)));
        let e = acquire(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&std::process::id().to_string()), "{e}");
        drop(held);
        assert!(holder(dir.path()).is_none());
        assert_eq!(with_tasks_lock(dir.path(), || Ok(7)).unwrap(), 7);
    }
}
