//! The snapshot lock and recovery from a killed snapshot command.
//!
//! `<git-dir>/taskdaemon/snapshot.lock` is an `flock` (it dies with its holder) that
//! serializes every snapshot command of one work tree; its content is the holder's pid.
//! Whoever takes it next knows the previous holder is gone. What that holder may have left:
//!
//! - git children still running (a SIGKILL of taskdaemon alone does not end them): every
//!   git the snapshots run carries `TASKDAEMON_SNAPSHOT_OWNER=<pid>` in its environment,
//!   so they are found in `/proc` and waited for (reported with their pid if they hang);
//! - stale lock files of its own: the private indexes' (`snapshot.index.lock`, …), a
//!   snapshot tag's (`refs/tags/manual-<s>.lock`, …), and during a rollback the locks of
//!   the refs it moves: removed, each with a [`Notice`];
//! - a rollback journal: finished or dropped by [`super::journal`].

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::journal::Journal;
use super::{SnapshotError, Snapshots, io};

/// The environment variable that marks git processes started by snapshots.
pub(super) const OWNER_ENV: &str = "TASKDAEMON_SNAPSHOT_OWNER";

/// The locks git takes on the private indexes (`GIT_INDEX_FILE`).
const PRIVATE_INDEX_LOCKS: &[&str] = &["snapshot.index.lock", "index.user.lock", "index.new.lock"];

/// Name prefixes of snapshot tags (see `TAG_PATTERNS`).
const TAG_PREFIXES: &[&str] = &["task-", "manual-", "stall-", "pre-rollback-", "run-"];

/// How long to wait for git children of a killed taskdaemon before reporting them.
const ORPHAN_WAIT: Duration = Duration::from_secs(30);

/// How long a loop waits for another holder of a snapshot lock before it reports it
/// ([`SnapshotError::LockWait`]): a save or rollback that has not let go by then is
/// stopped (`kill -STOP`, Ctrl-Z) or hung, and waiting on would stall the loop unseen.
pub const LOCK_WAIT: Duration = Duration::from_secs(300);

/// How a snapshot command waits for another holder of a snapshot lock.
#[derive(Debug, Clone)]
pub(super) struct Waits {
    /// At most this long ([`LOCK_WAIT`]), then [`SnapshotError::LockWait`].
    pub limit: Duration,
    /// Its cancel ends the wait ([`SnapshotError::Stopped`]): a loop's stop.
    pub stop: Option<CancellationToken>,
    /// Told when a wait has lasted [`TELL_AFTER`].
    pub tell: Option<WaitTeller>,
}

/// A wait is told once it has lasted this long: another save holds a lock for
/// milliseconds, which is not worth a word; one that holds it longer may hold it minutes.
const TELL_AFTER: Duration = Duration::from_secs(1);

impl Default for Waits {
    fn default() -> Self {
        Waits {
            limit: LOCK_WAIT,
            stop: None,
            tell: None,
        }
    }
}

/// Told the lock and its holder's pid when a wait for another holder has lasted
/// [`TELL_AFTER`] (a loop's warning: the wait may last minutes).
#[derive(Clone)]
pub(super) struct WaitTeller(pub super::WaitTold);

impl std::fmt::Debug for WaitTeller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WaitTeller")
    }
}

