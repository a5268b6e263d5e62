//! Product logic in the core, seen from the CLI (issue 14, items 6 and 1): the task
//! parser's model call as one agent step (prompt file, the agent contract, its log kept,
//! its failure class named), and `submit` leaving the spec run to the cascade.

use crate::harness;
use std::path::Path;

use crate::harness::{Env, fixture, git};

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

/// A fake agent for the cascade: the spec loop writes one spec document of two phases,
/// each phase commits once and claims completion; every invocation is logged.
const CASCADE_AGENT: &str = r#"#!/bin/sh
cat >/dev/null
echo "$TASKDAEMON_LOOP $TASKDAEMON_RUN_ID" >> "$TD_TEST_DIR/agent.log"
case "$TASKDAEMON_LOOP" in
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  printf -- '---\ntitle: Widgets\nphases: ["Phase 1: a", "Phase 2: b"]\nvalidate: "true"\n---\nBuild widgets.\n' > "$TASKDAEMON_SPECS_DIR/01-widgets.md"
  ;;
phase)
  echo "$TASKDAEMON_RUN_ID" >> "$TASKDAEMON_SPEC_ID-$TASKDAEMON_PHASE_INDEX.txt"
  git add -A && git commit -qm "phase $TASKDAEMON_PHASE_INDEX"
  echo "<promise>COMPLETE</promise>"
  ;;
esac
"#;

struct Cascade<'a> {
    env: &'a Env,
    vars: Vec<(String, String)>,
    agent: String,
}

impl<'a> Cascade<'a> {
    fn new(env: &'a Env) -> Cascade<'a> {
        let agent = env.root().join("agent.sh");
        std::fs::write(&agent, CASCADE_AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // Finished work merges into main, which nobody has checked out.
        git(&env.repo(), &["checkout", "-qb", "wip"]);
        let agent = format!("cmd:{}", agent.display());
        let vars = vec![
            ("TD_TEST_DIR".into(), env.root().display().to_string()),
            ("TASKDAEMON_AGENT".into(), agent.clone()),
        ];
        Cascade { env, vars, agent }
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok_with(&self.vars, args)
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).unwrap()
    }

    fn start(&self) {
        self.ok(&["daemon", "start", "--max-loops", "2", "--tick", "0.2"]);
    }

    /// Every agent invocation: (loop, run id).
    fn invocations(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.env.root().join("agent.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// Wait until every plan is complete, then stop the daemon.
    fn finish(&self) {
        let log = self.env.repo().join(".git/taskdaemon/daemon/daemon.log");
        let start = std::time::Instant::now();
        loop {
            let s = self.status();
            let plans = s["plans"].as_array().cloned().unwrap_or_default();
            if !plans.is_empty() && plans.iter().all(|p| p["status"] == "complete") {
                break;
            }
            let failed = plans.iter().any(|p| p["status"] == "failed");
            assert!(
                !failed && start.elapsed() < std::time::Duration::from_secs(180),
                "the plans did not complete\n{s:#}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        self.ok(&["daemon", "stop"]);
    }

    fn count(&self, loop_name: &str) -> usize {
        self.invocations()
            .iter()
            .filter(|(l, _)| l == loop_name)
            .count()
    }
}

fn plan_doc(env: &Env) -> String {
    let dir = env.repo().join("docs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan.md"), "# Widgets\n\n## Goals\nwidgets\n").unwrap();
    dir.join("plan.md").display().to_string()
}

#[test]
fn a_submitted_plan_document_is_ready_and_its_spec_run_is_queued_once_by_the_daemon() {
    let env = Env::new();
    let c = Cascade::new(&env);
    let plan = plan_doc(&env);
    let out = c.ok(&[
        "submit",
        "plan",
        "--file",
        &plan,
        "--priority",
        "3",
        "--agent",
        &c.agent,
        "--target",
        "main",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let created = v["created"].as_array().unwrap();
    // Only the plan: ready, with the submission's agent and priority for its spec run.
    assert_eq!(created.len(), 1, "{v}");
    assert_eq!(created[0]["status"], "ready", "{v}");
    assert_eq!(created[0]["priority"], 3, "{v}");
    assert_eq!(created[0]["agent"], c.agent.as_str(), "{v}");
    assert!(
        v["daemon"].as_str().unwrap().contains("no daemon runs"),
        "{v}"
    );
    let s = c.status();
    assert_eq!(s["plans"][0]["status"], "ready", "{s:#}");
    c.start();
    c.finish();
    assert_eq!(c.count("spec"), 1, "{:?}", c.invocations());
    assert_eq!(c.count("phase"), 2, "{:?}", c.invocations());
    let runs: serde_json::Value = serde_json::from_str(&c.ok(&["list", "runs", "--json"])).unwrap();
    let spec_runs: Vec<&serde_json::Value> = runs["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["loop_type"] == "spec")
        .collect();
    assert_eq!(spec_runs.len(), 1, "{runs:#}");
    assert_eq!(spec_runs[0]["priority"], 3, "{runs:#}");
    assert_eq!(
        spec_runs[0]["context"]["agent"],
        c.agent.as_str(),
        "{runs:#}"
    );
}

#[test]
fn work_submitted_to_a_running_daemon_runs_exactly_once() {
    let env = Env::new();
    let c = Cascade::new(&env);
    c.start();
    // A spec document: its phases, once each.
    let dir = env.repo().join("docs/specs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("one.md"),
        "---\ntitle: One spec\nphases: [\"Phase 1: a\", \"Phase 2: b\"]\nvalidate: \"true\"\n---\nbody\n",
    )
    .unwrap();
    let one = dir.join("one.md").display().to_string();
    let out = c.ok(&["submit", "spec", &one, "--target", "main"]);
    assert!(out.contains("the daemon picks it up now"), "{out}");
    // A plan document: one spec run, then its phases.
    let plan = plan_doc(&env);
    c.ok(&["submit", "plan", "--file", &plan, "--target", "main"]);
    c.finish();
    assert_eq!(c.count("spec"), 1, "{:?}", c.invocations());
    assert_eq!(c.count("phase"), 4, "{:?}", c.invocations());
    let mut ids: Vec<String> = c.invocations().into_iter().map(|(_, id)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "{:?}", c.invocations());
}
