//! Snapshots and task boundaries, end to end: the real binary on real repositories.
//! The property test drives random edits, stagings, commits, branch moves, saves and
//! rollbacks, and checks after every rollback that the work tree, index, HEAD and branch
//! are byte for byte what was saved.

use crate::harness;
use crate::snapshot_state;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Env, git};
use proptest::prelude::*;
use serde_json::Value;
use snapshot_state::{State, git_ok, state};

/// `f` while a loop (an agent sleeping in its first iteration) runs in `dir`; the loop is
/// interrupted afterwards.
fn while_a_loop_runs<T>(env: &Env, dir: &Path, f: impl FnOnce() -> T) -> T {
    let mut child = env
        .cmd()
        .current_dir(dir)
        .args([
            "run",
            "wait",
            "--agent",
            "cmd:sleep 30",
            "--max-iterations",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    harness::wait_for(
        &dir.join(".ralph/logs/iteration-001.prompt.md"),
        std::time::Duration::from_secs(20),
    );
    let out = f();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = child.wait();
    out
}

/// A repository `lib` with one commit (FILE = CONTENT), added to the test repository as the
/// submodule `lib` and committed.
fn add_submodule(env: &Env, file: &str, content: &str) {
    let sub = env.root().join("lib");
    std::fs::create_dir_all(&sub).unwrap();
    git_ok(&sub, &["init", "-q", "-b", "main"]).unwrap();
    std::fs::write(sub.join(file), content).unwrap();
    git_ok(&sub, &["add", "-A"]).unwrap();
    git_ok(&sub, &["commit", "-qm", "first"]).unwrap();
    let repo = env.repo();
    let url = sub.to_str().unwrap();
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            url,
            "lib",
        ],
    );
    git(&repo, &["commit", "-qm", "add lib"]);
}

