//! Snapshots: the whole non-ignored work tree, the index and HEAD, captured as commits that
//! only an annotated tag reaches, and restored exactly by a rollback.
//!
//! A snapshot is shaped like a `git stash` entry:
//!
//! ```text
//! tag task-2-pre ──► W  tree: the work tree (tracked, modified, untracked; not ignored)
//!                    ├─ parent 1: HEAD at save time (absent on an unborn branch)
//!                    ├─ parent 2: I  tree: the index (what was staged), parent: HEAD
//!                    └─ more parents: branch tips a rollback moved (kept reachable)
//! ```
//!
//! The tag's message carries the user's message and `Snapshot-*` trailers (kind, task,
//! branch, head, time, sequence). Saving never touches the user's index, HEAD or branch:
//! the work tree is read through a private index kept in `<git-dir>/taskdaemon/`, whose
//! stat cache means a repeated save rehashes only the files that changed. The first save
//! seeds it from the user's index (stat data and hashes); later ones ask `git status`
//! (with an untracked cache) what changed and add only that.
//!
//! Rollback first saves the current state as `pre-rollback-<seconds>`, then switches the
//! work tree with a two-way `read-tree -m -u` on the private index (which matches the
//! work tree exactly at that moment, so only the paths that differ are looked at and
//! written, and files created since are removed), moves the branch back, and installs the saved index with the stat data of the
//! fresh checkout. It is a transaction: a journal written before the first destructive
//! step lets the next snapshot command (or `run`/`task`) finish a killed rollback
//! ([`journal`]); stale locks of a killed snapshot command are recovered ([`locks`]).
//! Snapshot tags are untrusted input ([`trust`]).
//!
//! The plumbing never runs the user's git hooks (`core.hooksPath=/dev/null`): saving,
//! tagging and the rollback's own ref moves fire no `reference-transaction`,
//! `post-index-change` or any other hook.

mod cache;
mod checkout;
mod diff;
mod index_file;
mod journal;
mod locks;
mod prune;
mod ref_session;
mod scan;
mod seq;
mod tags;
mod trust;

pub use prune::{Kept, PrunePlan, PrunePolicy, Pruned};

pub use locks::{LOCK_WAIT, Notice};

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Git, GitError};
use seq::SeqUnsynced;

/// Kinds of snapshot, each with its tag name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `task-N-pre`: before task N starts.
    TaskPre,
    /// `task-N-post`: task N completed with its evidence verified.
    TaskPost,
    /// `manual-<unix seconds>`: asked for by a person or the agent.
    Manual,
    /// `stall-N-recovery`: before stall recovery in task N.
    Stall,
    /// `pre-rollback-<unix seconds>`: the state a rollback replaced.
    PreRollback,
    /// `run-N-pre` (N: the snapshot's sequence number, never reused): the uncommitted
    /// changes a run found at its start, before iteration 1.
    RunPre,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TaskPre => "task-pre",
            Kind::TaskPost => "task-post",
            Kind::Manual => "manual",
            Kind::Stall => "stall",
            Kind::PreRollback => "pre-rollback",
            Kind::RunPre => "run-pre",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [
            Kind::TaskPre,
            Kind::TaskPost,
            Kind::Manual,
            Kind::Stall,
            Kind::PreRollback,
            Kind::RunPre,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// The tag name before de-duplication (`seq`: the snapshot's sequence number).
    fn base_name(self, task: Option<u32>, unix_secs: i64, seq: u64) -> String {
        let n = task.unwrap_or(0);
        match self {
            Kind::TaskPre => format!("task-{n}-pre"),
            Kind::TaskPost => format!("task-{n}-post"),
            Kind::Manual => format!("manual-{unix_secs}"),
            Kind::Stall => format!("stall-{n}-recovery"),
            Kind::PreRollback => format!("pre-rollback-{unix_secs}"),
            Kind::RunPre => format!("run-{seq}-pre"),
        }
    }
}

/// Tag patterns that may hold snapshots.
const TAG_PATTERNS: &[&str] = &[
    "refs/tags/task-*",
    "refs/tags/manual-*",
    "refs/tags/stall-*",
    "refs/tags/pre-rollback-*",
    "refs/tags/run-*",
];

/// Who made snapshot commits and tags: the harness, not the user.
const IDENT_NAME: &str = "taskdaemon";
const IDENT_EMAIL: &str = "taskdaemon@localhost";

/// One saved snapshot, as its tag describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub tag: String,
    pub kind: Kind,
    /// The task number (`.ralph/task-counter.txt`) when it was saved.
    pub task: Option<u32>,
    pub message: String,
    /// Unix milliseconds.
    pub time_ms: i64,
    /// Order among snapshots of this repository (ties of `time_ms` under a fixed clock).
    pub seq: u64,
    /// The branch checked out (`refs/heads/…`); `None` for a detached HEAD.
    pub branch: Option<String>,
    /// HEAD's commit; `None` on an unborn branch.
    pub head: Option<String>,
    /// The snapshot commit the tag points at.
    pub commit: String,
    /// Paths this save could not record (embedded repositories without a commit).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped: Vec<String>,
}

/// What `save` is asked to record.
#[derive(Debug, Clone)]
pub struct SaveRequest<'a> {
    pub kind: Kind,
    pub task: Option<u32>,
    pub message: &'a str,
    /// Unix milliseconds (from [`crate::clock`], so tests can fix it).
    pub time_ms: i64,
}

/// File-level differences between a snapshot and the current state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TreeDiff {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
}

impl TreeDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }
    pub fn len(&self) -> usize {
        self.added.len() + self.modified.len() + self.deleted.len()
    }
}

/// Where the repository stands against its snapshots.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The newest snapshot.
    pub last: Option<Snapshot>,
    /// Files that differ from it (work tree, committed or not).
    pub changed_since_last: Option<TreeDiff>,
    /// Entries of `git status` (staged, unstaged, untracked).
    pub uncommitted: usize,
}

