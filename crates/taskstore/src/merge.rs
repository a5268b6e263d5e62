//! The git merge driver: a three-way merge of a collection file, record by record.
//!
//! Installed as `merge.<name>.driver = "<program> %O %A %B %P"` with a `.gitattributes`
//! line `<store>/*.jsonl merge=<name>`. For each id, with O the ancestor's latest version,
//! A ours and B theirs (absent, a version, or a tombstone):
//! - A and B equal: that one; only one side differs from O: that side's;
//! - both changed: the newer `updated-at` wins; equal times with different contents is a
//!   conflict: both lines are kept between git conflict markers and the driver exits 1;
//! - one side no longer has the record at all (a hand edit, compaction dropped its old
//!   tombstone) while the other changed it: the changed version is kept (never lose a
//!   record).
//!
//! The result has one line per id (its latest version), sorted by id. Lines that are not
//! records (corrupt, or markers of an earlier conflict) that either side added are kept,
//! at the end, so that nothing disappears unseen; `store check` lists them.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::collection::trim;
use crate::file::write_atomic;
use crate::line::parse_meta;

#[derive(Debug, Clone)]
struct Version {
    updated_at: i64,
    line: Vec<u8>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct MergeReport {
    /// Ids in the result (tombstones included).
    pub records: usize,
    /// Ids whose version came from theirs.
    pub from_theirs: usize,
    /// Ids kept in conflict (equal times, different contents).
    pub conflicts: Vec<String>,
    /// Unreadable lines carried over from either side.
    pub bad_lines: usize,
}

struct Side {
    versions: BTreeMap<String, Version>,
    bad: Vec<Vec<u8>>,
}

fn read_side(bytes: &[u8]) -> Side {
    let mut versions: BTreeMap<String, Version> = BTreeMap::new();
    let mut bad = Vec::new();
    for raw in bytes.split(|b| *b == b'\n') {
        let line = trim(raw);
        if line.is_empty() {
            continue;
        }
        match parse_meta(line, &[]) {
            Ok(m) => {
                let newer = versions
                    .get(&m.id)
                    .is_none_or(|old| m.updated_at >= old.updated_at);
                if newer {
                    versions.insert(
                        m.id,
                        Version {
                            updated_at: m.updated_at,
                            line: line.to_vec(),
                        },
                    );
                }
            }
            Err(_) => bad.push(line.to_vec()),
        }
    }
    Side { versions, bad }
}

fn same(a: Option<&Version>, b: Option<&Version>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.line == b.line
                || match (
                    serde_json::from_slice::<serde_json::Value>(&a.line),
                    serde_json::from_slice::<serde_json::Value>(&b.line),
                ) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => false,
                }
        }
        _ => false,
    }
}

enum Pick<'a> {
    Ours(&'a Version),
    Theirs(&'a Version),
    Neither,
    Conflict(&'a Version, &'a Version),
}

/// Merge three versions of a collection file; returns the merged file and what happened.
pub fn merge(base: &[u8], ours: &[u8], theirs: &[u8]) -> (Vec<u8>, MergeReport) {
    let (o, a, b) = (read_side(base), read_side(ours), read_side(theirs));
    let ids: BTreeSet<&String> = o
        .versions
        .keys()
        .chain(a.versions.keys())
        .chain(b.versions.keys())
        .collect();
    let mut out = Vec::new();
    let mut report = MergeReport::default();
    for id in ids {
        let (vo, va, vb) = (o.versions.get(id), a.versions.get(id), b.versions.get(id));
        let pick = if same(va, vb) {
            va.map_or(Pick::Neither, Pick::Ours)
        } else if same(va, vo) {
            vb.map_or(Pick::Neither, Pick::Theirs)
        } else if same(vb, vo) {
            va.map_or(Pick::Neither, Pick::Ours)
        } else {
            match (va, vb) {
                (Some(x), Some(y)) if x.updated_at > y.updated_at => Pick::Ours(x),
                (Some(x), Some(y)) if x.updated_at < y.updated_at => Pick::Theirs(y),
                (Some(x), Some(y)) => Pick::Conflict(x, y),
                (Some(x), None) => Pick::Ours(x),
                (None, Some(y)) => Pick::Theirs(y),
                (None, None) => Pick::Neither,
            }
        };
        match pick {
            Pick::Ours(v) => push_line(&mut out, &v.line),
            Pick::Theirs(v) => {
                report.from_theirs += 1;
                push_line(&mut out, &v.line);
            }
            Pick::Neither => continue,
            Pick::Conflict(x, y) => {
                out.extend_from_slice(b"<<<<<<< ours\n");
                push_line(&mut out, &x.line);
                out.extend_from_slice(b"=======\n");
                push_line(&mut out, &y.line);
                out.extend_from_slice(b">>>>>>> theirs\n");
                report.conflicts.push(id.clone());
            }
        }
        report.records += 1;
    }
    // Unreadable lines: keep what either side added and what both kept.
    let in_o: BTreeSet<&Vec<u8>> = o.bad.iter().collect();
    let in_a: BTreeSet<&Vec<u8>> = a.bad.iter().collect();
    let in_b: BTreeSet<&Vec<u8>> = b.bad.iter().collect();
    let mut seen = BTreeSet::new();
    for line in a.bad.iter().chain(b.bad.iter()) {
        let keep = if in_o.contains(line) {
            in_a.contains(line) && in_b.contains(line)
        } else {
            true
        };
        if keep && seen.insert(line) {
            push_line(&mut out, line);
            report.bad_lines += 1;
        }
    }
    (out, report)
}

fn push_line(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    out.push(b'\n');
}

/// Merge files as git's `%O %A %B`: the result replaces `ours` (atomically).
pub fn merge_files(base: &Path, ours: &Path, theirs: &Path) -> std::io::Result<MergeReport> {
    let read = |p: &Path| match std::fs::read(p) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", p.display()),
        )),
    };
    let (o, a, b) = (read(base)?, read(ours)?, read(theirs)?);
    let (text, report) = merge(&o, &a, &b);
    write_atomic(ours, &text)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", ours.display())))?;
    Ok(report)
}

