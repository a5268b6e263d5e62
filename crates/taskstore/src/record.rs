//! What a collection is, and the trait typed records implement.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record type stored in one collection. Its JSON form must carry the id as `"id"` and
/// the last change as `"updated-at"` (unix ms); fields named in `INDEXED` are indexed
/// (top-level keys of the JSON object) and can be filtered on.
pub trait Record: Serialize + DeserializeOwned {
    /// The collection's name; its file is `<name>.jsonl`.
    const COLLECTION: &'static str;
    /// Top-level fields to index.
    const INDEXED: &'static [&'static str];

    fn id(&self) -> &str;
    fn updated_at(&self) -> i64;

    fn collection_def() -> CollectionDef {
        CollectionDef::new(Self::COLLECTION, Self::INDEXED)
    }
}

/// A collection: its name and indexed fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionDef {
    pub name: String,
    pub indexed: Vec<String>,
}

impl CollectionDef {
    pub fn new(name: &str, indexed: &[&str]) -> CollectionDef {
        CollectionDef {
            name: name.to_string(),
            indexed: indexed.iter().map(|s| s.to_string()).collect(),
        }
    }

    pub fn file_name(&self) -> String {
        format!("{}.jsonl", self.name)
    }
}
