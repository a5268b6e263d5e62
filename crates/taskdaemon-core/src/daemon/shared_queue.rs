//! The daemon's side of the shared queue (issue 19: daemons on several machines, one
//! PostgreSQL queue, one git remote). Only used when the project's records live in the
//! queue (`queue:`); the JSONL daemon never reaches this module.
//!
//! * Runs the scheduler finds ready are claimed ([`Records::claim`]): only what the claim
//!   returns starts here. Runs whose lease expired are taken over on every pass.
//! * A lease is renewed while its run lives (one ticker for all of them); a run whose lease
//!   is no longer ours — or could not be renewed for longer than the lease — stops at once
//!   and writes nothing more.
//! * After every iteration, and before a run's end is recorded, its branch is pushed to the
//!   shared remote: a run is complete only once its work is on the remote, so the next
//!   phase can start on any machine.
//! * The cascade advances under one lock across machines (`cascade`), re-reading the
//!   records inside it, so its checks ("this spec's phase N has a run") see every daemon's
//!   writes and two daemons never advance it twice.
//! * Merges take the lock `merge:<target>` across machines, are made against the remote's
//!   target and pushed ([`Remote::merge`]), and recorded once ([`Records::record_merge`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::git::remote::marks::Mark;
use crate::git::remote::{Adopted, Pushed, Remote, RemoteMerge};
use crate::git::worktree::Worktrees;
use crate::scheduler::cascade::MergeEnd;
use crate::scheduler::context::branch_for;
use crate::store::queue::LOG_LIMIT;
use crate::store::{Holder, LoopRun, QueueConfig, Records, RunStatus};

/// The shared queue's settings for a daemon.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// The git remote every clone shares (`queue-remote`).
    pub remote: String,
    /// How long a lease lasts without renewal (`queue-lease`).
    pub lease: Duration,
    /// Runs at once for the project across all machines (`queue-max-loops`); none: only
    /// the per-machine limits.
    pub max_loops: Option<usize>,
    /// Attempts of a merge whose push someone else's push keeps rejecting.
    pub merge_tries: usize,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            remote: "origin".into(),
            lease: Duration::from_secs(30),
            max_loops: None,
            merge_tries: 5,
        }
    }
}

/// Why a run stops on the shared queue.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Another machine holds its lease: it writes nothing more and is given up.
    Lost(String),
    /// Its lease could not be renewed (the database does not answer): it stops before
    /// another machine could take it over, and goes on here if the lease is still this
    /// daemon's once the database answers.
    Unreachable(String),
}

impl Stop {
    pub fn why(&self) -> &str {
        match self {
            Stop::Lost(w) | Stop::Unreachable(w) => w,
        }
    }
}

/// What the dispatcher keeps about the queue.
#[derive(Debug)]
pub struct QueueSide {
    pub config: QueueConfig,
    pub holder: Holder,
    pub opts: QueueOptions,
    pub remote: Remote,
    /// When each active run's lease was last renewed.
    renewed: HashMap<String, Instant>,
    /// The complete spec runs (id, last change) whose documents this daemon has taken:
    /// they do not change after.
    docs_taken: std::collections::HashSet<(String, i64)>,
    /// Pushes of runs' branches (and plan documents) after an iteration, by worktree, each
    /// on a thread of its own: a slow remote must not hold the daemon's loop (its lease
    /// renewals above all).
    pushes: HashMap<String, std::thread::JoinHandle<Vec<String>>>,
    /// The iterations each worktree's run finished, as pushed with its branch.
    marks: HashMap<String, Mark>,
    /// When the lease holders were last kept for `status` (see [`QueueSide::holders_due`]).
    holders_kept: Option<Instant>,
    /// The writes the database did not answer, made once it does.
    pub journal: super::journal::Journal,
    /// Whether the database did not answer the last time it was asked.
    unreachable: bool,
    /// Until when runs whose lease expired are not taken over: the database answers again
    /// after an outage, and the daemons cut off by it get a lease's time to renew theirs.
    quiet_until: Option<Instant>,
    /// Runs stopped here because their lease could not be renewed (the database did not
    /// answer): they go on here if it is still this daemon's once it answers.
    pub waiting: std::collections::BTreeSet<String>,
}

