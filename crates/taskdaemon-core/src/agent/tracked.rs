//! Every process the harness starts, and everything that process starts, found again: by
//! a token in the environment and by parentage.
//!
//! Each spawn gets a fresh token in `TASKDAEMON_GROUP`; every descendant inherits it,
//! including processes that leave the process group (`setsid`, a double fork), so the
//! harness can end a whole tree, not only a process group ([`tree`]). Once
//! [`track_process_groups`] is called (the daemon, `run`, `task`), the token and run id are
//! written to a record in `<dir>` *before* the process is spawned, so there is no moment in
//! which a process runs unrecorded: a harness restarted after a `kill -9` ends whatever
//! still carries a recorded token ([`end_leftover_groups`]) before it resumes anything.
//! A record is a slot file (`slot-N`) written in place by one `pwrite` and emptied when
//! the tree is gone, then used again: a spawn makes and removes no file. Only processes
//! that carry the token are ever signalled after a restart, so a recycled pid is safe.
//!
//! Not covered (documented in ARCHITECTURE.md): a process that both empties its
//! environment (`env -i`) and leaves the tree by a double fork while the harness is dead.
//! Linux only (`/proc`); elsewhere only the process group is ended.

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::proctree::carriers;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Record every process tree started from now on in `dir` (once per process).
pub fn track_process_groups(dir: PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let _ = DIR.set(dir);
    Ok(())
}

/// End every process tree this process recorded, at once (KILL, no grace): a person
/// asked twice to stop. `None` when this process records none.
pub fn end_all_now() -> Option<Vec<Leftover>> {
    let dir = DIR.get()?;
    Some(end_leftover_groups(dir, Duration::ZERO))
}

/// Take over `dir`: end what a dead harness recorded there, then record every tree started
/// from now on in it. Call before anything starts, holding the lock that makes this
/// process the only user of `dir`.
pub fn take_over(dir: PathBuf, grace: Duration) -> std::io::Result<Vec<Leftover>> {
    let left = end_leftover_groups(&dir, grace);
    track_process_groups(dir)?;
    Ok(left)
}

/// Where a foreground loop (`run`, `task`) working in `workdir` records its trees: inside
/// the work tree's git dir (never in the work tree, whose files are the repository's), one
/// directory per work directory, since loops in two directories of one work tree may run at
/// the same time.
pub fn loop_records_dir(workdir: &Path) -> Result<PathBuf, crate::git::GitError> {
    crate::git::keyed_private(workdir, workdir, "loop-processes")
}

/// Where a work-list loop (`implement` of a spec directory, `stories` of a stories file)
/// records its trees: beside [`loop_records_dir`]'s, one directory per spec directory or
/// file, so it never takes over a `run` in the same directory.
pub fn worklist_records_dir(target: &Path) -> Result<PathBuf, crate::git::GitError> {
    let dir = if target.is_dir() {
        target
    } else {
        target.parent().unwrap_or(target)
    };
    crate::git::keyed_private(dir, target, "worklist-processes")
}

/// The variable that marks a tracked tree's processes.
pub const GROUP_VAR: &str = "TASKDAEMON_GROUP";

/// A fresh token for a tree about to start.
pub(crate) fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The record of one tree; emptied (a slot) or removed on drop.
pub(crate) struct Record(Option<Held>);

enum Held {
    /// A slot of this process, given back once emptied.
    Slot(std::fs::File, u32),
    /// A file of its own (when no slot could be written).
    File(PathBuf),
}

/// The name prefix of record slots.
const SLOT: &str = "slot-";

