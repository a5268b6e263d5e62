//! The one pid lock: a file held exclusively (`flock`) by the process that runs a loop,
//! with its pid inside, so another process can tell whether it runs and stop it
//! (`cancel`). Released when the guard drops or the process dies. Used by a foreground
//! loop's `.ralph/run.lock` and a work list's `.implement.lock`.

use std::fs::File;
use std::io::Read;
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
    let f = crate::fsutil::open_lock_file(path).map_err(LockError::Io)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(LockError::Held(holder(path).flatten()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    write_pid(&f);
    Ok(PidLock { _file: f })
}

/// The pid, padded to a fixed width, written over the start of the file. Not synced: it
/// is read only while its writer holds the lock (the page cache serves it), and a crash
/// of the machine ends the holder with it, so a pid that did not reach the disk is never
/// wanted. The file is cut only when it has another length (no truncate-and-rewrite of
/// the same bytes, which costs ext4 a journal transaction per start).
fn write_pid(f: &File) {
    use std::os::unix::fs::FileExt;
    let text = format!("{:<width$}\n", std::process::id(), width = PID_WIDTH - 1);
    let _ = f.write_all_at(text.as_bytes(), 0);
    if f.metadata().is_ok_and(|m| m.len() != PID_WIDTH as u64) {
        let _ = f.set_len(PID_WIDTH as u64);
    }
}

/// Bytes of the pid text: `i32::MAX` has 10 digits, then the newline.
const PID_WIDTH: usize = 11;

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
    fn a_longer_or_shorter_old_text_leaves_only_the_pid() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.lock");
        for old in ["1234567890123456789\n", "7\n", ""] {
            std::fs::write(&p, old).unwrap();
            let l = acquire(&p).unwrap();
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(text.trim(), std::process::id().to_string(), "{old:?}");
            assert!(text.ends_with('\n'), "{text:?}");
            drop(l);
        }
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
