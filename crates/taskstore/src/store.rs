//! The store: a directory of collections, one `<name>.jsonl` file each.
//!
//! Durability policy:
//! - Every mutating call (`create`, `update`, `delete`, `apply`) appends complete lines
//!   with one `write` on an `O_APPEND` descriptor while holding an exclusive lock on the
//!   file, then `fdatasync`s it before returning (plus an fsync of the directory when the
//!   file was just created). `apply` writes a whole batch with one write and one fsync.
//!   When a call returns `Ok`, its records survive a crash of the process or the machine.
//! - Before writing, the writer reads what other processes appended (under the same lock),
//!   so validation (no duplicate id, no stale update) sees the current file; if the file
//!   does not end with a newline (a write cut short by a crash, a hand edit), the writer
//!   first terminates it so its own line is never glued onto that fragment.
//! - Compaction writes the new file beside the old one, fsyncs it, renames it over the old
//!   one and fsyncs the directory, all under the old file's exclusive lock.
//! - With `StoreOptions::fsync = false` nothing is fsynced (tests, bulk imports you can
//!   redo); lines are still written whole under the lock.
//!
//! Reading: the latest `updated-at` per id wins (a tie goes to the later line); a
//! tombstone (`"_deleted": true`) deletes. Lines that cannot be read are skipped and
//! listed in `issues()`, with file and line; the records around them load normally.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::collection::{Change, Collection, LineIssue};
use crate::error::{Error, Result};
use crate::file::{StoreLock, lock_dir, open_locked, read_range, sync_dir, write_atomic};
use crate::filter::Filter;
use crate::line::{DELETED_FIELD, ID_FIELD, LineMeta, UPDATED_FIELD, parse_meta};
use crate::record::{CollectionDef, Record};

pub const WARN_BYTES: u64 = 50 * 1024 * 1024;
pub const MAX_BYTES: u64 = 200 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Note a collection file larger than this (see `Store::warnings`). Default 50 MB.
    pub warn_bytes: u64,
    /// Refuse to load a larger collection file; `None` loads anything (compaction and
    /// `check` need that). Default 200 MB.
    pub max_bytes: Option<u64>,
    /// fsync every write before returning. Default true.
    pub fsync: bool,
    /// Keep a rebuildable index of each collection in `<dir>/.index/` (see `index_file`),
    /// so a load reads the index and the bytes appended since instead of the whole file.
    /// Default true.
    pub index: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            warn_bytes: WARN_BYTES,
            max_bytes: Some(MAX_BYTES),
            fsync: true,
            index: true,
        }
    }
}

/// One change in a batch (`Store::apply`).
#[derive(Debug, Clone)]
pub enum Op {
    /// A new record (its JSON line).
    Create(String),
    /// A new version of an existing record.
    Update(String),
    /// Delete: a tombstone stamped `at` (or the stored version's time, if later).
    Delete { id: String, at: i64 },
}

impl Op {
    pub fn create(record: &impl Serialize) -> Result<Op> {
        Ok(Op::Create(
            serde_json::to_string(record).map_err(Error::Encode)?,
        ))
    }
    pub fn update(record: &impl Serialize) -> Result<Op> {
        Ok(Op::Update(
            serde_json::to_string(record).map_err(Error::Encode)?,
        ))
    }
}

/// Figures about one collection.
#[derive(Debug, Clone, Serialize)]
pub struct CollectionStats {
    pub collection: String,
    pub file: PathBuf,
    pub bytes: u64,
    pub lines: u64,
    pub live: usize,
    pub tombstones: usize,
    /// Lines holding versions that a later line replaced.
    pub superseded: u64,
    pub bad_lines: usize,
}

#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Tombstones younger than this stay (so a deletion still wins in merges). Default 30 days.
    pub retention_ms: i64,
    /// Now, unix ms.
    pub now_ms: i64,
    /// Move unreadable lines to `<name>.jsonl.rejected` instead of refusing.
    pub drop_corrupt: bool,
}

pub const DEFAULT_RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

#[derive(Debug, Clone, Serialize)]
pub struct CompactReport {
    pub collection: String,
    pub file: PathBuf,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub lines_before: u64,
    pub records: usize,
    pub tombstones_kept: usize,
    pub tombstones_dropped: usize,
    pub rejected_lines: usize,
    pub rejected_file: Option<PathBuf>,
}

