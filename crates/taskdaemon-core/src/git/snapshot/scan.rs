//! The git directory a save's `git status` runs in (issue 16).
//!
//! `git status` compares the index with HEAD as well as with the work tree. A save reads
//! only the work-tree column, and the private index it scans holds the last snapshot's
//! tree, not the user's HEAD's: against the user's HEAD that comparison walks every tree
//! that differs (a third of the status at 10k files). So the status runs in
//! `<git-dir>/taskdaemon/scan/`, a git directory shaped like a linked worktree's: its
//! `commondir` names the repository's common directory (objects, refs, config,
//! `info/exclude` are the repository's own) and its `HEAD` is the last snapshot's commit,
//! whose tree the private index's cache-tree matches nearly everywhere. `HEAD` is written
//! after each save but a first one, which seeds the private index and scans against the
//! user's HEAD anyway, and after a rollback (the snapshot it restored, whose work tree the
//! private index then holds). The directory is nobody's worktree (`git worktree` lists only
//! `worktrees/`), it holds no ref, and nothing but that status reads it.
//!
//! Used only for a repository read plainly from its files ([`RepoFacts::plain`]: no
//! discovery variables, no `core.worktree`, no extension but the object format, refs in
//! files), and only while its `HEAD` names a commit that is still stored; anything else,
//! or a status that fails there, is the plain status as before.
//!
//! [`RepoFacts::plain`]: crate::git::refs::RepoFacts::plain

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Snapshots;

impl Snapshots {
    fn scan_dir(&self) -> PathBuf {
        self.private_dir().join("scan")
    }

    /// The scan's git directory, when it can stand in for this one: a plain repository,
    /// and a `HEAD` naming a stored object (the commit of the last save).
    pub(super) fn scan_git_dir(&self) -> Option<PathBuf> {
        if !self.repo.plain {
            return None;
        }
        let dir = self.scan_dir();
        if !is_real_dir(&dir) {
            return None;
        }
        let head = fs::read_to_string(dir.join("HEAD")).ok()?;
        let head = head.strip_suffix('\n')?;
        let common = fs::read(dir.join("commondir")).ok()?;
        let names_ours =
            common.strip_suffix(b"\n") == Some(self.common_dir.as_os_str().as_encoded_bytes());
        (names_ours && self.is_stored(head)).then_some(dir)
    }

    /// Point the scan's `HEAD` at `commit` (a snapshot commit just made, whose tree is what
    /// the private index holds). Best effort: a scan directory that cannot be written is
    /// simply not used. Written in place (no new inode per save); a torn `HEAD` reads as
    /// no scan directory.
    pub(super) fn remember_scan_head(&self, commit: &str) {
        if !self.repo.plain {
            return;
        }
        let dir = self.scan_dir();
        if crate::fsutil::create_dir_confined(&dir).is_err() || !is_real_dir(&dir) {
            return;
        }
        let mut common = self.common_dir.as_os_str().as_encoded_bytes().to_vec();
        common.push(b'\n');
        if fs::read(dir.join("commondir")).ok().as_deref() != Some(&common)
            && write_in_place(&dir.join("commondir"), &common).is_err()
        {
            return;
        }
        let _ = write_in_place(&dir.join("HEAD"), format!("{commit}\n").as_bytes());
    }

    /// Forget the scan's `HEAD` (its status failed): the next saves scan plainly until a
    /// save points it at a new snapshot.
    pub(super) fn forget_scan_head(&self) {
        let _ = fs::remove_file(self.scan_dir().join("HEAD"));
    }
}

