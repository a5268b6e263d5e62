//! Task worktrees for parallel groups: every git worktree call of the work lists is in
//! [`task_worktree`], so a general worktree module can replace it in one place.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};

/// What to do with a task's worktree.
#[derive(Debug, Clone, Copy)]
pub enum WorktreeOp<'a> {
    /// A detached worktree at `path` checked out at `base` (a stale one there is replaced).
    Add {
        path: &'a Path,
        base: &'a str,
    },
    Remove {
        path: &'a Path,
    },
}

/// Where task worktrees live: `<git-common-dir>/taskdaemon/worklist-worktrees/`.
pub fn worktrees_dir(git: &Git) -> Result<PathBuf, GitError> {
    let common = git
        .call(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .text()?;
    Ok(PathBuf::from(common)
        .join("taskdaemon")
        .join("worklist-worktrees"))
}

/// Create or remove one task worktree of the repository `git` works in.
pub fn task_worktree(git: &Git, op: WorktreeOp<'_>) -> Result<(), GitError> {
    match op {
        WorktreeOp::Add { path, base } => {
            if path.exists() {
                let _ = git
                    .call(&[
                        "worktree".as_ref(),
                        "remove".as_ref(),
                        "--force".as_ref(),
                        path.as_os_str(),
                    ])
                    .output();
                let _ = std::fs::remove_dir_all(path);
            }
            let _ = git.call(&["worktree", "prune"]).output();
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            git.call(&[
                "worktree".as_ref(),
                "add".as_ref(),
                "--detach".as_ref(),
                "--quiet".as_ref(),
                path.as_os_str(),
                base.as_ref(),
            ])
            .text()?;
            Ok(())
        }
        WorktreeOp::Remove { path } => {
            git.call(&[
                "worktree".as_ref(),
                "remove".as_ref(),
                "--force".as_ref(),
                path.as_os_str(),
            ])
            .text()?;
            Ok(())
        }
    }
}
