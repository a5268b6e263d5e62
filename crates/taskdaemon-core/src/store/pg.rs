//! The records of a project in PostgreSQL (the shared queue), with the JSONL store's
//! semantics: every record's latest version is cached in memory and read from there;
//! `sync` catches up by the monotonic `seq` column (bumped on every write); writes are
//! validated like the JSONL store's (create: new id; update: not older than the stored
//! version; delete: a tombstone) and run in a transaction holding the project's
//! advisory lock, so a check-then-write of `Records` sees what others committed. Every
//! committed write notifies channel `taskdaemon` with the project key.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use postgres::Client;
use serde::de::DeserializeOwned;
use taskstore::filter::matches;
use taskstore::line::{DELETED_FIELD, ID_FIELD, UPDATED_FIELD, parse_meta};
use taskstore::{Change, ChangeKind, CollectionDef, Filter, IndexValue, Op, Record};

use super::pg_conn::{QueueConfig, QueueError};
use super::{Result, StoreError};

/// The notification channel.
pub const CHANNEL: &str = "taskdaemon";

/// The advisory lock of a project's store-wide write transaction.
pub(crate) const PROJECT_LOCK_SQL: &str =
    "select pg_advisory_xact_lock(hashtextextended('taskdaemon:' || $1, 0))";

struct Entry {
    line: Vec<u8>,
    updated_at: i64,
    deleted: bool,
    first_seq: i64,
    values: Box<[IndexValue]>,
}

struct Col {
    indexed: Vec<String>,
    by_id: BTreeMap<String, Entry>,
}

/// The connection, shared with the write transaction guard.
pub(crate) struct Shared {
    cfg: QueueConfig,
    client: Mutex<Client>,
    in_txn: AtomicBool,
    wrote: AtomicBool,
    stale: AtomicBool,
}

impl Shared {
    /// The connection; one found closed (the server restarted, the network dropped) is
    /// replaced by a new one outside a transaction, and the cache is then reloaded in full
    /// at the next `sync` (what failed on the old one failed with its error).
    pub(crate) fn client(&self) -> MutexGuard<'_, Client> {
        let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if c.is_closed()
            && !self.in_txn.load(Ordering::SeqCst)
            && let Ok(fresh) = super::pg_conn::connect(&self.cfg)
        {
            *c = fresh;
            self.stale.store(true, Ordering::SeqCst);
        }
        c
    }
}

pub struct PgStore {
    cfg: QueueConfig,
    shared: Arc<Shared>,
    cols: BTreeMap<String, Col>,
    last_seq: i64,
    /// Rows that do not read as records (collection, id): skipped, as the JSONL store
    /// skips a bad line, and reported ([`PgStore::issues`]) until the record is written
    /// again.
    unreadable: BTreeMap<(String, String), taskstore::LineIssue>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.cfg.shown())
            .field("project", &self.cfg.project)
            .finish()
    }
}

/// The store-wide lock: an open transaction holding the project's advisory lock. Commit
/// it; dropped uncommitted, it rolls back (and the cache is reloaded if it was written).
pub struct PgTxn {
    cfg: QueueConfig,
    shared: Arc<Shared>,
    done: bool,
}

impl PgTxn {
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        let cfg = self.cfg.clone();
        let shared = self.shared.clone();
        let mut c = shared.client();
        let wrote = shared.wrote.swap(false, Ordering::SeqCst);
        shared.in_txn.store(false, Ordering::SeqCst);
        let res = (|| {
            if wrote {
                c.execute("select pg_notify($1, $2)", &[&CHANNEL, &cfg.project])?;
            }
            c.batch_execute("commit")
        })();
        if let Err(e) = res {
            shared.stale.store(true, Ordering::SeqCst);
            let _ = c.batch_execute("rollback");
            return Err(QueueError::sql(&cfg, "committing", e).into());
        }
        Ok(())
    }
}

impl Drop for PgTxn {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut c = self.shared.client();
        if self.shared.wrote.swap(false, Ordering::SeqCst) {
            self.shared.stale.store(true, Ordering::SeqCst);
        }
        self.shared.in_txn.store(false, Ordering::SeqCst);
        let _ = c.batch_execute("rollback");
    }
}

