//! The one JSON convention of every `--json` output and every event (docs/json.md).
//!
//! - keys are snake_case, whatever the source (the store's records are kebab-case on disk
//!   and stay so: they are converted here, at the output boundary);
//! - every document is an object carrying `"schema": 1`; a list comes under a named key
//!   (`{"schema":1,"runs":[…]}`), never as a bare array;
//! - every event also carries `at`, an RFC 3339 time from the project's clock
//!   ([`crate::clock`], so `TASKDAEMON_NOW` fixes it);
//! - a time is RFC 3339: a key ending in `_at` that holds unix milliseconds (a record's
//!   `created-at`) becomes the RFC 3339 text of that instant;
//! - unset is `null`, and values keep their native types (numbers, booleans).
//!
//! [`document`], [`list`] and [`event`] build what is printed; [`check`] is the schema
//! check the tests run every command's output and every event through.

use serde::Serialize;
use serde_json::{Map, Value};

/// The version of the convention; a document that changes incompatibly bumps it.
pub const SCHEMA: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("cannot turn {what} into JSON: {source}")]
    Serialize {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error(
        "a JSON document must be an object, not a list or a bare value (an internal error; please report it)"
    )]
    NotAnObject,
}

/// `v` as a document of the convention: keys snake_case, times RFC 3339, `schema`.
/// `v` must serialize to an object (a list goes through [`list`]).
pub fn document(v: &impl Serialize) -> Result<Value, JsonError> {
    let value = serde_json::to_value(v).map_err(|source| JsonError::Serialize {
        what: "the document",
        source,
    })?;
    let Value::Object(mut fields) = normalize(value) else {
        return Err(JsonError::NotAnObject);
    };
    fields.insert("schema".into(), SCHEMA.into());
    Ok(Value::Object(fields))
}

/// `items` under `key`: `{"schema":1,"<key>":[…]}`.
pub fn list(key: &str, items: &impl Serialize) -> Result<Value, JsonError> {
    let items = serde_json::to_value(items).map_err(|source| JsonError::Serialize {
        what: "the list",
        source,
    })?;
    let mut m = Map::new();
    m.insert(snake(key), items);
    document(&Value::Object(m))
}

/// `e` as an event of the convention: a document with `at` (now, on the project's clock).
pub fn event(e: &impl Serialize) -> Result<Value, JsonError> {
    event_at(e, crate::clock::now())
}

/// [`event`] at a given time.
pub fn event_at(e: &impl Serialize, at: jiff::Timestamp) -> Result<Value, JsonError> {
    let mut doc = document(e)?;
    if let Value::Object(fields) = &mut doc {
        fields.insert("at".into(), time(at).into());
    }
    Ok(doc)
}

/// A time as the convention writes it: RFC 3339 in UTC, to the millisecond (no fraction
/// when it is a whole second).
pub fn time(t: jiff::Timestamp) -> String {
    t.round(jiff::Unit::Millisecond).unwrap_or(t).to_string()
}

/// Unix milliseconds as [`time`]; `None` out of range.
pub fn time_of_ms(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms).ok().map(time)
}

/// Every key snake_case (`created-at` → `created_at`), every `_at` key holding unix ms as
/// RFC 3339; values otherwise as they are.
pub fn normalize(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let k = snake(&k);
                    let v = match v {
                        Value::Number(n) if k.ends_with("_at") => n
                            .as_i64()
                            .and_then(time_of_ms)
                            .map_or(Value::Number(n), Value::String),
                        other => normalize(other),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        other => other,
    }
}

/// `kebab-case` (or `camelCase`) → `snake_case`.
pub fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    for (i, c) in key.chars().enumerate() {
        match c {
            '-' | ' ' | '.' => out.push('_'),
            c if c.is_ascii_uppercase() => {
                if i > 0 && !out.ends_with('_') {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            }
            c => out.push(c),
        }
    }
    out
}

/// What a [`check`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A command's `--json` document.
    Document,
    /// An event (a line of `run --json`, of the daemon's stream).
    Event,
}

/// Keys whose strings are free text, names or commands: a string of digits there (a title
/// "42", the validation command `true`) is data, not a number written as text. A setting's
/// `value` is not among them: `"9"` there is the number 9 written as text.
const TEXT_KEYS: &[&str] = &[
    "title",
    "text",
    "line",
    "message",
    "detail",
    "reason",
    "question",
    "description",
    "commit",
    "head",
    "id",
    "run",
    "run_id",
    "tag",
    "task",
    "hint",
    "error",
    "last_line",
    "prompt_template",
    "system_prompt",
    "summary",
    "name",
    "output",
    "validate",
    "command",
    "validation_command",
    "agent",
    "member",
];