fn json(env: &Env, args: &[&str]) -> Value {
    let r = env.run(args);
    assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

const NAMES: &[&str] = &[
    "a.txt",
    "dir/b c.txt",
    "é.txt",
    "nl\nname",
    "sub/deep/x.rs",
    "tab\tq\"uote",
    "dir/run.sh",
    ".ralph/task-counter.txt",
];
const CONTENTS: &[&[u8]] = &[b"one\n", b"two\n", b"", b"\x00\x01binary\xff", b"x\r\ny\n"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, usize),
    Delete(usize),
    Rename(usize, usize),
    Chmod(usize),
    Symlink(usize, usize),
    Stage(usize),
    StageAll,
    Commit,
    Switch(usize),
    Detach,
    WriteIgnored(usize),
    Save,
    Rollback(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = NAMES.len();
    prop_oneof![
        6 => (0..n, 0..CONTENTS.len()).prop_map(|(a, b)| Op::Write(a, b)),
        2 => (0..n).prop_map(Op::Delete),
        2 => (0..n, 0..n).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (0..n).prop_map(Op::Chmod),
        1 => (0..n, 0..n).prop_map(|(a, b)| Op::Symlink(a, b)),
        2 => (0..n).prop_map(Op::Stage),
        1 => Just(Op::StageAll),
        2 => Just(Op::Commit),
        1 => (0..3usize).prop_map(Op::Switch),
        1 => Just(Op::Detach),
        1 => (0..CONTENTS.len()).prop_map(Op::WriteIgnored),
        3 => Just(Op::Save),
        3 => (0..8usize).prop_map(Op::Rollback),
    ]
}

fn remove_any(p: &Path) {
    if let Ok(m) = std::fs::symlink_metadata(p) {
        if m.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Make room for a file at `p`: a file in place of a parent directory goes away.
fn prepare(repo: &Path, rel: &str) -> PathBuf {
    let p = repo.join(rel);
    let mut parent = p.parent().map(Path::to_path_buf);
    let mut chain = Vec::new();
    while let Some(d) = parent {
        if d == repo {
            break;
        }
        chain.push(d.clone());
        parent = d.parent().map(Path::to_path_buf);
    }
    for d in chain.iter().rev() {
        if std::fs::symlink_metadata(d).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(d).unwrap();
        }
    }
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(&p).unwrap();
    }
    p
}

fn apply(env: &Env, op: &Op, saved: &mut Vec<(String, State)>) {
    let repo = env.repo();
    match op {
        Op::Write(f, c) => {
            let p = prepare(&repo, NAMES[*f]);
            remove_any(&p);
            std::fs::write(&p, CONTENTS[*c]).unwrap();
        }
        Op::Delete(f) => remove_any(&repo.join(NAMES[*f])),
        Op::Rename(a, b) => {
            let from = repo.join(NAMES[*a]);
            if a != b && std::fs::symlink_metadata(&from).is_ok_and(|m| !m.is_dir()) {
                let to = prepare(&repo, NAMES[*b]);
                if std::fs::symlink_metadata(&from).is_ok() {
                    std::fs::rename(&from, &to).unwrap();
                }
            }
        }
        Op::Chmod(f) => {
            let p = repo.join(NAMES[*f]);
            if let Ok(m) = std::fs::symlink_metadata(&p)
                && m.is_file()
            {
                let mode = m.permissions().mode() ^ 0o111;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        Op::Symlink(f, t) => {
            let p = prepare(&repo, NAMES[*f]);
            remove_any(&p);
            std::os::unix::fs::symlink(NAMES[*t], &p).unwrap();
        }
        Op::Stage(f) => {
            let _ = git_ok(
                &repo,
                &["add", "-A", "--", &format!(":(literal){}", NAMES[*f])],
            );
        }
        Op::StageAll => {
            git(&repo, &["add", "-A"]);
        }
        Op::Commit => {
            let _ = git_ok(&repo, &["commit", "-q", "--allow-empty", "-m", "c"]);
        }
        Op::Switch(b) => {
            let name = format!("b{b}");
            if git_ok(&repo, &["switch", "-q", &name]).is_none() {
                let _ = git_ok(&repo, &["switch", "-q", "-c", &name]);
            }
        }
        Op::Detach => {
            let _ = git_ok(&repo, &["switch", "-q", "--detach"]);
        }
        Op::WriteIgnored(c) => {
            std::fs::write(repo.join("build.log"), CONTENTS[*c]).unwrap();
        }
        Op::Save => {
            let before = state(&repo);
            let s = json(env, &["snapshot", "save", "prop", "--json"]);
            assert_eq!(state(&repo), before, "save changed the repository");
            saved.push((s["tag"].as_str().unwrap().to_string(), before));
        }
        Op::Rollback(k) => {
            if saved.is_empty() {
                return;
            }
            let (tag, want) = saved[k % saved.len()].clone();
            rollback_and_check(env, &tag, &want, saved);
        }
    }
}

fn rollback_and_check(env: &Env, tag: &str, want: &State, saved: &mut Vec<(String, State)>) {
    let repo = env.repo();
    let before = state(&repo);
    let r = json(env, &["snapshot", "rollback", tag, "--json"]);
    let after = state(&repo);
    assert_eq!(after.files, want.files, "work tree after rollback to {tag}");
    assert_eq!(after.index, want.index, "index after rollback to {tag}");
    assert_eq!(after.head, want.head, "HEAD after rollback to {tag}");
    assert_eq!(after.branch, want.branch, "branch after rollback to {tag}");
    assert_eq!(after.ignored, before.ignored, "ignored files were touched");
    let mut was = before;
    was.ignored.clear();
    saved.push((r["saved"]["tag"].as_str().unwrap().to_string(), was));
}

fn check_all_reachable(env: &Env, saved: &mut Vec<(String, State)>) {
    // Every state ever saved is still there: roll back to each (newest first) and compare.
    let all = saved.clone();
    for (tag, want) in all.iter().rev() {
        let mut want = want.clone();
        let repo = env.repo();
        want.ignored = state(&repo).ignored;
        rollback_and_check(env, tag, &want, saved);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("SNAPSHOT_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn rollback_restores_every_saved_state_exactly(ops in proptest::collection::vec(op(), 1..28)) {
        let env = Env::new();
        std::fs::write(env.repo().join(".gitignore"), "*.log\n").unwrap();
        let mut saved = Vec::new();
        for op in &ops {
            apply(&env, op, &mut saved);
        }
        check_all_reachable(&env, &mut saved);
    }
}

#[test]
fn save_leaves_a_partly_staged_index_byte_for_byte() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("README.md"), "staged\n").unwrap();
    git(&repo, &["add", "README.md"]);
    std::fs::write(repo.join("README.md"), "staged\nthen more\n").unwrap();
    std::fs::write(repo.join("new.txt"), "new\n").unwrap();
    git(&repo, &["add", "-N", "new.txt"]);
    let ls = git(&repo, &["ls-files", "-s"]);
    let cached = git(&repo, &["diff", "--cached"]);
    let raw = std::fs::read(repo.join(".git/index")).unwrap();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let s = json(&env, &["snapshot", "save", "x", "--json"]);
    assert_eq!(git(&repo, &["ls-files", "-s"]), ls);
    assert_eq!(git(&repo, &["diff", "--cached"]), cached);
    assert_eq!(std::fs::read(repo.join(".git/index")).unwrap(), raw);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    // The snapshot commit is only reachable from its tag.
    let tag = s["tag"].as_str().unwrap();
    assert!(
        git(
            &repo,
            &["branch", "--contains", &format!("{tag}^{{commit}}")]
        )
        .is_empty()
    );
    assert_eq!(
        git(&repo, &["rev-parse", &format!("{tag}^{{commit}}^1")]),
        head
    );
}

#[test]
fn rollback_of_a_dirty_tree_can_be_undone_exactly() {
    let env = Env::new();
    let repo = env.repo();
    let s = json(&env, &["snapshot", "save", "clean", "--json"]);
    std::fs::write(repo.join("README.md"), "edited, not staged\n").unwrap();
    std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
    git(&repo, &["add", "staged.txt"]);
    std::fs::write(repo.join("untracked.txt"), "untracked\n").unwrap();
    git(&repo, &["switch", "-q", "-c", "feature"]);
    let dirty = state(&repo);
    let r = json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert!(!repo.join("untracked.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        git(&repo, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );
    let pre = r["saved"]["tag"].as_str().unwrap();
    assert!(pre.starts_with("pre-rollback-"), "{pre}");
    json(&env, &["snapshot", "rollback", pre, "--json"]);
    assert_eq!(state(&repo), dirty);
}

#[test]
fn rollback_works_on_unborn_and_detached_heads() {
    let env = Env::new();
    let repo = env.root().join("empty");
    std::fs::create_dir_all(&repo).unwrap();
    git_ok(&repo, &["init", "-q", "-b", "main"]).unwrap();
    let td = |args: &[&str]| {
        let out = env.cmd().current_dir(&repo).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    std::fs::write(repo.join("draft.txt"), "draft\n").unwrap();
    let s = td(&["snapshot", "save", "--json"]);
    assert_eq!(s["head"], Value::Null);
    git_ok(&repo, &["add", "-A"]).unwrap();
    git_ok(&repo, &["commit", "-qm", "first"]).unwrap();
    std::fs::write(repo.join("later.txt"), "later\n").unwrap();
    td(&["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"]);
    assert!(git_ok(&repo, &["rev-parse", "-q", "--verify", "HEAD"]).is_none());
    assert_eq!(
        git_ok(&repo, &["symbolic-ref", "HEAD"]).unwrap().trim(),
        "refs/heads/main"
    );
    assert!(!repo.join("later.txt").exists());
    assert_eq!(
        git_ok(&repo, &["status", "--porcelain"]).unwrap(),
        "?? draft.txt\n"
    );

    // Detached: saved detached, comes back detached at the same commit.
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["switch", "-q", "--detach"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let s = json(&env, &["snapshot", "save", "--json"]);
    git(&repo, &["switch", "-q", "main"]);
    std::fs::write(repo.join("x"), "x").unwrap();
    git(&repo, &["add", "x"]);
    git(&repo, &["commit", "-qm", "x"]);
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert!(git_ok(&repo, &["symbolic-ref", "-q", "HEAD"]).is_none());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    // main kept its commit.
    assert_ne!(git(&repo, &["rev-parse", "main"]), head);
}

#[test]
fn submodules_are_recorded_as_their_commit() {
    let env = Env::new();
    add_submodule(&env, "l.txt", "1");
    let repo = env.repo();
    let s = json(&env, &["snapshot", "save", "with sub", "--json"]);
    let tree = git(
        &repo,
        &[
            "ls-tree",
            &format!("{}^{{commit}}", s["tag"].as_str().unwrap()),
            "lib",
        ],
    );
    assert!(tree.starts_with("160000 commit "), "{tree}");
    std::fs::write(repo.join("README.md"), "changed\n").unwrap();
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(
        repo.join("lib/l.txt").exists(),
        "the submodule's files are not touched"
    );

    // An embedded repository without a commit cannot be recorded: saved without it, said so,
    // and a rollback leaves it alone.
    std::fs::create_dir_all(repo.join("scratch")).unwrap();
    git_ok(&repo.join("scratch"), &["init", "-q"]).unwrap();
    std::fs::write(repo.join("scratch/notes"), "keep").unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    assert_eq!(s["skipped"], serde_json::json!(["scratch/"]));
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("scratch/notes")).unwrap(),
        "keep"
    );
}

#[test]
fn diff_list_and_status_report_file_level_changes() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("old.txt"), "old\n").unwrap();
    std::fs::write(repo.join("mode.sh"), "#!/bin/sh\n").unwrap();
    let s = json(&env, &["snapshot", "save", "base", "--json"]);
    let tag = s["tag"].as_str().unwrap().to_string();
    assert_eq!(tag, "manual-1795262400");
    std::fs::rename(repo.join("old.txt"), repo.join("new name.txt")).unwrap();
    std::fs::set_permissions(repo.join("mode.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(repo.join("README.md"), "changed\n").unwrap();
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-qm", "commit some"]);
    let d = json(&env, &["snapshot", "diff", &tag, "--json"]);
    assert_eq!(d["added"], serde_json::json!(["new name.txt"]));
    assert_eq!(d["modified"], serde_json::json!(["README.md", "mode.sh"]));
    assert_eq!(d["deleted"], serde_json::json!(["old.txt"]));
    let human = env.run(&["snapshot", "diff", &tag]);
    assert!(
        human
            .stdout
            .contains("A new name.txt\nM README.md\nM mode.sh\nD old.txt\n"),
        "{}",
        human.stdout
    );
    assert!(
        human
            .stdout
            .contains("1 added, 2 modified, 1 deleted since manual-1795262400")
    );

    // Same second, fixed clock: a second manual save gets a distinct name.
    let s2 = json(&env, &["snapshot", "save", "again", "--json"]);
    assert_eq!(s2["tag"], "manual-1795262400-2");
    let list = json(&env, &["snapshot", "list", "--json"]);
    let tags: Vec<&str> = list["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tag"].as_str().unwrap())
        .collect();
    assert_eq!(tags, ["manual-1795262400", "manual-1795262400-2"]);
    assert_eq!(list["snapshots"][0]["message"], "base");
    let st = json(&env, &["snapshot", "status", "--json"]);
    assert_eq!(st["last"]["tag"], "manual-1795262400-2");
    assert_eq!(st["changed_since_last"]["added"], serde_json::json!([]));
    assert_eq!(st["uncommitted"], 2); // untracked: mode.sh, new name.txt
}

#[test]
fn clear_errors_for_bad_tags_and_refused_rollbacks() {
    let env = Env::new();
    let repo = env.repo();
    json(&env, &["snapshot", "save", "one", "--json"]);
    let r = env.run(&["snapshot", "rollback", "manual-179526240"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no snapshot named `manual-179526240`; closest: manual-1795262400"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("hint: `taskdaemon snapshot list`"),
        "{}",
        r.stderr
    );
    git(&repo, &["tag", "v1"]);
    let r = env.run(&["snapshot", "diff", "v1"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr
            .contains("`v1` is a tag but not a taskdaemon snapshot"),
        "{}",
        r.stderr
    );

    let outside = env.root().join("plain");
    std::fs::create_dir_all(&outside).unwrap();
    let out = env
        .cmd()
        .current_dir(&outside)
        .args(["snapshot", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not inside a git repository"));

    // A merge in progress.
    git(&repo, &["switch", "-q", "-c", "other"]);
    std::fs::write(repo.join("README.md"), "other\n").unwrap();
    git(&repo, &["commit", "-qam", "other"]);
    git(&repo, &["switch", "-q", "main"]);
    std::fs::write(repo.join("README.md"), "main\n").unwrap();
    git(&repo, &["commit", "-qam", "main"]);
    assert!(git_ok(&repo, &["merge", "-q", "other"]).is_none());
    let r = env.run(&["snapshot", "rollback", "manual-1795262400"]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("a merge is in progress"), "{}", r.stderr);
    assert!(r.stderr.contains("git merge --abort"), "{}", r.stderr);
    let r = env.run(&["snapshot", "save"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("unresolved conflicts: README.md"),
        "{}",
        r.stderr
    );
    git(&repo, &["merge", "--abort"]);

    // A loop running in this work tree.
    let r = while_a_loop_runs(&env, &repo.clone(), || {
        env.run(&["snapshot", "rollback", "manual-1795262400"])
    });
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("a loop is running"), "{}", r.stderr);
}

#[test]
fn two_tasks_snapshot_their_boundaries_and_a_failed_one_rolls_back() {
    let env = Env::new();
    let repo = env.repo();
    let done = env.script(
        "done.yaml",
        "iterations:\n  - steps:\n      - write: { path: a.txt, content: \"task one\\n\" }\n      - write: { path: .ralph/summary.md, content: \"Added a.txt\\n\" }\n      - commit: add a\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "task",
        "add a.txt",
        "--agent",
        &done,
        "--validate",
        "test -f a.txt",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("task 1: saved the project as task-1-pre"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("task 1 complete: saved as task-1-post"),
        "{}",
        r.stderr
    );
    let read = |p: &str| std::fs::read_to_string(repo.join(p)).unwrap();
    assert_eq!(read(".ralph/task-counter.txt"), "1\n");
    assert_eq!(read(".ralph/status.txt"), "complete\n");
    assert!(read(".ralph/task.md").contains("Counter: 1\n"));
    assert!(read(".ralph/task.md").contains("> add a.txt\n"));
    assert_eq!(read(".ralph/origin.md"), "# Origin\n\nadd a.txt\n");
    let task1_head = git(&repo, &["rev-parse", "HEAD"]);
    // The prompt carried task.md.
    assert!(read(".ralph/logs/iteration-001.prompt.md").contains("Counter: 1"));

    std::fs::write(repo.join(".ralph/feedback.md"), "stale feedback\n").unwrap();
    let fail = env.script(
        "fail.yaml",
        "iterations:\n  - steps:\n      - write: { path: b.txt, content: \"half done\\n\" }\n      - write: { path: a.txt, content: \"broken\\n\" }\n      - commit: break a\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "task",
        "add b.txt without breaking a.txt",
        "--agent",
        &fail,
        "--validate",
        "grep -q 'task one' a.txt",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("task 2 did not complete"), "{}", r.stderr);
    assert!(
        r.stderr.contains("taskdaemon snapshot rollback task-2-pre"),
        "{}",
        r.stderr
    );
    assert_eq!(
        read(".ralph/task-history.md"),
        "- Task 1: Added a.txt (complete)\n"
    );
    assert_eq!(read(".ralph/feedback.md"), "");
    assert_eq!(read(".ralph/summary.md"), "");
    assert_eq!(read(".ralph/status.txt"), "limit\n");
    assert_eq!(read(".ralph/origin.md"), "# Origin\n\nadd a.txt\n");
    assert!(read(".ralph/task.md").contains("Previous: task-1-post\n"));
    let tags = git(&repo, &["tag", "--list"]);
    assert_eq!(tags, "task-1-post\ntask-1-pre\ntask-2-pre\n");

    let r = env.run(&["snapshot", "rollback", "task-2-pre"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read("a.txt"), "task one\n");
    assert!(!repo.join("b.txt").exists());
    assert_eq!(read(".ralph/task-counter.txt"), "1\n");
    // status.txt and iteration.txt are runtime files (never committed, not in snapshots):
    // they still say how the last loop ended.
    assert_eq!(read(".ralph/status.txt"), "limit\n");
    assert_eq!(read(".ralph/feedback.md"), "stale feedback\n");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), task1_head);
    // Exactly as it was: only the uncommitted feedback.
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        " M .ralph/feedback.md\n"
    );

    // The next task after the rollback gets a new number: tags are never reused.
    let r = env.run(&[
        "task",
        "add a.txt again",
        "--agent",
        &done,
        "--validate",
        "true",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let started = harness::events(&r.stdout);
    assert_eq!(started[0]["event"], "task_started");
    assert_eq!(started[0]["task"], 3);
    assert_eq!(started[0]["pre_snapshot"], "task-3-pre");
    let last = started.last().unwrap();
    assert_eq!(last["event"], "task_finished");
    assert_eq!(last["post_snapshot"], "task-3-post");
    assert_eq!(read(".ralph/task-counter.txt"), "3\n");
}

#[test]
fn the_first_task_of_an_empty_project_takes_no_pre_snapshot() {
    let env = Env::new();
    let repo = env.root().join("fresh");
    std::fs::create_dir_all(&repo).unwrap();
    git_ok(&repo, &["init", "-q", "-b", "main"]).unwrap();
    let agent = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - write: { path: hello.txt, content: hi }\n      - commit: hello\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let out = env
        .cmd()
        .current_dir(&repo)
        .args([
            "task",
            "write hello.txt",
            "--agent",
            &agent,
            "--validate",
            "test -f hello.txt",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("empty project, no pre-task snapshot"),
        "{stderr}"
    );
    assert_eq!(git_ok(&repo, &["tag", "--list"]).unwrap(), "task-1-post\n");
    // task-1-post holds the committed .ralph/ state; status.txt is a runtime file, so a
    // finished task leaves nothing modified.
    let task = git_ok(&repo, &["show", "task-1-post^{commit}:.ralph/task.md"]).unwrap();
    assert!(task.contains("Counter: 1"), "{task}");
    assert_eq!(
        std::fs::read_to_string(repo.join(".ralph/status.txt")).unwrap(),
        "complete\n"
    );
    assert_eq!(git_ok(&repo, &["status", "--porcelain"]).unwrap(), "");
}

#[test]
fn a_task_finished_by_run_resume_still_gets_its_post_snapshot() {
    let env = Env::new();
    let agent = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - say: \"<promise>BLOCKED:need a token</promise>\"\n  - steps:\n      - write: { path: t.txt, content: ok }\n      - commit: t\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "task",
        "use the token",
        "--agent",
        &agent,
        "--validate",
        "test -f t.txt",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("task 1 did not complete (BLOCKED)"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(env.repo().join(".ralph/status.txt")).unwrap(),
        "blocked\n"
    );
    assert_eq!(env.run(&["unblock"]).code, 0);
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("task 1 complete: saved as task-1-post"),
        "{}",
        r.stderr
    );
    assert_eq!(
        git(&env.repo(), &["tag", "--list"]),
        "task-1-post\ntask-1-pre\n"
    );
}

/// The reviewer's reproductions of data loss and broken states, each now handled.
#[test]
fn rollback_refuses_to_delete_a_nested_repository_in_the_way() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tool"), "v1\n").unwrap();
    git(&repo, &["add", "tool"]);
    git(&repo, &["commit", "-qm", "tool file"]);
    let s = json(&env, &["snapshot", "save", "--json"]);
    std::fs::remove_file(repo.join("tool")).unwrap();
    std::fs::create_dir_all(repo.join("tool")).unwrap();
    git_ok(&repo.join("tool"), &["init", "-q"]).unwrap();
    std::fs::write(repo.join("tool/main.c"), "code\n").unwrap();
    git_ok(&repo.join("tool"), &["add", "-A"]).unwrap();
    git_ok(
        &repo.join("tool"),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qm",
            "work",
        ],
    )
    .unwrap();
    std::fs::write(repo.join("tool/main.c"), "code\nwip\n").unwrap();
    let r = env.run(&["snapshot", "rollback", s["tag"].as_str().unwrap()]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("tool is a git repository"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("tool/main.c")).unwrap(),
        "code\nwip\n"
    );
    // Nothing was changed, not even a safety snapshot taken.
    assert!(!git(&repo, &["tag", "--list"]).contains("pre-rollback"));
}

#[test]
fn ignored_directories_and_untracked_ignored_files_survive_a_rollback() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join("build")).unwrap();
    std::fs::write(repo.join("build/out.txt"), "out\n").unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "-qm", "ignore build"]);
    std::fs::remove_file(repo.join("build/out.txt")).unwrap();
    std::fs::create_dir_all(repo.join("build/deep")).unwrap();
    std::fs::write(repo.join("build/c.o"), "obj").unwrap();
    std::fs::write(repo.join("build/deep/x"), "d").unwrap();
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("build/out.txt")).unwrap(),
        "out\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("build/c.o")).unwrap(),
        "obj"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("build/deep/x")).unwrap(),
        "d"
    );

    // An ignored file where the snapshot has a file: overwritten, but kept in the safety
    // snapshot, so undoing the rollback brings it back.
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("app.cfg"), "saved\n").unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    std::fs::remove_file(repo.join("app.cfg")).unwrap();
    std::fs::write(repo.join(".git/info/exclude"), "*.cfg\n").unwrap();
    std::fs::write(repo.join("app.cfg"), "local secret\n").unwrap();
    let r = json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("app.cfg")).unwrap(),
        "saved\n"
    );
    json(
        &env,
        &[
            "snapshot",
            "rollback",
            r["saved"]["tag"].as_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("app.cfg")).unwrap(),
        "local secret\n"
    );
}

