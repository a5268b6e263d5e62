//! Git lock files that a git process left when it was killed (an agent's `git commit`
//! ended by `SIGKILL` with its harness, or after its grace time): while one is there, every
//! later `git commit` of the agents fails ("Unable to create '.git/index.lock': File
//! exists") and the loop stops making progress. At a loop's start, before any agent of the
//! run, the locks every commit needs (the index, HEAD, the checked-out branch's ref) that
//! are older than the start, that no process holds open (looked at twice, 20 ms apart),
//! while no `git` process works in the work tree (a `git commit` waiting for its editor
//! holds `index.lock` with the file closed), are moved into
//! `<git-dir>/taskdaemon/stale-locks/` (kept, not deleted), so git can take them again.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::SystemTime;

use super::RepoFacts;

/// A lock file moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedLock {
    pub from: PathBuf,
    pub to: PathBuf,
}

/// Move aside the left-over locks of the work tree `facts` describes, older than
/// `before`. Nothing is moved while any process holds the file open.
pub fn clear(facts: &RepoFacts, before: SystemTime) -> Vec<MovedLock> {
    let mut candidates = vec![
        facts.git_dir.join("index.lock"),
        facts.git_dir.join("HEAD.lock"),
    ];
    if let Some(Some(branch)) = super::refs::head_branch(facts) {
        candidates.push(facts.common_dir.join(format!("refs/heads/{branch}.lock")));
    }
    clear_paths(facts, candidates, before)
}

/// The ref locks a killed daemon's own git calls (fetch, push, update-ref of its
/// branches and records) may leave in the common directory: `packed-refs.lock` and every
/// `*.lock` under `refs/remotes/`, `refs/heads/taskdaemon/` and `refs/taskdaemon/`, moved
/// aside by the rules of [`clear`]. For a daemon's start, before any git of its own.
pub fn clear_daemon_refs(facts: &RepoFacts, before: SystemTime) -> Vec<MovedLock> {
    let refs = facts.common_dir.join("refs");
    let mut candidates = vec![facts.common_dir.join("packed-refs.lock")];
    for dir in [
        refs.join("remotes"),
        refs.join("heads/taskdaemon"),
        refs.join("taskdaemon"),
    ] {
        lock_files(&dir, 0, &mut candidates);
    }
    clear_paths(facts, candidates, before)
}

/// The `*.lock` files under `dir`, a few levels deep (no link followed).
fn lock_files(dir: &std::path::Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        let p = e.path();
        if kind.is_dir() && depth < 6 {
            lock_files(&p, depth + 1, out);
        } else if kind.is_file() && p.extension().is_some_and(|x| x == "lock") {
            out.push(p);
        }
    }
}

fn clear_paths(facts: &RepoFacts, candidates: Vec<PathBuf>, before: SystemTime) -> Vec<MovedLock> {
    let stale: Vec<(PathBuf, u64, u64)> = candidates
        .into_iter()
        .filter_map(|p| {
            let m = fs::symlink_metadata(&p).ok()?;
            let old = m.modified().is_ok_and(|t| t < before);
            (m.is_file() && old).then(|| (p, m.dev(), m.ino()))
        })
        .collect();
    if stale.is_empty() {
        return Vec::new();
    }
    // Seen twice, 20 ms apart, with nobody holding it: a git that has just closed its
    // lock file to rename it into place has done so by the second look.
    let unheld = |stale: Vec<(PathBuf, u64, u64)>| -> Vec<(PathBuf, u64, u64)> {
        let (open, git_here) = open_files(&facts.toplevel);
        if git_here {
            // A git working here (`git commit` waiting for its editor holds `index.lock`
            // with the file closed): nothing is stale.
            return Vec::new();
        }
        stale
            .into_iter()
            .filter(|(p, dev, ino)| {
                !open.contains(&(*dev, *ino))
                    && fs::symlink_metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino)
            })
            .collect()
    };
    let stale = unheld(stale);
    if stale.is_empty() {
        return Vec::new();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let stale = unheld(stale);
    let keep = facts.git_dir.join("taskdaemon").join("stale-locks");
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    stale
        .into_iter()
        .filter_map(|(from, _, _)| {
            let name = from.file_name()?.to_string_lossy().into_owned();
            let to = keep.join(format!("{stamp}-{name}"));
            crate::fsutil::create_dir_confined(&keep).ok()?;
            fs::rename(&from, &to).ok()?;
            Some(MovedLock { from, to })
        })
        .collect()
}

