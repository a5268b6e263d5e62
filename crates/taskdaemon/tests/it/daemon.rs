//! The daemon end to end: plan → specs → phases in worktrees → merged, crash recovery after
//! SIGKILL, and a merge conflict resolved by a person. Real git, real processes; the agent
//! is a small shell program that plays each loop type.

use crate::harness;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Env, git, pid_alive};
use serde_json::Value;

/// The fake agent. Plan: writes the plan. Spec: writes the documents of `SPECS` (a file of
/// `name|deps|phases[|validate]` lines; `NAME` in a validation becomes the spec's name).
/// Phase: records start/end times, makes one commit per iteration, and is done at
/// iteration `$DONE_AT` (default 1); with `$NO_COMMIT` it only claims COMPLETE.
const AGENT: &str = r#"#!/bin/sh
log="$TD_TEST_DIR/agent.log"
case "$TASKDAEMON_LOOP" in
plan)
  printf '# Widgets\n\n## Goals\nwidgets, pass %s\n\n## Approach\nspecs\n' "$TASKDAEMON_REVIEW_PASS" > "$TASKDAEMON_PLAN_FILE"
  ;;
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  n=0
  while IFS='|' read -r name deps phases validate; do
    n=$((n+1))
    printf -- '---\ntitle: %s\ndeps: [%s]\nphases: [%s]\nvalidate: %s\n---\nBuild %s.\n' \
      "$name" "$deps" "$phases" "$(echo "${validate:-${SPEC_VALIDATE:-true}}" | sed "s/NAME/$name/g")" "$name" > "$TASKDAEMON_SPECS_DIR/0$n-$name.md"
  done < "$TD_TEST_DIR/specs.txt"
  ;;
phase)
  spec=$(echo "$TASKDAEMON_SPEC_ID" | sed 's/^[0-9a-f]*-spec-//')
  echo "$$" >> "$TD_TEST_DIR/pids"
  echo "start $(date +%s%N) $spec $TASKDAEMON_PHASE_INDEX $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID" >> "$log"
  if [ -n "$NO_COMMIT" ]; then echo "<promise>COMPLETE</promise>"; exit 0; fi
  sleep "${PHASE_SLEEP:-1}" &
  echo "$!" >> "$TD_TEST_DIR/pids"
  wait
  f="$spec-$TASKDAEMON_PHASE_INDEX.txt"
  echo "iteration $TASKDAEMON_ITERATION" >> "$f"
  if [ -n "$SHARED" ]; then echo "$spec was here" > shared.txt; fi
  if [ "$TASKDAEMON_ITERATION" -ge "${DONE_AT:-1}" ]; then echo done > "$spec-$TASKDAEMON_PHASE_INDEX.done"; fi
  git add -A && git commit -qm "$spec phase $TASKDAEMON_PHASE_NUMBER iteration $TASKDAEMON_ITERATION"
  echo "end $(date +%s%N) $spec $TASKDAEMON_PHASE_INDEX $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID" >> "$log"
  echo "<promise>COMPLETE</promise>"
  ;;
ralph)
  echo "$$" >> "$TD_TEST_DIR/pids"
  if [ -n "$SETSID_SLEEPER" ]; then
    setsid sh -c 'echo $$ >> "$TD_TEST_DIR/pids"; echo $$ >> "$TD_TEST_DIR/escaped"; exec sleep 600' &
  fi
  echo "ralph start $TASKDAEMON_ITERATION $$" >> "$log"
  sleep "${RALPH_SLEEP:-30}" &
  echo "$!" >> "$TD_TEST_DIR/pids"
  wait "$!"
  echo "iteration $TASKDAEMON_ITERATION" >> ralph.txt
  git add -A && git commit -qm "ralph iteration $TASKDAEMON_ITERATION"
  git rev-parse HEAD >> "$TD_TEST_DIR/commits"
  ;;
esac
"#;

struct Daemon<'a> {
    env: &'a Env,
    vars: Vec<(String, String)>,
}

impl<'a> Daemon<'a> {
    fn new(env: &'a Env, specs: &str, vars: &[(&str, &str)]) -> Daemon<'a> {
        let agent = env.root().join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(env.root().join("specs.txt"), specs).unwrap();
        let mut v: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.push(("TD_TEST_DIR".into(), env.root().display().to_string()));
        v.push((
            "TASKDAEMON_AGENT".into(),
            format!("cmd:{}", agent.display()),
        ));
        Daemon { env, vars: v }
    }

    fn run(&self, args: &[&str]) -> harness::Run {
        self.env.run_with(&self.vars, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok_with(&self.vars, args)
    }

    fn start(&self, max_loops: u32) {
        self.ok(&[
            "daemon",
            "start",
            "--max-loops",
            &max_loops.to_string(),
            "--tick",
            "0.2",
        ]);
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).unwrap()
    }

    fn dir(&self) -> PathBuf {
        self.env.repo().join(".git/taskdaemon/daemon")
    }

    fn pid(&self) -> i32 {
        let info: Value =
            serde_json::from_str(&std::fs::read_to_string(self.dir().join("info.json")).unwrap())
                .unwrap();
        info["pid"].as_i64().unwrap() as i32
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("daemon.log")).unwrap_or_default()
    }

