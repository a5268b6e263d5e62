//! The user's uncommitted work and secret-looking files at a run's start (issue 37 item 10):
//! a dirty tree is saved as `run-N-pre` before iteration 1 and said; an untracked `.env` is
//! in no snapshot, an agent commit that adds it is rejected with the path named, and a
//! rollback to `run-N-pre` gives the user's edits back with the `.env` where it was.

use crate::harness::{Env, events, git};

#[test]
fn a_dirty_tree_with_env_is_saved_before_the_agent_and_its_commit_of_the_env_is_rejected() {
    let env = Env::new();
    let repo = env.repo();
    let initial = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("README.md"), "hello\nthe user's edit\n").unwrap();
    std::fs::write(repo.join("notes.txt"), "the user's notes\n").unwrap();
    std::fs::write(repo.join(".env"), "API_TOKEN=s3cr3t\n").unwrap();
    // The agent of the report: `git add -A` takes everything.
    let r = env.run(&[
        "run",
        "tidy up",
        "--agent",
        "cmd:git add -A && git commit -qm agent",
        "--validate",
        "true",
        "--max-iterations",
        "1",
        "--json",
    ]);
    let evs = events(&r.stdout);
    let saved = evs
        .iter()
        .find(|e| e["event"] == "uncommitted_saved")
        .unwrap_or_else(|| panic!("no uncommitted_saved event: {}{}", r.stdout, r.stderr));
    assert_eq!(saved["snapshot"], "run-1-pre", "{saved}");
    assert_eq!(saved["files"], 2, "{saved}");
    assert_eq!(saved["secrets"], serde_json::json!([".env"]), "{saved}");
    let message = saved["message"].as_str().unwrap();
    assert!(
        message.contains("(2 files: README.md, notes.txt) are saved as snapshot run-1-pre")
            && message.contains("`taskdaemon snapshot rollback run-1-pre`")
            && message.contains(".env looks like a secret"),
        "{message}"
    );
    // Saved before the agent ran: its first event comes after.
    let at = |name: &str| evs.iter().position(|e| e["event"] == name).unwrap();
    assert!(at("uncommitted_saved") < at("iteration_started"));

    // The snapshot has the user's edits and not the key.
    let tree = git(&repo, &["ls-tree", "-r", "--name-only", "run-1-pre"]);
    assert!(
        tree.contains("notes.txt") && !tree.contains(".env"),
        "{tree}"
    );
    assert_eq!(
        git(&repo, &["show", "run-1-pre:README.md"]).trim_end(),
        "hello\nthe user's edit"
    );

    // The agent's commit added `.env`: rejected, named, not complete.
    let finished = evs
        .iter()
        .find(|e| e["event"] == "iteration_finished")
        .unwrap();
    assert_eq!(finished["outcome"], "rejected", "{finished}");
    assert!(
        evs.iter().any(|e| e["event"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("add files that look like secrets (.env in "))),
        "{}",
        r.stdout
    );
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let prompt = repo.join(".ralph/logs/iteration-001.log");
    assert!(
        std::fs::read_to_string(prompt)
            .unwrap()
            .contains("look like secrets")
    );

    // Undo the run: the user's edits are back, the key is where it was (untracked).
    let rb = env.run(&["snapshot", "rollback", "run-1-pre"]);
    assert_eq!(rb.code, 0, "{}{}", rb.stdout, rb.stderr);
    assert!(rb.stdout.contains("kept .env where it is"), "{}", rb.stdout);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), initial);
    assert_eq!(
        std::fs::read_to_string(repo.join(".env")).unwrap(),
        "API_TOKEN=s3cr3t\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\nthe user's edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "the user's notes\n"
    );
    let status = git(&repo, &["status", "--porcelain"]);
    assert!(status.contains("?? .env"), "{status}");
}

#[test]
fn a_dirty_start_says_what_it_saved_in_words_and_its_resume_saves_nothing_again() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("README.md"), "hello\nedited\n").unwrap();
    let args = [
        "run",
        "say it",
        "--agent",
        "cmd:true",
        "--validate",
        "false",
        "--max-iterations",
        "1",
    ];
    let r = env.run(&args);
    assert!(
        r.stderr.contains(
            "your uncommitted changes (1 file: README.md) are saved as snapshot run-1-pre; undo the run's changes with `taskdaemon snapshot rollback run-1-pre`"
        ),
        "{}",
        r.stderr
    );
    // Going on with the same run: its start was saved once.
    let resumed = env.run(&[
        "run",
        "--resume",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "2",
    ]);
    assert!(
        resumed.stderr.contains("resuming at iteration 2")
            && !resumed.stderr.contains("are saved as snapshot"),
        "{}",
        resumed.stderr
    );
    let tags = git(&repo, &["tag", "--list", "run-*"]);
    assert_eq!(
        tags.trim(),
        "run-1-pre",
        "{}{}",
        resumed.stdout,
        resumed.stderr
    );
}

#[test]
fn a_run_killed_in_its_first_iteration_and_resumed_saves_the_uncommitted_work_once() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("notes.txt"), "the user's notes\n").unwrap();
    let bg = env.spawn(&[
        "run",
        "slow",
        "--agent",
        "cmd:sleep 30",
        "--validate",
        "true",
        "--max-iterations",
        "1",
    ]);
    bg.wait_to_say("── iteration 1/1 ──", std::time::Duration::from_secs(30));
    // SIGKILL in the middle of iteration 1 (the agent dies with it).
    drop(bg);
    let r = env.run(&[
        "run",
        "--resume",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
    ]);
    assert!(
        r.stderr.contains("resuming at iteration 1") && !r.stderr.contains("saved as snapshot"),
        "{}",
        r.stderr
    );
    let tags = git(&repo, &["tag", "--list", "run-*"]);
    assert_eq!(tags.trim(), "run-1-pre", "{}", r.stderr);
    assert_eq!(
        git(&repo, &["show", "run-1-pre:notes.txt"]),
        "the user's notes\n"
    );
}
