//! The persistent index (`<store>/.index/NAME.idx`): used when valid, rebuilt (never an
//! error) when git rewrote the file, after compaction, after a torn write, after another
//! process appended, and when the index itself is torn or corrupt. Every check compares
//! the store opened through the index with one that parses the file.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use taskstore::{CollectionDef, CompactOptions, Filter, Store, StoreOptions};

fn defs() -> Vec<CollectionDef> {
    vec![CollectionDef::new("items", &["status", "tags"])]
}

fn open(dir: &Path) -> Store {
    Store::open(dir, defs(), StoreOptions::default()).unwrap()
}

fn parsed(dir: &Path) -> Store {
    let opts = StoreOptions {
        index: false,
        ..StoreOptions::default()
    };
    Store::open(dir, defs(), opts).unwrap()
}

fn item(id: &str, t: i64, status: &str) -> Value {
    json!({"id": id, "updated-at": t, "status": status, "tags": [status, "x"], "pad": "y".repeat(40)})
}

/// Everything a reader can see of the store.
fn view(s: &Store) -> (Vec<Value>, Vec<Value>, Vec<String>, u64, usize) {
    let all = s.list("items", &[]).unwrap();
    let done = s.list("items", &[Filter::eq("status", "done")]).unwrap();
    let issues = s.issues().iter().map(|i| i.to_string()).collect();
    let st = &s.stats()[0];
    (all, done, issues, st.lines, st.tombstones)
}

/// Opened through the index (when `indexed`), it sees what parsing the file sees.
fn check(dir: &Path, indexed: bool) -> Store {
    let s = open(dir);
    assert_eq!(s.loaded_from_index("items").unwrap(), indexed);
    assert_eq!(view(&s), view(&parsed(dir)));
    s
}

fn fill(dir: &Path, n: usize) {
    let mut s = open(dir);
    for i in 0..n {
        let status = if i % 3 == 0 { "done" } else { "new" };
        s.create("items", &item(&format!("r{i:04}"), 1, status))
            .unwrap();
    }
    s.delete("items", "r0001", 2).unwrap();
    // The index was saved at the first write (the file was new); it covers the whole file
    // again after a rebuild.
    check(dir, true);
    open(dir).rebuild_indexes("items").unwrap();
    check(dir, true);
}

fn file(dir: &Path) -> std::path::PathBuf {
    dir.join("items.jsonl")
}

#[test]
fn a_valid_index_is_used_and_ignored_by_git() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    let s = check(d.path(), true);
    assert_eq!(s.get("items", "r0003").unwrap().unwrap()["status"], "done");
    assert!(s.get("items", "r0001").unwrap().is_none());
    assert_eq!(
        fs::read_to_string(d.path().join(".index/.gitignore"))
            .unwrap()
            .lines()
            .last(),
        Some("*")
    );
}

#[test]
fn an_append_by_another_process_is_read_on_top_of_the_index() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    // Another program appends, bypassing this store entirely.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(file(d.path()))
        .unwrap();
    writeln!(f, "{}", item("r0002", 5, "done")).unwrap();
    writeln!(f, "{}", item("zz", 5, "done")).unwrap();
    drop(f);
    let s = check(d.path(), true);
    assert_eq!(s.get("items", "r0002").unwrap().unwrap()["updated-at"], 5);
    assert!(s.get("items", "zz").unwrap().is_some());
}

#[test]
fn a_torn_write_and_its_completion_are_seen_through_the_index() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(file(d.path()))
        .unwrap();
    f.write_all(br#"{"id":"torn","updated-at":3,"sta"#).unwrap();
    let s = check(d.path(), true);
    assert_eq!(s.issues().len(), 1, "the torn tail is reported");
    // A store writing now terminates the fragment first; its record lands whole.
    let mut w = open(d.path());
    w.create("items", &item("after", 4, "new")).unwrap();
    let s = check(d.path(), true);
    assert!(s.get("items", "after").unwrap().is_some());
    assert!(s.get("items", "torn").unwrap().is_none());
}

