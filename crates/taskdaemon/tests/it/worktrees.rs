//! `taskdaemon worktree list|prune` from the command line, on real repositories whose
//! worktrees were made with plain git, named after records in the store.

use crate::harness::{Env, Run, git};
use serde_json::Value;

fn ok(r: Run) -> Run {
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    r
}

fn json(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn new_plan(env: &Env, title: &str, status: Option<&str>) -> String {
    let r = ok(env.run(&["plan", "new", title, "--json"]));
    let id = json(&r)["id"].as_str().unwrap().to_string();
    if let Some(s) = status {
        ok(env.run(&["edit", &id, "--status", s]));
    }
    id
}

fn add_worktree(env: &Env, base: &str, name: &str, branch: &str) -> std::path::PathBuf {
    let path = env.repo().join(base).join(name);
    git(
        &env.repo(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            branch,
            path.to_str().unwrap(),
        ],
    );
    path
}

fn names(v: &Value) -> Vec<String> {
    let mut n: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[test]
fn list_and_prune_follow_the_records() {
    let env = Env::new();
    let base = ".taskdaemon/worktrees";
    let done = new_plan(&env, "done work", Some("complete"));
    let failed = new_plan(&env, "failed work", Some("failed"));
    let dirty = new_plan(&env, "dirty work", Some("cancelled"));
    add_worktree(&env, base, &done, "td/done");
    let failed_wt = add_worktree(&env, base, &failed, "td/failed");
    let dirty_wt = add_worktree(&env, base, &dirty, "td/dirty");
    std::fs::write(dirty_wt.join("README.md"), "edited\n").unwrap();
    let stray = add_worktree(&env, base, "stray", "td/stray");
    let gone = add_worktree(&env, base, "gone", "td/gone");
    std::fs::remove_dir_all(&gone).unwrap();

    let r = ok(env.run(&["worktree", "list", "--json"]));
    let list = json(&r)["worktrees"].clone();
    let mut expected = vec![
        done.clone(),
        failed.clone(),
        dirty.clone(),
        "stray".into(),
        "gone".into(),
    ];
    expected.sort();
    assert_eq!(names(&list), expected);
    let by = |n: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by(&done)["status"], "complete");
    assert_eq!(by(&done)["branch"], "td/done");
    assert_eq!(by(&done)["head"].as_str().unwrap().len(), 40);
    assert_eq!(by(&dirty)["dirty"], true);
    assert_eq!(by(&done)["dirty"], false);
    assert_eq!(by("gone")["missing"], true);
    assert_eq!(by("stray")["status"], Value::Null);
    // The base is ignored by git in the user's checkout.
    assert_eq!(git(&env.repo(), &["status", "--porcelain", "--", base]), "");

    let text = ok(env.run(&["worktree", "list"])).stdout;
    assert!(
        text.contains("uncommitted changes") && text.contains("missing"),
        "{text}"
    );

    let r = ok(env.run(&["worktree", "prune", "--json"]));
    let report = json(&r);
    let mut removed = vec![done.clone(), "gone".into()];
    removed.sort();
    assert_eq!(names(&report["removed"]), removed);
    let mut kept = vec![failed.clone(), dirty.clone(), "stray".into()];
    kept.sort();
    assert_eq!(names(&report["kept"]), kept);
    let reason = |n: &str| {
        report["kept"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(reason(&failed).contains("failed"), "{report}");
    assert!(reason(&dirty).contains("uncommitted"), "{report}");
    assert!(reason("stray").contains("no record"), "{report}");
    assert!(!env.repo().join(base).join(&done).exists());
    assert!(dirty_wt.join("README.md").exists() && failed_wt.exists() && stray.exists());
    // Branches stay.
    assert!(!git(&env.repo(), &["branch", "--list", "td/done"]).is_empty());

    let r = ok(env.run(&["worktree", "prune", "--force"]));
    assert!(
        r.stdout.contains(&format!("removed {dirty}")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("removed stray"), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("kept    {failed}")),
        "{}",
        r.stdout
    );
    assert!(failed_wt.exists() && !dirty_wt.exists() && !stray.exists());
}

#[test]
fn the_worktrees_dir_setting_is_used() {
    let env = Env::new();
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "worktrees-dir: trees\n",
    )
    .unwrap();
    assert_eq!(env.run(&["trust"]).code, 0, "applies once trusted");
    add_worktree(&env, "trees", "x", "td/x");
    let list = json(&ok(env.run(&["worktree", "list", "--json"])))["worktrees"].clone();
    assert_eq!(names(&list), ["x"]);
    assert_eq!(
        list[0]["path"].as_str().unwrap(),
        env.repo().join("trees/x").to_str().unwrap()
    );
    let exclude = std::fs::read_to_string(env.repo().join(".git/info/exclude")).unwrap();
    assert!(exclude.lines().any(|l| l == "/trees/"), "{exclude}");
    // The flag wins over the file.
    let r = ok(env.run(&["worktree", "list", "--worktrees-dir", "elsewhere"]));
    assert!(r.stdout.contains("no worktrees under"), "{}", r.stdout);
    let help = ok(env.run(&["worktree", "--help"])).stdout;
    assert!(
        help.contains("Examples:") && help.contains("prune --force"),
        "{help}"
    );
}
