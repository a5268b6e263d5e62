//! One wrapper over the `git` CLI. Always `LC_ALL=C`, never prompts, never takes optional
//! locks (a status from the harness must not fight the agent's own git for `index.lock`).
//!
//! **No agent-controlled code.** The agent can write the repository's `.git` (a main
//! checkout without a sandbox), so every invocation turns off what git would run from
//! there on a local operation: the file-system monitor ([`SAFE_CONFIG`]) and the hooks
//! (`core.hooksPath=/dev/null`), unless the call is a commit the user's hooks should see
//! ([`Git::with_user_hooks`]); the diffs that print a patch pass `--no-ext-diff` (an empty
//! `diff.external` is not "none" but a program that cannot start). What `-c` cannot name —
//! a filter, textconv or merge driver of any name, a signing program, a remote's helper
//! or upload/receive program — lives in the repository's config files, which the sandbox
//! mounts read-only and [`guard`] puts back after each iteration.

mod deadline;
mod discover;
pub mod guard;
pub mod integrate;
mod refs;
pub mod remote;
pub mod snapshot;
pub mod stale_locks;
pub mod worktree;

pub use integrate::{IntegrateError, MergeResult, merge_into};
pub use refs::RepoFacts;
pub use worktree::{PruneReport, Pruned, WorktreeError, WorktreeInfo, Worktrees};

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A path of taskdaemon's own in the git directory of the work tree holding `git_at`:
/// `<git-dir>/taskdaemon/<kind>/<key's FNV-1a hash, hex>`. The harness keeps there what
/// belongs to one directory (or spec) and must not live in the work tree, whose files are
/// the repository's and the agent's.
pub fn keyed_private(git_at: &Path, key: &Path, kind: &str) -> Result<PathBuf, GitError> {
    let git_dir = Git::new(git_at).facts()?.git_dir.clone();
    let h = crate::fingerprint::fnv1a_hex(key.as_os_str().as_encoded_bytes());
    Ok(git_dir.join("taskdaemon").join(kind).join(h))
}

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "{0} is not inside a git repository\n  hint: run `git init` there first (taskdaemon measures progress by commits)"
    )]
    NotARepo(PathBuf),
    #[error("cannot run git: {0}\n  hint: install git and make sure it is on PATH")]
    Spawn(std::io::Error),
    #[error(
        "{0} sends every git command in this checkout to another repository's config, hooks and objects; git never writes one in a main checkout (an agent may have planted it), so taskdaemon runs no git here\n  hint: read it (`cat {0}`), then remove it (`rm {0}`)"
    )]
    Redirected(PathBuf),
    #[error("`git {args}` failed in {dir}: {stderr}")]
    Failed {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error(
        "`git {args}` in {dir} did not finish within {after} and was ended (a remote that does not answer, or a prompt nobody can see)\n  hint: run it by hand to see where it waits; `TASKDAEMON_REMOTE_TIMEOUT` (e.g. 15m) allows longer"
    )]
    TimedOut {
        args: String,
        dir: PathBuf,
        after: String,
    },
}

/// Given to every git invocation of taskdaemon's: what git would otherwise run from the
/// repository's config on every local operation that reads the index (status, ls-files,
/// diff, add, checkout, reset, worktree add): the file-system monitor.
pub const SAFE_CONFIG: &[&str] = &["core.fsmonitor=false"];

/// The hooks off: git looks for them in a directory that cannot hold any.
pub const NO_HOOKS: &str = "core.hooksPath=/dev/null";

