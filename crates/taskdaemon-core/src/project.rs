//! The one project resolver: which directory's `.taskdaemon/` (record store, loop types,
//! worktrees) a command in `dir` works on. Every command and the daemon ask here, so
//! `plan new` and `submit` from a linked worktree open the same store.
//!
//! The nearest directory from `dir` up to the top of its work tree that has a
//! `.taskdaemon/` (else that top), taken in the repository's main work tree: a linked
//! worktree (the daemon's, or one the user made) is a checkout of the same project, and its
//! store is the main work tree's.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};

/// The project of the work directory `dir` (absolute, canonical when it exists).
pub fn project_dir(dir: &Path) -> Result<PathBuf, GitError> {
    let git = Git::new(dir);
    let top = canonical(git.toplevel()?);
    let dir = canonical(dir.to_path_buf());
    let rel = nearest_marked(&dir, &top)
        .strip_prefix(&top)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let main = main_worktree(&git)?.unwrap_or_else(|| top.clone());
    let in_main = main.join(&rel);
    Ok(if in_main.is_dir() {
        canonical(in_main)
    } else {
        top.join(rel)
    })
}

/// The repository's main work tree: the parent of the common git dir when that is a
/// `.git` directory; `None` for a bare or unusual layout.
pub fn main_worktree(git: &Git) -> Result<Option<PathBuf>, GitError> {
    let common = git.common_dir()?;
    Ok(match common.file_name() {
        Some(n) if n == ".git" => common.parent().map(|p| canonical(p.to_path_buf())),
        _ => None,
    })
}

/// The nearest directory from `dir` up to `top` with a `.taskdaemon/`, else `top`.
fn nearest_marked(dir: &Path, top: &Path) -> PathBuf {
    let mut at = dir;
    loop {
        if at.join(".taskdaemon").is_dir() {
            return at.to_path_buf();
        }
        match at.parent() {
            Some(p) if at != top && at.starts_with(top) => at = p,
            _ => return top.to_path_buf(),
        }
    }
}

fn canonical(p: PathBuf) -> PathBuf {
    p.canonicalize().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn a_linked_worktree_and_a_subdirectory_resolve_to_the_main_project() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("main");
        std::fs::create_dir_all(main.join("app/.taskdaemon")).unwrap();
        std::fs::create_dir_all(main.join(".taskdaemon")).unwrap();
        std::fs::write(main.join("app/.taskdaemon/keep"), "").unwrap();
        std::fs::write(main.join(".taskdaemon/keep"), "").unwrap();
        git(&main, &["init", "-q", "-b", "main"]);
        git(&main, &["add", "-A"]);
        git(&main, &["commit", "-qm", "init"]);
        let linked = d.path().join("linked");
        git(&main, &["worktree", "add", "-q", linked.to_str().unwrap()]);
        let main = main.canonicalize().unwrap();

        assert_eq!(project_dir(&main).unwrap(), main);
        assert_eq!(project_dir(&linked).unwrap(), main);
        assert_eq!(project_dir(&main.join("app")).unwrap(), main.join("app"));
        assert_eq!(project_dir(&linked.join("app")).unwrap(), main.join("app"));
    }
}