pub struct Store {
    dir: PathBuf,
    opts: StoreOptions,
    cols: BTreeMap<String, Collection>,
    fsyncs: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("collections", &self.cols.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Store {
    /// Open the store in `dir` with these collections, loading each file (after the size
    /// guard). A missing directory or file is an empty collection; nothing is created
    /// until the first write.
    pub fn open(
        dir: impl Into<PathBuf>,
        defs: Vec<CollectionDef>,
        opts: StoreOptions,
    ) -> Result<Store> {
        let dir = dir.into();
        let mut cols = BTreeMap::new();
        for def in defs {
            let mut c = Collection::new(def, &dir);
            c.load(&opts, true)?;
            cols.insert(c.def.name.clone(), c);
        }
        Ok(Store {
            dir,
            opts,
            cols,
            fsyncs: 0,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    pub fn collection_names(&self) -> impl Iterator<Item = &str> {
        self.cols.keys().map(|s| s.as_str())
    }

    pub fn path_of(&self, collection: &str) -> Result<&Path> {
        Ok(&self.col(collection)?.path)
    }

    /// Whether `collection` was last loaded from its saved index (plus the bytes appended
    /// since) rather than by parsing its whole file.
    pub fn loaded_from_index(&self, collection: &str) -> Result<bool> {
        Ok(self.col(collection)?.from_index)
    }

    /// How many fsyncs this store made (the durability policy, observable).
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs
    }

    /// Collection files over the warning size, as messages.
    pub fn warnings(&self) -> Vec<String> {
        self.cols
            .values()
            .filter_map(|c| c.large.map(|len| (c, len)))
            .map(|(c, len)| {
                format!(
                    "{} is large ({} MB; the limit is {} MB)\n  hint: run `taskdaemon store compact`",
                    c.path.display(),
                    len / (1024 * 1024),
                    self.opts.max_bytes.unwrap_or(MAX_BYTES) / (1024 * 1024)
                )
            })
            .collect()
    }

    /// Every line that could not be read, in file and line order.
    pub fn issues(&self) -> Vec<&LineIssue> {
        self.cols
            .values()
            .flat_map(|c| c.issues.iter().chain(c.pending.iter()))
            .collect()
    }

    pub fn stats(&self) -> Vec<CollectionStats> {
        self.cols
            .values()
            .map(|c| {
                let (live, tombstones) = c.count();
                CollectionStats {
                    collection: c.def.name.clone(),
                    file: c.path.clone(),
                    bytes: c.file_len(),
                    lines: c.line_count(),
                    live,
                    tombstones,
                    superseded: c.superseded,
                    bad_lines: c.issues.len() + usize::from(c.pending.is_some()),
                }
            })
            .collect()
    }

    /// Hold the store-wide lock (a lock on the directory) for a check-then-write sequence
    /// that spans collections. Writes take their own file locks as well.
    pub fn lock(&self) -> Result<StoreLock> {
        lock_dir(&self.dir).map_err(Error::io(&self.dir))
    }

    fn col(&self, name: &str) -> Result<&Collection> {
        self.cols.get(name).ok_or_else(|| self.unknown(name))
    }

    fn col_mut(&mut self, name: &str) -> Result<&mut Collection> {
        if !self.cols.contains_key(name) {
            return Err(self.unknown(name));
        }
        Ok(self.cols.get_mut(name).expect("checked above"))
    }

    fn unknown(&self, name: &str) -> Error {
        Error::UnknownCollection {
            name: name.to_string(),
            known: self.cols.keys().cloned().collect::<Vec<_>>().join(", "),
        }
    }

    // ---- reading ----

    /// The latest version of a live record, as its stored JSON line.
    pub fn get_raw(&self, collection: &str, id: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.col(collection)?.get(id)?.map(|(b, _)| b))
    }

    pub fn get(&self, collection: &str, id: &str) -> Result<Option<Value>> {
        self.get_as_value(collection, id)
    }

    fn get_as_value<T: DeserializeOwned>(&self, collection: &str, id: &str) -> Result<Option<T>> {
        let c = self.col(collection)?;
        match c.get(id)? {
            None => Ok(None),
            Some((bytes, slot)) => decode(c, &bytes, slot.line).map(Some),
        }
    }

    /// Whether an id is taken: `Some(false)` live, `Some(true)` deleted (a tombstone).
    pub fn status_of(&self, collection: &str, id: &str) -> Result<Option<bool>> {
        Ok(self.col(collection)?.slot(id).map(|s| s.deleted))
    }

    /// The value of an indexed field of a live record, from the index (no line is read);
    /// `None` when there is no such live record.
    pub fn value_of(
        &self,
        collection: &str,
        id: &str,
        field: &str,
    ) -> Result<Option<crate::line::IndexValue>> {
        let c = self.col(collection)?;
        let i = c.field_index(field)?;
        Ok(c.slot(id)
            .filter(|s| !s.deleted)
            .and_then(|s| s.values().get(i).cloned()))
    }

    /// Live ids in order.
    pub fn ids(&self, collection: &str) -> Result<impl Iterator<Item = &str>> {
        Ok(self
            .col(collection)?
            .sorted()
            .into_iter()
            .filter(|s| !s.deleted)
            .map(|s| s.id))
    }

    /// Live ids that contain `needle`, each with every byte offset where it occurs, in the
    /// order the records first appeared. One pass over all ids (SIMD substring search).
    pub fn search_ids(&self, collection: &str, needle: &str) -> Result<Vec<(&str, Vec<usize>)>> {
        Ok(self.col(collection)?.search_ids(needle))
    }

    /// Ids (live and deleted) starting with `prefix`, in order.
    pub fn ids_with_prefix<'a>(
        &'a self,
        collection: &str,
        prefix: &'a str,
    ) -> Result<Vec<(&'a str, bool)>> {
        Ok(self
            .col(collection)?
            .with_prefix(prefix)
            .into_iter()
            .map(|s| (s.id, s.deleted))
            .collect())
    }

    /// Live records passing every filter (on indexed fields), in the order they first
    /// appeared in the file, as stored lines.
    pub fn list_raw(&self, collection: &str, filters: &[Filter]) -> Result<Vec<(&str, Vec<u8>)>> {
        let c = self.col(collection)?;
        c.list(filters)?
            .into_iter()
            .map(|slot| Ok((slot.id, c.bytes(&slot)?)))
            .collect()
    }

    /// Ids of live records passing every filter (on indexed fields), in the order they
    /// first appeared in the file; reads no record.
    pub fn list_ids(&self, collection: &str, filters: &[Filter]) -> Result<Vec<&str>> {
        Ok(self
            .col(collection)?
            .list(filters)?
            .into_iter()
            .map(|slot| slot.id)
            .collect())
    }

    pub fn list(&self, collection: &str, filters: &[Filter]) -> Result<Vec<Value>> {
        self.list_decoded(collection, filters)
    }

    fn list_decoded<T: DeserializeOwned>(
        &self,
        collection: &str,
        filters: &[Filter],
    ) -> Result<Vec<T>> {
        let c = self.col(collection)?;
        c.list(filters)?
            .into_iter()
            .map(|slot| decode(c, &c.bytes(&slot)?, slot.line))
            .collect()
    }

    pub fn get_as<R: Record>(&self, id: &str) -> Result<Option<R>> {
        self.get_as_value(R::COLLECTION, id)
    }

    pub fn list_as<R: Record>(&self, filters: &[Filter]) -> Result<Vec<R>> {
        self.list_decoded(R::COLLECTION, filters)
    }

    // ---- writing ----

    pub fn create(&mut self, collection: &str, record: &Value) -> Result<Vec<Change>> {
        self.apply(collection, vec![Op::create(record)?])
    }

    pub fn update(&mut self, collection: &str, record: &Value) -> Result<Vec<Change>> {
        self.apply(collection, vec![Op::update(record)?])
    }

    pub fn delete(&mut self, collection: &str, id: &str, at_ms: i64) -> Result<Vec<Change>> {
        self.apply(
            collection,
            vec![Op::Delete {
                id: id.to_string(),
                at: at_ms,
            }],
        )
    }

    pub fn create_record<R: Record>(&mut self, r: &R) -> Result<Vec<Change>> {
        self.apply(R::COLLECTION, vec![Op::create(r)?])
    }

    pub fn update_record<R: Record>(&mut self, r: &R) -> Result<Vec<Change>> {
        self.apply(R::COLLECTION, vec![Op::update(r)?])
    }

    /// Apply a batch: validated in order against the current file (other processes'
    /// appends included), then written with one write and one fsync. Nothing is written
    /// if any op is invalid. Returns every change seen (others' too).
    pub fn apply(&mut self, collection: &str, ops: Vec<Op>) -> Result<Vec<Change>> {
        let opts = self.opts.clone();
        let dir = self.dir.clone();
        let c = self.col_mut(collection)?;
        fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let existed = c.path.exists();
        let path = c.path.clone();
        let locked = open_locked(&path, true)
            .map_err(Error::io(&path))?
            .ok_or_else(|| Error::Io {
                path: path.clone(),
                source: std::io::Error::other("could not open for writing"),
            })?;
        let mut changes = Vec::new();
        c.refresh(Some(&locked), &opts, &mut changes)?;

        let mut payload = Vec::new();
        let len = locked.file.metadata().map_err(Error::io(&path))?.len();
        if len > 0 && read_range(&locked.file, len - 1, len).map_err(Error::io(&path))? != b"\n" {
            payload.push(b'\n');
        }
        // State of ids touched earlier in this batch: (updated-at, deleted).
        let mut batch: HashMap<String, (i64, bool)> = HashMap::new();
        for op in ops {
            let line = validate(c, &mut batch, op)?;
            payload.extend_from_slice(line.as_bytes());
            payload.push(b'\n');
        }
        use std::io::Write;
        (&locked.file)
            .write_all(&payload)
            .map_err(Error::io(&path))?;
        if opts.fsync {
            locked.file.sync_data().map_err(Error::io(&path))?;
            self.fsyncs += 1;
            if !existed {
                sync_dir(&dir);
                self.fsyncs += 1;
            }
        }
        // Read back what we wrote: the in-memory state follows the file, never the intent.
        let c = self.col_mut(collection)?;
        c.refresh(Some(&locked), &opts, &mut changes)?;
        Ok(changes)
    }

    /// Catch up with what other processes (or git) did to the files.
    pub fn sync(&mut self) -> Result<Vec<Change>> {
        let opts = self.opts.clone();
        let mut changes = Vec::new();
        for c in self.cols.values_mut() {
            c.refresh(None, &opts, &mut changes)?;
        }
        Ok(changes)
    }

    /// Read a collection again from its file and rebuild its indexes; returns the number
    /// of live records.
    pub fn rebuild_indexes(&mut self, collection: &str) -> Result<usize> {
        let opts = self.opts.clone();
        let c = self.col_mut(collection)?;
        c.load(&opts, false)?;
        Ok(c.count().0)
    }

    /// Rewrite a collection with only the latest version of each record (tombstones older
    /// than the retention window dropped), sorted by id, atomically.
    pub fn compact(&mut self, collection: &str, o: &CompactOptions) -> Result<CompactReport> {
        let opts = self.opts.clone();
        let c = self.col_mut(collection)?;
        let path = c.path.clone();
        if !path.exists() {
            return Ok(CompactReport {
                collection: collection.to_string(),
                file: path,
                bytes_before: 0,
                bytes_after: 0,
                lines_before: 0,
                records: 0,
                tombstones_kept: 0,
                tombstones_dropped: 0,
                rejected_lines: 0,
                rejected_file: None,
            });
        }
        // Exclusive: no writer appends between our read and the rename.
        let locked = open_locked(&path, true)
            .map_err(Error::io(&path))?
            .ok_or_else(|| Error::Io {
                path: path.clone(),
                source: std::io::Error::other("could not open for compaction"),
            })?;
        let mut changes = Vec::new();
        let unlimited = StoreOptions {
            max_bytes: None,
            ..opts.clone()
        };
        c.refresh(Some(&locked), &unlimited, &mut changes)?;
        let bad: Vec<&LineIssue> = c.issues.iter().chain(c.pending.iter()).collect();
        if !bad.is_empty() && !o.drop_corrupt {
            return Err(Error::CompactCorrupt {
                path,
                count: bad.len(),
            });
        }
        let mut rejected_file = None;
        if !bad.is_empty() {
            let rej = path.with_extension("jsonl.rejected");
            let mut text = Vec::new();
            for i in &bad {
                text.extend_from_slice(&i.raw);
                text.push(b'\n');
            }
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&rej)
                .map_err(Error::io(&rej))?;
            use std::io::Write;
            f.write_all(&text).map_err(Error::io(&rej))?;
            f.sync_data().map_err(Error::io(&rej))?;
            rejected_file = Some(rej);
        }
        let rejected_lines = bad.len();
        let cutoff = o.now_ms.saturating_sub(o.retention_ms);
        let mut out = Vec::with_capacity(c.file_len() as usize);
        let (mut records, mut kept, mut dropped) = (0, 0, 0);
        for slot in c.sorted() {
            if slot.deleted {
                if slot.updated_at < cutoff {
                    dropped += 1;
                    continue;
                }
                kept += 1;
            } else {
                records += 1;
            }
            out.extend_from_slice(&c.bytes(&slot)?);
            out.push(b'\n');
        }
        let report = CompactReport {
            collection: collection.to_string(),
            file: path.clone(),
            bytes_before: c.file_len(),
            bytes_after: out.len() as u64,
            lines_before: c.line_count(),
            records,
            tombstones_kept: kept,
            tombstones_dropped: dropped,
            rejected_lines,
            rejected_file,
        };
        write_atomic(&path, &out).map_err(Error::io(&path))?;
        self.fsyncs += 2;
        let c = self.col_mut(collection)?;
        c.load(&unlimited, false)?;
        drop(locked);
        Ok(report)
    }
}

fn decode<T: DeserializeOwned>(c: &Collection, bytes: &[u8], line: u64) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Decode {
        path: c.path.clone(),
        line,
        reason: e.to_string(),
    })
}