impl QueueSide {
    /// The queue side of a daemon whose records are `records`; `None` for the JSONL store.
    /// The leases of this clone's previous daemon (named in `<daemon_dir>/queue-holder`;
    /// it is gone, since this one holds the clone's daemon lock) are released, so its runs
    /// are taken over now rather than when its leases expire; `note` says how many.
    pub fn open(
        records: &mut Records,
        worktrees: &Worktrees,
        opts: QueueOptions,
        daemon_dir: &std::path::Path,
        note: &dyn Fn(String),
    ) -> Result<Option<QueueSide>, String> {
        let Some(config) = records.queue().cloned() else {
            return Ok(None);
        };
        let remote = Remote::open(worktrees, &opts.remote).map_err(|e| e.to_string())?;
        let holder = Holder::this_process();
        let file = daemon_dir.join("queue-holder");
        // The writes this clone's previous daemon could not make: made now, under its leases,
        // before they are released.
        let (mut journal, unreadable) =
            super::journal::Journal::open(&daemon_dir.join("queue-journal.json"));
        if let Some(n) = unreadable {
            note(n);
        }
        if !journal.is_empty() {
            for line in replayed_lines(&journal.replay(records, opts.lease)) {
                note(line);
            }
        }
        if let Ok(before) = std::fs::read_to_string(&file)
            && let before = before.trim()
            && !before.is_empty()
            && before != holder.id
        {
            release_previous(records, before, note);
        }
        crate::fsutil::write_atomic(&file, holder.id.as_bytes())
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        Ok(Some(QueueSide {
            config,
            holder,
            opts,
            remote,
            renewed: HashMap::new(),
            docs_taken: Default::default(),
            pushes: HashMap::new(),
            marks: HashMap::new(),
            holders_kept: None,
            journal,
            unreachable: false,
            quiet_until: None,
            waiting: Default::default(),
        }))
    }

    /// Note whether the database answered (`ok`) or could not be reached: when it answers
    /// again after not answering, no expired lease is taken over for one lease (see
    /// `quiet_until`). A line for the log when that changes.
    pub fn answered(&mut self, ok: bool) -> Option<String> {
        match (self.unreachable, ok) {
            (false, false) => {
                self.unreachable = true;
                Some(format!(
                    "the queue does not answer: this daemon's writes are kept in its journal and made when it answers again; runs whose lease cannot be renewed within {}s stop here and go on when it does",
                    (self.opts.lease * 2 / 3).as_secs()
                ))
            }
            (true, true) => {
                self.unreachable = false;
                self.quiet_until = Some(Instant::now() + self.opts.lease);
                Some(format!(
                    "the queue answers again: runs whose lease expired meanwhile are taken over after {}s, once their holders had the time to renew them",
                    self.opts.lease.as_secs()
                ))
            }
            _ => None,
        }
    }

    /// Whether expired leases may be taken over now (see [`QueueSide::answered`]).
    fn taking_over(&self) -> bool {
        !self.unreachable && self.quiet_until.is_none_or(|t| Instant::now() >= t)
    }

    /// Keep a write the database did not answer (see [`super::journal`]); a warning when it
    /// could not be kept on disk.
    pub fn keep(&mut self, write: super::journal::Write) -> Option<String> {
        self.journal
            .push(&self.holder.id, write)
            .err()
            .map(|e| format!("keeping a write for the queue: {e} (it is kept in memory only)"))
    }

    /// Make the kept writes now (the database answers); lines for the log.
    pub fn replay(&mut self, records: &mut Records) -> Vec<String> {
        if self.journal.is_empty() {
            return Vec::new();
        }
        let done = self.journal.replay(records, self.opts.lease);
        let mut lines = replayed_lines(&done);
        if let Some(l) = self.answered(done.stopped.is_none()) {
            lines.push(l);
        }
        lines
    }

    /// Whether the lease holders are due to be kept again for `status` (every 5 s), and
    /// from now on not for another 5 s.
    pub fn holders_due(&mut self) -> bool {
        let due = self
            .holders_kept
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if due {
            self.holders_kept = Some(Instant::now());
        }
        due
    }

