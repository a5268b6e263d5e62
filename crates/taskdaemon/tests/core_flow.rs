//! Product logic in the core, seen from the CLI (issue 14, items 6 and 1): the task
//! parser's model call as one agent step (prompt file, the agent contract, its log kept,
//! its failure class named), and `submit` leaving the spec run to the cascade.

#[allow(dead_code)]
mod harness;

use std::path::Path;

use harness::{Env, fixture, git};

/// A fake agent: a shell script in the test's root; returns its `cmd:` spec.
fn fake(env: &Env, name: &str, body: &str) -> String {
    let p = env.root().join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).unwrap();
    format!("cmd:sh {}", p.display())
}

/// Prints the recorded output of a real CLI's failure, with its exit code.
fn replay(rel: &str) -> String {
    let dir = fixture("agent-failures").join(rel);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    format!(
        "cat '{}'\ncat '{}' >&2\nexit {}",
        dir.join("stdout.jsonl").display(),
        dir.join("stderr.txt").display(),
        meta["exit_code"].as_i64().unwrap()
    )
}

fn read(repo: &Path, rel: &str) -> String {
    std::fs::read_to_string(repo.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn project(env: &Env) {
    let repo = env.repo();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/drinks.ts"), "// drinks\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "drinks"]);
}

#[test]
fn a_parse_agent_that_is_not_logged_in_is_named_and_the_rules_parse() {
    let env = Env::new();
    project(&env);
    let claude = fake(&env, "claude.sh", &replay("claude/no-credentials"));
    let r = env.run(&[
        "task",
        "--json",
        "--task-parser",
        "model",
        "--agent",
        &claude,
        "--agent-format",
        "claude-stream-json",
        "--parse-timeout",
        "20s",
        "add 2 more drinks",
    ]);
    // The loop's agent is the same one: the run stops for a person (exit 64).
    assert_eq!(r.code, 64, "{}", r.stderr);
    let evs = harness::events(&r.stdout);
    let started = evs
        .iter()
        .find(|e| e["event"] == "task_started")
        .expect("task_started");
    let v = &started["parse"];
    assert_eq!(v["parser"], "rules", "{v}");
    assert_eq!(v["fallback_class"], "auth", "{v}");
    let why = v["fallback_reason"].as_str().unwrap();
    assert!(why.contains("is not logged in"), "{why}");
    assert!(why.contains("Not logged in · Please run /login"), "{why}");
    assert_eq!(v["task"]["requirements"][0]["count"], 2, "{v}");
    let log = v["log"].as_str().unwrap();
    assert!(log.ends_with(".ralph/logs/task-parse.log"), "{log}");
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.contains("\"error\":\"authentication_failed\""),
        "{text}"
    );
    assert!(
        text.contains("the parse agent's answer was not used: the parse agent"),
        "{text}"
    );
}

#[test]
fn a_tasks_parse_is_an_agent_step_with_prompt_contract_and_log() {
    let env = Env::new();
    project(&env);
    let seen = env.root().join("parse-env.txt");
    let parser = fake(
        &env,
        "parser.sh",
        &format!(
            "env | grep ^TASKDAEMON_ | sort > {}\npwd >> {}\necho 'thinking about it' >&2\necho '{{\"type\":\"mutation\",\"title\":\"More drinks\",\"requirements\":[{{\"marker\":\"ADD\",\"text\":\"2 more drinks\",\"count\":2}}],\"preserve\":[\"existing drinks\"],\"affected_files\":[\"src/drinks.ts\"]}}'",
            seen.display(),
            seen.display()
        ),
    );
    let r = env.run(&[
        "task",
        "add 2 more drinks",
        "--parse-agent",
        &parser,
        "--parse-timeout",
        "20s",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("parsed by cmd:sh"), "{}", r.stderr);
    let repo = env.repo();
    // The prompt file and the log, kept where a run's logs are (not set aside by the run).
    let prompt = read(&repo, ".ralph/logs/task-parse-prompt.md");
    assert!(
        prompt.contains("User message: \"\"\"add 2 more drinks\"\"\""),
        "{prompt}"
    );
    let log = read(&repo, ".ralph/logs/task-parse.log");
    assert!(log.contains("[stderr] thinking about it"), "{log}");
    assert!(log.contains("\"title\":\"More drinks\""), "{log}");
    // The agent contract, in an empty directory outside the project.
    let env_seen = std::fs::read_to_string(&seen).unwrap();
    for want in [
        "TASKDAEMON_LOOP=task-parse",
        "TASKDAEMON_RUN_ID=task-parse",
        "TASKDAEMON_ITERATION=1",
        "TASKDAEMON_MAX_ITERATIONS=1",
        "TASKDAEMON_TASK_PARSE=1",
        "TASKDAEMON_PROMPT_FILE=",
        "TASKDAEMON_BIN=",
    ] {
        assert!(env_seen.contains(want), "{want} not in {env_seen}");
    }
    let cwd = env_seen.lines().last().unwrap();
    assert!(!cwd.starts_with(repo.to_str().unwrap()), "{cwd}");
    assert!(read(&repo, ".ralph/task.md").contains("[ADD] 2 more drinks"));
}
