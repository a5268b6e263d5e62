//! What can go wrong, each with where and what to do.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}\n  hint: check that the directory exists and is writable")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is {mb} MB, over the {limit_mb} MB limit; it was not loaded\n  hint: run compaction (`taskdaemon store compact`) to drop old versions"
    )]
    TooLarge {
        path: PathBuf,
        mb: u64,
        limit_mb: u64,
    },
    #[error("unknown collection `{name}`\n  hint: known collections: {known}")]
    UnknownCollection { name: String, known: String },
    #[error(
        "field `{field}` is not indexed in collection `{collection}`; filters work on indexed fields only\n  hint: indexed fields: {indexed}"
    )]
    NotIndexed {
        collection: String,
        field: String,
        indexed: String,
    },
    #[error("record `{id}` already exists in `{collection}`{}", if *.deleted { " (deleted; its id stays taken until compaction drops the tombstone)" } else { "" })]
    AlreadyExists {
        collection: String,
        id: String,
        deleted: bool,
    },
    #[error("no record `{id}` in `{collection}`")]
    NotFound { collection: String, id: String },
    #[error("invalid record for `{collection}`: {reason}")]
    InvalidRecord { collection: String, reason: String },
    #[error(
        "update of `{id}` in `{collection}` is older (updated-at {new}) than the stored version ({stored}); it would be ignored on reload\n  hint: set updated-at to at least {stored}"
    )]
    Stale {
        collection: String,
        id: String,
        new: i64,
        stored: i64,
    },
    #[error(
        "{path}:{line}: stored record does not have the expected shape: {reason}\n  hint: fix or remove that line; `taskdaemon store check` lists every bad line"
    )]
    Decode {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error(
        "{path} has {count} corrupt or conflicted line(s); compaction would drop them\n  hint: `taskdaemon store check` lists them; fix or delete them (resolve merge conflicts first), or compact with --drop-corrupt to move them to a .rejected file"
    )]
    CompactCorrupt { path: PathBuf, count: usize },
    #[error("cannot encode record: {0}")]
    Encode(#[source] serde_json::Error),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