/// The result of a rollback.
#[derive(Debug, Clone, Serialize)]
pub struct Rollback {
    pub restored: Snapshot,
    /// The state that was replaced; roll back to it to undo this rollback.
    pub saved: Snapshot,
    /// Files the rollback changed in the work tree.
    pub changed: TreeDiff,
    /// Files that look like secrets which the restored state lacks: left in place
    /// (untracked now), never removed by a rollback.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("no snapshot named `{tag}`{}\n  hint: `taskdaemon snapshot list` shows every snapshot", closest(.nearest))]
    NotFound { tag: String, nearest: Vec<String> },
    #[error(
        "`{0}` is a tag but not a taskdaemon snapshot\n  hint: snapshots are tags made by `taskdaemon snapshot save` or `taskdaemon task`; see `taskdaemon snapshot list`"
    )]
    NotASnapshot(String),
    #[error("snapshot `{tag}` is damaged: {why}")]
    Damaged { tag: String, why: String },
    #[error(
        "cannot roll back: a {what} is in progress in {dir}\n  hint: finish it or run `git {abort}`, then roll back"
    )]
    InProgress {
        what: &'static str,
        abort: &'static str,
        dir: PathBuf,
    },
    #[error(
        "cannot snapshot: these paths have unresolved conflicts: {paths}\n  hint: resolve them and `git add` them, or abort the merge (`git merge --abort`)"
    )]
    Unmerged { paths: String },
    #[error(
        "cannot roll back: branch {branch} is checked out in another worktree ({worktree})\n  hint: switch that worktree to another branch first"
    )]
    BranchElsewhere { branch: String, worktree: String },
    #[error(
        "git is busy: {0} exists\n  hint: wait for the other git command to finish; if none is running, delete that file"
    )]
    IndexLocked(PathBuf),
    #[error(
        "cannot roll back: {path} is a git repository (a submodule or a nested repository) and the snapshot has files where it is; rolling back would delete it\n  hint: move it out of the way (or commit and push its work elsewhere), then roll back"
    )]
    RepositoryInTheWay { path: String },
    #[error(
        "cannot roll back: a loop is running in this work tree\n  hint: stop it first (Ctrl-C in its terminal), then roll back"
    )]
    LoopRunning,
    #[error(
        "another taskdaemon ({}) is saving or rolling back snapshots in this work tree (it holds {})\n  hint: wait for it to finish; if it hangs, stop it{}", pid_text(*.pid), .path.display(), .pid.map(|p| format!(" (`kill {p}`)")).unwrap_or_default()
    )]
    Busy { pid: Option<i32>, path: PathBuf },
    #[error(
        "stopped while waiting for {} (held by another snapshot save or rollback): nothing was saved or rolled back", .path.display()
    )]
    Stopped { path: PathBuf },
    #[error("{}", lock_wait_text(.path, *.pid, .waited))]
    LockWait {
        pid: Option<i32>,
        path: PathBuf,
        waited: String,
    },
    #[error(
        "{} is still held by git (pid {pid}), started by a taskdaemon (pid {owner}) that was killed\n  hint: wait for that git to finish, or stop it (`kill {pid}`), then run the command again", .path.display()
    )]
    LockHeld { path: PathBuf, pid: i32, owner: i32 },
    #[error(
        "snapshot `{tag}` is not trusted: its {field} `{value}` {why}; nothing was changed\n  hint: this tag was not made by taskdaemon or was edited; roll back to another snapshot (`taskdaemon snapshot list`) or delete it (`git tag -d {tag}`)"
    )]
    Untrusted {
        tag: String,
        field: &'static str,
        value: String,
        why: &'static str,
    },
    #[error(
        "cannot roll back to `{tag}`: it was saved on the unborn branch {branch}, which exists now and is not checked out; a rollback deletes no branch but the one checked out\n  hint: `git switch {branch}` and roll back again, or delete the branch yourself if you mean to"
    )]
    WouldDeleteBranch { tag: String, branch: String },
    #[error(
        "{}: {why}\n  hint: it records an interrupted rollback; if no taskdaemon runs here, delete it and check `taskdaemon snapshot status`", .path.display()
    )]
    Journal { path: PathBuf, why: String },
    #[error(
        "an earlier `snapshot rollback {target}` was interrupted half way and cannot be finished yet: {source}\n  the next snapshot command (or `run`, `task`) finishes it; the state before it is saved as {saved}"
    )]
    Interrupted {
        target: String,
        saved: String,
        source: Box<SnapshotError>,
    },
    #[error(
        "the rollback stopped half way: {source}\n  nothing is lost: the state before the rollback is saved as {saved}; `taskdaemon snapshot rollback {saved}` brings it back"
    )]
    HalfWay {
        saved: String,
        source: Box<SnapshotError>,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// [`SnapshotError::LockWait`]: who holds the lock, and what to do about it. The holder
/// may be this very process: another loop of the same daemon (the number lock is shared by
/// the work trees of a repository), stuck in a git it started.
fn lock_wait_text(path: &Path, pid: Option<i32>, waited: &str) -> String {
    let (path, who) = (path.display(), holder_text(pid));
    let (what, hint) = match pid {
        Some(p) if p == std::process::id() as i32 => (
            "its snapshot save or rollback is stuck",
            format!(
                "see the git processes it runs (`ps --ppid {p} -o pid,stat,etime,args`): end a stuck one (`kill PID`), or cancel that loop (`taskdaemon cancel RUN`)"
            ),
        ),
        Some(p) => (
            "a snapshot save or rollback is stopped or hung",
            format!(
                "see what it does (`ps -o pid,stat,args -p {p}`): continue it if it is stopped (`kill -CONT {p}`) or end it (`kill {p}`), then run again"
            ),
        ),
        None => (
            "a snapshot save or rollback is stopped or hung",
            format!(
                "find the holder (`fuser -v {path}`): continue it if it is stopped (`kill -CONT PID`) or end it (`kill PID`), then run again"
            ),
        ),
    };
    format!("{path} is held by {who} and was not let go in {waited}: {what}\n  hint: {hint}")
}

/// Who holds a snapshot lock whose file names `pid`: this very process (another of its
/// loops), another taskdaemon, or a process that wrote no pid.
fn holder_text(pid: Option<i32>) -> String {
    match pid {
        Some(p) if p == std::process::id() as i32 => {
            format!("another loop of this taskdaemon (pid {p})")
        }
        Some(p) => format!("another taskdaemon (pid {p})"),
        None => "another process".to_string(),
    }
}

/// What a loop tells a person when it has waited a second for another holder (`pid`, as
/// its lock file names it) of the snapshot lock `lock`.
pub fn waiting_text(lock: &Path, pid: Option<i32>) -> String {
    format!(
        "waiting for {}: {} is saving or rolling back snapshots of this work tree; the wait lasts at most {}, and a stop (Ctrl-C) ends it",
        lock.display(),
        holder_text(pid),
        crate::duration::format_duration(LOCK_WAIT)
    )
}

/// Told, on the waiting thread, the lock and its holder's pid when a wait for another
/// holder of a snapshot lock has lasted a second ([`Snapshots::telling_waits_to`]).
pub type WaitTold = std::sync::Arc<dyn Fn(&Path, Option<i32>) + Send + Sync>;

fn pid_text(pid: Option<i32>) -> String {
    pid.map(|p| format!("pid {p}"))
        .unwrap_or_else(|| "pid unknown".into())
}

fn closest(nearest: &[String]) -> String {
    if nearest.is_empty() {
        String::new()
    } else {
        format!("; closest: {}", nearest.join(", "))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The work tree, index and HEAD of a repository, captured as git objects.
#[derive(Debug, Clone)]
struct Captured {
    head: Option<String>,
    branch: Option<String>,
    index_tree: String,
    work_tree: String,
    /// The snapshot commit of `index_tree` (parent: `head`), when `index.cache` had it or
    /// it was made alongside the scan.
    index_commit: Option<String>,
    /// The user's index file the index tree was made of, to remember it by.
    index_key: Option<cache::IndexKey>,
    /// Just before `git status` scanned the work tree for this capture.
    scanned: std::time::SystemTime,
    /// Embedded repositories without a commit: not in the snapshot.
    skipped: Vec<String>,
    /// The private index was seeded from the user's for this capture (a first save).
    seeded_now: bool,
}

/// The user's index as a save sees it.
struct UserIndex {
    tree: String,
    commit: Option<String>,
    key: Option<cache::IndexKey>,
}

/// The user's index before the scan ([`Snapshots::user_index_start`]).
enum UserIndexStart {
    /// From `index.cache`.
    Known(UserIndex),
    /// The file, opened, and its key: its tree is still to be read.
    Opened(File, Option<cache::IndexKey>),
    /// No index file.
    Missing,
}

impl UserIndexStart {
    /// Whether the user has an index file.
    fn exists(&self) -> bool {
        !matches!(self, UserIndexStart::Missing)
    }
}

/// The ignored files the private index must stop tracking (the user's index does not),
/// and those it must add (the user's index tracks them, or a rollback asks for them).
struct Plan {
    drop: Vec<Vec<u8>>,
    add: Vec<Vec<u8>>,
}

/// Paths marked assume-unchanged, and those marked skip-worktree, in an index.
type Flagged = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Every snapshot, oldest first, and the names taken in the snapshot tag namespaces.
type Listing = (Vec<Snapshot>, BTreeSet<String>);

/// Where a snapshot's number comes from ([`Snapshots::commit_and_tag`]).
enum Numbering {
    /// Taken as the tag is made, above the highest of a listing at hand if there is one.
    AtTag(Option<Listing>),
    /// Taken before, and on disk.
    Taken(u64),
}

/// Snapshots of one work tree (a repository or one of its linked worktrees).
#[derive(Debug, Clone)]
pub struct Snapshots {
    /// For the snapshot's own work: no filters, no line-ending conversion, no submodule
    /// recursion, so what is saved and restored is the bytes on disk.
    git: Git,
    /// The repository's facts (shared with the rest of the process).
    repo: std::sync::Arc<super::RepoFacts>,
    /// `git` for the private indexes only: no trailing checksum (it is ours alone, and
    /// hashing a 10 MB index costs more than writing it), and an untracked cache so a
    /// save looks only into directories that changed.
    private: Git,
    /// For what the user sees (`git status`): their own settings.
    plain: Git,
    top: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
    index: PathBuf,
    /// The length of an object id in bytes (20: SHA-1, 32: SHA-256).
    oid_len: usize,
    /// Whether to wait for another snapshot command instead of reporting it.
    wait: bool,
    /// How to wait for another holder of a snapshot lock.
    waits: locks::Waits,
    /// What recovery did (stale locks, an interrupted rollback), for the caller to show.
    notices: std::sync::Arc<std::sync::Mutex<Vec<Notice>>>,
}

/// The files of the index of the work tree at `dir` (paths relative to its top), read from
/// the index file without git when it is plain (`index_file.rs`), else from `git ls-files`.
pub fn tracked_files(dir: &Path) -> Result<Vec<String>, GitError> {
    tracked_files_where(dir, |_| true)
}

/// [`tracked_files`], only the paths `keep` takes (asked of the bytes, before any is made a
/// string: a repository of 100k files costs one pass over its index).
pub fn tracked_files_where(
    dir: &Path,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<Vec<String>, GitError> {
    let git = Git::new(dir);
    let facts = git.facts()?;
    let oid_len = if facts.object_format == "sha256" {
        32
    } else {
        20
    };
    if !facts.index.exists() {
        return Ok(Vec::new());
    }
    if let Ok(bytes) = fs::read(&facts.index)
        && let Some(entries) = index_file::parse(&bytes, oid_len)
    {
        let mut paths: Vec<String> = entries
            .paths()
            .filter(|p| keep(p))
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        paths.dedup();
        return Ok(paths);
    }
    let out = git.call(&["ls-files", "-z", "-c"]).bytes()?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty() && keep(p))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

impl Snapshots {
    /// The snapshots of the work tree containing `dir`.
    pub fn open(dir: &Path) -> Result<Snapshots, SnapshotError> {
        // Every fact in one git process, shared with the rest of the process.
        let facts = Git::new(dir)
            .facts()
            .map_err(|_| GitError::NotARepo(dir.to_path_buf()))?;
        let (top, format) = (facts.toplevel.clone(), facts.object_format.as_str());
        let (git_dir, common_dir, index) = (&facts.git_dir, &facts.common_dir, &facts.index);
        let plain = Git::new(&top);
        let empty_tree = if format == "sha256" {
            EMPTY_TREE_SHA256
        } else {
            EMPTY_TREE_SHA1
        };
        let git = plain.clone().with(
            &[
                "submodule.recurse=false",
                "core.autocrlf=false",
                "core.safecrlf=false",
                "core.fsmonitor=false",
                // Internal plumbing fires none of the user's hooks.
                "core.hooksPath=/dev/null",
                // The objects a save writes are stored loose without compression: zlib's
                // set-up per object was a third of `update-index` (21 files: 12 -> 7.5 ms
                // here). A `gc` packs them compressed as usual; until then they take the
                // files' own size on disk.
                "core.looseCompression=0",
            ],
            // No attributes: no clean/smudge filters, no eol conversion. The owner mark
            // lets the next command find git children a killed taskdaemon left running.
            &[
                ("GIT_ATTR_SOURCE", empty_tree),
                (locks::OWNER_ENV, &std::process::id().to_string()),
            ],
        );
        let private = git
            .clone()
            .with(&["index.skipHash=true", "core.untrackedCache=true"], &[]);
        Ok(Snapshots {
            repo: facts.clone(),
            git,
            private,
            plain,
            top,
            git_dir: PathBuf::from(git_dir),
            common_dir: PathBuf::from(common_dir),
            index: PathBuf::from(index),
            oid_len: empty_tree.len() / 2,
            wait: true,
            waits: locks::Waits::default(),
            notices: Default::default(),
        })
    }

    /// Report another snapshot command at work here (`SnapshotError::Busy`, with its pid)
    /// instead of waiting for it: for commands a person runs.
    pub fn reporting_busy(mut self) -> Snapshots {
        self.wait = false;
        self
    }

    /// Give up waiting for another holder of a snapshot lock once `cancel` is cancelled
    /// ([`SnapshotError::Stopped`]): for a loop, whose stop must not wait on a stuck save
    /// of another one.
    pub fn stopped_by(mut self, cancel: &tokio_util::sync::CancellationToken) -> Snapshots {
        self.waits.stop = Some(cancel.clone());
        self
    }

    /// Call `tell` with the lock and its holder's pid when a wait for another holder of a
    /// snapshot lock has lasted a second: for a loop, whose person should see why it waits.
    pub fn telling_waits_to(mut self, tell: WaitTold) -> Snapshots {
        self.waits.tell = Some(locks::WaitTeller(tell));
        self
    }

    /// What recovery did since the last call: stale locks removed, an interrupted
    /// rollback finished. Every command that takes the snapshot lock recovers first.
    pub fn take_notices(&self) -> Vec<Notice> {
        self.notices
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }

    /// Finish an interrupted rollback and remove stale locks, if there are any; what was
    /// done, for the caller to show. `run` and `task` call this before their loop starts.
    pub fn recover(&self) -> Result<Vec<Notice>, SnapshotError> {
        drop(self.lock()?);
        Ok(self.take_notices())
    }

    pub fn top(&self) -> &Path {
        &self.top
    }

    fn private_dir(&self) -> PathBuf {
        self.git_dir.join("taskdaemon")
    }
    /// The private index that mirrors the work tree (its stat cache makes saves cheap).
    fn work_index(&self) -> PathBuf {
        self.private_dir().join("snapshot.index")
    }

    fn open_lock_file(&self, name: &str) -> Result<(File, PathBuf), SnapshotError> {
        let dir = self.private_dir();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(name);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        Ok((f, path))
    }

    /// Held (shared) by every loop running anywhere in this work tree, whatever its
    /// directory; a rollback needs it exclusively.
    pub fn hold_for_loop(&self) -> Result<File, SnapshotError> {
        let (f, path) = self.open_lock_file("loops.lock")?;
        f.lock_shared().map_err(io(&path))?;
        Ok(f)
    }

    fn refuse_if_loop_running(&self) -> Result<File, SnapshotError> {
        let (f, path) = self.open_lock_file("loops.lock")?;
        match f.try_lock() {
            Ok(()) => Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => Err(SnapshotError::LoopRunning),
            Err(std::fs::TryLockError::Error(e)) => Err(io(&path)(e)),
        }
    }

    /// Save the current state under a new tag.
    pub fn save(&self, req: &SaveRequest<'_>) -> Result<Snapshot, SnapshotError> {
        let _lock = self.lock()?;
        // The number first, put on disk while the work tree is captured: its sync (two on
        // a journaled file system, ~2 ms) is off the save's path. A save that fails after
        // this leaves a gap in the numbers, which only order the listing.
        let (seq, unsynced) = {
            let numbers = self.seq_lock()?;
            self.take_seq(0, &numbers)?
        };
        let cap = while_syncing(unsynced, || self.capture_at(&[], Some(req.time_ms)))??;
        self.commit_and_tag(req, &cap, &[], &[], Numbering::Taken(seq))
    }

    /// Every snapshot, oldest first.
    pub fn list(&self) -> Result<Vec<Snapshot>, SnapshotError> {
        Ok(self.tags()?.0)
    }

    /// The snapshot task `n` started from (`task-N-pre`, or its de-duplicated name).
    pub fn task_pre(&self, n: u32) -> Result<Option<Snapshot>, SnapshotError> {
        // Named `task-N-pre`, or `task-N-pre-K` when that was taken (`commit_and_tag`).
        let base = Kind::TaskPre.base_name(Some(n), 0, 0);
        let named = |tag: &str| {
            tag.strip_prefix(base.as_str()).is_some_and(|rest| {
                rest.is_empty()
                    || rest
                        .strip_prefix('-')
                        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
            })
        };
        Ok(self
            .tags_named(&named)?
            .into_iter()
            .rfind(|s| s.kind == Kind::TaskPre && s.task == Some(n)))
    }

    /// The snapshot named `tag`, or an error naming the closest snapshots.
    pub fn find(&self, tag: &str) -> Result<Snapshot, SnapshotError> {
        self.find_in(tag, &self.list()?)
    }

    /// The snapshot named `tag` among `all`.
    fn find_in(&self, tag: &str, all: &[Snapshot]) -> Result<Snapshot, SnapshotError> {
        if let Some(s) = all.iter().find(|s| s.tag == tag) {
            return Ok(s.clone());
        }
        if self.rev(&format!("refs/tags/{tag}"))?.is_some() {
            return Err(SnapshotError::NotASnapshot(tag.to_string()));
        }
        Err(SnapshotError::NotFound {
            tag: tag.to_string(),
            nearest: nearest_tags(tag, all),
        })
    }

    /// File-level changes from snapshot `tag` to the current state.
    pub fn diff(&self, tag: &str) -> Result<TreeDiff, SnapshotError> {
        self.diff_from(&self.find(tag)?)
    }

    fn diff_from(&self, snap: &Snapshot) -> Result<TreeDiff, SnapshotError> {
        let _lock = self.lock()?;
        let now = self.capture(&[])?;
        let raw = self.raw_diff(&format!("{}^{{tree}}", snap.commit), &now.work_tree)?;
        Ok(tree_diff(&raw))
    }

    pub fn status(&self) -> Result<Status, SnapshotError> {
        let last = self.list()?.pop();
        let changed_since_last = match &last {
            Some(s) => Some(self.diff_from(s)?),
            None => None,
        };
        let out = self
            .plain
            .call(&["status", "--porcelain", "-z", "--untracked-files=all"])
            .bytes()?;
        let uncommitted = porcelain_entries(&out);
        Ok(Status {
            last,
            changed_since_last,
            uncommitted,
        })
    }

    /// Restore the state saved as `tag`, after saving the current one as `pre-rollback-*`.
    /// `time_ms` dates that safety snapshot.
    pub fn rollback(&self, tag: &str, time_ms: i64) -> Result<Rollback, SnapshotError> {
        let _no_loop = self.refuse_if_loop_running()?;
        self.rollback_unguarded(tag, time_ms)
    }

    /// A rollback by the loop running in this work tree itself (stall recovery, aborted
    /// gates): the loop's own hold on `loops.lock` does not stop it.
    pub fn rollback_from_loop(&self, tag: &str, time_ms: i64) -> Result<Rollback, SnapshotError> {
        self.rollback_unguarded(tag, time_ms)
    }

    fn rollback_unguarded(&self, tag: &str, time_ms: i64) -> Result<Rollback, SnapshotError> {
        let _lock = self.lock()?;
        self.refuse_if_in_progress()?;
        // Listed once: the safety snapshot's name and sequence come from the same list
        // (nothing else tags while the lock is held).
        let listed = self.tags()?;
        let target = self.find_in(tag, &listed.0)?;
        // A file that looks like a secret is never taken away by a rollback: one the
        // restored state lacks stays where it is (its content is in the pre-rollback
        // snapshot too).
        let kept = self.keep_secrets_aside()?;
        let done = self.rollback_locked(target, time_ms, listed);
        let back = self.put_secrets_back(kept);
        let mut rb = done?;
        rb.kept = back?;
        rb.changed.deleted.retain(|p| !rb.kept.contains(p));
        Ok(rb)
    }

    /// The tracked files that look like secrets (an untracked one is in no snapshot, so no
    /// rollback touches it), each linked into `<git-dir>/taskdaemon/kept/<pid>/` before a
    /// rollback: (the link, the path).
    fn keep_secrets_aside(&self) -> Result<Vec<(PathBuf, Vec<u8>)>, SnapshotError> {
        let tracked: Vec<Vec<u8>> = match fs::read(&self.index)
            .ok()
            .and_then(|b| index_file::parse(&b, self.oid_len))
        {
            Some(e) => e.paths().map(<[u8]>::to_vec).collect(),
            None if !self.index.exists() => Vec::new(),
            None => split_z(&self.plain.call(&["ls-files", "-z", "-c"]).bytes()?)
                .map(<[u8]>::to_vec)
                .collect(),
        };
        let dir = self
            .private_dir()
            .join("kept")
            .join(std::process::id().to_string());
        let mut kept = Vec::new();
        for (i, p) in tracked
            .into_iter()
            .filter(|p| crate::secrets::looks_secret_bytes(p))
            .enumerate()
        {
            let path = self.top.join(OsStr::from_bytes(&p));
            if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                continue;
            }
            fs::create_dir_all(&dir).map_err(io(&dir))?;
            let link = dir.join(i.to_string());
            let _ = fs::remove_file(&link);
            // A second link (same file, mode and all); a copy where links cannot be made.
            if fs::hard_link(&path, &link).is_err() {
                fs::copy(&path, &link).map_err(io(&link))?;
            }
            kept.push((link, p));
        }
        Ok(kept)
    }

    /// After a rollback: each kept file the rollback removed is linked back (never over a
    /// file the rollback wrote there, never through a link the restored state has on its
    /// way: such a file stays in the kept directory, and in the pre-rollback snapshot); the
    /// links are removed. The paths put back.
    fn put_secrets_back(
        &self,
        kept: Vec<(PathBuf, Vec<u8>)>,
    ) -> Result<Vec<String>, SnapshotError> {
        let mut back = Vec::new();
        for (link, p) in &kept {
            let path = self.top.join(OsStr::from_bytes(p));
            if fs::symlink_metadata(&path).is_ok() {
                fs::remove_file(link).map_err(io(link))?;
                continue;
            }
            if !self.make_parents_inside(p)? {
                continue;
            }
            if fs::hard_link(link, &path).is_err() {
                fs::copy(link, &path).map_err(io(&path))?;
            }
            back.push(String::from_utf8_lossy(p).into_owned());
            fs::remove_file(link).map_err(io(link))?;
        }
        if let Some((link, _)) = kept.first()
            && let Some(dir) = link.parent()
        {
            let _ = fs::remove_dir(dir);
        }
        Ok(back)
    }

    /// Capture work tree and index as trees (objects only; no refs, no user index write).
    /// `force` names ignored paths to include anyway. If objects the private index names
    /// were pruned (`git gc` only keeps what refs and real indexes reach), it is rebuilt.
    fn capture(&self, force: &[PathBuf]) -> Result<Captured, SnapshotError> {
        self.capture_at(force, None)
    }

    /// [`Snapshots::capture`] for a snapshot dated `time_ms`: the commit of the user's
    /// index it needs, when `index.cache` does not have it, is made while the work tree
    /// is scanned.
    fn capture_at(
        &self,
        force: &[PathBuf],
        time_ms: Option<i64>,
    ) -> Result<Captured, SnapshotError> {
        match self.capture_once(force, time_ms) {
            Err(SnapshotError::Git(GitError::Failed { stderr, .. }))
                if stderr.contains("invalid object")
                    || stderr.contains("unable to read")
                    || stderr.contains("missing") =>
            {
                let p = self.work_index();
                fs::remove_file(&p).map_err(io(&p))?;
                let _ = fs::remove_file(self.private_dir().join("index.cache"));
                self.capture_once(force, time_ms)
            }
            other => other,
        }
    }

    fn capture_once(
        &self,
        force: &[PathBuf],
        time_ms: Option<i64>,
    ) -> Result<Captured, SnapshotError> {
        let (head, branch) = self.head_and_branch()?;
        let dir = self.private_dir();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let user = self.user_index_start(head.as_deref())?;
        let has_index = user.exists();

        // The work tree, through the private index.
        let work_index = self.work_index();
        let fresh = !work_index.exists() && has_index;
        if fresh {
            self.seed_work_index()?;
        }
        let seeded = work_index.exists();
        let scanned = std::time::SystemTime::now();
        // Which ignored files the private index must track or drop (`ls-files -i`) is
        // looked up while `git status` scans: neither changes what the other reads (the
        // status only refreshes stat data). Just seeded, the private index has the user's
        // paths: it tracks what they track.
        // So is the tree of the user's index when `index.cache` does not have it (read from
        // its file: ~10 ms at 100k files), and the commit of it this snapshot needs: they
        // need nothing the scan changes.
        let check = !fresh || !force.is_empty();
        let (plan, changes, user) = std::thread::scope(|s| {
            let plan = check.then(|| s.spawn(|| self.ignored_plan(has_index, force)));
            let head = head.as_deref();
            let pending = match user {
                UserIndexStart::Known(u) if time_ms.is_none() || u.commit.is_some() => Err(u),
                start => Ok(s.spawn(move || self.user_index_finish(start, head, time_ms))),
            };
            let changes = seeded.then(|| self.changed_paths()).transpose();
            let user = match pending {
                Err(known) => Ok(known),
                Ok(h) => joined(h),
            };
            (plan.map(joined).transpose(), changes, user)
        });
        let user = match user {
            Ok(u) => u,
            Err(e) => {
                // The user's index did not read (conflicts, a corrupt file): no private
                // index is left seeded from it, as when this was found before the seeding.
                if fresh {
                    let _ = fs::remove_file(&work_index);
                }
                return Err(e);
            }
        };
        let (index_tree, index_commit) = (user.tree, user.commit);
        let (plan, mut changes) = (plan?, changes?);
        if fresh {
            unlink_from(&work_index, &self.index)?;
        }
        if let Some(plan) = &plan {
            // A path dropped now is not recorded again from what the status said of it.
            let dropped: BTreeSet<&[u8]> = plan.drop.iter().map(Vec::as_slice).collect();
            if let Some(c) = changes.as_mut() {
                c.paths.retain(|p| !dropped.contains(p.as_slice()));
            }
            self.apply_plan(plan)?;
        }
        // Untracked files that look like secrets stay out of the snapshot (`crate::secrets`);
        // a listing that names a whole directory (or none: everything is added) is looked
        // through once added.
        let broad = changes
            .as_ref()
            .is_none_or(|c| c.dirs || c.paths.len() > ADD_FEW);
        if let Some(c) = changes.as_mut() {
            self.leave_out_secrets(c, force)?;
        }
        let (skipped, mut changed) = self.add_changes(changes)?;
        if broad {
            changed |= self.drop_untracked_secrets(force)?;
        }
        // Nothing changed since the private index was made from the user's (still the
        // same file): the work tree is the index's tree, no `write-tree`.
        let same_as_seeded = fresh
            && !changed
            && plan.is_none()
            && user.key.is_some()
            && self.user_index_key()? == user.key;
        let work_tree = if same_as_seeded {
            index_tree.clone()
        } else {
            self.private
                .call(&["write-tree"])
                .env("GIT_INDEX_FILE", &work_index)
                .text()?
        };
        Ok(Captured {
            head,
            branch,
            index_tree,
            index_commit,
            index_key: user.key,
            scanned,
            work_tree,
            skipped,
            seeded_now: fresh,
        })
    }

    /// The user's index as far as it is known before the work tree is scanned: from
    /// `index.cache` while that index and HEAD are unchanged (its tree, with the snapshot
    /// commit made of it), else the file opened (its key taken from it) for
    /// [`Snapshots::user_index_finish`].
    fn user_index_start(&self, head: Option<&str>) -> Result<UserIndexStart, SnapshotError> {
        let mut f = match File::open(&self.index) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(UserIndexStart::Missing);
            }
            Err(e) => return Err(io(&self.index)(e)),
        };
        let key = cache::IndexKey::of(&mut f).map_err(io(&self.index))?;
        if let Some(c) = key.as_ref().and_then(|k| self.cached_index(k, head)) {
            return Ok(UserIndexStart::Known(UserIndex {
                tree: c.tree,
                commit: Some(c.commit),
                key,
            }));
        }
        Ok(UserIndexStart::Opened(f, key))
    }

    /// The tree of the user's index (`start`), and its commit when a snapshot dated
    /// `time_ms` needs one: the tree from the index's cache-tree extension when that has
    /// the whole tree and it is stored, else written from a copy (even `write-tree` would
    /// rewrite its cache-tree extension in place). Read from the file opened for the key,
    /// so the two are of the same index.
    fn user_index_finish(
        &self,
        start: UserIndexStart,
        head: Option<&str>,
        time_ms: Option<i64>,
    ) -> Result<UserIndex, SnapshotError> {
        let mut user = match start {
            UserIndexStart::Known(u) => u,
            UserIndexStart::Opened(mut f, key) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).map_err(io(&self.index))?;
                // A valid cache-tree root is the tree `write-tree` would answer, when it
                // is there (loose, or listed by a pack's index; a missing one is left to
                // `write-tree`, which writes it again).
                let root =
                    index_file::root_tree_of(&bytes, self.oid_len).filter(|t| self.is_stored(t));
                let tree = match root {
                    Some(tree) => tree,
                    None => {
                        let user_copy = self.private_dir().join("index.user");
                        fs::write(&user_copy, &bytes).map_err(io(&user_copy))?;
                        self.index_tree_of(&user_copy)?
                    }
                };
                UserIndex {
                    tree,
                    commit: None,
                    key,
                }
            }
            UserIndexStart::Missing => {
                let user_copy = self.private_dir().join("index.user");
                copy_if_exists(&self.index, &user_copy)?;
                UserIndex {
                    tree: self.index_tree_of(&user_copy)?,
                    commit: None,
                    key: None,
                }
            }
        };
        if let (Some(t), None) = (time_ms, &user.commit) {
            let c = self.index_commit(&user.tree, head, user.key.as_ref(), t)?;
            user.commit = Some(c);
        }
        Ok(user)
    }

    /// `write-tree` of the index file `index` (a copy of the user's).
    fn index_tree_of(&self, index: &Path) -> Result<String, SnapshotError> {
        let idx = self
            .private
            .call(&["write-tree"])
            .env("GIT_INDEX_FILE", index)
            .output()?;
        if !idx.status.success() {
            let stderr = String::from_utf8_lossy(&idx.stderr);
            if stderr.contains("unmerged") || stderr.contains("needs merge") {
                return Err(SnapshotError::Unmerged {
                    paths: self.unmerged_paths()?,
                });
            }
            return Err(GitError::Failed {
                args: "write-tree".into(),
                dir: self.top.clone(),
                stderr: stderr.trim().to_string(),
            }
            .into());
        }
        Ok(String::from_utf8_lossy(&idx.stdout).trim().to_string())
    }

    /// The branch HEAD names (`refs/heads/…`); `None` when HEAD is detached. Read from
    /// the `HEAD` file; git is asked only when that file does not say (reftable).
    fn branch(&self) -> Result<Option<String>, SnapshotError> {
        let path = self.git_dir.join("HEAD");
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let text = text.trim_end();
        match text.strip_prefix("ref: ") {
            Some(r) if r.starts_with("refs/") && r != "refs/heads/.invalid" => {
                Ok(Some(r.to_string()))
            }
            None if text.len() >= 40 && text.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(None),
            _ => {
                let sym = self.git.call(&["symbolic-ref", "-q", "HEAD"]).output()?;
                Ok(sym
                    .status
                    .success()
                    .then(|| String::from_utf8_lossy(&sym.stdout).trim().to_string()))
            }
        }
    }

    /// Bring the private index in line with the work tree; the embedded repositories left
    /// out (no commit to record), and whether anything was recorded. `changes`: what
    /// `git status` (with the untracked cache, looking only into directories that changed)
    /// named, and only that is added: files alone by one `update-index` (no pathspec
    /// matching, no directory scan), an untracked directory among them by `add` with
    /// those paths. Without a seeded index (`None`), with many changes or if that fails (a
    /// path vanished in between), everything is (`add -A`).
    fn add_changes(&self, changes: Option<Changes>) -> Result<(Vec<String>, bool), SnapshotError> {
        const FEW: usize = ADD_FEW;
        if let Some(changed) = changes {
            if changed.paths.is_empty() {
                return Ok((Vec::new(), false));
            }
            if changed.paths.len() <= FEW {
                let paths = join_z(changed.paths.iter().map(Vec::as_slice));
                if !changed.dirs && self.update_files(&changed.paths, paths.clone())? {
                    return Ok((Vec::new(), true));
                }
                let add = self
                    .private
                    .call(&[
                        "add",
                        "-A",
                        "--ignore-errors",
                        "--pathspec-from-file=-",
                        "--pathspec-file-nul",
                    ])
                    .env("GIT_INDEX_FILE", self.work_index())
                    .env("GIT_LITERAL_PATHSPECS", "1")
                    .input(paths)
                    .output()?;
                if let Ok(skipped) = self.added(&add) {
                    return Ok((skipped, true));
                }
            }
        }
        let add = self
            .private
            .call(&["add", "-A", "--ignore-errors"])
            .env("GIT_INDEX_FILE", self.work_index())
            .output()?;
        Ok((self.added(&add)?, true))
    }

    /// The directories on the way to the work tree's `rel`, made where missing; `false`
    /// when one of them is a link or not a directory (nothing is written through it).
    fn make_parents_inside(&self, rel: &[u8]) -> Result<bool, SnapshotError> {
        let rel = Path::new(OsStr::from_bytes(rel));
        let mut at = self.top.clone();
        let parents: Vec<_> = rel
            .parent()
            .into_iter()
            .flat_map(Path::components)
            .collect();
        for c in parents {
            at.push(c);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir(&at).map_err(io(&at))?;
                }
                Err(e) => return Err(io(&at)(e)),
            }
        }
        Ok(true)
    }

    /// Leave out of `changes` the untracked files that look like secrets
    /// ([`crate::secrets::looks_secret`]) and that the user's index does not track (a
    /// tracked one is the user's decision), unless `force` names them (a rollback that
    /// would write over one saves it first).
    fn leave_out_secrets(
        &self,
        changes: &mut Changes,
        force: &[PathBuf],
    ) -> Result<(), SnapshotError> {
        let forced = |p: &[u8]| force.iter().any(|f| f.as_os_str().as_bytes() == p);
        let candidates: Vec<Vec<u8>> = changes
            .untracked
            .iter()
            .filter(|p| crate::secrets::looks_secret_bytes(p) && !forced(p))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let tracked = self.user_tracked_among(&candidates)?;
        let out: BTreeSet<&[u8]> = candidates
            .iter()
            .map(Vec::as_slice)
            .filter(|p| !tracked.contains(*p))
            .collect();
        changes.paths.retain(|p| !out.contains(p.as_slice()));
        Ok(())
    }

    /// After an `add` of whole directories: the files the private index took that look
    /// like secrets and the user's index does not track (nor `force` names) are dropped
    /// from it again. Whether it dropped any.
    fn drop_untracked_secrets(&self, force: &[PathBuf]) -> Result<bool, SnapshotError> {
        let work_index = self.work_index();
        let forced = |p: &[u8]| force.iter().any(|f| f.as_os_str().as_bytes() == p);
        let ours: Vec<Vec<u8>> = match fs::read(&work_index)
            .ok()
            .and_then(|b| index_file::parse(&b, self.oid_len))
        {
            Some(e) => e.paths().map(<[u8]>::to_vec).collect(),
            None => {
                let out = self
                    .private
                    .call(&["ls-files", "-z", "-c"])
                    .env("GIT_INDEX_FILE", &work_index)
                    .bytes()?;
                split_z(&out).map(<[u8]>::to_vec).collect()
            }
        };
        let candidates: Vec<Vec<u8>> = ours
            .into_iter()
            .filter(|p| crate::secrets::looks_secret_bytes(p) && !forced(p))
            .collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let tracked = self.user_tracked_among(&candidates)?;
        let drop: Vec<&[u8]> = candidates
            .iter()
            .map(Vec::as_slice)
            .filter(|p| !tracked.contains(*p))
            .collect();
        if drop.is_empty() {
            return Ok(false);
        }
        self.private
            .call(&["update-index", "--force-remove", "-z", "--stdin"])
            .env("GIT_INDEX_FILE", &work_index)
            .input(join_z(drop.into_iter()))
            .bytes()?;
        Ok(true)
    }

    /// Which of `paths` the user's index tracks: read from its file, else asked of git.
    fn user_tracked_among(&self, paths: &[Vec<u8>]) -> Result<BTreeSet<Vec<u8>>, SnapshotError> {
        let parsed = match fs::read(&self.index) {
            Ok(b) => index_file::parse(&b, self.oid_len),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(io(&self.index)(e)),
        };
        if let Some(entries) = parsed {
            return Ok(paths
                .iter()
                .filter(|p| entries.contains(p))
                .cloned()
                .collect());
        }
        let out = self
            .plain
            .call(&[
                "ls-files",
                "-z",
                "-c",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
            ])
            .env("GIT_LITERAL_PATHSPECS", "1")
            .input(join_z(paths.iter().map(Vec::as_slice)))
            .bytes()?;
        Ok(split_z(&out).map(<[u8]>::to_vec).collect())
    }

    /// Record the files `paths` (`joined`: NUL-terminated) as they are on disk, dropping
    /// the ones gone; `false` when one is a directory now (a nested repository: `add`
    /// knows what to do) or git refused (the caller falls back to `add`).
    fn update_files(&self, paths: &[Vec<u8>], joined: Vec<u8>) -> Result<bool, SnapshotError> {
        let dir_now = paths.iter().any(|p| {
            fs::symlink_metadata(self.top.join(OsStr::from_bytes(p))).is_ok_and(|m| m.is_dir())
        });
        if dir_now {
            return Ok(false);
        }
        let out = self
            .private
            .call(&[
                "update-index",
                "--add",
                "--remove",
                "--replace",
                "-z",
                "--stdin",
            ])
            .env("GIT_INDEX_FILE", self.work_index())
            .input(joined)
            .output()?;
        Ok(out.status.success())
    }

    /// Paths where the work tree differs from the private index (modified, deleted, of
    /// another type) and untracked files or directories (not ignored), from `git status`.
    /// Its refresh of the stat data and untracked cache is written back (optional locks).
    /// It runs in the scan's git directory when it can ([`scan`]: HEAD the last snapshot,
    /// so its comparison of the index with HEAD, which is not read, costs next to nothing).
    fn changed_paths(&self) -> Result<Changes, SnapshotError> {
        let status = || {
            self.private
                .call(&[
                    "status",
                    "--porcelain",
                    "-z",
                    "--untracked-files=normal",
                    "--ignore-submodules=dirty",
                    "--no-renames",
                ])
                .env("GIT_INDEX_FILE", self.work_index())
                .env("GIT_OPTIONAL_LOCKS", "1")
        };
        if let Some(dir) = self.scan_git_dir() {
            let out = status()
                .env("GIT_DIR", &dir)
                .env("GIT_WORK_TREE", &self.top)
                .output()?;
            if out.status.success() {
                return Ok(status_changes(&out.stdout));
            }
            self.forget_scan_head();
        }
        Ok(status_changes(&status().bytes()?))
    }

    /// The embedded repositories `add` left out; any other error stops.
    fn added(&self, add: &std::process::Output) -> Result<Vec<String>, SnapshotError> {
        let mut skipped = Vec::new();
        if add.status.success() {
            return Ok(skipped);
        }
        // An embedded repository without a commit has nothing git can record; it is
        // left out (and a rollback refuses to replace it). Any other error stops.
        let stderr = String::from_utf8_lossy(&add.stderr);
        for line in stderr.lines() {
            match line
                .strip_prefix("error: '")
                .and_then(|l| l.strip_suffix("' does not have a commit checked out"))
            {
                Some(p) => skipped.push(p.to_string()),
                None if line.starts_with("fatal: adding files failed") => {}
                None if line.starts_with("warning:") || line.starts_with("hint:") => {}
                None => {
                    return Err(GitError::Failed {
                        args: "add -A".into(),
                        dir: self.top.clone(),
                        stderr: stderr.trim().to_string(),
                    }
                    .into());
                }
            }
        }
        Ok(skipped)
    }

    /// Start the private index from the user's: its stat data saves hashing every file on
    /// the first save. The seed is a second link to the user's index file (git never
    /// writes an index in place, it renames a new file over it, so the user's is never
    /// written through the link), else a copy; either has the index's time, so git still
    /// re-checks entries written in the same second ("racy git"). It drops
    /// assume-unchanged, and skip-worktree where the file is on disk: a snapshot must see
    /// every edit.
    ///
    /// Made beside it and renamed into place once its flags are cleared: a save killed
    /// meanwhile leaves no private index (the next one seeds again), never one that still
    /// skips files or is torn.
    fn seed_work_index(&self) -> Result<(), SnapshotError> {
        let seed = self.private_dir().join("snapshot.index.seed");
        link_or_copy(&self.index, &seed)?;
        let (assumed, skipped) = self.flagged_entries(&seed)?;
        let on_disk =
            |p: &Vec<u8>| fs::symlink_metadata(self.top.join(OsStr::from_bytes(p))).is_ok();
        let skipped: Vec<Vec<u8>> = skipped.into_iter().filter(on_disk).collect();
        for (flag, paths) in [
            ("--no-assume-unchanged", assumed),
            ("--no-skip-worktree", skipped),
        ] {
            if !paths.is_empty() {
                self.private
                    .call(&["update-index", flag, "-z", "--stdin"])
                    .env("GIT_INDEX_FILE", &seed)
                    .input(join_z(paths.iter().map(Vec::as_slice)))
                    .bytes()?;
            }
        }
        let work_index = self.work_index();
        fs::rename(&seed, &work_index).map_err(io(&work_index))
    }

    /// The paths of `index` marked assume-unchanged, and those marked skip-worktree: read
    /// from the file, or from `ls-files -v` when it does not read plainly.
    fn flagged_entries(&self, index: &Path) -> Result<Flagged, SnapshotError> {
        let (mut assumed, mut skipped) = (Vec::new(), Vec::new());
        let bytes = fs::read(index).map_err(io(index))?;
        if index_file::none_flagged(&bytes, self.oid_len) == Some(true) {
            return Ok((assumed, skipped));
        }
        if let Some(entries) = index_file::parse(&bytes, self.oid_len) {
            for (path, e) in entries.iter() {
                if e.assume_unchanged {
                    assumed.push(path.to_vec());
                }
                if e.skip_worktree {
                    skipped.push(path.to_vec());
                }
            }
            return Ok((assumed, skipped));
        }
        let out = self
            .private
            .call(&["ls-files", "-v", "-z"])
            .env("GIT_INDEX_FILE", index)
            .bytes()?;
        for e in split_z(&out) {
            let (Some(tag), Some(path)) = (e.first(), e.get(2..)) else {
                continue;
            };
            if tag.is_ascii_lowercase() {
                assumed.push(path.to_vec());
            }
            if tag.eq_ignore_ascii_case(&b'S') {
                skipped.push(path.to_vec());
            }
        }
        Ok((assumed, skipped))
    }

    /// `add -A` skips ignored files unless the index tracks them, so the private index must
    /// track the same ignored files as the user's index (plus `force`): what to drop and
    /// what to add (nothing is changed here).
    fn ignored_plan(&self, has_index: bool, force: &[PathBuf]) -> Result<Plan, SnapshotError> {
        let work_index = self.work_index();
        let ignored_tracked = |index: &Path| -> Result<BTreeSet<Vec<u8>>, SnapshotError> {
            let out = self
                .private
                .call(&["ls-files", "-z", "-c", "-i", "--exclude-standard"])
                .env("GIT_INDEX_FILE", index)
                .bytes()?;
            Ok(split_z(&out).map(<[u8]>::to_vec).collect())
        };
        let ours = if work_index.exists() {
            ignored_tracked(&work_index)?
        } else {
            BTreeSet::new()
        };
        let user: BTreeSet<Vec<u8>> = if !has_index {
            BTreeSet::new()
        } else if let Some(user) = self.user_tracks_of(&ours) {
            user
        } else {
            ignored_tracked(&self.index)?
        };
        let drop = ours.difference(&user).cloned().collect();
        let add = user
            .difference(&ours)
            .cloned()
            .chain(force.iter().map(|p| p.as_os_str().as_bytes().to_vec()))
            .filter(|p| fs::symlink_metadata(self.top.join(OsStr::from_bytes(p))).is_ok())
            .collect();
        Ok(Plan { drop, add })
    }

    /// Drop from the private index and add to it what `plan` says.
    fn apply_plan(&self, plan: &Plan) -> Result<(), SnapshotError> {
        let work_index = self.work_index();
        if !plan.drop.is_empty() {
            self.private
                .call(&["update-index", "--force-remove", "-z", "--stdin"])
                .env("GIT_INDEX_FILE", &work_index)
                .input(join_z(plan.drop.iter().map(Vec::as_slice)))
                .bytes()?;
        }
        if !plan.add.is_empty() {
            self.private
                .call(&[
                    "add",
                    "-f",
                    "-A",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ])
                .env("GIT_INDEX_FILE", &work_index)
                .env("GIT_LITERAL_PATHSPECS", "1")
                .input(join_z(plan.add.iter().map(Vec::as_slice)))
                .bytes()?;
        }
        Ok(())
    }

    /// The key of the user's index file as it is now (`None`: no file, or no checksum).
    fn user_index_key(&self) -> Result<Option<cache::IndexKey>, SnapshotError> {
        match File::open(&self.index) {
            Ok(mut f) => cache::IndexKey::of(&mut f).map_err(io(&self.index)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&self.index)(e)),
        }
    }

    /// The ignored files the user's index tracks, known without asking git when both
    /// indexes read plainly and every path of the user's index that is on disk is in the
    /// private one too: then they are exactly those of `ours` (the ignored files the private
    /// index tracks) that the user's index has. `None`: ask git.
    fn user_tracks_of(&self, ours: &BTreeSet<Vec<u8>>) -> Option<BTreeSet<Vec<u8>>> {
        let read = |p: &Path| fs::read(p).ok();
        let (user, private) = (read(&self.index)?, read(&self.work_index())?);
        let user = index_file::parse(&user, self.oid_len)?;
        let private = index_file::parse(&private, self.oid_len)?;
        let unknown = user
            .missing_from(&private)
            .into_iter()
            .any(|p| fs::symlink_metadata(self.top.join(OsStr::from_bytes(p))).is_ok());
        if unknown {
            return None;
        }
        Some(ours.iter().filter(|p| user.contains(p)).cloned().collect())
    }

    fn commit_and_tag(
        &self,
        req: &SaveRequest<'_>,
        cap: &Captured,
        keep: &[String],
        trailers: &[String],
        numbering: Numbering,
    ) -> Result<Snapshot, SnapshotError> {
        let secs = req.time_ms.div_euclid(1000);
        let date = format!("@{secs} +0000");
        // Number (unless taken before), name and tag under one lock across work trees: two
        // saves at once never take one number or race for one name. No listing of every
        // tag for a plain save: its number comes from the counter, and a name is known
        // taken by its ref file (or by `git tag` refusing a packed one).
        let numbers = self.seq_lock()?;
        let (seq, unsynced, taken) = match numbering {
            Numbering::Taken(seq) => (seq, None, BTreeSet::new()),
            Numbering::AtTag(listed) => {
                let (at_least, taken) = match listed {
                    Some((existing, taken)) => {
                        (existing.iter().map(|s| s.seq).max().unwrap_or(0), taken)
                    }
                    None => (0, BTreeSet::new()),
                };
                let (seq, unsynced) = self.take_seq(at_least, &numbers)?;
                (seq, Some(unsynced), taken)
            }
        };
        let message = clean_message(req.message, req.kind);
        let mut snap = Snapshot {
            tag: String::new(),
            kind: req.kind,
            task: req.task,
            message,
            time_ms: req.time_ms,
            seq,
            branch: cap.branch.clone(),
            head: cap.head.clone(),
            commit: String::new(),
            skipped: cap.skipped.clone(),
        };
        let mut text = tag_message(&snap);
        for t in trailers {
            text.push_str(t);
            text.push('\n');
        }
        let head: Vec<&str> = cap.head.iter().map(String::as_str).collect();
        let index_commit = match &cap.index_commit {
            Some(c) => c.clone(),
            None => self.index_commit(
                &cap.index_tree,
                cap.head.as_deref(),
                cap.index_key.as_ref(),
                req.time_ms,
            )?,
        };
        let mut parents = head.clone();
        parents.push(&index_commit);
        parents.extend(keep.iter().map(String::as_str));
        // A number taken now goes to disk while the commit is written, and is there before
        // the tag.
        let commit = || self.commit_tree(&cap.work_tree, &parents, &text, req.time_ms);
        snap.commit = match unsynced {
            Some(unsynced) => while_syncing(unsynced, commit)??,
            None => commit()?,
        };

        let base = req.kind.base_name(req.task, secs, seq);
        for n in 1.. {
            let name = if n == 1 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            if taken.contains(&name) || self.tag_file_exists(&name) {
                continue;
            }
            let out = self
                .git
                .call(&[
                    "-c",
                    "tag.gpgSign=false",
                    "tag",
                    "-a",
                    "--cleanup=verbatim",
                    "-F",
                    "-",
                    &name,
                    &snap.commit,
                ])
                .env("GIT_COMMITTER_NAME", IDENT_NAME)
                .env("GIT_COMMITTER_EMAIL", IDENT_EMAIL)
                .env("GIT_COMMITTER_DATE", &date)
                .input(text.as_bytes().to_vec())
                .output()?;
            if out.status.success() {
                let made = tags::MadeCommit {
                    tree: cap.work_tree.clone(),
                    parents: parents.iter().map(|p| p.to_string()).collect(),
                    index_tree: cap.index_tree.clone(),
                };
                self.remember_tag(&name, &text, (&snap.commit, made));
                // Not at a first save, which scanned the user's HEAD and should cost
                // little more than a `git status`: the next one makes the directory.
                if !cap.seeded_now {
                    self.remember_scan_head(&snap.commit);
                }
                snap.tag = name;
                return Ok(snap);
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            // Made by someone else since we listed: take the next name.
            if !stderr.contains("already exists") || n > 1000 {
                return Err(GitError::Failed {
                    args: format!("tag -a {name}"),
                    dir: self.top.clone(),
                    stderr: stderr.trim().to_string(),
                }
                .into());
            }
        }
        unreachable!("the loop above returns")
    }

    /// A snapshot commit of `tree` with `parents` and message `msg`, dated `time_ms`.
    fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        msg: &str,
        time_ms: i64,
    ) -> Result<String, SnapshotError> {
        let date = format!("@{} +0000", time_ms.div_euclid(1000));
        let mut args = vec!["commit-tree", "--no-gpg-sign", tree];
        for p in parents {
            args.extend(["-p", p]);
        }
        Ok(self
            .git
            .call(&args)
            .env("GIT_AUTHOR_NAME", IDENT_NAME)
            .env("GIT_AUTHOR_EMAIL", IDENT_EMAIL)
            .env("GIT_COMMITTER_NAME", IDENT_NAME)
            .env("GIT_COMMITTER_EMAIL", IDENT_EMAIL)
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .input(msg.as_bytes().to_vec())
            .text()?)
    }

    /// The snapshot's commit of the user's index (tree `tree`, parent `head`), remembered
    /// in `index.cache` for that index file (`key`).
    fn index_commit(
        &self,
        tree: &str,
        head: Option<&str>,
        key: Option<&cache::IndexKey>,
        time_ms: i64,
    ) -> Result<String, SnapshotError> {
        let parents: Vec<&str> = head.into_iter().collect();
        let c = self.commit_tree(tree, &parents, "taskdaemon snapshot: the index\n", time_ms)?;
        if let Some(key) = key {
            self.remember_index(&cache::CachedIndex {
                key: key.clone(),
                head: head.map(str::to_string),
                tree: tree.to_string(),
                commit: c.clone(),
            });
        }
        Ok(c)
    }

    fn rev(&self, spec: &str) -> Result<Option<String>, SnapshotError> {
        let out = self
            .git
            .call(&["rev-parse", "-q", "--verify", "--end-of-options", spec])
            .output()?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// Paths the snapshot adds that exist on disk although the current state lacks them:
    /// ignored files or directories a rollback would overwrite. Also an ignored file
    /// standing where the snapshot needs a directory. An existing directory on the way is
    /// no collision: the rollback only adds to it.
    fn ignored_in_the_way(&self, raw: &[RawChange]) -> Vec<PathBuf> {
        let mut found = BTreeSet::new();
        for c in raw.iter().filter(|c| c.status == 'A') {
            let path = PathBuf::from(OsStr::from_bytes(&c.path));
            if fs::symlink_metadata(self.top.join(&path)).is_ok() {
                found.insert(path);
                continue;
            }
            let mut up = path.clone();
            while up.pop() && !up.as_os_str().is_empty() {
                match fs::symlink_metadata(self.top.join(&up)) {
                    Ok(m) if m.is_dir() => break,
                    Ok(_) => {
                        found.insert(up.clone());
                        break;
                    }
                    Err(_) => {}
                }
            }
        }
        found.into_iter().collect()
    }

    /// A submodule or nested repository (recorded as a gitlink, or skipped because it has
    /// no commit) would be deleted if the snapshot has a file at its path or below it.
    fn refuse_if_repository_in_the_way(
        &self,
        raw: &[RawChange],
        skipped: &[String],
    ) -> Result<(), SnapshotError> {
        let mut repos: Vec<Vec<u8>> = raw
            .iter()
            .filter(|c| c.src_mode == "160000" && c.dst_mode != "160000")
            .map(|c| c.path.clone())
            .collect();
        repos.extend(
            skipped
                .iter()
                .map(|s| s.trim_end_matches('/').as_bytes().to_vec()),
        );
        for repo in &repos {
            let below = |p: &[u8]| {
                p == repo.as_slice() || (p.starts_with(repo) && p.get(repo.len()) == Some(&b'/'))
            };
            if raw
                .iter()
                .any(|c| c.dst_mode != "000000" && c.dst_mode != "160000" && below(&c.path))
            {
                return Err(SnapshotError::RepositoryInTheWay {
                    path: String::from_utf8_lossy(repo).into_owned(),
                });
            }
        }
        Ok(())
    }

    /// Lock and release the refs the rollback will move, so a ref it cannot write (a lock
    /// left behind, a name conflict) stops it before anything changed. The session stays
    /// open for the move (`why`: its reflog message).
    fn check_refs(
        &self,
        target: &Snapshot,
        why: &str,
    ) -> Result<Option<ref_session::RefSession>, SnapshotError> {
        let zero = "0".repeat(target.commit.len());
        let line = match (&target.branch, &target.head) {
            (Some(b), Some(h)) => format!("update {b} {h}\n"),
            (None, Some(h)) => format!("option no-deref\nupdate HEAD {h}\n"),
            (Some(b), None) if self.rev(b)?.is_some() => format!("delete {b}\n"),
            (Some(b), None) => format!("verify {b} {zero}\n"),
            (None, None) => return Ok(None),
        };
        let mut session = ref_session::RefSession::start(&self.git, why)?;
        session.transaction(&line, ref_session::End::Abort)?;
        Ok(Some(session))
    }

    /// Branch tips that would become unreachable when the rollback moves or deletes the
    /// snapshot's branch while another is checked out.
    fn tips_a_rollback_moves(
        &self,
        target: &Snapshot,
        now: &Captured,
    ) -> Result<Vec<String>, SnapshotError> {
        let Some(branch) = &target.branch else {
            return Ok(Vec::new());
        };
        if now.branch.as_ref() == Some(branch) {
            return Ok(Vec::new()); // its tip is the safety snapshot's first parent
        }
        Ok(self
            .rev(&format!("{branch}^{{commit}}"))?
            .filter(|tip| Some(tip) != target.head.as_ref())
            .into_iter()
            .collect())
    }

    fn refuse_if_in_progress(&self) -> Result<(), SnapshotError> {
        let checks: [(&str, &'static str, &'static str); 6] = [
            ("MERGE_HEAD", "merge", "merge --abort"),
            ("rebase-merge", "rebase", "rebase --abort"),
            (
                "rebase-apply",
                "rebase or am",
                "rebase --abort` or `git am --abort",
            ),
            ("CHERRY_PICK_HEAD", "cherry-pick", "cherry-pick --abort"),
            ("REVERT_HEAD", "revert", "revert --abort"),
            ("BISECT_LOG", "bisect", "bisect reset"),
        ];
        for (file, what, abort) in checks {
            if self.git_dir.join(file).exists() {
                return Err(SnapshotError::InProgress {
                    what,
                    abort,
                    dir: self.top.clone(),
                });
            }
        }
        Ok(())
    }

    fn refuse_if_checked_out_elsewhere(&self, branch: &str) -> Result<(), SnapshotError> {
        if !self.common_dir.join("worktrees").is_dir() {
            return Ok(());
        }
        let out = self.git.run(&["worktree", "list", "--porcelain"])?;
        let here = self.top.canonicalize().unwrap_or(self.top.clone());
        let mut path = "";
        for line in out.lines() {
            if let Some(p) = line.strip_prefix("worktree ") {
                path = p;
            } else if line.strip_prefix("branch ") == Some(branch) {
                let there = Path::new(path);
                if there.canonicalize().unwrap_or(there.to_path_buf()) != here {
                    return Err(SnapshotError::BranchElsewhere {
                        branch: branch.trim_start_matches("refs/heads/").to_string(),
                        worktree: path.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    fn unmerged_paths(&self) -> Result<String, SnapshotError> {
        let out = self
            .git
            .call(&["diff", "--name-only", "-z", "--diff-filter=U"])
            .bytes()?;
        let paths: Vec<String> = split_z(&out)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Ok(paths.join(", "))
    }
}

/// One line of `diff-tree --raw`.
#[derive(Debug, Clone)]
struct RawChange {
    src_mode: String,
    dst_mode: String,
    /// The object on the `to` side (zeros when deleted).
    dst_oid: String,
    status: char,
    path: Vec<u8>,
}

fn tree_diff(raw: &[RawChange]) -> TreeDiff {
    let mut d = TreeDiff::default();
    for c in raw {
        let path = String::from_utf8_lossy(&c.path).into_owned();
        match c.status {
            'A' => d.added.push(path),
            'D' => d.deleted.push(path),
            _ => d.modified.push(path),
        }
    }
    d
}

const EMPTY_TREE_SHA1: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
const EMPTY_TREE_SHA256: &str = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321";

/// `to` made a second link to the regular file `from` (no copy to write: ~1 ms of a first
/// save at 10k files, ~6 ms at 100k), else a copy of it ([`copy_keeping_mtime`]).
/// Whatever `to` was (a seed a killed save left, a link a person put there) is replaced,
/// never written through.
fn link_or_copy(from: &Path, to: &Path) -> Result<(), SnapshotError> {
    match fs::remove_file(to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(to)(e)),
    }
    let plain = fs::symlink_metadata(from).is_ok_and(|m| m.is_file());
    if plain && fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    copy_keeping_mtime(from, from, to)
}

/// `ours` made a file of its own again if it is still a link to `theirs` (the scan that
/// seeded it from there writes it anew, but not when it found nothing to write): a tool
/// that rewrote `theirs` in place must not reach it.
fn unlink_from(ours: &Path, theirs: &Path) -> Result<(), SnapshotError> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| fs::symlink_metadata(p).map(|m| (m.dev(), m.ino())).ok();
    match (id(ours), id(theirs)) {
        (Some(a), Some(b)) if a == b => copy_keeping_mtime(ours, ours, ours),
        _ => Ok(()),
    }
}

/// Copy `from` to `to` (and its mode), giving the copy the modification time of
/// `time_of`: written beside `to` and renamed onto it, so `to` is never torn and a
/// symbolic link there is replaced, not written through.
fn copy_keeping_mtime(from: &Path, time_of: &Path, to: &Path) -> Result<(), SnapshotError> {
    let dir = to.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(io(dir))?;
    let mut source = File::open(from).map_err(io(from))?;
    let mode = source.metadata().map_err(io(from))?.permissions();
    std::io::copy(&mut source, tmp.as_file_mut()).map_err(io(to))?;
    tmp.as_file().set_permissions(mode).map_err(io(to))?;
    let mtime = fs::metadata(time_of)
        .and_then(|m| m.modified())
        .map_err(io(time_of))?;
    tmp.as_file().set_modified(mtime).map_err(io(to))?;
    tmp.persist(to).map_err(|e| io(to)(e.error))?;
    Ok(())
}

/// `f` run while `unsynced` is synced on another thread (after it, when no thread can be
/// had): its result once both are done, or the sync's error.
fn while_syncing<T>(unsynced: SeqUnsynced, f: impl FnOnce() -> T) -> Result<T, SnapshotError> {
    let unsynced = std::sync::Mutex::new(Some(unsynced));
    let sync = || match unsynced.lock().ok().and_then(|mut u| u.take()) {
        Some(u) => u.sync(),
        None => Ok(()),
    };
    let (done, synced) = std::thread::scope(|s| {
        let syncing = std::thread::Builder::new().spawn_scoped(s, sync).ok();
        (f(), syncing.map(joined))
    });
    synced.unwrap_or_else(sync)?;
    Ok(done)
}

/// What a scoped thread returned (its panic, if it panicked, goes on in this one).
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn copy_if_exists(from: &Path, to: &Path) -> Result<bool, SnapshotError> {
    match fs::copy(from, to) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match fs::remove_file(to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(to)(e)),
            }
            Ok(false)
        }
        Err(e) => Err(io(from)(e)),
    }
}

fn split_z(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|b| *b == 0).filter(|p| !p.is_empty())
}

