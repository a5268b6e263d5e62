//! Product logic that moved into the core, seen from the CLI: one project resolver for
//! every command (a linked worktree opens the main work tree's store).

use crate::harness::{Env, git};

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

/// A run line as the map-based context code wrote it (a custom key, the phase index as a
/// number) loads with the typed context, and `list --json` gives its context back as it was.
#[test]
fn a_run_line_written_before_the_typed_context_loads() {
    let env = Env::new();
    let repo = env.repo();
    assert_eq!(env.run(&["init"]).code, 0);
    let store = repo.join(".taskdaemon/store");
    std::fs::create_dir_all(&store).unwrap();
    let context = r#"{"completed-phases":"- A","my-var":{"n":1},"phase-index":1,"phase-name":"B","phase-number":"2 of 2","spec-file":"SPEC","spec-id":"ab12cd-spec-x","target-branch":"main"}"#;
    let context = context.replace("SPEC", &repo.join("specs/x.md").display().to_string());
    let line = format!(
        r#"{{"context":{context},"created-at":1795262400000,"deps":[],"id":"451584-run-phase-x","iteration":1,"loop-type":"phase","parent":null,"priority":0,"progress":"","status":"pending","updated-at":1795262400000,"worktree":null}}"#
    );
    std::fs::write(store.join("runs.jsonl"), format!("{line}\n")).unwrap();
    let list = env.run(&["list", "runs", "--json"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(!list.stderr.contains("unreadable"), "{}", list.stderr);
    let listed: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let run = listed["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "451584-run-phase-x")
        .unwrap_or_else(|| panic!("the old line loads: {}", list.stdout));
    // Every value as it was written; the keys in the JSON convention's snake_case.
    let want = taskdaemon_core::json::normalize(serde_json::from_str(&context).unwrap());
    assert_eq!(
        run["context"], want,
        "the context comes back as it was written"
    );
    assert_eq!(run["context"]["my_var"], serde_json::json!({"n": 1}));
}
