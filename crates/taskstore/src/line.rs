//! One line of a collection file: a JSON object with `id` (string), `updated-at` (integer,
//! unix ms) and, on tombstones, `"_deleted": true`. Reading a line extracts only those and
//! the collection's indexed fields; everything else is skipped without being built.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub const ID_FIELD: &str = "id";
pub const UPDATED_FIELD: &str = "updated-at";
pub const DELETED_FIELD: &str = "_deleted";

/// The value of an indexed field, in a form that orders and compares cheaply. Lists are
/// kept whole on the record (for `contains`) and indexed element by element.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IndexValue {
    /// Null or absent.
    Null,
    Bool(bool),
    Int(i64),
    Str(Box<str>),
    List(Box<[IndexValue]>),
    /// Anything else (floats, objects, huge integers), as its JSON text.
    Other(Box<str>),
}

impl IndexValue {
    pub fn from_json(v: &serde_json::Value) -> IndexValue {
        use serde_json::Value as J;
        match v {
            J::Null => IndexValue::Null,
            J::Bool(b) => IndexValue::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => IndexValue::Int(i),
                None => IndexValue::Other(n.to_string().into()),
            },
            J::String(s) => IndexValue::Str(s.as_str().into()),
            J::Array(a) => IndexValue::List(a.iter().map(IndexValue::from_json).collect()),
            J::Object(_) => IndexValue::Other(v.to_string().into()),
        }
    }

    /// Whether `<`/`>` mean anything between the two (same scalar kind).
    pub fn comparable(&self, other: &IndexValue) -> bool {
        matches!(
            (self, other),
            (IndexValue::Int(_), IndexValue::Int(_))
                | (IndexValue::Str(_), IndexValue::Str(_))
                | (IndexValue::Bool(_), IndexValue::Bool(_))
        )
    }
}

impl<'de> de::Deserialize<'de> for IndexValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IndexValueVisitor)
    }
}

struct IndexValueVisitor;

