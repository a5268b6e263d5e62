//! The store against real files: CRUD, filters, last-writer-wins, torn and corrupt lines,
//! concurrent writers, compaction, the size guard and the durability policy.

use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use taskstore::{
    ChangeKind, CollectionDef, CompactOptions, Error, Filter, FilterOp, IssueKind, Op, Record,
    Store, StoreOptions,
};

fn defs() -> Vec<CollectionDef> {
    vec![CollectionDef::new(
        "items",
        &["status", "tags", "n", "name"],
    )]
}

fn open(dir: &Path) -> Store {
    Store::open(dir, defs(), StoreOptions::default()).unwrap()
}

fn item(id: &str, t: i64, status: &str) -> Value {
    json!({"id": id, "updated-at": t, "status": status, "tags": [], "n": 0, "name": id})
}

fn ids(v: &[Value]) -> Vec<&str> {
    v.iter().map(|r| r["id"].as_str().unwrap()).collect()
}

#[test]
fn create_get_update_delete_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    let ch = s.create("items", &item("a", 1, "new")).unwrap();
    assert_eq!(ch[0].kind, ChangeKind::Created);
    s.create("items", &item("b", 1, "new")).unwrap();
    assert!(matches!(
        s.create("items", &item("a", 2, "new")),
        Err(Error::AlreadyExists { deleted: false, .. })
    ));
    s.update("items", &item("a", 2, "done")).unwrap();
    assert!(matches!(
        s.update("items", &item("a", 1, "stale")),
        Err(Error::Stale { stored: 2, .. })
    ));
    assert!(matches!(
        s.update("items", &item("zz", 1, "x")),
        Err(Error::NotFound { .. })
    ));
    s.delete("items", "b", 3).unwrap();
    assert!(s.get("items", "b").unwrap().is_none());
    assert!(matches!(
        s.create("items", &item("b", 9, "again")),
        Err(Error::AlreadyExists { deleted: true, .. })
    ));
    assert_eq!(s.get("items", "a").unwrap().unwrap()["status"], "done");
    drop(s);
    let s = open(d.path());
    assert_eq!(s.get("items", "a").unwrap().unwrap()["status"], "done");
    assert!(s.get("items", "b").unwrap().is_none());
    assert_eq!(s.status_of("items", "b").unwrap(), Some(true));
    let st = &s.stats()[0];
    assert_eq!(
        (st.live, st.tombstones, st.lines, st.superseded),
        (1, 1, 4, 2)
    );
    let text = fs::read_to_string(d.path().join("items.jsonl")).unwrap();
    assert!(
        text.ends_with("{\"_deleted\":true,\"id\":\"b\",\"updated-at\":3}\n"),
        "{text}"
    );
}

#[test]
fn filters_on_indexed_fields() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    let mut ops = Vec::new();
    for i in 0..50 {
        ops.push(
            Op::create(&json!({
                "id": format!("r{i:02}"), "updated-at": 1,
                "status": if i % 5 == 0 { "done" } else { "open" },
                "tags": if i % 10 == 0 { json!(["x", "y"]) } else { json!(["y"]) },
                "n": i, "name": format!("name-{i}"),
            }))
            .unwrap(),
        );
    }
    s.apply("items", ops).unwrap();
    let done = s.list("items", &[Filter::eq("status", "done")]).unwrap();
    assert_eq!(
        ids(&done),
        [
            "r00", "r05", "r10", "r15", "r20", "r25", "r30", "r35", "r40", "r45"
        ]
    );
    assert_eq!(
        s.list("items", &[Filter::ne("status", "done")])
            .unwrap()
            .len(),
        40
    );
    assert_eq!(
        ids(&s.list("items", &[Filter::lt("n", 3)]).unwrap()),
        ["r00", "r01", "r02"]
    );
    assert_eq!(
        ids(&s.list("items", &[Filter::gt("n", 47)]).unwrap()),
        ["r48", "r49"]
    );
    assert_eq!(
        ids(&s
            .list(
                "items",
                &[
                    Filter::new("n", FilterOp::Ge, 47),
                    Filter::new("n", FilterOp::Le, 48)
                ]
            )
            .unwrap()),
        ["r47", "r48"]
    );
    assert_eq!(
        ids(&s
            .list(
                "items",
                &[Filter::contains("tags", "x"), Filter::gt("n", 15)]
            )
            .unwrap()),
        ["r20", "r30", "r40"]
    );
    assert_eq!(
        ids(&s.list("items", &[Filter::contains("name", "e-4")]).unwrap()).len(),
        11
    );
    assert_eq!(
        s.list("items", &[Filter::eq("tags", json!(["x", "y"]))])
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        s.list("items", &[Filter::eq("status", "nope")])
            .unwrap()
            .len(),
        0
    );
    let e = s.list("items", &[Filter::eq("title", "x")]).unwrap_err();
    assert!(
        e.to_string().contains("not indexed") && e.to_string().contains("status, tags, n, name"),
        "{e}"
    );
    // Index follows updates and deletes.
    s.update(
        "items",
        &json!({"id": "r00", "updated-at": 2, "status": "open", "n": 0}),
    )
    .unwrap();
    s.delete("items", "r05", 2).unwrap();
    assert_eq!(
        ids(&s.list("items", &[Filter::eq("status", "done")]).unwrap())[..2],
        ["r10", "r15"]
    );
    assert!(matches!(
        s.list("nope", &[]),
        Err(Error::UnknownCollection { .. })
    ));
}

