//! Merging a loop's branch back into its target branch without touching the user's checkout.
//!
//! * Merges are serialized by `<common-git-dir>/taskdaemon/merge.lock`.
//! * A merge commit is made in the dedicated integration worktree `<base>/_integration`
//!   (detached HEAD, reset to the target's tip before every merge; it belongs to taskdaemon,
//!   so resetting it loses nothing). Hooks do not run there and rerere is off, so a merge
//!   is what git's merge machinery alone makes of the two tips.
//! * The target ref moves only by fast-forward or to that merge commit, with
//!   compare-and-swap on its old value (`git update-ref <ref> <new> <old>`). When the target
//!   moved meanwhile, the merge is redone once on the new tip; a second move is an error.
//! * When the target is checked out in any worktree (typically the user's own checkout),
//!   its ref does not move at all, whether that checkout has local changes or not: moving a
//!   checked-out branch would leave that checkout's files and index behind (git would show
//!   the merge reversed as staged changes), and updating its files would be writing in the
//!   user's checkout while they may be editing. The result goes to the integration branch
//!   `taskdaemon/integration/<target>` instead ([`MergeResult::Held`]); the user takes it
//!   with `git merge --ff-only taskdaemon/integration/<target>` in their checkout. Held results
//!   accumulate on that branch: the next merge starts from it while it contains the target.
//! * A conflict changes nothing: the merge is aborted, both branches stay where they were,
//!   and the conflicting paths are returned ([`MergeResult::Conflict`]).

use std::ffi::OsStr;
use std::path::PathBuf;

use serde::Serialize;

use super::worktree::{INTEGRATION, Worktrees, find, short};
use super::{Git, GitError, worktree::WorktreeError};

/// Who makes merge commits when git has no identity configured.
const IDENT_NAME: &str = "taskdaemon";
const IDENT_EMAIL: &str = "taskdaemon@localhost";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum MergeResult {
    /// Target moved (fast-forward or a merge commit made in the integration worktree); new target tip.
    Merged {
        target: String,
        commit: String,
        fast_forward: bool,
    },
    /// Nothing to merge: the branch is already contained in the target.
    UpToDate { commit: String },
    /// The target branch is checked out in a worktree (e.g. the user's checkout): the result
    /// is on `integration_branch`; the target did not move.
    Held {
        integration_branch: String,
        commit: String,
        checked_out_at: PathBuf,
    },
    /// Conflict: nothing changed, both branches intact; the files in conflict.
    Conflict { files: Vec<String> },
}

#[derive(Debug, thiserror::Error)]
pub enum IntegrateError {
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(
        "cannot merge: branch {0} does not exist\n  hint: `git branch --list` shows the branches; the loop's branch is made when its worktree is"
    )]
    NoBranch(String),
    #[error(
        "cannot merge into {0}: no such branch\n  hint: create it first (`git branch {0} <commit>`), or merge into an existing branch"
    )]
    NoTarget(String),
    #[error(
        "cannot hold the merge on {branch}: it is checked out in {at}\n  hint: switch that worktree to another branch (the merge result must be able to move it), then retry"
    )]
    IntegrationCheckedOut { branch: String, at: PathBuf },
    #[error(
        "branch {0} kept moving while taskdaemon merged into it (tried twice)\n  hint: retry when whatever is committing to {0} has finished"
    )]
    TargetKeptMoving(String),
    #[error(
        "the merge in the integration worktree {path} failed: {stderr}\n  hint: nothing changed on any branch; look at `git -C {path} status`, fix the cause and retry"
    )]
    MergeFailed { path: PathBuf, stderr: String },
    #[error(
        "cannot merge {branch} into {target}: its commits add files that look like secrets ({paths})\n  hint: keep the files but take them out of the branch's commits (`git rm --cached FILE`, then rewrite the commits that added them, e.g. `git rebase -i {target}`), then merge again"
    )]
    Secrets {
        branch: String,
        target: String,
        paths: String,
    },
}

/// [`IntegrateError::Secrets`] when the commits of `base..tip` add files that look like
/// secrets (`crate::secrets`): no merge takes them.
pub(crate) fn refuse_secrets(
    git: &Git,
    base: &str,
    tip: &str,
    branch: &str,
    target: &str,
) -> Result<(), IntegrateError> {
    let added = crate::secrets::added_in(git, &[&format!("{base}..{tip}")])?;
    if added.is_empty() {
        return Ok(());
    }
    Err(IntegrateError::Secrets {
        branch: branch.to_string(),
        target: target.to_string(),
        paths: crate::secrets::list(&crate::secrets::paths(&added)),
    })
}

