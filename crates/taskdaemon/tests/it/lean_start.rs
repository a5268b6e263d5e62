//! A lean start (issue 16, item 4): no git fact is asked of git that the files say. Counted with
//! `GIT_TRACE` around whole commands: `run` up to the end of its first iteration, and the
//! store commands `plan new`, `show`, `submit`, `list`, `status`.

use crate::harness::{Env, git};

/// The git commands one invocation of the binary ran (one line each, as `GIT_TRACE`
/// prints them after `built-in: `), and how it exited.
fn traced(env: &Env, args: &[&str]) -> (Vec<String>, i32, String) {
    let trace = env.root().join(format!("trace-{}", args.join("-").len()));
    let _ = std::fs::remove_file(&trace);
    let r = env.run_with(
        &[("GIT_TRACE".into(), trace.to_string_lossy().into_owned())],
        args,
    );
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    let calls = text
        .lines()
        .filter_map(|l| {
            l.split_once("trace: built-in: ")
                .map(|(_, c)| c.to_string())
        })
        .collect();
    (calls, r.code, format!("{}{}", r.stdout, r.stderr))
}

/// No git command twice, and at most `max` of them. The repository's facts come from its
/// files (`git/discover.rs`): no `rev-parse` in a plain work tree.
fn lean(what: &str, calls: &[String], max: usize) {
    let mut seen = std::collections::BTreeSet::new();
    for c in calls {
        assert!(seen.insert(c), "{what}: `{c}` ran twice: {calls:#?}");
        assert!(!c.starts_with("git rev-parse"), "{what}: {calls:#?}");
    }
    assert!(
        calls.len() <= max,
        "{what}: {} git processes (at most {max}): {calls:#?}",
        calls.len()
    );
}

#[test]
fn run_to_its_first_iteration_runs_no_git() {
    let env = Env::new();
    let (calls, code, out) = traced(
        &env,
        &[
            "run",
            "lean start",
            "--agent",
            "cmd:git --version",
            "--validate",
            "true",
            "--completion-promise",
            "NEVER",
            "--max-stuck",
            "0",
            "--max-iterations",
            "1",
            "--json",
        ],
    );
    assert_eq!(code, 1, "max iterations reached: {out}");
    assert!(out.contains("iteration_finished"), "{out}");
    // The bash floor of such a run is 3 (top level, HEAD before and after); every fact
    // (top level, git dirs, index, info/exclude) comes from the repository's files and
    // HEAD from the ref files. The one git of the harness is the new run's look for the
    // user's uncommitted work (saved as `run-N-pre` when there is some, issue 37 item 10),
    // which no file answers; the other is the agent's, which shows the trace works.
    assert_eq!(
        calls,
        [
            "git status --porcelain -z --untracked-files=all --no-renames --ignore-submodules=dirty",
            "git version"
        ],
        "{out}"
    );
    lean("run", &calls, 2);
}

#[test]
fn run_reads_head_from_packed_refs_and_a_detached_head() {
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["pack-refs", "--all"]);
    let args = [
        "run",
        "packed",
        "--agent",
        "cmd:git commit -q --allow-empty -m agent",
        "--validate",
        "true",
        "--completion-promise",
        "NEVER",
        "--max-iterations",
        "1",
        "--json",
    ];
    let (calls, code, out) = traced(&env, &args);
    assert_eq!(code, 1, "{out}");
    // The agent's commit was seen: the iteration names it.
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    assert!(out.contains(&commit.trim()[..12]), "{out}");
    // The trace works: the agent's own commit is in it.
    assert!(
        calls.iter().any(|c| c.starts_with("git commit")),
        "{calls:#?}"
    );
    // The agent's commit and git's maintenance after it; the harness's look for
    // uncommitted work at the start and, as HEAD moved, for secret-looking files the
    // run's commits add.
    lean("run (packed refs)", &calls, 4);
    git(&repo, &["checkout", "-q", "--detach"]);
    let (_, code, out) = traced(&env, &["archive"]);
    assert_eq!(code, 0, "{out}");
    let (calls, code, out) = traced(&env, &args);
    assert_eq!(code, 1, "{out}");
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    assert!(out.contains(&commit.trim()[..12]), "detached: {out}");
    lean("run (detached)", &calls, 4);
}