/// Every way `v` breaks the convention, each with where (`$.runs[0].created_at: …`);
/// empty when it keeps it.
pub fn check(v: &Value, kind: Kind) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(top) = v.as_object() else {
        problems.push("$: a document is an object, not a bare value or list".into());
        walk(v, "$", None, &mut problems);
        return problems;
    };
    if top.get("schema").and_then(Value::as_u64) != Some(SCHEMA) {
        problems.push(format!(
            "$.schema: {SCHEMA} expected, found {:?}",
            top.get("schema")
        ));
    }
    if kind == Kind::Event {
        match top.get("event").and_then(Value::as_str) {
            Some(name) if is_snake(name) => {}
            other => problems.push(format!(
                "$.event: a snake_case name expected, found {other:?}"
            )),
        }
        match top.get("at").and_then(Value::as_str) {
            Some(at) if at.parse::<jiff::Timestamp>().is_ok() => {}
            other => problems.push(format!("$.at: an RFC 3339 time expected, found {other:?}")),
        }
    }
    walk(v, "$", None, &mut problems);
    problems
}

fn is_snake(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !key.contains("__")
        && !key.ends_with('_')
}

fn walk(v: &Value, at: &str, key: Option<&str>, problems: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let here = format!("{at}.{k}");
                if !is_snake(k) {
                    problems.push(format!("{here}: the key is not snake_case"));
                }
                walk(v, &here, Some(k), problems);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                walk(v, &format!("{at}[{i}]"), key, problems);
            }
        }
        Value::String(s) => check_string(s, at, key, problems),
        Value::Number(_) if key.is_some_and(|k| k.ends_with("_at")) => {
            problems.push(format!("{at}: a time is RFC 3339 text, not a number"));
        }
        _ => {}
    }
}

fn check_string(s: &str, at: &str, key: Option<&str>, problems: &mut Vec<String>) {
    let key = key.unwrap_or_default();
    let lower = s.trim().to_ascii_lowercase();
    if lower.starts_with("(unset") || lower.starts_with("(none") || lower == "unset" {
        problems.push(format!("{at}: {s:?} is prose for unset: null expected"));
    }
    if key.ends_with("_at") && s.parse::<jiff::Timestamp>().is_err() {
        problems.push(format!("{at}: {s:?} is not an RFC 3339 time"));
    }
    if key.ends_with("_ms") || key.ends_with("_usd") || key.ends_with("_count") {
        problems.push(format!("{at}: a number expected, found the text {s:?}"));
    }
    let free = TEXT_KEYS.contains(&key) || key.ends_with("_id") || key.ends_with("_ids");
    if !free && (matches!(lower.as_str(), "true" | "false" | "null") || s.parse::<f64>().is_ok()) {
        problems.push(format!(
            "{at}: {s:?} is a number or boolean written as text"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_become_snake_case_and_ms_times_rfc3339() {
        let v = document(&json!({
            "created-at": 1_795_262_400_000_i64,
            "waiting-for": [{"loop-type": "ralph"}],
            "costUsd": 1.5,
        }))
        .unwrap();
        assert_eq!(
            v,
            json!({
                "schema": 1,
                "created_at": "2026-11-21T12:00:00Z",
                "waiting_for": [{"loop_type": "ralph"}],
                "cost_usd": 1.5,
            })
        );
        assert!(
            check(&v, Kind::Document).is_empty(),
            "{:?}",
            check(&v, Kind::Document)
        );
    }

    #[test]
    fn a_list_comes_under_its_name_and_a_bare_list_is_refused() {
        let v = list("runs", &vec![json!({"id": "a"})]).unwrap();
        assert_eq!(v, json!({"schema": 1, "runs": [{"id": "a"}]}));
        assert!(matches!(document(&vec![1, 2]), Err(JsonError::NotAnObject)));
    }

    #[test]
    fn an_event_carries_its_schema_and_time() {
        let at: jiff::Timestamp = "2026-11-21T12:00:00.1234Z".parse().unwrap();
        let v = event_at(&json!({"event": "run_started", "run-id": "x"}), at).unwrap();
        let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["at", "event", "run_id", "schema"]);
        assert_eq!(v["at"], "2026-11-21T12:00:00.123Z");
        assert!(
            check(&v, Kind::Event).is_empty(),
            "{:?}",
            check(&v, Kind::Event)
        );
    }

    #[test]
    fn the_check_names_each_break_of_the_convention() {
        let v = json!({
            "cost-usd": "9",
            "value": "(unset: no limit)",
            "created_at": 17,
            "ok": "true",
        });
        let p = check(&v, Kind::Event).join("\n");
        for want in [
            "$.schema",
            "$.event",
            "$.at",
            "$.cost-usd: the key is not snake_case",
            "$.value: \"(unset: no limit)\" is prose",
            "$.created_at: a time is RFC 3339",
            "$.ok: \"true\" is a number or boolean",
        ] {
            assert!(p.contains(want), "{want} not in:\n{p}");
        }
        assert_eq!(check(&json!([1]), Kind::Document).len(), 1);
        // What is in a bare list is checked as well.
        assert_eq!(
            check(&json!([{"loop-type": "ralph"}]), Kind::Document).len(),
            2
        );
    }
}