#[test]
fn compaction_by_another_store_makes_the_index_rebuild() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    let mut other = open(d.path());
    for i in 0..10 {
        other
            .update("items", &item("r0004", 10 + i, "done"))
            .unwrap();
    }
    let o = CompactOptions {
        retention_ms: 0,
        now_ms: 1_000,
        drop_corrupt: false,
    };
    other.compact("items", &o).unwrap();
    // Compaction saved the index of the new file: the next open uses it, rightly.
    let s = check(d.path(), true);
    assert_eq!(s.stats()[0].lines, 49);
    assert_eq!(s.get("items", "r0004").unwrap().unwrap()["updated-at"], 19);
    // The same compaction with an index left from before (as another clone would have).
    let saved = fs::read(d.path().join(".index/items.idx")).unwrap();
    other.create("items", &item("late", 20, "done")).unwrap();
    other.compact("items", &o).unwrap();
    fs::write(d.path().join(".index/items.idx"), saved).unwrap();
    let s = check(d.path(), false);
    assert!(s.get("items", "late").unwrap().is_some());
}

#[test]
fn a_file_rewritten_in_place_at_the_same_size_is_parsed_again() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    let text = fs::read_to_string(file(d.path())).unwrap();
    // A change far from the end (outside the hashed tail), same length, same inode: the
    // first two "new" records (r0001, deleted later, and r0002) become "old".
    let changed = text.replacen("\"status\":\"new\"", "\"status\":\"old\"", 2);
    assert_eq!(changed.len(), text.len());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(file(d.path()))
        .unwrap();
    f.write_all(changed.as_bytes()).unwrap();
    drop(f);
    let s = check(d.path(), false);
    assert_eq!(
        s.list("items", &[Filter::eq("status", "old")])
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_torn_or_corrupt_index_is_rebuilt_not_an_error() {
    let d = tempfile::tempdir().unwrap();
    fill(d.path(), 50);
    let idx = d.path().join(".index/items.idx");
    let whole = fs::read(&idx).unwrap();
    fs::write(&idx, &whole[..whole.len() / 2]).unwrap();
    check(d.path(), false);
    let mut bad = fs::read(&idx).unwrap();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    fs::write(&idx, &bad).unwrap();
    check(d.path(), false);
    fs::write(&idx, b"not an index").unwrap();
    check(d.path(), false);
    check(d.path(), true);
}

fn git(dir: &Path, home: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("HOME", home)
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn git_checkout_and_merge_rewriting_the_file_make_the_index_rebuild() {
    let d = tempfile::tempdir().unwrap();
    let home = d.path().join("home");
    let repo = d.path().join("repo");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&repo).unwrap();
    git(&repo, &home, &["init", "-q", "-b", "main"]);
    fill(&repo, 50);
    git(&repo, &home, &["add", "items.jsonl"]);
    git(&repo, &home, &["commit", "-qm", "fifty"]);
    // The index directory ignores itself: git sees only the collection file.
    let st = Command::new("git")
        .args([
            "-C",
            repo.to_str().unwrap(),
            "status",
            "--porcelain",
            "--untracked-files=all",
        ])
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&st.stdout), "");
    git(&repo, &home, &["checkout", "-qb", "side"]);
    let mut s = open(&repo);
    s.update("items", &item("r0003", 7, "new")).unwrap();
    git(&repo, &home, &["commit", "-qam", "side"]);
    check(&repo, true);
    // Back to main: git writes the older file; the index of the newer one is not used.
    git(&repo, &home, &["checkout", "-q", "main"]);
    let s = check(&repo, false);
    assert_eq!(s.get("items", "r0003").unwrap().unwrap()["status"], "done");
    // A merge (fast-forward) writes the file again.
    git(&repo, &home, &["merge", "-q", "side"]);
    let s = check(&repo, false);
    assert_eq!(s.get("items", "r0003").unwrap().unwrap()["status"], "new");
    // A live store follows the rewrite through sync.
    let mut live = open(&repo);
    git(&repo, &home, &["checkout", "-q", "main~0"]);
    git(&repo, &home, &["checkout", "-q", "HEAD~1"]);
    live.sync().unwrap();
    assert_eq!(view(&live), view(&parsed(&repo)));
}

#[test]
fn an_index_directory_that_is_a_symlink_is_not_written_through() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir_all(&store).unwrap();
    fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, store.join(".index")).unwrap();
    let mut w = open(&store);
    for i in 0..4 {
        w.create("items", &item(&format!("r{i}"), 1, "new"))
            .unwrap();
    }
    w.rebuild_indexes("items").unwrap();
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    // Without its index the store still works: the file is parsed.
    let s = check(&store, false);
    assert_eq!(s.list("items", &[]).unwrap().len(), 4);
}