#[test]
fn latest_updated_at_wins_ties_go_to_the_later_line() {
    let d = tempfile::tempdir().unwrap();
    fs::write(
        d.path().join("items.jsonl"),
        [
            r#"{"id":"a","updated-at":5,"status":"five"}"#,
            r#"{"id":"a","updated-at":3,"status":"three, appended later"}"#,
            r#"{"id":"b","updated-at":5,"status":"first"}"#,
            r#"{"id":"b","updated-at":5,"status":"second"}"#,
            "",
        ]
        .join("\n"),
    )
    .unwrap();
    let s = open(d.path());
    assert_eq!(s.get("items", "a").unwrap().unwrap()["status"], "five");
    assert_eq!(s.get("items", "b").unwrap().unwrap()["status"], "second");
    assert_eq!(
        s.list("items", &[Filter::eq("status", "five")])
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_torn_tail_is_reported_then_terminated_by_the_next_writer() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    let mut s = open(d.path());
    for i in 0..3 {
        s.create("items", &item(&format!("r{i}"), 1, "ok")).unwrap();
    }
    drop(s);
    // A crash in the middle of appending the fourth line.
    let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(br#"{"id":"r3","updated-at":1,"sta"#).unwrap();
    drop(f);
    let mut s = open(d.path());
    assert_eq!(s.ids("items").unwrap().count(), 3);
    let issues = s.issues();
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].kind, IssueKind::TornTail);
    assert_eq!(issues[0].line, 4);
    assert!(
        issues[0]
            .to_string()
            .starts_with(&format!("{}:4: incomplete last line", p.display())),
        "{}",
        issues[0]
    );
    s.create("items", &item("r4", 1, "ok")).unwrap();
    let text = fs::read_to_string(&p).unwrap();
    assert!(text.ends_with("\"sta\n{\"id\":\"r4\",\"n\":0,\"name\":\"r4\",\"status\":\"ok\",\"tags\":[],\"updated-at\":1}\n"), "{text}");
    drop(s);
    let s = open(d.path());
    assert_eq!(
        s.ids("items").unwrap().collect::<Vec<_>>(),
        ["r0", "r1", "r2", "r4"]
    );
    let issues = s.issues();
    assert_eq!(
        (issues.len(), issues[0].line, issues[0].kind),
        (1, 4, IssueKind::Corrupt)
    );
}

#[test]
fn a_complete_last_line_without_newline_is_a_record() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    fs::write(&p, format!("{}\n{}", item("a", 1, "x"), item("b", 1, "x"))).unwrap();
    let mut s = open(d.path());
    assert_eq!(s.ids("items").unwrap().count(), 2);
    assert!(s.issues().is_empty());
    s.create("items", &item("c", 1, "x")).unwrap();
    let s2 = open(d.path());
    assert_eq!(s2.ids("items").unwrap().count(), 3);
    assert!(s2.issues().is_empty(), "{:?}", s2.issues());
    assert_eq!(fs::read_to_string(&p).unwrap().lines().count(), 3);
}