/// The branch merges into `target` are held on while `target` is checked out.
pub fn held_branch(target: &str) -> String {
    format!("taskdaemon/integration/{target}")
}

/// Where new work for `target` starts: the held branch when it exists and contains the
/// target (so work that depends on held merges sees them), else the target itself.
pub fn start_point(worktrees: &Worktrees, target: &str) -> String {
    let held = held_branch(target);
    let git = worktrees.git();
    let has = matches!(git.branch_exists(&held), Ok(true));
    if has && matches!(git.is_ancestor(target, &held), Ok(true)) {
        held
    } else {
        target.to_string()
    }
}

/// Merge `branch` into `target` (branch names); see the module documentation.
pub fn merge_into(
    worktrees: &Worktrees,
    branch: &str,
    target: &str,
    message: &str,
) -> Result<MergeResult, IntegrateError> {
    merge_into_hooked(worktrees, branch, target, message, &mut |_| {})
}

/// [`merge_into`] with a hook called (with the ref about to move) just before each
/// compare-and-swap, for tests of a concurrent move.
pub(crate) fn merge_into_hooked(
    worktrees: &Worktrees,
    branch: &str,
    target: &str,
    message: &str,
    before_cas: &mut dyn FnMut(&str),
) -> Result<MergeResult, IntegrateError> {
    worktrees.check_branch(branch)?;
    worktrees.check_branch(target)?;
    let _lock = worktrees.lock("merge.lock")?;
    let m = Merger {
        wt: worktrees,
        git: worktrees.git(),
    };
    for _ in 0..2 {
        if let Some(r) = m.attempt(branch, target, message, before_cas)? {
            return Ok(r);
        }
    }
    Err(IntegrateError::TargetKeptMoving(target.to_string()))
}

/// What merging `commit` onto `base` in the integration worktree makes (for a merge whose
/// target lives elsewhere, e.g. on a shared remote: see `git::remote`). Serialised by the
/// same `merge.lock` as [`merge_into`].
pub(crate) enum Onto {
    /// `commit` is already contained in `base`.
    UpToDate,
    /// `base` is an ancestor of `commit`: the result is `commit` itself.
    FastForward,
    /// A merge commit.
    Merge(String),
    Conflict(Vec<String>),
}

pub(crate) fn merge_onto(
    worktrees: &Worktrees,
    base: &str,
    commit: &str,
    message: &str,
) -> Result<Onto, IntegrateError> {
    let _lock = worktrees.lock("merge.lock")?;
    let m = Merger {
        wt: worktrees,
        git: worktrees.git(),
    };
    if m.is_ancestor(commit, base)? {
        return Ok(Onto::UpToDate);
    }
    if m.is_ancestor(base, commit)? {
        return Ok(Onto::FastForward);
    }
    Ok(match m.make_merge(base, &[(commit, message)])? {
        Made::Commit(c) => Onto::Merge(c),
        Made::Conflict(files) => Onto::Conflict(files),
    })
}

struct Merger<'a> {
    wt: &'a Worktrees,
    git: &'a Git,
}

/// What a merge in the integration worktree made.
enum Made {
    Commit(String),
    Conflict(Vec<String>),
}

