//! The sequence number of the next snapshot: the order of saving, across every work tree of
//! the repository (their tags share one namespace). The last number taken is kept in
//! `<common git dir>/taskdaemon/snapshot.seq` and advanced under the `flock` of
//! `snapshot.seq.lock`, so a save costs the same beside ten snapshots or ten thousand (it
//! listed every tag before: 14 → 24 ms per save from 20 to 1,020 tags), and two work trees
//! saving at once never take the same number (two listings could).
//!
//! The file is written over in place (a number only grows, so the new one covers the old;
//! one `pwrite`, no file made and freed at each save), or replaced when it is missing or
//! longer, and on disk before the tag that takes the number is made (it is
//! synced while the work tree is captured, for a plain save, or while the snapshot's
//! commit is written), so no tag outlives a crash with a number the file has not reached.
//! A plain save takes its number before its capture and releases the lock meanwhile, so
//! two work trees' tags may be made in another order than their numbers, and a save that
//! fails leaves a gap; its tag is still made under the lock.
//!
//! A missing or unreadable file (a repository's first save since, a file a person edited,
//! one a crash left without its contents) is made again from the tags' own numbers. Not
//! seen: saves by a taskdaemon older than this counter (a daemon not restarted after an
//! upgrade) number from a listing and leave the file behind, so the saves that follow here
//! may number below theirs until the file is removed (`.git/taskdaemon/snapshot.seq`);
//! only the order of listing depends on it.

use std::io::Read as _;
use std::path::PathBuf;

use super::locks::HeldLock;
use super::{SnapshotError, Snapshots, io};

/// The number file as [`Snapshots::take_seq`] left it: in place, maybe not on disk yet.
#[derive(Debug)]
pub(super) struct SeqUnsynced {
    file: crate::fsutil::Unsynced,
    path: PathBuf,
}

impl SeqUnsynced {
    /// On disk (synced off the save's path: ~1.4 ms of a save here, up to 4 ms on a
    /// journaled file system).
    pub(super) fn sync(self) -> Result<(), SnapshotError> {
        self.file.sync().map_err(io(&self.path))
    }
}

impl Snapshots {
    fn seq_path(&self) -> PathBuf {
        self.common_dir.join("taskdaemon").join("snapshot.seq")
    }

    /// The lock under which a snapshot's number is taken and its tag made, across the
    /// work trees of the repository (held until dropped; it says the holder's pid). Taken
    /// after the snapshot lock, never before it. Another holder is waited for at most
    /// the snapshots' lock wait ([`SnapshotError::LockWait`]): it holds it a few
    /// milliseconds, unless it is stopped or hung.
    pub(super) fn seq_lock(&self) -> Result<HeldLock, SnapshotError> {
        let path = self.seq_path().with_extension("seq.lock");
        let lock = crate::fsutil::open_lock_file(&path).map_err(io(&path))?;
        HeldLock::take(lock, &path, &self.waits)
    }

    /// Take the next sequence number, holding [`Snapshots::seq_lock`] (`_held`): above
    /// the last one taken and above `at_least` (the highest of a listing at hand). The
    /// file says it when this returns; [`SeqUnsynced::sync`] puts it on disk, which must
    /// have returned before a tag takes the number.
    pub(super) fn take_seq(
        &self,
        at_least: u64,
        _held: &HeldLock,
    ) -> Result<(u64, SeqUnsynced), SnapshotError> {
        let path = self.seq_path();
        let last = match self.last_seq() {
            Some(n) => n,
            None => self.tags()?.0.iter().map(|s| s.seq).max().unwrap_or(0),
        };
        let next = last.max(at_least).saturating_add(1);
        let text = format!("{next}\n");
        // Written in place while it is no longer than the new number (numbers only grow):
        // no file made and freed at each save.
        let file = match crate::fsutil::overwrite_short_sync_later(&path, text.as_bytes()) {
            Ok(Some(f)) => f,
            Ok(None) => {
                crate::fsutil::write_atomic_sync_later(&path, text.as_bytes()).map_err(io(&path))?
            }
            Err(e) => return Err(io(&path)(e)),
        };
        Ok((next, SeqUnsynced { file, path }))
    }