#[test]
fn corrupt_lines_and_conflict_markers_are_skipped_and_named() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    fs::write(
        &p,
        format!(
            "{}\nnot json\n{{\"id\":\"x\"}}\n<<<<<<< ours\n{}\r\n=======\n{}\n>>>>>>> theirs\n\n{}\n",
            item("a", 1, "ok"),
            item("b", 2, "ours"),
            item("b", 2, "theirs"),
            item("c", 1, "ok")
        ),
    )
    .unwrap();
    let s = open(d.path());
    assert_eq!(s.ids("items").unwrap().collect::<Vec<_>>(), ["a", "b", "c"]);
    let issues: Vec<(u64, IssueKind)> = s.issues().iter().map(|i| (i.line, i.kind)).collect();
    assert_eq!(
        issues,
        [
            (2, IssueKind::Corrupt),
            (3, IssueKind::Corrupt),
            (4, IssueKind::ConflictMarker),
            (6, IssueKind::ConflictMarker),
            (8, IssueKind::ConflictMarker)
        ]
    );
    assert!(
        s.issues()[1].message.contains("updated-at"),
        "{}",
        s.issues()[1]
    );
}

#[test]
fn random_damage_never_panics_and_never_loses_an_untouched_line() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    let lines: Vec<String> = (0..40)
        .map(|i| item(&format!("r{i:02}"), i, "ok").to_string())
        .collect();
    let mut rng = fastrand::Rng::with_seed(0x9e3779b97f4a7c15);
    let mut rnd = move || rng.u64(..);
    for _ in 0..300 {
        let mut bytes = lines.join("\n").into_bytes();
        bytes.push(b'\n');
        let mut damaged = std::collections::BTreeSet::new();
        for _ in 0..(rnd() % 4) {
            let at = (rnd() as usize) % bytes.len();
            let line = bytes[..at].iter().filter(|b| **b == b'\n').count();
            damaged.insert(line);
            damaged.insert(line + 1); // a newline overwritten glues two lines
            bytes[at] = (rnd() % 256) as u8;
        }
        if rnd() % 3 == 0 {
            let cut = (rnd() as usize) % bytes.len();
            let line = bytes[..cut].iter().filter(|b| **b == b'\n').count();
            damaged.extend(line..=40);
            bytes.truncate(cut);
        }
        fs::write(&p, &bytes).unwrap();
        let s = open(d.path());
        for (i, l) in lines.iter().enumerate() {
            if !damaged.contains(&i) {
                let id = format!("r{i:02}");
                assert_eq!(
                    s.get("items", &id).unwrap().as_ref(),
                    Some(&serde_json::from_str::<Value>(l).unwrap()),
                    "line {i}"
                );
            }
        }
    }
}