/// Slots this process emptied, to use again, and the next slot number never used.
static FREE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn take_slot() -> u32 {
    FREE.lock()
        .ok()
        .and_then(|mut f| f.pop())
        .unwrap_or_else(|| NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// Record `token` (with the run id from `env`) before its process is spawned. Without
/// tracking, nothing is written.
pub(crate) fn record(token: &str, env: &[(OsString, OsString)]) -> std::io::Result<Record> {
    let Some(dir) = DIR.get() else {
        return Ok(Record(None));
    };
    let run = env
        .iter()
        .find(|(k, _)| k == "TASKDAEMON_RUN_ID")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = format!("{token}\n{run}\n");
    // A slot left full (a tree that survived KILL at a restart) or not a plain file of
    // its own is skipped for good; after a few, the record gets a file of its own.
    for _ in 0..4 {
        let slot = take_slot();
        if let Ok(file) = write_slot(&dir.join(format!("{SLOT}{slot}")), text.as_bytes()) {
            return Ok(Record(Some(Held::Slot(file, slot))));
        }
    }
    let path = dir.join(token);
    // Not synced: a record matters only while its processes may run, and a crash of the
    // machine ends them all; a harness killed at any moment leaves it (the page cache).
    crate::fsutil::write_atomic_volatile(&path, text.as_bytes()).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "recording the process before it starts ({}): {e}",
                path.display()
            ),
        )
    })?;
    Ok(Record(Some(Held::File(path))))
}

/// Write `text` into the empty slot file at `path` (made when missing) with one `pwrite`,
/// so a kill leaves the whole record or none. Never through a link: the file must be a
/// regular file with no other name (a hard link to a file elsewhere would be written).
/// The slot stays locked (`flock`) while its record is held: two processes never take the
/// same slot, even were they to share a directory.
fn write_slot(path: &Path, text: &[u8]) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let f = crate::fsutil::open_lock_file(path)?;
    f.try_lock()
        .map_err(|_| std::io::Error::other("the slot is held by another process"))?;
    let m = f.metadata()?;
    if !m.is_file() || m.nlink() != 1 || m.len() != 0 {
        return Err(std::io::Error::other(
            "the slot is in use or not a plain file",
        ));
    }
    f.write_all_at(text, 0)?;
    Ok(f)
}

impl Drop for Record {
    fn drop(&mut self) {
        match self.0.take() {
            Some(Held::Slot(file, slot)) => {
                if file.set_len(0).is_ok()
                    && let Ok(mut free) = FREE.lock()
                {
                    free.push(slot);
                }
            }
            Some(Held::File(p)) => {
                let _ = std::fs::remove_file(p);
            }
            None => {}
        }
    }
}

/// A record that says nothing more: a slot is emptied (to be used again), a file removed.
fn clear(path: &Path) {
    let is_slot = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(SLOT));
    let emptied = is_slot
        && std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .and_then(|f| f.set_len(0))
            .is_ok();
    if !emptied {
        let _ = std::fs::remove_file(path);
    }
}

/// A tree a dead harness left behind, and what was done to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Leftover {
    pub token: String,
    pub run_id: String,
    /// Processes of the tree found alive.
    pub processes: usize,
    /// Still alive after TERM, grace and KILL (uninterruptible).
    pub survived: bool,
}

/// End every tree recorded in `dir` whose processes still carry its token: TERM to all,
/// one `grace` for all, then KILL to what is left (and to what forked meanwhile). Records
/// are removed, except those of trees that survived KILL. Linux (`/proc`).
pub fn end_leftover_groups(dir: &Path, grace: Duration) -> Vec<Leftover> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, String, String, usize)> = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            // A temp file of an interrupted record write.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines();
        let token = lines.next().unwrap_or("").trim().to_string();
        let run_id = lines.next().unwrap_or("").trim().to_string();
        if text.is_empty() && name.starts_with(SLOT) {
            // A free slot.
            continue;
        }
        let n = if token.is_empty() {
            0
        } else {
            carriers(&token).len()
        };
        if n == 0 {
            clear(&path);
            continue;
        }
        found.push((path, token, run_id, n));
    }
    let tokens: Vec<String> = found.iter().map(|f| f.1.clone()).collect();
    end_carriers(&tokens, grace);
    found
        .into_iter()
        .map(|(path, token, run_id, processes)| {
            let survived = !carriers(&token).is_empty();
            if !survived {
                // A survivor's record stays: the next start tries again.
                clear(&path);
            }
            Leftover {
                token,
                run_id,
                processes,
                survived,
            }
        })
        .collect()
}