/// The driver's whole job, for a binary's `main`: arguments `%O %A %B [%P]`. Exit status
/// 0 merged, 1 conflicts left in the file, 2 could not merge (git then reports a conflict
/// and leaves ours in place).
pub fn driver(args: &[OsString], err: &mut dyn Write) -> i32 {
    let [base, ours, theirs, rest @ ..] = args else {
        let _ = writeln!(
            err,
            "usage: taskstore-merge BASE OURS THEIRS [PATH]  (git: `driver = taskstore-merge %O %A %B %P`)"
        );
        return 2;
    };
    let name = rest
        .first()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| Path::new(ours).display().to_string());
    match merge_files(Path::new(base), Path::new(ours), Path::new(theirs)) {
        Ok(r) if r.conflicts.is_empty() => {
            if r.bad_lines > 0 {
                let _ = writeln!(
                    err,
                    "taskstore-merge: {name}: kept {} unreadable line(s); `taskdaemon store check` lists them",
                    r.bad_lines
                );
            }
            0
        }
        Ok(r) => {
            let _ = writeln!(
                err,
                "taskstore-merge: {name}: {} record(s) changed on both sides at the same time; both versions are kept between conflict markers: {}\n  hint: edit {name} to keep one line per record, then `git add {name}`",
                r.conflicts.len(),
                r.conflicts.join(", ")
            );
            1
        }
        Err(e) => {
            let _ = writeln!(err, "taskstore-merge: {name}: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(id: &str, t: i64, v: &str) -> String {
        format!(r#"{{"id":"{id}","updated-at":{t},"v":"{v}"}}"#)
    }
    fn file(lines: &[String]) -> Vec<u8> {
        lines
            .iter()
            .map(|s| format!("{s}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn per_record_three_way() {
        let base = file(&[
            l("a", 1, "a0"),
            l("b", 1, "b0"),
            l("c", 1, "c0"),
            l("d", 1, "d0"),
        ]);
        // ours: edits a (t2), deletes c with a tombstone, adds e
        let ours = file(&[
            l("a", 1, "a0"),
            l("b", 1, "b0"),
            l("c", 1, "c0"),
            l("d", 1, "d0"),
            l("a", 2, "a-ours"),
            r#"{"id":"c","updated-at":2,"_deleted":true}"#.into(),
            l("e", 2, "e-ours"),
        ]);
        // theirs (compacted): edits b (t3), edits d at t5 and ours did not touch d, adds f
        let theirs = file(&[
            l("a", 1, "a0"),
            l("b", 3, "b-theirs"),
            l("c", 1, "c0"),
            l("d", 5, "d-theirs"),
            l("f", 4, "f"),
        ]);
        let (out, r) = merge(&base, &ours, &theirs);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            [
                l("a", 2, "a-ours"),
                l("b", 3, "b-theirs"),
                r#"{"id":"c","updated-at":2,"_deleted":true}"#.into(),
                l("d", 5, "d-theirs"),
                l("e", 2, "e-ours"),
                l("f", 4, "f"),
            ]
            .iter()
            .map(|s| format!("{s}\n"))
            .collect::<String>()
        );
        assert!(r.conflicts.is_empty());
        assert_eq!(r.from_theirs, 3);
    }

    #[test]
    fn both_changed_newer_wins_equal_times_conflict() {
        let base = file(&[l("a", 1, "0"), l("b", 1, "0")]);
        let ours = file(&[l("a", 5, "ours"), l("b", 7, "ours")]);
        let theirs = file(&[l("a", 6, "theirs"), l("b", 7, "theirs")]);
        let (out, r) = merge(&base, &ours, &theirs);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(&format!(
                "{}\n<<<<<<< ours\n{}\n=======\n{}\n>>>>>>> theirs\n",
                l("a", 6, "theirs"),
                l("b", 7, "ours"),
                l("b", 7, "theirs")
            )),
            "{text}"
        );
        assert_eq!(r.conflicts, ["b"]);
    }

    #[test]
    fn a_record_dropped_on_one_side_but_changed_on_the_other_is_kept() {
        let base = file(&[l("a", 1, "0")]);
        let ours = file(&[]);
        let theirs = file(&[l("a", 2, "changed")]);
        let (out, _) = merge(&base, &ours, &theirs);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{}\n", l("a", 2, "changed"))
        );
        // ... while an unchanged record removed on one side stays removed.
        let (out, _) = merge(&base, &ours, &base);
        assert!(out.is_empty());
    }

    #[test]
    fn added_bad_lines_are_carried_and_formatting_differences_are_not_changes() {
        let base = file(&[l("a", 1, "0")]);
        let ours = file(&[
            r#"{ "id": "a", "v": "0", "updated-at": 1 }"#.into(),
            "garbage".into(),
        ]);
        let theirs = file(&[l("a", 1, "0")]);
        let (out, r) = merge(&base, &ours, &theirs);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("garbage\n"), "{text}");
        assert_eq!(r.bad_lines, 1);
        assert!(r.conflicts.is_empty());
    }
}
