//! Worktrees for loops: one linked git worktree per record, under a configurable base
//! directory that git ignores (`.taskdaemon/worktrees` by default).
//!
//! ```text
//! <repo>/.taskdaemon/worktrees/
//!   3f9a1c-spec-oauth/   worktree on branch taskdaemon/3f9a1c-spec-oauth (say)
//!   _integration/        detached; where merges back are made (see `integrate`)
//! ```
//!
//! Rules: reuse never resets anything (a resumed loop continues with the files as they
//! are); a directory in the way that is not a worktree is an error, never deleted; removal
//! refuses a worktree with uncommitted or untracked files unless forced, and refuses to
//! delete a branch whose commits no other branch holds unless forced. Only `git` commands
//! run here; the user's own checkout is never written to.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Git, GitError};

/// The default base directory, relative to the repository's top level.
pub const DEFAULT_BASE: &str = ".taskdaemon/worktrees";
/// The name of the integration worktree under the base.
pub const INTEGRATION: &str = "_integration";

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(
        "`{0}` is not a usable worktree name\n  hint: use a record id: letters, digits, `-`, `_` and `.`, not starting with `.` or `-`"
    )]
    BadName(String),
    #[error(
        "`{0}` is not a valid branch name\n  hint: see `git check-ref-format --help`; e.g. taskdaemon/3f9a1c-spec-oauth"
    )]
    BadBranch(String),
    #[error(
        "`{start}` does not name a commit in {repo}\n  hint: start a worktree from an existing branch or commit (e.g. main)"
    )]
    BadStart { start: String, repo: PathBuf },
    #[error(
        "{path} exists but is not a git worktree of this repository\n  hint: taskdaemon never deletes it; move it away (or remove it if it holds nothing you need), then retry"
    )]
    NotAWorktree { path: PathBuf },
    #[error(
        "worktree {path} is on {found}, not on branch {wanted}\n  hint: switch it back with `git -C {path} switch {wanted}` (after committing), or remove it with `taskdaemon worktree prune`"
    )]
    WrongBranch {
        path: PathBuf,
        wanted: String,
        found: String,
    },
    #[error(
        "branch {branch} is already checked out in {elsewhere}\n  hint: a branch can be checked out in one worktree only; switch that worktree to another branch first"
    )]
    BranchElsewhere { branch: String, elsewhere: PathBuf },
    #[error(
        "worktree {path} has uncommitted changes: {files}\n  hint: commit or discard them (inspect with `git -C {path} status`), or force the removal (e.g. `taskdaemon worktree prune --force`)"
    )]
    Dirty { path: PathBuf, files: String },
    #[error(
        "branch {branch} has commits no other branch holds (tip {tip})\n  hint: merge it first, or delete it on purpose with `git branch -D {branch}`"
    )]
    Unmerged { branch: String, tip: String },
    #[error(
        "worktree {path} is locked{reason}\n  hint: `git worktree unlock {path}` if nothing needs it any more"
    )]
    Locked { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + '_ {
    move |source| WorktreeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One worktree under the base directory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct WorktreeInfo {
    /// The directory's name under the base (a record id, or `_integration`).
    pub name: String,
    pub path: PathBuf,
    /// The branch checked out (short name); `None` when detached.
    pub branch: Option<String>,
    /// The commit HEAD points at; `None` on an unborn branch.
    pub head: Option<String>,
    /// Uncommitted changes or untracked files (never true for a missing directory).
    pub dirty: bool,
    /// The directory is gone but git still has it registered (a stale registration).
    pub missing: bool,
    pub locked: bool,
}

/// One worktree `prune` removed or kept, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pruned {
    pub name: String,
    pub path: PathBuf,
    pub branch: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PruneReport {
    pub removed: Vec<Pruned>,
    pub kept: Vec<Pruned>,
}

/// The worktrees of one repository under one base directory.
#[derive(Debug, Clone)]
pub struct Worktrees {
    git: Git,
    top: PathBuf,
    common_dir: PathBuf,
    base: PathBuf,
    /// The main work tree as `git worktree list` printed it, when its layout is the plain
    /// one (not bare, its git dir the common dir at `<path>/.git`): the list is then read
    /// from `<common-dir>/worktrees/*/` (see [`Self::registered`]); `None`: ask git.
    main: Option<PathBuf>,
}

/// One entry of `git worktree list --porcelain -z`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registered {
    pub path: PathBuf,
    pub head: Option<String>,
    /// Full ref name (`refs/heads/…`).
    pub branch: Option<String>,
    pub prunable: bool,
    pub locked: Option<String>,
    pub bare: bool,
}