#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
    /// `-c key=value` settings and environment given to every invocation.
    config: Vec<String>,
    env: Vec<(String, String)>,
    /// Run the repository's hooks (see [`Git::with_user_hooks`]).
    user_hooks: bool,
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git {
            dir: dir.into(),
            config: Vec::new(),
            env: Vec::new(),
            user_hooks: false,
        }
    }

    /// The same wrapper with the repository's hooks on: only for the commits the user's
    /// hooks should see (README, "Git hooks": `implement`/`stories` committing their
    /// files, `implement` cherry-picking a group's commits). The file-system monitor and
    /// the external diff stay off.
    pub fn with_user_hooks(mut self) -> Git {
        self.user_hooks = true;
        self
    }

    /// The same wrapper with `-c` settings and environment for every invocation.
    pub fn with(mut self, config: &[&str], env: &[(&str, &str)]) -> Git {
        self.config.extend(config.iter().map(|c| c.to_string()));
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.arg("-C").arg(&self.dir);
        let hooks = (!self.user_hooks).then_some(NO_HOOKS);
        for kv in SAFE_CONFIG.iter().copied().chain(hooks) {
            c.arg("-c").arg(kv);
        }
        for kv in &self.config {
            c.arg("-c").arg(kv);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.args(args)
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(Stdio::null());
        c
    }

    fn output(&self, args: &[&str]) -> Result<Output, GitError> {
        self.command(args).output().map_err(GitError::Spawn)
    }

    /// Run and return stdout; a non-zero exit is an error carrying stderr.
    pub fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.output(args)?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args: args.join(" "),
                dir: self.dir.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A git invocation with extra environment or input; see [`Call`].
    pub fn call<S: AsRef<OsStr>>(&self, args: &[S]) -> Call<'_> {
        Call {
            git: self,
            args: args.iter().map(|a| a.as_ref().to_os_string()).collect(),
            env: Vec::new(),
            input: None,
            deadline: None,
        }
    }

    /// Every fact about the repository containing `dir` that does not change while a
    /// process runs (top level, git dirs, index, `info/exclude`, object format): one git
    /// process, once per directory and process (see [`RepoFacts`]). Fails outside a work
    /// tree (a bare repository, inside `.git`).
    pub fn facts(&self) -> Result<std::sync::Arc<RepoFacts>, GitError> {
        RepoFacts::of(&self.dir)
    }

    /// The top of the work tree containing `dir` (from [`Git::facts`]).
    pub fn toplevel(&self) -> Result<PathBuf, GitError> {
        Ok(self.facts()?.toplevel.clone())
    }

    /// The common git directory (absolute), once per directory and process.
    pub fn common_dir(&self) -> Result<PathBuf, GitError> {
        if let Ok(f) = self.facts() {
            return Ok(f.common_dir.clone());
        }
        // Outside a work tree (a bare repository) only this one fact exists.
        fact(&self.dir, "--git-common-dir", || {
            let out = self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
            Ok(PathBuf::from(out.trim_end_matches('\n')))
        })
    }

    /// The commit HEAD points at; `None` on an unborn branch. Read from the ref files when
    /// they say it plainly (a branch's loose ref or its `packed-refs` line, a detached
    /// id), else asked of git.
    pub fn head(&self) -> Result<Option<String>, GitError> {
        if let Some(head) = self.facts().ok().and_then(|f| refs::head(&f)) {
            return Ok(head);
        }
        let out = self.output(&["rev-parse", "-q", "--verify", "HEAD^{commit}"])?;
        if !out.status.success() {
            return Ok(None);
        }
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((!id.is_empty()).then_some(id))
    }

    /// The branch checked out here (short name); `None` on a detached HEAD. From the
    /// HEAD file when it says it plainly, else asked of git.
    pub fn current_branch(&self) -> Result<Option<String>, GitError> {
        if let Some(b) = self.facts().ok().and_then(|f| refs::head_branch(&f)) {
            return Ok(b);
        }
        let out = self.output(&["symbolic-ref", "--quiet", "--short", "HEAD"])?;
        let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((out.status.success() && !name.is_empty()).then_some(name))
    }

    /// Whether branch `name` exists (`refs/heads/NAME` names a commit), from the ref
    /// Whether commit `a` is an ancestor of `b` (`merge-base --is-ancestor`); a full id is
    /// its own ancestor without a process.
    pub fn is_ancestor(&self, a: &str, b: &str) -> Result<bool, GitError> {
        if a == b && a.len() >= 40 && a.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Ok(true);
        }
        let out = self.call(&["merge-base", "--is-ancestor", a, b]).output()?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(GitError::Failed {
                args: format!("merge-base --is-ancestor {a} {b}"),
                dir: self.dir.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }

    /// files when they say it plainly, else asked of git.
    pub fn branch_exists(&self, name: &str) -> Result<bool, GitError> {
        if let Some(id) = self.facts().ok().and_then(|f| refs::branch_id(&f, name)) {
            return Ok(id.is_some());
        }
        let full = format!("refs/heads/{name}");
        let out = self.output(&["rev-parse", "--verify", "--quiet", &full])?;
        Ok(out.status.success())
    }

    /// `git status --porcelain` (paths as git prints them for people).
    pub fn status_porcelain(&self) -> Result<String, GitError> {
        self.run(&["status", "--porcelain"])
    }

    /// Changes of the work tree against HEAD (or against nothing on an unborn branch):
    /// a stat summary then the patch.
    pub fn diff_head(&self) -> Result<String, GitError> {
        if self.head()?.is_none() {
            return self.run(&["diff", "--no-ext-diff", "--cached", "--stat", "--patch"]);
        }
        self.run(&["diff", "--no-ext-diff", "HEAD", "--stat", "--patch"])
    }
}

