//! One engine in fact (issue 35): `implement` and `stories` are work sources of the
//! engine's one loop, so a usage limit waits and retries the same attempt, an overload backs
//! off, and an idle agent is stuck, exactly as in `run`. Fake agents are small shell
//! programs that replay the recorded output of Claude Code (`fixtures/agent-failures/`).

use std::time::Instant;

use crate::harness::{Env, csv_rows, events, git, replay, usage_limit_in};

const SPEC: &str = "specs/demo";

fn spec_env(tasks: &str) -> Env {
    let env = Env::new();
    let spec = env.repo().join(SPEC);
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(spec.join("tasks.md"), tasks).unwrap();
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "spec"]);
    env
}

/// A Claude-like agent (stream-json): counts its calls in `$R/calls` (`$n`, and per task
/// `$R/calls-<id>` as `$t`), runs `fail` (which may replay a failure and exit), then does
/// its task: a commit, its box checked (under the lock in a group), the spec committed,
/// and TASK_COMPLETE as its words.
fn claude_agent(env: &Env, fail: &str) -> String {
    let root = env.root().display().to_string();
    let script = format!(
        r#"#!/bin/sh
R='{root}'
cat >/dev/null
n=$(cat "$R/calls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$R/calls"
id="$TASKDAEMON_TASK_ID"
t=$(cat "$R/calls-$id" 2>/dev/null || echo 0); t=$((t+1)); echo $t > "$R/calls-$id"
echo "$id call $t attempt $TASKDAEMON_TASK_ITERATION" >> "$R/log"
{fail}
mkdir -p work && echo "$id" > "work/$id.txt" && git add work && git commit -qm "task $id" >/dev/null
flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
case "$TASKDAEMON_PROGRESS_FILE" in
  *.progress-task-*) echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE" ;;
  *) git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $id" >/dev/null ;;
esac
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"done. TASK_COMPLETE"}}]}}}}'
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done. TASK_COMPLETE","total_cost_usd":0.01}}'
"#
    );
    let p = env.root().join("agent.sh");
    std::fs::write(&p, script).unwrap();
    format!("cmd:sh {}", p.display())
}

fn implement(env: &Env, agent: &str, extra: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    let mut args = vec![
        "implement",
        SPEC,
        "--json",
        "--agent",
        agent,
        "--agent-format",
        "claude-stream-json",
    ];
    args.extend_from_slice(extra);
    let r = env.run(&args);
    (r.code, events(&r.stdout), r.stderr)
}

fn summary(evs: &[serde_json::Value]) -> &serde_json::Value {
    &evs.iter()
        .find(|e| e["event"] == "run_finished")
        .expect("run_finished")["summary"]
}

fn checked(env: &Env) -> usize {
    std::fs::read_to_string(env.repo().join(SPEC).join("tasks.md"))
        .unwrap()
        .matches("- [x]")
        .count()
}