impl Merger<'_> {
    /// One try; `None` when a ref moved under us (compare-and-swap failed).
    fn attempt(
        &self,
        branch: &str,
        target: &str,
        message: &str,
        before_cas: &mut dyn FnMut(&str),
    ) -> Result<Option<MergeResult>, IntegrateError> {
        let b = self
            .wt
            .rev(&format!("refs/heads/{branch}^{{commit}}"))?
            .ok_or_else(|| IntegrateError::NoBranch(branch.to_string()))?;
        let target_ref = format!("refs/heads/{target}");
        let t = self
            .wt
            .rev(&format!("{target_ref}^{{commit}}"))?
            .ok_or_else(|| IntegrateError::NoTarget(target.to_string()))?;
        if self.is_ancestor(&b, &t)? {
            return Ok(Some(MergeResult::UpToDate { commit: t }));
        }
        refuse_secrets(self.git, &t, &b, branch, target)?;
        let registered = self.wt.registered()?;
        let checked_out = registered
            .iter()
            .find(|r| !r.prunable && r.branch.as_deref() == Some(target_ref.as_str()));
        if let Some(user) = checked_out {
            let at = user.path.clone();
            return self.hold(branch, &b, target, &t, message, at, before_cas);
        }
        let (new, fast_forward) = if self.is_ancestor(&t, &b)? {
            (b, true)
        } else {
            match self.make_merge(&t, &[(&b, message)])? {
                Made::Commit(c) => (c, false),
                Made::Conflict(files) => return Ok(Some(MergeResult::Conflict { files })),
            }
        };
        before_cas(&target_ref);
        if !self.cas(&target_ref, &new, &t, message)? {
            return Ok(None);
        }
        Ok(Some(MergeResult::Merged {
            target: target.to_string(),
            commit: new,
            fast_forward,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    fn hold(
        &self,
        branch: &str,
        b: &str,
        target: &str,
        t: &str,
        message: &str,
        checked_out_at: PathBuf,
        before_cas: &mut dyn FnMut(&str),
    ) -> Result<Option<MergeResult>, IntegrateError> {
        let integration = held_branch(target);
        let iref = format!("refs/heads/{integration}");
        if let Some(r) = self
            .wt
            .registered()?
            .into_iter()
            .find(|r| !r.prunable && r.branch.as_deref() == Some(iref.as_str()))
        {
            return Err(IntegrateError::IntegrationCheckedOut {
                branch: integration,
                at: r.path,
            });
        }
        let old = self.wt.rev(&format!("{iref}^{{commit}}"))?;
        let held = |commit: String| {
            Some(MergeResult::Held {
                integration_branch: integration.clone(),
                commit,
                checked_out_at: checked_out_at.clone(),
            })
        };
        // Start from the integration branch while it holds the target (earlier held
        // results accumulate there); from the target when the branch is behind it or new;
        // from both when they diverged (the target is merged in first).
        let catch_up = format!("Merge branch '{target}' into {integration}");
        let mut steps: Vec<(&str, &str)> = Vec::new();
        let base = match &old {
            None => t.to_string(),
            Some(i) if self.is_ancestor(t, i)? => i.clone(),
            Some(i) if self.is_ancestor(i, t)? => t.to_string(),
            Some(i) => {
                steps.push((t, &catch_up));
                i.clone()
            }
        };
        if self.is_ancestor(b, &base)? {
            // Already held: nothing new to merge.
            return Ok(held(base));
        }
        let new = if steps.is_empty() && self.is_ancestor(&base, b)? {
            b.to_string()
        } else {
            steps.push((b, message));
            match self.make_merge(&base, &steps)? {
                Made::Commit(c) => c,
                Made::Conflict(files) => return Ok(Some(MergeResult::Conflict { files })),
            }
        };
        before_cas(&iref);
        let moved = self.cas(
            &iref,
            &new,
            old.as_deref().unwrap_or(""),
            &format!("taskdaemon: hold {} for {target}", short(branch)),
        )?;
        Ok(if moved { held(new) } else { None })
    }

    fn is_ancestor(&self, a: &str, b: &str) -> Result<bool, IntegrateError> {
        Ok(self.git.is_ancestor(a, b)?)
    }

    /// Move `r` from `old` (empty: must not exist) to `new`; false if it was not at `old`.
    fn cas(&self, r: &str, new: &str, old: &str, message: &str) -> Result<bool, IntegrateError> {
        let reflog = format!("taskdaemon: {}", message.lines().next().unwrap_or("merge"));
        let out = self
            .git
            .call(&["update-ref", "-m", &reflog, r, new, old])
            .output()?;
        if out.status.success() {
            return Ok(true);
        }
        // Tell a lost race from any other failure.
        let now = self.wt.rev(r)?;
        if now.as_deref().unwrap_or("") != old {
            return Ok(false);
        }
        Err(GitError::Failed {
            args: format!("update-ref {r} {new} {old}"),
            dir: self.git.dir().to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into())
    }

    /// The integration worktree, detached at `base` with nothing else in it.
    fn integration_at(&self, base: &str) -> Result<Git, IntegrateError> {
        let path = self.wt.path_for(INTEGRATION);
        let registered = self.wt.registered()?;
        let entry = find(&registered, &path).cloned();
        let _lock = self.wt.lock_name(INTEGRATION)?;
        match entry {
            Some(r) if !r.prunable && path.exists() => {}
            Some(r) => {
                let git_lock = self.wt.git_worktree_lock()?;
                self.git
                    .call(&[
                        OsStr::new("worktree"),
                        OsStr::new("remove"),
                        OsStr::new("--force"),
                        r.path.as_os_str(),
                    ])
                    .text()?;
                drop(git_lock);
                self.add_integration(&path, base)?;
            }
            None => {
                if path.exists() && std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_some()) {
                    return Err(WorktreeError::NotAWorktree { path }.into());
                }
                self.add_integration(&path, base)?;
            }
        }
        let g = Git::new(&path).with(
            &[
                "core.hooksPath=/dev/null",
                "rerere.enabled=false",
                "submodule.recurse=false",
                "advice.detachedHead=false",
            ],
            &[],
        );
        // It is taskdaemon's own: whatever a crash left there can go. First the lock files
        // of a git killed with its daemon (kept in `stale-locks/`): under `merge.lock` no
        // git of ours works here, and while `index.lock` is there every merge fails.
        if let Ok(facts) = g.facts() {
            super::stale_locks::clear(&facts, std::time::SystemTime::now());
        }
        let _ = g.call(&["merge", "--abort"]).output()?;
        g.run(&["checkout", "-q", "--detach", "-f", base])?;
        g.run(&["clean", "-q", "-ffdx"])?;
        Ok(g)
    }

    fn add_integration(&self, path: &std::path::Path, base: &str) -> Result<(), IntegrateError> {
        let dir = self.wt.base();
        std::fs::create_dir_all(dir).map_err(|source| WorktreeError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let _git = self.wt.git_worktree_lock()?;
        self.git
            .call(&[
                OsStr::new("worktree"),
                OsStr::new("add"),
                OsStr::new("-q"),
                OsStr::new("--detach"),
                path.as_os_str(),
                OsStr::new(base),
            ])
            .text()?;
        Ok(())
    }

    /// Merge each commit in turn (with its message) on top of `base` in the integration
    /// worktree. A conflict is aborted and reported.
    fn make_merge(&self, base: &str, steps: &[(&str, &str)]) -> Result<Made, IntegrateError> {
        let g = self.integration_at(base)?;
        let ident = self.fallback_ident()?;
        for (commit, message) in steps {
            let mut call = g.call(&[
                "merge",
                "-q",
                "--no-ff",
                "--no-edit",
                "--no-verify",
                "--no-stat",
                "--no-log",
                "-m",
                message,
                commit,
            ]);
            for (k, v) in &ident {
                call = call.env(k, v);
            }
            let out = call.output()?;
            if out.status.success() {
                continue;
            }
            let unmerged = g
                .call(&["diff", "--name-only", "-z", "--diff-filter=U"])
                .bytes()?;
            let files: Vec<String> = unmerged
                .split(|b| *b == 0)
                .filter(|f| !f.is_empty())
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            let _ = g.call(&["merge", "--abort"]).output()?;
            if files.is_empty() {
                return Err(IntegrateError::MergeFailed {
                    path: g.dir().to_path_buf(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
            return Ok(Made::Conflict(files));
        }
        let head = g.head()?.ok_or_else(|| IntegrateError::MergeFailed {
            path: g.dir().to_path_buf(),
            stderr: "no HEAD after the merge".into(),
        })?;
        Ok(Made::Commit(head))
    }

    /// Author and committer for the merge when git has none configured.
    fn fallback_ident(&self) -> Result<Vec<(&'static str, &'static str)>, IntegrateError> {
        let mut env = Vec::new();
        for (var, name, email) in [
            ("GIT_AUTHOR_IDENT", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"),
            (
                "GIT_COMMITTER_IDENT",
                "GIT_COMMITTER_NAME",
                "GIT_COMMITTER_EMAIL",
            ),
        ] {
            if !self.git.call(&["var", var]).output()?.status.success() {
                env.push((name, IDENT_NAME));
                env.push((email, IDENT_EMAIL));
            }
        }
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::git::testrepo::{commit_all, git, init, user_state};
    use crate::git::worktree::DEFAULT_BASE;

    struct Fx {
        _d: tempfile::TempDir,
        repo: PathBuf,
        wt: Worktrees,
    }

    /// A repository whose `main` has `a.txt` and `b.txt`.
    fn fx() -> Fx {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        std::fs::write(repo.join("a.txt"), "a1\na2\na3\n").unwrap();
        std::fs::write(repo.join("b.txt"), "b\n").unwrap();
        commit_all(&repo, "initial");
        let wt = Worktrees::open(&repo, Path::new(DEFAULT_BASE)).unwrap();
        Fx { _d: d, repo, wt }
    }

    impl Fx {
        fn rev(&self, r: &str) -> String {
            git(&self.repo, &["rev-parse", r])
        }
        /// A loop's worktree on `td/<name>` with one commit writing `file`.
        fn spec(&self, name: &str, file: &str, text: &str) -> PathBuf {
            let p = self.wt.ensure(name, &format!("td/{name}"), "main").unwrap();
            std::fs::write(p.join(file), text).unwrap();
            commit_all(&p, &format!("{name}: {file}"));
            p
        }
        /// The user leaves `main` for branch `work`, with edits staged and not.
        fn user_on_work_with_edits(&self) {
            git(&self.repo, &["switch", "-q", "-c", "work"]);
            self.user_edits();
        }
        fn user_edits(&self) {
            std::fs::write(self.repo.join("b.txt"), "user's staged edit\n").unwrap();
            git(&self.repo, &["add", "b.txt"]);
            std::fs::write(self.repo.join("b.txt"), "user's unstaged edit\n").unwrap();
            std::fs::write(self.repo.join("notes.txt"), "untracked\n").unwrap();
        }
        fn parents(&self, c: &str) -> Vec<String> {
            git(&self.repo, &["rev-list", "--parents", "-n1", c])
                .split(' ')
                .skip(1)
                .map(String::from)
                .collect()
        }
    }

    #[test]
    fn a_branch_whose_commits_add_a_secret_is_not_merged() {
        let f = fx();
        let p = f.spec("s1", "c.txt", "new\n");
        std::fs::write(p.join("server.pem"), "KEY\n").unwrap();
        commit_all(&p, "a key");
        let main = f.rev("main");
        let e = merge_into(&f.wt, "td/s1", "main", "Merge s1").unwrap_err();
        assert!(
            matches!(&e, IntegrateError::Secrets { paths, .. } if paths == "server.pem"),
            "{e}"
        );
        assert!(e.to_string().contains("hint: "), "{e}");
        assert_eq!(f.rev("main"), main);
    }

    #[test]
    fn fast_forward_moves_the_target_and_nothing_else() {
        let f = fx();
        f.spec("s1", "c.txt", "new\n");
        f.user_on_work_with_edits();
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s1", "main", "Merge s1").unwrap();
        let tip = f.rev("td/s1");
        assert_eq!(
            r,
            MergeResult::Merged {
                target: "main".into(),
                commit: tip.clone(),
                fast_forward: true
            }
        );
        assert_eq!(f.rev("main"), tip);
        assert_eq!(user_state(&f.repo), before);
    }

    #[test]
    fn diverged_branches_get_a_merge_commit_made_in_the_integration_worktree() {
        let f = fx();
        f.spec("s1", "c.txt", "from the loop\n");
        std::fs::write(f.repo.join("a.txt"), "a1\na2\na3\nuser\n").unwrap();
        commit_all(&f.repo, "user work on main");
        let t = f.rev("main");
        f.user_on_work_with_edits();
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s1", "main", "Merge s1 into main").unwrap();
        let MergeResult::Merged {
            commit,
            fast_forward: false,
            ..
        } = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(&f.rev("main"), commit);
        assert_eq!(f.parents(commit), [t, f.rev("td/s1")]);
        assert_eq!(
            git(&f.repo, &["log", "-1", "--format=%s", "main"]),
            "Merge s1 into main"
        );
        assert_eq!(git(&f.repo, &["show", "main:c.txt"]), "from the loop");
        assert_eq!(user_state(&f.repo), before);
        // The integration worktree is detached and clean.
        let integ = f.wt.path_for(INTEGRATION);
        assert_eq!(git(&integ, &["status", "--porcelain"]), "");
        assert!(git(&integ, &["branch", "--show-current"]).is_empty());
        // A second merge (a branch started before the first merge) reuses it, also after
        // a merge there was killed and left git's locks.
        let admin = PathBuf::from(git(&integ, &["rev-parse", "--absolute-git-dir"]));
        for lock in ["index.lock", "HEAD.lock"] {
            let f = std::fs::File::create(admin.join(lock)).unwrap();
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
                .unwrap();
        }
        let s2 = f.wt.ensure("s2", "td/s2", "main~1").unwrap();
        std::fs::write(s2.join("d.txt"), "two\n").unwrap();
        commit_all(&s2, "s2");
        let r = merge_into(&f.wt, "td/s2", "main", "Merge s2").unwrap();
        assert!(
            matches!(
                r,
                MergeResult::Merged {
                    fast_forward: false,
                    ..
                }
            ),
            "{r:?}"
        );
        assert_eq!(user_state(&f.repo), before);
        assert!(!admin.join("index.lock").exists() && !admin.join("HEAD.lock").exists());
    }

    #[test]
    fn a_contained_branch_is_up_to_date() {
        let f = fx();
        f.wt.ensure("s1", "td/s1", "main").unwrap();
        f.user_on_work_with_edits();
        let r = merge_into(&f.wt, "td/s1", "main", "m").unwrap();
        assert_eq!(
            r,
            MergeResult::UpToDate {
                commit: f.rev("main")
            }
        );
    }

    #[test]
    fn a_conflict_lists_the_files_and_changes_nothing() {
        let f = fx();
        let s1 = f.spec("s1", "a.txt", "a1\nloop\na3\n");
        std::fs::create_dir_all(s1.join("sub dir")).unwrap();
        std::fs::write(s1.join("sub dir/é x.txt"), "loop\n").unwrap();
        commit_all(&s1, "second");
        std::fs::write(f.repo.join("a.txt"), "a1\nuser\na3\n").unwrap();
        std::fs::create_dir_all(f.repo.join("sub dir")).unwrap();
        std::fs::write(f.repo.join("sub dir/é x.txt"), "user\n").unwrap();
        commit_all(&f.repo, "user edit");
        f.user_on_work_with_edits();
        let (main, branch) = (f.rev("main"), f.rev("td/s1"));
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s1", "main", "m").unwrap();
        assert_eq!(
            r,
            MergeResult::Conflict {
                files: vec!["a.txt".into(), "sub dir/é x.txt".into()]
            }
        );
        assert_eq!((f.rev("main"), f.rev("td/s1")), (main, branch));
        assert_eq!(user_state(&f.repo), before);
        let integ = f.wt.path_for(INTEGRATION);
        assert_eq!(git(&integ, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_target_checked_out_with_local_changes_is_held_on_the_integration_branch() {
        let f = fx();
        f.spec("s1", "c.txt", "one\n");
        f.spec("s2", "d.txt", "two\n");
        f.user_edits();
        let main = f.rev("main");
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s1", "main", "Merge s1").unwrap();
        assert_eq!(
            r,
            MergeResult::Held {
                integration_branch: "taskdaemon/integration/main".into(),
                commit: f.rev("td/s1"),
                checked_out_at: f.repo.clone(),
            }
        );
        // Held results accumulate on the integration branch.
        let r = merge_into(&f.wt, "td/s2", "main", "Merge s2").unwrap();
        let MergeResult::Held { commit, .. } = &r else {
            panic!("{r:?}")
        };
        assert_eq!(&f.rev("taskdaemon/integration/main"), commit);
        assert_eq!(f.parents(commit), [f.rev("td/s1"), f.rev("td/s2")]);
        // Merging s1 again holds the same commit.
        let again = merge_into(&f.wt, "td/s1", "main", "Merge s1").unwrap();
        assert_eq!(again, r);
        assert_eq!(f.rev("main"), main);
        assert_eq!(user_state(&f.repo), before);
        // The user commits on main meanwhile: the integration branch catches up by a merge.
        std::fs::write(f.repo.join("e.txt"), "user\n").unwrap();
        git(&f.repo, &["add", "e.txt"]);
        git(&f.repo, &["commit", "-q", "-m", "user commit"]);
        f.spec("s3", "f.txt", "three\n");
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s3", "main", "Merge s3").unwrap();
        let MergeResult::Held { commit, .. } = &r else {
            panic!("{r:?}")
        };
        for c in [
            f.rev("main"),
            f.rev("td/s1"),
            f.rev("td/s2"),
            f.rev("td/s3"),
        ] {
            git(&f.repo, &["merge-base", "--is-ancestor", &c, commit]);
        }
        assert_eq!(user_state(&f.repo), before);
    }

    #[test]
    fn a_target_checked_out_without_local_changes_is_held_too() {
        let f = fx();
        f.spec("s1", "c.txt", "one\n");
        let main = f.rev("main");
        let before = user_state(&f.repo);
        let r = merge_into(&f.wt, "td/s1", "main", "m").unwrap();
        assert!(matches!(r, MergeResult::Held { .. }), "{r:?}");
        assert_eq!(f.rev("main"), main);
        assert_eq!(user_state(&f.repo), before);
    }

    #[test]
    fn a_concurrent_move_of_the_target_is_detected_and_the_merge_redone() {
        let f = fx();
        f.spec("s1", "c.txt", "loop\n");
        f.user_on_work_with_edits();
        let before = user_state(&f.repo);
        // Someone else commits to main between our merge and our ref update.
        let tree = git(&f.repo, &["rev-parse", "main^{tree}"]);
        let main = f.rev("main");
        let theirs = git(
            &f.repo,
            &["commit-tree", &tree, "-p", &main, "-m", "concurrent"],
        );
        let mut moved = 0;
        let r = merge_into_hooked(&f.wt, "td/s1", "main", "m", &mut |r| {
            if moved == 0 {
                git(&f.repo, &["update-ref", r, &theirs]);
            }
            moved += 1;
        })
        .unwrap();
        assert_eq!(moved, 2);
        let MergeResult::Merged {
            commit,
            fast_forward: false,
            ..
        } = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(f.parents(commit), [theirs.clone(), f.rev("td/s1")]);
        assert_eq!(&f.rev("main"), commit);
        // A target that keeps moving is an error, and the other writer's commit stays.
        f.spec("s2", "d.txt", "two\n");
        let mut n = 0;
        let e = merge_into_hooked(&f.wt, "td/s2", "main", "m", &mut |r| {
            n += 1;
            let tip = git(&f.repo, &["rev-parse", "main"]);
            let c = git(
                &f.repo,
                &[
                    "commit-tree",
                    &tree,
                    "-p",
                    &tip,
                    "-m",
                    &format!("again {n}"),
                ],
            );
            git(&f.repo, &["update-ref", r, &c]);
        })
        .unwrap_err();
        assert!(matches!(e, IntegrateError::TargetKeptMoving(_)), "{e}");
        assert_eq!(
            git(&f.repo, &["log", "-1", "--format=%s", "main"]),
            "again 2"
        );
        assert_eq!(user_state(&f.repo), before);
    }

    #[test]
    fn concurrent_merges_are_serialized_and_all_land() {
        let f = fx();
        for i in 0..4 {
            f.spec(&format!("s{i}"), &format!("f{i}.txt"), "x\n");
        }
        f.user_on_work_with_edits();
        let before = user_state(&f.repo);
        let results: Vec<MergeResult> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let wt = f.wt.clone();
                    s.spawn(move || {
                        merge_into(&wt, &format!("td/s{i}"), "main", &format!("Merge s{i}"))
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            results
                .iter()
                .all(|r| matches!(r, MergeResult::Merged { .. })),
            "{results:?}"
        );
        for i in 0..4 {
            git(
                &f.repo,
                &["merge-base", "--is-ancestor", &format!("td/s{i}"), "main"],
            );
        }
        assert_eq!(user_state(&f.repo), before);
    }

    #[test]
    fn missing_branches_are_errors_with_hints() {
        let f = fx();
        let e = merge_into(&f.wt, "td/none", "main", "m").unwrap_err();
        assert!(matches!(e, IntegrateError::NoBranch(_)) && e.to_string().contains("hint:"));
        f.wt.ensure("s1", "td/s1", "main").unwrap();
        let e = merge_into(&f.wt, "td/s1", "nope", "m").unwrap_err();
        assert!(matches!(e, IntegrateError::NoTarget(_)), "{e}");
    }
}
