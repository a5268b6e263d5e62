//! Where `Records` keeps its records: the JSONL files in the repository (the default) or
//! PostgreSQL (the shared queue, `queue:`). Both answer the same reads with the same
//! meaning; a write sequence is `lock`, catch up, check, `apply`, `commit`.

use std::path::Path;

use taskstore::{Change, Filter, IndexValue, Op, Record, Store, StoreLock};

use super::Result;
use super::pg::{PgStore, PgTxn};
use super::pg_conn::QueueConfig;

pub enum Backend {
    Jsonl(Store),
    Postgres(PgStore),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Jsonl(s) => s.fmt(f),
            Backend::Postgres(p) => p.fmt(f),
        }
    }
}

/// The store-wide write lock of either backend; `commit` makes the writes made under it
/// visible (JSONL writes are durable as they happen; Postgres commits here).
pub enum WriteLock {
    Jsonl(StoreLock),
    Postgres(PgTxn),
}

impl WriteLock {
    pub fn commit(self) -> Result<()> {
        match self {
            WriteLock::Jsonl(_) => Ok(()),
            WriteLock::Postgres(t) => t.commit(),
        }
    }
}

impl Backend {
    /// The JSONL store, when that is the backend.
    pub fn jsonl(&self) -> Option<&Store> {
        match self {
            Backend::Jsonl(s) => Some(s),
            Backend::Postgres(_) => None,
        }
    }

    pub fn jsonl_mut(&mut self) -> Option<&mut Store> {
        match self {
            Backend::Jsonl(s) => Some(s),
            Backend::Postgres(_) => None,
        }
    }

    pub fn postgres(&self) -> Option<&PgStore> {
        match self {
            Backend::Postgres(p) => Some(p),
            Backend::Jsonl(_) => None,
        }
    }

    pub fn postgres_mut(&mut self) -> Option<&mut PgStore> {
        match self {
            Backend::Postgres(p) => Some(p),
            Backend::Jsonl(_) => None,
        }
    }

    /// The shared queue, when that is the backend.
    pub fn queue(&self) -> Option<&QueueConfig> {
        self.postgres().map(PgStore::config)
    }

    /// The JSONL store's directory (none for Postgres).
    pub fn dir(&self) -> Option<&Path> {
        self.jsonl().map(Store::dir)
    }

    /// Size warnings of the JSONL files (none for Postgres).
    pub fn warnings(&self) -> Vec<String> {
        self.jsonl().map(Store::warnings).unwrap_or_default()
    }

    /// Unreadable lines of the JSONL files, or rows of the queue (skipped; the rest loads).
    pub fn issues(&self) -> Vec<&taskstore::LineIssue> {
        match self {
            Backend::Jsonl(s) => s.issues(),
            Backend::Postgres(p) => p.issues(),
        }
    }

    /// Figures of the JSONL files (none for Postgres).
    pub fn stats(&self) -> Vec<taskstore::CollectionStats> {
        match self {
            Backend::Jsonl(s) => s.stats(),
            Backend::Postgres(p) => p.stats(),
        }
    }

    pub fn lock(&self) -> Result<WriteLock> {
        Ok(match self {
            Backend::Jsonl(s) => WriteLock::Jsonl(s.lock()?),
            Backend::Postgres(p) => WriteLock::Postgres(p.lock()?),
        })
    }

    pub fn sync(&mut self) -> Result<Vec<Change>> {
        match self {
            Backend::Jsonl(s) => Ok(s.sync()?),
            Backend::Postgres(p) => p.sync(),
        }
    }

    pub fn get_raw(&self, collection: &str, id: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Backend::Jsonl(s) => Ok(s.get_raw(collection, id)?),
            Backend::Postgres(p) => p.get_raw(collection, id),
        }
    }

    pub fn get_as<R: Record>(&self, id: &str) -> Result<Option<R>> {
        match self {
            Backend::Jsonl(s) => Ok(s.get_as::<R>(id)?),
            Backend::Postgres(p) => p.get_as::<R>(id),
        }
    }

    /// `Some(false)` live, `Some(true)` deleted, `None` never seen.
    pub fn status_of(&self, collection: &str, id: &str) -> Result<Option<bool>> {
        match self {
            Backend::Jsonl(s) => Ok(s.status_of(collection, id)?),
            Backend::Postgres(p) => p.status_of(collection, id),
        }
    }

    pub fn value_of(&self, collection: &str, id: &str, field: &str) -> Result<Option<IndexValue>> {
        match self {
            Backend::Jsonl(s) => Ok(s.value_of(collection, id, field)?),
            Backend::Postgres(p) => p.value_of(collection, id, field),
        }
    }

    /// Live ids in id order.
    pub fn ids(&self, collection: &str) -> Result<std::vec::IntoIter<&str>> {
        Ok(match self {
            Backend::Jsonl(s) => s.ids(collection)?.collect::<Vec<_>>(),
            Backend::Postgres(p) => p.ids(collection)?,
        }
        .into_iter())
    }

    pub fn search_ids(&self, collection: &str, needle: &str) -> Result<Vec<(&str, Vec<usize>)>> {
        match self {
            Backend::Jsonl(s) => Ok(s.search_ids(collection, needle)?),
            Backend::Postgres(p) => p.search_ids(collection, needle),
        }
    }

    pub fn ids_with_prefix<'a>(
        &'a self,
        collection: &str,
        prefix: &'a str,
    ) -> Result<Vec<(&'a str, bool)>> {
        match self {
            Backend::Jsonl(s) => Ok(s.ids_with_prefix(collection, prefix)?),
            Backend::Postgres(p) => p.ids_with_prefix(collection, prefix),
        }
    }

    pub fn list_raw(&self, collection: &str, filters: &[Filter]) -> Result<Vec<(&str, Vec<u8>)>> {
        match self {
            Backend::Jsonl(s) => Ok(s.list_raw(collection, filters)?),
            Backend::Postgres(p) => p.list_raw(collection, filters),
        }
    }

    pub fn list_ids(&self, collection: &str, filters: &[Filter]) -> Result<Vec<&str>> {
        match self {
            Backend::Jsonl(s) => Ok(s.list_ids(collection, filters)?),
            Backend::Postgres(p) => Ok(p
                .list_raw(collection, filters)?
                .into_iter()
                .map(|(id, _)| id)
                .collect()),
        }
    }

    pub fn list_as<R: Record>(&self, filters: &[Filter]) -> Result<Vec<R>> {
        match self {
            Backend::Jsonl(s) => Ok(s.list_as::<R>(filters)?),
            Backend::Postgres(p) => p.list_as::<R>(filters),
        }
    }

    pub fn apply(&mut self, collection: &str, ops: Vec<Op>) -> Result<Vec<Change>> {
        match self {
            Backend::Jsonl(s) => Ok(s.apply(collection, ops)?),
            Backend::Postgres(p) => p.apply(collection, ops),
        }
    }

    pub fn update_record<R: Record>(&mut self, r: &R) -> Result<Vec<Change>> {
        match self {
            Backend::Jsonl(s) => Ok(s.update_record(r)?),
            Backend::Postgres(p) => p.update_record(r),
        }
    }

    pub fn delete(&mut self, collection: &str, id: &str, at_ms: i64) -> Result<Vec<Change>> {
        match self {
            Backend::Jsonl(s) => Ok(s.delete(collection, id, at_ms)?),
            Backend::Postgres(p) => p.delete(collection, id, at_ms),
        }
    }
}