fn join_z<'a>(paths: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p);
        out.push(0);
    }
    out
}

/// Entries of `git status --porcelain -z` (a rename carries its old path as an extra field).
fn porcelain_entries(out: &[u8]) -> usize {
    let mut n = 0;
    let mut it = split_z(out);
    while let Some(entry) = it.next() {
        n += 1;
        if matches!(entry.first(), Some(b'R' | b'C')) {
            it.next();
        }
    }
    n
}

/// What `git status` names: paths, and whether an untracked directory is among them.
#[derive(Debug, Default, PartialEq)]
struct Changes {
    paths: Vec<Vec<u8>>,
    dirs: bool,
    /// The untracked files among `paths` (not directories).
    untracked: Vec<Vec<u8>>,
}

/// Up to this many changed paths are added by name; more, by `add -A`.
const ADD_FEW: usize = 2000;

/// From `git status --porcelain -z --no-renames`: the paths whose work tree column shows
/// a change, and untracked ones (a directory without its trailing slash, so a pathspec
/// takes all of it).
fn status_changes(out: &[u8]) -> Changes {
    let mut c = Changes::default();
    let mut it = split_z(out);
    while let Some(entry) = it.next() {
        let (Some(&x), Some(&y), Some(path)) = (entry.first(), entry.get(1), entry.get(3..)) else {
            continue;
        };
        if matches!(x, b'R' | b'C') {
            it.next();
        }
        if y != b' ' || x == b'?' {
            let dir = path.strip_suffix(b"/");
            c.dirs |= dir.is_some();
            let path = dir.unwrap_or(path);
            if !path.is_empty() {
                c.paths.push(path.to_vec());
                if x == b'?' && dir.is_none() {
                    c.untracked.push(path.to_vec());
                }
            }
        }
    }
    c
}