/// Every file some process has open, as (device, inode), and whether a `git` process
/// runs with its working directory in the work tree `top`. What cannot be read (another
/// user's processes) is not there: git's own processes here run as the user.
fn open_files(top: &std::path::Path) -> (std::collections::HashSet<(u64, u64)>, bool) {
    let mut open = std::collections::HashSet::new();
    let mut git_here = false;
    for (_, dir) in crate::agent::proctree::other_processes() {
        let is_git = fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim_end() == "git");
        if is_git && fs::read_link(dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(top)) {
            git_here = true;
        }
        let Ok(fds) = fs::read_dir(dir.join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(m) = fs::metadata(fd.path()) {
                open.insert((m.dev(), m.ino()));
            }
        }
    }
    (open, git_here)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{commit_all, init};

    #[test]
    fn a_left_over_lock_is_moved_aside_and_a_held_or_new_one_is_left() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        fs::write(d.path().join("a"), "1").unwrap();
        commit_all(d.path(), "one");
        let facts = RepoFacts::ask(d.path()).unwrap();
        let index_lock = facts.git_dir.join("index.lock");
        let branch_lock = facts.common_dir.join("refs/heads/main.lock");
        fs::write(&index_lock, "half an index").unwrap();
        fs::write(&branch_lock, "").unwrap();
        // Made after the start: left alone.
        let long_ago = SystemTime::UNIX_EPOCH;
        assert!(clear(&facts, long_ago).is_empty());
        // Held open by a process: left alone; the other one is moved, its bytes kept.
        let mut held = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec sleep 30 < '{}'", branch_lock.display()))
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while !open_files(&facts.toplevel).0.contains(&{
            let m = fs::metadata(&branch_lock).unwrap();
            (m.dev(), m.ino())
        }) && t.elapsed() < std::time::Duration::from_secs(5)
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let later = SystemTime::now() + std::time::Duration::from_secs(1);
        let moved = clear(&facts, later);
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].from, index_lock);
        assert!(!index_lock.exists());
        assert_eq!(fs::read_to_string(&moved[0].to).unwrap(), "half an index");
        assert!(branch_lock.exists());
        let _ = held.kill();
        let _ = held.wait();
        assert_eq!(clear(&facts, later).len(), 1);
        assert!(!branch_lock.exists());
        // A git working in the work tree (here a `sleep` named git, as `git commit` waits
        // for its editor): nothing is moved.
        fs::write(&index_lock, "").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        let bin = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/bin/sleep", bin.path().join("git")).unwrap();
        let mut editing = std::process::Command::new(bin.path().join("git"))
            .arg("30")
            .current_dir(d.path())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while !open_files(&facts.toplevel).1 && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(clear(&facts, later).is_empty());
        assert!(index_lock.exists());
        let _ = editing.kill();
        let _ = editing.wait();
        assert_eq!(clear(&facts, later).len(), 1);
        // Git takes the index lock again.
        fs::write(d.path().join("a"), "2").unwrap();
        commit_all(d.path(), "two");
    }

    #[test]
    fn a_ref_lock_a_killed_fetch_left_is_moved_aside_at_a_daemons_start() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        fs::write(d.path().join("a"), "1").unwrap();
        commit_all(d.path(), "one");
        let facts = RepoFacts::ask(d.path()).unwrap();
        let dir = facts.common_dir.join("refs/remotes/origin/taskdaemon");
        fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("run-1.lock");
        fs::write(&lock, "").unwrap();
        let other = facts.common_dir.join("refs/heads/user.lock");
        fs::write(&other, "").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(1);
        let moved = clear_daemon_refs(&facts, later);
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].from, lock);
        assert!(!lock.exists() && moved[0].to.exists());
        assert!(
            other.exists(),
            "a user's branch lock is not the daemon's to move"
        );
    }
}
