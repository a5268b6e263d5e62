//! A rollback as a transaction.
//!
//! ```text
//! lock → validate the tag → capture → journal (prepared) → check the refs
//!      → pre-rollback snapshot → take index.lock → journal (restoring)
//!      → work tree → refs and HEAD → index → release index.lock → journal removed
//! ```
//!
//! The journal (`<git-dir>/taskdaemon/rollback.journal`, written atomically) holds
//! everything the rollback needs. Killed while `prepared`, nothing has changed yet: the
//! next snapshot command drops the journal and its `index.lock` (state: the old one).
//! Killed while `restoring`, the next command finishes it (state: the new one): it first
//! brings the private index back in line with whatever the work tree holds, saves what
//! would otherwise be lost (a path whose content is neither the old nor the new, a ref
//! moved by someone else), and redoes every step; each is idempotent.
//!
//! `index.lock` is ours when it holds the journal's marker: it is made by `link`ing a
//! file with that content into place (atomic like git's `O_EXCL`), so a lock git or a user
//! made is never taken for ours.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::cache::{CachedIndex, IndexKey};
use super::ref_session::{End, RefSession};
use super::{
    Captured, Kind, Listing, Numbering, RawChange, Rollback, SaveRequest, Snapshot, SnapshotError,
    Snapshots, TreeDiff, copy_keeping_mtime, io, tree_diff,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Phase {
    /// Nothing destructive has happened yet.
    Prepared,
    /// The work tree, refs or index may be changing.
    Restoring,
}

/// One ref a rollback writes (`HEAD` itself for a detached target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RefMove {
    pub name: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct Journal {
    pub phase: Phase,
    pub owner: u32,
    /// In `index.lock` while this rollback holds it.
    pub nonce: String,
    pub target: Snapshot,
    pub work_tree: String,
    pub index_tree: String,
    /// The saved index's commit, to remember the installed index by (`index.cache`).
    #[serde(default)]
    pub index_commit: Option<String>,
    /// The state replaced: work tree (as captured), branch and HEAD.
    pub old_work_tree: String,
    pub old_branch: Option<String>,
    pub old_head: Option<String>,
    pub moves: Vec<RefMove>,
    /// The `pre-rollback-*` snapshot, once made.
    pub saved: Option<Snapshot>,
    pub changed: TreeDiff,
}

/// What the rollback found before it changed anything: the tree diff from the captured
/// work tree to the snapshot's, when that capture scanned the disk, and where the saved
/// index differs from the saved work tree.
struct Scanned {
    raw: Vec<RawChange>,
    at: SystemTime,
    index_raw: Vec<RawChange>,
    /// The `update-ref` session that checked the refs, for the move.
    refs: Option<RefSession>,
}

/// `index.lock` while a rollback holds it; removed when dropped.
pub(super) struct IndexLock(PathBuf);

impl Drop for IndexLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

impl Snapshots {
    fn journal_path(&self) -> PathBuf {
        self.private_dir().join("rollback.journal")
    }

    pub(super) fn read_journal(&self) -> Result<Option<Journal>, SnapshotError> {
        let path = self.journal_path();
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| SnapshotError::Journal {
                path,
                why: e.to_string(),
            })
    }

    fn write_journal(&self, j: &Journal) -> Result<(), SnapshotError> {
        let path = self.journal_path();
        let text = serde_json::to_vec_pretty(j).map_err(|e| SnapshotError::Journal {
            path: path.clone(),
            why: e.to_string(),
        })?;
        crate::fsutil::write_atomic(&path, &text).map_err(io(&path))
    }

    fn remove_journal(&self) -> Result<(), SnapshotError> {
        let path = self.journal_path();
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Restore the state saved as `target` (see the module's steps). The caller holds the
    /// snapshot lock.
    pub(super) fn rollback_locked(
        &self,
        target: Snapshot,
        time_ms: i64,
        listed: Listing,
    ) -> Result<Rollback, SnapshotError> {
        let trusted = self.trusted_trees(&target)?;
        let (work_tree, index_tree, tip) = (trusted.work_tree, trusted.index_tree, trusted.tip);
        if let Some(b) = &target.branch {
            self.refuse_if_checked_out_elsewhere(b)?;
        }
        // What is here now, and what the rollback would do to it.
        let mut cap = self.capture_at(&[], Some(time_ms))?;
        // Both diffs the rollback needs from one process: what it changes in the work
        // tree, and where the saved index differs from the saved work tree.
        let mut diffs = self
            .raw_diffs(&[(&cap.work_tree, &work_tree), (&work_tree, &index_tree)])?
            .into_iter();
        let (mut raw, index_raw) = (
            diffs.next().unwrap_or_default(),
            diffs.next().unwrap_or_default(),
        );
        self.refuse_if_repository_in_the_way(&raw, &cap.skipped)?;
        // Ignored files where the snapshot has a file would be overwritten: they go into
        // the safety snapshot too.
        let collide = self.ignored_in_the_way(&raw);
        if !collide.is_empty() {
            cap = self.capture(&collide)?;
            raw = self.raw_diff(&cap.work_tree, &work_tree)?;
        }
        let moves = self.ref_moves(&target, tip, &cap)?;
        let mut journal = Journal {
            phase: Phase::Prepared,
            owner: std::process::id(),
            nonce: nonce(),
            target,
            work_tree,
            index_tree,
            index_commit: trusted.index_commit,
            old_work_tree: cap.work_tree.clone(),
            old_branch: cap.branch.clone(),
            old_head: cap.head.clone(),
            moves,
            saved: None,
            changed: tree_diff(&raw),
        };
        self.write_journal(&journal)?;
        let (lock, refs) = match self.prepare(&mut journal, &cap, time_ms, listed) {
            Ok(prepared) => prepared,
            Err(e) => {
                self.remove_journal()?;
                return Err(e);
            }
        };
        self.pause("locked");
        journal.phase = Phase::Restoring;
        if let Err(e) = self.write_journal(&journal) {
            drop(lock);
            self.remove_journal()?;
            return Err(e);
        }
        let scanned = Scanned {
            raw,
            at: cap.scanned,
            index_raw,
            refs,
        };
        self.finish(&journal, lock, Some(scanned)).map(|(r, _)| r)
    }

    /// The steps before anything changes: refs checked, the safety snapshot, index.lock.
    fn prepare(
        &self,
        j: &mut Journal,
        cap: &Captured,
        time_ms: i64,
        listed: Listing,
    ) -> Result<(IndexLock, Option<RefSession>), SnapshotError> {
        let refs = self.check_refs(&j.target, &reflog_message(j))?;
        self.pause("prepared");
        let keep = self.tips_a_rollback_moves(&j.target, cap)?;
        let trailers: Vec<String> = j
            .moves
            .iter()
            .map(|m| {
                format!(
                    "Snapshot-Ref: {} {} {}",
                    m.name,
                    m.old.as_deref().unwrap_or("none"),
                    m.new.as_deref().unwrap_or("none")
                )
            })
            .collect();
        let saved = self.commit_and_tag(
            &SaveRequest {
                kind: Kind::PreRollback,
                task: j.target.task,
                message: &format!("before rollback to {}", j.target.tag),
                time_ms,
            },
            cap,
            &keep,
            &trailers,
            Numbering::AtTag(Some(listed)),
        )?;
        let tag = saved.tag.clone();
        j.saved = Some(saved);
        self.write_journal(j)?;
        self.pause("tagged");
        let lock = self
            .take_user_index(&j.nonce)
            .map_err(|e| SnapshotError::HalfWay {
                saved: tag,
                source: Box::new(e),
            })?;
        Ok((lock, refs))
    }

    /// The destructive steps, then the journal goes. An error (not a kill) releases
    /// `index.lock` and drops the journal: the message names the safety snapshot. With
    /// the rollback, the snapshot recovery made of what it found, if any. `scanned`: the
    /// diffs and the capture's scan time; `None` when recovering (the disk is scanned
    /// again).
    fn finish(
        &self,
        j: &Journal,
        lock: IndexLock,
        scanned: Option<Scanned>,
    ) -> Result<(Rollback, Option<String>), SnapshotError> {
        let Some(saved) = j.saved.clone() else {
            return Err(SnapshotError::Journal {
                path: self.journal_path(),
                why: "it is restoring but names no pre-rollback snapshot".into(),
            });
        };
        match self.restore(j, &lock, scanned) {
            Ok(found) => {
                drop(lock);
                self.remove_journal()?;
                let r = Rollback {
                    restored: j.target.clone(),
                    saved,
                    changed: j.changed.clone(),
                    kept: Vec::new(),
                };
                Ok((r, found))
            }
            Err(e) => {
                drop(lock);
                self.remove_journal()?;
                Err(SnapshotError::HalfWay {
                    saved: saved.tag,
                    source: Box::new(e),
                })
            }
        }
    }

    fn restore(
        &self,
        j: &Journal,
        lock: &IndexLock,
        scanned: Option<Scanned>,
    ) -> Result<Option<String>, SnapshotError> {
        let mut found = None;
        let mut from = j.old_work_tree.clone();
        let (mut index_raw, mut refs) = (None, None);
        let (raw, at) = match scanned {
            Some(s) => {
                index_raw = Some(s.index_raw);
                refs = s.refs;
                (s.raw, s.at)
            }
            None => {
                // Recovering: the private index must match the work tree again (a
                // checkout may have stopped in the middle); what only this mix holds is
                // saved first.
                let now = self.capture(&[])?;
                found = self.save_what_only_the_mix_holds(j, &now)?;
                from = now.work_tree;
                (self.raw_diff(&from, &j.work_tree)?, now.scanned)
            }
        };
        // The work tree: the private index matches it exactly (it is `from`), so only the
        // paths that differ are written or removed (files created since the snapshot
        // too). A path changed on disk since the scan is never overwritten: the fast way
        // declines, and a two-way merge stops before anything is written ("not
        // uptodate").
        if !self.checkout_changed(&raw, at)? {
            self.private
                .call(&[
                    "read-tree",
                    "-m",
                    "-u",
                    "--no-recurse-submodules",
                    &from,
                    &j.work_tree,
                ])
                .env("GIT_INDEX_FILE", self.work_index())
                .bytes()?;
        }
        self.pause("work-tree");
        self.move_refs(j, refs)?;
        self.pause("refs");
        self.install_index(j, lock, index_raw)?;
        self.pause("index");
        // The private index now holds the snapshot's work tree: the next save's status
        // compares it with that snapshot, not with the one this rollback saved first.
        self.remember_scan_head(&j.target.commit);
        Ok(found)
    }

    /// Branch and HEAD: one ref transaction (in the session that checked the refs, if
    /// the rollback has it), then HEAD's symbolic link.
    fn move_refs(&self, j: &Journal, session: Option<RefSession>) -> Result<(), SnapshotError> {
        let why = reflog_message(j);
        let mut body = String::new();
        for m in &j.moves {
            if m.name == "HEAD" {
                body.push_str("option no-deref\n");
            }
            match (&m.old, &m.new) {
                (_, Some(new)) => body.push_str(&format!("update {} {new}\n", m.name)),
                (Some(_), None) => body.push_str(&format!("delete {}\n", m.name)),
                (None, None) => {}
            }
        }
        let mut session = match session {
            Some(s) => s,
            None => RefSession::start(&self.git, &why)?,
        };
        session.transaction(&body, End::Commit)?;
        drop(session);
        // HEAD already naming the branch (the usual case) needs no write.
        if let Some(branch) = j
            .target
            .branch
            .as_ref()
            .filter(|b| self.branch().ok().flatten().as_ref() != Some(*b))
        {
            self.git
                .run(&["symbolic-ref", "-m", &why, "HEAD", branch])?;
        }
        Ok(())
    }

    /// Make the user's index the snapshot's, reusing the stat data of the private index
    /// (fresh after the checkout, and holding the snapshot's work tree): only the entries
    /// where the saved index differs from that work tree are set (`update-index
    /// --index-info`, no walk of the whole tree). The user's index is written with its
    /// checksum, synced, then renamed into place. `diff`: that difference when the
    /// rollback already has it.
    fn install_index(
        &self,
        j: &Journal,
        _lock: &IndexLock,
        diff: Option<Vec<RawChange>>,
    ) -> Result<(), SnapshotError> {
        let (work_tree, index_tree) = (j.work_tree.as_str(), j.index_tree.as_str());
        let fresh = self.private_dir().join("index.new");
        copy_keeping_mtime(&self.work_index(), &self.work_index(), &fresh)?;
        let info = match diff {
            _ if work_tree == index_tree => Vec::new(),
            Some(d) => index_info(&d),
            None => index_info(&self.raw_diff(work_tree, index_tree)?),
        };
        self.git
            .call(&[
                "update-index",
                "--add",
                "--replace",
                "--force-write-index",
                "-z",
                "--index-info",
            ])
            .env("GIT_INDEX_FILE", &fresh)
            .input(info)
            .bytes()?;
        let mut f = File::open(&fresh).map_err(io(&fresh))?;
        f.sync_all()
            .and_then(|()| fs::rename(&fresh, &self.index))
            .map_err(io(&self.index))?;
        // The next save finds this index's tree and commit without asking git: the key
        // is that of the file just renamed (this open handle), whatever replaces it later.
        if let (Ok(Some(key)), Some(commit)) = (IndexKey::of(&mut f), &j.index_commit) {
            self.remember_index(&CachedIndex {
                key,
                head: j.target.head.clone(),
                tree: j.index_tree.clone(),
                commit: commit.clone(),
            });
        }
        Ok(())
    }

    fn user_index_lock(&self) -> PathBuf {
        let mut name = self.index.clone().into_os_string();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Take `index.lock` with this rollback's marker in it, or keep it if it already holds
    /// that marker (recovery). Held by anyone else: "git is busy".
    fn take_user_index(&self, nonce: &str) -> Result<IndexLock, SnapshotError> {
        let path = self.user_index_lock();
        let marker = marker(nonce);
        if fs::read(&path).is_ok_and(|c| c == marker.as_bytes()) {
            return Ok(IndexLock(path));
        }
        let tmp = self.private_dir().join("index.lock.tmp");
        fs::write(&tmp, &marker).map_err(io(&tmp))?;
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(IndexLock(path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(SnapshotError::IndexLocked(path))
            }
            // Another file system (an index moved by GIT_INDEX_FILE): git's own way.
            Err(_) => {
                let mut f = match OpenOptions::new().write(true).create_new(true).open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return Err(SnapshotError::IndexLocked(path));
                    }
                    Err(e) => return Err(io(&path)(e)),
                };
                let lock = IndexLock(path.clone());
                f.write_all(marker.as_bytes()).map_err(io(&path))?;
                Ok(lock)
            }
        }
    }

    /// Under the lock, with the killed holder's git children gone: end its rollback.
    pub(super) fn recover_journal(&self, j: Journal) -> Result<(), SnapshotError> {
        match j.phase {
            Phase::Prepared => {
                let path = self.user_index_lock();
                if fs::read(&path).is_ok_and(|c| c == marker(&j.nonce).as_bytes()) {
                    fs::remove_file(&path).map_err(io(&path))?;
                }
                self.remove_journal()?;
                self.notice(super::Notice::RollbackDropped {
                    target: j.target.tag.clone(),
                    saved: j.saved.as_ref().map(|s| s.tag.clone()),
                    owner: j.owner,
                });
            }
            Phase::Restoring => {
                let lock =
                    self.take_user_index(&j.nonce)
                        .map_err(|e| SnapshotError::Interrupted {
                            target: j.target.tag.clone(),
                            saved: j.saved.as_ref().map(|s| s.tag.clone()).unwrap_or_default(),
                            source: Box::new(e),
                        })?;
                self.pause("recovering");
                let (r, found) = self.finish(&j, lock, None)?;
                self.notice(super::Notice::RollbackFinished {
                    target: r.restored.tag,
                    saved: r.saved.tag,
                    owner: j.owner,
                    found,
                });
            }
        }
        Ok(())
    }

    /// During recovery: if some path's content is neither the old nor the new one, or a
    /// ref the rollback moves is at neither value (someone worked on after the kill), save
    /// the state found as another `pre-rollback-*` snapshot before finishing.
    fn save_what_only_the_mix_holds(
        &self,
        j: &Journal,
        now: &Captured,
    ) -> Result<Option<String>, SnapshotError> {
        let paths = |from: &str| -> Result<BTreeSet<Vec<u8>>, SnapshotError> {
            Ok(self
                .raw_diff(from, &now.work_tree)?
                .into_iter()
                .map(|c| c.path)
                .collect())
        };
        let neither = paths(&j.old_work_tree)?
            .intersection(&paths(&j.work_tree)?)
            .next()
            .is_some();
        let mut keep = Vec::new();
        for m in j.moves.iter().filter(|m| m.name != "HEAD") {
            let at = self.rev(&m.name)?;
            if at != m.old && at != m.new {
                keep.extend(at);
            }
        }
        let head_elsewhere = now.head != j.old_head && now.head != j.target.head;
        if !neither && keep.is_empty() && !head_elsewhere {
            return Ok(None);
        }
        let s = self.commit_and_tag(
            &SaveRequest {
                kind: Kind::PreRollback,
                task: j.target.task,
                message: &format!("found after an interrupted rollback to {}", j.target.tag),
                time_ms: crate::clock::now().as_millisecond(),
            },
            now,
            &keep,
            &[],
            Numbering::AtTag(None),
        )?;
        Ok(Some(s.tag))
    }
}

/// `update-index -z --index-info` input that turns the `from` side of `raw` into the
/// `to` side: each entry set to its new mode and object, or removed.
pub(super) fn index_info(raw: &[RawChange]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in raw {
        if c.dst_mode == "000000" {
            out.extend_from_slice(format!("0 {}\t", "0".repeat(c.dst_oid.len())).as_bytes());
        } else {
            out.extend_from_slice(format!("{} {}\t", c.dst_mode, c.dst_oid).as_bytes());
        }
        out.extend_from_slice(&c.path);
        out.push(0);
    }
    out
}

/// The reflog message of the refs a rollback moves.
fn reflog_message(j: &Journal) -> String {
    format!("taskdaemon: rollback to {}", j.target.tag)
}

fn marker(nonce: &str) -> String {
    format!("taskdaemon rollback {nonce}\n")
}

fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{t}", std::process::id())
}