    /// Wait until `done(status)`, or fail with the status and the daemon's log.
    fn wait_until(&self, limit: Duration, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        harness::wait_for_status(
            limit,
            what,
            || self.status(),
            || format!("log:\n{}", self.log()),
            done,
        )
    }

    fn stop(&self) {
        self.ok(&["daemon", "stop"]);
    }
}

fn plan_status(s: &Value) -> &str {
    s["plans"][0]["status"].as_str().unwrap_or("")
}

/// Every file of the user's checkout outside .git/ and .taskdaemon/, with its bytes; the
/// index; HEAD.
fn checkout_state(repo: &Path) -> (BTreeMap<String, Vec<u8>>, Vec<u8>, String) {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" || rel == ".taskdaemon" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(&p, root, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(repo, repo, &mut files);
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    let head = std::fs::read_to_string(repo.join(".git/HEAD")).unwrap();
    (files, index, head)
}

/// (spec, phase) → (start ns, end ns) of the last iteration of each phase.
fn phase_times(env: &Env) -> BTreeMap<(String, String), (u128, u128)> {
    let text = std::fs::read_to_string(env.root().join("agent.log")).unwrap();
    let mut out: BTreeMap<(String, String), (u128, u128)> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with("ralph")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let key = (f[2].to_string(), f[3].to_string());
        let t: u128 = f[1].parse().unwrap();
        let e = out.entry(key).or_insert((0, 0));
        if f[0] == "start" {
            e.0 = t;
        } else {
            e.1 = t;
        }
    }
    out
}

#[test]
fn a_plan_fans_out_into_specs_built_in_parallel_by_dependency_and_merged_without_touching_the_checkout()
 {
    let env = Env::new();
    let repo = env.repo();
    // The person works on another branch, with staged, unstaged and untracked changes.
    git(&repo, &["checkout", "-qb", "wip"]);
    std::fs::write(repo.join("README.md"), "hello\nmy unsaved edit\n").unwrap();
    std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
    git(&repo, &["add", "staged.txt"]);
    std::fs::write(repo.join("scratch.txt"), "untracked\n").unwrap();
    let before = checkout_state(&repo);

    let d = Daemon::new(
        &env,
        "base||\"Phase 1: schema\", \"Phase 2: queries\"\nmiddle|base|\"Phase 1: api\"\ntop|middle|\"Phase 1: ui\"\nside||\"Phase 1: docs\"\n",
        &[],
    );
    let out = d.ok(&["submit", "plan", "build widgets", "--target", "main"]);
    assert!(out.contains("no daemon runs"), "{out}");
    d.start(3);
    let s = d.wait_until(Duration::from_secs(180), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    d.stop();

    // Four specs, all complete, each phase a complete run.
    let specs = s["plans"][0]["specs"].as_array().unwrap();
    assert_eq!(specs.len(), 4, "{s:#}");
    for sp in specs {
        assert_eq!(sp["status"], "complete", "{sp:#}");
        for r in sp["runs"].as_array().unwrap() {
            assert_eq!(r["status"], "complete", "{r:#}");
        }
    }
    // (The test clock is fixed, so records made together list in id order.)
    let runs = s["plans"][0]["runs"].as_array().unwrap();
    let mut plan_runs: Vec<&str> = runs
        .iter()
        .map(|r| r["loop_type"].as_str().unwrap())
        .collect();
    plan_runs.sort();
    assert_eq!(plan_runs, ["plan", "spec"]);
    let plan_run = runs.iter().find(|r| r["loop_type"] == "plan").unwrap();
    assert_eq!(plan_run["iteration"], 5, "five review passes");

    // Overlap where deps allow, order where they do not.
    let t = phase_times(&env);
    let get = |s: &str, p: &str| t[&(s.to_string(), p.to_string())];
    let (side, base0, base1) = (get("side", "0"), get("base", "0"), get("base", "1"));
    assert!(
        side.0 < base0.1 && base0.0 < side.1,
        "side and base ran one after the other: {t:?}"
    );
    assert!(
        base1.0 >= base0.1,
        "phase 2 started before phase 1 ended: {t:?}"
    );
    let (middle, top) = (get("middle", "0"), get("top", "0"));
    assert!(
        middle.0 >= base1.1,
        "middle started before base was done: {t:?}"
    );
    assert!(
        top.0 >= middle.1,
        "top started before middle was done: {t:?}"
    );

    // Everything is on main.
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "main"]);
    for f in [
        "base-0.txt",
        "base-1.txt",
        "middle-0.txt",
        "top-0.txt",
        "side-0.txt",
    ] {
        assert!(
            files.lines().any(|l| l == f),
            "{f} not merged into main:\n{files}"
        );
    }
    // The person's checkout: byte for byte as it was, still on wip.
    let after = checkout_state(&repo);
    assert_eq!(before.0, after.0, "files of the checkout changed");
    assert_eq!(before.1, after.1, "the index changed");
    assert_eq!(before.2, after.2, "HEAD changed");
    assert!(git(&repo, &["status", "--porcelain"]).contains("M README.md"));
    // Worktrees of merged specs are gone; their logs are kept.
    let wts = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!wts.contains("spec-"), "{wts}");
    let kept = std::fs::read_dir(d.dir().join("logs")).unwrap().count();
    assert!(
        kept >= 5,
        "kept logs of the plan's and the 4 specs' worktrees: {kept}"
    );
}

