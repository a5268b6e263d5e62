//! Work shared through a git remote, for daemons on several machines (issue 19).
//!
//! * A run's branch is pushed after every iteration that committed ([`Remote::push_branch`]):
//!   with a lease on what this clone last saw of it (`--force-with-lease=ref:<expected>`),
//!   so a takeover may replace what a dead holder pushed, and nobody replaces what it did
//!   not see. A rejected push is reported, not an error: the next iteration pushes again.
//! * A run that goes on here after another machine ([`Remote::adopt`]: a takeover, or the
//!   next phase of a spec whose last phase ran elsewhere) first takes the branch as the
//!   remote has it: created from it, fast-forwarded to it, or — when the local branch went
//!   another way (a stale worktree of a machine that died) — replaced by it after the local
//!   commits are kept under `refs/taskdaemon/stale/…` and uncommitted files in a stash.
//! * A merge into a target ([`Remote::merge`]) is made against the fetched remote target in
//!   the integration worktree (the same machinery as `integrate`), then pushed with a lease on
//!   the tip it was made on; when someone moved the target meanwhile the push is rejected and
//!   the merge is redone on the new tip, a bounded number of times. A branch already contained
//!   in the remote target is not merged again (idempotent).

use std::path::Path;

use super::integrate::{IntegrateError, Onto, merge_onto};
use super::worktree::{WorktreeError, Worktrees, find};
use super::{Git, GitError};

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(
        "the repository {repo} has no git remote `{name}`\n  hint: add the shared remote (`git remote add {name} URL`) or name another with `queue-remote` in .taskdaemon/config.yaml"
    )]
    NoRemote { name: String, repo: String },
    #[error(
        "cannot merge into {target}: the remote `{remote}` has no such branch\n  hint: push it first (`git push {remote} {target}`), or merge into a branch the remote has"
    )]
    NoTarget { target: String, remote: String },
    #[error(
        "cannot merge: branch {0} does not exist here\n  hint: the run's worktree makes it; `taskdaemon resume` the run to make it again"
    )]
    NoBranch(String),
    #[error(
        "{target} on `{remote}` kept moving while taskdaemon merged into it ({tries} tries)\n  hint: retry once whatever pushes to {target} has finished (`taskdaemon resume RUN`)"
    )]
    KeptMoving {
        target: String,
        remote: String,
        tries: usize,
    },
    #[error(
        "the remote `{remote}` refused {what}: {reason}\n  hint: check that this machine may push there (`git push {remote}` by hand shows why)"
    )]
    Refused {
        remote: String,
        what: String,
        reason: String,
    },
    #[error(
        "TASKDAEMON_REMOTE_TIMEOUT: {reason}\n  hint: set it to how long one fetch or push may take (default 5m), or unset it"
    )]
    BadTimeout { reason: String },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    #[error(transparent)]
    Integrate(#[from] IntegrateError),
}

/// A file kept on the remote: its path from the repository's top, its bytes.
pub type File = (String, Vec<u8>);

/// How a push of a run's branch went.
#[derive(Debug, Clone, PartialEq)]
pub enum Pushed {
    /// The remote now has this commit.
    Pushed { commit: String },
    /// The remote had it already (nothing to send).
    UpToDate,
    /// The remote holds something this clone has not seen (its lease failed): nothing was
    /// replaced. The reason as git gives it.
    Rejected { reason: String },
    /// Not pushed: commits the remote lacks add files that look like secrets
    /// (`crate::secrets`), named here. The branch keeps them; the remote keeps what it had.
    Held { paths: Vec<String> },
}

/// What [`Remote::adopt`] did to the local branch.
#[derive(Debug, Clone, PartialEq)]
pub enum Adopted {
    /// The remote has no such branch (the run starts here).
    NotOnRemote,
    /// The local branch is the remote's.
    Same,
    /// The local branch was made at the remote's commit.
    Created { commit: String },
    /// The local branch (and its worktree) moved forward to the remote's commit.
    FastForwarded { commit: String },
    /// The local branch has commits the remote lacks (unpushed work of this clone): kept,
    /// the next push sends them.
    Ahead,
    /// The local branch went another way: it is kept under `saved`, uncommitted files in
    /// `stash` (a commit id), and the branch is now the remote's commit.
    Replaced {
        commit: String,
        saved: String,
        stash: Option<String>,
    },
}