impl Worktrees {
    /// The worktrees of the repository containing `repo`, under `base` (relative paths are
    /// taken from the top level of the repository's main work tree). When the base lies
    /// inside that work tree it is added to `<common-git-dir>/info/exclude` (never to a
    /// tracked file).
    pub fn open(repo: &Path, base: &Path) -> Result<Worktrees, WorktreeError> {
        let here = Git::new(repo);
        let top = here.toplevel()?;
        let common_dir = here.common_dir()?;
        let probe = Worktrees {
            git: Git::new(&top),
            top: top.clone(),
            common_dir: common_dir.clone(),
            base: PathBuf::new(),
            main: None,
        };
        // The first entry of `worktree list` is the main work tree (unless the repository is bare).
        let first = probe
            .registered()?
            .into_iter()
            .next()
            .filter(|r| !r.bare && r.path.is_dir());
        let plain_main = first
            .as_ref()
            .filter(|r| is_plain_main(&r.path, &common_dir))
            .map(|r| r.path.clone());
        let main = first.map(|r| r.path).unwrap_or(top);
        let top = main.canonicalize().unwrap_or(main);
        let base = crate::fsutil::normalize(&top.join(base));
        let wt = Worktrees {
            git: Git::new(&top),
            top,
            common_dir,
            base,
            main: plain_main,
        };
        if let Ok(rel) = wt.base.strip_prefix(&wt.top)
            && !rel.as_os_str().is_empty()
        {
            let pattern = format!("{}/", rel.to_string_lossy());
            wt.git.ensure_excluded(&[pattern.as_str()])?;
        }
        Ok(wt)
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The top level of the repository's main work tree.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// The common git directory (shared by all worktrees).
    pub fn common_dir(&self) -> &Path {
        &self.common_dir
    }

    pub(crate) fn git(&self) -> &Git {
        &self.git
    }

    /// `<base>/<name>`.
    pub fn path_for(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }

    /// Hold this around any other `git worktree` command on this repository.
    pub(crate) fn git_worktree_lock(&self) -> Result<File, WorktreeError> {
        self.lock(GIT_WORKTREE_LOCK)
    }

    /// `git worktree prune`, under [`GIT_WORKTREE_LOCK`].
    fn prune_admin(&self) -> Result<(), WorktreeError> {
        let _git = self.lock(GIT_WORKTREE_LOCK)?;
        self.git.run(&["worktree", "prune"])?;
        Ok(())
    }

    /// A lock file in `<common-git-dir>/taskdaemon/`, held exclusively until dropped.
    pub(crate) fn lock(&self, name: &str) -> Result<File, WorktreeError> {
        let f = self.lock_file(&self.common_dir.join("taskdaemon"), name)?;
        f.lock().map_err(io(&self.common_dir))?;
        Ok(f)
    }

    fn lock_file(&self, dir: &Path, name: &str) -> Result<File, WorktreeError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(name);
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))
    }

    /// The locks around adding or removing the worktree `name`: `worktrees.lock` shared
    /// (so worktrees of different names are made and removed at the same time; `prune`
    /// takes it exclusively) and `worktree-locks/<name>.lock` exclusive (one change of a
    /// given worktree at a time). The git commands themselves are not safe side by side
    /// (see [`GIT_WORKTREE_LOCK`]): each runs under that lock, held only while it runs.
    pub(crate) fn lock_name(&self, name: &str) -> Result<(File, File), WorktreeError> {
        let dir = self.common_dir.join("taskdaemon");
        let all = self.lock_file(&dir, "worktrees.lock")?;
        all.lock_shared().map_err(io(&dir))?;
        let one = self.lock_file(&dir.join("worktree-locks"), &format!("{name}.lock"))?;
        one.lock().map_err(io(&dir))?;
        Ok((all, one))
    }

    /// Create the worktree `name` on `branch` (made at `start` when it does not exist), or
    /// reuse it as it is when it already exists on `branch`.
    pub fn ensure(&self, name: &str, branch: &str, start: &str) -> Result<PathBuf, WorktreeError> {
        retry_add_race(|| self.ensure_once(name, branch, start))
    }

    fn ensure_once(&self, name: &str, branch: &str, start: &str) -> Result<PathBuf, WorktreeError> {
        check_name(name)?;
        self.check_branch(branch)?;
        let _lock = self.lock_name(name)?;
        let path = self.path_for(name);
        let full = format!("refs/heads/{branch}");
        let all = self.registered()?;
        if let Some(r) = find(&all, &path) {
            if r.prunable || !path.exists() {
                let _git = self.lock(GIT_WORKTREE_LOCK)?;
                self.git
                    .call(&[
                        "worktree".as_ref(),
                        "remove".as_ref(),
                        "--force".as_ref(),
                        r.path.as_os_str(),
                    ])
                    .text()?;
            } else {
                return match &r.branch {
                    Some(b) if *b == full => Ok(path),
                    other => Err(WorktreeError::WrongBranch {
                        path,
                        wanted: branch.to_string(),
                        found: other
                            .as_deref()
                            .map(|b| format!("branch {}", short(b)))
                            .unwrap_or_else(|| "a detached HEAD".into()),
                    }),
                };
            }
        }
        if path.exists() && !is_empty_dir(&path) {
            return Err(WorktreeError::NotAWorktree { path });
        }
        if let Some(r) = all
            .iter()
            .find(|r| r.branch.as_deref() == Some(full.as_str()) && !r.prunable && r.path != path)
        {
            return Err(WorktreeError::BranchElsewhere {
                branch: branch.to_string(),
                elsewhere: r.path.clone(),
            });
        }
        std::fs::create_dir_all(&self.base).map_err(io(&self.base))?;
        let exists = self.rev(&full)?.is_some();
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["worktree".as_ref(), "add".as_ref(), "-q".as_ref()];
        if exists {
            args.extend([path.as_os_str(), branch.as_ref()]);
        } else {
            if self.rev(&format!("{start}^{{commit}}"))?.is_none() {
                return Err(WorktreeError::BadStart {
                    start: start.to_string(),
                    repo: self.top.clone(),
                });
            }
            args.extend([
                "--no-track".as_ref(),
                "-b".as_ref(),
                branch.as_ref(),
                path.as_os_str(),
                start.as_ref(),
            ]);
        }
        let _git = self.lock(GIT_WORKTREE_LOCK)?;
        self.git.call(&args).text()?;
        Ok(path)
    }

    /// A throwaway worktree `name` with a detached HEAD at `start` (a work list's parallel
    /// task). An earlier one of that name (left by an interrupted loop) is replaced; a
    /// directory in the way that is not a worktree is an error, never deleted.
    pub fn detached(&self, name: &str, start: &str) -> Result<PathBuf, WorktreeError> {
        retry_add_race(|| self.detached_once(name, start))
    }

    fn detached_once(&self, name: &str, start: &str) -> Result<PathBuf, WorktreeError> {
        check_name(name)?;
        let _lock = self.lock_name(name)?;
        let path = self.path_for(name);
        if let Some(r) = find(&self.registered()?, &path).cloned() {
            self.remove_registered(&r, true, false)?;
        }
        self.prune_admin()?;
        if path.exists() && !is_empty_dir(&path) {
            return Err(WorktreeError::NotAWorktree { path });
        }
        std::fs::create_dir_all(&self.base).map_err(io(&self.base))?;
        let _git = self.lock(GIT_WORKTREE_LOCK)?;
        self.git
            .call(&[
                "worktree".as_ref(),
                "add".as_ref(),
                "--detach".as_ref(),
                "--quiet".as_ref(),
                path.as_os_str(),
                start.as_ref(),
            ])
            .text()?;
        Ok(path)
    }

    /// Remove the worktree `name`. Refuses one with uncommitted changes or untracked files
    /// unless `force`; deletes its branch only when `delete_branch`, and then only if another
    /// branch holds its commits (or `force`). Nothing there (no directory, no registration) is
    /// not an error: a removal interrupted half way can be repeated.
    pub fn remove(
        &self,
        name: &str,
        force: bool,
        delete_branch: bool,
    ) -> Result<(), WorktreeError> {
        check_name(name)?;
        let _lock = self.lock_name(name)?;
        let path = self.path_for(name);
        let all = self.registered()?;
        let Some(r) = find(&all, &path).cloned() else {
            if path.exists() && !is_empty_dir(&path) {
                return Err(WorktreeError::NotAWorktree { path });
            }
            return Ok(());
        };
        self.remove_registered(&r, force, delete_branch)
    }

    fn remove_registered(
        &self,
        r: &Registered,
        force: bool,
        delete_branch: bool,
    ) -> Result<(), WorktreeError> {
        let missing = r.prunable || !r.path.exists();
        if let Some(reason) = &r.locked
            && !missing
        {
            return Err(WorktreeError::Locked {
                path: r.path.clone(),
                reason: if reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({reason})")
                },
            });
        }
        if !missing && !force {
            let dirty = dirty_files(&r.path)?;
            if !dirty.is_empty() {
                return Err(WorktreeError::Dirty {
                    path: r.path.clone(),
                    files: summarize(&dirty),
                });
            }
        }
        let branch_tip = match (&r.branch, delete_branch) {
            (Some(b), true) => {
                let tip = self.rev(b)?;
                if let Some(tip) = &tip
                    && !force
                    && !self.held_elsewhere(b, tip)?
                {
                    return Err(WorktreeError::Unmerged {
                        branch: short(b).to_string(),
                        tip: tip.clone(),
                    });
                }
                tip.map(|t| (b.clone(), t))
            }
            _ => None,
        };
        let mut args: Vec<&std::ffi::OsStr> = vec!["worktree".as_ref(), "remove".as_ref()];
        if force || missing {
            args.push("--force".as_ref());
        }
        args.push(r.path.as_os_str());
        {
            let _git = self.lock(GIT_WORKTREE_LOCK)?;
            self.git.call(&args).text()?;
        }
        if let Some((b, tip)) = branch_tip {
            self.git.run(&["update-ref", "-d", &b, &tip])?;
        }
        Ok(())
    }

    /// Whether a local branch other than `branch` contains `tip`.
    fn held_elsewhere(&self, branch: &str, tip: &str) -> Result<bool, WorktreeError> {
        let out = self.git.run(&[
            "for-each-ref",
            "--format=%(refname)",
            "--contains",
            tip,
            "refs/heads/",
        ])?;
        Ok(out.lines().any(|l| l != branch))
    }

    /// Every worktree under the base directory, by name.
    pub fn list(&self) -> Result<Vec<WorktreeInfo>, WorktreeError> {
        let mut out = Vec::new();
        for r in self.registered()? {
            let Some(name) = self.name_of(&r.path) else {
                continue;
            };
            let missing = r.prunable || !r.path.exists();
            let dirty = !missing && !dirty_files(&r.path)?.is_empty();
            out.push(WorktreeInfo {
                name,
                path: r.path.clone(),
                branch: r.branch.as_deref().map(|b| short(b).to_string()),
                head: r.head.clone(),
                dirty,
                missing,
                locked: r.locked.is_some(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Remove worktrees under the base whose name `finished` accepts, and stale
    /// registrations. Dirty ones are kept unless `force`; locked ones and the integration
    /// worktree are always kept. Branches are kept.
    pub fn prune(
        &self,
        finished: &dyn Fn(&str) -> bool,
        force: bool,
    ) -> Result<PruneReport, WorktreeError> {
        let mut report = PruneReport::default();
        let all = self.list()?;
        let registered = self.registered()?;
        for info in all {
            let entry = |reason: &str| Pruned {
                name: info.name.clone(),
                path: info.path.clone(),
                branch: info.branch.clone(),
                reason: reason.to_string(),
            };
            let keep = if info.missing {
                None
            } else if info.name == INTEGRATION {
                Some("the integration worktree (merges are made there; it is recreated as needed)")
            } else if info.locked {
                Some("locked (`git worktree unlock` it first)")
            } else if !finished(&info.name) {
                Some("not finished")
            } else if info.dirty && !force {
                Some("uncommitted changes (commit or discard them, or use --force)")
            } else {
                None
            };
            if let Some(why) = keep {
                report.kept.push(entry(why));
                continue;
            }
            let Some(r) = find(&registered, &info.path) else {
                continue;
            };
            let _lock = (info.name == INTEGRATION)
                .then(|| self.lock("merge.lock"))
                .transpose()?;
            let _wlock = self.lock("worktrees.lock")?;
            match self.remove_registered(r, force, false) {
                Ok(()) => report.removed.push(entry(if info.missing {
                    "directory was gone (stale registration)"
                } else if info.dirty {
                    "finished (uncommitted changes discarded: --force)"
                } else {
                    "finished"
                })),
                Err(WorktreeError::Dirty { .. }) => report.kept.push(entry(
                    "uncommitted changes (commit or discard them, or use --force)",
                )),
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// The name under the base of a worktree path, if it is directly under the base.
    fn name_of(&self, path: &Path) -> Option<String> {
        let p = path
            .canonicalize()
            .unwrap_or_else(|_| crate::fsutil::normalize(path));
        let parent = p.parent()?;
        let base = self
            .base
            .canonicalize()
            .unwrap_or_else(|_| self.base.clone());
        (parent == base).then(|| p.file_name().map(|n| n.to_string_lossy().into_owned()))?
    }

    /// What `git worktree list --porcelain -z` says, read from the administrative files
    /// when their layout is plain (no git process), else from git.
    pub(crate) fn registered(&self) -> Result<Vec<Registered>, WorktreeError> {
        let _git = self.lock(GIT_WORKTREE_LOCK)?;
        if let Some(all) = self.registered_from_files() {
            return Ok(all);
        }
        self.registered_from_git()
    }

    fn registered_from_git(&self) -> Result<Vec<Registered>, WorktreeError> {
        let out = self
            .git
            .call(&["worktree", "list", "--porcelain", "-z"])
            .bytes()?;
        Ok(parse_worktree_list(&out))
    }

    /// The list as git makes it (the main work tree, then the linked ones sorted by
    /// path), from `<common-dir>/worktrees/<id>/{gitdir,HEAD,locked}` and the ref files.
    /// `None` (ask git) for anything unusual: a main work tree not known to be plain, an
    /// entry without a readable `gitdir` (git skips it, or is still making it), a relative
    /// or non-UTF-8 path, a HEAD the ref files cannot answer (see [`super::refs::head`]).
    fn registered_from_files(&self) -> Option<Vec<Registered>> {
        let main_path = self.main.clone()?;
        let facts = self.git.facts().ok()?;
        if facts.common_dir != self.common_dir || facts.git_dir != facts.common_dir {
            return None;
        }
        let main = Registered {
            path: main_path,
            ..head_from_files(&facts)?
        };
        let admin_root = self.common_dir.join("worktrees");
        let mut linked = Vec::new();
        match std::fs::read_dir(&admin_root) {
            Ok(entries) => {
                for e in entries {
                    let e = e.ok()?;
                    linked.push(linked_from_files(&facts, &e.path())?);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        linked.sort_by(|a, b| {
            a.path
                .as_os_str()
                .as_encoded_bytes()
                .cmp(b.path.as_os_str().as_encoded_bytes())
        });
        Some(std::iter::once(main).chain(linked).collect())
    }

    pub(crate) fn rev(&self, spec: &str) -> Result<Option<String>, WorktreeError> {
        if let Some(id) = self.branch_rev_from_files(spec) {
            return Ok(id);
        }
        let out = self
            .git
            .call(&["rev-parse", "-q", "--verify", "--end-of-options", spec])
            .output()?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((out.status.success() && !id.is_empty()).then_some(id))
    }

    /// `refs/heads/NAME` or `refs/heads/NAME^{commit}` read from the ref files (no git
    /// process); `None` when the spec is anything else or the files are unusual.
    /// A short `NAME^{commit}` too, when nothing git would try first (a file
    /// `$GIT_DIR/NAME`, `refs/NAME`, `refs/tags/NAME`) exists and the branch does.
    fn branch_rev_from_files(&self, spec: &str) -> Option<Option<String>> {
        let facts = self.git.facts().ok()?;
        if let Some(name) = spec.strip_prefix("refs/heads/") {
            let name = name.strip_suffix("^{commit}").unwrap_or(name);
            crate::config::check_branch_name(name).ok()?;
            return super::refs::branch_id(&facts, name);
        }
        let name = spec.strip_suffix("^{commit}")?;
        crate::config::check_branch_name(name).ok()?;
        let shadowed = [&facts.git_dir, &facts.common_dir]
            .iter()
            .any(|d| d.join(name).exists())
            || ["refs", "refs/tags"].iter().any(|dir| {
                let full = format!("{dir}/{name}");
                facts.common_dir.join(&full).exists()
                    || super::refs::packed_has(&facts, &full) != Some(false)
            });
        if shadowed {
            return None;
        }
        // A branch that does not exist may still be a remote's: git decides.
        super::refs::branch_id(&facts, name).filter(Option::is_some)
    }

    pub(crate) fn check_branch(&self, branch: &str) -> Result<(), WorktreeError> {
        // The common names pass the in-process rules (stricter than git's); git decides
        // the rest.
        if crate::config::check_branch_name(branch).is_ok() {
            return Ok(());
        }
        let ok = !branch.starts_with('-')
            && self
                .git
                .call(&["check-ref-format", &format!("refs/heads/{branch}")])
                .output()?
                .status
                .success();
        if ok {
            Ok(())
        } else {
            Err(WorktreeError::BadBranch(branch.to_string()))
        }
    }
}

/// Whether git's main work tree `main` is the plain layout: its `.git` is the common dir.
fn is_plain_main(main: &Path, common_dir: &Path) -> bool {
    let dot_git = main.join(".git");
    dot_git.is_dir()
        && dot_git.canonicalize().ok().as_deref() == Some(common_dir)
        && common_dir.canonicalize().ok().as_deref() == Some(common_dir)
}

/// HEAD and its branch from a git dir's `HEAD` and the ref files (`facts.git_dir` is the
/// git dir); `None`: ask git.
fn head_from_files(facts: &super::refs::RepoFacts) -> Option<Registered> {
    let branch = super::refs::head_branch(facts)?.map(|b| format!("refs/heads/{b}"));
    let head = super::refs::head(facts)?;
    Some(Registered {
        head,
        branch,
        ..Registered::default()
    })
}

/// One linked worktree from its administrative directory `admin`; `None`: ask git.
fn linked_from_files(facts: &super::refs::RepoFacts, admin: &Path) -> Option<Registered> {
    let gitdir = std::fs::read_to_string(admin.join("gitdir")).ok()?;
    // git trims trailing white space, then drops `/.git`.
    let gitdir = Path::new(gitdir.trim_end());
    let path = gitdir.to_str()?.strip_suffix("/.git")?;
    if !gitdir.is_absolute() || path.is_empty() {
        return None;
    }
    let locked = match std::fs::read_to_string(admin.join("locked")) {
        Ok(reason) => Some(reason.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => return None,
    };
    let mut own = facts.clone();
    own.git_dir = admin.to_path_buf();
    Some(Registered {
        path: PathBuf::from(path),
        // `worktree list` (no `--expire`): a locked one is never prunable, else one whose
        // `.git` file is gone is.
        // (`lstat`, as git's `file_exists`: a dangling link still counts.)
        prunable: locked.is_none() && std::fs::symlink_metadata(gitdir).is_err(),
        locked,
        ..head_from_files(&own)?
    })
}

pub(crate) fn parse_worktree_list(out: &[u8]) -> Vec<Registered> {
    let mut all = Vec::new();
    let mut cur: Option<Registered> = None;
    for field in out.split(|b| *b == 0) {
        let field = String::from_utf8_lossy(field);
        if field.is_empty() {
            all.extend(cur.take());
            continue;
        }
        let (key, value) = field.split_once(' ').unwrap_or((&field, ""));
        if key == "worktree" {
            all.extend(cur.take());
            cur = Some(Registered {
                path: PathBuf::from(value),
                ..Registered::default()
            });
            continue;
        }
        let Some(r) = cur.as_mut() else { continue };
        match key {
            "HEAD" => r.head = Some(value.to_string()).filter(|h| h.bytes().any(|b| b != b'0')),
            "branch" => r.branch = Some(value.to_string()),
            "prunable" => r.prunable = true,
            "locked" => r.locked = Some(value.to_string()),
            "bare" => r.bare = true,
            _ => {}
        }
    }
    all.extend(cur);
    all
}

/// The registered worktree at `path` (compared after resolving symlinks).
pub(crate) fn find<'a>(all: &'a [Registered], path: &Path) -> Option<&'a Registered> {
    let want = path
        .canonicalize()
        .unwrap_or_else(|_| crate::fsutil::normalize(path));
    all.iter().find(|r| {
        r.path == path
            || r.path
                .canonicalize()
                .unwrap_or_else(|_| crate::fsutil::normalize(&r.path))
                == want
    })
}

/// Files with uncommitted changes or untracked (ignored files do not count), as git
/// prints them with `-z`.
pub(crate) fn dirty_files(dir: &Path) -> Result<Vec<String>, WorktreeError> {
    let out = Git::new(dir)
        .call(&[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=none",
        ])
        .bytes()?;
    let mut files = Vec::new();
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(f) = fields.next() {
        if f.len() > 3 {
            files.push(String::from_utf8_lossy(&f[3..]).into_owned());
        }
        // A rename or copy is followed by its source path.
        if matches!(f.first(), Some(b'R' | b'C')) {
            fields.next();
        }
    }
    Ok(files)
}

pub(crate) fn summarize(files: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut s = files
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > SHOWN {
        s.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    s
}

/// `refs/heads/x` → `x`.
pub(crate) fn short(r: &str) -> &str {
    r.strip_prefix("refs/heads/").unwrap_or(r)
}

/// Held around each `git worktree add|remove|list|prune` (only the git command itself):
/// git's shared `.git/worktrees/` is not safe under concurrent changes (removing the last
/// worktree deletes the directory another `add` is creating its entry in; `list` fails on
/// an entry still being made). The work around it stays parallel per name.
const GIT_WORKTREE_LOCK: &str = "git-worktree.lock";

/// `git worktree remove` of the last worktree deletes the then empty `.git/worktrees/`;
/// a `git worktree add` of another name at that moment (names have their own locks, so
/// the two may overlap) fails with "could not create directory of '.git/worktrees/…'".
/// Nothing is half made that a second try does not handle (a branch made by `-b` is
/// then reused), so try again, a few times.
fn retry_add_race<T>(
    mut attempt: impl FnMut() -> Result<T, WorktreeError>,
) -> Result<T, WorktreeError> {
    let mut tries = 0;
    loop {
        match attempt() {
            Err(e) if tries < 4 && e.to_string().contains("could not create directory of") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * tries));
            }
            other => return other,
        }
    }
}

fn check_name(name: &str) -> Result<(), WorktreeError> {
    let ok = !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(WorktreeError::BadName(name.to_string()))
    }
}

fn is_empty_dir(path: &Path) -> bool {
    std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{commit_all, git, init};

    fn repo() -> (tempfile::TempDir, PathBuf, Worktrees) {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        std::fs::write(repo.join("a.txt"), "one\n").unwrap();
        commit_all(&repo, "initial");
        let wt = Worktrees::open(&repo, Path::new(DEFAULT_BASE)).unwrap();
        (d, repo, wt)
    }

    /// `rev` answers from the ref files what git would: branches loose and packed, short
    /// names, and names a tag or a `refs/NAME` shadows (git's order decides).
    #[test]
    fn rev_from_ref_files_agrees_with_git() {
        let (_d, repo, wt) = repo();
        git(&repo, &["branch", "side"]);
        git(&repo, &["branch", "deep/name"]);
        std::fs::write(repo.join("a.txt"), "two\n").unwrap();
        commit_all(&repo, "second");
        git(&repo, &["tag", "-a", "-m", "t", "side", "HEAD"]);
        git(&repo, &["update-ref", "refs/deep/name", "HEAD"]);
        let specs = [
            "main^{commit}",
            "side^{commit}",
            "deep/name^{commit}",
            "nope^{commit}",
            "refs/heads/main",
            "refs/heads/side^{commit}",
            "refs/heads/nope",
            "refs/heads/nope^{commit}",
        ];
        let check = |when: &str| {
            for spec in specs {
                let out = std::process::Command::new("git")
                    .arg("-C")
                    .arg(&repo)
                    .args(["rev-parse", "-q", "--verify", "--end-of-options", spec])
                    .output()
                    .unwrap();
                let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let want = (out.status.success() && !id.is_empty()).then_some(id);
                assert_eq!(wt.rev(spec).unwrap(), want, "{when}: {spec}");
            }
        };
        check("loose");
        git(&repo, &["pack-refs", "--all"]);
        check("packed");
    }

    /// Removing the last worktree deletes `.git/worktrees/`; adding another name at that
    /// moment must still succeed (it is retried), whatever the interleaving.
    #[test]
    fn adds_and_removes_of_different_names_at_once_all_succeed() {
        let (_d, repo, _) = repo();
        let workers: Vec<_> = ["a1", "b2", "c3", "d4"]
            .into_iter()
            .map(|n| {
                let repo = repo.clone();
                std::thread::spawn(move || {
                    let wt = Worktrees::open(&repo, Path::new(DEFAULT_BASE)).unwrap();
                    for i in 0..40 {
                        let name = format!("{n}-run-{i}");
                        wt.ensure(&name, &format!("td/{name}"), "main").unwrap();
                        wt.remove(&name, true, false).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    }

    #[test]
    fn ensure_creates_an_ignored_worktree_on_a_new_branch() {
        let (_d, repo, wt) = repo();
        assert_eq!(wt.base(), repo.join(".taskdaemon/worktrees"));
        let p = wt.ensure("abc123-spec-x", "td/x", "main").unwrap();
        assert_eq!(p, wt.path_for("abc123-spec-x"));
        assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "one\n");
        assert_eq!(git(&p, &["symbolic-ref", "HEAD"]), "refs/heads/td/x");
        assert_eq!(
            git(&p, &["rev-parse", "HEAD"]),
            git(&repo, &["rev-parse", "main"])
        );
        // The user's checkout does not see it; only info/exclude was written.
        assert_eq!(
            git(&repo, &["status", "--porcelain", "--untracked-files=all"]),
            ""
        );
        let exclude = std::fs::read_to_string(repo.join(".git/info/exclude")).unwrap();
        assert!(
            exclude.lines().any(|l| l == "/.taskdaemon/worktrees/"),
            "{exclude}"
        );
        // Opening again adds nothing.
        Worktrees::open(&repo, Path::new(DEFAULT_BASE)).unwrap();
        let again = std::fs::read_to_string(repo.join(".git/info/exclude")).unwrap();
        assert_eq!(exclude, again);
        let list = wt.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].name, "abc123-spec-x");
        assert_eq!(list[0].branch.as_deref(), Some("td/x"));
        assert!(!list[0].dirty && !list[0].missing && !list[0].locked);
    }

    #[test]
    fn worktrees_of_different_names_are_made_and_removed_at_the_same_time() {
        let (_d, repo, wt) = repo();
        // One name's lock held: the others are made meanwhile, that one waits for it.
        let held = wt.lock_name("w0").unwrap();
        let names: Vec<String> = (0..4).map(|i| format!("w{i}")).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for n in &names {
                let (wt, tx) = (wt.clone(), tx.clone());
                s.spawn(move || {
                    let r = wt.ensure(n, &format!("td/{n}"), "main");
                    tx.send((n.clone(), r.map_err(|e| e.to_string()))).unwrap();
                });
            }
            let mut first: Vec<String> = (0..3).map(|_| rx.recv().unwrap().0).collect();
            first.sort();
            assert_eq!(first, ["w1", "w2", "w3"]);
            drop(held);
            let (last, r) = rx.recv().unwrap();
            assert_eq!(last, "w0");
            r.unwrap();
        });
        let list = wt.list().unwrap();
        assert_eq!(
            list.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(),
            ["w0", "w1", "w2", "w3"]
        );
        std::thread::scope(|s| {
            for n in &names {
                let wt = wt.clone();
                s.spawn(move || wt.remove(n, false, false).unwrap());
            }
        });
        assert!(wt.list().unwrap().is_empty());
        assert_eq!(
            git(&repo, &["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
    }

    #[test]
    fn ensure_reuses_without_resetting_anything() {
        let (_d, _repo, wt) = repo();
        let p = wt.ensure("w1", "td/w1", "main").unwrap();
        std::fs::write(p.join("b.txt"), "committed\n").unwrap();
        commit_all(&p, "work");
        let head = git(&p, &["rev-parse", "HEAD"]);
        std::fs::write(p.join("a.txt"), "edited, not committed\n").unwrap();
        std::fs::write(p.join("new.txt"), "untracked\n").unwrap();
        git(&p, &["add", "new.txt"]);
        let index = std::fs::read(git(&p, &["rev-parse", "--git-path", "index"])).unwrap();
        assert_eq!(wt.ensure("w1", "td/w1", "main").unwrap(), p);
        assert_eq!(git(&p, &["rev-parse", "HEAD"]), head);
        assert_eq!(
            std::fs::read_to_string(p.join("a.txt")).unwrap(),
            "edited, not committed\n"
        );
        assert_eq!(
            std::fs::read_to_string(p.join("new.txt")).unwrap(),
            "untracked\n"
        );
        assert_eq!(
            std::fs::read(git(&p, &["rev-parse", "--git-path", "index"])).unwrap(),
            index
        );
        assert!(wt.list().unwrap()[0].dirty);
        // Another branch for the same name is refused.
        let e = wt.ensure("w1", "td/other", "main").unwrap_err();
        assert!(matches!(e, WorktreeError::WrongBranch { .. }), "{e}");
    }

    #[test]
    fn a_stale_registration_is_recreated_on_its_branch() {
        let (_d, _repo, wt) = repo();
        let p = wt.ensure("w1", "td/w1", "main").unwrap();
        std::fs::write(p.join("b.txt"), "kept on the branch\n").unwrap();
        commit_all(&p, "work");
        let head = git(&p, &["rev-parse", "HEAD"]);
        std::fs::remove_dir_all(&p).unwrap();
        let l = wt.list().unwrap();
        assert!(l[0].missing && !l[0].dirty);
        assert_eq!(wt.ensure("w1", "td/w1", "main").unwrap(), p);
        assert_eq!(git(&p, &["rev-parse", "HEAD"]), head);
        assert_eq!(
            std::fs::read_to_string(p.join("b.txt")).unwrap(),
            "kept on the branch\n"
        );
        assert!(!wt.list().unwrap()[0].missing);
    }

    #[test]
    fn a_directory_that_is_not_a_worktree_is_refused_and_kept() {
        let (_d, _repo, wt) = repo();
        let p = wt.path_for("w1");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("precious"), "x").unwrap();
        let e = wt.ensure("w1", "td/w1", "main").unwrap_err();
        assert!(matches!(e, WorktreeError::NotAWorktree { .. }), "{e}");
        assert!(e.to_string().contains("hint:"));
        let e = wt.remove("w1", true, false).unwrap_err();
        assert!(matches!(e, WorktreeError::NotAWorktree { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(p.join("precious")).unwrap(), "x");
        // An empty directory is used.
        std::fs::remove_file(p.join("precious")).unwrap();
        wt.ensure("w1", "td/w1", "main").unwrap();
        assert!(p.join("a.txt").exists());
    }

    #[test]
    fn bad_names_branches_and_starts_are_refused() {
        let (_d, _repo, wt) = repo();
        for n in ["", "../x", "a/b", ".hidden", "-x"] {
            assert!(
                matches!(wt.ensure(n, "td/x", "main"), Err(WorktreeError::BadName(_))),
                "{n}"
            );
        }
        assert!(matches!(
            wt.ensure("w", "a..b", "main"),
            Err(WorktreeError::BadBranch(_))
        ));
        assert!(matches!(
            wt.ensure("w", "td/w", "nope"),
            Err(WorktreeError::BadStart { .. })
        ));
        assert!(!wt.path_for("w").exists());
        let e = wt.ensure("w", "main", "main").unwrap_err();
        assert!(matches!(e, WorktreeError::BranchElsewhere { .. }), "{e}");
    }

    #[test]
    fn remove_refuses_uncommitted_work_and_unmerged_branches() {
        let (_d, repo, wt) = repo();
        let p = wt.ensure("w1", "td/w1", "main").unwrap();
        std::fs::write(p.join("untracked.txt"), "x").unwrap();
        let e = wt.remove("w1", false, false).unwrap_err();
        assert!(matches!(e, WorktreeError::Dirty { .. }), "{e}");
        assert!(e.to_string().contains("untracked.txt"), "{e}");
        assert!(p.join("untracked.txt").exists());
        commit_all(&p, "work");
        let e = wt.remove("w1", false, true).unwrap_err();
        assert!(matches!(e, WorktreeError::Unmerged { .. }), "{e}");
        assert!(p.exists());
        // Once another branch holds the commit, the branch can go too.
        git(&repo, &["branch", "keep", "td/w1"]);
        wt.remove("w1", false, true).unwrap();
        assert!(!p.exists());
        assert_eq!(git(&repo, &["branch", "--list", "td/w1"]), "");
        assert!(wt.list().unwrap().is_empty());
        // Removing what is not there is not an error.
        wt.remove("w1", false, false).unwrap();
        // Forced: dirty files go, the branch stays.
        let p = wt.ensure("w2", "td/w2", "main").unwrap();
        std::fs::write(p.join("a.txt"), "dirty").unwrap();
        wt.remove("w2", true, false).unwrap();
        assert!(!p.exists());
        assert_ne!(git(&repo, &["branch", "--list", "td/w2"]), "");
    }

    #[test]
    fn prune_removes_finished_and_stale_and_keeps_the_rest() {
        let (_d, repo, wt) = repo();
        let done = wt.ensure("done", "td/done", "main").unwrap();
        let dirty = wt.ensure("dirty", "td/dirty", "main").unwrap();
        std::fs::write(dirty.join("a.txt"), "changed").unwrap();
        let running = wt.ensure("running", "td/running", "main").unwrap();
        let gone = wt.ensure("gone", "td/gone", "main").unwrap();
        std::fs::remove_dir_all(&gone).unwrap();
        let finished = |n: &str| n != "running";
        let r = wt.prune(&finished, false).unwrap();
        let names = |v: &[Pruned]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&r.removed), ["done", "gone"]);
        assert_eq!(names(&r.kept), ["dirty", "running"]);
        assert!(r.kept[0].reason.contains("uncommitted"));
        assert!(!done.exists() && dirty.exists() && running.exists());
        // Branches stay.
        assert_ne!(git(&repo, &["branch", "--list", "td/done"]), "");
        let r = wt.prune(&finished, true).unwrap();
        assert_eq!(names(&r.removed), ["dirty"]);
        assert_eq!(names(&r.kept), ["running"]);
        assert!(!dirty.exists());
    }

    /// The list read from the administrative files is git's, field by field, in every
    /// shape `worktree list` shows; unusual layouts are left to git.
    #[test]
    fn the_list_from_files_is_gits() {
        let (d, repo, wt) = repo();
        let same = |when: &str| {
            let files = wt.registered_from_files().expect(when);
            let git = wt.registered_from_git().unwrap();
            let show = |v: &[Registered]| format!("{v:?}");
            assert_eq!(show(&files), show(&git), "{when}");
        };
        same("main only");
        wt.ensure("b-branch", "td/b", "main").unwrap();
        wt.detached("a-detached", "main").unwrap();
        same("a branch and a detached one");
        let unborn = d.path().canonicalize().unwrap().join("unborn");
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "unborn",
                "--orphan",
                unborn.to_str().unwrap(),
            ],
        );
        let outside = d.path().canonicalize().unwrap().join("out side");
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "td/o",
                outside.to_str().unwrap(),
            ],
        );
        git(
            &repo,
            &[
                "worktree",
                "lock",
                "--reason",
                " two\nlines ",
                outside.to_str().unwrap(),
            ],
        );
        let locked_gone = wt.ensure("c-locked", "td/c", "main").unwrap();
        git(&repo, &["worktree", "lock", locked_gone.to_str().unwrap()]);
        std::fs::remove_dir_all(&locked_gone).unwrap();
        std::fs::remove_dir_all(wt.ensure("d-gone", "td/d", "main").unwrap()).unwrap();
        same("unborn, locked with and without a reason, gone");
        git(&repo, &["pack-refs", "--all"]);
        git(&repo, &["checkout", "-q", "--detach", "main"]);
        same("packed refs, the main one detached");
        // Unusual: a relative gitdir, an entry being made, a symbolic ref: git answers.
        let admin = repo.join(".git/worktrees/b-branch");
        let saved = std::fs::read_to_string(admin.join("gitdir")).unwrap();
        std::fs::write(admin.join("gitdir"), "../x/.git\n").unwrap();
        assert!(wt.registered_from_files().is_none());
        std::fs::write(admin.join("gitdir"), &saved).unwrap();
        std::fs::create_dir(repo.join(".git/worktrees/half-made")).unwrap();
        assert!(wt.registered_from_files().is_none());
        assert!(wt.registered().is_ok());
        std::fs::remove_dir(repo.join(".git/worktrees/half-made")).unwrap();
        git(
            &repo,
            &["symbolic-ref", "refs/heads/alias", "refs/heads/main"],
        );
        std::fs::write(admin.join("HEAD"), "ref: refs/heads/alias\n").unwrap();
        assert!(wt.registered_from_files().is_none());
        assert_eq!(wt.registered().unwrap().len(), 7);
    }

    #[test]
    fn worktree_list_output_is_parsed() {
        let out = b"worktree /r\0HEAD 1111\0branch refs/heads/main\0\0worktree /r/w\0HEAD 2222\0detached\0locked\0prunable gitdir file points to non-existent location\0\0";
        let all = parse_worktree_list(out);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].branch.as_deref(), Some("refs/heads/main"));
        assert!(all[1].branch.is_none() && all[1].prunable && all[1].locked.is_some());
    }

    #[test]
    fn a_base_outside_the_repository_is_not_excluded() {
        let (d, repo, _) = repo();
        let outside = d.path().canonicalize().unwrap().join("trees");
        let wt = Worktrees::open(&repo, &outside).unwrap();
        assert_eq!(wt.base(), outside);
        let p = wt.ensure("w", "td/w", "main").unwrap();
        assert!(p.starts_with(&outside));
        let exclude = std::fs::read_to_string(repo.join(".git/info/exclude")).unwrap_or_default();
        assert!(!exclude.lines().any(|l| l.contains("/trees")), "{exclude}");
        // Opened from inside a linked worktree, relative bases still start at the main one.
        let from_inside = Worktrees::open(&p, Path::new(DEFAULT_BASE)).unwrap();
        assert_eq!(from_inside.base(), repo.join(DEFAULT_BASE));
    }
}