    /// Of `picked` (ready runs within this machine's limits), those within the project's
    /// limit across machines that this daemon could claim. Each with whether it was pending
    /// before (queued by a person: it goes on past an earlier outcome).
    pub fn claim(
        &mut self,
        records: &mut Records,
        picked: Vec<LoopRun>,
    ) -> Result<Vec<(LoopRun, bool)>, String> {
        let ids: Vec<String> = picked.iter().map(|r| r.id.clone()).collect();
        let got = records
            .claim_within(&ids, &self.holder, self.opts.lease, self.opts.max_loops)
            .map_err(|e| format!("claiming runs: {e}"))?;
        let mut out = Vec::with_capacity(got.len());
        for run in picked {
            if !got.contains(&run.id) {
                continue;
            }
            let requeued = run.status == RunStatus::Pending;
            let fresh = match records.get(&run.id) {
                Ok(Some(crate::store::AnyRecord::Run(r))) => r,
                _ => run,
            };
            self.renewed.insert(fresh.id.clone(), Instant::now());
            out.push((fresh, requeued));
        }
        Ok(out)
    }

    /// Runs whose holder died (their lease expired), now leased to this daemon; at most
    /// `room`.
    pub fn take_over(
        &mut self,
        records: &mut Records,
        room: usize,
    ) -> Result<Vec<LoopRun>, String> {
        if !self.taking_over() {
            return Ok(Vec::new());
        }
        let runs = records
            .take_over_expired(&self.holder, self.opts.lease, room)
            .map_err(|e| format!("taking over runs whose lease expired: {e}"))?;
        for r in &runs {
            self.renewed.insert(r.id.clone(), Instant::now());
        }
        Ok(runs)
    }

    /// Renew the leases of `active`; the runs that must stop now, each with why: its lease
    /// is another's, or it could not be renewed for longer than the lease allows.
    pub fn renew(
        &mut self,
        records: &mut Records,
        active: &[String],
    ) -> (Vec<(String, Stop)>, Vec<String>) {
        let mut stops = Vec::new();
        let mut warnings = Vec::new();
        // (A run's entry goes with its lease, in `release`; `active` may be one run.)
        for id in active {
            match records.renew(id, &self.holder, self.opts.lease) {
                Ok(true) => {
                    self.renewed.insert(id.clone(), Instant::now());
                    warnings.extend(self.answered(true));
                }
                Ok(false) => stops.push((
                    id.clone(),
                    Stop::Lost(
                        "its lease is no longer this daemon's (another machine took the run over)"
                            .to_string(),
                    ),
                )),
                Err(e) => {
                    if e.is_connection_lost() {
                        warnings.extend(self.answered(false));
                    }
                    let since = self
                        .renewed
                        .get(id)
                        .map(|t| t.elapsed())
                        .unwrap_or_default();
                    // Stop a tick before the database may hand the run to another
                    // machine (ticks come every lease/3), not after it.
                    if since + self.opts.lease / 3 > self.opts.lease {
                        stops.push((
                            id.clone(),
                            Stop::Unreachable(format!(
                                "its lease could not be renewed for {}s (another machine may take it over after {}s): {e}",
                                since.as_secs(),
                                self.opts.lease.as_secs()
                            )),
                        ));
                    } else {
                        warnings.push(format!("renewing the lease of run {id}: {e}"));
                    }
                }
            }
        }
        (stops, warnings)
    }

    /// Of the runs waiting for the database ([`QueueSide::waiting`]), those whose lease is
    /// still this daemon's now that it answers (they go on here), and lines for the log
    /// (those another machine took over meanwhile are given up).
    pub fn still_ours(&mut self, records: &mut Records) -> (Vec<String>, Vec<String>) {
        let (mut ours, mut lines) = (Vec::new(), Vec::new());
        for id in self.waiting.clone() {
            match records.renew(&id, &self.holder, self.opts.lease) {
                Ok(true) => {
                    self.waiting.remove(&id);
                    self.renewed.insert(id.clone(), Instant::now());
                    lines.extend(self.answered(true));
                    ours.push(id);
                }
                Ok(false) => {
                    self.waiting.remove(&id);
                    lines.push(format!(
                        "run {id} is not taken up again here: another machine took it over while the queue did not answer this daemon"
                    ));
                }
                Err(e) => {
                    if e.is_connection_lost() {
                        lines.extend(self.answered(false));
                    }
                    break;
                }
            }
        }
        (ours, lines)
    }

    /// Give up the lease of a run that ended here (or stopped with the daemon): a stopped
    /// daemon's running runs are taken over by another at once.
    pub fn release(&mut self, records: &mut Records, id: &str) -> Option<String> {
        self.renewed.remove(id);
        let release = super::journal::Write::Release {
            run_id: id.to_string(),
        };
        // After the run's kept writes, never before them: its record says it ended first.
        if self.journal.holds(id) {
            return self.keep(release);
        }
        match records.release(id, &self.holder) {
            Ok(()) => None,
            Err(e) if e.is_connection_lost() => self.answered(false).or(self.keep(release)),
            Err(e) => Some(format!("releasing the lease of run {id}: {e}")),
        }
    }

