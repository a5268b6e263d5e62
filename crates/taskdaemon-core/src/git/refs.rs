//! What a process asks of a repository again and again, without asking git again: its
//! facts (one `rev-parse` per directory and process) and HEAD read from the ref files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{Git, GitError};

/// The facts of the repository containing a directory, all from one
/// `git rev-parse --path-format=absolute …`. They do not change while a process runs (a
/// directory does not move between repositories), and a start-up needs them in several
/// places (project, snapshots, process records, `info/exclude`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFacts {
    /// The top of the work tree.
    pub toplevel: PathBuf,
    /// `sha1` or `sha256`.
    pub object_format: String,
    /// This work tree's git directory (a linked worktree's own).
    pub git_dir: PathBuf,
    /// The repository's common git directory.
    pub common_dir: PathBuf,
    /// The index file git uses here.
    pub index: PathBuf,
    /// The `info/exclude` file.
    pub info_exclude: PathBuf,
    /// Read from the repository's own files in a plain shape, refs in files (not
    /// reftable); `false` when git was asked. Only then may a private git directory stand
    /// in for this one (the snapshot scan's, `snapshot/scan.rs`).
    pub plain: bool,
}

impl RepoFacts {
    /// The facts of the repository containing `dir`, read from its files when they say
    /// them plainly ([`discover`](super::discover)) and asked of git otherwise, once per
    /// directory and process. Failures are not remembered.
    pub fn of(dir: &Path) -> Result<Arc<RepoFacts>, GitError> {
        type Known = Mutex<HashMap<PathBuf, Arc<RepoFacts>>>;
        static KNOWN: OnceLock<Known> = OnceLock::new();
        let known = KNOWN.get_or_init(Known::default);
        if let Some(f) = known.lock().ok().and_then(|m| m.get(dir).cloned())
            && f.still_current()
        {
            return f.unless_redirected();
        }
        let f = match super::discover::discover(dir) {
            Some(f) => Arc::new(f),
            None => Arc::new(Self::ask(dir)?),
        };
        let f = f.unless_redirected()?;
        if let Ok(mut m) = known.lock() {
            m.insert(dir.to_path_buf(), f.clone());
        }
        Ok(f)
    }

    /// Refused: a main checkout whose `.git` directory holds a `commondir`. Git never puts
    /// one there; with it every git command (ours too) reads another directory's config,
    /// hooks and objects. An agent that can write `.git/` may have planted it.
    fn unless_redirected(self: Arc<Self>) -> Result<Arc<RepoFacts>, GitError> {
        let planted = self.toplevel.join(".git").join("commondir");
        match std::fs::symlink_metadata(&planted) {
            Ok(_) if self.toplevel.join(".git").is_dir() => Err(GitError::Redirected(planted)),
            _ => Ok(self),
        }
    }

    /// A linked worktree removed and added again at the same path may get another
    /// administrative directory (`.git/worktrees/NAME1`): its `.git` file says which.
    fn still_current(&self) -> bool {
        if self.git_dir == self.common_dir {
            return true;
        }
        match std::fs::read_to_string(self.toplevel.join(".git")) {
            Ok(text) => text.trim_end().strip_prefix("gitdir: ").is_some_and(|d| {
                // Absolute, or relative to the work tree (`worktree.useRelativePaths`).
                Path::new(d) == self.git_dir
                    || self.toplevel.join(d).canonicalize().ok() == self.git_dir.canonicalize().ok()
            }),
            Err(_) => false,
        }
    }