#[test]
fn snapshots_keep_working_after_untracking_a_forced_file_and_after_gc() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join(".gitignore"), "*.cfg\n").unwrap();
    std::fs::write(repo.join("app.cfg"), "v1\n").unwrap();
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["add", "-f", "app.cfg"]);
    git(&repo, &["commit", "-qm", "forced"]);
    std::fs::write(repo.join("app.cfg"), "v2\n").unwrap();
    let s1 = json(&env, &["snapshot", "save", "--json"]);
    assert!(
        git(
            &repo,
            &[
                "show",
                &format!("{}^{{commit}}:app.cfg", s1["tag"].as_str().unwrap())
            ]
        ) == "v2\n"
    );
    std::fs::write(repo.join("app.cfg"), "v3\n").unwrap();
    git(&repo, &["rm", "-q", "--cached", "app.cfg"]);
    let s2 = json(&env, &["snapshot", "save", "--json"]);
    // Now ignored and untracked: not in the snapshot.
    assert!(
        git_ok(
            &repo,
            &[
                "show",
                &format!("{}^{{commit}}:app.cfg", s2["tag"].as_str().unwrap())
            ]
        )
        .is_none()
    );

    // Blobs only the private index knew of are pruned by gc; snapshots recover.
    std::fs::write(repo.join("notes.txt"), "notes\n").unwrap();
    json(&env, &["snapshot", "status", "--json"]);
    git(
        &repo,
        &["-c", "gc.pruneExpire=now", "gc", "-q", "--prune=now"],
    );
    let s3 = json(&env, &["snapshot", "save", "--json"]);
    assert_eq!(
        git(
            &repo,
            &[
                "show",
                &format!("{}^{{commit}}:notes.txt", s3["tag"].as_str().unwrap())
            ]
        ),
        "notes\n"
    );
}