    /// On a thread of its own: the `documents` of a plan (a plan or spec run's, with the
    /// project they are read from) published, then the branch of worktree `name` pushed
    /// ([`push_warning`]). Nothing while the last of `name` is still under way (the next
    /// iteration, or the run's end, does it again). Returns the warnings of those that
    /// have finished.
    pub fn push_in_background(
        &mut self,
        name: &str,
        documents: Option<(PathBuf, crate::store::Plan)>,
        mark: Mark,
    ) -> Vec<String> {
        let mut notes = self.finished_pushes();
        self.marks.insert(name.to_string(), mark.clone());
        if self.pushes.contains_key(name) {
            return notes;
        }
        let (remote, owned) = (self.remote.clone(), name.to_string());
        let work = move || {
            let published =
                documents.and_then(|(project, plan)| publish_documents(&remote, &project, &plan));
            published
                .into_iter()
                .chain(push_warning(&remote, &owned, Some(&mark)))
                .collect()
        };
        // A closure a failed spawn hands back is not to be had: the work is made again.
        let inline = work.clone();
        match std::thread::Builder::new()
            .name(format!("push {name}"))
            .spawn(work)
        {
            Ok(h) => {
                self.pushes.insert(name.to_string(), h);
            }
            Err(_) => notes.extend(inline()),
        }
        notes
    }

    /// The warnings of the background pushes that have finished.
    pub fn finished_pushes(&mut self) -> Vec<String> {
        let done: Vec<String> = self
            .pushes
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(name, _)| name.clone())
            .collect();
        done.iter()
            .filter_map(|name| self.pushes.remove(name))
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    }

    /// The background push of worktree `name`, if one was started and not collected: for
    /// [`push_at_end`] to wait for.
    pub fn take_push(&mut self, name: &str) -> Option<std::thread::JoinHandle<Vec<String>>> {
        self.pushes.remove(name)
    }

    /// The mark of the last iteration finished in worktree `name` (pushed with its branch at
    /// the run's end), given up.
    pub fn take_mark(&mut self, name: &str) -> Option<Mark> {
        self.marks.remove(name)
    }

    /// Plans whose spec run is complete (another machine may have run it): the documents
    /// missing here are taken from the remote, once per spec run, so the cascade reads them
    /// (making the spec records, each phase's validation) on any machine.
    pub fn fetch_spec_documents(&mut self, records: &Records, project: &Path) -> Vec<String> {
        let mut notes = Vec::new();
        let Ok(plans) =
            crate::scheduler::plans(records, &[taskstore::Filter::eq("status", "in-progress")])
        else {
            return notes;
        };
        for plan in plans {
            let Ok(runs) = crate::scheduler::runs(
                records,
                &[taskstore::Filter::eq("parent", plan.id.as_str())],
            ) else {
                continue;
            };
            let Some(spec_run) = runs.iter().rev().find(|r| {
                r.loop_type == crate::store::LoopKind::Spec && r.status == RunStatus::Complete
            }) else {
                continue;
            };
            let key = (spec_run.id.clone(), spec_run.updated_at);
            if self.docs_taken.contains(&key) {
                continue;
            }
            match fetch_documents(&self.remote, project, &plan.id, false) {
                Ok(n) => {
                    self.docs_taken.insert(key);
                    notes.extend(n);
                }
                Err(e) => notes.push(e),
            }
        }
        notes
    }

    /// Put an iteration's log into the queue (its last [`LOG_LIMIT`] bytes), so `logs`
    /// shows it from any machine.
    pub fn upload_log(
        &mut self,
        records: &mut Records,
        run_id: &str,
        iteration: u32,
        file: &Path,
    ) -> Option<String> {
        let text = read_tail(file, LOG_LIMIT)?;
        let kept = |text: String| super::journal::Write::Log {
            run_id: run_id.to_string(),
            iteration,
            text,
        };
        if !self.journal.is_empty() {
            return self.keep(kept(text));
        }
        match records.put_log(run_id, iteration, &text) {
            Ok(()) => None,
            Err(e) if e.is_connection_lost() => {
                let line = self.answered(false);
                self.keep(kept(text)).or(line)
            }
            Err(e) => Some(format!(
                "storing the log of run {run_id} iteration {iteration}: {e}"
            )),
        }
    }
}