#[test]
fn two_handles_writing_at_once_lose_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut s = Store::open(
                    &dir,
                    defs(),
                    StoreOptions {
                        fsync: false,
                        ..Default::default()
                    },
                )
                .unwrap();
                for i in 0..300 {
                    s.create("items", &item(&format!("t{t}-{i}"), 1, "x"))
                        .unwrap();
                    if i % 50 == 0 {
                        s.apply(
                            "items",
                            (0..10)
                                .map(|j| {
                                    Op::create(&item(&format!("t{t}-{i}-{j}"), 1, "b")).unwrap()
                                })
                                .collect(),
                        )
                        .unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = open(&dir);
    assert_eq!(s.ids("items").unwrap().count(), 2 * (300 + 60));
    assert!(s.issues().is_empty());
}

#[test]
fn sync_sees_other_writers_replacements_and_removal() {
    let d = tempfile::tempdir().unwrap();
    let mut a = open(d.path());
    let mut b = open(d.path());
    a.create("items", &item("x", 1, "one")).unwrap();
    let ch = b.sync().unwrap();
    assert_eq!(
        (ch.len(), ch[0].id.as_str(), ch[0].kind),
        (1, "x", ChangeKind::Created)
    );
    // b must not be able to create what a created, even without an explicit sync.
    a.create("items", &item("y", 1, "one")).unwrap();
    assert!(matches!(
        b.create("items", &item("y", 1, "two")),
        Err(Error::AlreadyExists { .. })
    ));
    // Replaced behind our back (git checkout, another machine's compaction).
    let p = d.path().join("items.jsonl");
    fs::write(
        d.path().join("new"),
        format!("{}\n{}\n", item("x", 5, "five"), item("z", 1, "z")),
    )
    .unwrap();
    fs::rename(d.path().join("new"), &p).unwrap();
    let mut ch = b.sync().unwrap();
    ch.sort_by(|p, q| p.id.cmp(&q.id));
    let got: Vec<(&str, ChangeKind)> = ch.iter().map(|c| (c.id.as_str(), c.kind)).collect();
    assert_eq!(
        got,
        [
            ("x", ChangeKind::Updated),
            ("y", ChangeKind::Deleted),
            ("z", ChangeKind::Created)
        ]
    );
    assert_eq!(b.get("items", "x").unwrap().unwrap()["status"], "five");
    fs::remove_file(&p).unwrap();
    assert_eq!(b.sync().unwrap().len(), 2);
    assert_eq!(b.ids("items").unwrap().count(), 0);
    assert_eq!(b.rebuild_indexes("items").unwrap(), 0);
}

#[test]
fn compaction_keeps_latest_versions_and_young_tombstones() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    for i in 0..5 {
        s.create("items", &item(&format!("r{i}"), 10, "v1"))
            .unwrap();
        s.update("items", &item(&format!("r{i}"), 20, "v2"))
            .unwrap();
    }
    s.delete("items", "r1", 30).unwrap(); // old
    s.delete("items", "r2", 1_000).unwrap(); // young
    let before = s.stats()[0].bytes;
    let r = s
        .compact(
            "items",
            &CompactOptions {
                retention_ms: 100,
                now_ms: 1_050,
                drop_corrupt: false,
            },
        )
        .unwrap();
    assert_eq!(
        (r.records, r.tombstones_kept, r.tombstones_dropped),
        (3, 1, 1)
    );
    assert_eq!(r.bytes_before, before);
    let text = fs::read_to_string(d.path().join("items.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(!text.contains("v1"));
    let names: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".index")
        .collect();
    assert_eq!(names.len(), 1, "no temp file left: {names:?}");
    // The index cache beside it holds its ignore file and the index, nothing half written.
    let mut cached: Vec<_> = fs::read_dir(d.path().join(".index"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    cached.sort();
    assert_eq!(cached, [".gitignore", "items.idx"]);
    // The open store follows, and writes continue on the new file.
    assert_eq!(
        s.ids("items").unwrap().collect::<Vec<_>>(),
        ["r0", "r3", "r4"]
    );
    s.create("items", &item("r9", 40, "v1")).unwrap();
    let s2 = open(d.path());
    assert_eq!(s2.ids("items").unwrap().count(), 4);
    assert_eq!(s2.status_of("items", "r2").unwrap(), Some(true));
    assert_eq!(s2.status_of("items", "r1").unwrap(), None);
}

#[test]
fn compaction_refuses_corrupt_lines_unless_told_to_move_them() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    fs::write(
        &p,
        format!("{}\ngarbage\n{}\n", item("a", 1, "x"), item("b", 1, "x")),
    )
    .unwrap();
    let mut s = open(d.path());
    let o = CompactOptions {
        retention_ms: 0,
        now_ms: 0,
        drop_corrupt: false,
    };
    let e = s.compact("items", &o).unwrap_err();
    assert!(
        e.to_string().contains("1 corrupt or conflicted line"),
        "{e}"
    );
    let r = s
        .compact(
            "items",
            &CompactOptions {
                drop_corrupt: true,
                ..o
            },
        )
        .unwrap();
    assert_eq!(r.rejected_lines, 1);
    assert_eq!(
        fs::read_to_string(p.with_extension("jsonl.rejected")).unwrap(),
        "garbage\n"
    );
    assert!(s.issues().is_empty());
    assert_eq!(s.ids("items").unwrap().count(), 2);
}

#[test]
fn size_guard_warns_then_refuses_before_loading() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    for i in 0..20 {
        s.create("items", &item(&format!("r{i}"), 1, "x")).unwrap();
    }
    let len = s.stats()[0].bytes;
    let opts = |warn, max| StoreOptions {
        warn_bytes: warn,
        max_bytes: Some(max),
        fsync: true,
        index: true,
    };
    let s = Store::open(d.path(), defs(), opts(len - 1, len)).unwrap();
    assert_eq!(s.warnings().len(), 1);
    assert!(s.warnings()[0].contains("store compact"));
    let e = Store::open(d.path(), defs(), opts(1, len - 1)).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }));
    assert!(e.to_string().contains("run compaction"), "{e}");
    // Compaction itself is allowed to load it.
    let mut s = Store::open(
        d.path(),
        defs(),
        StoreOptions {
            max_bytes: None,
            ..Default::default()
        },
    )
    .unwrap();
    s.compact(
        "items",
        &CompactOptions {
            retention_ms: 0,
            now_ms: 0,
            drop_corrupt: false,
        },
    )
    .unwrap();
}