/// Something recovery did, for the caller to show.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "notice")]
pub enum Notice {
    /// A lock file left by a killed snapshot command, removed.
    StaleLock { path: PathBuf, owner: Option<i32> },
    /// A killed rollback that had started changing the repository, finished.
    RollbackFinished {
        target: String,
        saved: String,
        owner: u32,
        /// A snapshot of what was found (files changed after the kill, a moved ref).
        found: Option<String>,
    },
    /// A killed rollback that had changed nothing yet, dropped.
    RollbackDropped {
        target: String,
        saved: Option<String>,
        owner: u32,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::StaleLock { path, owner } => write!(
                f,
                "removed the stale lock {} (left by taskdaemon {}, which is no longer running)",
                path.display(),
                super::pid_text(*owner)
            ),
            Notice::RollbackFinished {
                target,
                saved,
                owner,
                found,
            } => {
                write!(
                    f,
                    "an earlier `snapshot rollback {target}` (pid {owner}) was interrupted half way; it is finished now: the work tree, index and HEAD are those of {target}.\n  the state before it is saved as {saved}; `taskdaemon snapshot rollback {saved}` undoes it"
                )?;
                if let Some(found) = found {
                    write!(
                        f,
                        "\n  what was found after the interruption (changed since) is saved as {found}"
                    )?;
                }
                Ok(())
            }
            Notice::RollbackDropped {
                target,
                saved,
                owner,
            } => {
                write!(
                    f,
                    "an earlier `snapshot rollback {target}` (pid {owner}) was interrupted before it changed anything; the repository is as it was before it"
                )?;
                if let Some(s) = saved {
                    write!(f, " (also saved as {s})")?;
                }
                Ok(())
            }
        }
    }
}