    /// The number in `snapshot.seq`; `None` when it is missing or says anything else.
    fn last_seq(&self) -> Option<u64> {
        let path = self.seq_path();
        let mut text = String::new();
        crate::fsutil::open_read(&path)
            .ok()?
            .take(64)
            .read_to_string(&mut text)
            .ok()?;
        text.trim().parse().ok()
    }

    /// Whether tag `name` exists as a ref file (a packed one is found by `git tag`
    /// refusing it).
    pub(super) fn tag_file_exists(&self, name: &str) -> bool {
        self.common_dir
            .join("refs/tags")
            .join(name)
            .symlink_metadata()
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::manual_request;
    use super::*;
    use crate::git::testrepo::{commit_all, init};

    fn save(s: &Snapshots, dir: &std::path::Path, i: i64) -> super::super::Snapshot {
        std::fs::write(dir.join("a"), format!("{i}")).unwrap();
        s.save(&manual_request(1_000 * i)).unwrap()
    }

    /// A repository with one commit.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "0").unwrap();
        commit_all(d.path(), "one");
        d
    }

    /// A linked work tree of the repository at `top`.
    fn linked(top: &std::path::Path) -> std::path::PathBuf {
        let wt = top.join("wt");
        crate::git::testrepo::git(top, &["worktree", "add", "-q", wt.to_str().unwrap()]);
        wt
    }

    #[test]
    fn numbers_follow_the_saves_across_work_trees_and_survive_a_lost_or_edited_file() {
        let d = repo();
        let s = Snapshots::open(d.path()).unwrap();
        assert_eq!(save(&s, d.path(), 1).seq, 1);
        assert_eq!(save(&s, d.path(), 2).seq, 2);
        assert_eq!(s.last_seq(), Some(2));

        // A linked work tree takes the next number of the same repository.
        let wt = linked(d.path());
        let other = Snapshots::open(&wt).unwrap();
        assert_eq!(save(&other, &wt, 3).seq, 3);
        assert_eq!(save(&s, d.path(), 4).seq, 4);

        // Gone, or not a number: made again from the tags.
        std::fs::remove_file(s.seq_path()).unwrap();
        assert_eq!(save(&s, d.path(), 5).seq, 5);
        std::fs::write(s.seq_path(), "not a number").unwrap();
        assert_eq!(save(&s, d.path(), 6).seq, 6);
        // Empty, as a crash of the machine may leave it before its sync: the same.
        std::fs::write(s.seq_path(), "").unwrap();
        assert_eq!(save(&s, d.path(), 7).seq, 7);
        // Never below a listing at hand, and never past the largest number; the file says
        // the number taken before it is synced.
        let held = s.seq_lock().unwrap();
        let (n, unsynced) = s.take_seq(40, &held).unwrap();
        assert_eq!((n, s.last_seq()), (41, Some(41)));
        unsynced.sync().unwrap();
        std::fs::write(s.seq_path(), format!("{}", u64::MAX)).unwrap();
        assert_eq!(s.take_seq(0, &held).unwrap().0, u64::MAX);
    }

