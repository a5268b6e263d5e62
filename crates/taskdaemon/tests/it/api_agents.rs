//! Direct model API agents (`api:anthropic:MODEL`, `api:openai:MODEL`) from the CLI,
//! against a real HTTP server on 127.0.0.1 (`tests/fixtures/api_mock.py`) replaying
//! scripted, streamed replies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Env, Run, csv_rows, git};
use serde_json::{Value, json};

const KEY: &str = "sk-test-9f8e7d6c5b4a-SECRET";

struct Mock {
    child: Child,
    port: u16,
    log: PathBuf,
}

/// Whether python3 (the mock's interpreter) is here: outside CI a test without it is
/// skipped loudly; in CI (`CI=true`, where `.ci/run` installs it) it fails.
fn have_python() -> bool {
    let found = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is missing in CI: .ci/run installs it"
        );
        eprintln!(
            "SKIPPED: python3 is not installed; the api_agents tests need it for the mock model API"
        );
    }
    found
}

impl Mock {
    fn start(env: &Env, name: &str, script: Value) -> Mock {
        let dir = env.root().join(format!("mock-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
        let port_file = dir.join("port");
        let log = dir.join("requests.jsonl");
        let child = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/api_mock.py"))
            .arg(dir.join("script.json"))
            .arg(&port_file)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs the mock model API");
        let t = Instant::now();
        while !port_file.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the mock never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Mock { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn user_config(env: &Env, yaml: &str) {
    let dir = env.home().join(".config/taskdaemon");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
}

fn run_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = env.cmd();
    c.env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY");
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Value {
    json!({"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write})
}

/// Write a file, run the validation, commit, say COMPLETE.
fn build_script(provider: &str) -> Value {
    json!({"provider": provider, "key": KEY, "replies": [
        {"text": "I'll write the greeting.", "calls": [
            {"name": "write_file", "input": {"path": "hello.txt", "content": "hello\n"}}],
         "usage": usage(1000, 50, 0, 900)},
        {"text": "", "calls": [{"name": "run_command", "input": {"command": "test \"$(cat hello.txt)\" = hello && echo valid"}}],
         "usage": usage(60, 30, 900, 0)},
        {"calls": [{"name": "run_command", "input": {"command": "git add hello.txt && git commit -qm 'add hello' && git log --oneline | head -1; echo \"key:$ANTHROPIC_API_KEY$OPENAI_API_KEY.\""}}],
         "usage": usage(80, 20, 900, 0)},
        {"text": "hello.txt is written and committed. <promise>COMPLETE</promise>",
         "usage": usage(100, 40, 900, 0)}
    ]})
}

/// Every file under `dir`, bytes searched for `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                dirs.push(p);
            } else if ft.is_file()
                && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                hits.push(p);
            }
        }
    }
    hits
}

fn end_to_end(provider: &str, model: &str, key_var: &str, base: impl Fn(&Mock) -> String) {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(&env, provider, build_script(provider));
    user_config(
        &env,
        &format!("api:\n  {provider}:\n    base-url: {}\n", base(&mock)),
    );
    let agent = format!("api:{provider}:{model}");
    let r = run_with(
        &env,
        &[(key_var, KEY)],
        &[
            "run",
            "write hello.txt",
            "--agent",
            &agent,
            "--validate",
            "test \"$(cat hello.txt)\" = hello",
            "--max-iterations",
            "3",
        ],
    );
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    let repo = env.repo();
    assert_eq!(
        std::fs::read_to_string(repo.join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert!(git(&repo, &["log", "--format=%s"]).contains("add hello"));

    // Tokens and cost in summary.csv are the mock's usage: in = input + cached, out.
    let rows = csv_rows(&repo);
    assert_eq!(rows.len(), 1, "{rows:?}");
    // OpenAI's usage has no cache writes: the mock's first 900 are not reported there.
    let written = if provider == "anthropic" { 900 } else { 0 };
    let (tin, tout) = (
        1000 + written + 60 + 900 + 80 + 900 + 100 + 900,
        50 + 30 + 20 + 40,
    );
    assert_eq!(rows[0]["tokens_in"], tin.to_string(), "{rows:?}");
    assert_eq!(rows[0]["tokens_out"], tout.to_string(), "{rows:?}");
    let cost: f64 = rows[0]["cost_usd"].parse().unwrap();
    let expected = if provider == "anthropic" {
        // claude-sonnet-4: $3 in, $15 out, cache read $0.30, cache write $3.75 per M.
        (1240.0 * 3.0 + 140.0 * 15.0 + 2700.0 * 0.3 + 900.0 * 3.75) / 1e6
    } else {
        // gpt-4o-mini: $0.15 in, $0.60 out; a cache read a tenth of input.
        (1240.0 * 0.15 + 140.0 * 0.6 + 2700.0 * 0.015) / 1e6
    };
    assert!((cost - expected).abs() < 1e-6, "cost {cost} vs {expected}");

    // The iteration log shows each turn, readably.
    let log = std::fs::read_to_string(repo.join(".ralph/logs/iteration-001.log")).unwrap();
    for want in [
        "── turn 1:",
        "── turn 4:",
        "model: I'll write the greeting.",
        "tool write_file: hello.txt",
        "  → wrote 6 bytes to hello.txt",
        "valid",
        "tool run_command: git add hello.txt",
        "model: hello.txt is written and committed.",
        // The model's commands never see the key.
        "key:.",
        "promise: complete",
    ] {
        assert!(log.contains(want), "`{want}` missing from the log:\n{log}");
    }
    assert!(!log.contains("data: {"), "raw SSE in the log:\n{log}");

    // The wire: 4 requests, each with the key; tool results went back to the model.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4, "{reqs:#?}");
    assert!(reqs.iter().all(|r| r["has_key"] == true));
    let last = reqs[3]["body"].to_string();
    assert!(last.contains("wrote 6 bytes to hello.txt"), "{last}");
    assert!(reqs[0]["body"]["stream"] == true);
    if provider == "anthropic" {
        // The stable prefix is cached: the last tool, the system prompt, the prompt.
        let b = &reqs[0]["body"];
        let tools = b["tools"].as_array().unwrap();
        assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
        assert_eq!(
            b["messages"][0]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
    }

    // The key was written nowhere the run wrote.
    for dir in [env.repo(), env.home()] {
        let hits = files_containing(&dir, KEY.as_bytes());
        assert!(hits.is_empty(), "the key is in {hits:?}");
    }
    assert!(!r.stdout.contains(KEY) && !r.stderr.contains(KEY));
}

#[test]
fn anthropic_end_to_end() {
    end_to_end(
        "anthropic",
        "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY",
        Mock::url,
    );
}

#[test]
fn openai_end_to_end() {
    end_to_end("openai", "gpt-4o-mini", "OPENAI_API_KEY", |m| {
        format!("{}/v1", m.url())
    });
}

#[test]
fn the_system_prompt_goes_to_the_system_field() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "sys",
        json!({"provider": "anthropic", "replies": [{"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}]}),
    );
    user_config(
        &env,
        &format!("api:\n  anthropic:\n    base-url: {}\n", mock.url()),
    );
    // The user's own loop type (a repository's would wait for `taskdaemon trust`).
    let loops = env.home().join(".config/taskdaemon/loops");
    std::fs::create_dir_all(&loops).unwrap();
    std::fs::write(
        loops.join("brief.yaml"),
        "brief:\n  system-prompt: You are terse.\n  prompt-template: \"{{task-description}}\"\n  validation-command: \"true\"\n  success-exit-code: 0\n  max-iterations: 2\n",
    )
    .unwrap();
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &[
            "run",
            "x",
            "--loop",
            "brief",
            "--agent",
            "api:anthropic:claude-haiku-4-5",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let b = &mock.requests()[0]["body"];
    assert_eq!(b["system"][0]["text"], "You are terse.", "{b:#}");
    assert_eq!(b["messages"][0]["content"][0]["text"], "x", "{b:#}");
}

#[test]
fn paths_out_of_the_work_tree_are_refused() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let outside = env.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "untouched\n").unwrap();
    std::os::unix::fs::symlink(&outside, env.repo().join("escape")).unwrap();
    git(&env.repo(), &["add", "escape"]);
    git(&env.repo(), &["commit", "-qm", "a link out"]);
    let mock = Mock::start(
        &env,
        "confine",
        json!({"provider": "openai", "replies": [
            {"calls": [
                {"name": "write_file", "input": {"path": "../outside.txt", "content": "x"}},
                {"name": "read_file", "input": {"path": "/etc/passwd"}},
                {"name": "write_file", "input": {"path": "escape/secret.txt", "content": "owned"}},
                {"name": "read_file", "input": {"path": "escape/secret.txt"}},
                {"name": "edit_file", "input": {"path": "escape/secret.txt", "old_text": "untouched", "new_text": "owned"}},
                {"name": "run_command", "input": {"command": "true"}}
            ], "usage": usage(10, 5, 0, 0)},
            {"text": "I could not get out. <promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!("api:\n  openai:\n    base-url: {}/v1\n", mock.url()),
    );
    let r = run_with(
        &env,
        &[],
        &[
            "run",
            "escape",
            "--agent",
            "api:openai:local",
            "--validate",
            "true",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!env.root().join("outside.txt").exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "untouched\n"
    );
    // The model saw a refusal for each of the five, and the command ran.
    let reqs = mock.requests();
    let results: Vec<String> = reqs[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(results.len(), 6, "{results:#?}");
    for r in &results[..5] {
        assert!(r.starts_with("ERROR: refused"), "{results:#?}");
    }
    assert!(results[0].contains("outside the work tree"), "{results:#?}");
    assert!(results[2].contains("symbolic link"), "{results:#?}");
    assert!(
        !results[1].contains("root:"),
        "/etc/passwd leaked: {results:#?}"
    );
    assert!(results[5].contains("(exit code 0)"), "{results:#?}");
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(log.contains("  ✗ refused: `../outside.txt`"), "{log}");
}

#[test]
fn rate_limited_turn_waits_for_retry_after_then_completes() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "429",
        json!({"provider": "anthropic", "replies": [
            {"status": 429, "headers": {"retry-after": "2"},
             "body": {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate limit"}}},
            {"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!("api:\n  anthropic:\n    base-url: {}\n", mock.url()),
    );
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-sonnet-4-5",
            "--validate",
            "true",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    let gap = reqs[1]["t"].as_f64().unwrap() - reqs[0]["t"].as_f64().unwrap();
    assert!(
        gap >= 1.9,
        "the retry came {gap}s after the 429, not after retry-after 2s"
    );
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("429: Number of requests has exceeded your rate limit (rate-limited); retrying the turn in 2"),
        "{log}"
    );
    assert_eq!(
        csv_rows(&env.repo()).len(),
        1,
        "the retry is inside the iteration"
    );
}

#[test]
fn bad_key_stops_at_iteration_one_with_exit_64() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "401",
        json!({"provider": "anthropic", "key": "the-right-key", "replies": [{"text": "never"}]}),
    );
    user_config(
        &env,
        &format!("api:\n  anthropic:\n    base-url: {}\n", mock.url()),
    );
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-sonnet-4-5",
            "--validate",
            "true",
        ],
    );
    assert_eq!(r.code, 64, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("invalid x-api-key"), "{}", r.stderr);
    assert_eq!(mock.requests().len(), 1, "no retry of an auth failure");
    assert!(!r.stderr.contains(KEY));
}

#[test]
fn missing_key_is_an_auth_failure_with_a_hint() {
    let env = Env::new();
    let r = run_with(
        &env,
        &[],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-sonnet-4-5",
            "--validate",
            "true",
        ],
    );
    assert_eq!(r.code, 64, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        r.stderr
    );
}

const DEMO_TEST: &str = include_str!("../../src/commands/demo/test.sh");
const CALC_ADD: &str = "#!/bin/sh\ncase \"$1\" in\n  add) echo $(( $2 + $3 )) ;;\n  *) echo \"unknown operation: $1\" >&2; exit 1 ;;\nesac\n";
const CALC_BOTH: &str = "#!/bin/sh\ncase \"$1\" in\n  add) echo $(( $2 + $3 )) ;;\n  mul) echo $(( $2 * $3 )) ;;\n  *) echo \"unknown operation: $1\" >&2; exit 1 ;;\nesac\n";

/// The demo's project and task, with a local OpenAI-compatible server and no key.
#[test]
fn demo_sized_task_on_a_local_openai_compatible_server_without_a_key() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(
        repo.join("calc.sh"),
        "#!/bin/sh\necho \"not implemented\" >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::write(repo.join("test.sh"), DEMO_TEST).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "calc project"]);
    let mock = Mock::start(
        &env,
        "demo",
        json!({"provider": "openai", "replies": [
            {"text": "Implementing add.", "calls": [{"name": "write_file", "input": {"path": "calc.sh", "content": CALC_ADD}}], "usage": usage(500, 80, 0, 0)},
            {"calls": [{"name": "run_command", "input": {"command": "git commit -qam 'calc: add'"}}], "usage": usage(600, 20, 0, 0)},
            {"text": "add works, so I think the task is done. <promise>COMPLETE</promise>", "usage": usage(650, 15, 0, 0)},
            {"text": "Validation failed: mul is missing.", "calls": [{"name": "edit_file", "input": {"path": "calc.sh", "old_text": "  *)", "new_text": "  mul) echo $(( $2 * $3 )) ;;\n  *)"}}], "usage": usage(700, 60, 0, 0)},
            {"calls": [{"name": "run_command", "input": {"command": "sh test.sh && git commit -qam 'calc: mul'"}}], "usage": usage(800, 20, 0, 0)},
            {"text": "All four checks pass now. <promise>COMPLETE</promise>", "usage": usage(900, 15, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!(
            "api:\n  openai:\n    base-url: {}/v1\n  prices:\n    qwen2.5-coder: {{input: 0.0, output: 0.0}}\n",
            mock.url()
        ),
    );
    let r = run_with(
        &env,
        &[],
        &[
            "run",
            "Implement calc.sh so that `sh test.sh` passes: `sh calc.sh add A B` prints A+B and `sh calc.sh mul A B` prints A*B.",
            "--agent",
            "api:openai:qwen2.5-coder:7b",
            "--validate",
            "sh test.sh",
            "--max-iterations",
            "5",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(repo.join("calc.sh")).unwrap(),
        CALC_BOTH
    );
    let subjects = git(&repo, &["log", "--format=%s"]);
    assert!(
        subjects.contains("calc: add") && subjects.contains("calc: mul"),
        "{subjects}"
    );
    let rows = csv_rows(&repo);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "rejected", "{rows:?}");
    assert_eq!(rows[1]["outcome"], "complete", "{rows:?}");
    let reqs = mock.requests();
    assert!(
        reqs.iter().all(|r| r["has_key"] == false),
        "no key was sent"
    );
    // A fresh context each iteration: iteration 2 starts with the prompt alone again,
    // and that prompt carries the validation's failure.
    let fresh: Vec<&Value> = reqs
        .iter()
        .filter(|r| r["body"]["messages"].as_array().unwrap().len() <= 2)
        .collect();
    assert_eq!(fresh.len(), 2, "{reqs:#?}");
    let prompt2 = fresh[1]["body"]["messages"].to_string();
    assert!(prompt2.contains("sh test.sh"), "{prompt2}");
}

#[test]
fn doctor_shows_the_api_agent_and_its_price() {
    let env = Env::new();
    user_config(&env, "api:\n  anthropic:\n    requests-per-minute: 6\n");
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &["doctor", "--agent", "api:anthropic:claude-sonnet-4-5"],
    );
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("api:anthropic:claude-sonnet-4-5"), "{out}");
    assert!(out.contains("$ANTHROPIC_API_KEY is set"), "{out}");
    assert!(out.contains("6 requests/min"), "{out}");
    assert!(out.contains("$3/M in, $15/M out"), "{out}");
    assert!(!out.contains(KEY), "{out}");
}

/// Two loops of one daemon share the provider's lane: the mock sees at most 6 requests in
/// any 60 seconds (the real minute: the window is not configurable).
#[test]
fn two_daemon_loops_share_requests_per_minute() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "rpm",
        json!({"provider": "openai", "replies": [{"text": "still working on it", "usage": usage(100, 10, 0, 0)}]}),
    );
    user_config(
        &env,
        &format!(
            "max-iterations: 4\nmax-stuck: 0\napi:\n  openai:\n    base-url: {}/v1\n    requests-per-minute: 6\n",
            mock.url()
        ),
    );
    let vars = [("TASKDAEMON_AGENT", "api:openai:local-model")];
    for task in ["first task", "second task"] {
        let r = run_with(
            &env,
            &vars,
            &["submit", "ralph", task, "--validate", "false"],
        );
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    }
    let r = run_with(
        &env,
        &vars,
        &["daemon", "start", "--max-loops", "2", "--tick", "0.2"],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let started = Instant::now();
    let status = loop {
        let r = run_with(&env, &vars, &["status", "--json"]);
        let s: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
        let runs = s["runs"].as_array().cloned().unwrap_or_default();
        let done = |r: &Value| {
            ["complete", "failed", "stopped", "blocked"]
                .contains(&r["status"].as_str().unwrap_or(""))
        };
        if runs.len() == 2 && runs.iter().all(done) {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the runs did not finish: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let lanes = status["daemon"]["api_scheduler"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let _ = run_with(&env, &vars, &["daemon", "stop"]);
    let times: Vec<f64> = mock
        .requests()
        .iter()
        .map(|r| r["t"].as_f64().unwrap())
        .collect();
    assert_eq!(times.len(), 8, "4 iterations of one request each, twice");
    for t in &times {
        let in_window = times.iter().filter(|u| **u >= *t && **u < t + 60.0).count();
        assert!(
            in_window <= 6,
            "{in_window} requests within 60 s of {t}: {times:?}"
        );
    }
    // The daemon's status shows the lane with its limit and every request it let go.
    assert_eq!(lanes.len(), 1, "{status:#}");
    assert_eq!(lanes[0]["requests_per_minute"], 6, "{status:#}");
    assert_eq!(lanes[0]["total_requests"], 8, "{status:#}");
    assert!(
        lanes[0]["lane"]
            .as_str()
            .unwrap()
            .starts_with("openai http://127.0.0.1:")
    );
}

/// Where an agent runs as a command (implement, stories, the task parser), the harness
/// plays the API agent as a process: words on stdout, the exchange on stderr, a failure
/// named in the failure model's words.
#[test]
fn api_agent_as_a_process_for_commands_that_spawn_agents() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "process",
        json!({"provider": "openai", "replies": [
            {"text": "Writing it.", "calls": [{"name": "write_file", "input": {"path": "note.txt", "content": "hi\n"}}], "usage": usage(10, 5, 0, 0)},
            {"text": "TASK_COMPLETE", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!("api:\n  openai:\n    base-url: {}/v1\n", mock.url()),
    );
    let out = env
        .cmd()
        .args(["__api-agent", "api:openai:local", "--system", "Be brief."])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"write note.txt")?;
            c.wait_with_output()
        })
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "Writing it.\nTASK_COMPLETE\n");
    assert!(stderr.contains("tool write_file: note.txt"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.repo().join("note.txt")).unwrap(),
        "hi\n"
    );
    let body = &mock.requests()[0]["body"];
    assert_eq!(body["messages"][0]["content"], "Be brief.");
    assert_eq!(body["messages"][1]["content"], "write note.txt");

    let bad = Mock::start(
        &env,
        "process-401",
        json!({"provider": "anthropic", "key": "right", "replies": [{"text": "never"}]}),
    );
    user_config(
        &env,
        &format!("api:\n  anthropic:\n    base-url: {}\n", bad.url()),
    );
    let out = env
        .cmd()
        .env("ANTHROPIC_API_KEY", KEY)
        .args(["__api-agent", "api:anthropic:claude-sonnet-4-5"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("api error: 401: invalid x-api-key (authentication_failed)"),
        "{stderr}"
    );
    assert!(!stderr.contains(KEY));
}

/// 529 and 5xx: the turn is sent again after a bounded backoff (2 s, 4 s, …).
#[test]
fn overloaded_turns_back_off_and_retry() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let overloaded = json!({"status": 529, "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}});
    let mock = Mock::start(
        &env,
        "529",
        json!({"provider": "anthropic", "replies": [
            overloaded,
            {"status": 503, "body": {"error": {"message": "upstream unavailable"}}},
            {"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!("api:\n  anthropic:\n    base-url: {}\n", mock.url()),
    );
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-sonnet-4-5",
            "--validate",
            "true",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let t: Vec<f64> = mock
        .requests()
        .iter()
        .map(|r| r["t"].as_f64().unwrap())
        .collect();
    assert_eq!(t.len(), 3);
    assert!(
        t[1] - t[0] >= 1.9 && t[2] - t[1] >= 3.9,
        "no backoff: {t:?}"
    );
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("529: Overloaded (overloaded); retrying the turn in 2"),
        "{log}"
    );
    assert!(
        log.contains("503: upstream unavailable (overloaded); retrying the turn in 4"),
        "{log}"
    );
}

/// A conversation that outgrows the context ends its iteration with a note; the next
/// iteration starts fresh.
#[test]
fn context_overflow_ends_the_iteration_with_a_note() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mock = Mock::start(
        &env,
        "overflow",
        json!({"provider": "openai", "replies": [
            {"text": "Reading everything.", "calls": [{"name": "list_files", "input": {}}], "usage": usage(10, 5, 0, 0)},
            {"status": 400, "body": {"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}}},
            {"text": "Smaller steps.", "calls": [{"name": "write_file", "input": {"path": "done.txt", "content": "ok\n"}}], "usage": usage(10, 5, 0, 0)},
            {"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    user_config(
        &env,
        &format!("api:\n  openai:\n    base-url: {}/v1\n", mock.url()),
    );
    let r = run_with(
        &env,
        &[],
        &[
            "run",
            "x",
            "--agent",
            "api:openai:local",
            "--validate",
            "test -f done.txt",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let log1 = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log1.contains("no longer fits the model's context (400: This model's maximum context length is 8192 tokens)"),
        "{log1}"
    );
    let reqs = mock.requests();
    assert_eq!(
        reqs[2]["body"]["messages"].as_array().unwrap().len(),
        1,
        "iteration 2 starts fresh"
    );
    assert_eq!(csv_rows(&env.repo()).len(), 2);
}

/// `user_config` for one provider at the mock, with more lines under the provider.
fn mock_config(env: &Env, provider: &str, mock: &Mock, more: &str) {
    let base = match provider {
        "openai" => format!("{}/v1", mock.url()),
        _ => mock.url(),
    };
    user_config(
        env,
        &format!("api:\n  {provider}:\n    base-url: {base}\n{more}"),
    );
}

#[test]
fn run_command_runs_in_the_runs_sandbox() {
    if !have_python() || !crate::sandbox::bwrap_or_skip("run_command_runs_in_the_runs_sandbox") {
        return;
    }
    let env = crate::sandbox::sandbox_env();
    let name = format!(
        "td-api-escape-{}",
        env.root().file_name().unwrap().to_string_lossy()
    );
    let host_tmp = Path::new("/tmp").join(&name);
    let _ = std::fs::remove_file(&host_tmp);
    let command = format!("echo escaped > /tmp/{name} && echo inside > inside.txt");
    let mock = Mock::start(
        &env,
        "bwrap",
        json!({"provider": "anthropic", "replies": [
            {"calls": [{"name": "run_command", "input": {"command": command}}], "usage": usage(10, 5, 0, 0)},
            {"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    mock_config(&env, "anthropic", &mock, "");
    let r = run_with(
        &env,
        &[("ANTHROPIC_API_KEY", KEY)],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-haiku-4-5",
            "--validate",
            "test -f inside.txt",
            "--sandbox",
            "bwrap",
            "--max-iterations",
            "1",
        ],
    );
    let escaped = host_tmp.exists();
    let _ = std::fs::remove_file(&host_tmp);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(env.repo().join("inside.txt").exists(), "the command ran");
    assert!(!escaped, "the model's command wrote the host's /tmp");
}

/// The mock echoes the key (and another key variable's value) in its text, in a tool
/// call's arguments, and a tool result carries it: none of it is written or emitted.
#[test]
fn the_key_is_redacted_from_text_tool_calls_results_and_events() {
    if !have_python() {
        return;
    }
    const OTHER: &str = "sk-other-0a1b2c3d-SECRET";
    let env = Env::new();
    // The key's two halves make it only in the command's output.
    let (a, b) = KEY.split_at(10);
    let command = format!("printf '%s%s\\n' '{a}' '{b}'; echo {KEY} {OTHER} > /dev/null");
    let mock = Mock::start(
        &env,
        "redact",
        json!({"provider": "anthropic", "key": KEY, "replies": [
            {"text": format!("Your key is {KEY}, the other {OTHER}."),
             "calls": [{"name": "run_command", "input": {"command": command}}],
             "usage": usage(10, 5, 0, 0)},
            {"text": format!("{KEY} <promise>COMPLETE</promise>"), "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    mock_config(&env, "anthropic", &mock, "    api-key-env: TD_MY_KEY\n");
    let r = run_with(
        &env,
        &[("TD_MY_KEY", KEY), ("OPENAI_API_KEY", OTHER)],
        &[
            "run",
            "x",
            "--agent",
            "api:anthropic:claude-haiku-4-5",
            "--validate",
            "true",
            "--max-iterations",
            "1",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let report = run_with(&env, &[], &["report"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("model: Your key is [redacted], the other [redacted]."),
        "{log}"
    );
    assert!(log.contains("  → [redacted]"), "the tool result: {log}");
    assert!(r.stdout.contains("[redacted]"), "the events: {}", r.stdout);
    assert!(env.repo().join(".ralph/logs/report.html").exists());
    for secret in [KEY, OTHER] {
        for dir in [env.repo(), env.home()] {
            let hits = files_containing(&dir, secret.as_bytes());
            assert!(hits.is_empty(), "{secret} is in {hits:?}");
        }
        for out in [&r.stdout, &r.stderr, &report.stdout, &report.stderr] {
            assert!(!out.contains(secret), "{secret} emitted: {out}");
        }
    }
    // What went back to the model is redacted too.
    let back = mock.requests()[1]["body"].to_string();
    assert!(!back.contains(KEY) && back.contains("[redacted]"), "{back}");
}

/// A message that looks like an option is the message: it never points the snapshot at
/// another repository, nor prints help.
#[test]
fn snapshot_messages_are_never_options() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let other = env.root().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q"]);
    std::fs::write(other.join("o.txt"), "o\n").unwrap();
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "other"]);
    let other_refs = git(&other, &["for-each-ref"]);
    let here_refs = git(&env.repo(), &["for-each-ref"]);
    let away = format!("-C{}", other.display());
    let mock = Mock::start(
        &env,
        "snap",
        json!({"provider": "openai", "replies": [
            {"calls": [{"name": "snapshot", "input": {"message": away}}], "usage": usage(10, 5, 0, 0)},
            {"calls": [{"name": "snapshot", "input": {"message": "--help"}}], "usage": usage(10, 5, 0, 0)},
            {"text": "<promise>COMPLETE</promise>", "usage": usage(10, 5, 0, 0)}
        ]}),
    );
    mock_config(&env, "openai", &mock, "");
    let r = run_with(
        &env,
        &[],
        &[
            "run",
            "x",
            "--agent",
            "api:openai:local",
            "--validate",
            "true",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(!log.contains("Usage:"), "help instead of a snapshot: {log}");
    assert!(!log.contains("  ✗ "), "a snapshot failed: {log}");
    assert_eq!(
        git(&other, &["for-each-ref"]),
        other_refs,
        "the other repository changed"
    );
    assert!(!other.join(".ralph").exists() && !other.join(".taskdaemon").exists());
    let list = run_with(&env, &[], &["snapshot", "list"]);
    assert!(list.stdout.contains(&away), "{}\n{log}", list.stdout);
    assert!(list.stdout.contains("--help"), "{}\n{log}", list.stdout);
    assert_ne!(git(&env.repo(), &["for-each-ref"]), here_refs);
}

/// Run `c` to its end (killed after `limit`), with its peak resident memory in KiB
/// (`VmHWM`, read while it runs).
fn run_measured(env: &Env, mut c: Command, limit: Duration) -> (Run, u64) {
    let (out, err) = (env.root().join("out.txt"), env.root().join("err.txt"));
    c.stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = c.spawn().unwrap();
    let status = format!("/proc/{}/status", child.id());
    let (t, mut peak) = (Instant::now(), 0);
    let code = loop {
        let hwm = std::fs::read_to_string(&status).unwrap_or_default();
        if let Some(kb) = hwm
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break -9;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let run = Run {
        code,
        stdout: read(&out),
        stderr: read(&err),
    };
    (run, peak)
}

/// A server streaming 64 MB of text (Anthropic) or of unclosed tool arguments (OpenAI):
/// the harness stops reading at its cap, its memory stays bounded, the iteration ends
/// with a note saying what was cut.
fn flood(provider: &str, model: &str, reply: Value, what: &str) {
    if !have_python() {
        return;
    }
    let env = Env::new();
    let mut script = json!({"provider": provider, "replies": [reply]});
    script["replies"][0]["usage"] = usage(10, 5, 0, 0);
    let mock = Mock::start(&env, "flood", script);
    mock_config(&env, provider, &mock, "");
    let mut c = env.cmd();
    c.env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env("ANTHROPIC_API_KEY", KEY)
        .args([
            "run",
            "x",
            "--agent",
            &format!("api:{provider}:{model}"),
            "--validate",
            "true",
            "--max-iterations",
            "1",
        ]);
    let t = Instant::now();
    let (r, peak_kb) = run_measured(&env, c, Duration::from_secs(60));
    let took = t.elapsed();
    eprintln!(
        "{provider} {what} flood: peak RSS {} MiB in {took:?}",
        peak_kb >> 10
    );
    assert_ne!(r.code, -9, "the run never ended: {}", r.stderr);
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    let note = format!("the model's reply was cut: the reply's {what} passed 4 MiB");
    assert!(log.contains(&note), "{log}");
    assert!(peak_kb < 150 * 1024, "peak RSS {peak_kb} KiB");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
fn a_flood_of_text_is_cut_with_a_note() {
    flood(
        "anthropic",
        "claude-haiku-4-5",
        json!({"flood_text": 64 << 20}),
        "text",
    );
}

#[test]
fn a_flood_of_tool_arguments_is_cut_with_a_note() {
    flood(
        "openai",
        "local",
        json!({"flood_args": 64 << 20}),
        "tool arguments",
    );
}