/// How a merge into the remote's target ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteMerge {
    /// The remote target moved to `commit` (the branch itself when a fast-forward).
    Merged {
        commit: String,
        fast_forward: bool,
        tries: usize,
    },
    /// The branch is already contained in the remote target (merged before, by anyone).
    AlreadyIn { commit: String },
    /// Nothing changed anywhere; these files conflict.
    Conflict { files: Vec<String> },
}

/// A git remote shared by the clones of one repository.
#[derive(Debug, Clone)]
pub struct Remote {
    wt: Worktrees,
    name: String,
    /// How long one git command talking to the remote may take ([`remote_timeout`]).
    timeout: std::time::Duration,
}

impl Remote {
    /// The remote `name` of the repository `worktrees` belongs to; an error with a hint when
    /// it has none of that name.
    pub fn open(worktrees: &Worktrees, name: &str) -> Result<Remote, RemoteError> {
        let r = Remote {
            wt: worktrees.clone(),
            name: name.to_string(),
            timeout: remote_timeout()?,
        };
        let known = r.git().run(&["remote"])?;
        if !known.lines().any(|l| l.trim() == name) {
            return Err(RemoteError::NoRemote {
                name: name.to_string(),
                repo: worktrees.top().display().to_string(),
            });
        }
        Ok(r)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn git(&self) -> &Git {
        self.wt.git()
    }

    /// A git command that talks to the remote: ended after [`remote_timeout`].
    fn net(&self, args: &[&str]) -> super::Call<'_> {
        self.git().call(args).deadline(self.timeout)
    }

    /// This remote with another time limit for its git commands (tests).
    #[cfg(test)]
    pub(crate) fn with_timeout(mut self, timeout: std::time::Duration) -> Remote {
        self.timeout = timeout;
        self
    }

    fn tracking(&self, branch: &str) -> String {
        format!("refs/remotes/{}/{branch}", self.name)
    }

