//! End-to-end tests: the real binary, real git repositories in temp dirs, real agent
//! processes (`cmd:` shell agents and the scripted agent). Hermetic: temp HOME, git config
//! pointed away from the user's, a fixed clock, no inherited TASKDAEMON_* settings.

use crate::harness;
mod store;

use std::time::Duration;

use crate::harness::{Env, csv_rows, events};

#[test]
fn demo_completes_after_rejecting_a_premature_complete() {
    let env = Env::new();
    let dir = env.root().join("demo");
    let out = env
        .cmd()
        .args(["demo", "--path"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Exit:        COMPLETE (code 0)"),
        "{stdout}"
    );
    assert!(stdout.contains("summary.csv"), "{stdout}");
    let rows = csv_rows(&dir);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["outcome"], "rejected");
    assert_eq!(rows[0]["validation_passed"], "false");
    assert_eq!(rows[1]["outcome"], "complete");
    // The next prompt carries the failing validation's output.
    let p2 = std::fs::read_to_string(dir.join(".ralph/logs/iteration-002.prompt.md")).unwrap();
    assert!(p2.contains("FAIL calc mul 4 5: expected 20"), "{p2}");
    assert!(
        !std::fs::read_to_string(dir.join(".ralph/logs/iteration-001.prompt.md"))
            .unwrap()
            .contains("FAIL")
    );
}

#[test]
fn every_csv_column_is_filled_and_commit_hash_only_empty_without_a_commit() {
    let env = Env::new();
    // Iteration 1 commits, 2 and 3 do not; validation always fails; stuck after 2.
    let script = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - write: { path: a.txt, content: a }\n      - commit: a\n  - steps: [ { say: nothing } ]\n  - steps: [ { say: nothing } ]\n",
    );
    let code = env
        .run(&[
            "run",
            "task",
            "--agent",
            &script,
            "--validate",
            "false",
            "--max-stuck",
            "2",
        ])
        .code;
    assert_eq!(code, 4);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 3);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 16);
        for (k, v) in row {
            if k == "commit_hash" && i > 0 {
                assert_eq!(v, "", "row {i}");
            } else {
                assert!(!v.is_empty(), "row {i} column {k} is empty");
            }
        }
    }
    assert_eq!(rows[0]["commit_hash"].len(), 12);
    assert_eq!(
        [&rows[1]["stuck_count"], &rows[2]["stuck_count"]],
        ["1", "2"]
    );
    assert_eq!(rows[2]["outcome"], "stuck");
}

#[test]
fn exit_1_when_max_iterations_is_reached() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:date > stamp.txt; git add -A; git commit -qm step",
        "--validate",
        "false",
        "--max-iterations",
        "2",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("LIMIT (code 1): max iterations reached"),
        "{}",
        r.stdout
    );
    assert_eq!(csv_rows(&env.repo()).len(), 2);
}

#[test]
fn exit_1_when_the_reported_cost_reaches_max_cost() {
    let env = Env::new();
    let script = env.script("c.yaml", "format: stream-json\nafter-last: repeat-last\niterations:\n  - steps: [ { cost: 0.6 }, { say: working } ]\n");
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        &script,
        "--validate",
        "false",
        "--max-cost",
        "1",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("max cost reached"), "{}", r.stdout);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["cost_usd"], "0.600000");
}

#[test]
fn exit_1_when_max_runtime_cuts_an_iteration() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:sleep 30",
        "--max-runtime",
        "1s",
        "--kill-grace",
        "100ms",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("max runtime reached"), "{}", r.stdout);
    assert_eq!(csv_rows(&env.repo())[0]["outcome"], "timeout");
}

