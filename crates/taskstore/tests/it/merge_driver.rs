//! The `taskstore-merge` binary as git calls it: `%O %A %B %P`, result in %A, exit status.

use std::process::Command;

fn line(id: &str, t: i64, v: &str) -> String {
    format!("{{\"id\":\"{id}\",\"updated-at\":{t},\"v\":\"{v}\"}}\n")
}

fn run(dir: &std::path::Path, o: &str, a: &str, b: &str) -> (i32, String, String) {
    for (name, text) in [("o", o), ("a", a), ("b", b)] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_taskstore-merge"))
        .current_dir(dir)
        .args(["o", "a", "b", "store/items.jsonl"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        std::fs::read_to_string(dir.join("a")).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn merges_into_ours_and_exits_1_on_conflict() {
    let d = tempfile::tempdir().unwrap();
    let base = line("x", 1, "0");
    let (code, merged, _) = run(
        d.path(),
        &base,
        &line("x", 2, "ours"),
        &(base.clone() + &line("y", 1, "new")),
    );
    assert_eq!(code, 0);
    assert_eq!(merged, line("x", 2, "ours") + &line("y", 1, "new"));
    let (code, merged, err) = run(
        d.path(),
        &base,
        &line("x", 2, "ours"),
        &line("x", 2, "theirs"),
    );
    assert_eq!(code, 1);
    assert!(
        merged.contains("<<<<<<< ours\n") && merged.contains("\n=======\n"),
        "{merged}"
    );
    assert!(
        err.contains("store/items.jsonl: 1 record(s) changed on both sides at the same time"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_taskstore-merge"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("usage: taskstore-merge"));
}
