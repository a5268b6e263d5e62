//! Work lists end to end: `implement` on a spec's tasks.md and `stories` on a stories
//! file, with real git and fake agents that are small real shell programs.

use crate::harness;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::{Env, events, git, wait_for, wait_timeout};

const SPEC: &str = "specs/demo";

/// A repository with `specs/demo/{tasks,requirements,design}.md` committed.
fn spec_env(tasks: &str) -> Env {
    let env = Env::new();
    let spec = env.repo().join(SPEC);
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(spec.join("tasks.md"), tasks).unwrap();
    std::fs::write(
        spec.join("requirements.md"),
        "# Requirements\n\nFR-1: files exist.\n",
    )
    .unwrap();
    std::fs::write(
        spec.join("design.md"),
        "# Design\n\nOne file per task under work/.\n",
    )
    .unwrap();
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "spec"]);
    env
}

/// The fake executor/QA agent: records its prompt (`prompts/<id>-<attempt>.md`), its call
/// (`calls`) and start/end times (`times`), writes `work/<id>.txt` and commits it, checks
/// its box (under the lock in a parallel group, writing its own progress file), commits the
/// spec files, and says TASK_COMPLETE (VERIFICATION_PASS as QA). `quirks` is shell run
/// before the work: it may set `box=0`, `words=…`, `skip=1` (no work file) or wait.
fn agent(env: &Env, quirks: &str) -> String {
    let root = env.root().display().to_string();
    let script = format!(
        r#"#!/bin/sh
R='{root}'
id="$TASKDAEMON_TASK_ID"
mkdir -p "$R/prompts"
n=$(ls "$R/prompts" | grep -c "^$id-")
n=$((n+1))
cat > "$R/prompts/$id-$n.md"
echo "$id $n" >> "$R/calls"
echo "start $id $(date +%s%N)" >> "$R/times"
par=0
case "$TASKDAEMON_PROGRESS_FILE" in *.progress-task-*) par=1;; esac
box=1; words="all done. TASK_COMPLETE"; skip=0
{quirks}
mkdir -p work
if [ "$skip" = 0 ]; then echo "$id" > "work/$id.txt"; fi
echo "$id attempt $n" >> "work/log-$id.txt"
git add work && git commit -qm "task $id"
if [ "$box" = 1 ]; then
  flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
  if [ "$par" = 1 ]; then
    echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE"
  else
    echo "- $id done" >> "$TASKDAEMON_SPEC_DIR/.progress.md"
    git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $id"
  fi
fi
echo "end $id $(date +%s%N)" >> "$R/times"
if [ "$TASKDAEMON_TASK_ROLE" = qa ]; then echo "checks ran: VERIFICATION_PASS"; else echo "$words"; fi
"#
    );
    let p = env.root().join("agent.sh");
    std::fs::write(&p, script).unwrap();
    format!("cmd:sh {}", p.display())
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
}

/// `(start, end)` per task id, from the last run of each.
fn times(env: &Env) -> BTreeMap<String, (u128, u128)> {
    let mut out: BTreeMap<String, (u128, u128)> = BTreeMap::new();
    for l in read(env.root().join("times")).lines() {
        let parts: Vec<&str> = l.split(' ').collect();
        let t: u128 = parts[2].parse().unwrap();
        let e = out.entry(parts[1].to_string()).or_default();
        if parts[0] == "start" {
            e.0 = t;
        } else {
            e.1 = t;
        }
    }
    out
}

fn commit_subjects(repo: &Path) -> Vec<String> {
    git(repo, &["log", "--reverse", "--format=%s"])
        .lines()
        .map(str::to_string)
        .collect()
}

