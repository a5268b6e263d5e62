//! The one pid lock: a file held exclusively (`flock`) by the process that runs a loop,
//! with its pid inside, so another process can tell whether it runs and stop it
//! (`cancel`). Released when the guard drops or the process dies. Used by a foreground
//! loop's `.ralph/run.lock` and a work list's `.implement.lock`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// A held pid lock.
#[derive(Debug)]
pub struct PidLock {
    _file: File,
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it (its pid when readable).
    Held(Option<i32>),
    Io(std::io::Error),
}

/// Take the lock at `path` (never through a link) and write this process's pid into it.
pub fn acquire(path: &Path) -> Result<PidLock, LockError> {
    let mut f = crate::fsutil::open_lock_file(path).map_err(LockError::Io)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(LockError::Held(holder(path).flatten()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    let _ = f.set_len(0);
    let _ = writeln!(f, "{}", std::process::id());
    let _ = f.sync_data();
    Ok(PidLock { _file: f })
}

/// `Some(pid)` while a process holds the lock at `path` (`Some(None)`: held, pid
/// unreadable); `None` when none does.
pub fn holder(path: &Path) -> Option<Option<i32>> {
    let mut f = crate::fsutil::open_read(path).ok()?;
    match f.try_lock_shared() {
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut s = String::new();
            let _ = f.read_to_string(&mut s);
            // The file is input: 0, -1 or 1 would signal a group, everyone, or init.
            Some(s.trim().parse().ok().filter(|p: &i32| *p > 1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_known_while_held_and_gone_after() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.lock");
        assert!(holder(&p).is_none());
        let l = acquire(&p).unwrap();
        assert_eq!(holder(&p), Some(Some(std::process::id() as i32)));
        assert!(matches!(acquire(&p), Err(LockError::Held(Some(_)))));
        drop(l);
        assert!(holder(&p).is_none());
        drop(acquire(&p).unwrap());
    }

    #[test]
    fn a_pid_that_would_signal_a_group_everyone_or_init_is_not_a_holder_pid() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.lock");
        let l = acquire(&p).unwrap();
        for bad in ["0", "-1", "1", "x"] {
            std::fs::write(&p, bad).unwrap();
            assert_eq!(holder(&p), Some(None), "{bad}");
        }
        drop(l);
    }
}