/// A fact about the repository containing `dir` (its top level, its common git
/// directory): computed once per process and directory, then remembered. These do not
/// change while a process runs (a directory does not move between repositories), and a
/// start-up asks for them from several places. Failures are not remembered.
fn fact(
    dir: &Path,
    what: &'static str,
    compute: impl FnOnce() -> Result<PathBuf, GitError>,
) -> Result<PathBuf, GitError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Facts = Mutex<HashMap<(PathBuf, &'static str), PathBuf>>;
    static FACTS: OnceLock<Facts> = OnceLock::new();
    let facts = FACTS.get_or_init(Facts::default);
    let key = (dir.to_path_buf(), what);
    if let Some(v) = facts.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(v);
    }
    let v = compute()?;
    if let Ok(mut m) = facts.lock() {
        m.insert(key, v.clone());
    }
    Ok(v)
}

/// One git invocation being built: arguments, environment, bytes for stdin.
pub struct Call<'a> {
    git: &'a Git,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    input: Option<Vec<u8>>,
    deadline: Option<std::time::Duration>,
}

impl Call<'_> {
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    pub fn input(mut self, bytes: Vec<u8>) -> Self {
        self.input = Some(bytes);
        self
    }

    /// End it (with everything it started: its own process group) when it has not
    /// finished after `limit`: [`GitError::TimedOut`]. For git talking to a remote.
    pub fn deadline(mut self, limit: std::time::Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    fn describe(&self) -> String {
        self.args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Run to completion; the exit status is the caller's to judge.
    pub fn output(self) -> Result<Output, GitError> {
        let mut c = self.git.command(&[]);
        c.args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(limit) = self.deadline {
            let args = self.describe();
            return deadline::output_within(c, self.input, limit).map_err(|e| match e {
                deadline::Ended::Io(e) => GitError::Spawn(e),
                deadline::Ended::TimedOut => GitError::TimedOut {
                    args,
                    dir: self.git.dir.clone(),
                    after: crate::duration::format_duration(limit),
                },
            });
        }
        let Some(input) = self.input else {
            return c.output().map_err(GitError::Spawn);
        };
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(GitError::Spawn)?;
        let stdin = child.stdin.take();
        // A thread feeds stdin so a git that writes before it has read everything cannot
        // deadlock against us.
        let feeder = std::thread::spawn(move || {
            if let Some(mut s) = stdin {
                let _ = s.write_all(&input);
            }
        });
        let out = child.wait_with_output().map_err(GitError::Spawn)?;
        let _ = feeder.join();
        Ok(out)
    }

    /// Run; stdout on success, an error with stderr otherwise.
    pub fn bytes(self) -> Result<Vec<u8>, GitError> {
        let args = self.describe();
        let dir = self.git.dir.clone();
        let out = self.output()?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args,
                dir,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(out.stdout)
    }

    /// Run; stdout as text without its trailing newline.
    pub fn text(self) -> Result<String, GitError> {
        let b = self.bytes()?;
        Ok(String::from_utf8_lossy(&b)
            .trim_end_matches('\n')
            .to_string())
    }
}

impl Git {
    /// Make sure each pattern is ignored: patterns found neither in `dir/.gitignore` nor in
    /// the repository's `info/exclude` are added to `info/exclude` (local, never committed).
    /// Patterns are relative to `dir`. Returns the patterns added.
    pub fn ensure_excluded(&self, patterns: &[&str]) -> Result<Vec<String>, GitError> {
        let top = self.toplevel()?;
        let prefix = self
            .dir
            .canonicalize()
            .ok()
            .and_then(|d| {
                d.strip_prefix(top.canonicalize().unwrap_or(top.clone()))
                    .ok()
                    .map(|p| p.to_path_buf())
            })
            .unwrap_or_default();
        let exclude = self.facts()?.info_exclude.clone();
        let gitignore = std::fs::read_to_string(self.dir.join(".gitignore")).unwrap_or_default();
        let existing = std::fs::read_to_string(&exclude).unwrap_or_default();
        let anchored = |p: &str| {
            let rel = prefix
                .join(p.trim_end_matches('/'))
                .to_string_lossy()
                .into_owned();
            format!("/{rel}{}", if p.ends_with('/') { "/" } else { "" })
        };
        let missing: Vec<String> = patterns
            .iter()
            .filter(|p| {
                !gitignore
                    .lines()
                    .any(|l| l.trim() == **p || l.trim() == format!("/{p}"))
            })
            .map(|p| anchored(p))
            .filter(|a| !existing.lines().any(|l| l.trim() == a))
            .collect();
        if missing.is_empty() {
            return Ok(missing);
        }
        let text = with_ignore_block(&existing, "taskdaemon runtime files", &missing);
        crate::fsutil::write_atomic(&exclude, text.as_bytes()).map_err(|e| GitError::Failed {
            args: "write info/exclude".into(),
            dir: exclude.clone(),
            stderr: e.to_string(),
        })?;
        Ok(missing)
    }
}

/// `text` (an ignore file) with a commented block of `entries` appended.
pub fn with_ignore_block(text: &str, header: &str, entries: &[String]) -> String {
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("# {header}\n"));
    for e in entries {
        out.push_str(e);
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod testrepo {
    use std::path::Path;
    use std::process::Command;

    /// A real repository with a hermetic git environment.
    pub fn init(dir: &Path) {
        let run = |args: &[&str]| {
            let s = Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .status()
                .unwrap();
            assert!(s.success(), "git {args:?}");
        };
        run(&["init", "-q", "-b", "main"]);
        run(&["config", "user.name", "t"]);
        run(&["config", "user.email", "t@example.com"]);
    }

    /// Run git in `dir` (hermetic config); stdout, trimmed.
    pub fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// Everything of the user's checkout a merge must not touch: the files (without `.git`
    /// and `.taskdaemon`), the index's bytes, HEAD and the branch HEAD names.
    pub fn user_state(dir: &Path) -> Vec<(String, Vec<u8>)> {
        fn walk(root: &Path, rel: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))
                .unwrap()
                .flatten()
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let r = rel.join(e.file_name());
                if rel.as_os_str().is_empty()
                    && (e.file_name() == ".git" || e.file_name() == ".taskdaemon")
                {
                    continue;
                }
                if e.file_type().unwrap().is_dir() {
                    walk(root, &r, out);
                } else {
                    out.push((
                        r.display().to_string(),
                        std::fs::read(root.join(&r)).unwrap(),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, Path::new(""), &mut out);
        out.push((
            "<index>".into(),
            std::fs::read(dir.join(".git/index")).unwrap_or_default(),
        ));
        out.push((
            "<HEAD>".into(),
            std::fs::read(dir.join(".git/HEAD")).unwrap(),
        ));
        out.push((
            "<HEAD commit>".into(),
            git(dir, &["rev-parse", "HEAD"]).into_bytes(),
        ));
        out
    }

    pub fn commit_all(dir: &Path, msg: &str) {
        for args in [vec!["add", "-A"], vec!["commit", "-q", "-m", msg]] {
            let s = Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(&args)
                .status()
                .unwrap();
            assert!(s.success());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_is_none_on_unborn_branch_then_set() {
        let d = tempfile::tempdir().unwrap();
        testrepo::init(d.path());
        let g = Git::new(d.path());
        assert_eq!(g.head().unwrap(), None);
        std::fs::write(d.path().join("a"), "1").unwrap();
        assert!(g.diff_head().is_ok());
        testrepo::commit_all(d.path(), "one");
        assert_eq!(g.head().unwrap().map(|h| h.len()), Some(40));
    }

    #[test]
    fn runtime_files_become_ignored_once() {
        let d = tempfile::tempdir().unwrap();
        testrepo::init(d.path());
        let g = Git::new(d.path());
        let added = g
            .ensure_excluded(&[".ralph/logs/", ".ralph/run.json"])
            .unwrap();
        assert_eq!(added, ["/.ralph/logs/", "/.ralph/run.json"]);
        assert!(g.ensure_excluded(&[".ralph/logs/"]).unwrap().is_empty());
        std::fs::create_dir_all(d.path().join(".ralph/logs")).unwrap();
        std::fs::write(d.path().join(".ralph/logs/x.log"), "x").unwrap();
        std::fs::write(d.path().join(".ralph/run.json"), "{}").unwrap();
        assert_eq!(g.status_porcelain().unwrap(), "");
    }

    /// A repository whose `.git/config` and hooks run programs that leave a mark.
    fn hostile(d: &Path) -> (PathBuf, PathBuf) {
        let (r, marks) = (d.join("r"), d.join("marks"));
        std::fs::create_dir_all(&r).unwrap();
        std::fs::create_dir_all(&marks).unwrap();
        testrepo::init(&r);
        std::fs::write(r.join("a"), "a\n").unwrap();
        testrepo::commit_all(&r, "one");
        let m = marks.display();
        testrepo::git(
            &r,
            &[
                "config",
                "core.fsmonitor",
                &format!("touch {m}/fsmonitor; false #"),
            ],
        );
        testrepo::git(
            &r,
            &[
                "config",
                "diff.external",
                &format!("sh -c 'touch {m}/external'"),
            ],
        );
        for h in [
            "post-checkout",
            "reference-transaction",
            "post-index-change",
            "post-commit",
        ] {
            let p = r.join(".git/hooks").join(h);
            std::fs::write(&p, format!("#!/bin/sh\ntouch {m}/{h}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(r.join("a"), "b\n").unwrap();
        (r, marks)
    }

    fn marks(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_harness_git_runs_no_fsmonitor_hook_or_external_diff_of_the_repository() {
        let d = tempfile::tempdir().unwrap();
        let (r, m) = hostile(d.path());
        // The repository is armed: plain git runs them.
        testrepo::git(&r, &["status", "--porcelain"]);
        assert_eq!(marks(&m), ["fsmonitor", "post-index-change"]);
        for f in marks(&m) {
            std::fs::remove_file(m.join(f)).unwrap();
        }
        let g = Git::new(&r);
        g.status_porcelain().unwrap();
        g.run(&["ls-files", "-z", "-c", "-o"]).unwrap();
        g.run(&["ls-files", "--error-unmatch", "a"]).unwrap();
        g.diff_head().unwrap();
        g.run(&["add", "a"]).unwrap();
        g.run(&["commit", "-q", "-m", "two"]).unwrap();
        g.run(&["branch", "b2"]).unwrap();
        g.run(&["update-ref", "-d", "refs/heads/b2"]).unwrap();
        let wt = d.path().join("wt");
        g.call(&[
            OsStr::new("worktree"),
            "add".as_ref(),
            "-q".as_ref(),
            wt.as_os_str(),
        ])
        .text()
        .unwrap();
        g.run(&["reset", "-q", "--hard", "HEAD~1"]).unwrap();
        assert_eq!(marks(&m), Vec::<String>::new());
        // A commit the user's hooks should see runs them, and still no monitor.
        std::fs::write(r.join("a"), "c\n").unwrap();
        g.run(&["add", "a"]).unwrap();
        g.clone()
            .with_user_hooks()
            .run(&["commit", "-q", "-m", "three"])
            .unwrap();
        assert_eq!(
            marks(&m),
            ["post-commit", "post-index-change", "reference-transaction"]
        );
    }

    #[test]
    fn not_a_repo_says_so() {
        let d = tempfile::tempdir().unwrap();
        let e = Git::new(d.path()).toplevel().unwrap_err();
        assert!(matches!(e, GitError::NotARepo(_)));
    }
}