fn invalid(c: &Collection, reason: String) -> Error {
    Error::InvalidRecord {
        collection: c.def.name.clone(),
        reason,
    }
}

/// Check one op against the collection (and the batch so far); return its line.
fn validate(c: &Collection, batch: &mut HashMap<String, (i64, bool)>, op: Op) -> Result<String> {
    let current = |id: &str| -> Option<(i64, bool)> {
        batch
            .get(id)
            .copied()
            .or_else(|| c.slot(id).map(|s| (s.updated_at, s.deleted)))
    };
    let meta = |line: &str| -> Result<LineMeta> {
        if line.contains('\n') {
            return Err(invalid(c, "a record must be one line".into()));
        }
        parse_meta(line.as_bytes(), &[]).map_err(|r| invalid(c, r))
    };
    match op {
        Op::Create(line) => {
            let m = meta(&line)?;
            if m.deleted {
                return Err(invalid(
                    c,
                    format!("`{DELETED_FIELD}` is reserved for tombstones"),
                ));
            }
            if let Some((_, deleted)) = current(&m.id) {
                return Err(Error::AlreadyExists {
                    collection: c.def.name.clone(),
                    id: m.id,
                    deleted,
                });
            }
            batch.insert(m.id, (m.updated_at, false));
            Ok(line)
        }
        Op::Update(line) => {
            let m = meta(&line)?;
            if m.deleted {
                return Err(invalid(
                    c,
                    format!("`{DELETED_FIELD}` is reserved for tombstones"),
                ));
            }
            match current(&m.id) {
                Some((stored, false)) if m.updated_at < stored => Err(Error::Stale {
                    collection: c.def.name.clone(),
                    id: m.id,
                    new: m.updated_at,
                    stored,
                }),
                Some((_, false)) => {
                    batch.insert(m.id, (m.updated_at, false));
                    Ok(line)
                }
                _ => Err(Error::NotFound {
                    collection: c.def.name.clone(),
                    id: m.id,
                }),
            }
        }
        Op::Delete { id, at } => match current(&id) {
            Some((stored, false)) => {
                let at = at.max(stored);
                let line =
                    serde_json::json!({ ID_FIELD: id, UPDATED_FIELD: at, DELETED_FIELD: true })
                        .to_string();
                batch.insert(id, (at, true));
                Ok(line)
            }
            _ => Err(Error::NotFound {
                collection: c.def.name.clone(),
                id,
            }),
        },
    }
}