/// Give up the leases of this clone's previous daemon `before` (it is gone: this daemon
/// holds the clone's lock), so its runs are taken over now rather than when they expire.
fn release_previous(records: &mut Records, before: &str, note: &dyn Fn(String)) {
    match records.release_holder(before) {
        Ok(0) => {}
        Ok(n) => note(format!(
            "released {n} lease(s) of this clone's previous daemon ({before}), which is gone: its runs are taken over now"
        )),
        Err(e) => note(format!(
            "could not release the leases of this clone's previous daemon ({before}): {e}; its runs are taken over when they expire"
        )),
    }
}

/// What a replay of the journal did, as lines for the log.
fn replayed_lines(done: &super::journal::Replayed) -> Vec<String> {
    let mut lines = Vec::new();
    if done.written > 0 {
        lines.push(format!(
            "the queue answers: {} write(s) kept while it did not were made",
            done.written
        ));
    }
    for id in &done.dropped {
        lines.push(format!(
            "run {id}: the writes kept for it are dropped: another machine holds its lease now (it took the run over)"
        ));
    }
    for id in &done.merged {
        lines.push(format!(
            "run {id}: its record was changed by someone else meanwhile: their status and note are kept, this daemon's counters written"
        ));
    }
    if let Some(why) = &done.stopped {
        lines.push(format!("the queue's kept writes wait: {why}"));
    }
    lines
}

/// Put a finished run's work on the remote before its end is recorded: the push of its
/// last iteration (`earlier`, if under way) waited for, its plan's documents (`plan`: plan
/// and spec runs), then its branch, three tries. The reason when its work is not there (a
/// completed run is then recorded blocked: the next phase must not start elsewhere
/// without it).
pub fn push_at_end(
    remote: &Remote,
    project: &Path,
    worktree: &str,
    plan: Option<&crate::store::Plan>,
    earlier: Option<std::thread::JoinHandle<Vec<String>>>,
    mark: Option<&Mark>,
) -> Option<String> {
    if let Some(h) = earlier {
        let _superseded = h.join();
    }
    if let Some(w) = plan.and_then(|p| publish_documents(remote, project, p)) {
        return Some(format!(
            "its documents are not on the shared remote: {w}; `taskdaemon resume` the run once the remote takes pushes"
        ));
    }
    let mut last = None;
    for _ in 0..3 {
        last = Some(push_warning(remote, worktree, mark)?);
    }
    last.map(|w| format!("its work is not on the shared remote: {w}; `taskdaemon resume` the run once the remote takes pushes"))
}

/// Push the branch of worktree `name` to `remote`; a warning when it did not go (retried
/// after the next iteration).
fn push_warning(remote: &Remote, name: &str, mark: Option<&Mark>) -> Option<String> {
    let branch = branch_for(name);
    match remote.push_branch_marked(&branch, mark) {
        Ok(Pushed::Pushed { .. } | Pushed::UpToDate) => None,
        Ok(Pushed::Rejected { reason }) => Some(format!(
            "pushing {branch} to {}: rejected ({reason}); the remote holds commits this machine has not seen — retried after the next iteration",
            remote.name()
        )),
        Ok(Pushed::Held { paths }) => Some(format!(
            "not pushing {branch} to {}: its commits add files that look like secrets ({}); the commits stay on the local branch, and it is pushed once no commit adds them",
            remote.name(),
            crate::secrets::list(&paths)
        )),
        Err(crate::git::remote::RemoteError::NoBranch(_)) => None,
        Err(e) => Some(format!(
            "pushing {branch} to {}: {e}; retried after the next iteration",
            remote.name()
        )),
    }
}

/// The last `limit` bytes of a file, as text; `None` when it cannot be read.
fn read_tail(file: &Path, limit: usize) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = crate::fsutil::open_read(file).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(limit as u64);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(limit as u64).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Where new work for `target` starts on the shared queue: the remote's `target` as
/// fetched now (`refs/remotes/<remote>/<target>`), else the local branch.
pub fn start_point(remote: &Remote, target: &str) -> String {
    match remote.fetch(target) {
        Ok(Some(_)) => format!("refs/remotes/{}/{target}", remote.name()),
        _ => target.to_string(),
    }
}

