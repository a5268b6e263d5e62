//! The shared queue's journal: the writes a daemon could not make because the database
//! did not answer (a run's record, an iteration's log, the release of a lease), kept in
//! memory and in `<daemon dir>/queue-journal.json` (so a restarted daemon still has them)
//! and made, in the order they came, once the database answers again.
//!
//! A run's writes are made only while its lease is still its writer's: before them, the
//! lease is renewed for the holder that made them. A run another machine took over
//! meanwhile gets none of them (it "writes nothing more"); they are dropped, with a line
//! that says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{AnyRecord, Holder, LoopRun, Records, RunStatus, StoreError};

/// One write kept for later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum Write {
    /// A new version of a run's record, made from the stored version of `base`
    /// (`updated-at`).
    Run { base: i64, run: Box<LoopRun> },
    /// The log of one iteration (its tail, as [`Records::put_log`] stores it).
    Log {
        run_id: String,
        iteration: u32,
        text: String,
    },
    /// The run's lease given up (it ended here).
    Release { run_id: String },
}

impl Write {
    pub fn run_id(&self) -> &str {
        match self {
            Write::Run { run, .. } => &run.id,
            Write::Log { run_id, .. } | Write::Release { run_id } => run_id,
        }
    }
}

/// A kept write, with the holder (`host:pid:start`) whose lease it was made under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub holder: String,
    #[serde(flatten)]
    pub write: Write,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    schema: u32,
    entries: Vec<Entry>,
}

/// What a replay did.
#[derive(Debug, Default, PartialEq)]
pub struct Replayed {
    /// Writes made.
    pub written: usize,
    /// Runs whose writes were dropped: another machine holds their lease now.
    pub dropped: Vec<String>,
    /// Runs whose record a person changed meanwhile: only the counters were written.
    pub merged: Vec<String>,
    /// The database stopped answering again (the rest is kept), or a write it refused
    /// (that write is dropped): the reason.
    pub stopped: Option<String>,
}

#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl Journal {
    /// The journal kept at `path` (empty when there is none). An unreadable file is set
    /// aside (`.unreadable`), with the reason: it is not replayed.
    pub fn open(path: &Path) -> (Journal, Option<String>) {
        let empty = |note| {
            (
                Journal {
                    path: path.to_path_buf(),
                    entries: Vec::new(),
                },
                note,
            )
        };
        let text = match crate::fsutil::read_optional(path) {
            Ok(Some(t)) => t,
            Ok(None) => return empty(None),
            Err(e) => return empty(Some(format!("reading {}: {e}", path.display()))),
        };
        match serde_json::from_str::<File>(&text) {
            Ok(f) if f.schema == 1 => (
                Journal {
                    path: path.to_path_buf(),
                    entries: f.entries,
                },
                None,
            ),
            Ok(f) => empty(Some(set_aside(path, &format!("schema {}", f.schema)))),
            Err(e) => empty(Some(set_aside(path, &e.to_string()))),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether writes of run `id` are waiting (its record is to be read from here, and
    /// its new writes join them).
    pub fn holds(&self, id: &str) -> bool {
        self.entries.iter().any(|e| e.write.run_id() == id)
    }

    /// The newest version of run `id`'s record waiting to be written.
    pub fn pending_run(&self, id: &str) -> Option<(i64, &LoopRun)> {
        self.entries.iter().rev().find_map(|e| match &e.write {
            Write::Run { base, run } if run.id == id => Some((*base, run.as_ref())),
            _ => None,
        })
    }

    /// Keep `write`, made under `holder`'s lease; an error when it could not be kept on
    /// disk (it is kept in memory all the same).
    pub fn push(&mut self, holder: &str, write: Write) -> Result<(), String> {
        self.entries.push(Entry {
            holder: holder.to_string(),
            write,
        });
        self.save()
    }

    fn save(&self) -> Result<(), String> {
        if self.entries.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("removing {}: {e}", self.path.display()))
                }
                _ => Ok(()),
            };
        }
        let file = File {
            schema: 1,
            entries: self.entries.clone(),
        };
        let text = serde_json::to_vec(&file).map_err(|e| e.to_string())?;
        crate::fsutil::write_atomic(&self.path, &text)
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    /// Make the kept writes, run by run in the order they came, each run's only if its
    /// lease is still the holder's that made them (renewed for `ttl` first). Stops at the
    /// first write the database does not answer (the rest stays kept).
    pub fn replay(&mut self, records: &mut Records, ttl: Duration) -> Replayed {
        let mut out = Replayed::default();
        let _ = records.sync();
        while let Some(first) = self.entries.first().cloned() {
            let id = first.write.run_id().to_string();
            let holder = Holder::from_id(&first.holder);
            match records.renew(&id, &holder, ttl) {
                Ok(true) => {}
                Ok(false) => {
                    self.entries.retain(|e| e.write.run_id() != id);
                    out.dropped.push(id);
                    continue;
                }
                Err(e) => {
                    out.stopped = Some(e.to_string());
                    break;
                }
            }
            let mine: Vec<Entry> = self
                .entries
                .iter()
                .filter(|e| e.write.run_id() == id)
                .cloned()
                .collect();
            match replay_run(records, &holder, &mine) {
                Ok((n, merged)) => {
                    out.written += n;
                    if merged {
                        out.merged.push(id.clone());
                    }
                    self.entries.retain(|e| e.write.run_id() != id);
                }
                Err(e) if e.is_connection_lost() => {
                    out.stopped = Some(e.to_string());
                    break;
                }
                Err(e) => {
                    out.stopped = Some(format!("run {id}: {e} (its kept writes are dropped)"));
                    self.entries.retain(|e| e.write.run_id() != id);
                    break;
                }
            }
        }
        if let Err(e) = self.save() {
            out.stopped.get_or_insert(e);
        }
        out
    }
}