#[test]
fn exit_2_blocked_then_refused_until_unblocked_then_resumable() {
    let env = Env::new();
    let script = env.script("b.yaml", "iterations:\n  - steps: [ { say: \"<promise>BLOCKED:</promise> ignored\" }, { say: \"<promise>BLOCKED:missing API key</promise>\" } ]\n  - steps: [ { say: \"<promise>COMPLETE</promise>\" } ]\n");
    let r = env.run(&["run", "task", "--agent", &script]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let blocked = std::fs::read_to_string(env.repo().join(".ralph/blocked.txt")).unwrap();
    assert!(
        blocked.contains("reason: missing API key") && blocked.contains("iteration 1"),
        "{blocked}"
    );
    // Refused while blocked, with what to do.
    let again = env.run(&["run", "--resume"]);
    assert_eq!(again.code, 2);
    assert!(
        again.stderr.contains("taskdaemon unblock"),
        "{}",
        again.stderr
    );
    let u = env.run(&["unblock"]);
    assert_eq!(u.code, 0);
    assert!(u.stdout.contains("missing API key"));
    assert!(!&env.repo().join(".ralph/blocked.txt").exists());
    let resumed = env.run(&["run", "--resume", "--json"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let ev = events(&resumed.stdout);
    assert_eq!(ev[0]["event"], "run_started");
    assert_eq!(ev[0]["first_iteration"], 2);
}

#[test]
fn empty_blocked_reason_is_ignored_and_the_loop_goes_on() {
    let env = Env::new();
    let script = env.script("e.yaml", "after-last: repeat-last\niterations:\n  - steps: [ { say: \"<promise>BLOCKED:</promise>\" } ]\n");
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        &script,
        "--max-iterations",
        "2",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("ignored promise: BLOCKED with an empty reason"),
        "{}",
        r.stderr
    );
    assert!(!&env.repo().join(".ralph/blocked.txt").exists());
}

#[test]
fn exit_3_decide_then_answer_goes_into_the_next_prompt_and_is_archived() {
    let env = Env::new();
    let script = env.script("d.yaml", "iterations:\n  - steps: [ { say: \"<promise>DECIDE:WebSockets or polling?</promise>\" } ]\n  - steps: [ { run: \"cat $TASKDAEMON_PROMPT_FILE > seen-prompt.txt\" }, { say: \"<promise>COMPLETE</promise>\" } ]\n");
    let r = env.run(&["run", "task", "--agent", &script]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let decide = std::fs::read_to_string(env.repo().join(".ralph/decide.txt")).unwrap();
    assert!(
        decide.starts_with(
            "## Question (from iteration 1, 2026-11-21T12:00:00Z)\nWebSockets or polling?\n\n---\n"
        ),
        "{decide}"
    );
    assert_eq!(
        env.run(&["run", "--resume"]).code,
        3,
        "refused while unanswered"
    );
    assert_eq!(env.run(&["answer", "Use polling for now."]).code, 0);
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let seen = std::fs::read_to_string(env.repo().join("seen-prompt.txt")).unwrap();
    assert!(
        seen.contains("Question: WebSockets or polling?\nAnswer: Use polling for now."),
        "{seen}"
    );
    assert!(!&env.repo().join(".ralph/decide.txt").exists());
    let archived: Vec<_> = std::fs::read_dir(env.repo().join(".ralph/decisions"))
        .unwrap()
        .collect();
    assert_eq!(archived.len(), 1);
}

#[test]
fn exit_4_when_no_commit_for_max_stuck_iterations() {
    let env = Env::new();
    let r = env.run(&["run", "task", "--agent", "cmd:true", "--validate", "false"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stdout.contains("STUCK (code 4)") && r.stdout.contains("Stuck iters: 3"),
        "{}",
        r.stdout
    );
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:true",
        "--validate",
        "false",
        "--max-stuck",
        "1",
    ]);
    assert_eq!(r.code, 4);
    // The --max-stuck 1 run stopped after its first iteration: one more row, of a new run.
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 4);
    assert_eq!(
        (rows[3]["iteration"].as_str(), rows[3]["outcome"].as_str()),
        ("1", "stuck")
    );
    assert_ne!(rows[3]["run_id"], rows[0]["run_id"]);
}

#[test]
fn exit_0_without_validation_warns_that_nothing_verified_it() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:echo '<promise>COMPLETE</promise>'",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("no validation command"), "{}", r.stderr);
    assert!(
        r.stdout.contains("no validation command verified it"),
        "{}",
        r.stdout
    );
}