/// Before a run goes on here: its worktree's branch as the remote has it (another machine
/// may have run the spec's earlier phases, or this run until it died). A line for the log
/// when something changed.
pub fn adopt(remote: &Remote, worktrees: &Worktrees, name: &str) -> Result<Option<String>, String> {
    let branch = branch_for(name);
    let dir = worktrees.path_for(name);
    let got = remote
        .adopt(&branch, &dir)
        .map_err(|e| format!("taking {branch} from {}: {e}", remote.name()))?;
    Ok(match got {
        Adopted::NotOnRemote | Adopted::Same | Adopted::Ahead => None,
        Adopted::Created { commit } | Adopted::FastForwarded { commit } => Some(format!(
            "{branch}: continuing from {} at {}",
            remote.name(),
            &commit[..commit.len().min(12)]
        )),
        Adopted::Replaced {
            commit,
            saved,
            stash,
        } => Some(format!(
            "{branch}: this machine's copy was stale; now at {}'s {} (the old commits are kept as {saved}{})",
            remote.name(),
            &commit[..commit.len().min(12)],
            stash
                .map(|s| format!(", uncommitted files in stash {s}"))
                .unwrap_or_default()
        )),
    })
}

/// What a merge on the shared queue leaves to record.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueMerge {
    /// The remote target holds the work at this commit: record it (once).
    ToRecord(String),
    /// The queue had recorded it already: nothing was done.
    AlreadyRecorded,
}

/// A merge across machines: under the lock `merge:<target>` of the queue, the branch of
/// worktree `name` as the remote has it, merged into the remote's target and pushed. The
/// end, and the commit to record (the target's tip holding the work).
pub fn merge(
    queue: &QueueConfig,
    remote: &Remote,
    worktrees: &Worktrees,
    name: &str,
    target: &str,
    message: &str,
    tries: usize,
) -> (MergeEnd, Option<QueueMerge>) {
    let failed = |note: String| (MergeEnd::Failed { note }, None);
    let _lock = match crate::store::queue::lock(queue, &format!("merge:{target}")) {
        Ok(l) => l,
        Err(e) => {
            return failed(format!(
                "merge failed: taking the merge lock of {target}: {e}"
            ));
        }
    };
    if let Err(e) = adopt(remote, worktrees, name) {
        return failed(format!("merge failed: {e}"));
    }
    match remote.merge(&branch_for(name), target, message, tries) {
        Ok(RemoteMerge::Merged { commit, .. }) | Ok(RemoteMerge::AlreadyIn { commit }) => (
            MergeEnd::Done {
                note: None,
                held: None,
            },
            Some(QueueMerge::ToRecord(commit)),
        ),
        Ok(RemoteMerge::Conflict { files }) => (
            MergeEnd::Conflict {
                note: format!(
                    "merge conflict with {target} on {} in: {}; resolve it in {}: `git pull {} {target}`, fix the files, commit; then `taskdaemon resume RUN`",
                    remote.name(),
                    files.join(", "),
                    worktrees.path_for(name).display(),
                    remote.name()
                ),
            },
            None,
        ),
        Err(e) => failed(format!("merge failed: {e}")),
    }
}

/// A thread that waits on the queue's notifications and calls `wake(true)` for each,
/// `wake(false)` every `poll` without one (the caller's own tick is the fallback when a
/// notification is lost). Ends when `wake` returns false (the daemon is gone).
pub fn listen(queue: QueueConfig, poll: Duration, wake: impl Fn(bool) -> bool + Send + 'static) {
    std::thread::spawn(move || {
        let mut listener = None;
        loop {
            if listener.is_none() {
                listener = crate::store::queue::listener(&queue).ok();
            }
            let notified = match listener.as_mut() {
                Some(l) => l.wait(poll).unwrap_or_else(|_| {
                    // Connect again on the next round.
                    listener = None;
                    false
                }),
                None => {
                    std::thread::sleep(poll);
                    false
                }
            };
            if !wake(notified) {
                return;
            }
        }
    });
}

/// Iterations the record says finished: its `iteration` once its progress names it
/// finished, else the one before (it was in flight when its holder died).
pub fn iterations_recorded(run: &LoopRun) -> u32 {
    let n = run.iteration;
    let done = run
        .progress
        .lines()
        .last()
        .is_some_and(|l| l.starts_with(&format!("iteration {n}:")));
    if done { n } else { n.saturating_sub(1) }
}