    pub(super) fn ask(dir: &Path) -> Result<RepoFacts, GitError> {
        // A plain wrapper: the caller's `-c`/environment (a private index) must not leak
        // into facts shared by the whole process.
        let git = Git::new(dir);
        let out = git.output(&[
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--show-object-format",
            "--git-dir",
            "--git-common-dir",
            "--git-path",
            "index",
            "--git-path",
            "info/exclude",
        ])?;
        if !out.status.success() {
            return Err(GitError::NotARepo(dir.to_path_buf()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let mut next = || lines.next().filter(|l| !l.is_empty()).map(str::to_string);
        match (next(), next(), next(), next(), next(), next()) {
            (Some(top), Some(format), Some(git_dir), Some(common), Some(index), Some(exclude)) => {
                Ok(RepoFacts {
                    toplevel: top.into(),
                    object_format: format,
                    git_dir: git_dir.into(),
                    common_dir: common.into(),
                    index: index.into(),
                    info_exclude: exclude.into(),
                    plain: false,
                })
            }
            _ => Err(GitError::Failed {
                args: "rev-parse --show-toplevel --git-dir …".into(),
                dir: dir.to_path_buf(),
                stderr: format!("unexpected output: {text:?}"),
            }),
        }
    }
}

/// HEAD from the ref files, when they say it plainly: `Some(Some(id))` for a detached id
/// or a branch with a loose ref or a `packed-refs` line, `Some(None)` for a branch that
/// has neither (unborn). `None` (ask git) for anything else: a reftable repository, a
/// symbolic ref to a symbolic ref, a name outside `refs/heads/`, unreadable files, text
/// that is not an object id.
pub(crate) fn head(f: &RepoFacts) -> Option<Option<String>> {
    match head_file(f)? {
        Head::Detached(id) => Some(Some(id)),
        Head::Branch(branch) => branch_id(f, &branch),
    }
}

/// The branch HEAD names (`Some(None)`: detached), from the HEAD file; `None`: ask git.
pub(crate) fn head_branch(f: &RepoFacts) -> Option<Option<String>> {
    match head_file(f)? {
        Head::Detached(_) => Some(None),
        // Its ref must be plain too (not a symbolic ref git would follow).
        Head::Branch(b) => branch_id(f, &b).map(|_| Some(b)),
    }
}

enum Head {
    Detached(String),
    Branch(String),
}

fn head_file(f: &RepoFacts) -> Option<Head> {
    if f.common_dir.join("reftable").exists() {
        return None;
    }
    let text = std::fs::read_to_string(f.git_dir.join("HEAD")).ok()?;
    let text = text.trim_end_matches(['\n', '\r']);
    let Some(name) = text.strip_prefix("ref: ") else {
        return object_id(text, f).map(Head::Detached);
    };
    let branch = name.strip_prefix("refs/heads/")?;
    plain_branch(branch).then(|| Head::Branch(branch.to_string()))
}

/// A branch name whose ref file path is just its name (git's own checks aside): no
/// empty, `.` or `..` component, not reftable's placeholder.
fn plain_branch(branch: &str) -> bool {
    branch != ".invalid"
        && !branch.is_empty()
        && branch
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.ends_with(".lock"))
}

/// The id of branch `branch` from its loose ref or `packed-refs` line; `Some(None)`: no
/// such branch; `None`: ask git.
pub(crate) fn branch_id(f: &RepoFacts, branch: &str) -> Option<Option<String>> {
    if !plain_branch(branch) || f.common_dir.join("reftable").exists() {
        return None;
    }
    let name = format!("refs/heads/{branch}");
    match std::fs::read_to_string(f.common_dir.join(&name)) {
        Ok(id) => return object_id(id.trim_end_matches(['\n', '\r']), f).map(Some),
        // A directory of that name (refs/heads/a while HEAD names refs/heads/a/b…) or
        // anything unusual: git knows.
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return None,
        Err(_) => {}
    }
    match std::fs::read_to_string(f.common_dir.join("packed-refs")) {
        Ok(packed) => packed_ref(&packed, &name, f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
        Err(_) => None,
    }
}

/// Whether `packed-refs` has a line for the full ref `name`; `None` when it cannot be
/// read (but exists).
pub(crate) fn packed_has(f: &RepoFacts, name: &str) -> Option<bool> {
    match std::fs::read_to_string(f.common_dir.join("packed-refs")) {
        Ok(packed) => Some(packed.lines().any(|l| {
            !l.starts_with('#')
                && !l.starts_with('^')
                && l.split_once(' ').is_some_and(|(_, n)| n == name)
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// The id `name` has in a `packed-refs` text: `Some(None)` when it is not there.
fn packed_ref(packed: &str, name: &str, f: &RepoFacts) -> Option<Option<String>> {
    for line in packed.lines() {
        if line.starts_with('#') || line.starts_with('^') {
            continue;
        }
        if let Some((id, n)) = line.split_once(' ')
            && n == name
        {
            return object_id(id, f).map(Some);
        }
    }
    Some(None)
}

/// `text` when it is a full object id of the repository's format (lowercase hex).
fn object_id(text: &str, f: &RepoFacts) -> Option<String> {
    let len = if f.object_format == "sha256" { 64 } else { 40 };
    (text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{commit_all, git, init};

    /// What git says HEAD is (`None` on an unborn branch).
    fn git_head(dir: &Path) -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["rev-parse", "-q", "--verify", "HEAD^{commit}"])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !id.is_empty()).then_some(id)
    }

    /// The ref files' answer, which must be git's whenever it is given.
    fn from_files(dir: &Path) -> Option<Option<String>> {
        let f = RepoFacts::ask(dir).unwrap();
        let h = head(&f);
        if let Some(h) = &h {
            assert_eq!(h, &git_head(dir), "{}", dir.display());
        }
        // The branch and whether it exists, as git says them.
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["symbolic-ref", "--quiet", "--short", "HEAD"])
            .output()
            .unwrap();
        let branch = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let branch = out.status.success().then_some(branch);
        assert_eq!(Git::new(dir).current_branch().unwrap(), branch);
        for name in ["main", "side", "fresh", "deep/er/name", "deep", "nope"] {
            let known = std::process::Command::new("git")
                .arg("-C")
                .arg(dir)
                .args([
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("refs/heads/{name}"),
                ])
                .output()
                .unwrap()
                .status
                .success();
            assert_eq!(Git::new(dir).branch_exists(name).unwrap(), known, "{name}");
        }
        h
    }

    #[test]
    fn head_from_files_matches_git_in_every_shape() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("r");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        assert_eq!(from_files(&repo), Some(None), "unborn");
        std::fs::write(repo.join("a"), "1").unwrap();
        commit_all(&repo, "one");
        assert!(matches!(from_files(&repo), Some(Some(_))), "loose ref");
        git(&repo, &["pack-refs", "--all"]);
        assert!(!repo.join(".git/refs/heads/main").exists());
        assert!(matches!(from_files(&repo), Some(Some(_))), "packed");
        std::fs::write(repo.join("a"), "2").unwrap();
        commit_all(&repo, "two");
        assert!(
            matches!(from_files(&repo), Some(Some(_))),
            "loose over packed"
        );
        git(&repo, &["checkout", "-q", "--orphan", "fresh"]);
        assert_eq!(from_files(&repo), Some(None), "unborn with packed-refs");
        git(&repo, &["checkout", "-q", "-f", "main"]);
        git(&repo, &["checkout", "-q", "--detach", "HEAD~1"]);
        assert!(matches!(from_files(&repo), Some(Some(_))), "detached");
        git(&repo, &["checkout", "-q", "-b", "deep/er/name"]);
        assert!(matches!(from_files(&repo), Some(Some(_))), "nested name");
        // A linked worktree: HEAD in its own git dir, the branch in the common one.
        let linked = d.path().join("linked");
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "side",
                linked.to_str().unwrap(),
            ],
        );
        assert!(
            matches!(from_files(&linked), Some(Some(_))),
            "linked worktree"
        );
    }

    #[test]
    fn anything_unusual_is_left_to_git() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "1").unwrap();
        commit_all(d.path(), "one");
        // A symbolic ref to a symbolic ref.
        git(
            d.path(),
            &["symbolic-ref", "refs/heads/alias", "refs/heads/main"],
        );
        git(d.path(), &["symbolic-ref", "HEAD", "refs/heads/alias"]);
        assert_eq!(from_files(d.path()), None);
        // A ref file that is not an id (a hand edit): git decides.
        git(d.path(), &["symbolic-ref", "HEAD", "refs/heads/main"]);
        let main = d.path().join(".git/refs/heads/main");
        std::fs::write(&main, "not an id\n").unwrap();
        assert_eq!(from_files(d.path()), None);
        // Whatever the answer, `Git::head` agrees with git.
        assert_eq!(Git::new(d.path()).head().unwrap(), git_head(d.path()));
    }