const EIGHT: &str = "# Tasks\n\n## Phase 1: Make it work\n\n- [ ] 1.1 Set up the work directory\n  - **Do**: create work/1.1.txt\n  - **Files**: work/1.1.txt\n  - **Done when**: the file exists\n  - **Verify**: `test -f work/1.1.txt`\n  - **Commit**: `feat: set up`\n  - _Requirements: FR-1_\n  - _Design: one file per task_\n\n- [ ] 1.2 [P] Part A\n  - **Do**: create work/1.2.txt\n  - **Verify**: `test -f work/1.2.txt`\n\n- [ ] 1.3 [P] Part B\n  - **Do**: create work/1.3.txt\n  - **Verify**: `test -f work/1.3.txt`\n\n- [ ] 1.4 [VERIFY] Quality checkpoint one\n  - **Do**: check parts A and B\n  - **Verify**: `test -f work/1.2.txt && test -f work/1.3.txt`\n\n## Phase 2: Make it complete\n\n- [ ] 2.1 [P] Part C\n  - **Verify**: `test -f work/2.1.txt`\n- [ ] 2.2 [P] Part D\n  - **Verify**: `test -f work/2.2.txt`\n- [ ] 2.3 [P] Part E\n  - **Verify**: `test -f work/2.3.txt`\n- [ ] 2.4 [VERIFY] Final checkpoint\n  - **Verify**: `test -f work/2.1.txt && test -f work/2.2.txt && test -f work/2.3.txt`\n";

/// Each task of a parallel group waits (a bounded while) until all of its group started, so
/// the recorded times show whether they really ran at the same time.
const BARRIER: &str = r#"case "$id" in 1.2|1.3) grp="1.2 1.3";; 2.1|2.2|2.3) grp="2.1 2.2 2.3";; *) grp="";; esac
touch "$R/started-$id"
i=0
while [ $i -lt 200 ]; do all=1; for g in $grp; do [ -e "$R/started-$g" ] || all=0; done; [ $all = 1 ] && break; sleep 0.05; i=$((i+1)); done
"#;