/// A run taken over from another machine goes on at the record's counters (the record is
/// the truth): iterations, time and cost, never from 1 and never behind.
pub fn continue_at_record(state: &mut crate::engine::RunState, run: &LoopRun) {
    let done = iterations_recorded(run);
    if done > state.iterations_done {
        state.iterations_done = done;
        state.elapsed_ms = state.elapsed_ms.max(run.elapsed_ms);
        if let Some(c) = run.cost_usd {
            state.cost_usd = state.cost_usd.max(c);
        }
    }
}

/// The iterations the remote's mark says run `run_id` finished on its branch's tip (see
/// [`crate::git::remote::marks`]); `None` without a (believable) mark.
pub fn marked_iterations(remote: &Remote, worktree: &str, run_id: &str) -> Option<u32> {
    let tip = remote.fetch(&branch_for(worktree)).ok()??;
    remote.iterations_on(run_id, &tip).ok()?
}

/// A run taken over goes on after the iterations its branch on the remote holds (`marked`)
/// when the record says fewer (its holder pushed them and died before recording them): no
/// iteration whose commit is on the remote is done again. A line for the log when so.
pub fn continue_at_mark(
    state: &mut crate::engine::RunState,
    marked: Option<u32>,
) -> Option<String> {
    let n = marked.filter(|n| *n > state.iterations_done)?;
    let line = format!(
        "run {}: the remote's branch holds iteration {n}, its record {}: going on after iteration {n}",
        state.run_id, state.iterations_done
    );
    state.iterations_done = n;
    Some(line)
}

/// The documents of plan `plan_id` a run writes outside git (the plan file when it lies
/// under `.taskdaemon/`, the spec documents): (path from the repository's top, bytes).
fn plan_documents(
    project: &Path,
    plan_file: Option<&str>,
    plan_id: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let own = project.join(".taskdaemon");
    let mut add = |p: &Path| {
        if let (Ok(rel), Ok(Some(text))) =
            (p.strip_prefix(project), crate::fsutil::read_optional(p))
        {
            out.push((rel.display().to_string(), text.into_bytes()));
        }
    };
    if let Some(f) = plan_file.map(Path::new).filter(|f| f.starts_with(&own)) {
        add(f);
    }
    let dir = crate::scheduler::context::specs_dir(project, plan_id);
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut files: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            add(&f);
        }
    }
    out
}

/// The plan a run belongs to (plan and spec runs: its parent; phases: their spec's parent).
pub fn plan_of(records: &Records, run: &LoopRun) -> Option<crate::store::Plan> {
    let mut id = run.parent.clone()?;
    for _ in 0..3 {
        match records.get(&id).ok()?? {
            crate::store::AnyRecord::Plan(p) => return Some(p),
            crate::store::AnyRecord::Spec(s) => id = s.parent,
            crate::store::AnyRecord::Run(r) => id = r.parent?,
        }
    }
    None
}

/// Put the documents of `plan` on the remote (after an iteration of its plan or spec run
/// here), so a run of it on another machine reads them.
pub fn publish_documents(
    remote: &Remote,
    project: &Path,
    plan: &crate::store::Plan,
) -> Option<String> {
    let files = plan_documents(project, Some(&plan.file), &plan.id);
    remote
        .publish_files(&format!("docs/{}", plan.id), &files)
        .err()
        .map(|e| {
            format!(
                "putting the documents of plan {} on {}: {e}",
                plan.id,
                remote.name()
            )
        })
}

