//! The persistent index is never trusted blindly: a stale, truncated, corrupted or foreign
//! index (another store's, another collection's, one made with other indexed fields) is
//! detected and rebuilt, and answers through the index always equal a full parse of the
//! file (a property test over random appends, updates, deletes, torn and foreign writes).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use taskstore::{CollectionDef, Filter, FilterOp, Store, StoreOptions};

const FIELDS: &[&str] = &["status", "tags", "n"];

fn defs() -> Vec<CollectionDef> {
    vec![CollectionDef::new("items", FIELDS)]
}

fn open_with(dir: &Path, defs: Vec<CollectionDef>, index: bool) -> Store {
    let opts = StoreOptions {
        index,
        fsync: false,
        ..StoreOptions::default()
    };
    Store::open(dir, defs, opts).unwrap()
}

fn open(dir: &Path) -> Store {
    open_with(dir, defs(), true)
}

fn parsed(dir: &Path) -> Store {
    open_with(dir, defs(), false)
}

fn item(id: &str, t: i64, status: &str, n: i64) -> Value {
    json!({"id": id, "updated-at": t, "status": status, "tags": [status, format!("t{}", n % 3)], "n": n, "pad": "p".repeat((n % 50) as usize)})
}

fn file(dir: &Path) -> PathBuf {
    dir.join("items.jsonl")
}

fn idx(dir: &Path) -> PathBuf {
    dir.join(".index/items.idx")
}

const STATUSES: &[&str] = &["new", "done", "held"];

/// Every answer a reader can get from the store, for every kind of query.
fn answers(s: &Store) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |what: &str, v: String| out.push(format!("{what}: {v}"));
    let ids: Vec<String> = s.ids("items").unwrap().map(String::from).collect();
    push("ids", format!("{ids:?}"));
    push("all", format!("{:?}", s.list("items", &[]).unwrap()));
    for st in STATUSES {
        for f in [
            Filter::eq("status", *st),
            Filter::ne("status", *st),
            Filter::contains("tags", *st),
            Filter::gt("status", *st),
        ] {
            push(
                &format!("{f:?}"),
                format!(
                    "{:?}",
                    s.list_ids("items", std::slice::from_ref(&f)).unwrap()
                ),
            );
        }
    }
    for n in [0, 7, 20] {
        for op in [FilterOp::Lt, FilterOp::Ge, FilterOp::Eq] {
            let f = Filter::new("n", op, n);
            push(
                &format!("{f:?}"),
                format!(
                    "{:?}",
                    s.list_raw("items", std::slice::from_ref(&f)).unwrap()
                ),
            );
        }
    }
    for id in ids
        .iter()
        .chain(["r1", "r9", "r10", "zz", "nope"].map(String::from).iter())
    {
        push(
            &format!("get {id}"),
            format!(
                "{:?} {:?}",
                s.get_raw("items", id).unwrap(),
                s.status_of("items", id).unwrap()
            ),
        );
    }
    for p in ["r", "r1", "z", "q"] {
        push(
            &format!("prefix {p}"),
            format!("{:?}", s.ids_with_prefix("items", p).unwrap()),
        );
        push(
            &format!("search {p}"),
            format!("{:?}", s.search_ids("items", p).unwrap()),
        );
    }
    let st = &s.stats()[0];
    push(
        "stats",
        format!(
            "{} {} {} {} {} {}",
            st.bytes, st.lines, st.live, st.tombstones, st.superseded, st.bad_lines
        ),
    );
    let issues: Vec<String> = s.issues().iter().map(|i| i.to_string()).collect();
    push("issues", format!("{issues:?}"));
    out
}

/// Opened through the index (when `indexed`), it answers as a full parse does.
fn check(dir: &Path, indexed: bool) -> Store {
    let s = open(dir);
    assert_eq!(
        s.loaded_from_index("items").unwrap(),
        indexed,
        "whether the index was used"
    );
    assert_eq!(answers(&s), answers(&parsed(dir)));
    s
}

fn fill(dir: &Path, n: i64) {
    let mut s = open(dir);
    for i in 0..n {
        let st = STATUSES[(i % 3) as usize];
        s.create("items", &item(&format!("r{i}"), 1, st, i))
            .unwrap();
    }
    s.delete("items", "r1", 2).unwrap();
    s.rebuild_indexes("items").unwrap();
    check(dir, true);
}

fn append_raw(dir: &Path, text: &str) {
    let mut f = fs::OpenOptions::new().append(true).open(file(dir)).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_file_truncated_below_what_the_index_covers_is_parsed_again() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 40);
    let text = fs::read(file(d.path())).unwrap();
    // Cut at a line boundary in the middle (a restored backup, a `truncate`).
    let cut = text[..text.len() / 2]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(file(d.path()))
        .unwrap();
    f.set_len(cut as u64).unwrap();
    drop(f);
    let s = check(d.path(), false);
    assert!(
        s.get("items", "r39").unwrap().is_none(),
        "no record from the lost half"
    );
    check(d.path(), true);
    // Cut in the middle of a line, then the same length appended back with other bytes:
    // the index's tail check catches it.
    let len = fs::metadata(file(d.path())).unwrap().len();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(file(d.path()))
        .unwrap();
    f.set_len(len - 5).unwrap();
    drop(f);
    append_raw(d.path(), "XXXX\n");
    let s = check(d.path(), false);
    assert_eq!(s.issues().len(), 1, "the damaged line is reported");
}

