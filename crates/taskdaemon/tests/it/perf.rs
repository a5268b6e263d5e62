//! The fast paths of snapshots (issue 16), end to end: a repeated save adds only what
//! `git status` names, yet records exactly what `git add -A` would; a rollback's two-way
//! checkout leaves the user an ordinary, checksummed index.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::harness::{Env, git};
use serde_json::Value;

fn json(env: &Env, args: &[&str]) -> Value {
    let r = env.run(args);
    assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn write(repo: &Path, rel: &str, text: &str) {
    let p = repo.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The tree `git add -A` makes of the work tree, through a copy of the user's index (the
/// user's own is not touched).
fn naive_tree(env: &Env) -> String {
    let repo = env.repo();
    let copy = env.root().join("naive.index");
    std::fs::copy(repo.join(".git/index"), &copy).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .env("HOME", env.home())
            .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_INDEX_FILE", &copy)
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    run(&["add", "-A"]);
    run(&["write-tree"])
}

fn tree_of(env: &Env, rev: &str) -> String {
    git(&env.repo(), &["rev-parse", &format!("{rev}^{{tree}}")])
        .trim()
        .to_string()
}

#[test]
fn repeated_saves_record_exactly_what_add_all_would() {
    let env = Env::new();
    let repo = env.repo();
    write(&repo, ".gitignore", "build/\n*.log\n");
    write(&repo, "src/a.rs", "a\n");
    write(&repo, "src/b.rs", "b\n");
    write(&repo, "dir/x", "x\n");
    write(&repo, "file", "f\n");
    write(&repo, "kept.log", "tracked although ignored\n");
    git(&repo, &["add", "-A"]);
    git(&repo, &["add", "-f", "kept.log"]);
    git(&repo, &["commit", "-qm", "base"]);
    json(&env, &["snapshot", "save", "first", "--json"]);

    // Every kind of change a save must notice.
    write(&repo, "src/a.rs", "a, changed\n");
    std::fs::remove_file(repo.join("src/b.rs")).unwrap();
    std::fs::set_permissions(repo.join("file"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(repo.join("dir")).unwrap();
    write(&repo, "dir", "now a file\n");
    write(&repo, "new/deep/er/n.txt", "new\n");
    write(&repo, "build/out.o", "ignored\n");
    write(&repo, "new/skip.log", "ignored\n");
    write(&repo, "kept.log", "tracked and ignored, changed\n");
    std::os::unix::fs::symlink("src/a.rs", repo.join("link")).unwrap();
    let user_index = std::fs::read(repo.join(".git/index")).unwrap();

    let s = json(&env, &["snapshot", "save", "second", "--json"]);
    let tag = s["tag"].as_str().unwrap();
    assert_eq!(tree_of(&env, tag), naive_tree(&env), "work tree of {tag}");
    let files = git(&repo, &["ls-tree", "-r", "--name-only", tag]);
    assert!(files.contains("new/deep/er/n.txt") && files.contains("kept.log"));
    assert!(!files.contains("build/") && !files.contains("skip.log"));
    assert_eq!(
        std::fs::read(repo.join(".git/index")).unwrap(),
        user_index,
        "a save never writes the user's index"
    );

    // Nothing changed: the same tree again.
    let again = json(&env, &["snapshot", "save", "third", "--json"]);
    assert_eq!(
        tree_of(&env, again["tag"].as_str().unwrap()),
        tree_of(&env, tag)
    );
}

#[test]
fn a_rollback_leaves_an_ordinary_index() {
    let env = Env::new();
    let repo = env.repo();
    write(&repo, "a", "1\n");
    git(&repo, &["add", "a"]);
    let s = json(&env, &["snapshot", "save", "staged a", "--json"]);
    let tag = s["tag"].as_str().unwrap().to_string();
    write(&repo, "a", "2\n");
    write(&repo, "b", "new\n");
    git(&repo, &["add", "-A"]);
    json(&env, &["snapshot", "rollback", &tag, "--json"]);

    assert_eq!(std::fs::read_to_string(repo.join("a")).unwrap(), "1\n");
    assert!(!repo.join("b").exists(), "a file created since is removed");
    // The index ends in its checksum (a private index skips it; the user's must not).
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    let trailer = &index[index.len() - 20..];
    assert!(trailer.iter().any(|b| *b != 0), "the index has a checksum");
    git(
        &repo,
        &["-c", "index.skipHash=false", "fsck", "--no-dangling"],
    );
    // The index is the saved one: `a` staged as 1.
    assert_eq!(
        git(&repo, &["diff", "--cached", "--name-only"]).trim(),
        "a",
        "what was staged is staged again"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "A  a");
}
