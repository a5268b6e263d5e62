//! Untracked files that look like secrets (`crate::secrets`) in snapshots: left out of a
//! save, never removed or lost by a rollback.

use super::*;
use crate::git::testrepo::{commit_all, git, init};

fn names(dir: &Path, rev: &str) -> Vec<String> {
    git(dir, &["ls-tree", "-r", "--name-only", rev])
        .lines()
        .map(String::from)
        .collect()
}

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

#[test]
fn an_untracked_secret_is_left_out_of_a_save_and_a_tracked_one_kept() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    init(dir);
    write(dir, "config/server.key", "the user's own, committed\n");
    write(dir, "a.txt", "a\n");
    commit_all(dir, "base");
    write(dir, ".env", "TOKEN=1\n");
    write(dir, "notes.txt", "n\n");
    // A whole untracked directory: `git status` names only the directory.
    write(dir, "deploy/keys/id_ed25519", "KEY\n");
    write(dir, "deploy/keys/id_ed25519.pub", "public\n");
    write(dir, "deploy/run.sh", "echo\n");
    let s = Snapshots::open(dir).unwrap();
    for i in 1..=2 {
        write(dir, "a.txt", &format!("edit {i}\n"));
        let snap = manual_save(&s, 1_000 * i);
        let saved = names(dir, &snap.commit);
        for want in [
            "a.txt",
            "notes.txt",
            "config/server.key",
            "deploy/run.sh",
            "deploy/keys/id_ed25519.pub",
        ] {
            assert!(saved.contains(&want.to_string()), "save {i}: {saved:?}");
        }
        for secret in [".env", "deploy/keys/id_ed25519"] {
            assert!(!saved.contains(&secret.to_string()), "save {i}: {saved:?}");
        }
    }
    // One the user tracks (`git add`) is theirs to save.
    git(dir, &["add", ".env"]);
    let snap = manual_save(&s, 5_000);
    assert!(names(dir, &snap.commit).contains(&".env".to_string()));
}

#[test]
fn a_rollback_leaves_a_secret_the_restored_state_lacks_where_it_is() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    init(dir);
    write(dir, "a.txt", "a\n");
    commit_all(dir, "base");
    write(dir, "a.txt", "the user's edit\n");
    write(dir, ".env", "TOKEN=1\n");
    let s = Snapshots::open(dir).unwrap();
    let before = manual_save(&s, 1_000);
    // An agent's `git add -A`: the key is committed, then changed.
    commit_all(dir, "agent");
    write(dir, ".env", "TOKEN=2\n");
    let rb = s.rollback(&before.tag, 2_000).unwrap();
    assert_eq!(rb.kept, [".env"]);
    assert!(!rb.changed.deleted.contains(&".env".to_string()));
    assert_eq!(fs::read_to_string(dir.join(".env")).unwrap(), "TOKEN=2\n");
    assert_eq!(
        fs::read_to_string(dir.join("a.txt")).unwrap(),
        "the user's edit\n"
    );
    let status = git(dir, &["status", "--porcelain"]);
    assert!(status.contains("?? .env"), "{status}");
    assert!(
        !dir.join(".git/taskdaemon/kept")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some())
    );
}

#[test]
fn a_kept_secret_is_never_put_back_through_a_link_the_restored_state_has() {
    let d = tempfile::tempdir().unwrap();
    let (dir, outside) = (d.path().join("repo"), d.path().join("outside"));
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&outside).unwrap();
    init(&dir);
    std::os::unix::fs::symlink(&outside, dir.join("config")).unwrap();
    commit_all(&dir, "config is a link");
    let s = Snapshots::open(&dir).unwrap();
    let linked = manual_save(&s, 1_000);
    fs::remove_file(dir.join("config")).unwrap();
    write(&dir, "config/.env", "TOKEN=1\n");
    commit_all(&dir, "config is a directory with a key");
    let rb = s.rollback(&linked.tag, 2_000).unwrap();
    assert!(rb.kept.is_empty(), "{:?}", rb.kept);
    assert!(!outside.join(".env").exists());
    // Nothing lost: the safety snapshot has it.
    assert_eq!(
        git(&dir, &["show", &format!("{}:config/.env", rb.saved.commit)]),
        "TOKEN=1"
    );
}