/// The message as stored: no NUL bytes, no trailing blank lines, never empty.
fn clean_message(message: &str, kind: Kind) -> String {
    let m = message.replace('\0', "").trim_end().to_string();
    if m.trim().is_empty() {
        format!("{} snapshot", kind.as_str())
    } else {
        m
    }
}

fn tag_message(s: &Snapshot) -> String {
    let mut t = format!("{}\n\nSnapshot-Kind: {}\n", s.message, s.kind.as_str());
    if let Some(n) = s.task {
        t.push_str(&format!("Snapshot-Task: {n}\n"));
    }
    t.push_str(&format!(
        "Snapshot-Branch: {}\nSnapshot-Head: {}\nSnapshot-Time: {}\nSnapshot-Seq: {}\n",
        s.branch.as_deref().unwrap_or("detached"),
        s.head.as_deref().unwrap_or("unborn"),
        s.time_ms,
        s.seq
    ));
    t
}

/// A snapshot from its tag's name, target and message; `None` for other tags.
fn parse_tag(tag: &str, commit: &str, contents: &str) -> Option<Snapshot> {
    if commit.is_empty() {
        return None; // a lightweight tag
    }
    let at = contents.rfind("\n\nSnapshot-Kind: ")?;
    let message = contents[..at].to_string();
    let mut s = Snapshot {
        tag: tag.to_string(),
        kind: Kind::Manual,
        task: None,
        message,
        time_ms: 0,
        seq: 0,
        branch: None,
        head: None,
        commit: commit.to_string(),
        skipped: Vec::new(),
    };
    let mut kind = None;
    for line in contents[at + 2..].lines() {
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        match key {
            "Snapshot-Kind" => kind = Kind::parse(value),
            "Snapshot-Task" => s.task = value.parse().ok(),
            "Snapshot-Branch" => s.branch = (value != "detached").then(|| value.to_string()),
            "Snapshot-Head" => s.head = (value != "unborn").then(|| value.to_string()),
            "Snapshot-Time" => s.time_ms = value.parse().ok()?,
            "Snapshot-Seq" => s.seq = value.parse().ok()?,
            _ => {}
        }
    }
    s.kind = kind?;
    Some(s)
}