impl<'de> Visitor<'de> for IndexValueVisitor {
    type Value = IndexValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<IndexValue, E> {
        Ok(IndexValue::Null)
    }
    fn visit_none<E>(self) -> Result<IndexValue, E> {
        Ok(IndexValue::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<IndexValue, E> {
        Ok(IndexValue::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<IndexValue, E> {
        Ok(IndexValue::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<IndexValue, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => IndexValue::Int(i),
            Err(_) => IndexValue::Other(v.to_string().into()),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<IndexValue, E> {
        Ok(IndexValue::Other(
            serde_json::Number::from_f64(v)
                .map(|n| n.to_string())
                .unwrap_or_else(|| "null".into())
                .into(),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<IndexValue, E> {
        Ok(IndexValue::Str(v.into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IndexValue, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<IndexValue>()? {
            items.push(v);
        }
        Ok(IndexValue::List(items.into()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<IndexValue, A::Error> {
        let v: serde_json::Value =
            de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(IndexValue::Other(v.to_string().into()))
    }
}

/// What the store needs from a line.
#[derive(Debug, Clone, PartialEq)]
pub struct LineMeta {
    pub id: String,
    pub updated_at: i64,
    pub deleted: bool,
    /// One per indexed field of the collection, `Null` when absent.
    pub values: Box<[IndexValue]>,
}

/// Parse one line (without its newline). The error says what is wrong, for a person.
pub fn parse_meta(line: &[u8], indexed: &[String]) -> Result<LineMeta, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let meta = MetaSeed { indexed }
        .deserialize(&mut de)
        .map_err(describe)?;
    de.end().map_err(describe)?;
    meta
}

fn describe(e: serde_json::Error) -> String {
    let msg = e.to_string();
    // serde_json appends " at line 1 column N"; the column is useful, the line is not.
    match msg.rsplit_once(" at line 1 column ") {
        Some((m, col)) => format!("{m} (column {col})"),
        None => msg,
    }
}

struct MetaSeed<'a> {
    indexed: &'a [String],
}

enum Key {
    Id,
    Updated,
    Deleted,
    Indexed(usize),
    Other,
}

struct KeySeed<'a> {
    indexed: &'a [String],
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(match v {
            ID_FIELD => Key::Id,
            UPDATED_FIELD => Key::Updated,
            DELETED_FIELD => Key::Deleted,
            _ => match self.indexed.iter().position(|f| f == v) {
                Some(i) => Key::Indexed(i),
                None => Key::Other,
            },
        })
    }
}

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    /// The outer error is the JSON syntax; the inner one a missing or mistyped field.
    type Value = Result<LineMeta, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_> {
    type Value = Result<LineMeta, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object (one record per line)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut id: Option<Result<String, String>> = None;
        let mut updated: Option<Result<i64, String>> = None;
        let mut deleted = false;
        let mut values = vec![IndexValue::Null; self.indexed.len()];
        while let Some(key) = map.next_key_seed(KeySeed {
            indexed: self.indexed,
        })? {
            match key {
                Key::Id => {
                    id = Some(match map.next_value::<IndexValue>()? {
                        IndexValue::Str(s) if !s.is_empty() => Ok(s.into()),
                        _ => Err(format!("`{ID_FIELD}` must be a non-empty string")),
                    })
                }
                Key::Updated => {
                    updated = Some(match map.next_value::<IndexValue>()? {
                        IndexValue::Int(i) => Ok(i),
                        _ => Err(format!("`{UPDATED_FIELD}` must be an integer (unix ms)")),
                    })
                }
                Key::Deleted => deleted = map.next_value::<IndexValue>()? == IndexValue::Bool(true),
                Key::Indexed(i) => values[i] = map.next_value()?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let id = match id {
            Some(r) => r,
            None => Err(format!("no `{ID_FIELD}` field")),
        };
        let updated_at = match updated {
            Some(r) => r,
            None => Err(format!("no `{UPDATED_FIELD}` field")),
        };
        Ok(id.and_then(|id| {
            updated_at.map(|updated_at| LineMeta {
                id,
                updated_at,
                deleted,
                values: values.into(),
            })
        }))
    }
}

/// A git conflict marker line (`<<<<<<<`, `|||||||`, `=======`, `>>>>>>>`).
pub fn is_conflict_marker(line: &[u8]) -> bool {
    [b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>"]
        .iter()
        .any(|m| line.starts_with(*m))
}

/// The start of a line for messages: at most 80 characters, lossy UTF-8.
pub fn excerpt(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut out: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn extracts_id_time_and_indexed_fields_only() {
        let m = parse_meta(
            br#"{"id":"a","big":{"x":[1,2,{"y":"z"}]},"status":"ok","updated-at":5,"deps":["b","c"]}"#,
            &idx(&["status", "deps", "missing"]),
        )
        .unwrap();
        assert_eq!(m.id, "a");
        assert_eq!(m.updated_at, 5);
        assert!(!m.deleted);
        assert_eq!(m.values[0], IndexValue::Str("ok".into()));
        assert_eq!(
            m.values[1],
            IndexValue::List(vec![IndexValue::Str("b".into()), IndexValue::Str("c".into())].into())
        );
        assert_eq!(m.values[2], IndexValue::Null);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes() {
        let mut rng = fastrand::Rng::with_seed(0x2545f4914f6cdd1d);
        let alphabet = b"{}[]\":,-0123456789.eE truefalsnul\\\"idupdate-_deleted\x00\xff\xc3";
        for _ in 0..20_000 {
            let seed = rng.u64(..);
            let len = (seed % 64) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| alphabet[((seed >> (i % 50)) as usize + i * 7) % alphabet.len()])
                .collect();
            let _ = parse_meta(&bytes, &idx(&["status", "id"]));
            let _ = crate::merge::merge(&bytes, &bytes[..len / 2], &bytes[len / 2..]);
        }
    }

    #[test]
    fn reports_what_is_missing_or_broken() {
        assert_eq!(
            parse_meta(br#"{"updated-at":1}"#, &[]),
            Err("no `id` field".into())
        );
        assert!(
            parse_meta(br#"{"id":"a","updated-at":"x"}"#, &[])
                .unwrap_err()
                .contains("integer")
        );
        assert!(parse_meta(br#"{"id":"a","updated-at":1"#, &[]).is_err());
        assert!(parse_meta(br#"{"id":"a","updated-at":1} x"#, &[]).is_err());
        assert!(parse_meta(br#"[1]"#, &[]).is_err());
        let tomb = parse_meta(br#"{"id":"a","updated-at":1,"_deleted":true}"#, &[]).unwrap();
        assert!(tomb.deleted);
    }
}