#[test]
fn store_commands_run_no_git() {
    let env = Env::new();
    let (calls, code, out) = traced(&env, &["plan", "new", "lean plan", "--json"]);
    assert_eq!(code, 0, "{out}");
    lean("plan new", &calls, 0);
    let id = out
        .split('"')
        .find(|w| w.ends_with("-plan-lean-plan"))
        .unwrap_or_else(|| panic!("no id in {out}"))
        .to_string();
    let (calls, code, out) = traced(&env, &["show", &id[..6]]);
    assert_eq!(code, 0, "{out}");
    lean("show", &calls, 0);
    // submit: the merge target is the checked-out branch, read from HEAD, and it exists.
    let (calls, code, out) = traced(&env, &["submit", "plan", "second idea"]);
    assert_eq!(code, 0, "{out}");
    lean("submit", &calls, 0);
    let (calls, code, out) = traced(&env, &["list"]);
    assert_eq!(code, 0, "{out}");
    lean("list", &calls, 0);
    let (calls, code, out) = traced(&env, &["status"]);
    assert_eq!(code, 0, "{out}");
    // One: which of the plan's records git has not got (a person reads `status`; the
    // work trees of foreground loops come from git's files).
    lean("status", &calls, 1);
}

#[test]
fn submit_still_refuses_a_missing_target_and_a_detached_head() {
    let env = Env::new();
    let r = env.run(&["submit", "plan", "idea", "--target", "nope"]);
    assert_eq!(r.code, 64, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("`nope` does not exist"), "{}", r.stderr);
    git(&env.repo(), &["checkout", "-q", "--detach"]);
    let r = env.run(&["submit", "plan", "idea"]);
    assert_eq!(r.code, 64, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("detached HEAD"), "{}", r.stderr);
    // A packed branch is found.
    git(&env.repo(), &["branch", "packed"]);
    git(&env.repo(), &["pack-refs", "--all"]);
    let r = env.run(&["submit", "plan", "idea", "--target", "packed"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

/// A new run lists `.ralph/logs/` once, whatever the project's history: the earlier run's
/// logs go to `logs/runs/<id>/` and the temporary files of killed writes are removed in that
/// one listing, and said with the run's other warnings (also after a run that finished);
/// a resumed run removes them too.
#[test]
fn a_new_run_sets_the_earlier_logs_aside_and_removes_their_temp_files_at_once() {
    let env = Env::new();
    // `until_done`: validation passing ends the run; else the loop waits for a promise
    // that never comes and a limit stops it (resumable: the next run replaces it).
    let run = |task: &str, until_done: bool| {
        let mut args = vec!["run", task, "--agent", "cmd:true", "--validate", "true"];
        if !until_done {
            args.extend(["--completion-promise", "NEVER", "--max-stuck", "0"]);
        }
        args.extend(["--max-iterations", "1"]);
        env.run(&args)
    };
    let logs = env.repo().join(".ralph/logs");
    let temps = [
        logs.join(".tmp-killed"),
        env.repo().join(".ralph/.tmp-killed"),
    ];
    let plant = || {
        for t in &temps {
            std::fs::write(t, "half a write").unwrap();
        }
    };
    // After a run that finished, and after one a limit stopped (which is replaced).
    for (until_done, code) in [(true, 0), (false, 1)] {
        let before = run("earlier", until_done);
        assert_eq!(before.code, code, "{}", before.stderr);
        plant();
        let next = run("next", false);
        assert!(
            next.stderr
                .contains("removed 2 temporary file(s) of writes a stopped run left unfinished"),
            "{until_done}: {}",
            next.stderr
        );
        assert!(
            temps.iter().all(|t| !t.exists()),
            "{until_done}: {}",
            next.stderr
        );
    }
    // Out of `logs/` itself, which the next start lists again.
    let dirs: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs, ["runs"]);
    let aside = std::fs::read_dir(logs.join("runs")).unwrap().count();
    assert_eq!(aside, 3, "the earlier runs' logs, set aside");
    assert!(
        logs.join("iteration-001.log").exists(),
        "the last run's own"
    );
    // `logs <id>` finds an earlier run there.
    let first = std::fs::read_dir(logs.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
        .unwrap();
    let shown = env.run(&["logs", &first]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains("iteration-001.log"),
        "{}",
        shown.stdout
    );

    // Resumed (no task): nothing is set aside, the temp files still go.
    plant();
    let resumed = env.run(&["run", "--resume", "--max-iterations", "2"]);
    assert!(temps.iter().all(|t| !t.exists()), "{}", resumed.stderr);
    assert!(
        resumed.stderr.contains("removed 2 temporary file(s)"),
        "{}",
        resumed.stderr
    );
}