#[test]
fn eight_tasks_with_two_parallel_groups_and_two_checkpoints_complete() {
    let env = spec_env(EIGHT);
    let repo = env.repo();
    let a = agent(&env, BARRIER);
    let r = env.run(&["implement", SPEC, "--agent", &a, "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    let evs = events(&r.stdout);
    let last = evs.last().unwrap();
    assert_eq!(last["event"], "implement_finished");
    assert_eq!(last["outcome"], "COMPLETE");
    assert!(
        last["detail"]
            .as_str()
            .unwrap()
            .contains("ALL_TASKS_COMPLETE: 8 of 8")
    );
    let groups: Vec<&serde_json::Value> = evs
        .iter()
        .filter(|e| e["event"] == "group_started")
        .collect();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["task_ids"], serde_json::json!(["1.2", "1.3"]));
    assert_eq!(
        groups[1]["task_ids"],
        serde_json::json!(["2.1", "2.2", "2.3"])
    );
    // Nothing was rejected; the QA tasks got the QA prompt.
    assert!(
        !evs.iter().any(|e| e["event"] == "task_rejected"),
        "{}",
        r.stdout
    );
    let qa: Vec<&str> = evs
        .iter()
        .filter(|e| e["event"] == "task_started" && e["role"] == "qa")
        .map(|e| e["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(qa, ["1.4", "2.4"]);
    assert!(read(env.root().join("prompts/1.4-1.md")).contains("VERIFICATION_PASS"));
    let p11 = read(env.root().join("prompts/1.1-1.md"));
    for want in [
        "## Task 1.1",
        "**Verify**: `test -f work/1.1.txt`",
        "FR-1: files exist",
        "One file per task",
    ] {
        assert!(p11.contains(want), "{want} missing in:\n{p11}");
    }

    // The [P] tasks overlapped in time: each started before every other one ended.
    let t = times(&env);
    for group in [&["1.2", "1.3"][..], &["2.1", "2.2", "2.3"][..]] {
        for x in group {
            for y in group {
                if x != y {
                    assert!(t[*x].0 < t[*y].1, "{x} started after {y} ended: {t:?}");
                }
            }
        }
    }
    // Sequential tasks did not overlap with anything before them.
    assert!(t["1.3"].1 < t["1.4"].0 && t["1.2"].1 < t["1.4"].0);

    // Commits landed in task order.
    let tasks: Vec<String> = commit_subjects(&repo)
        .into_iter()
        .filter(|s| s.starts_with("task "))
        .collect();
    assert_eq!(
        tasks,
        [
            "task 1.1", "task 1.2", "task 1.3", "task 1.4", "task 2.1", "task 2.2", "task 2.3",
            "task 2.4"
        ]
    );
    let subjects = commit_subjects(&repo);
    assert!(
        subjects.contains(&"taskdaemon: tasks 1.2, 1.3 done (parallel group)".to_string()),
        "{subjects:?}"
    );

    // Every box checked and committed, progress merged in task order, state and worktrees gone.
    let tasks_md = read(repo.join(SPEC).join("tasks.md"));
    assert_eq!(tasks_md.matches("- [x]").count(), 8, "{tasks_md}");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    let progress = read(repo.join(SPEC).join(".progress.md"));
    let (c, d, e) = (
        progress.find("notes of 2.1").unwrap(),
        progress.find("notes of 2.2").unwrap(),
        progress.find("notes of 2.3").unwrap(),
    );
    assert!(c < d && d < e, "{progress}");
    assert!(!repo.join(SPEC).join(".ralph-state.json").exists());
    assert!(!repo.join(SPEC).join(".progress-task-2.1.md").exists());
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    for id in ["1.1", "1.2", "1.3", "2.1", "2.2", "2.3"] {
        assert!(repo.join(format!("work/{id}.txt")).exists(), "{id}");
    }
}

#[test]
fn rejected_claims_are_retried_with_the_reason_in_the_next_prompt() {
    let tasks = "## Phase 1\n\n- [ ] 1.1 No checkbox\n  - **Verify**: `test -f work/1.1.txt`\n- [ ] 1.2 Wants a human\n  - **Verify**: `test -f work/1.2.txt`\n- [ ] 1.3 Verify fails first\n  - **Verify**: `test -f work/1.3.txt`\n";
    let env = spec_env(tasks);
    let repo = env.repo();
    let quirks = r#"if [ "$id" = 1.1 ] && [ $n = 1 ]; then box=0; fi
if [ "$id" = 1.2 ] && [ $n = 1 ]; then words="Done, but the login flow requires manual testing in a browser. TASK_COMPLETE"; fi
if [ "$id" = 1.3 ] && [ $n = 1 ]; then skip=1; fi
"#;
    let a = agent(&env, quirks);
    let r = env.run(&["implement", SPEC, "--agent", &a, "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    let evs = events(&r.stdout);
    let rejected: Vec<(String, Vec<u64>)> = evs
        .iter()
        .filter(|e| e["event"] == "task_rejected")
        .map(|e| {
            (
                e["task_id"].as_str().unwrap().to_string(),
                e["layers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        [
            ("1.1".to_string(), vec![3]),
            ("1.2".to_string(), vec![1]),
            ("1.3".to_string(), vec![5])
        ]
    );
    assert_eq!(
        read(env.root().join("calls")),
        "1.1 1\n1.1 2\n1.2 1\n1.2 2\n1.3 1\n1.3 2\n"
    );
    // The second prompt of each says why the first was rejected.
    let p = read(env.root().join("prompts/1.1-2.md"));
    assert!(
        p.contains("previous attempt was rejected")
            && p.contains("checkbox of task 1.1 is not checked"),
        "{p}"
    );
    assert!(p.contains("attempt 2 of 5"), "{p}");
    let p = read(env.root().join("prompts/1.2-2.md"));
    assert!(
        p.contains("CONTRADICTION") && p.contains("requires manual"),
        "{p}"
    );
    let p = read(env.root().join("prompts/1.3-2.md"));
    assert!(
        p.contains("the Verify command of task 1.3 failed (`test -f work/1.3.txt` exited 1)"),
        "{p}"
    );
    // First prompts carry no rejection.
    assert!(!read(env.root().join("prompts/1.1-1.md")).contains("rejected"));
    // The harness keeps its own copy of every prompt, where a run's are.
    let kept = read(repo.join(".ralph/logs/iteration-002.prompt.md"));
    assert!(
        kept.contains("1.1") && kept.contains("attempt 2"),
        "iteration 2 is task 1.1's second attempt: {kept}"
    );
    assert_eq!(
        read(repo.join(SPEC).join("tasks.md"))
            .matches("- [x]")
            .count(),
        3
    );
}

#[test]
fn a_task_that_keeps_failing_stops_with_exit_5_and_keeps_the_state() {
    let env = spec_env("- [ ] 1.1 Never checked\n");
    let a = agent(&env, "box=0\n");
    let r = env.run(&[
        "implement",
        SPEC,
        "--agent",
        &a,
        "--max-task-iterations",
        "2",
    ]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("task 1.1 was rejected 2 times"),
        "{}",
        r.stderr
    );
    let state: serde_json::Value =
        serde_json::from_str(&read(env.repo().join(SPEC).join(".ralph-state.json"))).unwrap();
    assert_eq!(state["taskIndex"], 0);
    assert_eq!(state["totalTasks"], 1);
    assert_eq!(state["maxTaskIterations"], 2);
    assert_eq!(state["taskResults"]["0"]["status"], "failed");
}

#[test]
fn cancel_mid_run_then_implement_resumes_at_the_right_task() {
    let tasks = "- [ ] 1.1 First\n- [ ] 1.2 Second\n- [ ] 1.3 Third\n";
    let env = spec_env(tasks);
    let repo = env.repo();
    // Task 1.2's first run hangs (until cancelled); later runs are normal.
    let quirks = r#"if [ "$id" = 1.2 ] && [ ! -e "$R/hung" ]; then touch "$R/hung"; sleep 120; fi
"#;
    let a = agent(&env, quirks);
    let mut child = env
        .cmd()
        .args(["implement", SPEC, "--agent", &a])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&env.root().join("hung"), Duration::from_secs(60));
    assert!(repo.join(SPEC).join(".ralph-state.json").exists());
    let c = env.run(&["cancel", SPEC]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(
        c.stderr
            .contains("stopped at task 1.2 Second (task 2 of 3, attempt 1)"),
        "{}",
        c.stderr
    );
    assert!(c.stderr.contains(".progress.md kept"), "{}", c.stderr);
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    assert!(
        said.contains("cancelled by `taskdaemon cancel`: .ralph-state.json is deleted")
            && !said.contains("state kept"),
        "the loop's last words: {said}"
    );
    assert!(!repo.join(SPEC).join(".implement.cancel").exists());
    assert!(!repo.join(SPEC).join(".ralph-state.json").exists());
    assert!(read(repo.join(SPEC).join(".progress.md")).contains("- 1.1 done"));
    // Nothing left running in the agent's group: a second cancel has nothing to stop.
    let again = env.run(&["cancel", SPEC, "--json"]);
    assert_eq!(again.code, 0);
    let rep: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(rep["stopped_pid"], serde_json::Value::Null);
    assert_eq!(rep["state_deleted"], false);

    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        read(env.root().join("calls")),
        "1.1 1\n1.2 1\n1.2 2\n1.3 1\n"
    );
    assert_eq!(
        read(repo.join(SPEC).join("tasks.md"))
            .matches("- [x]")
            .count(),
        3
    );
}

#[test]
fn edge_cases_empty_done_corrupt_state_and_missing_agent() {
    // Empty tasks.md: complete at once, with a warning.
    let env = spec_env("# Tasks\n\nnothing yet\n");
    let a = agent(&env, "");
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("has no tasks"), "{}", r.stderr);

    // All complete: no agent runs.
    let env = spec_env("- [x] 1.1 Done\n- [x] 1.2 Done too\n");
    let a = agent(&env, "");
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("ALL_TASKS_COMPLETE: 2 of 2"),
        "{}",
        r.stderr
    );
    assert!(!env.root().join("calls").exists());

    // Corrupt state: reset with a warning, then run.
    let env = spec_env("- [x] 1.1 Done\n- [ ] 1.2 Open\n");
    std::fs::write(env.repo().join(SPEC).join(".ralph-state.json"), "{ broken").unwrap();
    let a = agent(&env, "");
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("state reset to defaults"), "{}", r.stderr);
    assert_eq!(read(env.root().join("calls")), "1.2 1\n");

    // State without a running loop: resumed.
    let env = spec_env("- [ ] 1.1 Open\n");
    std::fs::write(
        env.repo().join(SPEC).join(".ralph-state.json"),
        r#"{"phase":"execution","taskIndex":0,"totalTasks":1,"taskIteration":2,"maxTaskIterations":5,"basePath":"x","taskResults":{"0":{"status":"failed","error":"- layer 3: an earlier reason"}}}"#,
    )
    .unwrap();
    let a = agent(&env, "");
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("resuming from .ralph-state.json"),
        "{}",
        r.stderr
    );
    let p = read(env.root().join("prompts/1.1-1.md"));
    assert!(
        p.contains("an earlier reason") && p.contains("attempt 2 of 5"),
        "{p}"
    );

    // A missing agent CLI fails before any state change, with install instructions.
    let env = spec_env("- [ ] 1.1 Open\n");
    let r = env
        .cmd()
        .args(["implement", SPEC, "--agent", "claude"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("not installed") && stderr.contains("hint:"),
        "{stderr}"
    );
    assert!(!env.repo().join(SPEC).join(".ralph-state.json").exists());
    assert!(!env.repo().join(SPEC).join(".progress.md").exists());
}

#[test]
fn bad_input_is_a_usage_error_with_a_hint() {
    let env = spec_env("- [ ] 1.1 Open\n");
    let a = agent(&env, "");
    let r = env.run(&["implement", "specs/nope", "--agent", &a]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("is not a directory") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let r = env.run(&["implement", "--agent", &a]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains(".current-spec"), "{}", r.stderr);
    // specs/.current-spec names the default spec.
    std::fs::write(env.repo().join("specs/.current-spec"), "demo\n").unwrap();
    let r = env.run(&["implement", "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // An uncommitted tasks.md cannot be verified by commits.
    std::fs::create_dir_all(env.repo().join("specs/new")).unwrap();
    std::fs::write(env.repo().join("specs/new/tasks.md"), "- [ ] 1.1 x\n").unwrap();
    let r = env.run(&["implement", "specs/new", "--agent", &a]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("is not committed"), "{}", r.stderr);
    let r = env.run(&["cancel", "some-ref"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("no record matches")
            && r.stderr.contains("is not a directory")
            && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let r = env.run(&[
        "implement",
        SPEC,
        "--max-task-iterations",
        "0",
        "--agent",
        &a,
    ]);
    assert_eq!(r.code, 64);
    let r = env.run(&["stories", "missing.json", "--agent", &a]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("cannot read") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let h = env.run(&["implement", "--help"]);
    assert_eq!(h.code, 0);
    assert!(
        h.stdout.contains("Examples:") && h.stdout.contains("[VERIFY]"),
        "{}",
        h.stdout
    );
    let h = env.run(&["stories", "--help"]);
    assert!(h.stdout.contains("review-fix") && h.stdout.contains("Examples:"));
    let h = env.run(&["cancel", "--help"]);
    assert!(h.stdout.contains(".progress.md") && h.stdout.contains("Examples:"));
}

// ---- stories ----

fn story_json(passes: bool, status: &str, count: u32, feedback: &str) -> String {
    format!(
        "{{\n  \"userStories\": [\n    {{\n      \"id\": \"US-1\",\n      \"title\": \"Greeting\",\n      \"description\": \"Say hello\",\n      \"acceptanceCriteria\": [\"hello.txt says hello\"],\n      \"priority\": 1,\n      \"passes\": {passes},\n      \"reviewStatus\": \"{status}\",\n      \"reviewCount\": {count},\n      \"reviewFeedback\": \"{feedback}\",\n      \"notes\": \"\",\n      \"dependsOn\": []\n    }}\n  ]\n}}\n"
    )
}

/// A stories agent that plays `steps` (one shell snippet per iteration, by
/// TASKDAEMON_ITERATION), recording each prompt and the file as it found it.
fn stories_agent(env: &Env, steps: &[&str]) -> String {
    let root = env.root().display().to_string();
    let mut cases = String::new();
    for (i, s) in steps.iter().enumerate() {
        cases.push_str(&format!("  {}) {s};;\n", i + 1));
    }
    let script = format!(
        r#"#!/bin/sh
R='{root}'
n="$TASKDAEMON_ITERATION"
cat > "$R/story-prompt-$n.md"
cp "$TASKDAEMON_STORIES_FILE" "$R/story-seen-$n.json"
echo "$n $TASKDAEMON_STORY_MODE $TASKDAEMON_STORY_ID" >> "$R/story-calls"
put() {{ cat > "$TASKDAEMON_STORIES_FILE"; git add -A && git commit -qm "iteration $n"; }}
case "$n" in
{cases}esac
"#
    );
    let p = env.root().join("stories.sh");
    std::fs::write(&p, script).unwrap();
    format!("cmd:sh {}", p.display())
}

fn heredoc(json: &str) -> String {
    format!("put <<'JSON'\n{json}JSON\n")
}

#[test]
fn stories_full_review_cycle_and_a_rejected_self_approval() {
    let env = Env::new();
    let repo = env.repo();
    let initial = story_json(false, "pending", 0, "");
    std::fs::write(repo.join("tasks.json"), &initial).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let steps = [
        // 1 implement: sets passes itself → rejected, file restored.
        format!(
            "echo hello > hello.txt; {}",
            heredoc(&story_json(true, "needs_review", 0, ""))
        ),
        // 2 implement, properly.
        format!(
            "echo hello > hello.txt; {}",
            heredoc(&story_json(false, "needs_review", 0, ""))
        ),
        // 3 review: changes requested.
        heredoc(&story_json(
            false,
            "changes_requested",
            1,
            "end with a newline and say hello world",
        )),
        // 4 review-fix.
        format!(
            "echo 'hello world' > hello.txt; {}",
            heredoc(&story_json(
                false,
                "needs_review",
                1,
                "end with a newline and say hello world"
            ))
        ),
        // 5 review: approve, COMPLETE.
        format!(
            "{}echo '<promise>COMPLETE</promise>'",
            heredoc(&story_json(true, "approved", 2, ""))
        ),
    ];
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let a = stories_agent(&env, &steps);
    let r = env.run(&["stories", "--agent", &a, "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    assert_eq!(
        read(env.root().join("story-calls")),
        "1 implement US-1\n2 implement US-1\n3 review US-1\n4 review-fix US-1\n5 review US-1\n"
    );
    let evs = events(&r.stdout);
    let rejected: Vec<&serde_json::Value> = evs
        .iter()
        .filter(|e| e["event"] == "story_rejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{}", r.stdout);
    assert_eq!(rejected[0]["iteration"], 1);
    assert!(
        rejected[0]["reason"]
            .as_str()
            .unwrap()
            .contains("never set `passes`")
    );
    // The file was restored before iteration 2, and its prompt says why.
    assert_eq!(read(env.root().join("story-seen-2.json")), initial);
    let p2 = read(env.root().join("story-prompt-2.md"));
    assert!(
        p2.contains("was rejected") && p2.contains("never set `passes`"),
        "{p2}"
    );
    let p4 = read(env.root().join("story-prompt-4.md"));
    assert!(
        p4.contains("mode: review-fix") && p4.contains("say hello world"),
        "{p4}"
    );
    let last = evs.last().unwrap();
    assert_eq!(last["event"], "stories_finished");
    assert_eq!(last["outcome"], "COMPLETE");
    let done = read(repo.join("tasks.json"));
    assert!(
        done.contains("\"approved\"") && done.contains("\"passes\": true"),
        "{done}"
    );
    assert_eq!(read(repo.join("hello.txt")), "hello world\n");
}

#[test]
fn stories_review_cap_auto_approves_and_skip_review_completes_directly() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(
        repo.join("prd.json"),
        story_json(false, "needs_review", 1, ""),
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let steps = ["echo '<promise>COMPLETE</promise>'"];
    let a = stories_agent(&env, &steps);
    let r = env.run(&["stories", "--agent", &a, "--max-reviews", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("US-1 reached the review cap (1 reviews)"),
        "{}",
        r.stderr
    );
    let done = read(repo.join("prd.json"));
    assert!(
        done.contains("auto-approved by taskdaemon after 1 reviews (review cap)"),
        "{done}"
    );
    assert_eq!(read(env.root().join("story-calls")), "1 finish \n");

    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tasks.json"), story_json(false, "", 0, "")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let step = format!(
        "{}echo '<promise>COMPLETE</promise>'",
        heredoc(&story_json(true, "", 0, ""))
    );
    let a = stories_agent(&env, &[step.as_str()]);
    let r = env.run(&["stories", "--skip-review", "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read(env.root().join("story-calls")), "1 implement US-1\n");
}

#[test]
fn a_parallel_group_keeps_its_successes_and_retries_only_the_failed_task() {
    let tasks = "- [ ] 1.1 [P] Left\n  - **Verify**: `test -f work/1.1.txt`\n- [ ] 1.2 [P] Right\n  - **Verify**: `test -f work/1.2.txt`\n- [ ] 1.3 [P] Middle\n  - **Verify**: `test -f work/1.3.txt`\n";
    let env = spec_env(tasks);
    let repo = env.repo();
    // 1.2 forgets its box the first time.
    let a = agent(&env, "if [ \"$id\" = 1.2 ] && [ $n = 1 ]; then box=0; fi\n");
    let r = env.run(&["implement", SPEC, "--agent", &a, "--json"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    let calls = read(env.root().join("calls"));
    let mut first: Vec<&str> = calls.lines().take(3).collect();
    first.sort();
    assert_eq!(first, ["1.1 1", "1.2 1", "1.3 1"]);
    // Only 1.2 ran again, alone (a lone [P] runs sequentially, in the main tree).
    assert_eq!(calls.lines().skip(3).collect::<Vec<_>>(), ["1.2 2"]);
    let evs = events(&r.stdout);
    let groups: Vec<&serde_json::Value> = evs
        .iter()
        .filter(|e| e["event"] == "group_started")
        .collect();
    assert_eq!(groups.len(), 1);
    let p = read(env.root().join("prompts/1.2-2.md"));
    assert!(p.contains("checkbox of task 1.2 is not checked"), "{p}");
    // 1.1 and 1.3 landed in the group's order; 1.2's retry came after.
    let tasks: Vec<String> = commit_subjects(&repo)
        .into_iter()
        .filter(|s| s.starts_with("task "))
        .collect();
    assert_eq!(tasks, ["task 1.1", "task 1.3", "task 1.2"]);
    assert_eq!(
        read(repo.join(SPEC).join("tasks.md"))
            .matches("- [x]")
            .count(),
        3
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn an_agent_that_cannot_start_stops_implement_and_stories_before_anything_changes() {
    let env = spec_env("- [ ] 1.1 Open\n  - **Verify**: `carg0 test`\n");
    let spec = env.repo().join(SPEC);
    let r = env.run(&["implement", SPEC, "--agent", "cmd:/nonexistent/agent --go"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("`/nonexistent/agent` does not exist") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    assert!(!spec.join(".ralph-state.json").exists());
    assert!(!spec.join(".progress.md").exists());
    assert!(!spec.join(".implement.lock").exists());
    assert_eq!(git(&env.repo(), &["status", "--porcelain"]), "");

    // With an agent that can start, the Verify program that is not on PATH is a warning.
    let a = agent(&env, "");
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert!(
        r.stderr.contains("warning:") && r.stderr.contains("`carg0`"),
        "{}",
        r.stderr
    );

    let env = Env::new();
    let repo = env.repo();
    let initial = story_json(false, "pending", 0, "");
    std::fs::write(repo.join("tasks.json"), &initial).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let r = env.run(&["stories", "--agent", "cmd:/nonexistent/agent"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    assert_eq!(read(repo.join("tasks.json")), initial);
    assert!(!repo.join(".ralph/stories-logs").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn a_not_logged_in_agent_stops_implement_and_stories_at_the_first_task_with_exit_64() {
    let env = spec_env("- [ ] 1.1 First\n- [ ] 1.2 Second\n");
    let login = env.root().join("login.sh");
    let root = env.root().display().to_string();
    std::fs::write(
        &login,
        format!("#!/bin/sh\necho x >> '{root}/calls'\necho 'Not logged in · Please run /login'\nexit 1\n"),
    )
    .unwrap();
    let a = format!("cmd:sh {}", login.display());
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("(auth)")
            && r.stderr.contains("Not logged in · Please run /login")
            && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    // One agent start, not one per attempt; the task is not counted as rejected.
    assert_eq!(read(env.root().join("calls")), "x\n");
    assert!(!r.stderr.contains("rejected"), "{}", r.stderr);
    assert_eq!(
        read(env.repo().join(SPEC).join("tasks.md"))
            .matches("- [ ]")
            .count(),
        2
    );

    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tasks.json"), story_json(false, "pending", 0, "")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let r = env.run(&["stories", "--agent", &a]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("Not logged in"), "{}", r.stderr);
}

#[test]
fn a_sigkilled_implement_leaves_nothing_running_after_the_next_implement_starts() {
    let env = spec_env("- [ ] 1.1 First\n");
    // The first run escapes a sleeper (setsid) and hangs; later runs work.
    let quirks = r#"if [ ! -e "$R/hung" ]; then touch "$R/hung"; setsid sh -c 'echo $$ > "$0/sleeper"; exec sleep 120' "$R" & sleep 120; fi
"#;
    let a = agent(&env, quirks);
    let mut child = env
        .cmd()
        .args(["implement", SPEC, "--agent", &a])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sleeper = env.root().join("sleeper");
    wait_for(&sleeper, Duration::from_secs(60));
    let mut pid = 0;
    let t = std::time::Instant::now();
    while pid == 0 && t.elapsed() < Duration::from_secs(30) {
        pid = read(&sleeper).trim().parse().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its watchdog first: this test is about what the next start ends.
    harness::kill_watchdogs(&env);
    child.kill().unwrap();
    let _ = wait_timeout(&mut child, Duration::from_secs(10));
    assert!(
        harness::pid_alive(pid),
        "the sleeper should outlive the SIGKILL"
    );

    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("that a stopped loop left running"),
        "{}",
        r.stderr
    );
    assert!(
        !harness::pid_alive(pid),
        "the killed loop's sleeper still runs"
    );
}