#[test]
fn a_corrupted_index_with_a_valid_looking_size_is_rebuilt() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 40);
    let whole = fs::read(idx(d.path())).unwrap();
    // Every single-byte flip across the file (sampled) is caught by the checksum or the
    // structure checks; the answers never differ from a parse.
    for at in (0..whole.len()).step_by((whole.len() / 40).max(1)) {
        let mut bad = whole.clone();
        bad[at] ^= 0x01;
        fs::write(idx(d.path()), &bad).unwrap();
        check(d.path(), false);
    }
    // Empty, and grown by trailing garbage.
    fs::write(idx(d.path()), b"").unwrap();
    check(d.path(), false);
    let mut longer = whole.clone();
    longer.extend_from_slice(b"garbage");
    fs::write(idx(d.path()), &longer).unwrap();
    check(d.path(), false);
    check(d.path(), true);
}

#[test]
fn a_stale_index_after_an_append_elsewhere_covers_only_its_prefix() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 30);
    // Updates, a delete and a create by another program, after the index was written.
    append_raw(
        d.path(),
        &format!(
            "{}\n{}\n{}\n",
            item("r3", 9, "done", 3),
            json!({"id": "r4", "updated-at": 9, "_deleted": true}),
            item("zz", 9, "new", 99)
        ),
    );
    check(d.path(), true);
    // An index older still (from before those records and more writes).
    let old = fs::read(idx(d.path())).unwrap();
    let mut s = open(d.path());
    s.update("items", &item("r5", 20, "held", 5)).unwrap();
    s.rebuild_indexes("items").unwrap();
    fs::write(idx(d.path()), &old).unwrap();
    let s = check(d.path(), true);
    assert_eq!(s.get("items", "r5").unwrap().unwrap()["status"], "held");
}

#[test]
fn a_foreign_index_is_not_used() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    fill(&a, 30);
    // Another store with the same bytes (a clone): its index names another inode.
    fs::copy(file(&a), file(&b)).unwrap();
    fs::create_dir_all(b.join(".index")).unwrap();
    fs::copy(idx(&a), idx(&b)).unwrap();
    check(&b, false);
    check(&b, true);
    // Another collection's index under this name.
    let other = vec![CollectionDef::new("other", FIELDS)];
    let mut o = open_with(&a, other.clone(), true);
    o.create("other", &item("o1", 1, "new", 1)).unwrap();
    o.rebuild_indexes("other").unwrap();
    fs::copy(a.join(".index/other.idx"), idx(&a)).unwrap();
    check(&a, false);
    // This collection's index made with other indexed fields.
    let narrow = vec![CollectionDef::new("items", &["status"])];
    open_with(&a, narrow.clone(), true)
        .rebuild_indexes("items")
        .unwrap();
    check(&a, false);
    let n = open_with(&a, narrow, true);
    assert!(!n.loaded_from_index("items").unwrap());
    // The file replaced by another with the same length (a new inode, as git writes).
    let text = fs::read_to_string(file(&a)).unwrap();
    let same_len = text.replacen("\"new\"", "\"old\"", 1);
    assert_eq!(same_len.len(), text.len());
    let tmp = a.join("items.jsonl.tmp");
    fs::write(&tmp, same_len).unwrap();
    fs::rename(&tmp, file(&a)).unwrap();
    let s = check(&a, false);
    assert_eq!(
        s.list_ids("items", &[Filter::eq("status", "old")])
            .unwrap()
            .len(),
        1
    );
}

/// One random change: through a store (validated), or raw bytes another program wrote.
fn random_step(rng: &mut fastrand::Rng, dir: &Path, s: &mut Store, t: &mut i64) {
    *t += 1;
    let id = format!("r{}", rng.usize(..25));
    let st = STATUSES[rng.usize(..STATUSES.len())];
    let n = rng.i64(0..30);
    match rng.u8(..10) {
        0..=2 => {
            let _ = s.create("items", &item(&id, *t, st, n));
        }
        3..=4 => {
            let _ = s.update("items", &item(&id, *t, st, n));
        }
        5 => {
            let _ = s.delete("items", &id, *t);
        }
        // Another program: an update that may be older than what is stored.
        6 => append_raw(dir, &format!("{}\n", item(&id, *t - rng.i64(0..3), st, n))),
        7 => append_raw(
            dir,
            &format!(
                "{}\n",
                json!({"id": id, "updated-at": *t, "_deleted": true})
            ),
        ),
        // A bad line, or a torn tail (the next store write terminates it).
        8 => append_raw(
            dir,
            if rng.bool() {
                "{not json\n"
            } else {
                "{\"id\":\"torn"
            },
        ),
        _ => {
            let _ = s.rebuild_indexes("items");
        }
    }
}

#[test]
fn answers_through_the_index_equal_a_full_parse_for_random_histories() {
    for seed in 0..12u64 {
        let d = tempfile::tempdir().unwrap();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut s = open(d.path());
        s.create("items", &item("r0", 1, "new", 0)).unwrap();
        let mut t = 10;
        let mut through_index = 0;
        for step in 0..60 {
            random_step(&mut rng, d.path(), &mut s, &mut t);
            if step % 6 == 5 {
                let fresh = open(d.path());
                through_index += usize::from(fresh.loaded_from_index("items").unwrap());
                assert_eq!(
                    answers(&fresh),
                    answers(&parsed(d.path())),
                    "seed {seed}, step {step}"
                );
                // The long-lived store catches up and agrees too.
                s.sync().unwrap();
                assert_eq!(answers(&s), answers(&fresh), "seed {seed}, step {step}");
            }
        }
        assert!(through_index > 0, "seed {seed}: the index was never used");
    }
}
