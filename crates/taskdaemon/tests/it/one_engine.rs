//! One engine for every loop: `implement` and `stories` get the engine's BLOCKED/DECIDE,
//! stuck detection, cost limit and summary.csv rows; an iteration's log keeps what the
//! agent printed even when the harness is `kill -9`ed. Real git, fake agents that are small
//! shell programs.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::{Env, csv_rows, git, wait_for, wait_timeout};

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

/// Write `body` as a shell agent (`R` is the test's root) and return its spec.
fn agent(env: &Env, name: &str, body: &str) -> String {
    let p = env.root().join(name);
    let script = format!("#!/bin/sh\nR='{}'\n{body}", env.root().display());
    std::fs::write(&p, script).unwrap();
    format!("cmd:sh {}", p.display())
}

/// An executor that does task `$TASKDAEMON_TASK_ID` properly: a commit, its box checked.
const DO_THE_TASK: &str = r#"id="$TASKDAEMON_TASK_ID"
mkdir -p work && echo "$id" > "work/$id.txt" && git add work && git commit -qm "task $id"
sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $id"
if [ "$TASKDAEMON_TASK_ROLE" = qa ]; then echo VERIFICATION_PASS; else echo TASK_COMPLETE; fi
"#;

fn modes_and_outcomes(repo: &Path) -> Vec<(String, String)> {
    csv_rows(repo)
        .into_iter()
        .map(|r| (r["mode"].clone(), r["outcome"].clone()))
        .collect()
}

fn pair(mode: &str, outcome: &str) -> (String, String) {
    (mode.to_string(), outcome.to_string())
}

#[test]
fn implement_blocked_exits_2_decide_exits_3_and_the_answer_continues() {
    let env = spec_env("- [ ] 1.1 Pick a database\n- [ ] 1.2 [VERIFY] Check it\n");
    let a = agent(
        &env,
        "agent.sh",
        &format!(
            r#"echo "contract: run=$TASKDAEMON_RUN_ID loop=$TASKDAEMON_LOOP max=$TASKDAEMON_MAX_ITERATIONS" >> "$R/contract"
if grep -q "Answer: postgres" "$TASKDAEMON_PROMPT_FILE" || [ "$TASKDAEMON_TASK_ROLE" = qa ]; then
{DO_THE_TASK}
elif [ -e "$R/block" ]; then
  echo '<promise>BLOCKED: the database password is missing</promise>'
else
  echo '<promise>DECIDE: postgres or sqlite?</promise>'
fi
"#
        ),
    );
    std::fs::write(env.root().join("block"), "").unwrap();
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let blocked = std::fs::read_to_string(env.repo().join(".ralph/blocked.txt")).unwrap();
    assert!(
        blocked.contains("the database password is missing"),
        "{blocked}"
    );
    assert!(
        r.stdout.contains("BLOCKED (code 2)"),
        "summary block: {}",
        r.stdout
    );
    assert!(
        r.stderr.contains("`taskdaemon implement` again"),
        "{}",
        r.stderr
    );

    // Still blocked: a rerun refuses until a person unblocks.
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 2, "blocked, as `run` exits: {}", r.stderr);
    assert!(
        r.stderr
            .contains("`taskdaemon unblock` and `taskdaemon implement`"),
        "{}",
        r.stderr
    );
    assert!(
        blocked.contains("`taskdaemon unblock` and `taskdaemon implement`"),
        "blocked.txt names the command that continues: {blocked}"
    );
    let u = env.run(&["unblock"]);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert!(
        u.stdout.contains("Continue with `taskdaemon implement`") && !u.stdout.contains("--resume"),
        "{}",
        u.stdout
    );
    std::fs::remove_file(env.root().join("block")).unwrap();

    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let decide = std::fs::read_to_string(env.repo().join(".ralph/decide.txt")).unwrap();
    assert!(decide.contains("postgres or sqlite?"), "{decide}");

    let ans = env.run(&["answer", "postgres"]);
    assert_eq!(ans.code, 0, "{}", ans.stderr);
    assert!(
        ans.stdout.contains("Continue with `taskdaemon implement`")
            && !ans.stdout.contains("--resume"),
        "{}",
        ans.stdout
    );
    let r = env.run(&["implement", SPEC, "--agent", &a]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        !env.repo().join(".ralph/decide.txt").exists(),
        "the answered question is archived"
    );
    let tasks = std::fs::read_to_string(env.repo().join(SPEC).join("tasks.md")).unwrap();
    assert!(
        tasks.contains("- [x] 1.1") && tasks.contains("- [x] 1.2"),
        "{tasks}"
    );
    assert_eq!(
        modes_and_outcomes(&env.repo()),
        [
            pair("implement", "blocked"),
            pair("implement", "decide"),
            pair("implement", "continue"),
            pair("qa", "complete"),
        ]
    );
    let contract = std::fs::read_to_string(env.root().join("contract")).unwrap();
    for l in contract.lines() {
        assert!(
            l.contains("run=2026") && (l.contains("loop=implement") || l.contains("loop=qa")),
            "the agent contract: {l}"
        );
    }
}

fn story(passes: bool, status: &str, count: u32) -> String {
    format!(
        "{{\"userStories\": [{{\"id\": \"US-1\", \"title\": \"Greeting\", \"priority\": 1, \"passes\": {passes}, \"reviewStatus\": \"{status}\", \"reviewCount\": {count}, \"dependsOn\": []}}]}}\n"
    )
}