    /// The remote's commit of `branch` (`None`: it has no such branch), fetched into
    /// `refs/remotes/<remote>/<branch>` (a tracking ref it no longer has is deleted).
    pub fn fetch(&self, branch: &str) -> Result<Option<String>, RemoteError> {
        self.wt.check_branch(branch)?;
        let head = format!("refs/heads/{branch}");
        let listed = self.net(&["ls-remote", "--", &self.name, &head]).text()?;
        let tip = listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, r)| *r == head)
            .map(|(c, _)| c.to_string());
        let tracking = self.tracking(branch);
        let Some(tip) = tip else {
            if self.wt.rev(&tracking)?.is_some() {
                self.git().run(&["update-ref", "-d", &tracking])?;
            }
            return Ok(None);
        };
        let have = self
            .git()
            .call(&["cat-file", "-e", &format!("{tip}^{{commit}}")])
            .output()?
            .status
            .success();
        if !have {
            let spec = format!("+{head}:{tracking}");
            self.net(&[
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                &self.name,
                &spec,
            ])
            .bytes()?;
        }
        // The tracking ref is the remote's tip as seen now (what a lease compares with).
        self.git().run(&["update-ref", &tracking, &tip])?;
        Ok(Some(tip))
    }

    /// Push the local `branch` to the remote's `branch`, replacing only what this clone last
    /// saw there (its tracking ref; none: the remote must not have it).
    pub fn push_branch(&self, branch: &str) -> Result<Pushed, RemoteError> {
        self.push_branch_marked(branch, None)
    }

    /// [`Remote::push_branch`], and with it (`--atomic`: both or neither) the `mark` of the
    /// iterations a run finished on that commit ([`marks`]), so whoever takes the run over
    /// reads how far the work on the remote got even when its record was never written.
    pub fn push_branch_marked(
        &self,
        branch: &str,
        mark: Option<&marks::Mark>,
    ) -> Result<Pushed, RemoteError> {
        self.wt.check_branch(branch)?;
        let local = self
            .wt
            .rev(&format!("refs/heads/{branch}^{{commit}}"))?
            .ok_or_else(|| RemoteError::NoBranch(branch.to_string()))?;
        let tracking = self.tracking(branch);
        let expected = self.wt.rev(&tracking)?;
        let mark = match mark {
            Some(m) => Some(self.mark_spec(m, &local)?),
            None => None,
        };
        if expected.as_deref() == Some(local.as_str()) {
            if let Some(spec) = &mark {
                self.push_mark(spec)?;
            }
            return Ok(Pushed::UpToDate);
        }
        // What the remote lacks: since its tip as last seen, else what no other branch or
        // tracking ref of this clone holds.
        let added = match &expected {
            Some(seen) => crate::secrets::added_in(self.git(), &[&format!("{seen}..{local}")])?,
            None => crate::secrets::added_in(
                self.git(),
                &[
                    &local,
                    "--not",
                    &format!("--exclude={branch}"),
                    "--branches",
                    &format!("--remotes={}", self.name),
                ],
            )?,
        };
        if !added.is_empty() {
            return Ok(Pushed::Held {
                paths: crate::secrets::paths(&added),
            });
        }
        match self.push(
            &local,
            branch,
            expected.as_deref().unwrap_or(""),
            mark.as_deref(),
        )? {
            None => {
                self.git().run(&["update-ref", &tracking, &local])?;
                Ok(Pushed::Pushed { commit: local })
            }
            Some(reason) => Ok(Pushed::Rejected { reason }),
        }
    }

    /// `git push` of `commit` to the remote's `branch` with a lease on `expected` (empty:
    /// must not exist). `None` when pushed; `Some(reason)` when the remote rejected the
    /// update (its ref is not what we expected); other failures are errors.
    fn push(
        &self,
        commit: &str,
        branch: &str,
        expected: &str,
        mark: Option<&str>,
    ) -> Result<Option<String>, RemoteError> {
        let dst = format!("refs/heads/{branch}");
        let lease = format!("--force-with-lease={dst}:{expected}");
        let spec = format!("{commit}:{dst}");
        let mut args = vec!["push", "--porcelain", "--no-verify", &lease];
        if mark.is_some() {
            args.push("--atomic");
        }
        args.extend(["--", &self.name, &spec]);
        args.extend(mark);
        let out = self.net(&args).output()?;
        if out.status.success() {
            return Ok(None);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        // `--porcelain`: a rejected ref is a line `!<TAB>src:dst<TAB>[rejected] (why)`. Only
        // `[rejected]` means the ref moved under the lease (fetch and redo); `[remote
        // rejected]` is the remote's refusal (a hook, a protected branch): redoing cannot help.
        if let Some(line) = stdout.lines().find(|l| l.starts_with('!')) {
            let reason = line.rsplit('\t').next().unwrap_or(line).trim().to_string();
            if reason.starts_with("[rejected]") {
                return Ok(Some(reason));
            }
            return Err(RemoteError::Refused {
                remote: self.name.clone(),
                what: format!("a push to {branch}"),
                reason,
            });
        }
        Err(RemoteError::Refused {
            remote: self.name.clone(),
            what: format!("a push to {branch}"),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Take the remote's `branch` before a run goes on here (see the module documentation).
    /// `worktree` is the directory the branch is (or will be) checked out in.
    pub fn adopt(&self, branch: &str, worktree: &Path) -> Result<Adopted, RemoteError> {
        let Some(remote) = self.fetch(branch)? else {
            return Ok(Adopted::NotOnRemote);
        };
        let full = format!("refs/heads/{branch}");
        let Some(local) = self.wt.rev(&format!("{full}^{{commit}}"))? else {
            self.git()
                .run(&["update-ref", "-m", "taskdaemon: adopt", &full, &remote, ""])?;
            return Ok(Adopted::Created { commit: remote });
        };
        if local == remote {
            return Ok(Adopted::Same);
        }
        if self.is_ancestor(&remote, &local)? {
            return Ok(Adopted::Ahead);
        }
        let checked_out = self.checked_out(&full, worktree)?;
        let forward = self.is_ancestor(&local, &remote)?;
        let saved = if forward {
            None
        } else {
            let saved = format!(
                "refs/taskdaemon/stale/{branch}/{}",
                &local[..local.len().min(12)]
            );
            self.git().run(&[
                "update-ref",
                "-m",
                "taskdaemon: kept before adopting the remote's",
                &saved,
                &local,
            ])?;
            Some(saved)
        };
        let stash = match &checked_out {
            Some(dir) => self.reset_worktree(dir, &remote)?,
            None => {
                self.git().run(&[
                    "update-ref",
                    "-m",
                    "taskdaemon: adopt",
                    &full,
                    &remote,
                    &local,
                ])?;
                None
            }
        };
        Ok(match saved {
            None if stash.is_none() => Adopted::FastForwarded { commit: remote },
            None => Adopted::Replaced {
                commit: remote,
                saved: local,
                stash,
            },
            Some(saved) => Adopted::Replaced {
                commit: remote,
                saved,
                stash,
            },
        })
    }

    /// Before a worktree of finished work is removed here: what only this clone has of
    /// `branch` — commits the remote's branch and `target` lack, uncommitted files in `dir` —
    /// kept under `refs/taskdaemon/stale/<branch>/…` (files: in a stash). What was kept.
    pub fn keep_unpushed(
        &self,
        branch: &str,
        target: &str,
        dir: &Path,
    ) -> Result<Vec<String>, RemoteError> {
        let mut kept = Vec::new();
        if dir.exists() && !super::worktree::dirty_files(dir)?.is_empty() {
            let g = Git::new(dir);
            let msg = "taskdaemon: left in a worktree of work finished on another machine";
            g.run(&["stash", "push", "-q", "--include-untracked", "-m", msg])?;
            kept.push(format!(
                "uncommitted files in stash {}",
                g.run(&["rev-parse", "refs/stash"])?.trim()
            ));
        }
        let Some(local) = self.wt.rev(&format!("refs/heads/{branch}^{{commit}}"))? else {
            return Ok(kept);
        };
        for r in [branch, target] {
            if let Some(tip) = self.fetch(r)?
                && self.is_ancestor(&local, &tip)?
            {
                return Ok(kept);
            }
        }
        let saved = format!(
            "refs/taskdaemon/stale/{branch}/{}",
            &local[..local.len().min(12)]
        );
        self.git().run(&[
            "update-ref",
            "-m",
            "taskdaemon: kept before removing a stale worktree",
            &saved,
            &local,
        ])?;
        kept.push(format!("commits as {saved}"));
        Ok(kept)
    }

    /// The worktree directory `branch` (full ref) is checked out in, when it is `dir`; a
    /// branch checked out elsewhere is left alone (an error).
    fn checked_out(
        &self,
        full: &str,
        dir: &Path,
    ) -> Result<Option<std::path::PathBuf>, RemoteError> {
        let all = self.wt.registered()?;
        if let Some(r) = find(&all, dir).filter(|r| !r.prunable && dir.exists())
            && r.branch.as_deref() == Some(full)
        {
            return Ok(Some(r.path.clone()));
        }
        if let Some(r) = all
            .iter()
            .find(|r| !r.prunable && r.branch.as_deref() == Some(full))
        {
            return Err(WorktreeError::BranchElsewhere {
                branch: super::worktree::short(full).to_string(),
                elsewhere: r.path.clone(),
            }
            .into());
        }
        Ok(None)
    }

    /// Move the worktree at `dir` (and its branch) to `commit`; uncommitted and untracked
    /// files are kept in a stash first (its commit id returned). Ignored files stay.
    fn reset_worktree(&self, dir: &Path, commit: &str) -> Result<Option<String>, RemoteError> {
        let g = Git::new(dir);
        let dirty = !super::worktree::dirty_files(dir)?.is_empty();
        let stash = if dirty {
            let msg =
                "taskdaemon: left by an iteration on this machine before the run went on elsewhere";
            g.run(&["stash", "push", "-q", "--include-untracked", "-m", msg])?;
            Some(g.run(&["rev-parse", "refs/stash"])?.trim().to_string())
        } else {
            None
        };
        g.run(&["reset", "-q", "--hard", commit])?;
        Ok(stash)
    }

    /// Merge the local `branch` into the remote's `target` (see the module documentation):
    /// at most `tries` attempts when the target keeps moving. The branch itself is pushed
    /// before the target moves, so the work is on the remote whatever happens to this machine.
    pub fn merge(
        &self,
        branch: &str,
        target: &str,
        message: &str,
        tries: usize,
    ) -> Result<RemoteMerge, RemoteError> {
        self.merge_hooked(branch, target, message, tries, &mut |_| {})
    }

    /// [`Remote::merge`] with a hook called before each push of the target (tests move the
    /// remote there).
    pub(crate) fn merge_hooked(
        &self,
        branch: &str,
        target: &str,
        message: &str,
        tries: usize,
        before_push: &mut dyn FnMut(usize),
    ) -> Result<RemoteMerge, RemoteError> {
        let b = self
            .wt
            .rev(&format!("refs/heads/{branch}^{{commit}}"))?
            .ok_or_else(|| RemoteError::NoBranch(branch.to_string()))?;
        for attempt in 1..=tries.max(1) {
            let t = self.fetch(target)?.ok_or_else(|| RemoteError::NoTarget {
                target: target.to_string(),
                remote: self.name.clone(),
            })?;
            super::integrate::refuse_secrets(self.git(), &t, &b, branch, target)?;
            let (new, fast_forward) = match merge_onto(&self.wt, &t, &b, message)? {
                Onto::UpToDate => return Ok(RemoteMerge::AlreadyIn { commit: t }),
                Onto::Conflict(files) => return Ok(RemoteMerge::Conflict { files }),
                Onto::FastForward => (b.clone(), true),
                Onto::Merge(c) => (c, false),
            };
            if attempt == 1
                && let Pushed::Rejected { reason } = self.push_branch(branch)?
            {
                return Err(RemoteError::Refused {
                    remote: self.name.clone(),
                    what: format!("the branch {branch} (someone else's work is there)"),
                    reason,
                });
            }
            before_push(attempt);
            if self.push(&new, target, &t, None)?.is_none() {
                self.git()
                    .run(&["update-ref", &self.tracking(target), &new])?;
                self.follow_local(target, &new)?;
                return Ok(RemoteMerge::Merged {
                    commit: new,
                    fast_forward,
                    tries: attempt,
                });
            }
        }
        Err(RemoteError::KeptMoving {
            target: target.to_string(),
            remote: self.name.clone(),
            tries: tries.max(1),
        })
    }

    /// The local `target` follows the remote's when it is behind it and not checked out
    /// anywhere (a checked-out target is the user's: they pull).
    fn follow_local(&self, target: &str, new: &str) -> Result<(), RemoteError> {
        let full = format!("refs/heads/{target}");
        let Some(local) = self.wt.rev(&format!("{full}^{{commit}}"))? else {
            return Ok(());
        };
        let out = self.wt.registered()?;
        if out
            .iter()
            .any(|r| !r.prunable && r.branch.as_deref() == Some(full.as_str()))
        {
            return Ok(());
        }
        if self.is_ancestor(&local, new)? {
            // A lost compare-and-swap means someone else moved it: theirs stays.
            let _ = self
                .git()
                .call(&[
                    "update-ref",
                    "-m",
                    "taskdaemon: follow the remote",
                    &full,
                    new,
                    &local,
                ])
                .output()?;
        }
        Ok(())
    }

    /// Keep `files` (path relative to the repository's top, bytes) on the remote under the
    /// ref `refs/taskdaemon/<name>` (not a branch: no checkout ever sees it), replacing what
    /// it held. For the documents a run writes outside git (a plan's spec documents), which
    /// a run on another machine needs.
    pub fn publish_files(&self, name: &str, files: &[File]) -> Result<(), RemoteError> {
        let full = format!("refs/taskdaemon/{name}");
        self.wt.check_branch(&format!("taskdaemon/{name}"))?;
        let scratch = tempfile::Builder::new()
            .prefix("docs-index-")
            .tempdir_in(self.wt.common_dir())
            .map_err(|source| WorktreeError::Io {
                path: self.wt.common_dir().to_path_buf(),
                source,
            })?;
        let index = scratch.path().join("index");
        for (path, bytes) in files {
            let blob = self
                .git()
                .call(&["hash-object", "-w", "--stdin"])
                .input(bytes.clone())
                .text()?;
            self.git()
                .call(&[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{blob},{path}"),
                ])
                .env("GIT_INDEX_FILE", &index)
                .text()?;
        }
        let tree = if files.is_empty() {
            self.git().call(&["mktree"]).input(Vec::new()).text()?
        } else {
            self.git()
                .call(&["write-tree"])
                .env("GIT_INDEX_FILE", &index)
                .text()?
        };
        let commit = self
            .git()
            .call(&[
                "commit-tree",
                &tree,
                "-m",
                &format!("taskdaemon: documents of {name}"),
            ])
            .env("GIT_AUTHOR_NAME", "taskdaemon")
            .env("GIT_AUTHOR_EMAIL", "taskdaemon@localhost")
            .env("GIT_COMMITTER_NAME", "taskdaemon")
            .env("GIT_COMMITTER_EMAIL", "taskdaemon@localhost")
            .text()?;
        let spec = format!("+{commit}:{full}");
        let out = self
            .net(&["push", "-q", "--no-verify", "--", &self.name, &spec])
            .output()?;
        if !out.status.success() {
            return Err(RemoteError::Refused {
                remote: self.name.clone(),
                what: format!("the documents {full}"),
                reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        self.git().run(&["update-ref", &full, &commit])?;
        Ok(())
    }

    /// The files [`Remote::publish_files`] keeps under `name` (`None`: none kept), as
    /// (path, bytes).
    pub fn fetch_files(&self, name: &str) -> Result<Option<Vec<File>>, RemoteError> {
        let full = format!("refs/taskdaemon/{name}");
        self.wt.check_branch(&format!("taskdaemon/{name}"))?;
        let listed = self.net(&["ls-remote", "--", &self.name, &full]).text()?;
        let Some(tip) = listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, r)| *r == full)
            .map(|(c, _)| c.to_string())
        else {
            return Ok(None);
        };
        if self.wt.rev(&full)?.as_deref() != Some(tip.as_str()) {
            let spec = format!("+{full}:{full}");
            self.net(&[
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                &self.name,
                &spec,
            ])
            .bytes()?;
        }
        let listing = self.git().call(&["ls-tree", "-r", "-z", &tip]).bytes()?;
        let mut files = Vec::new();
        for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let entry = String::from_utf8_lossy(entry);
            let Some((meta, path)) = entry.split_once('\t') else {
                continue;
            };
            let mut parts = meta.split_whitespace();
            let (Some(_mode), Some("blob"), Some(blob)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let bytes = self.git().call(&["cat-file", "blob", blob]).bytes()?;
            files.push((path.to_string(), bytes));
        }
        Ok(Some(files))
    }

    fn is_ancestor(&self, a: &str, b: &str) -> Result<bool, RemoteError> {
        Ok(self.git().is_ancestor(a, b)?)
    }
}

#[path = "remote_marks.rs"]
pub mod marks;

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;

/// How long one git command talking to the remote may take: `TASKDAEMON_REMOTE_TIMEOUT`
/// (`90s`, `15m`, a bare number of seconds), else 5 minutes.
fn remote_timeout() -> Result<std::time::Duration, RemoteError> {
    match std::env::var("TASKDAEMON_REMOTE_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => match crate::duration::parse_duration(&v) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(RemoteError::BadTimeout {
                reason: format!("`{v}` is no time at all"),
            }),
            Err(reason) => Err(RemoteError::BadTimeout { reason }),
        },
        _ => Ok(std::time::Duration::from_secs(300)),
    }
}