#[test]
fn line_endings_and_filters_do_not_change_saved_bytes() {
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["config", "core.autocrlf", "input"]);
    git(&repo, &["config", "core.safecrlf", "true"]);
    std::fs::write(repo.join("win.txt"), "l1\r\nl2\r\n").unwrap();
    std::fs::write(repo.join("mixed.txt"), "a\r\nb\n").unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    std::fs::remove_file(repo.join("win.txt")).unwrap();
    std::fs::remove_file(repo.join("mixed.txt")).unwrap();
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read(repo.join("win.txt")).unwrap(),
        b"l1\r\nl2\r\n"
    );
    assert_eq!(std::fs::read(repo.join("mixed.txt")).unwrap(), b"a\r\nb\n");
}

#[test]
fn a_ref_the_rollback_cannot_write_stops_it_before_any_change() {
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["switch", "-q", "-c", "feat"]);
    let s = json(&env, &["snapshot", "save", "--json"]);
    git(&repo, &["switch", "-q", "main"]);
    git(&repo, &["branch", "-q", "-D", "feat"]);
    git(&repo, &["branch", "feat/sub"]);
    std::fs::write(repo.join("README.md"), "wip\n").unwrap();
    let r = env.run(&["snapshot", "rollback", s["tag"].as_str().unwrap()]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("refs/heads/feat"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "wip\n"
    );
    assert!(!git(&repo, &["tag", "--list"]).contains("pre-rollback"));

    // index.lock held by someone else: stopped half way, and the message says how back.
    git(&repo, &["branch", "-q", "-D", "feat/sub"]);
    std::fs::write(repo.join(".git/index.lock"), "").unwrap();
    let r = env.run(&["snapshot", "rollback", s["tag"].as_str().unwrap()]);
    std::fs::remove_file(repo.join(".git/index.lock")).unwrap();
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("git is busy"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("taskdaemon snapshot rollback pre-rollback-"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "wip\n"
    );
}

#[test]
fn a_loop_in_a_subdirectory_blocks_a_rollback_from_the_top() {
    let env = Env::new();
    let repo = env.repo();
    let s = json(&env, &["snapshot", "save", "--json"]);
    std::fs::create_dir_all(repo.join("app")).unwrap();
    let r = while_a_loop_runs(&env, &repo.join("app"), || {
        env.run(&["snapshot", "rollback", s["tag"].as_str().unwrap()])
    });
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("a loop is running"), "{}", r.stderr);
}