    #[test]
    fn two_work_trees_saving_at_once_never_take_one_number() {
        let d = repo();
        let wt = linked(d.path());
        let dirs = [d.path().to_path_buf(), wt];
        let seqs: Vec<u64> = std::thread::scope(|sc| {
            let saving: Vec<_> = dirs
                .iter()
                .map(|dir| {
                    sc.spawn(move || {
                        let s = Snapshots::open(dir).unwrap();
                        (1..=12).map(|i| save(&s, dir, i).seq).collect::<Vec<_>>()
                    })
                })
                .collect();
            saving.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut distinct = seqs.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct, (1..=24).collect::<Vec<u64>>(), "{seqs:?}");
    }

    #[test]
    fn a_tag_lock_of_a_save_under_way_in_another_work_tree_is_left_alone() {
        let d = repo();
        let wt = linked(d.path());
        let here = Snapshots::open(d.path()).unwrap();
        let there = Snapshots::open(&wt).unwrap();
        save(&here, d.path(), 1);
        // A save here is making its tag: the number lock held, git's lock file made.
        let numbers = here.seq_lock().unwrap();
        let tag_lock = d.path().join(".git/refs/tags/manual-9.lock");
        std::fs::write(&tag_lock, "").unwrap();
        std::thread::scope(|sc| {
            let recovering = sc.spawn(|| there.recover().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(tag_lock.exists(), "removed while its save was under way");
            assert!(!recovering.is_finished());
            // Git renames it into the tag; the save ends.
            std::fs::remove_file(&tag_lock).unwrap();
            drop(numbers);
            assert!(recovering.join().unwrap().is_empty());
        });
        // One left by a killed git, with no save under way: removed, and said so.
        std::fs::write(&tag_lock, "").unwrap();
        let notices = there.recover().unwrap();
        assert!(!tag_lock.exists());
        assert_eq!(notices.len(), 1, "{notices:?}");
    }

    #[test]
    fn a_save_waits_for_the_number_lock_but_reports_a_holder_that_does_not_let_go() {
        use std::time::Duration;
        let d = repo();
        let mut s = Snapshots::open(d.path()).unwrap();
        save(&s, d.path(), 1);
        s.waits.limit = Duration::from_millis(300);
        // Another loop of this process holds it (another open file: flocks of two opens
        // exclude each other).
        let held = s.seq_lock().unwrap();
        std::fs::write(d.path().join("a"), "kept").unwrap();
        let req = manual_request(2_000);
        let err = s.save(&req).unwrap_err();
        let SnapshotError::LockWait { pid, path, .. } = &err else {
            panic!("{err}");
        };
        let me = std::process::id();
        assert_eq!(*pid, Some(me as i32));
        assert!(path.ends_with("taskdaemon/snapshot.seq.lock"), "{path:?}");
        let text = err.to_string();
        assert!(
            text.contains("300ms")
                && text.contains("another loop of this taskdaemon")
                && text.contains(&format!("ps --ppid {me}")),
            "{text}"
        );
        assert_eq!(s.list().unwrap().len(), 1, "no tag of a failed save");
        drop(held);
        // Let go, it names no holder: a waiter never names an earlier one.
        assert_eq!(
            std::fs::read_to_string(s.seq_path().with_extension("seq.lock"))
                .unwrap()
                .trim(),
            ""
        );

        // Another process holds it: named with what to do.
        let other = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(s.seq_path().with_extension("seq.lock"))
            .unwrap();
        other.lock().unwrap();
        std::fs::write(s.seq_path().with_extension("seq.lock"), "4000000\n").unwrap();
        let text = s.save(&req).unwrap_err().to_string();
        assert!(
            text.contains("another taskdaemon (pid 4000000)")
                && text.contains("kill -CONT 4000000"),
            "{text}"
        );
        // Nonsense in the file names nobody (never `kill 0` or `kill -1`).
        for junk in ["0", "-1", "x"] {
            std::fs::write(s.seq_path().with_extension("seq.lock"), junk).unwrap();
            let text = s.save(&req).unwrap_err().to_string();
            assert!(
                text.contains("fuser -v") && text.contains("kill PID"),
                "{junk}: {text}"
            );
        }
        let held = other;

        // One that lets go while it is waited for: the save goes on, with what changed.
        s.waits.limit = Duration::from_secs(30);
        let snap = std::thread::scope(|sc| {
            let saving = sc.spawn(|| s.save(&req));
            std::thread::sleep(Duration::from_millis(200));
            assert!(!saving.is_finished(), "did not wait for the holder");
            drop(held);
            saving.join().unwrap().unwrap()
        });
        assert_eq!(snap.seq, 2);
        let shown = crate::git::testrepo::git(d.path(), &["show", &format!("{}:a", snap.commit)]);
        assert_eq!(shown.trim(), "kept");
    }

    #[test]
    fn a_number_file_that_is_a_link_is_refused_and_left_alone() {
        let d = repo();
        let s = Snapshots::open(d.path()).unwrap();
        save(&s, d.path(), 1);
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("seq");
        std::fs::write(&target, "7\n").unwrap();
        std::fs::remove_file(s.seq_path()).unwrap();
        std::os::unix::fs::symlink(&target, s.seq_path()).unwrap();
        std::fs::write(d.path().join("a"), "2").unwrap();
        let req = manual_request(2_000);
        let err = s.save(&req).unwrap_err().to_string();
        assert!(
            err.contains("symbolic link") && err.contains("hint"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "7\n");
    }
}