impl PgStore {
    pub fn open(cfg: QueueConfig, defs: Vec<CollectionDef>) -> Result<PgStore> {
        let client = super::pg_conn::connect(&cfg)?;
        let cols = defs
            .into_iter()
            .map(|d| {
                (
                    d.name.clone(),
                    Col {
                        indexed: d.indexed.clone(),
                        by_id: BTreeMap::new(),
                    },
                )
            })
            .collect();
        let mut s = PgStore {
            cfg: cfg.clone(),
            shared: Arc::new(Shared {
                cfg,
                client: Mutex::new(client),
                in_txn: AtomicBool::new(false),
                wrote: AtomicBool::new(false),
                stale: AtomicBool::new(false),
            }),
            cols,
            last_seq: 0,
            unreadable: BTreeMap::new(),
        };
        s.sync()?;
        Ok(s)
    }

    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn sql_err(&self, what: &str) -> impl FnOnce(postgres::Error) -> StoreError {
        let cfg = self.cfg.clone();
        let what = what.to_string();
        move |e| QueueError::sql(&cfg, &what, e).into()
    }

    /// Begin the store-wide write transaction.
    pub fn lock(&self) -> Result<PgTxn> {
        let mut c = self.shared.client();
        c.batch_execute("begin")
            .map_err(self.sql_err("beginning a write"))?;
        if let Err(e) = c.execute(PROJECT_LOCK_SQL, &[&self.cfg.project]) {
            let _ = c.batch_execute("rollback");
            return Err(self.sql_err("taking the project's lock")(e));
        }
        self.shared.in_txn.store(true, Ordering::SeqCst);
        Ok(PgTxn {
            cfg: self.cfg.clone(),
            shared: self.shared.clone(),
            done: false,
        })
    }

    /// Catch up with what was committed since the last read.
    pub fn sync(&mut self) -> Result<Vec<Change>> {
        if self.shared.stale.swap(false, Ordering::SeqCst) {
            for c in self.cols.values_mut() {
                c.by_id.clear();
            }
            self.unreadable.clear();
            self.last_seq = 0;
        }
        let rows = self
            .shared
            .client()
            .query(
                "select collection, id, updated_at, deleted, seq, first_seq, body::text
                 from records where project = $1 and seq > $2 order by seq",
                &[&self.cfg.project, &self.last_seq],
            )
            .map_err(self.sql_err("reading records"))?;
        let mut changes = Vec::new();
        for row in rows {
            let collection: String = row.get(0);
            let seq: i64 = row.get(4);
            self.last_seq = self.last_seq.max(seq);
            let Some(col) = self.cols.get_mut(&collection) else {
                continue;
            };
            let line: String = row.get(6);
            let id: String = row.get(1);
            let key = (collection.clone(), id.clone());
            let meta = match parse_meta(line.as_bytes(), &col.indexed) {
                Ok(meta) => meta,
                Err(reason) => {
                    col.by_id.remove(&id);
                    let issue = taskstore::LineIssue {
                        file: format!("{} {collection}", self.cfg.shown()).into(),
                        line: u64::try_from(seq).unwrap_or(0),
                        kind: taskstore::IssueKind::Corrupt,
                        message: format!("record `{id}` is unreadable: {reason}"),
                        excerpt: taskstore::line::excerpt(line.as_bytes()),
                        raw: line.into_bytes(),
                    };
                    self.unreadable.insert(key, issue);
                    continue;
                }
            };
            self.unreadable.remove(&key);
            let deleted: bool = row.get(3);
            let kind = match (col.by_id.get(&id), deleted) {
                (_, true) => ChangeKind::Deleted,
                (Some(e), false) if !e.deleted => ChangeKind::Updated,
                _ => ChangeKind::Created,
            };
            col.by_id.insert(
                id.clone(),
                Entry {
                    line: line.into_bytes(),
                    updated_at: row.get(2),
                    deleted,
                    first_seq: row.get(5),
                    values: meta.values,
                },
            );
            changes.push(Change {
                collection,
                id,
                kind,
            });
        }
        Ok(changes)
    }