/// One run's kept writes: its newest record version (onto the stored one: a person's
/// change meanwhile keeps its status and note), its logs, then its release. The number
/// of writes made, and whether the record was merged with a person's change.
fn replay_run(
    records: &mut Records,
    holder: &Holder,
    entries: &[Entry],
) -> Result<(usize, bool), StoreError> {
    let mut written = 0;
    let mut merged = false;
    let base = entries.iter().find_map(|e| match &e.write {
        Write::Run { base, .. } => Some(*base),
        _ => None,
    });
    let newest = entries.iter().rev().find_map(|e| match &e.write {
        Write::Run { run, .. } => Some(run.as_ref().clone()),
        _ => None,
    });
    if let (Some(base), Some(mut run)) = (base, newest)
        && let Some(AnyRecord::Run(stored)) = records.get(&run.id)?
    {
        if stored.updated_at != base && stored.status != RunStatus::Running {
            run.status = stored.status;
            run.note = stored.note.clone();
            merged = true;
        }
        run.updated_at = stored.updated_at;
        records.update(AnyRecord::Run(run), crate::clock::now().as_millisecond())?;
        written += 1;
    }
    for e in entries {
        match &e.write {
            Write::Log {
                run_id,
                iteration,
                text,
            } => {
                records.put_log(run_id, *iteration, text)?;
                written += 1;
            }
            Write::Release { run_id } => {
                records.release(run_id, holder)?;
                written += 1;
            }
            Write::Run { .. } => {}
        }
    }
    Ok((written, merged))
}

/// Move an unreadable journal aside; the line that says so.
fn set_aside(path: &Path, why: &str) -> String {
    let aside = path.with_extension("json.unreadable");
    match std::fs::rename(path, &aside) {
        Ok(()) => format!(
            "the queue's journal {} is unreadable ({why}): set aside as {}; its writes are not made",
            path.display(),
            aside.display()
        ),
        Err(e) => format!(
            "the queue's journal {} is unreadable ({why}) and could not be set aside: {e}",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> LoopRun {
        serde_json::from_value(serde_json::json!({
            "id": id, "loop-type": "ralph", "status": "running",
            "iteration": 2, "created-at": 1, "updated-at": 5,
        }))
        .unwrap()
    }

    #[test]
    fn kept_writes_survive_a_restart_in_their_order() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("queue-journal.json");
        let (mut j, note) = Journal::open(&path);
        assert_eq!(note, None);
        j.push(
            "h:1:1",
            Write::Run {
                base: 5,
                run: Box::new(run("a")),
            },
        )
        .unwrap();
        j.push(
            "h:1:1",
            Write::Log {
                run_id: "a".into(),
                iteration: 2,
                text: "two".into(),
            },
        )
        .unwrap();
        j.push("h:1:1", Write::Release { run_id: "a".into() })
            .unwrap();
        let (again, _) = Journal::open(&path);
        assert_eq!(again.entries, j.entries);
        assert!(again.holds("a") && !again.holds("b"));
        assert_eq!(
            again.pending_run("a").map(|(b, r)| (b, r.iteration)),
            Some((5, 2))
        );
    }

    #[test]
    fn an_unreadable_journal_is_set_aside_and_said() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("queue-journal.json");
        std::fs::write(&path, "{not json").unwrap();
        let (j, note) = Journal::open(&path);
        assert!(j.is_empty());
        assert!(note.unwrap().contains("set aside"));
        assert!(tmp.path().join("queue-journal.json.unreadable").exists());
    }
}