/// Write the documents of plan `plan_id` kept on the remote into this clone's
/// `.taskdaemon/` (only there; links are not followed): every file when `overwrite`, else
/// only those missing here. A line for the log when something was written.
pub fn fetch_documents(
    remote: &Remote,
    project: &Path,
    plan_id: &str,
    overwrite: bool,
) -> Result<Option<String>, String> {
    let Some(files) = remote
        .fetch_files(&format!("docs/{plan_id}"))
        .map_err(|e| format!("reading the documents of plan {plan_id}: {e}"))?
    else {
        return Ok(None);
    };
    let mut written = 0;
    for (rel, bytes) in files {
        let rel_path = Path::new(&rel);
        let safe = rel_path.starts_with(".taskdaemon")
            && rel_path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            return Err(format!(
                "the documents of plan {plan_id} on {} name {rel}, outside .taskdaemon/: not written",
                remote.name()
            ));
        }
        let path = project.join(rel_path);
        let same = crate::fsutil::read_optional(&path)
            .ok()
            .flatten()
            .map(|t| t.into_bytes() == bytes);
        if same == Some(true) || (same.is_some() && !overwrite) {
            continue;
        }
        if let Some(dir) = path.parent() {
            crate::fsutil::create_dir_confined(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        crate::fsutil::write_atomic(&path, &bytes)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        written += 1;
    }
    Ok((written > 0).then(|| {
        format!(
            "plan {plan_id}: {written} document(s) taken from {}",
            remote.name()
        )
    }))
}

/// At start on the shared queue: worktrees here of work that finished (on any machine) are
/// stale — what only this machine has of them is kept (`Remote::keep_unpushed`), then the
/// worktree goes. The names of those to remove, and a line for each kept thing.
pub fn stale_worktrees(
    records: &Records,
    remote: &Remote,
    worktrees: &Worktrees,
    default_target: &str,
) -> (Vec<String>, Vec<String>) {
    let (mut names, mut lines) = (Vec::new(), Vec::new());
    for w in finished_worktrees(records, worktrees, true) {
        match remote.keep_unpushed(&branch_for(&w.name), default_target, &w.path) {
            Ok(kept) => {
                for k in kept {
                    lines.push(format!("worktree {}: kept {k}", w.path.display()));
                }
                names.push(w.name);
            }
            Err(e) => lines.push(format!(
                "worktree {} of finished work kept: {e}",
                w.path.display()
            )),
        }
    }
    (names, lines)
}

/// This machine's worktrees whose work is finished: a complete spec or run, a complete
/// plan (and a failed one with `failed_plans`). Their branches are merged, or, for a
/// failed plan, hold nothing a spec was made from.
pub fn finished_worktrees(
    records: &Records,
    worktrees: &Worktrees,
    failed_plans: bool,
) -> Vec<crate::git::worktree::WorktreeInfo> {
    use crate::store::{AnyRecord, PlanStatus, SpecStatus};
    let Ok(list) = worktrees.list() else {
        return Vec::new();
    };
    list.into_iter()
        .filter(|w| match records.get(&w.name) {
            Ok(Some(AnyRecord::Spec(s))) => s.status == SpecStatus::Complete,
            Ok(Some(AnyRecord::Plan(p))) => {
                p.status == PlanStatus::Complete || (failed_plans && p.status == PlanStatus::Failed)
            }
            Ok(Some(AnyRecord::Run(r))) => r.status == RunStatus::Complete,
            _ => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(iteration: u32, progress: &str) -> LoopRun {
        let mut r: LoopRun = serde_json::from_value(serde_json::json!({
            "id": "abc123-run-x",
            "loop-type": "ralph",
            "status": "running",
            "iteration": 0,
            "created-at": 1,
            "updated-at": 1,
        }))
        .unwrap();
        r.iteration = iteration;
        r.progress = progress.to_string();
        r.elapsed_ms = 9_000;
        r.cost_usd = Some(1.5);
        r
    }

    #[test]
    fn a_run_in_flight_when_its_holder_died_goes_on_with_that_iteration() {
        assert_eq!(
            iterations_recorded(&run(3, "iteration 1: x\niteration 2: y")),
            2
        );
        assert_eq!(
            iterations_recorded(&run(3, "iteration 2: y\niteration 3: z")),
            3
        );
        assert_eq!(iterations_recorded(&run(1, "")), 0);
        assert_eq!(iterations_recorded(&run(0, "")), 0);
    }

    #[test]
    fn a_taken_over_run_continues_at_the_records_counters_never_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = crate::loops::Registry::load(None, &tmp.path().join("none")).unwrap();
        let s = crate::config::Settings {
            agent: Some("cmd:true".into()),
            ..Default::default()
        };
        let cfg = crate::engine::RunConfig::resolve(tmp.path(), "t".into(), &s, &reg).unwrap();
        let mut st = crate::engine::RunState::new(cfg, "abc123-run-x".into(), None, "t".into());
        continue_at_record(&mut st, &run(3, "iteration 2: y"));
        assert_eq!(st.iterations_done, 2);
        assert_eq!(st.elapsed_ms, 9_000);
        assert_eq!(st.cost_usd, 1.5);
        // A local state further on (this machine ran it last) is not moved back.
        st.iterations_done = 5;
        continue_at_record(&mut st, &run(3, "iteration 2: y"));
        assert_eq!(st.iterations_done, 5);
    }
}