/// Up to three snapshot names closest to `tag` (the shared did-you-mean).
fn nearest_tags(tag: &str, all: &[Snapshot]) -> Vec<String> {
    crate::yaml::suggestions(tag, all.iter().map(|s| s.tag.as_str()), 3)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// A manual save's request dated `time_ms`, for tests.
#[cfg(test)]
fn manual_request(time_ms: i64) -> SaveRequest<'static> {
    SaveRequest {
        kind: Kind::Manual,
        task: None,
        message: "a save",
        time_ms,
    }
}

/// A manual save dated `time_ms`, for tests.
#[cfg(test)]
fn manual_save(s: &Snapshots, time_ms: i64) -> Snapshot {
    s.save(&manual_request(time_ms)).unwrap()
}

#[cfg(test)]
mod secrets_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_save_during_a_conflict_is_refused_and_leaves_no_private_index() {
        use crate::git::testrepo::{commit_all, git, init};
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        init(dir);
        std::fs::write(dir.join("f"), "base\n").unwrap();
        commit_all(dir, "base");
        git(dir, &["switch", "-q", "-c", "other"]);
        std::fs::write(dir.join("f"), "other\n").unwrap();
        commit_all(dir, "other");
        git(dir, &["switch", "-q", "main"]);
        std::fs::write(dir.join("f"), "main\n").unwrap();
        commit_all(dir, "main");
        let merged = std::process::Command::new("git")
            .args(["-C", dir.to_str().unwrap(), "merge", "-q", "other"])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(!merged.status.success(), "a conflict");
        let s = Snapshots::open(dir).unwrap();
        let err = s.save(&manual_request(1_000)).unwrap_err();
        assert!(matches!(err, SnapshotError::Unmerged { .. }), "{err}");
        assert!(!s.work_index().exists(), "seeded from a conflicted index");
        // Resolved: the next save is a first save, and records the resolution.
        std::fs::write(dir.join("f"), "resolved\n").unwrap();
        git(dir, &["add", "f"]);
        let snap = s.save(&manual_request(2_000)).unwrap();
        assert_eq!(
            git(dir, &["show", &format!("{}:f", snap.commit)]).trim(),
            "resolved"
        );
        // The refused save had taken its number before its capture: a gap, which only
        // orders the listing.
        assert_eq!(snap.seq, 2);
        assert_eq!(s.list().unwrap(), vec![snap]);
    }

    #[test]
    fn a_first_save_seeds_from_the_users_index_without_writing_it() {
        use crate::git::testrepo::{commit_all, git, init};
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        init(dir);
        for f in ["a", "b"] {
            std::fs::write(dir.join(f), "1\n").unwrap();
        }
        commit_all(dir, "one");
        git(dir, &["update-index", "--assume-unchanged", "b"]);
        std::fs::write(dir.join("a"), "2\n").unwrap();
        std::fs::write(dir.join("b"), "2\n").unwrap();
        let index = dir.join(".git/index");
        let before = (
            std::fs::read(&index).unwrap(),
            std::fs::metadata(&index).unwrap(),
        );
        let s = Snapshots::open(dir).unwrap();
        let first = s.save(&manual_request(1_000)).unwrap();
        // The user's index: the same bytes (its flag kept), time and single link.
        let after = std::fs::metadata(&index).unwrap();
        assert_eq!(std::fs::read(&index).unwrap(), before.0);
        assert_eq!(after.modified().unwrap(), before.1.modified().unwrap());
        assert_eq!((after.ino(), after.nlink()), (before.1.ino(), 1));
        // The private index dropped the flag: the edit of `b` is saved.
        for f in ["a", "b"] {
            let saved = git(dir, &["show", &format!("{}:{f}", first.commit)]);
            assert_eq!(saved, "2", "{f}");
        }
        // The user's next `git add` does not reach the private index, nor the next save.
        std::fs::write(dir.join("a"), "3\n").unwrap();
        git(dir, &["add", "a"]);
        std::fs::write(dir.join("a"), "4\n").unwrap();
        let next = s.save(&manual_request(2_000)).unwrap();
        assert_eq!(git(dir, &["show", &format!("{}:a", next.commit)]), "4");
        assert_eq!(git(dir, &["show", &format!("{}^2:a", next.commit)]), "3");
    }

    #[test]
    fn a_private_index_still_linked_to_the_users_is_made_its_own() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let (user, ours) = (d.path().join("index"), d.path().join("snapshot.index"));
        std::fs::write(&user, "the user's index").unwrap();
        link_or_copy(&user, &ours).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&user), ino(&ours), "linked");
        unlink_from(&ours, &user).unwrap();
        assert_ne!(ino(&user), ino(&ours));
        assert_eq!(std::fs::read(&ours).unwrap(), b"the user's index");
        assert_eq!(std::fs::metadata(&user).unwrap().nlink(), 1);
        // A tool that writes the user's index in place no longer reaches ours.
        std::fs::write(&user, "rewritten in place").unwrap();
        assert_eq!(std::fs::read(&ours).unwrap(), b"the user's index");
        // Already its own: left as it is.
        let before = ino(&ours);
        unlink_from(&ours, &user).unwrap();
        assert_eq!(ino(&ours), before);
    }

    #[test]
    fn lock_texts_name_the_holder_and_what_to_do() {
        let lock = Path::new("/r/.git/taskdaemon/snapshot.lock");
        let me = std::process::id() as i32;
        assert_eq!(
            lock_wait_text(lock, Some(me), "5m 00s"),
            format!(
                "/r/.git/taskdaemon/snapshot.lock is held by another loop of this taskdaemon (pid {me}) and was not let go in 5m 00s: its snapshot save or rollback is stuck\n  hint: see the git processes it runs (`ps --ppid {me} -o pid,stat,etime,args`): end a stuck one (`kill PID`), or cancel that loop (`taskdaemon cancel RUN`)"
            )
        );
        let other = lock_wait_text(lock, Some(i32::MAX), "5m 00s");
        assert!(other.starts_with("/r/.git/taskdaemon/snapshot.lock is held by another taskdaemon (pid 2147483647) and was not let go in 5m 00s: a snapshot save or rollback is stopped or hung\n  hint: see what it does (`ps -o pid,stat,args -p 2147483647`)"), "{other}");
        let unknown = lock_wait_text(lock, None, "5m 00s");
        assert!(
            unknown.starts_with(
                "/r/.git/taskdaemon/snapshot.lock is held by another process and was not let go"
            ),
            "{unknown}"
        );
        assert!(
            unknown.contains("`fuser -v /r/.git/taskdaemon/snapshot.lock`"),
            "{unknown}"
        );
        assert_eq!(
            waiting_text(lock, Some(i32::MAX)),
            "waiting for /r/.git/taskdaemon/snapshot.lock: another taskdaemon (pid 2147483647) is saving or rolling back snapshots of this work tree; the wait lasts at most 5m 00s, and a stop (Ctrl-C) ends it"
        );
    }

    #[test]
    fn tag_messages_round_trip() {
        let s = Snapshot {
            tag: "task-2-pre".into(),
            kind: Kind::TaskPre,
            task: Some(2),
            message: "pre-task 2: add mul\n\nwith a body".into(),
            time_ms: 1_763_726_400_123,
            seq: 7,
            branch: Some("refs/heads/main".into()),
            head: None,
            commit: "abc".into(),
            skipped: Vec::new(),
        };
        let parsed = parse_tag("task-2-pre", "abc", &tag_message(&s)).unwrap();
        assert_eq!(parsed, s);
        assert!(parse_tag("v1", "abc", "release 1\n").is_none());
        assert!(parse_tag("task-2-pre", "", &tag_message(&s)).is_none());
    }

    #[test]
    fn status_names_changed_files_and_untracked_directories() {
        let c = status_changes(b" M a\0?? b\0M  staged\0 D gone\0");
        assert_eq!(c.paths, [&b"a"[..], b"b", b"gone"]);
        assert!(!c.dirs);
        let c = status_changes(b"?? new/\0 T t\0");
        assert_eq!(c.paths, [&b"new"[..], b"t"]);
        assert!(c.dirs, "an untracked directory goes to `add`");
    }

    #[test]
    fn porcelain_counts_renames_once() {
        assert_eq!(porcelain_entries(b"R  new\0old\0?? x\0 M y\0"), 3);
        assert_eq!(porcelain_entries(b""), 0);
    }

    #[test]
    fn names_for_each_kind() {
        assert_eq!(Kind::TaskPre.base_name(Some(3), 9, 4), "task-3-pre");
        assert_eq!(Kind::TaskPost.base_name(Some(3), 9, 4), "task-3-post");
        assert_eq!(
            Kind::Manual.base_name(None, 1708123456, 4),
            "manual-1708123456"
        );
        assert_eq!(Kind::Stall.base_name(Some(3), 9, 4), "stall-3-recovery");
        assert_eq!(Kind::PreRollback.base_name(None, 5, 4), "pre-rollback-5");
        assert_eq!(Kind::RunPre.base_name(None, 5, 4), "run-4-pre");
    }
}