#[test]
fn completion_promise_is_required_when_set() {
    let env = Env::new();
    // Validation passes from the start, but the run asks for <promise>DONE</promise>.
    let script = env.script("p.yaml", "iterations:\n  - steps: [ { say: \"<promise>COMPLETE</promise>\" } ]\n  - steps: [ { say: \"<promise>DONE</promise>\" } ]\n");
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        &script,
        "--validate",
        "true",
        "--completion-promise",
        "DONE",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(csv_rows(&env.repo()).len(), 2);
}

#[test]
fn an_echoed_prompt_is_not_a_promise() {
    let env = Env::new();
    // `cat` echoes the prompt, which explains the promise tags.
    let r = env.run(&["run", "task", "--agent", "cmd:cat", "--max-iterations", "1"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
}

#[test]
fn recorded_claude_transcript_with_promise_in_a_tool_call_does_not_complete() {
    let env = Env::new();
    let fx = harness::fixture("claude-stream-json/1-tools-and-promise-inside-tool-call.jsonl");
    let agent = format!("cmd:cat '{}'", fx.display());
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        &agent,
        "--agent-format",
        "claude-stream-json",
        "--max-iterations",
        "1",
        "--json",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let ev = events(&r.stdout);
    let finished = ev.iter().find(|e| e["event"] == "agent_finished").unwrap();
    assert_eq!(finished["tool_calls"], 4);
    assert_eq!(finished["cost_usd"], 0.025);
    assert!(!ev.iter().any(|e| e["event"] == "signal"));
    let row = &csv_rows(&env.repo())[0];
    assert_eq!(
        (
            row["tokens_in"].as_str(),
            row["tokens_out"].as_str(),
            row["cost_usd"].as_str()
        ),
        ("5000", "250", "0.025000")
    );

    let fx = harness::fixture("claude-stream-json/2-complete.jsonl");
    let agent = format!("cmd:cat '{}'", fx.display());
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        &agent,
        "--agent-format",
        "claude-stream-json",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_promise_in_a_scripted_stream_json_tool_call_does_not_complete() {
    let env = Env::new();
    let script = env.script(
        "t.yaml",
        "format: stream-json\niterations:\n  - steps:\n      - tool: { name: Bash, input: { command: \"echo '<promise>COMPLETE</promise>'\" }, output: \"<promise>COMPLETE</promise>\" }\n      - say: still working\n",
    );
    let r = env.run(&["run", "task", "--agent", &script, "--max-iterations", "1"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
}

#[test]
fn recorded_codex_transcripts() {
    let env = Env::new();
    for (file, code) in [
        (
            "codex-exec-json/1-commands-and-promise-inside-command.jsonl",
            1,
        ),
        ("codex-exec-json/2-complete.jsonl", 0),
    ] {
        let agent = format!("cmd:cat '{}'", harness::fixture(file).display());
        let r = env.run(&[
            "run",
            "task",
            "--agent",
            &agent,
            "--agent-format",
            "codex-json",
            "--max-iterations",
            "1",
        ]);
        assert_eq!(r.code, code, "{file}: {}", r.stderr);
    }
}

#[test]
fn timeout_stops_an_agent_and_its_background_grandchild() {
    let env = Env::new();
    // The agent ignores TERM, starts a grandchild that also ignores it, and hangs.
    let agent = "cmd:echo $$ > leader.pid; (trap '' TERM; sleep 300) & echo $! > grandchild.pid; trap '' TERM; sleep 300";
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        agent,
        "--iteration-timeout",
        "1s",
        "--kill-grace",
        "300ms",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(csv_rows(&env.repo())[0]["outcome"], "timeout");
    assert_eq!(csv_rows(&env.repo())[0]["agent_exit_code"], "137");
    let leader = harness::read_pid(&env.repo().join("leader.pid"));
    let gc = harness::read_pid(&env.repo().join("grandchild.pid"));
    assert!(
        !harness::group_exists(leader),
        "a process of group {leader} survived"
    );
    assert!(!harness::pid_alive(gc), "grandchild {gc} survived");
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(log.contains("timed out"), "{log}");
}

#[test]
fn sigint_mid_iteration_then_resume_continues_with_the_stuck_count() {
    let env = Env::new();
    let script = env.script(
        "s.yaml",
        "iterations:\n  - steps: [ { say: one } ]\n  - steps: [ { run: \"if [ -e started-2 ]; then echo again; else echo x > started-2; sleep 60; fi\" } ]\n  - steps: [ { say: three } ]\n",
    );
    let mut child = env
        .cmd()
        .args([
            "run",
            "task",
            "--agent",
            &script,
            "--validate",
            "false",
            "--max-stuck",
            "5",
            "--max-iterations",
            "3",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    harness::wait_for(&env.repo().join("started-2"), Duration::from_secs(20));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = harness::wait_timeout(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130));
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.repo().join(".ralph/run.json")).unwrap())
            .unwrap();
    assert_eq!(
        st["iterations_done"], 1,
        "the interrupted iteration does not count toward --max-iterations"
    );
    assert_eq!(st["stuck_count"], 1);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows[1]["outcome"], "interrupted");

    let r = env.run(&["run", "--resume", "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let ev = events(&r.stdout);
    assert_eq!(ev[0]["first_iteration"], 2, "iteration 2 runs again");
    let fins: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|e| e["event"] == "iteration_finished")
        .collect();
    assert_eq!(
        fins.len(),
        2,
        "iterations 2 and 3: all of --max-iterations 3"
    );
    assert_eq!(fins[0]["iteration"], 2);
    assert_eq!(
        fins[0]["stuck_count"], 2,
        "stuck count carried over from iteration 1"
    );
    let rows = csv_rows(&env.repo());
    assert_eq!(
        rows.len(),
        3,
        "the redone iteration replaced its row: {rows:?}"
    );
    assert_eq!(rows[1]["outcome"], "continue");
}

#[test]
fn usage_and_config_errors_exit_64_with_a_hint() {
    let env = Env::new();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "task", "--no-such-flag"], "--no-such-flag"),
        (
            vec!["run", "task", "--agent", "gpt"],
            "claude, codex, gemini, opencode, amp",
        ),
        (
            vec![
                "run",
                "task",
                "--agent",
                "cmd:true",
                "--iteration-timeout",
                "5 parsecs",
            ],
            "ms, s, m, h",
        ),
        (
            vec!["run", "task", "--agent", "script:missing.yaml"],
            "does not exist",
        ),
        (
            vec!["run", "task", "--agent", "cmd:true", "--loop", "ralf"],
            "did you mean `ralph`",
        ),
        (
            vec![
                "--config",
                "nope.yaml",
                "run",
                "task",
                "--agent",
                "cmd:true",
            ],
            "config file nope.yaml does not exist",
        ),
        (vec!["run", "--agent", "cmd:true"], "no task given"),
        (vec!["run", "--resume"], "no run to resume"),
        (
            vec![
                "run",
                "task",
                "--agent",
                "cmd:true",
                "--max-iterations",
                "0",
            ],
            "at least 1",
        ),
    ];
    for (args, needle) in cases {
        let r = env.run(&args);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
    }
    let bad = &env.repo().join("bad.yaml");
    std::fs::write(bad, "agent: cmd:true\nmax-iteratons: 3\n").unwrap();
    let r = env.run(&["--config", bad.to_str().unwrap(), "run", "task"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("bad.yaml:2:1") && r.stderr.contains("did you mean `max-iterations`"),
        "{}",
        r.stderr
    );
    // Not a git repository.
    let plain = env.root().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let r = env.run(&[
        "-C",
        plain.to_str().unwrap(),
        "run",
        "task",
        "--agent",
        "cmd:true",
    ]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("git init"), "{}", r.stderr);
}

#[test]
fn unknown_template_variable_fails_before_the_first_iteration() {
    let env = Env::new();
    let loops = &env.repo().join(".taskdaemon/loops");
    std::fs::create_dir_all(loops).unwrap();
    std::fs::write(
        loops.join("mine.yaml"),
        "mine:\n  prompt-template: \"{{task-description}} {{#if git-dif}}x{{/if}}\"\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iterations: 3\n",
    )
    .unwrap();
    let r = env.run(&["run", "task", "--agent", "cmd:touch ran", "--loop", "mine"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("unknown variable `git-dif`")
            && r.stderr.contains("did you mean `git-diff`"),
        "{}",
        r.stderr
    );
    assert!(!&env.repo().join("ran").exists());
    assert!(!&env.repo().join(".ralph/logs").exists());
}

#[test]
fn settings_come_from_config_then_env_then_flags() {
    let env = Env::new();
    assert_eq!(env.run(&["init"]).code, 0);
    let cfg = &env.repo().join(".taskdaemon/config.yaml");
    let text = std::fs::read_to_string(cfg).unwrap();
    std::fs::write(
        cfg,
        format!(
            "{text}\nagent: \"cmd:true\"\nvalidate: \"false\"\nmax-stuck: 0\nmax-iterations: 4\n"
        ),
    )
    .unwrap();
    // Its agent and validation apply once the file is trusted.
    assert_eq!(env.run(&["trust"]).code, 0);
    assert_eq!(csv_len_after(&env, &[], &[]), 4);
    assert_eq!(
        csv_len_after(&env, &[("TASKDAEMON_MAX_ITERATIONS", "2")], &[]),
        2
    );
    assert_eq!(
        csv_len_after(
            &env,
            &[("TASKDAEMON_MAX_ITERATIONS", "2")],
            &["--max-iterations", "1"]
        ),
        1
    );
}

fn csv_len_after(env: &Env, vars: &[(&str, &str)], flags: &[&str]) -> usize {
    let _ = std::fs::remove_dir_all(env.repo().join(".ralph/logs"));
    let mut c = env.cmd();
    c.args(["run", "task"]).args(flags);
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    csv_rows(&env.repo()).len()
}

#[test]
fn init_writes_config_and_gitignore_once() {
    let env = Env::new();
    let r = env.run(&["init", "--json"]);
    assert_eq!(r.code, 0);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["config_written"], true);
    let gi = std::fs::read_to_string(env.repo().join(".gitignore")).unwrap();
    for p in [
        ".ralph/logs/",
        ".ralph/blocked.txt",
        ".ralph/decide.txt",
        ".ralph/run.json",
    ] {
        assert!(gi.lines().any(|l| l == p), "{p} missing from {gi}");
    }
    let again: serde_json::Value =
        serde_json::from_str(env.run(&["init", "--json"]).stdout.trim()).unwrap();
    assert_eq!(again["config_written"], false);
    assert_eq!(again["gitignore_added"], serde_json::json!([]));
}

#[test]
fn runtime_files_are_never_committed_by_the_agent() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:git add -A && git commit -qm all",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let files = harness::git(&env.repo(), &["ls-files"]);
    assert!(
        !files.contains(".ralph/logs") && !files.contains("run.json"),
        "{files}"
    );
}

#[test]
fn loops_lists_sources_and_overrides() {
    let env = Env::new();
    let user = env.home().join(".config/taskdaemon/loops");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("r.yaml"), "ralph:\n  prompt-template: \"{{task-description}}\"\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iterations: 3\n").unwrap();
    let r = env.run(&["loops", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let names: Vec<&str> = v["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "implement",
            "phase",
            "plan",
            "qa",
            "ralph",
            "spec",
            "story-implement",
            "story-review"
        ],
        "{v}"
    );
    let ralph = &v["loops"][4];
    assert!(
        ralph["source"].as_str().unwrap().starts_with("user: "),
        "{v}"
    );
    assert_eq!(ralph["overrides"], serde_json::json!(["built-in"]));
    assert_eq!(v["loops"][2]["source"], "built-in", "{v}");
    std::fs::write(user.join("bad.yaml"), "x:\n  prompt-template: [\n").unwrap();
    let r = env.run(&["loops"]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("bad.yaml:2:"), "{}", r.stderr);
}

#[test]
fn archive_moves_the_run_and_keeps_logs_unless_asked() {
    let env = Env::new();
    assert_eq!(
        env.run(&[
            "run",
            "task",
            "--agent",
            "cmd:true",
            "--max-iterations",
            "1"
        ])
        .code,
        1
    );
    let r = env.run(&["archive", "--label", "first", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let dir = std::path::PathBuf::from(v["dir"].as_str().unwrap());
    assert!(dir.ends_with("20261121-120000-first"), "{dir:?}");
    assert!(dir.join("run.json").exists());
    assert!(&env.repo().join(".ralph/logs/summary.csv").exists());
    // The archived runtime files stay out of an agent's `git add -A` as they did before.
    let untracked = harness::git(
        &env.repo(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert!(!untracked.contains("run.json"), "{untracked}");
    assert_eq!(
        env.run(&[
            "run",
            "task",
            "--agent",
            "cmd:true",
            "--max-iterations",
            "1"
        ])
        .code,
        1
    );
    let r = env.run(&["archive", "--include-logs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert!(
        std::path::Path::new(v["dir"].as_str().unwrap())
            .join("logs/summary.csv")
            .exists()
    );
    assert!(!&env.repo().join(".ralph/logs").exists());
}

#[test]
fn json_mode_prints_only_json_events() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "task",
        "--agent",
        "cmd:echo hello",
        "--max-iterations",
        "1",
        "--json",
    ]);
    assert_eq!(r.code, 1);
    let ev = events(&r.stdout);
    assert_eq!(ev.first().unwrap()["event"], "run_started");
    assert_eq!(ev.last().unwrap()["event"], "run_finished");
    assert_eq!(ev.last().unwrap()["summary"]["exit_code"], 1);
    assert!(
        ev.iter()
            .any(|e| e["event"] == "agent" && e["text"] == "hello")
    );
}

#[test]
fn a_second_run_in_the_same_tree_is_refused_while_one_runs() {
    let env = Env::new();
    let mut first = env
        .cmd()
        .args([
            "run",
            "task",
            "--agent",
            "cmd:touch started; sleep 30",
            "--max-iterations",
            "1",
            "--kill-grace",
            "100ms",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    harness::wait_for(&env.repo().join("started"), Duration::from_secs(20));
    let r = env.run(&["run", "task", "--agent", "cmd:true"]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("already running"), "{}", r.stderr);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(
        harness::wait_timeout(&mut first, Duration::from_secs(20)).code(),
        Some(130)
    );
}

#[test]
fn no_agent_installed_lists_each_choice_with_its_install_command() {
    let env = Env::new();
    // A PATH with git and sh only.
    let bin = env.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["git", "sh"] {
        let real = harness::which(tool);
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let out = env
        .cmd()
        .env("PATH", &bin)
        .args(["run", "task"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    for hint in [
        "npm install -g @anthropic-ai/claude-code",
        "npm install -g @openai/codex",
        "npm install -g @google/gemini-cli",
        "npm install -g opencode-ai",
        "npm install -g @sourcegraph/amp",
        "script:FILE",
    ] {
        assert!(stderr.contains(hint), "{hint}: {stderr}");
    }
    let out = env
        .cmd()
        .env("PATH", &bin)
        .args(["run", "task", "--agent", "codex"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("agent `codex` is not installed"));
}

#[test]
fn a_new_run_keeps_the_previous_runs_logs() {
    let env = Env::new();
    assert_eq!(
        env.run(&[
            "run",
            "one",
            "--agent",
            "cmd:echo first",
            "--max-iterations",
            "1"
        ])
        .code,
        1
    );
    std::fs::remove_file(env.repo().join(".ralph/run.json")).unwrap();
    assert_eq!(
        env.run(&[
            "run",
            "two",
            "--agent",
            "cmd:echo second",
            "--max-iterations",
            "1"
        ])
        .code,
        1
    );
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(log.contains("second") && !log.contains("first"), "{log}");
    let kept: Vec<_> = std::fs::read_dir(env.repo().join(".ralph/logs/runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("previous-"))
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        csv_rows(&env.repo()).len(),
        2,
        "summary.csv accumulates across runs"
    );
}