/// A directory, not a symbolic link to one (which could lead out of the repository).
fn is_real_dir(dir: &Path) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// Write `bytes` as the whole of `path`, in place (no new inode), never through a
/// symbolic link nor out of the work tree.
fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let f = crate::fsutil::open_lock_file(path)?;
    f.write_all_at(bytes, 0)?;
    f.set_len(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::Snapshots;
    use crate::git::testrepo::{commit_all, git, init};
    use std::fs;
    use std::path::Path;

    fn save(s: &Snapshots, n: i64) -> String {
        super::super::manual_save(s, n * 1_000).commit
    }

    fn saved_paths(dir: &Path, commit: &str) -> String {
        git(dir, &["ls-tree", "-r", "--name-only", commit]).replace('\n', " ")
    }

    #[test]
    fn a_save_scans_against_the_last_snapshot_and_finds_what_a_plain_status_finds() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        init(repo);
        fs::write(repo.join("a"), "1").unwrap();
        fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
        commit_all(repo, "one");
        fs::write(repo.join(".git/info/exclude"), "*.cfg\n").unwrap();
        let s = Snapshots::open(repo).unwrap();
        let scan = repo.join(".git/taskdaemon/scan");

        // The first save (the private index seeded) makes no scan directory: it should
        // cost little more than a `git status`. The second one does.
        save(&s, 1);
        assert!(!scan.exists());
        fs::write(repo.join("z"), "z").unwrap();
        let made = save(&s, 2);
        fs::remove_file(repo.join("z")).unwrap();
        assert_eq!(
            fs::read_to_string(scan.join("HEAD")).unwrap(),
            format!("{made}\n")
        );
        let common = s.common_dir.display().to_string() + "\n";
        assert_eq!(fs::read_to_string(scan.join("commondir")).unwrap(), common);
        assert!(s.scan_git_dir().is_some());

        // The next save's status runs there: ignore rules are the repository's own.
        fs::write(repo.join("a"), "2").unwrap();
        fs::write(repo.join("b.txt"), "new").unwrap();
        fs::write(repo.join("x.log"), "ignored").unwrap();
        fs::write(repo.join("y.cfg"), "excluded").unwrap();
        let second = save(&s, 3);
        assert_eq!(saved_paths(repo, &second), ".gitignore a b.txt");
        assert_eq!(git(repo, &["show", &format!("{second}:a")]), "2");
        assert_eq!(
            fs::read_to_string(scan.join("HEAD")).unwrap(),
            format!("{second}\n")
        );
        assert_eq!(
            git(repo, &["status", "--porcelain"]),
            " M a\n?? b.txt",
            "the user's index and HEAD are untouched"
        );

        // A HEAD naming nothing stored: not used, the save scans plainly.
        fs::write(scan.join("HEAD"), format!("{}\n", "0".repeat(40))).unwrap();
        assert!(s.scan_git_dir().is_none());
        fs::write(repo.join("c.txt"), "c").unwrap();
        let third = save(&s, 4);
        assert_eq!(saved_paths(repo, &third), ".gitignore a b.txt c.txt");
        assert_eq!(
            fs::read_to_string(scan.join("HEAD")).unwrap(),
            format!("{third}\n")
        );

        // A HEAD naming a stored object that is no commit: the status there fails, the
        // save scans plainly and the HEAD is forgotten until the save points it anew.
        let blob = git(repo, &["rev-parse", &format!("{third}:c.txt")]);
        fs::write(scan.join("HEAD"), format!("{blob}\n")).unwrap();
        assert!(s.scan_git_dir().is_some());
        let there = std::process::Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(repo)
            .env("GIT_DIR", &scan)
            .env("GIT_WORK_TREE", repo)
            .env(
                "GIT_INDEX_FILE",
                repo.join(".git/taskdaemon/snapshot.index"),
            )
            .env("GIT_OPTIONAL_LOCKS", "0")
            .output()
            .unwrap();
        assert!(!there.status.success(), "git refuses a HEAD that is a blob");
        fs::remove_file(repo.join("b.txt")).unwrap();
        let fourth = save(&s, 5);
        assert_eq!(saved_paths(repo, &fourth), ".gitignore a c.txt");
        assert_eq!(
            fs::read_to_string(scan.join("HEAD")).unwrap(),
            format!("{fourth}\n")
        );

        // A scan directory naming another common directory is not used.
        fs::write(scan.join("commondir"), "/elsewhere\n").unwrap();
        assert!(s.scan_git_dir().is_none());

        // Nor one that is a link (it could lead out of the repository): a save neither
        // scans there nor writes through it.
        let outside = tempfile::tempdir().unwrap();
        fs::remove_dir_all(&scan).unwrap();
        std::os::unix::fs::symlink(outside.path(), &scan).unwrap();
        fs::write(repo.join("d.txt"), "d").unwrap();
        let fifth = save(&s, 6);
        assert!(saved_paths(repo, &fifth).contains("d.txt"));
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(s.scan_git_dir().is_none());
    }

    #[test]
    fn after_a_rollback_the_scan_compares_with_the_snapshot_restored() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        init(repo);
        fs::write(repo.join("a"), "1").unwrap();
        commit_all(repo, "one");
        let s = Snapshots::open(repo).unwrap();
        save(&s, 1);
        fs::write(repo.join("a"), "2").unwrap();
        let two = super::super::manual_save(&s, 2_000);
        fs::write(repo.join("a"), "3").unwrap();
        fs::write(repo.join("b"), "new").unwrap();
        save(&s, 3);

        // The private index now holds `two`'s work tree, and so does the scan's HEAD.
        s.rollback(&two.tag, 4_000).unwrap();
        let scan = repo.join(".git/taskdaemon/scan");
        assert_eq!(
            fs::read_to_string(scan.join("HEAD")).unwrap(),
            format!("{}\n", two.commit)
        );
        assert_eq!(fs::read_to_string(repo.join("a")).unwrap(), "2");
        assert!(!repo.join("b").exists());

        // The next save finds what changed since the rollback, and only that.
        fs::write(repo.join("a"), "5").unwrap();
        fs::write(repo.join("c"), "c").unwrap();
        let next = save(&s, 5);
        assert_eq!(saved_paths(repo, &next), "a c");
        assert_eq!(git(repo, &["show", &format!("{next}:a")]), "5");
    }

    #[test]
    fn a_reftable_repository_scans_plainly() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("t");
        // reftable needs git 2.45; older gits refuse the option and there is nothing to test.
        let ok = std::process::Command::new("git")
            .args(["init", "-q", "-b", "main", "--ref-format=reftable"])
            .arg(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        if !ok {
            return;
        }
        git(&repo, &["config", "user.name", "t"]);
        git(&repo, &["config", "user.email", "t@example.com"]);
        fs::write(repo.join("a"), "1").unwrap();
        commit_all(&repo, "one");
        let s = Snapshots::open(&repo).unwrap();
        save(&s, 1);
        for n in 2..4 {
            fs::write(repo.join("a"), n.to_string()).unwrap();
            let saved = save(&s, n);
            assert_eq!(git(&repo, &["show", &format!("{saved}:a")]), n.to_string());
        }
        assert!(!repo.join(".git/taskdaemon/scan").exists());
    }
}