#[test]
fn implement_waits_out_a_usage_limit_and_retries_the_same_attempt() {
    let env = spec_env("- [ ] 1.1 First\n- [ ] 1.2 Second\n- [ ] 1.3 Third\n");
    let agent = claude_agent(
        &env,
        &format!("if [ $n -eq 2 ]; then\n{}\nfi", usage_limit_in(4)),
    );
    let t = Instant::now();
    let (code, evs, stderr) = implement(&env, &agent, &[]);
    let took = t.elapsed();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        took.as_secs_f64() >= 4.0,
        "it waited for the reset: {took:?}"
    );
    assert_eq!(checked(&env), 3);
    let waiting = evs
        .iter()
        .find(|e| e["event"] == "waiting")
        .expect("a waiting event");
    assert_eq!(waiting["class"], "usage-limit");
    // Task 1.2 ran twice, both times as attempt 1: the limit is no attempt.
    let log = std::fs::read_to_string(env.root().join("log")).unwrap();
    assert_eq!(
        log.lines()
            .filter(|l| l.starts_with("1.2 "))
            .collect::<Vec<_>>(),
        ["1.2 call 1 attempt 1", "1.2 call 2 attempt 1"]
    );
    let started: Vec<(String, u64)> = evs
        .iter()
        .filter(|e| e["event"] == "task_started")
        .map(|e| {
            (
                e["task_id"].as_str().unwrap().to_string(),
                e["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        started,
        [
            ("1.1".to_string(), 1),
            ("1.2".to_string(), 1),
            ("1.2".to_string(), 1),
            ("1.3".to_string(), 1)
        ]
    );
    // One row per attempt; the retried one carries the wait.
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 3, "{rows:?}");
    let waited: f64 = rows[1]["waited_seconds"].parse().unwrap();
    assert!(waited > 0.0, "{rows:?}");
    assert!(rows.iter().all(|r| r["mode"] == "implement"));
    let s = summary(&evs);
    assert_eq!(s["work"]["unit"], "tasks");
    assert_eq!(
        (s["work"]["done"].as_u64(), s["work"]["total"].as_u64()),
        (Some(3), Some(3))
    );

    // --on-usage-limit stop: exit 1, naming the reset time.
    let env = spec_env("- [ ] 1.1 First\n");
    let agent = claude_agent(
        &env,
        &format!("if [ $n -eq 1 ]; then\n{}\nfi", usage_limit_in(3600)),
    );
    let (code, evs, stderr) = implement(&env, &agent, &["--on-usage-limit", "stop"]);
    assert_eq!(code, 1, "{stderr}");
    let d = summary(&evs)["detail"].as_str().unwrap().to_string();
    assert!(d.contains("usage limit") && d.contains("resets at"), "{d}");
    assert_eq!(checked(&env), 0);
}

/// A `[P]` pair (and a task after it) whose member `limited` hits the usage limit on its
/// first call: the other is never run again, the limited one runs again as attempt 1, the
/// group lands in task order, and nothing counts as rejected or stuck.
fn a_pair_with_one_member_at_the_limit(limited: &str) {
    let env = spec_env("- [ ] 1.1 [P] Left\n- [ ] 1.2 [P] Right\n- [ ] 1.3 After\n");
    let agent = claude_agent(
        &env,
        &format!(
            "if [ \"$id\" = {limited} ] && [ $t -eq 1 ]; then\n{}\nfi",
            usage_limit_in(3)
        ),
    );
    let (code, evs, stderr) = implement(&env, &agent, &[]);
    assert_eq!(code, 0, "{stderr}");
    let log = std::fs::read_to_string(env.root().join("log")).unwrap();
    let other = if limited == "1.1" { "1.2" } else { "1.1" };
    assert_eq!(
        log.lines()
            .filter(|l| l.starts_with(&format!("{other} ")))
            .count(),
        1,
        "the member that finished is never run again: {log}"
    );
    assert!(
        log.contains(&format!("{limited} call 2 attempt 1")),
        "the limited member ran again as the same attempt: {log}"
    );
    assert!(
        evs.iter()
            .any(|e| e["event"] == "waiting" && e["class"] == "usage-limit")
    );
    let subjects = git(&env.repo(), &["log", "--reverse", "--format=%s"]);
    let tasks: Vec<&str> = subjects
        .lines()
        .filter(|s| s.starts_with("task "))
        .collect();
    assert_eq!(tasks, ["task 1.1", "task 1.2", "task 1.3"], "in task order");
    let completed: Vec<&str> = evs
        .iter()
        .filter(|e| e["event"] == "task_completed")
        .map(|e| e["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(completed, ["1.1", "1.2", "1.3"]);
    assert_eq!(checked(&env), 3);
    assert_eq!(git(&env.repo(), &["status", "--porcelain"]), "");
    let rows = csv_rows(&env.repo());
    assert!(
        rows.iter()
            .all(|r| r["outcome"] != "rejected" && r["stuck_count"] == "0"),
        "{rows:?}"
    );
    // A parked member's ref is gone once it landed.
    assert_eq!(
        git(&env.repo(), &["for-each-ref", "refs/taskdaemon/parked/"]),
        ""
    );
}

#[test]
fn a_parallel_member_at_the_usage_limit_is_retried_alone_and_the_other_is_kept() {
    a_pair_with_one_member_at_the_limit("1.2");
}

#[test]
fn when_the_earlier_parallel_member_waits_the_later_one_lands_after_it() {
    // The later member, finished, is parked and judged after the earlier one.
    a_pair_with_one_member_at_the_limit("1.1");
}

#[test]
fn implement_backs_off_from_an_overload_and_completes() {
    let env = spec_env("- [ ] 1.1 Only\n");
    let agent = claude_agent(
        &env,
        &format!(
            "if [ $n -le 2 ]; then\n{}\nfi",
            replay("claude/overloaded-529-max-retries-2")
        ),
    );
    let (code, evs, stderr) = implement(&env, &agent, &["--retry-backoff", "1s"]);
    assert_eq!(code, 0, "{stderr}");
    let waits: Vec<&serde_json::Value> = evs.iter().filter(|e| e["event"] == "waiting").collect();
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(waits.iter().all(|w| w["class"] == "overloaded"));
    assert_eq!(checked(&env), 1);
    assert_eq!(csv_rows(&env.repo()).len(), 1);
}

fn stories_env(stories: &str) -> Env {
    let env = Env::new();
    std::fs::write(env.repo().join("prd.json"), stories).unwrap();
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "stories"]);
    env
}

/// A one-story file and an agent that only talks: HEAD never moves.
fn idle_stories() -> (Env, String) {
    let env = stories_env(ONE_STORY);
    std::fs::write(
        env.root().join("idle.sh"),
        "#!/bin/sh\ncat >/dev/null\necho 'I looked around and changed nothing.'\n",
    )
    .unwrap();
    let agent = format!("cmd:sh {}", env.root().join("idle.sh").display());
    (env, agent)
}

const ONE_STORY: &str =
    r#"{"userStories":[{"id":"US-1","title":"Greet","priority":1,"passes":false}]}"#;

#[test]
fn stories_wait_out_a_usage_limit_and_an_idle_agent_is_stuck() {
    let env = stories_env(ONE_STORY);
    let root = env.root().display().to_string();
    let script = format!(
        r#"#!/bin/sh
R='{root}'
cat >/dev/null
n=$(cat "$R/calls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$R/calls"
if [ $n -eq 1 ]; then
{limit}
fi
echo hi > hello.txt && git add hello.txt && git commit -qm "US-1" >/dev/null
sed -i 's/"passes":false/"passes":true/' prd.json
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done <promise>COMPLETE</promise>"}}'
"#,
        limit = usage_limit_in(3)
    );
    std::fs::write(env.root().join("story.sh"), script).unwrap();
    let agent = format!("cmd:sh {}", env.root().join("story.sh").display());
    let t = Instant::now();
    let r = env.run(&[
        "stories",
        "prd.json",
        "--skip-review",
        "--json",
        "--agent",
        &agent,
        "--agent-format",
        "claude-stream-json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(t.elapsed().as_secs_f64() >= 3.0);
    let evs = events(&r.stdout);
    assert!(
        evs.iter()
            .any(|e| e["event"] == "waiting" && e["class"] == "usage-limit")
    );
    assert_eq!(summary(&evs)["work"]["unit"], "stories");

    // An agent that does nothing: HEAD never moves, so it is stuck after --max-stuck (3).
    let (env, agent) = idle_stories();
    let r = env.run(&[
        "stories",
        "prd.json",
        "--max-iterations",
        "20",
        "--agent",
        &agent,
    ]);
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("STUCK (code 4)"), "{}", r.stdout);
    assert!(
        r.stdout.contains("Stories:     0/1 complete"),
        "{}",
        r.stdout
    );
    assert_eq!(csv_rows(&env.repo()).len(), 3);
}

#[test]
fn the_summary_names_the_list_a_loop_has_and_no_other() {
    let env = spec_env("- [ ] 1.1 Only\n");
    let agent = claude_agent(&env, "");
    let r = env.run(&[
        "implement",
        SPEC,
        "--agent",
        &agent,
        "--agent-format",
        "claude-stream-json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Tasks:       1/1 done"), "{}", r.stdout);
    assert!(!r.stdout.contains("Stories:"), "{}", r.stdout);

    let env = Env::new();
    let r = env.run(&[
        "run",
        "make a file",
        "--agent",
        "cmd:touch made.txt",
        "--validate",
        "test -f made.txt",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("Stories:"), "{}", r.stdout);
    assert!(!r.stdout.contains("Tasks:"), "{}", r.stdout);
}

#[test]
fn the_stuck_count_of_a_work_list_survives_a_resume() {
    let (env, agent) = idle_stories();
    let r = env.run(&[
        "stories",
        "prd.json",
        "--max-iterations",
        "2",
        "--agent",
        &agent,
    ]);
    assert_eq!(r.code, 1, "a limit first: {}\n{}", r.stdout, r.stderr);
    // Resumed: two idle iterations are already counted, so the third is stuck.
    let r = env.run(&[
        "stories",
        "prd.json",
        "--max-iterations",
        "10",
        "--agent",
        &agent,
    ]);
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("resuming at iteration 3"), "{}", r.stderr);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[2]["outcome"], "stuck");
    assert_eq!(rows[2]["stuck_count"], "3");
}

/// A fake opencode that, like the real one, works in `$PWD` (not its cwd): the task's file,
/// its commit and its box; then opencode's JSON with TASK_COMPLETE.
const PWD_OPENCODE: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys
sys.stdin.read()
here = os.environ.get("PWD", "")
tid = os.environ["TASKDAEMON_TASK_ID"]
with open(os.path.join(os.environ["TD_ROOT"], "pwds"), "a") as f:
    f.write(f"{tid} {here}\n")
script = f'''mkdir -p work && echo {tid} > work/{tid}.txt && git add work && git commit -qm "task {tid}"
flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] {tid} /- [x] {tid} /" "$TASKDAEMON_TASKS_FILE"
echo "notes of {tid}" > "$TASKDAEMON_PROGRESS_FILE"'''
subprocess.run(["sh", "-c", script], cwd=here, check=True)
text = {"type": "text", "part": {"type": "text", "text": "done. TASK_COMPLETE"}}
finish = {"type": "step_finish", "part": {"type": "step-finish", "reason": "stop", "tokens": {"input": 1, "output": 1, "reasoning": 0, "cache": {"read": 0, "write": 0}}, "cost": 0}}
print(json.dumps(text)); print(json.dumps(finish))
"#;

#[test]
fn every_agent_gets_its_own_directory_as_pwd_so_a_parallel_opencode_commits_in_its_worktree() {
    let env = spec_env("- [ ] 1.1 [P] Left\n- [ ] 1.2 [P] Right\n");
    let bin = env.root().join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("opencode"), PWD_OPENCODE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("opencode"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = std::ffi::OsString::from(&bin);
    path.push(":");
    path.push(crate::harness::narrowed_path());
    let out = env
        .cmd()
        .env("PATH", &path)
        .env("TD_ROOT", env.root())
        // The shell the user started it from: somewhere else entirely.
        .env("PWD", env.root())
        .env("OLDPWD", "/")
        .args(["implement", SPEC, "--agent", "opencode"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let pwds = std::fs::read_to_string(env.root().join("pwds")).unwrap();
    for l in pwds.lines() {
        assert!(
            l.contains("worklist-worktrees"),
            "each [P] agent's PWD is its worktree: {pwds}"
        );
    }
    let subjects = git(&env.repo(), &["log", "--reverse", "--format=%s"]);
    let tasks: Vec<&str> = subjects
        .lines()
        .filter(|s| s.starts_with("task "))
        .collect();
    assert_eq!(
        tasks,
        ["task 1.1", "task 1.2"],
        "landed in task order: {subjects}"
    );
    assert_eq!(checked(&env), 2);
}

#[test]
fn a_stop_during_a_tasks_verify_command_accepts_nothing() {
    let marker = "VERIFYING";
    let env = spec_env(&format!(
        "- [ ] 1.1 Only\n  - **Verify**: `touch {m}; sleep 30`\n",
        m = marker
    ));
    let agent = claude_agent(&env, "");
    let mut child = env
        .cmd()
        .args([
            "implement",
            SPEC,
            "--json",
            "--agent",
            &agent,
            "--agent-format",
            "claude-stream-json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::harness::wait_for(&env.repo().join(marker), std::time::Duration::from_secs(60));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let t = Instant::now();
    let out = loop {
        if let Some(_status) = child.try_wait().unwrap() {
            break child.wait_with_output().unwrap();
        }
        assert!(t.elapsed().as_secs() < 60, "implement did not stop");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evs = events(&String::from_utf8_lossy(&out.stdout));
    assert!(
        !evs.iter().any(|e| e["event"] == "task_completed"),
        "a Verify cut short is no verdict"
    );
    assert_eq!(checked(&env), 0, "the box the agent checked goes back");
    let state = std::fs::read_to_string(env.repo().join(SPEC).join(".ralph-state.json")).unwrap();
    assert!(!state.contains("\"success\""), "{state}");
}

#[test]
fn an_implement_run_whose_agent_committed_a_key_does_not_complete_and_names_it() {
    let env = spec_env("- [ ] 1.1 Only\n");
    std::fs::write(env.repo().join(".env"), "API_TOKEN=s3cr3t\n").unwrap();
    let agent = claude_agent(
        &env,
        "[ $n -eq 1 ] && git add .env && git commit -qm 'the key too' >/dev/null",
    );
    let (code, evs, stderr) = implement(&env, &agent, &[]);
    assert_ne!(code, 0, "{stderr}");
    let saved = evs
        .iter()
        .find(|e| e["event"] == "uncommitted_saved")
        .expect("uncommitted_saved");
    assert_eq!(saved["secrets"], serde_json::json!([".env"]), "{saved}");
    assert!(saved["snapshot"].is_null(), "{saved}");
    let detail = summary(&evs)["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("the run's commits add files that look like secrets: .env"),
        "{detail}"
    );
    // The harness's note for the agent's next prompt says how to take it out.
    let note = std::fs::read_to_string(env.repo().join(".ralph/feedback.md")).unwrap();
    assert!(note.contains("git rm --cached -- .env"), "{note}");
    assert!(env.repo().join(".env").exists());
}