impl Snapshots {
    /// Serialize snapshot operations on this work tree (they share the private index),
    /// then recover from a killed predecessor. Waits for another live holder (at most
    /// [`LOCK_WAIT`], then [`SnapshotError::LockWait`]), or reports it at once with its pid
    /// (`reporting_busy`).
    pub(super) fn lock(&self) -> Result<HeldLock, SnapshotError> {
        let dir = self.private_dir();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join("snapshot.lock");
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) if self.wait => {
                lock_within(&mut f, &path, &self.waits)?
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(SnapshotError::Busy {
                    pid: read_pid(&mut f),
                    path,
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        let previous = read_pid(&mut f).filter(|p| *p != std::process::id() as i32);
        write_pid_text(&f, &std::process::id().to_string()).map_err(io(&path))?;
        let lock = HeldLock(f);
        self.recover_locked(previous)?;
        Ok(lock)
    }

    /// Under the lock: end what a killed holder left behind. `previous`: the pid of a
    /// holder that did not finish (one that did cleared it).
    fn recover_locked(&self, previous: Option<i32>) -> Result<(), SnapshotError> {
        if let Some(owner) = previous {
            self.wait_for_children_of(owner)?;
        }
        let journal = self.read_journal()?;
        self.remove_stale_locks(self.stale_locks(journal.as_ref()), previous)?;
        // Snapshot tags' locks lie in the refs all work trees share: another work tree's
        // save may be making its tag now. Tags are made under the number lock, so one
        // still there once it is held is stale. Let go before the journal's recovery,
        // which may save (and take that lock) itself.
        if !self.tag_locks().is_empty() {
            let _numbers = self.seq_lock()?;
            self.remove_stale_locks(self.tag_locks(), previous)?;
        }
        if let Some(j) = journal {
            self.recover_journal(j)?;
        }
        Ok(())
    }

    fn remove_stale_locks(
        &self,
        stale: Vec<PathBuf>,
        owner: Option<i32>,
    ) -> Result<(), SnapshotError> {
        for path in stale {
            match fs::remove_file(&path) {
                Ok(()) => self.notice(Notice::StaleLock { path, owner }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        Ok(())
    }

    pub(super) fn notice(&self, n: Notice) {
        if let Ok(mut all) = self.notices.lock() {
            all.push(n);
        }
    }

    /// Lock files of this work tree only a snapshot command makes: of the private indexes,
    /// and (with a rollback's journal) of the refs that rollback moves.
    fn stale_locks(&self, journal: Option<&Journal>) -> Vec<PathBuf> {
        // Only git's locks of the private indexes: the same directory holds flock files
        // of others (`worktrees.lock`, `merge.lock`) that must never be removed.
        let mut found = lock_files(&self.private_dir(), |name| {
            PRIVATE_INDEX_LOCKS.contains(&name)
        });
        if let Some(j) = journal {
            let refs = j.moves.iter().map(|m| m.name.as_str());
            for name in refs.chain(["HEAD"]) {
                let base = if name == "HEAD" {
                    &self.git_dir
                } else {
                    &self.common_dir
                };
                let lock = base.join(format!("{name}.lock"));
                if lock.is_file() {
                    found.push(lock);
                }
            }
        }
        found.sort();
        found.dedup();
        found
    }

    /// Lock files of snapshot tags (`refs/tags/manual-<s>.lock`, …).
    fn tag_locks(&self) -> Vec<PathBuf> {
        lock_files(&self.common_dir.join("refs/tags"), |name| {
            TAG_PREFIXES.iter().any(|p| name.starts_with(p))
        })
    }

    /// Wait until no git started by `owner` (a killed taskdaemon) runs any more.
    fn wait_for_children_of(&self, owner: i32) -> Result<(), SnapshotError> {
        let start = Instant::now();
        loop {
            let left = children_of(owner);
            let Some(pid) = left.first() else {
                return Ok(());
            };
            if start.elapsed() > ORPHAN_WAIT {
                return Err(SnapshotError::LockHeld {
                    path: self.private_dir(),
                    pid: *pid,
                    owner,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Test hook: with `TASKDAEMON_TEST_ROLLBACK_PAUSE=<step>`, stop at that step for good
    /// (after writing `paused-<step>` with the pid into the private directory) so a test
    /// can kill the process at an exact point of a rollback.
    pub(super) fn pause(&self, step: &str) {
        if std::env::var_os("TASKDAEMON_TEST_ROLLBACK_PAUSE").is_some_and(|v| v == step) {
            let _ = fs::write(
                self.private_dir().join(format!("paused-{step}")),
                std::process::id().to_string(),
            );
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}

/// A held snapshot lock (the work tree's, or the number's across work trees). Released
/// normally, it clears the holder's pid: a pid found by the next holder of the work tree's
/// lock means a killed one (whose git children may still run), and one found by a waiter
/// is the holder's, not an earlier one's.
pub(super) struct HeldLock(File);

impl HeldLock {
    /// Take `f`'s lock (at `path`) as [`lock_within`] does, and say this process holds it.
    pub(super) fn take(mut f: File, path: &Path, waits: &Waits) -> Result<Self, SnapshotError> {
        lock_within(&mut f, path, waits)?;
        write_pid_text(&f, &std::process::id().to_string()).map_err(io(path))?;
        Ok(HeldLock(f))
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = write_pid_text(&self.0, "");
    }
}

/// Bytes of the lock's text: `i32::MAX` has 10 digits, then the newline.
const PID_WIDTH: usize = 11;

/// Take the `flock` of `f` (at `path`), waiting at most `waits.limit` for another holder
/// (told to `waits.tell` once the wait has lasted [`TELL_AFTER`]), then
/// [`SnapshotError::LockWait`] with the pid the file names; [`SnapshotError::Stopped`] as
/// soon as `waits.stop` is cancelled. Asked again and again (1 ms, doubling to 10 ms): a
/// thread blocked in `flock` could not be called back, and would take the lock whenever it
/// came free and hold it for good.
fn lock_within(f: &mut File, path: &Path, waits: &Waits) -> Result<(), SnapshotError> {
    let start = Instant::now();
    let until = start + waits.limit;
    let mut pause = Duration::from_millis(1);
    let mut told = false;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock)
                if waits.stop.as_ref().is_some_and(|c| c.is_cancelled()) =>
            {
                return Err(SnapshotError::Stopped {
                    path: path.to_path_buf(),
                });
            }
            Err(fs::TryLockError::WouldBlock) if Instant::now() < until => {
                if let (Some(tell), false) = (&waits.tell, told)
                    && start.elapsed() >= TELL_AFTER
                {
                    (tell.0)(path, read_pid(f));
                    told = true;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(SnapshotError::LockWait {
                    pid: read_pid(f),
                    path: path.to_path_buf(),
                    waited: crate::duration::format_duration(waits.limit),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(path)(e)),
        }
    }
}

/// `pid` (or blanks: no holder) padded to a fixed width over the start of the lock file,
/// which is cut only when it has another length: the same bytes rewritten in place, with
/// no truncate (a journal transaction each on ext4). Not synced: the pid is read by the
/// next holder of the `flock`, through the page cache; after a crash of the machine its
/// holder and every git it started are gone with it.
fn write_pid_text(f: &File, pid: &str) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let text = format!("{pid:<width$}\n", width = PID_WIDTH - 1);
    f.write_all_at(text.as_bytes(), 0)?;
    if f.metadata()?.len() != PID_WIDTH as u64 {
        f.set_len(PID_WIDTH as u64)?;
    }
    Ok(())
}

fn read_pid(f: &mut File) -> Option<i32> {
    let mut text = String::new();
    f.rewind().ok()?;
    f.read_to_string(&mut text).ok()?;
    text.trim().parse().ok().filter(|p| *p > 0)
}

/// Live processes whose environment marks them as git started by `owner`.
fn children_of(owner: i32) -> Vec<i32> {
    let mark = format!("{OWNER_ENV}={owner}");
    crate::agent::proctree::other_processes()
        .filter(|(_, dir)| crate::agent::proctree::has_token(dir, mark.as_bytes()))
        .map(|(pid, _)| pid)
        .collect()
}

/// The `*.lock` files in `dir` (plain files) whose names `ours` accepts.
fn lock_files(dir: &Path, ours: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".lock") && ours(&name)
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::manual_request;
    use super::*;
    use crate::git::testrepo::{commit_all, init};

    #[test]
    fn a_loop_waits_for_a_snapshot_command_but_reports_one_that_does_not_let_go() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        fs::write(d.path().join("a"), "0").unwrap();
        commit_all(d.path(), "one");
        let req = manual_request(1_000);
        // A person's rollback (another process: here another open of the lock) holds it.
        let person = Snapshots::open(d.path()).unwrap();
        let held = person.lock().unwrap();
        let mut engine = Snapshots::open(d.path()).unwrap();
        engine.waits.limit = Duration::from_millis(300);
        let start = Instant::now();
        let err = engine.save(&req).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(300));
        let SnapshotError::LockWait { pid, path, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*pid, Some(std::process::id() as i32));
        assert!(path.ends_with("taskdaemon/snapshot.lock"), "{path:?}");
        // A person's command still says at once that another holds it.
        let busy = Snapshots::open(d.path()).unwrap().reporting_busy();
        assert!(matches!(busy.save(&req), Err(SnapshotError::Busy { .. })));

        // A loop's cancel ends its wait (it would wait 5 minutes otherwise), and nothing
        // is saved.
        let cancel = CancellationToken::new();
        let stopping = Snapshots::open(d.path()).unwrap().stopped_by(&cancel);
        std::thread::scope(|sc| {
            let saving = sc.spawn(|| stopping.save(&req));
            std::thread::sleep(Duration::from_millis(100));
            assert!(!saving.is_finished(), "did not wait");
            cancel.cancel();
            let err = saving.join().unwrap().unwrap_err();
            assert!(matches!(err, SnapshotError::Stopped { .. }), "{err}");
        });
        assert!(engine.list().unwrap().is_empty());

        // Let go while it is waited for: the loop's save goes on.
        engine.waits.limit = Duration::from_secs(30);
        std::thread::scope(|sc| {
            let saving = sc.spawn(|| engine.save(&req));
            std::thread::sleep(Duration::from_millis(200));
            assert!(!saving.is_finished(), "did not wait");
            drop(held);
            assert_eq!(saving.join().unwrap().unwrap().seq, 1);
        });
    }
}