/// Pids listed in the agents' pid file.
fn recorded_pids(env: &Env) -> Vec<i32> {
    std::fs::read_to_string(env.root().join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Live processes whose environment carries this test's directory (agents, validations).
fn marked_processes(env: &Env) -> Vec<i32> {
    let mark = format!("TD_TEST_DIR={}", env.root().display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|kv| kv == mark.as_bytes()) && pid_alive(pid) {
            out.push(pid);
        }
    }
    out
}

fn is_daemon(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("--foreground"))
        .unwrap_or(false)
}

#[test]
fn a_daemon_killed_three_times_finishes_every_run_with_iterations_going_on_and_no_orphans() {
    let env = Env::new();
    let specs = (1..=6)
        .map(|i| format!("s{i}||\"Phase 1: part {i}\""))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let d = Daemon::new(
        &env,
        &specs,
        &[
            ("DONE_AT", "3"),
            ("PHASE_SLEEP", "1"),
            // Its own marker: with main checked out, merges are held and later specs start
            // from the held work, which carries the other specs' markers.
            ("SPEC_VALIDATE", "test -f NAME-0.done"),
        ],
    );
    d.ok(&["submit", "plan", "six parts"]);
    d.start(3);
    let mut kills = 0;
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    while kills < 3 {
        std::thread::sleep(Duration::from_millis(900 + rng.u64(..600)));
        let s = d.status();
        assert_ne!(
            plan_status(&s),
            "complete",
            "finished before the third kill"
        );
        let pid = d.pid();
        // The restart's ending of what the dead daemon's records name is tested: its
        // watchdog (which ends the agents at once) goes first, as when a machine dies.
        crate::harness::kill_watchdogs(&env);
        crate::harness::sigkill(pid);
        kills += 1;
        let before = recorded_pids(&env);
        d.start(3);
        // The new daemon answers only after ending what the dead one left.
        let alive: Vec<i32> = before.iter().copied().filter(|p| pid_alive(*p)).collect();
        let orphans: Vec<i32> = alive.iter().copied().filter(|p| !is_daemon(*p)).collect();
        assert!(
            orphans.is_empty(),
            "agent processes of the killed daemon still run after restart {kills}: {orphans:?}\nlog:\n{}",
            d.log()
        );
    }
    let s = d.wait_until(Duration::from_secs(240), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    d.stop();
    let log = d.log();
    assert!(log.contains("resuming run"), "{log}");
    assert!(
        log.contains("leftover process"),
        "no kill hit a running agent:\n{log}"
    );

    // Nothing lost, nothing doubled: 6 specs, each exactly one phase run, complete at iteration 3.
    let specs = s["plans"][0]["specs"].as_array().unwrap();
    assert_eq!(specs.len(), 6, "{s:#}");
    let runs_total: usize = specs
        .iter()
        .map(|sp| sp["runs"].as_array().unwrap().len())
        .sum();
    assert_eq!(runs_total, 6, "{s:#}");
    assert_eq!(s["plans"][0]["runs"].as_array().unwrap().len(), 2, "{s:#}");
    let agent_log = std::fs::read_to_string(env.root().join("agent.log")).unwrap();
    for sp in specs {
        assert_eq!(sp["status"], "complete", "{sp:#}");
        let run = &sp["runs"][0];
        let id = run["id"].as_str().unwrap();
        assert_eq!(run["status"], "complete");
        assert_eq!(run["iteration"], 3, "store: {run:#}");
        // What the agent saw: iterations never go back (a killed one is redone, never from 1).
        let seen: Vec<u32> = agent_log
            .lines()
            .filter(|l| l.starts_with("start") && l.ends_with(id))
            .map(|l| l.split_whitespace().nth(4).unwrap().parse().unwrap())
            .collect();
        assert_eq!(seen.first(), Some(&1), "{id}: {seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0] <= w[1]),
            "{id} went back: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&3), "{id}: {seen:?}");
        // summary.csv (kept from the removed worktree) agrees.
        let spec_id = sp["id"].as_str().unwrap();
        let kept = d.dir().join("logs").join(spec_id);
        let csv = std::fs::read_to_string(kept.join("logs/summary.csv")).unwrap();
        let its: Vec<u32> = csv
            .lines()
            .skip(1)
            .filter(|l| l.contains(id))
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(its.last(), Some(&3), "{id} summary.csv: {csv}");
        assert!(
            its.windows(2).all(|w| w[0] <= w[1]),
            "{id} summary.csv went back: {csv}"
        );
    }
    assert!(
        marked_processes(&env).is_empty(),
        "processes left: {:?}",
        marked_processes(&env)
    );
}

#[test]
fn a_merge_conflict_blocks_the_spec_with_its_files_and_resume_finishes_it_once_resolved() {
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["checkout", "-qb", "wip"]);
    let d = Daemon::new(
        &env,
        "alpha||\"Phase 1: a\"\nbeta||\"Phase 1: b\"\n",
        &[("SHARED", "1")],
    );
    d.ok(&[
        "submit",
        "plan",
        "two edits of one file",
        "--target",
        "main",
    ]);
    d.start(2);
    let s = d.wait_until(Duration::from_secs(120), "a spec blocking", |s| {
        s["plans"][0]["specs"]
            .as_array()
            .is_some_and(|v| v.iter().any(|sp| sp["status"] == "blocked"))
    });
    let specs = s["plans"][0]["specs"].as_array().unwrap();
    let blocked = specs.iter().find(|sp| sp["status"] == "blocked").unwrap();
    let other = specs.iter().find(|sp| sp["status"] != "blocked").unwrap();
    let note = blocked["note"].as_str().unwrap();
    assert!(
        note.contains("merge conflict with main in: shared.txt"),
        "{note}"
    );
    assert!(note.contains("taskdaemon resume"), "{note}");
    let id = blocked["id"].as_str().unwrap();
    // Both branches intact: main has the other spec's work, the spec branch its own.
    let branch = format!("taskdaemon/{id}");
    let wt = repo.join(".taskdaemon/worktrees").join(id);
    assert_eq!(
        git(&repo, &["rev-parse", &branch]),
        git(&wt, &["rev-parse", "HEAD"])
    );
    let main_shared = git(&repo, &["show", "main:shared.txt"]);
    let other_name = other["title"].as_str().unwrap();
    assert!(main_shared.contains(other_name), "{main_shared}");
    let shown = d.ok(&["status"]);
    assert!(shown.contains("merge conflict"), "{shown}");

    // The person resolves it in the spec's worktree, then resumes.
    let in_wt = |args: &[&str]| {
        std::process::Command::new("git")
            .env("HOME", env.home())
            .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .arg("-C")
            .arg(&wt)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(
        !in_wt(&["merge", "main"]).status.success(),
        "the merge should conflict"
    );
    std::fs::write(wt.join("shared.txt"), "both were here\n").unwrap();
    assert!(in_wt(&["add", "shared.txt"]).status.success());
    let out = in_wt(&["commit", "-qm", "resolve shared.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = d.ok(&["resume", id]);
    assert!(out.contains("blocked -> running"), "{out}");
    d.wait_until(Duration::from_secs(60), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    d.stop();
    assert_eq!(git(&repo, &["show", "main:shared.txt"]), "both were here\n");
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        files.contains("alpha-0.txt") && files.contains("beta-0.txt"),
        "{files}"
    );
}

#[test]
fn a_phase_whose_agent_commits_nothing_does_not_complete_its_spec() {
    let env = Env::new();
    let d = Daemon::new(
        &env,
        "idle||\"Phase 1: claims only\"\n",
        &[("PHASE_SLEEP", "0"), ("NO_COMMIT", "1")],
    );
    d.ok(&["submit", "plan", "nothing done", "--target", "main"]);
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "max-iterations: 2\n",
    )
    .unwrap();
    d.start(2);
    let s = d.wait_until(Duration::from_secs(120), "the idle spec ending", |s| {
        s["plans"][0]["specs"].as_array().is_some_and(|v| {
            v.iter().any(|sp| {
                sp["title"] == "idle" && sp["status"] != "pending" && sp["status"] != "running"
            })
        })
    });
    d.stop();
    let spec = &s["plans"][0]["specs"][0];
    assert_eq!(spec["status"], "failed", "{s:#}");
    let main_log = git(&env.repo(), &["log", "--format=%s", "main"]);
    assert!(
        !main_log.contains("idle phase"),
        "nothing merged: {main_log}"
    );
    let shown = d.ok(&["status"]);
    assert!(shown.contains("LIMIT"), "{shown}");
}

#[test]
fn a_failed_spec_leaves_its_dependents_blocked_with_the_reason() {
    let env = Env::new();
    let d = Daemon::new(
        &env,
        "broken||\"Phase 1: never passes\"|false\nafter|broken|\"Phase 1: waits\"\nfree||\"Phase 1: independent\"\n",
        &[("PHASE_SLEEP", "0")],
    );
    d.ok(&["submit", "plan", "one breaks", "--target", "main"]);
    // A small iteration budget so the broken spec fails fast.
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "max-iterations: 2\n",
    )
    .unwrap();
    d.start(3);
    let s = d.wait_until(Duration::from_secs(120), "the dependent blocking", |s| {
        s["plans"][0]["specs"].as_array().is_some_and(|v| {
            v.iter()
                .any(|sp| sp["title"] == "after" && sp["status"] == "blocked")
                && v.iter()
                    .any(|sp| sp["title"] == "free" && sp["status"] == "complete")
        })
    });
    d.stop();
    let specs = s["plans"][0]["specs"].as_array().unwrap();
    let get = |t: &str| specs.iter().find(|sp| sp["title"] == t).unwrap();
    assert_eq!(get("broken")["status"], "failed", "{s:#}");
    let note = get("after")["note"].as_str().unwrap();
    let broken_id = get("broken")["id"].as_str().unwrap();
    assert_eq!(note, format!("dep {broken_id} failed"), "{s:#}");
    assert!(
        get("after")["runs"].as_array().unwrap().is_empty(),
        "it never started"
    );
    let shown = d.ok(&["status"]);
    assert!(
        shown.contains(&format!("dep {broken_id} failed")),
        "{shown}"
    );
    assert!(shown.contains("LIMIT"), "the failed run says why: {shown}");
    // The failed spec's worktree is kept for inspection; the merged one is gone.
    let listed: Value = serde_json::from_str(&d.ok(&["worktree", "list", "--json"])).unwrap();
    let names: Vec<&str> = listed["worktrees"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert!(names.contains(&broken_id), "{listed:#}");
    let free_id = get("free")["id"].as_str().unwrap();
    assert!(!names.contains(&free_id), "{listed:#}");
}

#[test]
fn pause_resume_and_cancel_act_on_a_running_loop() {
    let env = Env::new();
    let d = Daemon::new(&env, "", &[]);
    let out = d.ok(&[
        "submit",
        "ralph",
        "a long task",
        "--validate",
        "false",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let id = v["created"][0]["id"].as_str().unwrap().to_string();
    d.start(2);
    let log = env.root().join("agent.log");
    let wait_log = |n: usize| {
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let starts: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("ralph start"))
                .map(String::from)
                .collect();
            if starts.len() >= n {
                return starts;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "agent start {n} never came\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let first = wait_log(1);
    let pid1: i32 = first[0].split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(pid_alive(pid1));

    let out = d.ok(&["pause", "--force", &id]);
    assert!(out.contains("pausing now"), "{out}");
    let s = d.wait_until(Duration::from_secs(30), "the run pausing", |s| {
        s["runs"][0]["status"] == "paused"
    });
    assert!(!pid_alive(pid1), "the agent of a paused run still runs");
    let worktree = PathBuf::from(s["runs"][0]["worktree"].as_str().unwrap());

    d.ok(&["resume", &id]);
    let second = wait_log(2);
    // The interrupted iteration is not used up: it runs again, in the same worktree.
    assert_eq!(second[1].split_whitespace().nth(2), Some("1"), "{second:?}");
    let pid2: i32 = second[1]
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();

    let out = d.ok(&["cancel", &id]);
    assert!(out.contains("cancelling"), "{out}");
    let s = d.wait_until(Duration::from_secs(30), "the run stopping", |s| {
        s["runs"][0]["status"] == "stopped"
    });
    assert!(!pid_alive(pid2), "the agent of a cancelled run still runs");
    assert_eq!(s["runs"][0]["note"], "cancelled by a person");
    assert_eq!(
        s["runs"][0]["worktree"].as_str().map(PathBuf::from),
        Some(worktree.clone())
    );
    let log1 = std::fs::read_to_string(worktree.join(".ralph/logs/iteration-001.log")).unwrap();
    assert_eq!(
        log1.matches("iteration 1/").count(),
        2,
        "the log keeps both runs of iteration 1: {log1}"
    );
    let logs = d.ok(&["logs", &id]);
    assert!(logs.contains("iteration-001.log"), "{logs}");
    // A second cancel is refused with the reason.
    let r = d.run(&["cancel", &id]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("it is stopped"), "{}", r.stderr);
    d.stop();
    assert!(marked_processes(&env).is_empty());
}

/// The `ralph start` lines of the agent's log, once there are `n`.
fn ralph_starts(d: &Daemon, n: usize) -> Vec<String> {
    let log = d.env.root().join("agent.log");
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let starts: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("ralph start"))
            .map(String::from)
            .collect();
        if starts.len() >= n {
            return starts;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "agent start {n} never came\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn commits_made(env: &Env) -> usize {
    std::fs::read_to_string(env.root().join("commits"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn pause_waits_for_the_iteration_to_end_and_a_second_pause_stops_it_at_once() {
    let env = Env::new();
    let d = Daemon::new(&env, "", &[("RALPH_SLEEP", "2")]);
    let id = submit_ralph(&d, "false");
    d.start(1);
    let first = ralph_starts(&d, 1);
    let pid1: i32 = first[0].split_whitespace().nth(3).unwrap().parse().unwrap();
    let out = d.ok(&["pause", &id]);
    assert!(out.contains("pauses when iteration 1 ends"), "{out}");
    let s = d.status();
    let run = &s["runs"][0];
    assert_eq!(run["status"], "running", "{s:#}");
    assert!(
        run["note"].as_str().unwrap_or("").starts_with("pausing"),
        "{s:#}"
    );
    d.wait_until(Duration::from_secs(30), "the run paused", |s| {
        s["runs"][0]["status"] == "paused"
    });
    // The iteration ran to its end: its commit is there, its agent ended on its own.
    assert_eq!(commits_made(&env), 1, "{}", d.log());
    assert!(!pid_alive(pid1));
    let s = d.status();
    assert_eq!(s["runs"][0]["iteration"], 1, "{s:#}");
    assert!(s["runs"][0]["note"].is_null(), "{s:#}");

    // Resumed, it goes on at the next iteration: the first one was not lost.
    d.ok(&["resume", &id]);
    let second = ralph_starts(&d, 2);
    assert_eq!(second[1].split_whitespace().nth(2), Some("2"), "{second:?}");
    // Pausing it twice stops it at once: its iteration is done again on resume.
    d.ok(&["pause", &id]);
    let out = d.ok(&["pause", &id]);
    assert!(out.contains("pausing now"), "{out}");
    d.wait_until(Duration::from_secs(30), "the run paused at once", |s| {
        s["runs"][0]["status"] == "paused"
    });
    assert_eq!(commits_made(&env), 1, "the stopped iteration committed");
    d.ok(&["resume", &id]);
    let third = ralph_starts(&d, 3);
    assert_eq!(third[2].split_whitespace().nth(2), Some("2"), "{third:?}");
    d.ok(&["cancel", &id]);
    d.wait_until(Duration::from_secs(30), "the run stopping", |s| {
        s["runs"][0]["status"] == "stopped"
    });
    d.stop();
}

#[test]
fn a_target_checked_out_with_local_edits_is_never_rewritten_and_the_work_is_held() {
    let env = Env::new();
    let repo = env.repo();
    // The person is on main, the target, with an uncommitted edit.
    std::fs::write(repo.join("README.md"), "hello\nmine, not committed\n").unwrap();
    let before = checkout_state(&repo);
    let main_before = git(&repo, &["rev-parse", "main"]);
    let d = Daemon::new(
        &env,
        "base||\"Phase 1: base\"\nnext|base|\"Phase 1: next\"\n",
        &[],
    );
    d.ok(&["submit", "plan", "held work"]);
    d.start(2);
    let s = d.wait_until(Duration::from_secs(120), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    d.stop();
    for sp in s["plans"][0]["specs"].as_array().unwrap() {
        let note = sp["note"].as_str().unwrap_or("");
        assert!(
            note.starts_with("held on taskdaemon/integration/main: main is checked out in"),
            "{sp:#}"
        );
    }
    assert_eq!(
        git(&repo, &["rev-parse", "main"]),
        main_before,
        "main moved"
    );
    assert_eq!(checkout_state(&repo), before, "the checkout changed");
    // Both specs are on the integration branch, `next` built on top of `base`.
    let files = git(
        &repo,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            "taskdaemon/integration/main",
        ],
    );
    assert!(
        files.contains("base-0.txt") && files.contains("next-0.txt"),
        "{files}"
    );
    let log = git(
        &repo,
        &["log", "--format=%H %s", "taskdaemon/integration/main"],
    );
    let next = log
        .lines()
        .find(|l| {
            l.split_once(' ')
                .is_some_and(|(_, s)| s.starts_with("next "))
        })
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    // `next` started from the held work, so its own commit already has base's file.
    git(&repo, &["cat-file", "-e", &format!("{next}:base-0.txt")]);
}

#[test]
fn submit_checks_plan_and_spec_documents_and_queues_them() {
    let env = Env::new();
    let d = Daemon::new(&env, "", &[]);
    // Documents live in the repository: records name only paths inside it.
    let dir = env.repo().join("docs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    // A plan document that does not check is refused with its problems.
    std::fs::write(dir.join("bad-plan.md"), "no title here\n").unwrap();
    let r = d.run(&["submit", "plan", "--file", &path("bad-plan.md")]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("no title") && r.stderr.contains("hint: `taskdaemon check-doc plan"),
        "{}",
        r.stderr
    );
    // A good one goes straight to its spec loop.
    std::fs::write(dir.join("plan.md"), "# Widgets\n\n## Goals\nwidgets\n").unwrap();
    let out = d.ok(&[
        "submit",
        "plan",
        "--file",
        &path("plan.md"),
        "--priority",
        "3",
    ]);
    assert!(
        out.contains("no daemon runs: start one with `taskdaemon daemon start`"),
        "{out}"
    );
    // Ready: the daemon's cascade queues its spec run (tests/it/core_flow.rs).
    let s = d.status();
    assert_eq!(s["plans"][0]["status"], "ready", "{s:#}");
    // A spec document: front matter checked with file:line, then one spec record.
    std::fs::write(dir.join("bad.md"), "---\ntitle: X\nphses: [a]\n---\n").unwrap();
    let r = d.run(&["submit", "spec", &path("bad.md")]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("bad.md:") && r.stderr.contains("phses"),
        "{}",
        r.stderr
    );
    std::fs::write(
        dir.join("one.md"),
        "---\ntitle: One spec\nphases: [\"Phase 1: a\", \"Phase 2: b\"]\n---\nbody\n",
    )
    .unwrap();
    let out = d.ok(&["submit", "spec", &path("one.md"), "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let spec = v["created"].as_array().unwrap().last().unwrap();
    assert_eq!(spec["title"], "One spec");
    assert_eq!(spec["phases"].as_array().unwrap().len(), 2);
    // --agent has no run to go to for a lone spec: refused with what to do instead.
    let r = d.run(&["submit", "spec", &path("one.md"), "--agent", "cmd:true"]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("daemon start --agent"), "{}", r.stderr);
    // A target branch that does not exist.
    let r = d.run(&["submit", "ralph", "x", "--target", "nope"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("target branch `nope` does not exist"),
        "{}",
        r.stderr
    );
}

fn wait_for_lines(p: &Path, n: usize, what: &str, d: &Daemon) -> Vec<String> {
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{what} never came\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn submit_ralph(d: &Daemon, validate: &str) -> String {
    let out = d.ok(&[
        "submit",
        "ralph",
        "a task",
        "--validate",
        validate,
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["created"][0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_setsid_sleeper_is_gone_after_the_iteration_after_cancel_and_after_daemon_stop() {
    let env = Env::new();
    let escaped = env.root().join("escaped");
    // While the daemon runs, the sleeper (re-parented to it) must be reaped too: not even
    // a zombie is left.
    let check = |d: &Daemon, n: usize, when: &str, reaped: bool| {
        let pids = wait_for_lines(&escaped, n, "the escaped sleeper", d);
        let pid: i32 = pids[n - 1].trim().parse().unwrap();
        let left = |pid: i32| match reaped {
            true => std::path::Path::new(&format!("/proc/{pid}")).exists(),
            false => pid_alive(pid),
        };
        let t = Instant::now();
        while left(pid) && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!left(pid), "the setsid sleeper {pid} is left after {when}");
    };
    // 1. The iteration ends (the agent exits after a moment); the run goes on.
    let d = Daemon::new(&env, "", &[("SETSID_SLEEPER", "1"), ("RALPH_SLEEP", "0.3")]);
    let id = submit_ralph(&d, "false");
    d.start(2);
    wait_for_lines(&escaped, 2, "the second iteration", &d);
    check(&d, 1, "the end of its iteration", true);
    // 2. Cancel.
    d.ok(&["cancel", &id]);
    d.wait_until(Duration::from_secs(30), "the run stopping", |s| {
        s["runs"][0]["status"] == "stopped"
    });
    let n = std::fs::read_to_string(&escaped).unwrap().lines().count();
    check(&d, n, "cancel", true);
    d.stop();
    // 3. Daemon stop, with the agent in a long iteration.
    let d = Daemon::new(&env, "", &[("SETSID_SLEEPER", "1"), ("RALPH_SLEEP", "600")]);
    submit_ralph(&d, "false");
    d.start(2);
    wait_for_lines(&escaped, n + 1, "the sleeper of the second run", &d);
    d.stop();
    check(&d, n + 1, "daemon stop", false);
    assert!(
        marked_processes(&env).is_empty(),
        "processes left: {:?}",
        marked_processes(&env)
    );
}

#[test]
fn a_daemon_killed_right_after_a_spawn_leaves_no_orphan_and_loses_no_commit() {
    let env = Env::new();
    // The harness pauses after each spawn, before it does anything else: the kill lands
    // in the moment the agent runs and nothing but its record exists.
    let paused = Daemon::new(
        &env,
        "",
        &[
            ("SETSID_SLEEPER", "1"),
            ("RALPH_SLEEP", "1"),
            ("TASKDAEMON_TEST_SPAWN_PAUSE_MS", "5000"),
        ],
    );
    let id = submit_ralph(&paused, "test $(git rev-list --count HEAD) -ge 4");
    paused.start(2);
    let log = env.root().join("agent.log");
    wait_for_lines(&log, 1, "the first agent", &paused);
    let pid = paused.pid();
    // What is tested is the next start's ending of what the records name: the watchdog,
    // which would end the tree at once, goes first (as when the machine itself died).
    crate::harness::kill_watchdogs(&env);
    crate::harness::sigkill(pid);
    let before = wait_for_lines(&env.root().join("escaped"), 1, "the sleeper", &paused);
    assert_eq!(before.len(), 1);
    let started = recorded_pids(&env);
    let d = Daemon::new(&env, "", &[("SETSID_SLEEPER", "1"), ("RALPH_SLEEP", "1")]);
    d.start(2);
    // The new daemon answers only after ending what the dead one left: the agent (dead
    // with its parent), its sleep, and the sleeper that left its session.
    let orphans: Vec<i32> = started
        .iter()
        .copied()
        .filter(|p| pid_alive(*p) && !is_daemon(*p))
        .collect();
    assert!(orphans.is_empty(), "orphans: {orphans:?}\n{}", d.log());
    assert!(d.log().contains("leftover process"), "{}", d.log());
    // The run goes on and completes; every commit an agent made is kept.
    d.wait_until(Duration::from_secs(120), "the run merging", |s| {
        s["runs"][0]["status"] == "complete" || s["runs"][0]["status"] == "merged"
    });
    d.stop();
    let commits = std::fs::read_to_string(env.root().join("commits")).unwrap();
    let target = if git(
        &env.repo(),
        &["branch", "--list", "taskdaemon/integration/main"],
    )
    .trim()
    .is_empty()
    {
        "main".to_string()
    } else {
        "taskdaemon/integration/main".to_string()
    };
    for c in commits.lines() {
        let merged = std::process::Command::new("git")
            .current_dir(env.repo())
            .args(["merge-base", "--is-ancestor", c, &target])
            .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
            .status()
            .unwrap();
        assert!(
            merged.success(),
            "commit {c} of run {id} is not on {target}"
        );
    }
    assert!(
        marked_processes(&env).is_empty(),
        "processes left: {:?}",
        marked_processes(&env)
    );
}

#[test]
fn a_finished_runs_worktree_left_by_a_stopped_daemon_is_removed_at_the_next_start_and_its_ralph_kept()
 {
    let env = Env::new();
    let d = Daemon::new(&env, "", &[]);
    let id = submit_ralph(&d, "true");
    d.start(1);
    d.wait_until(Duration::from_secs(60), "the run merged", |s| {
        s["runs"][0]["status"] == "complete"
    });
    let t = Instant::now();
    while !d.log().contains("removed (its .ralph/ is kept in") {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no removal:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.stop();
    // A daemon stopped while it removed the worktree: the worktree is still there.
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("removed (its .ralph/ is kept in"))
        .unwrap();
    let path = line
        .split("worktree ")
        .nth(1)
        .unwrap()
        .split(" removed")
        .next()
        .unwrap();
    let keep = line
        .rsplit("kept in ")
        .next()
        .unwrap()
        .trim_end_matches(')');
    std::fs::remove_dir_all(keep).unwrap();
    git(
        &env.repo(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            &format!("taskdaemon/{id}"),
            path,
        ],
    );
    std::fs::create_dir_all(Path::new(path).join(".ralph")).unwrap();
    std::fs::write(Path::new(path).join(".ralph/left.txt"), "kept").unwrap();
    d.start(1);
    let t = Instant::now();
    while Path::new(path).exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "still there:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.stop();
    assert_eq!(
        std::fs::read_to_string(Path::new(keep).join("left.txt")).unwrap(),
        "kept"
    );
    let branch = format!("taskdaemon/{id}");
    let branches = git(&env.repo(), &["branch", "--list", &branch]);
    assert!(branches.trim().is_empty(), "{branches}");
}