    #[test]
    fn sha256_and_reftable_repositories() {
        let d = tempfile::tempdir().unwrap();
        let sha256 = d.path().join("s");
        git(d.path(), &["init", "-q", "--object-format=sha256", "s"]);
        std::fs::write(sha256.join("a"), "1").unwrap();
        git(&sha256, &["add", "a"]);
        git(
            &sha256,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "commit",
                "-qm",
                "x",
            ],
        );
        let h = from_files(&sha256);
        assert_eq!(h.flatten().map(|id| id.len()), Some(64));
        // reftable needs git 2.45; older gits refuse the option and there is nothing to test.
        let ok = std::process::Command::new("git")
            .args(["init", "-q", "--ref-format=reftable"])
            .arg(d.path().join("t"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        if ok {
            assert_eq!(from_files(&d.path().join("t")), None);
            assert_eq!(Git::new(d.path().join("t")).head().unwrap(), None);
        }
    }

    #[test]
    fn a_worktree_added_again_with_another_admin_dir_is_asked_again() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let repo = root.join("r");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        std::fs::write(repo.join("a"), "1").unwrap();
        commit_all(&repo, "one");
        let (first, other) = (root.join("a/x"), root.join("b/x"));
        let add = |p: &Path, b: &str| {
            git(
                &repo,
                &["worktree", "add", "-q", "-b", b, p.to_str().unwrap()],
            );
        };
        add(&first, "one");
        let before = RepoFacts::of(&first).unwrap();
        assert!(before.git_dir.ends_with("worktrees/x"), "{before:?}");
        git(&repo, &["worktree", "remove", first.to_str().unwrap()]);
        add(&other, "two");
        add(&first, "three");
        let after = RepoFacts::of(&first).unwrap();
        assert_ne!(after.git_dir, before.git_dir);
        assert_eq!(
            Git::new(&first).current_branch().unwrap().as_deref(),
            Some("three")
        );
    }

    #[test]
    fn facts_are_asked_once_and_fail_outside_a_work_tree() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        let a = RepoFacts::of(d.path()).unwrap();
        let b = RepoFacts::of(d.path()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.git_dir, a.common_dir);
        assert!(a.info_exclude.ends_with("info/exclude"));
        assert!(a.index.ends_with("index"));
        let bare = tempfile::tempdir().unwrap();
        git(bare.path(), &["init", "-q", "--bare"]);
        assert!(RepoFacts::of(bare.path()).is_err());
        // The common dir is still known there.
        assert!(Git::new(bare.path()).common_dir().is_ok());
    }
}
