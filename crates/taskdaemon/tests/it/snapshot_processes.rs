//! How many git processes a snapshot save and rollback start (issue 16): counted from
//! git's own trace (`GIT_TRACE2_EVENT`), so a change that adds one shows here. Only the
//! snapshot machinery's processes are counted (its plumbing runs with
//! `core.looseCompression=0` — every git of taskdaemon's has the hooks off — plus the one
//! `rev-parse` that opens the repository): the
//! command line's own start-up facts are another part's.

use std::path::Path;

use crate::harness::{Env, git};
use serde_json::Value;

/// The events of git's trace (`GIT_TRACE2_EVENT`) of one taskdaemon run, with `more`
/// environment for it.
fn trace_events(env: &Env, args: &[&str], more: &[(&str, &str)]) -> Vec<Value> {
    let trace = env.root().join("trace.json");
    let _ = std::fs::remove_file(&trace);
    let mut vars = vec![("GIT_TRACE2_EVENT".to_string(), trace.display().to_string())];
    vars.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.ok_with(&vars, args);
    std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The subcommands of the snapshot's git processes of one taskdaemon run, in order.
fn traced(env: &Env, args: &[&str]) -> Vec<String> {
    let steps = trace_events(env, args, &[])
        .into_iter()
        .filter(|e| e["event"] == "start")
        .filter_map(|e| {
            let argv: Vec<String> = e["argv"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let ours = argv.iter().any(|a| a == "core.looseCompression=0")
                || argv.iter().any(|a| a == "--show-object-format");
            ours.then(|| subcommand(&argv))
        })
        .collect();
    in_order(steps)
}

/// `ls-files -i` runs while `git status` scans (two threads): either may start first.
fn in_order(mut steps: Vec<String>) -> Vec<String> {
    for i in 1..steps.len() {
        if steps[i - 1] == "status" && steps[i] == "ls-files" {
            steps.swap(i - 1, i);
        }
    }
    steps
}

/// The steps as a sorted list: the commit of the user's index is made while the work
/// tree is scanned (and recorded), so its place among them varies.
fn sorted(mut steps: Vec<String>) -> Vec<String> {
    steps.sort();
    steps
}

/// The git subcommand in `argv` (after `-C dir` and `-c k=v` options).
fn subcommand(argv: &[String]) -> String {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "-C" || a == "-c" {
            it.next();
        } else {
            return a.clone();
        }
    }
    String::new()
}

fn change(repo: &Path, round: &str) {
    std::fs::write(repo.join("README.md"), format!("hello {round}\n")).unwrap();
    std::fs::write(repo.join(format!("new-{round}.txt")), "new\n").unwrap();
}

#[test]
fn a_save_and_a_rollback_start_only_the_pinned_git_processes() {
    let env = Env::new();
    let repo = env.repo();
    change(&repo, "1");
    let first = traced(&env, &["snapshot", "save", "first"]);
    assert_eq!(
        sorted(first.clone()),
        [
            "commit-tree",
            "commit-tree",
            "status",
            "tag",
            "update-index",
            "write-tree",
        ],
        "the first save seeds the private index from the user's (its flags read from the \
         file, no ignored-file check: it tracks what the user's does); the user's index tree \
         is its valid cache-tree root (no write-tree); its commit is made while the work \
         tree is scanned; no tags yet"
    );
    assert_eq!(first.last().map(String::as_str), Some("tag"));

    // The user's index is unchanged: its tree and snapshot commit come from the cache.
    change(&repo, "2");
    let save = traced(&env, &["snapshot", "save", "second"]);
    // One `ls-files -i` (the private index's ignored files; the user's index is read from
    // the file), and the tags from the ref files and `tags.cache`.
    let steady = [
        "ls-files",
        "status",
        "update-index",
        "write-tree",
        "commit-tree",
        "tag",
    ];
    assert_eq!(save, steady);
    let tag = git(&repo, &["tag", "--list", "--sort=-creatordate"]);
    let tag = tag
        .lines()
        .find(|t| t.starts_with("manual-") && t.ends_with("-2"))
        .expect("the second save's tag")
        .to_string();

    change(&repo, "3");
    // The checkout of only the changed paths needs them unchanged since the scan began
    // (inode change times a clock tick older); what was just written is left to
    // `read-tree -m -u`, which compares contents.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let rollback = traced(&env, &["snapshot", "rollback", &tag]);
    assert_eq!(
        rollback,
        [
            "ls-files",
            "status",
            "update-index",
            "write-tree",
            "diff-tree",
            "update-ref",
            "commit-tree",
            "tag",
            "update-index",
            "checkout-index",
            "update-index"
        ],
        "the snapshot's trees and parents from `tags.cache` (its save made them, no \
         `cat-file`); one `diff-tree --stdin` for both tree diffs; one `update-ref --stdin` \
         checks the refs and, later, moves them"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello 2\n"
    );
    assert!(
        !repo.join("new-3.txt").exists(),
        "a file made since is removed"
    );
    assert!(repo.join("new-2.txt").exists() && repo.join("new-1.txt").exists());
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        " M README.md\n?? new-1.txt\n?? new-2.txt\n"
    );

    // The rollback wrote the user's index and remembered it: the next save asks git
    // for neither its tree nor its commit.
    change(&repo, "4");
    assert_eq!(traced(&env, &["snapshot", "save", "after"]), steady);
}