#[test]
fn durability_policy_one_fsync_per_call_and_per_batch() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    s.create("items", &item("a", 1, "x")).unwrap();
    assert_eq!(s.fsyncs(), 2, "file + directory for a new file");
    s.update("items", &item("a", 2, "y")).unwrap();
    s.delete("items", "a", 3).unwrap();
    assert_eq!(s.fsyncs(), 4);
    s.apply(
        "items",
        (0..100)
            .map(|i| Op::create(&item(&format!("b{i}"), 1, "x")).unwrap())
            .collect(),
    )
    .unwrap();
    assert_eq!(s.fsyncs(), 5);
    // A batch with one bad op writes nothing.
    let e = s.apply(
        "items",
        vec![
            Op::create(&item("c", 1, "x")).unwrap(),
            Op::create(&item("b1", 1, "x")).unwrap(),
        ],
    );
    assert!(e.is_err());
    assert_eq!(s.fsyncs(), 5);
    assert!(s.get("items", "c").unwrap().is_none());
    let mut quiet = Store::open(
        d.path(),
        defs(),
        StoreOptions {
            fsync: false,
            ..Default::default()
        },
    )
    .unwrap();
    quiet.create("items", &item("q", 1, "x")).unwrap();
    assert_eq!(quiet.fsyncs(), 0);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Note {
    id: String,
    updated_at: i64,
    status: String,
    body: String,
}

impl Record for Note {
    const COLLECTION: &'static str = "notes";
    const INDEXED: &'static [&'static str] = &["status"];
    fn id(&self) -> &str {
        &self.id
    }
    fn updated_at(&self) -> i64 {
        self.updated_at
    }
}

#[test]
fn typed_records() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(
        d.path(),
        vec![Note::collection_def()],
        StoreOptions::default(),
    )
    .unwrap();
    let mut n = Note {
        id: "n1".into(),
        updated_at: 1,
        status: "open".into(),
        body: "hello\nworld".into(),
    };
    s.create_record(&n).unwrap();
    n.status = "closed".into();
    n.updated_at = 2;
    s.update_record(&n).unwrap();
    assert_eq!(s.get_as::<Note>("n1").unwrap(), Some(n.clone()));
    assert_eq!(
        s.list_as::<Note>(&[Filter::eq("status", "closed")])
            .unwrap(),
        [n]
    );
    // A stored line of the wrong shape: the error names file and line.
    let p = d.path().join("notes.jsonl");
    let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
    writeln!(f, r#"{{"id":"n2","updated-at":1,"status":5}}"#).unwrap();
    let s = Store::open(
        d.path(),
        vec![Note::collection_def()],
        StoreOptions::default(),
    )
    .unwrap();
    let e = s.get_as::<Note>("n2").unwrap_err();
    assert!(
        e.to_string().starts_with(&format!("{}:3:", p.display())),
        "{e}"
    );
}

#[test]
fn search_ids_finds_every_occurrence_in_live_ids() {
    let d = tempfile::tempdir().unwrap();
    let mut s = open(d.path());
    for id in ["aa-x-aa", "bb-aab", "cc-zz", "dd-aa"] {
        s.create("items", &item(id, 1, "x")).unwrap();
    }
    s.delete("items", "dd-aa", 2).unwrap();
    let hits = s.search_ids("items", "aa").unwrap();
    assert_eq!(hits, [("aa-x-aa", vec![0, 5]), ("bb-aab", vec![3])]);
    // A match never spans two ids.
    assert!(s.search_ids("items", "aa\nbb").unwrap().is_empty());
    assert!(s.search_ids("items", "").unwrap().is_empty());
}

#[test]
fn a_big_file_is_parsed_in_parallel_with_the_same_result() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("items.jsonl");
    let pad = "p".repeat(900);
    let mut text = String::new();
    let mut bad = Vec::new();
    for i in 0..12_000 {
        if i % 1000 == 7 {
            text.push_str("not a record\n");
            bad.push(i + 1);
            continue;
        }
        // Every id twice: the second version (a later line) wins.
        let id = format!("r{:05}", i % 6000);
        let v = if i < 6000 { "first" } else { "second" };
        text.push_str(&format!(
            "{{\"id\":\"{id}\",\"updated-at\":1,\"status\":\"{v}\",\"pad\":\"{pad}\"}}\n"
        ));
    }
    assert!(text.len() > 9 << 20);
    fs::write(&p, &text).unwrap();
    let s = open(d.path());
    let lines: Vec<u64> = s.issues().iter().map(|i| i.line).collect();
    assert_eq!(lines, bad);
    let second = s
        .list("items", &[Filter::eq("status", "second")])
        .unwrap()
        .len();
    let first = s
        .list("items", &[Filter::eq("status", "first")])
        .unwrap()
        .len();
    assert_eq!(
        (first, second, s.ids("items").unwrap().count()),
        (0, 5994, 5994)
    );
    assert_eq!(s.stats()[0].lines, 12_000);
}