    /// The rows that do not read as records, by sequence number (skipped: the rest loads).
    pub fn issues(&self) -> Vec<&taskstore::LineIssue> {
        let mut v: Vec<_> = self.unreadable.values().collect();
        v.sort_by_key(|i| i.line);
        v
    }

    fn col(&self, name: &str) -> Result<&Col> {
        self.cols.get(name).ok_or_else(|| {
            StoreError::Store(taskstore::Error::UnknownCollection {
                name: name.to_string(),
                known: self.cols.keys().cloned().collect::<Vec<_>>().join(", "),
            })
        })
    }

    // ---- reading (from the cache) ----

    pub fn get_raw(&self, collection: &str, id: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .col(collection)?
            .by_id
            .get(id)
            .filter(|e| !e.deleted)
            .map(|e| e.line.clone()))
    }

    pub fn get_as<R: Record>(&self, id: &str) -> Result<Option<R>> {
        match self.get_raw(R::COLLECTION, id)? {
            None => Ok(None),
            Some(line) => decode(R::COLLECTION, &line).map(Some),
        }
    }

    pub fn status_of(&self, collection: &str, id: &str) -> Result<Option<bool>> {
        Ok(self.col(collection)?.by_id.get(id).map(|e| e.deleted))
    }

    fn field_index(&self, collection: &str, field: &str) -> Result<usize> {
        let c = self.col(collection)?;
        c.indexed.iter().position(|f| f == field).ok_or_else(|| {
            StoreError::Store(taskstore::Error::NotIndexed {
                collection: collection.to_string(),
                field: field.to_string(),
                indexed: c.indexed.join(", "),
            })
        })
    }

    pub fn value_of(&self, collection: &str, id: &str, field: &str) -> Result<Option<IndexValue>> {
        let i = self.field_index(collection, field)?;
        Ok(self
            .col(collection)?
            .by_id
            .get(id)
            .filter(|e| !e.deleted)
            .and_then(|e| e.values.get(i).cloned()))
    }

    /// Live ids in id order.
    pub fn ids(&self, collection: &str) -> Result<Vec<&str>> {
        Ok(self
            .col(collection)?
            .by_id
            .iter()
            .filter(|(_, e)| !e.deleted)
            .map(|(id, _)| id.as_str())
            .collect())
    }

    /// Live ids containing `needle`, with every offset, in the order they were created.
    pub fn search_ids(&self, collection: &str, needle: &str) -> Result<Vec<(&str, Vec<usize>)>> {
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let mut out: Vec<(i64, &str, Vec<usize>)> = self
            .col(collection)?
            .by_id
            .iter()
            .filter(|(_, e)| !e.deleted)
            .filter_map(|(id, e)| {
                let offs: Vec<usize> = id.match_indices(needle).map(|(i, _)| i).collect();
                (!offs.is_empty()).then_some((e.first_seq, id.as_str(), offs))
            })
            .collect();
        out.sort_by_key(|(s, _, _)| *s);
        Ok(out.into_iter().map(|(_, id, o)| (id, o)).collect())
    }

    /// Ids (live and deleted) starting with `prefix`, in id order.
    pub fn ids_with_prefix<'a>(
        &'a self,
        collection: &str,
        prefix: &'a str,
    ) -> Result<Vec<(&'a str, bool)>> {
        Ok(self
            .col(collection)?
            .by_id
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(id, e)| (id.as_str(), e.deleted))
            .collect())
    }

    /// Live records passing every filter, in the order they were created, as lines.
    pub fn list_raw(&self, collection: &str, filters: &[Filter]) -> Result<Vec<(&str, Vec<u8>)>> {
        let mut resolved = Vec::with_capacity(filters.len());
        for f in filters {
            resolved.push((
                self.field_index(collection, &f.field)?,
                f.op,
                IndexValue::from_json(&f.value),
            ));
        }
        let mut out: Vec<(i64, &str, Vec<u8>)> = self
            .col(collection)?
            .by_id
            .iter()
            .filter(|(_, e)| {
                !e.deleted
                    && resolved
                        .iter()
                        .all(|(i, op, t)| e.values.get(*i).is_some_and(|v| matches(v, *op, t)))
            })
            .map(|(id, e)| (e.first_seq, id.as_str(), e.line.clone()))
            .collect();
        out.sort_by_key(|(s, _, _)| *s);
        Ok(out.into_iter().map(|(_, id, l)| (id, l)).collect())
    }

    pub fn list_as<R: Record>(&self, filters: &[Filter]) -> Result<Vec<R>> {
        self.list_raw(R::COLLECTION, filters)?
            .into_iter()
            .map(|(_, line)| decode(R::COLLECTION, &line))
            .collect()
    }

    /// Every stored version, tombstones included: (collection, id, deleted, line), in the
    /// order created.
    pub fn all_lines(&self) -> Vec<(&str, &str, bool, &[u8])> {
        let mut out: Vec<(i64, &str, &str, bool, &[u8])> = Vec::new();
        for (name, c) in &self.cols {
            for (id, e) in &c.by_id {
                out.push((e.first_seq, name, id, e.deleted, &e.line));
            }
        }
        out.sort_by_key(|t| t.0);
        out.into_iter()
            .map(|(_, c, i, d, l)| (c, i, d, l))
            .collect()
    }

    /// Counts per collection, as the JSONL store gives them: `file` names the queue and
    /// the collection, `bytes` the bodies' size, `lines` the rows (one per record: the
    /// queue keeps no superseded versions), `bad_lines` the rows that did not read.
    pub fn stats(&self) -> Vec<taskstore::CollectionStats> {
        self.cols
            .iter()
            .map(|(name, c)| {
                let tombstones = c.by_id.values().filter(|e| e.deleted).count();
                taskstore::CollectionStats {
                    collection: name.clone(),
                    file: std::path::PathBuf::from(format!(
                        "{} (project {}, {name})",
                        self.cfg.shown(),
                        self.cfg.project
                    )),
                    bytes: c.by_id.values().map(|e| e.line.len() as u64).sum(),
                    lines: c.by_id.len() as u64,
                    live: c.by_id.len() - tombstones,
                    tombstones,
                    superseded: 0,
                    bad_lines: self.unreadable.keys().filter(|(c, _)| c == name).count(),
                }
            })
            .collect()
    }

    // ---- writing ----

    /// Apply a batch, validated like the JSONL store's. Inside [`lock`](Self::lock)'s
    /// transaction when one is open (then nothing is visible before its commit), else in
    /// a transaction of its own.
    pub fn apply(&mut self, collection: &str, ops: Vec<Op>) -> Result<Vec<Change>> {
        if self.shared.in_txn.load(Ordering::SeqCst) {
            return self.apply_in_txn(collection, ops);
        }
        let txn = self.lock()?;
        let mut changes = self.sync()?;
        changes.extend(self.apply_in_txn(collection, ops)?);
        txn.commit()?;
        Ok(changes)
    }

    fn apply_in_txn(&mut self, collection: &str, ops: Vec<Op>) -> Result<Vec<Change>> {
        let mut batch: HashMap<String, (i64, bool)> = HashMap::new();
        let mut lines = Vec::with_capacity(ops.len());
        {
            let col = self.col(collection)?;
            for op in ops {
                lines.push(validate(collection, col, &mut batch, op)?);
            }
        }
        let mut changes = Vec::new();
        for (line, kind) in lines {
            let indexed = self.col(collection)?.indexed.clone();
            let meta = parse_meta(line.as_bytes(), &indexed).map_err(|reason| {
                StoreError::Store(taskstore::Error::InvalidRecord {
                    collection: collection.to_string(),
                    reason,
                })
            })?;
            self.shared.wrote.store(true, Ordering::SeqCst);
            let row = self
                .shared
                .client()
                .query_one(
                    "insert into records
                       (project, collection, id, updated_at, deleted, seq, first_seq, body)
                     values ($1, $2, $3, $4, $5, nextval('taskdaemon_seq'),
                             currval('taskdaemon_seq'), $6::text::json)
                     on conflict (project, collection, id) do update set
                       updated_at = excluded.updated_at, deleted = excluded.deleted,
                       seq = excluded.seq, body = excluded.body
                     returning seq, first_seq",
                    &[
                        &self.cfg.project,
                        &collection,
                        &meta.id,
                        &meta.updated_at,
                        &meta.deleted,
                        &line,
                    ],
                )
                .map_err(self.sql_err("writing a record"))?;
            self.last_seq = self.last_seq.max(row.get::<_, i64>(0));
            let col = self.cols.get_mut(collection).ok_or(StoreError::Stopped)?;
            col.by_id.insert(
                meta.id.clone(),
                Entry {
                    line: line.into_bytes(),
                    updated_at: meta.updated_at,
                    deleted: meta.deleted,
                    first_seq: row.get(1),
                    values: meta.values,
                },
            );
            changes.push(Change {
                collection: collection.to_string(),
                id: meta.id,
                kind,
            });
        }
        Ok(changes)
    }

    pub fn update_record<R: Record>(&mut self, r: &R) -> Result<Vec<Change>> {
        self.apply(R::COLLECTION, vec![Op::update(r)?])
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
}