#[test]
fn a_first_save_of_a_clean_packed_repository_writes_no_tree() {
    let env = Env::new();
    let repo = env.repo();
    // Packed, as a clone is: the index's cache-tree root is found in the pack's index.
    git(&repo, &["gc", "-q"]);
    let first = traced(&env, &["snapshot", "save", "clean"]);
    assert_eq!(
        sorted(first),
        ["commit-tree", "commit-tree", "status", "tag"],
        "nothing changed since the private index was seeded: the work tree is the user's \
         index tree, read from its cache-tree (no write-tree of either index)"
    );
    let listed = git(&repo, &["tag", "--list", "manual-*"]);
    let tag = listed.lines().next().expect("a snapshot tag").to_string();
    let tree = |rev: &str| git(&repo, &["rev-parse", rev]).trim().to_string();
    assert_eq!(
        tree(&format!("{tag}^{{tree}}")),
        tree("HEAD^{tree}"),
        "the saved work tree is the committed one"
    );
    assert_eq!(
        tree(&format!("{tag}^2^{{tree}}")),
        tree("HEAD^{tree}"),
        "the saved index too"
    );
    // The next save after a change finds it (the private index is the seeded one).
    change(&repo, "1");
    let next = traced(&env, &["snapshot", "save", "next"]);
    assert_eq!(
        next,
        [
            "ls-files",
            "status",
            "update-index",
            "write-tree",
            "commit-tree",
            "tag"
        ]
    );
    let listed = git(&repo, &["tag", "--list", "manual-*"]);
    let tag = listed
        .lines()
        .find(|t| t.ends_with("-2"))
        .expect("the second save's tag");
    assert_eq!(git(&repo, &["show", &format!("{tag}:new-1.txt")]), "new\n");
}

/// The `GIT_DIR` each `git status` of a snapshot command ran with (`None`: discovered).
fn status_git_dirs(env: &Env, args: &[&str]) -> Vec<Option<String>> {
    let events = trace_events(env, args, &[("GIT_TRACE2_ENV_VARS", "GIT_DIR")]);
    let status_sids = events.iter().filter(|e| {
        e["event"] == "cmd_name" && e["name"] == "status" && e["sid"].as_str().is_some()
    });
    status_sids
        .map(|s| {
            events
                .iter()
                .find(|e| {
                    e["sid"] == s["sid"] && e["event"] == "def_param" && e["param"] == "GIT_DIR"
                })
                .and_then(|e| e["value"].as_str().map(str::to_string))
        })
        .collect()
}

#[test]
fn a_save_after_a_save_scans_in_the_private_git_directory() {
    let env = Env::new();
    let repo = env.repo();
    change(&repo, "1");
    assert_eq!(
        status_git_dirs(&env, &["snapshot", "save", "first"]),
        [None],
        "the first save scans in the repository's own git directory"
    );
    change(&repo, "2");
    assert_eq!(
        status_git_dirs(&env, &["snapshot", "save", "second"]),
        [None],
        "nor the second: the first made no scan directory, the second makes it"
    );
    change(&repo, "3");
    let dirs = status_git_dirs(&env, &["snapshot", "save", "third"]);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = dirs[0].clone().expect("GIT_DIR set for the status");
    assert!(
        dir.ends_with("/.git/taskdaemon/scan"),
        "the scan's own HEAD (the last snapshot): {dir}"
    );
    let listed = git(&repo, &["tag", "--list", "manual-*"]);
    let tag = listed
        .lines()
        .find(|t| t.ends_with("-3"))
        .expect("third tag");
    assert_eq!(git(&repo, &["show", &format!("{tag}:new-3.txt")]), "new\n");
    assert_eq!(
        git(&repo, &["show", &format!("{tag}:README.md")]),
        "hello 3\n"
    );
}

/// The git processes one `snapshot prune` starts (every one of the trace, by subcommand).
fn prune_processes(env: &Env, args: &[&str]) -> Vec<String> {
    let mut steps: Vec<String> = trace_events(env, args, &[])
        .into_iter()
        .filter(|e| e["event"] == "start")
        .filter_map(|e| {
            let argv: Vec<String> = e["argv"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            Some(subcommand(&argv))
        })
        .collect();
    steps.sort();
    steps
}

#[test]
fn a_prune_starts_as_many_git_processes_for_eight_snapshots_as_for_three() {
    // A git process per snapshot, each reading every ref, made `prune --dry-run` take
    // 85 s at 800 snapshots: the number of processes must not grow with the snapshots.
    let counted = |n: usize| {
        let env = Env::new();
        for i in 0..n {
            std::fs::write(env.repo().join(format!("f{i}")), "x").unwrap();
            env.ok_with(&[], &["snapshot", "save", &format!("s{i}")]);
        }
        let dry = prune_processes(&env, &["snapshot", "prune", "--keep", "1", "--dry-run"]);
        let real = prune_processes(&env, &["snapshot", "prune", "--keep", "1"]);
        let left = env.ok_with(&[], &["snapshot", "list", "--json"]);
        let left: Value = serde_json::from_str(left.trim()).unwrap();
        assert_eq!(
            left["snapshots"].as_array().map(Vec::len),
            Some(1),
            "{left}"
        );
        (dry, real)
    };
    let (dry3, real3) = counted(3);
    let (dry8, real8) = counted(8);
    assert_eq!(dry3, dry8, "a dry run at 3 and at 8 snapshots");
    assert_eq!(real3, real8, "a prune at 3 and at 8 snapshots");
}
