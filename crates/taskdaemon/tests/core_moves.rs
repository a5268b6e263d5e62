//! Product logic that moved into the core, seen from the CLI: one project resolver for
//! every command (a linked worktree opens the main work tree's store).

#[allow(dead_code)]
mod harness;

use harness::{Env, git};

#[test]
fn plan_new_and_submit_from_a_linked_worktree_open_one_store() {
    let env = Env::new();
    let repo = env.repo();
    let init = env.run(&["init"]);
    assert_eq!(init.code, 0, "{}", init.stderr);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "taskdaemon init"]);
    let linked = env.root().join("linked");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            linked.to_str().unwrap(),
        ],
    );
    let l = linked.to_str().unwrap();

    let p = env.run(&["-C", l, "plan", "new", "Blue widgets"]);
    assert_eq!(p.code, 0, "plan new: {}", p.stderr);
    let s = env.run(&["-C", l, "submit", "plan", "Red widgets", "--target", "main"]);
    assert_eq!(s.code, 0, "submit: {}", s.stderr);

    // Both records are in the main work tree's store, whichever tree asks.
    for dir in [repo.to_str().unwrap(), l] {
        let list = env.run(&["-C", dir, "list", "--json"]);
        assert_eq!(list.code, 0, "{}", list.stderr);
        assert!(
            list.stdout.contains("Blue widgets") && list.stdout.contains("Red widgets"),
            "list from {dir}: {}",
            list.stdout
        );
    }
    let linked_store =
        std::fs::read_to_string(linked.join(".taskdaemon/store/plans.jsonl")).unwrap_or_default();
    assert!(
        !linked_store.contains("widgets"),
        "nothing written to the linked worktree's copy: {linked_store}"
    );
}