/// TERM (with CONT, so a stopped process acts on it) or KILL to each pid.
/// End every live process that carries one of `tokens`: TERM, `grace` to go, then KILL
/// again and again (for at most 2 s) until none is left. Returns how many there were.
pub(crate) fn end_carriers(tokens: &[String], grace: Duration) -> usize {
    let all = |tokens: &[String]| -> Vec<i32> { tokens.iter().flat_map(|t| carriers(t)).collect() };
    let first = all(tokens);
    if first.is_empty() {
        return 0;
    }
    signal_all(&first, Signal::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until && !all(tokens).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let left = all(tokens);
        if left.is_empty() || Instant::now() >= until {
            break;
        }
        signal_all(&left, Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(20));
    }
    first.len()
}

pub(crate) fn signal_all(pids: &[i32], sig: Signal) {
    for &p in pids {
        if p > 1 && p != std::process::id() as i32 {
            let _ = kill(Pid::from_raw(p), sig);
            if sig == Signal::SIGTERM {
                let _ = kill(Pid::from_raw(p), Signal::SIGCONT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    use crate::agent::proctree::tests::spawn;

    #[test]
    fn a_recorded_tree_is_ended_even_after_setsid_and_a_stranger_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let mut ours = spawn("t-a", "setsid sleep 30 & sleep 30 & wait");
        let mut other = spawn("t-b", "sleep 30 & sleep 30; wait");
        std::fs::write(d.path().join("t-a"), "t-a\nrun-a\n").unwrap();
        // A record whose token no process carries: nothing to end, removed.
        std::fs::write(d.path().join("t-x"), "t-x\nrun-x\n").unwrap();
        let t = Instant::now();
        while carriers("t-a").len() < 3 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let ended = end_leftover_groups(d.path(), Duration::from_secs(2));
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(ended[0].run_id, "run-a");
        assert!(ended[0].processes >= 3, "{ended:?}");
        assert!(!ended[0].survived);
        assert!(carriers("t-a").is_empty());
        let _ = ours.wait();
        assert!(
            other.try_wait().unwrap().is_none(),
            "the stranger was killed"
        );
        signal_all(&carriers("t-b"), Signal::SIGKILL);
        let _ = other.wait();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn slots_are_written_in_place_emptied_and_never_written_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("slot-7");
        let f = write_slot(&path, b"tok\nrun\n").unwrap();
        let ino = f.metadata().unwrap().ino();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "tok\nrun\n");
        // In use: not written again.
        assert!(write_slot(&path, b"other\n").is_err());
        // Held (locked) by another holder while empty: not taken either.
        f.set_len(0).unwrap();
        assert!(write_slot(&path, b"other\n").is_err());
        drop(f);
        // An ended tree's slot is emptied, not removed, and an empty slot is left alone.
        clear(&path);
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        assert!(end_leftover_groups(d.path(), Duration::ZERO).is_empty());
        let again = write_slot(&path, b"tok2\nrun\n").unwrap();
        assert_eq!(again.metadata().unwrap().ino(), ino, "the same file");
        again.set_len(0).unwrap();
        // A slot that is a hard link to a file elsewhere, or a symbolic link, is refused.
        let outside = d.path().join("outside");
        std::fs::write(&outside, "").unwrap();
        let linked = d.path().join("slot-8");
        std::fs::hard_link(&outside, &linked).unwrap();
        assert!(write_slot(&linked, b"tok\n").is_err());
        let sym = d.path().join("slot-9");
        std::os::unix::fs::symlink(&outside, &sym).unwrap();
        assert!(write_slot(&sym, b"tok\n").is_err());
        assert_eq!(std::fs::read(&outside).unwrap(), b"");
    }
}