#[test]
fn stories_blocked_in_a_review_keeps_its_count_and_decide_then_answer_continues() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tasks.json"), story(false, "needs_review", 1)).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let a = agent(
        &env,
        "stories.sh",
        &format!(
            r#"f="$TASKDAEMON_STORIES_FILE"
if grep -q "Answer: approve it" "$TASKDAEMON_PROMPT_FILE"; then
  printf '%s' '{approved}' > "$f"; git add -A && git commit -qm review
  echo '<promise>COMPLETE</promise>'
elif [ -e "$R/block" ]; then
  printf '%s' '{counted}' > "$f"
  echo '<promise>BLOCKED: cannot run the app</promise>'
else
  echo '<promise>DECIDE: is a greeting enough?</promise>'
fi
"#,
            approved = story(true, "approved", 2).trim_end(),
            counted = story(false, "needs_review", 2).trim_end(),
        ),
    );
    std::fs::write(env.root().join("block"), "").unwrap();
    let r = env.run(&["stories", "--agent", &a]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo.join("tasks.json")).unwrap()).unwrap();
    assert_eq!(after["userStories"][0]["reviewCount"], 1, "{after}");
    assert_eq!(after["userStories"][0]["reviewStatus"], "needs_review");
    assert!(repo.join(".ralph/blocked.txt").is_file());

    assert_eq!(env.run(&["unblock"]).code, 0);
    std::fs::remove_file(env.root().join("block")).unwrap();
    let r = env.run(&["stories", "--agent", &a]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let ans = env.run(&["answer", "approve it", "--json"]);
    assert_eq!(ans.code, 0, "{}", ans.stderr);
    let v: serde_json::Value = serde_json::from_str(&ans.stdout).unwrap();
    assert_eq!(v["next"], "taskdaemon stories", "{}", ans.stdout);
    let r = env.run(&["stories", "--agent", &a]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("COMPLETE (code 0)"), "{}", r.stdout);
    assert_eq!(
        modes_and_outcomes(&repo),
        [
            pair("review", "blocked"),
            pair("review", "decide"),
            pair("review", "complete"),
        ]
    );
}

#[test]
fn an_executor_that_never_commits_is_stuck_after_max_stuck_rejections() {
    let env = spec_env("- [ ] 1.1 Do something\n");
    let a = agent(&env, "lazy.sh", "echo 'nothing to do. TASK_COMPLETE'\n");
    let r = env.run(&["implement", SPEC, "--agent", &a, "--max-stuck", "2"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stdout.contains("STUCK (code 4)"), "{}", r.stdout);
    assert_eq!(
        modes_and_outcomes(&env.repo()),
        [pair("implement", "rejected"), pair("implement", "stuck")]
    );

    // Stories: an implement iteration that approves itself is rejected (and restored).
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tasks.json"), story(false, "pending", 0)).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let a = agent(
        &env,
        "cheat.sh",
        &format!(
            "printf '%s' '{}' > \"$TASKDAEMON_STORIES_FILE\"\n",
            story(true, "approved", 0).trim_end()
        ),
    );
    let r = env.run(&["stories", "--agent", &a, "--max-stuck", "3"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert_eq!(
        modes_and_outcomes(&repo),
        [
            pair("implement", "rejected"),
            pair("implement", "rejected"),
            pair("implement", "stuck"),
        ]
    );
}

/// A Claude-like agent: does the work, then reports 0.6 USD in its result line.
fn costly(env: &Env, work: &str) -> String {
    agent(
        env,
        "costly.sh",
        &format!(
            "{work}\necho '{{\"type\":\"assistant\",\"message\":{{\"content\":[{{\"type\":\"text\",\"text\":\"TASK_COMPLETE\"}}]}}}}'\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"TASK_COMPLETE\",\"total_cost_usd\":0.6}}'\n"
        ),
    )
}

#[test]
fn max_cost_stops_implement_and_stories() {
    let env = spec_env("- [ ] 1.1 One\n- [ ] 1.2 Two\n- [ ] 1.3 Three\n");
    let work = DO_THE_TASK.replace("if [ \"$TASKDAEMON_TASK_ROLE\" = qa ]; then echo VERIFICATION_PASS; else echo TASK_COMPLETE; fi\n", "");
    let a = costly(&env, &work);
    let r = env.run(&[
        "implement",
        SPEC,
        "--agent",
        &a,
        "--agent-format",
        "claude-stream-json",
        "--max-cost",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("max cost reached"), "{}", r.stderr);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["cost_usd"], "0.600000");
    assert!(
        r.stdout.contains("$1.20") || r.stdout.contains("1.2"),
        "{}",
        r.stdout
    );

    let env = Env::new();
    let repo = env.repo();
    std::fs::write(repo.join("tasks.json"), story(false, "pending", 0)).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let a = costly(&env, "echo working");
    let r = env.run(&[
        "stories",
        "--agent",
        &a,
        "--agent-format",
        "claude-stream-json",
        "--max-cost",
        "1",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("max cost reached"), "{}", r.stderr);
    assert_eq!(csv_rows(&repo).len(), 2);
}

#[test]
fn a_kill_9_of_run_mid_iteration_keeps_what_the_agent_printed_in_its_log() {
    let env = Env::new();
    let a = agent(
        &env,
        "talker.sh",
        "echo 'first line of the agent'\necho 'second line' >&2\ntouch \"$R/printed\"\nsleep 60\n",
    );
    let mut child = env
        .cmd()
        .args([
            "run",
            "say two things",
            "--agent",
            &a,
            "--max-iterations",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&env.root().join("printed"), Duration::from_secs(60));
    let log = env.repo().join(".ralph/logs/iteration-001.log");
    // While the agent still runs, the log (what `logs --follow` reads) has its lines.
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("second line") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(text.contains("first line of the agent"), "{text}");
    child.kill().unwrap(); // SIGKILL
    wait_timeout(&mut child, Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("first line of the agent\n"), "{text}");
    assert!(text.contains("[stderr] second line\n"), "{text}");
}
