//! taskstore: a generic record store on JSONL files. It knows no domain.
//!
//! A store is a directory; each collection is one `<name>.jsonl` file and is the source of
//! truth: append-only, one JSON object per line, the latest `updated-at` per `id` wins,
//! deletes are tombstones (`"_deleted": true`). At open each collection's index (per id
//! where its latest line is, the indexed fields) is read from a rebuildable cache in
//! `<dir>/.index/` plus the bytes appended since, or built by parsing the file (after a
//! size guard) when that cache is missing or stale; records are read from the file when
//! asked for. Other processes' appends are picked up by `sync` and before every write. See [`store`] for the durability policy, [`merge`] for the git
//! merge driver.

mod base;
mod collection;
pub mod error;
mod file;
pub mod filter;
mod index_file;
pub mod line;
pub mod merge;
pub mod record;
pub mod store;

pub use collection::{Change, ChangeKind, IssueKind, LineIssue};
pub use error::{Error, Result};
pub use file::StoreLock;
pub use filter::{Filter, FilterOp};
pub use line::IndexValue;
pub use record::{CollectionDef, Record};
pub use store::{
    CollectionStats, CompactOptions, CompactReport, DEFAULT_RETENTION_MS, MAX_BYTES, Op, Store,
    StoreOptions, WARN_BYTES,
};