fn decode<T: DeserializeOwned>(collection: &str, line: &[u8]) -> Result<T> {
    serde_json::from_slice(line).map_err(|e| {
        QueueError::BadRecord {
            collection: collection.to_string(),
            reason: e.to_string(),
        }
        .into()
    })
}

/// The line an op writes, checked against the cache and the batch so far.
fn validate(
    collection: &str,
    col: &Col,
    batch: &mut HashMap<String, (i64, bool)>,
    op: Op,
) -> Result<(String, ChangeKind)> {
    let current = |id: &str| -> Option<(i64, bool)> {
        batch
            .get(id)
            .copied()
            .or_else(|| col.by_id.get(id).map(|e| (e.updated_at, e.deleted)))
    };
    let invalid = |reason: String| {
        StoreError::Store(taskstore::Error::InvalidRecord {
            collection: collection.to_string(),
            reason,
        })
    };
    let meta = |line: &str| {
        if line.contains('\n') {
            return Err(invalid("a record must be one line".into()));
        }
        let m = parse_meta(line.as_bytes(), &[]).map_err(invalid)?;
        if m.deleted {
            return Err(invalid(format!(
                "`{DELETED_FIELD}` is reserved for tombstones"
            )));
        }
        Ok(m)
    };
    match op {
        Op::Create(line) => {
            let m = meta(&line)?;
            if let Some((_, deleted)) = current(&m.id) {
                return Err(StoreError::Store(taskstore::Error::AlreadyExists {
                    collection: collection.to_string(),
                    id: m.id,
                    deleted,
                }));
            }
            batch.insert(m.id, (m.updated_at, false));
            Ok((line, ChangeKind::Created))
        }
        Op::Update(line) => {
            let m = meta(&line)?;
            match current(&m.id) {
                Some((stored, false)) if m.updated_at < stored => {
                    Err(StoreError::Store(taskstore::Error::Stale {
                        collection: collection.to_string(),
                        id: m.id,
                        new: m.updated_at,
                        stored,
                    }))
                }
                Some((_, false)) => {
                    batch.insert(m.id, (m.updated_at, false));
                    Ok((line, ChangeKind::Updated))
                }
                _ => Err(StoreError::Store(taskstore::Error::NotFound {
                    collection: collection.to_string(),
                    id: m.id,
                })),
            }
        }
        Op::Delete { id, at } => match current(&id) {
            Some((stored, false)) => {
                let at = at.max(stored);
                let line =
                    serde_json::json!({ ID_FIELD: id, UPDATED_FIELD: at, DELETED_FIELD: true })
                        .to_string();
                batch.insert(id, (at, true));
                Ok((line, ChangeKind::Deleted))
            }
            _ => Err(StoreError::Store(taskstore::Error::NotFound {
                collection: collection.to_string(),
                id,
            })),
        },
    }
}