#[test]
fn a_stalling_agent_is_recovered_once_then_the_task_fails_and_rolls_back() {
    let env = Env::new();
    let repo = env.repo();
    let done = env.script(
        "done.yaml",
        "iterations:\n  - steps:\n      - write: { path: a.txt, content: \"one\\n\" }\n      - commit: a\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    assert_eq!(
        env.run(&[
            "task",
            "add a.txt with one line",
            "--agent",
            &done,
            "--validate",
            "true"
        ])
        .code,
        0
    );
    let task1_head = git(&repo, &["rev-parse", "HEAD"]);
    let stall = env.script(
        "stall.yaml",
        "format: stream-json\nafter-last: repeat-last\niterations:\n  - steps:\n      - tool: { name: Read, input: { file_path: a.txt }, output: one }\n      - write: { path: b.txt, content: half }\n      - commit: b\n  - steps:\n      - tool: { name: Bash, input: { command: npm test }, output: FAIL }\n      - say: trying again\n",
    );
    let r = env.run(&[
        "task",
        "add b.txt next to a.txt",
        "--agent",
        &stall,
        "--validate",
        "false",
    ]);
    assert_eq!(r.code, 5, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(
            "iteration 4: stalled (3 iterations of the same tool calls): saved stall-2-recovery"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("iteration 7: stalled again"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("task 2 failed: stalled twice"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("rolled back to task-2-pre"),
        "{}",
        r.stderr
    );
    // The recovery guidance reached the next prompt.
    let p5 = std::fs::read_to_string(repo.join(".ralph/logs/iteration-005.prompt.md")).unwrap();
    assert!(p5.contains("## Stall Recovery (iteration 4)"), "{p5}");
    assert!(p5.contains("`Bash: npm test`"), "{p5}");
    let rows = harness::csv_rows(&repo);
    let outcomes: Vec<&str> = rows[rows.len() - 7..]
        .iter()
        .map(|r| r["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        [
            "continue",
            "continue",
            "continue",
            "stall-recovery",
            "continue",
            "continue",
            "failed"
        ]
    );
    // The tree is task-2-pre's again, apart from the status and feedback of the failure.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), task1_head);
    assert!(!repo.join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join(".ralph/status.txt")).unwrap(),
        "failed\n"
    );
    let feedback = std::fs::read_to_string(repo.join(".ralph/feedback.md")).unwrap();
    assert!(
        feedback.contains("Task 2 failed after 2 stall recoveries"),
        "{feedback}"
    );
    let tags = git(&repo, &["tag", "--list"]);
    assert!(
        tags.contains("stall-2-recovery\n") && tags.contains("pre-rollback-"),
        "{tags}"
    );
}

/// The stalling agent of [`a_stalling_agent_is_recovered_once_then_the_task_fails_and_rolls_back`]:
/// a commit, then the same failing test run again and again.
const STALLING: &str = "format: stream-json\nafter-last: repeat-last\niterations:\n  - steps:\n      - tool: { name: Read, input: { file_path: a.txt }, output: one }\n      - write: { path: b.txt, content: half }\n      - commit: b\n  - steps:\n      - tool: { name: Bash, input: { command: npm test }, output: FAIL }\n      - say: trying again\n";

#[test]
fn a_stop_ends_the_stall_guards_wait_for_a_stuck_snapshot_lock_and_a_resumed_run_recovers() {
    // Another taskdaemon's save is stuck holding the snapshot lock when the stall guard
    // needs it: Ctrl-C ends the wait (up to 5 minutes otherwise) and the run, with nothing
    // saved and the guard's counters as they were, so the resumed run stalls again at once.
    let env = Env::new();
    let repo = env.repo();
    let stall = env.script("stall.yaml", STALLING);
    let validated = env.root().join("validated");
    let validate = format!("echo . >> '{}'; false", validated.display());
    let run = env.spawn(&[
        "task",
        "add b.txt",
        "--agent",
        &stall,
        "--validate",
        &validate,
    ]);
    let limit = std::time::Duration::from_secs(60);
    // Iteration 1 is validated: the task has begun (its start snapshot is saved).
    harness::wait_for_lines(&validated, 1, limit);
    let held = harness::hold_snapshot_lock(&repo);
    // Iteration 4 stalls (2, 3 and 4 made the same tool calls); its guard waits, and says
    // so while it waits.
    run.wait_to_say("iteration 4: waiting for", limit);
    let (status, err) = run.interrupt(limit);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("iteration 4: stalled, but the stall guard's recovery (a snapshot and guidance) was not carried out: stopped while waiting for"),
        "{err}"
    );
    assert!(err.contains("INTERRUPTED"), "{err}");
    assert_eq!(git(&repo, &["tag", "--list", "stall-*"]), "");
    let rows = harness::csv_rows(&repo);
    assert_eq!(rows.last().unwrap()["outcome"], "interrupted");

    drop(held);
    let r = env.run(&["run", "--resume"]);
    assert!(
        r.stderr.contains(
            "iteration 4: stalled (3 iterations of the same tool calls): saved stall-1-recovery"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn a_stop_while_a_tasks_start_snapshot_waits_for_the_snapshot_lock_begins_no_task() {
    // The parse agent waits for the test to take the snapshot lock (as a stuck save of
    // another taskdaemon holds it), so the task's start snapshot waits for it: Ctrl-C ends
    // the wait (up to 5 minutes otherwise) and no task is begun.
    let env = Env::new();
    let repo = env.repo();
    let (asked, go) = (env.root().join("asked"), env.root().join("go"));
    let parse_agent = format!(
        "cmd:cat > /dev/null; touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; printf '%s' '{{\"type\":\"mutation\",\"requirements\":[{{\"marker\":\"ADD\",\"text\":\"Add b.txt\"}}]}}'",
        asked.display(),
        go.display()
    );
    let done = env.script(
        "done.yaml",
        "iterations:\n  - steps:\n      - write: { path: b.txt, content: \"b\\n\" }\n      - commit: b\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let run = env.spawn(&[
        "task",
        "add b.txt",
        "--parse-agent",
        &parse_agent,
        "--agent",
        &done,
        "--validate",
        "true",
    ]);
    let limit = std::time::Duration::from_secs(60);
    harness::wait_for(&asked, limit);
    let held = harness::hold_snapshot_lock(&repo);
    std::fs::write(&go, "").unwrap();
    run.wait_to_say("taskdaemon: before the task begins: waiting for", limit);
    let (status, err) = run.interrupt(limit);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted before the task began, while its start snapshot waited for"),
        "{err}"
    );
    assert_eq!(git(&repo, &["tag", "--list"]), "");
    assert!(!repo.join(".ralph/task.md").exists());

    drop(held);
    let r = env.run(&["task", "add b.txt", "--agent", &done, "--validate", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("task 1: saved the project as task-1-pre"),
        "{}",
        r.stderr
    );
}

#[test]
fn flags_in_the_users_index_and_submodule_recursion_do_not_hide_or_lose_edits() {
    // skip-worktree / assume-unchanged files edited before the first save are saved as edited.
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("cfg"), "v1\n").unwrap();
    std::fs::write(repo.join("other"), "o1\n").unwrap();
    git(&repo, &["add", "cfg", "other"]);
    git(&repo, &["commit", "-qm", "cfg"]);
    git(&repo, &["update-index", "--skip-worktree", "cfg"]);
    git(&repo, &["update-index", "--assume-unchanged", "other"]);
    std::fs::write(repo.join("cfg"), "v2 local\n").unwrap();
    std::fs::write(repo.join("other"), "o2 local\n").unwrap();
    // The private index is seeded beside it and renamed into place once its flags are
    // cleared: a link where the seed is made is replaced, not written through.
    let private = repo.join(".git/taskdaemon");
    std::fs::create_dir_all(&private).unwrap();
    let outside = env.root().join("outside");
    std::fs::write(&outside, "mine\n").unwrap();
    std::os::unix::fs::symlink(&outside, private.join("snapshot.index.seed")).unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    let tag = s["tag"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
    assert!(!private.join("snapshot.index.seed").exists());
    assert!(
        std::fs::symlink_metadata(private.join("snapshot.index"))
            .unwrap()
            .is_file()
    );
    assert_eq!(
        git(&repo, &["show", &format!("{tag}^{{commit}}:cfg")]),
        "v2 local\n"
    );
    assert_eq!(
        git(&repo, &["show", &format!("{tag}^{{commit}}:other")]),
        "o2 local\n"
    );

    // With submodule.recurse=true a rollback still leaves a submodule's work alone.
    let env = Env::new();
    add_submodule(&env, "s", "s1\n");
    let repo = env.repo();
    // Saved with the submodule one commit back; then it moves on and gets local work.
    let lib = repo.join("lib");
    std::fs::write(lib.join("s"), "s2\n").unwrap();
    git_ok(
        &lib,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qam",
            "s2",
        ],
    )
    .unwrap();
    git_ok(&lib, &["checkout", "-q", "HEAD~1"]).unwrap();
    let s = json(&env, &["snapshot", "save", "--json"]);
    git_ok(&lib, &["checkout", "-q", "main"]).unwrap();
    git(&repo, &["config", "submodule.recurse", "true"]);
    std::fs::write(repo.join("lib/s"), "precious\n").unwrap();
    json(
        &env,
        &["snapshot", "rollback", s["tag"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("lib/s")).unwrap(),
        "precious\n"
    );
}

/// A run whose start waits for another holder of the snapshot lock says so (who holds it,
/// how long it may wait, that Ctrl-C ends it) and begins once the lock is let go.
#[test]
fn a_run_waiting_for_the_snapshot_lock_before_it_begins_says_so_and_begins_once_it_is_let_go() {
    let env = Env::new();
    let held = crate::harness::hold_snapshot_lock(&env.repo());
    let run = env.spawn(&[
        "run",
        "--agent",
        "cmd:true",
        "--validate",
        "true",
        "--max-iterations",
        "1",
        "the task",
    ]);
    run.wait_to_say("not started yet: waiting for", Duration::from_secs(30));
    run.wait_to_say("Ctrl-C", Duration::from_secs(1));
    drop(held);
    let (status, err) = run.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("iteration 1/1"), "{err}");
}

/// Where a daemon's loop runs: a linked worktree. Its snapshots restore it exactly (files,
/// index, HEAD, its branch) and never touch the main worktree, its index or its branch.
#[test]
fn a_linked_worktree_saves_and_rolls_back_on_its_own() {
    let env = Env::new();
    let repo = env.repo();
    let wt = env.root().join("wt");
    git(
        &repo,
        &["worktree", "add", "-q", "-b", "wt", wt.to_str().unwrap()],
    );
    let in_wt = |args: &[&str]| -> Value {
        let out = env.cmd().current_dir(&wt).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The main worktree has work of its own, staged and not.
    std::fs::write(repo.join("README.md"), "main's edit\n").unwrap();
    std::fs::write(repo.join("main-staged.txt"), "staged in main\n").unwrap();
    git(&repo, &["add", "main-staged.txt"]);
    let main_state = state(&repo);

    std::fs::write(wt.join("README.md"), "in the worktree\n").unwrap();
    std::fs::write(wt.join("new.txt"), "new\n").unwrap();
    git(&wt, &["add", "new.txt"]);
    let saved = state(&wt);
    let s = in_wt(&["snapshot", "save", "in the worktree", "--json"]);
    let tag = s["tag"].as_str().unwrap().to_string();

    // The loop goes on: a commit on the worktree's branch, edits, a new untracked file.
    std::fs::write(wt.join("later.txt"), "later\n").unwrap();
    git(&wt, &["add", "-A"]);
    git(&wt, &["commit", "-qm", "later"]);
    std::fs::write(wt.join("README.md"), "changed again\n").unwrap();
    std::fs::write(wt.join("untracked.txt"), "untracked\n").unwrap();
    let dirty = state(&wt);

    let r = in_wt(&["snapshot", "rollback", &tag, "--json"]);
    assert_eq!(
        state(&wt),
        saved,
        "the worktree is as saved, its branch back"
    );
    assert_eq!(state(&repo), main_state, "the main worktree is untouched");
    assert_eq!(
        git(&repo, &["rev-parse", "main"]),
        git(&repo, &["rev-parse", "HEAD"])
    );

    // Undone exactly, and the tags are the repository's: the main worktree lists them.
    let pre = r["saved"]["tag"].as_str().unwrap();
    in_wt(&["snapshot", "rollback", pre, "--json"]);
    assert_eq!(state(&wt), dirty);
    assert_eq!(state(&repo), main_state);
    let listed = json(&env, &["snapshot", "list", "--json"]);
    let tags: Vec<&str> = listed["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["tag"].as_str())
        .collect();
    assert!(
        tags.contains(&tag.as_str()) && tags.contains(&pre),
        "{tags:?}"
    );
}
