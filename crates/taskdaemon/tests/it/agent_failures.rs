//! Agents failing in the open (issue 15): fake agents — small shell programs that print
//! the recorded output of the real CLIs (`taskdaemon-core/tests/fixtures/agent-failures/`)
//! with the same argv contract (prompt on stdin) — through the real binary.

use crate::harness;
use std::path::PathBuf;

use crate::harness::{Env, csv_rows, events, fixture, replay, usage_limit_in};

/// A fake agent: a shell script in the test's root; returns its `cmd:` spec.
fn fake(env: &Env, name: &str, body: &str) -> String {
    let p = env.root().join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).unwrap();
    format!("cmd:sh {}", p.display())
}

fn case(rel: &str) -> PathBuf {
    fixture("agent-failures").join(rel)
}

fn claude_ok(commit: &str) -> String {
    format!(
        "{commit}\necho '{{\"type\":\"assistant\",\"message\":{{\"content\":[{{\"type\":\"text\",\"text\":\"did it\"}}]}}}}'\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"did it\",\"total_cost_usd\":0.01}}'"
    )
}

fn run_json(env: &Env, agent: &str, extra: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    let mut args = vec![
        "run",
        "make the file",
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

fn finished(evs: &[serde_json::Value]) -> &serde_json::Value {
    evs.iter()
        .find(|e| e["event"] == "run_finished")
        .expect("run_finished")
}

#[test]
fn auth_and_could_not_start_stop_at_iteration_1_with_exit_64_even_when_validation_passes() {
    for (rel, says) in [
        ("claude/no-credentials", "Not logged in · Please run /login"),
        (
            "claude/root-without-is-sandbox",
            "cannot be used with root/sudo privileges",
        ),
        (
            "claude/invalid-api-key-x-should-retry-false",
            "Invalid API key",
        ),
    ] {
        let env = Env::new();
        let agent = fake(&env, "agent.sh", &replay(rel));
        let (code, evs, _) = run_json(&env, &agent, &["--validate", "true"]);
        assert_eq!(code, 64, "{rel}");
        let s = &finished(&evs)["summary"];
        assert_eq!(s["exit_label"], "AGENT-FAILED", "{rel}");
        assert_eq!(s["iterations"], 0, "{rel}: not counted as an iteration");
        assert!(
            s["detail"].as_str().unwrap().contains(says),
            "{rel}: {}",
            s["detail"]
        );
        assert!(s["detail"].as_str().unwrap().contains("hint:"), "{rel}");
        assert!(
            !env.repo().join(".ralph/logs/summary.csv").exists()
                || csv_rows(&env.repo()).is_empty()
        );
    }
}

#[test]
fn a_missing_agent_program_and_a_missing_validation_program_stop_with_exit_64() {
    let env = Env::new();
    let (code, evs, _) = run_json(&env, "cmd:/nonexistent/agent", &["--validate", "true"]);
    assert_eq!(code, 64);
    assert!(
        finished(&evs)["summary"]["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/agent")
    );

    let env = Env::new();
    let agent = fake(
        &env,
        "agent.sh",
        &claude_ok("date > f.txt; git add -A; git commit -qm f"),
    );
    // Caught before iteration 1.
    let (code, evs, _) = run_json(&env, &agent, &["--validate", "carg0 test"]);
    assert_eq!(code, 64);
    let s = &finished(&evs)["summary"];
    assert_eq!(s["exit_label"], "VALIDATION-MISSING");
    assert_eq!(s["iterations"], 0);
    assert!(s["detail"].as_str().unwrap().contains("carg0"), "{s}");
    // A shell expression is only warned about; its exit 127 stops the run at iteration 1.
    let (code, evs, _) = run_json(&env, &agent, &["--validate", "carg0 test && true"]);
    assert_eq!(code, 64);
    assert!(
        evs.iter()
            .any(|e| e["event"] == "warning" && e["message"].as_str().unwrap().contains("`carg0`"))
    );
    let s = &finished(&evs)["summary"];
    assert_eq!(s["exit_label"], "VALIDATION-MISSING");
    assert_eq!(s["iterations"], 1);
}

/// The usage-limit reply of the recorded subscription case, its reset 3 s ahead.
fn usage_limit_now_plus_3s() -> String {
    usage_limit_in(3)
}

/// First call: the usage limit; later calls: work, commit, done.
fn limited_then_ok(env: &Env) -> String {
    let marker = env.root().join("called-once");
    fake(
        env,
        "agent.sh",
        &format!(
            "if [ ! -e '{m}' ]; then touch '{m}'\n{limit}\nfi\n{ok}",
            m = marker.display(),
            limit = usage_limit_now_plus_3s(),
            ok = claude_ok("date > done.txt; git add -A; git commit -qm done")
        ),
    )
}

#[test]
fn a_usage_limit_waits_for_the_reset_and_retries_the_same_iteration() {
    let env = Env::new();
    let agent = limited_then_ok(&env);
    let (code, evs, stderr) = run_json(&env, &agent, &["--validate", "test -f done.txt"]);
    assert_eq!(code, 0, "{stderr}");
    let waiting = evs
        .iter()
        .find(|e| e["event"] == "waiting")
        .expect("a wait");
    assert_eq!(waiting["iteration"], 1);
    assert_eq!(waiting["class"], "usage-limit");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .starts_with("waiting for the usage limit to reset at ")
    );
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 1, "one row for iteration 1: {rows:?}");
    assert_eq!(rows[0]["iteration"], "1");
    assert_eq!(rows[0]["outcome"], "complete");
    let waited: f64 = rows[0]["waited_seconds"].parse().unwrap();
    assert!(waited > 0.0, "the wait is recorded: {waited}");
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("waiting for the usage limit to reset at"),
        "{log}"
    );
}

#[test]
fn on_usage_limit_stop_exits_1_naming_the_reset_time() {
    let env = Env::new();
    let agent = limited_then_ok(&env);
    let (code, evs, _) = run_json(
        &env,
        &agent,
        &["--validate", "test -f done.txt", "--on-usage-limit", "stop"],
    );
    assert_eq!(code, 1);
    let d = finished(&evs)["summary"]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(d.contains("usage-limit") && d.contains("resets at"), "{d}");
    assert!(d.contains("You've hit your session limit"), "{d}");
}

#[test]
fn a_transient_failure_backs_off_and_recovers_and_a_persistent_one_stops() {
    let env = Env::new();
    let count = env.root().join("calls");
    let agent = fake(
        &env,
        "agent.sh",
        &format!(
            "echo x >> '{c}'\nif [ $(wc -l < '{c}') -le 2 ]; then\n{fail}\nfi\n{ok}",
            c = count.display(),
            fail = replay("claude/overloaded-529-max-retries-2"),
            ok = claude_ok("date > done.txt; git add -A; git commit -qm done")
        ),
    );
    let (code, evs, stderr) = run_json(
        &env,
        &agent,
        &["--validate", "test -f done.txt", "--retry-backoff", "1s"],
    );
    assert_eq!(code, 0, "{stderr}");
    let waits: Vec<_> = evs.iter().filter(|e| e["event"] == "waiting").collect();
    assert_eq!(waits.len(), 2);
    assert!(
        waits
            .iter()
            .all(|w| w["class"] == "overloaded" && w["iteration"] == 1)
    );
    assert_eq!(csv_rows(&env.repo()).len(), 1);

    let env = Env::new();
    let agent = fake(
        &env,
        "agent.sh",
        &replay("claude/overloaded-529-max-retries-2"),
    );
    let (code, evs, _) = run_json(
        &env,
        &agent,
        &[
            "--validate",
            "true",
            "--retry-backoff",
            "1s",
            "--max-retries",
            "1",
        ],
    );
    assert_eq!(code, 1);
    let d = finished(&evs)["summary"]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        d.contains("overloaded") && d.contains("529 Overloaded"),
        "{d}"
    );
}

#[test]
fn a_crash_without_work_never_completes_and_twice_stops() {
    let env = Env::new();
    let agent = fake(&env, "agent.sh", "echo 'segfault in the agent' >&2\nexit 3");
    let (code, evs, _) = run_json(&env, &agent, &["--validate", "true"]);
    assert_eq!(code, 1);
    let s = &finished(&evs)["summary"];
    assert_eq!(s["exit_label"], "AGENT-FAILED");
    assert!(
        s["detail"]
            .as_str()
            .unwrap()
            .contains("segfault in the agent"),
        "{s}"
    );
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["outcome"], "crashed");
}

#[test]
fn a_resumed_run_goes_on_waiting() {
    let env = Env::new();
    let agent = limited_then_ok(&env);
    let child = env
        .cmd()
        .args([
            "run",
            "make the file",
            "--json",
            "--agent",
            &agent,
            "--agent-format",
            "claude-stream-json",
            "--validate",
            "test -f done.txt",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt while it waits.
    let state = env.repo().join(".ralph/run.json");
    let start = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(&state).unwrap_or_default();
        if text.contains("\"wait_until\": 1") || text.contains("\"wait_until\":1") {
            break;
        }
        assert!(start.elapsed().as_secs() < 60, "never waited: {text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix_interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let r = env.run(&["run", "--resume", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let evs = events(&r.stdout);
    assert!(
        evs.iter().any(|e| e["event"] == "waiting"),
        "the wait goes on"
    );
    assert_eq!(csv_rows(&env.repo()).len(), 1);
}

fn nix_interrupt(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn an_agent_that_only_retries_is_warned_about_then_stopped_by_the_no_progress_deadline() {
    let env = Env::new();
    let agent = fake(
        &env,
        "codex.sh",
        r#"echo '{"type":"thread.started","thread_id":"t1"}'
echo '{"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"}'
exec sleep 60"#,
    );
    let r = env.run(&[
        "run",
        "make the file",
        "--json",
        "--agent",
        &agent,
        "--agent-format",
        "codex-json",
        "--validate",
        "true",
        "--quiet-warning",
        "1s",
        "--no-progress-timeout",
        "2s",
        "--max-retries",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let evs = events(&r.stdout);
    let quiet = evs
        .iter()
        .find(|e| e["event"] == "quiet")
        .expect("a quiet warning");
    assert!(
        quiet["last_line"]
            .as_str()
            .unwrap()
            .contains("waiting for network")
    );
    let d = finished(&evs)["summary"]["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        d.contains("unreachable") && d.contains("waiting for network"),
        "{d}"
    );
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("has printed nothing for") && log.contains("no progress from the agent"),
        "{log}"
    );
}

/// A PATH with only `git`, `sh` and the given fake programs.
fn narrow_path(env: &Env, fakes: &[(&str, &str)]) -> PathBuf {
    let bin = env.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["git", "sh", "cat"] {
        std::os::unix::fs::symlink(harness::which(tool), bin.join(tool)).unwrap();
    }
    for (name, body) in fakes {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

#[test]
fn doctor_says_an_agent_is_not_logged_in_and_exits_1_and_a_cmd_agent_alone_passes() {
    let env = Env::new();
    let bin = narrow_path(
        &env,
        &[
            (
                "claude",
                r#"case "$1" in --version) echo "2.1.197 (Claude Code)";; auth) echo '{"loggedIn":false,"authMethod":"none"}'; exit 1;; esac"#,
            ),
            (
                "codex",
                r#"case "$1" in --version) echo "codex-cli 0.169.0";; login) echo "Not logged in"; exit 1;; esac"#,
            ),
        ],
    );
    let out = env
        .cmd()
        .env("PATH", &bin)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(78),
        "doctor's own code for a failing check"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = |n: &str| {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(agent("claude")["logged_in"], false);
    assert_eq!(agent("claude")["version"], "2.1.197 (Claude Code)");
    assert_eq!(agent("codex")["logged_in"], false);
    assert!(agent("gemini")["path"].is_null());
    assert_eq!(v["agent_in_use"], "claude");
    assert!(
        v["problems"][0].as_str().unwrap().contains("not logged in"),
        "{v}"
    );
    assert!(v["git"]["user_email"].is_string());

    let out = env
        .cmd()
        .env("PATH", &bin)
        .args(["doctor", "--agent", "cmd:cat"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("everything needed is there"), "{text}");

    // TASKDAEMON_AGENT names the agent in use, as it does for `run` and the daemon: every
    // CLI is still listed, and a usable `cmd:` agent is no problem.
    let out = env
        .cmd()
        .env("PATH", &bin)
        .env("TASKDAEMON_AGENT", "cmd:cat")
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["agent_in_use"], "cmd:cat", "{v}");
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    assert_eq!(out.status.code(), Some(0), "{v}");
    let listed = v["agents"].as_array().unwrap();
    assert!(listed.iter().any(|a| a["agent"] == "codex"), "{v}");

    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "max-iterations: 7\n",
    )
    .unwrap();
    let out = env
        .cmd()
        .env("PATH", &bin)
        .args(["doctor", "--agent", "cmd:cat", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let setting = v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "max-iterations")
        .unwrap()
        .clone();
    assert_eq!(setting["value"], 7);
    assert!(
        setting["from"]
            .as_str()
            .unwrap()
            .ends_with(".taskdaemon/config.yaml:1"),
        "the file and line it came from"
    );
}

/// The real Claude Code CLI (`TASKDAEMON_REAL_CLAUDE=/path/to/claude`) against the
/// recorded scripted API server on 127.0.0.1, which answers its first two requests with a
/// subscription usage limit (429, unified headers, reset 3 s ahead), then succeeds: the loop
/// waits for the reset and completes.
#[test]
#[ignore = "needs the real Claude Code CLI: TASKDAEMON_REAL_CLAUDE=/path/to/claude and python3"]
fn the_real_claude_cli_waits_out_a_usage_limit_then_completes() {
    let Some(claude) = std::env::var_os("TASKDAEMON_REAL_CLAUDE").map(PathBuf::from) else {
        panic!("set TASKDAEMON_REAL_CLAUDE to the claude binary");
    };
    let env = Env::new();
    let spec = env.root().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"reset_in": 3, "fail_times": 2, "text": "Hello.",
            "fail": {"status": 429,
              "headers": {"x-should-retry": "true",
                "anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": "@@RESET@@",
                "anthropic-ratelimit-unified-representative-claim": "five_hour",
                "anthropic-ratelimit-unified-5h-status": "rejected",
                "anthropic-ratelimit-unified-5h-utilization": "1.0",
                "anthropic-ratelimit-unified-5h-reset": "@@RESET@@",
                "anthropic-ratelimit-unified-overage-status": "rejected"},
              "body": {"type": "error", "error": {"type": "rate_limit_error",
                "message": "This request would exceed your account's rate limit. Please try again later."}}}}"#,
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let log = env.root().join("requests.jsonl");
    let mut server = std::process::Command::new("python3")
        .arg(fixture("agent-failures/servers/fail_anthropic.py"))
        .arg(port.to_string())
        .arg(&spec)
        .arg(&log)
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed().as_secs() < 20,
            "the mock server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let bin = narrow_path(&env, &[]);
    std::os::unix::fs::symlink(&claude, bin.join("claude")).unwrap();
    let path = format!("{}:{}", bin.display(), claude.parent().unwrap().display());
    let out = env
        .cmd()
        .env("PATH", path)
        .env("IS_SANDBOX", "1")
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test-token")
        .env_remove("ANTHROPIC_API_KEY")
        .args([
            "run",
            "Reply with the single word: hello",
            "--json",
            "--agent",
            "claude",
            "--validate",
            "true",
            "--max-iterations",
            "2",
        ])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let evs = events(&stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waiting = evs
        .iter()
        .find(|e| e["event"] == "waiting")
        .expect("a wait for the reset");
    assert_eq!(waiting["class"], "usage-limit");
    assert_eq!(waiting["iteration"], 1);
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "complete");
}

#[test]
fn pause_at_usage_pauses_before_the_limit_until_the_window_resets() {
    let env = Env::new();
    let count = env.root().join("calls");
    // Every run reports 92 % of the five-hour window used (the recorded warning event with
    // its reset 3 s ahead); the first run's work does not pass validation, the second's does.
    let warning = case("claude/usage-warning-subscription/stdout.jsonl");
    let agent = fake(
        &env,
        "agent.sh",
        &format!(
            "echo x >> '{c}'\nreset=$(( $(date +%s) + 3 ))\ngrep rate_limit_event '{w}' | sed \"s/\\\"resetsAt\\\":[0-9]*/\\\"resetsAt\\\":$reset/\"\nif [ $(wc -l < '{c}') -ge 2 ]; then touch second.txt; fi\n{ok}",
            c = count.display(),
            w = warning.display(),
            ok = claude_ok("date > work.txt; git add -A; git commit -qm work")
        ),
    );
    let (code, evs, stderr) = run_json(
        &env,
        &agent,
        &["--validate", "test -f second.txt", "--pause-at-usage", "90"],
    );
    assert_eq!(code, 0, "{stderr}");
    let waiting = evs
        .iter()
        .find(|e| e["event"] == "waiting")
        .expect("a pause");
    assert_eq!(
        waiting["iteration"], 2,
        "the pause comes after iteration 1, before 2"
    );
    let m = waiting["message"].as_str().unwrap();
    assert!(
        m.starts_with("pausing before the usage limit (92% of the five_hour window used"),
        "{m}"
    );
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 2);
    assert!(rows[1]["waited_seconds"].parse::<f64>().unwrap() > 0.0);
    // Below the threshold: no pause.
    let env = Env::new();
    let agent = fake(
        &env,
        "agent.sh",
        &format!(
            "grep rate_limit_event '{}'\n{}",
            warning.display(),
            claude_ok("date > second.txt; git add -A; git commit -qm work")
        ),
    );
    let (code, evs, _) = run_json(
        &env,
        &agent,
        &["--validate", "test -f second.txt", "--pause-at-usage", "95"],
    );
    assert_eq!(code, 0);
    assert!(!evs.iter().any(|e| e["event"] == "waiting"));
}

/// Two loops in the daemon on one fake account. The first agent call after both loops have
/// started hits the usage limit (reset 4 s ahead): both loops pause — no agent starts until
/// the reset — `status` shows the governor, and they restart one after the other.
#[test]
fn two_daemon_loops_on_one_account_pause_together_and_restart_staggered() {
    let env = Env::new();
    let td = env.root();
    let limit_rec = td.join("limit-hit");
    let agent = fake(
        &env,
        "agent.sh",
        &format!(
            r#"log='{log}'
n=$(grep -c start "$log" 2>/dev/null || echo 0)
if [ "$n" -ge 2 ] && [ ! -e '{hit}' ]; then
  reset=$(( $(date +%s) + 4 ))
  echo "$reset" > '{hit}'
  echo "limit $(date +%s) $TASKDAEMON_RUN_ID" >> "$log"
  sed "s/\"resetsAt\":[0-9]*/\"resetsAt\":$reset/" '{fixture}'
  exit 1
fi
echo "start $(date +%s) $TASKDAEMON_RUN_ID $TASKDAEMON_ITERATION" >> "$log"
sleep 1
{ok}"#,
            log = td.join("agent.log").display(),
            hit = limit_rec.display(),
            fixture = case("claude/usage-limit-subscription/stdout.jsonl").display(),
            ok = claude_ok("echo $TASKDAEMON_ITERATION >> it.txt; git add -A; git commit -qm it")
        ),
    );
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        format!("agent: \"{agent}\"\nagent-format: claude-stream-json\nmax-iterations: 4\n"),
    )
    .unwrap();
    assert_eq!(
        env.run(&["trust"]).code,
        0,
        "its agent applies once trusted"
    );
    for t in ["task one", "task two"] {
        let r = env.run(&["submit", "ralph", t, "--validate", "false"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let r = env.run(&["daemon", "start", "--max-loops", "2", "--tick", "0.2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let start = std::time::Instant::now();
    let mut governor_seen = String::new();
    loop {
        let s = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&s.stdout).unwrap_or_default();
        if v["daemon"]["quota_governor"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
            && governor_seen.is_empty()
        {
            governor_seen = env.run(&["status"]).stdout;
        }
        let log = std::fs::read_to_string(td.join("agent.log")).unwrap_or_default();
        let reset: i64 = std::fs::read_to_string(&limit_rec)
            .ok()
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or(i64::MAX);
        let runs: std::collections::BTreeSet<&str> = log
            .lines()
            .skip_while(|l| !l.starts_with("limit"))
            .filter(|l| l.starts_with("start"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|w| w[1].parse::<i64>().unwrap_or(0) >= reset)
            .map(|w| w[2])
            .collect();
        if runs.len() == 2 {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 120,
            "both loops never restarted:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r = env.run(&["daemon", "stop"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        governor_seen.contains("quota governor:"),
        "status shows the governor:\n{governor_seen}"
    );
    let reset: i64 = std::fs::read_to_string(&limit_rec)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let log = std::fs::read_to_string(td.join("agent.log")).unwrap();
    let after: Vec<(i64, String)> = log
        .lines()
        .skip_while(|l| !l.starts_with("limit"))
        .filter(|l| l.starts_with("start"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].parse().unwrap(), w[2].to_string())
        })
        .collect();
    // Between the limit and its reset each loop starts at most the one agent whose
    // iteration boundary came before the governor heard of the limit; after the reset the
    // two restart staggered.
    for run in ["task-one", "task-two"] {
        let early = after
            .iter()
            .filter(|(t, r)| *t < reset && r.ends_with(run))
            .count();
        assert!(early <= 1, "{run} started agents during the pause:\n{log}");
    }
    let first_after = |run: &str| {
        after
            .iter()
            .find(|(t, r)| *t >= reset && r.ends_with(run))
            .map(|(t, _)| *t)
            .unwrap()
    };
    let mut firsts = [first_after("task-one"), first_after("task-two")];
    firsts.sort();
    assert!(
        firsts[1] >= reset + 2,
        "the second restart waits its slot: {log}"
    );
}

/// `--agent opencode` runs `opencode run --auto --format json` and reads its JSON: a fake
/// `opencode` first on PATH prints the recorded run (one bash tool call, a promise, two
/// steps of 1200/30 tokens and 0.00405 USD each) after making the commit it reports.
#[test]
fn the_opencode_preset_reads_its_json_to_completion_with_tool_calls_tokens_and_cost() {
    let env = Env::new();
    let bin = env.root().join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let body = format!(
        "#!/bin/sh\n[ \"$*\" = 'run --auto --format json' ] || {{ echo \"unexpected argv: $*\" >&2; exit 9; }}\ncat >/dev/null\necho hi > hello.txt; git add -A; git commit -qm hello\n{}\n",
        replay("opencode/success-tool-call")
    );
    std::fs::write(bin.join("opencode"), body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("opencode"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = std::ffi::OsString::from(&bin);
    path.push(":");
    path.push(harness::narrowed_path());
    let out = env
        .cmd()
        .env("PATH", &path)
        .args([
            "run",
            "make the file",
            "--json",
            "--agent",
            "opencode",
            "--completion-promise",
            "COMPLETE",
            "--validate",
            "test -f hello.txt",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evs = events(&stdout);
    let agent = evs
        .iter()
        .find(|e| e["event"] == "agent_finished")
        .expect("agent_finished");
    assert_eq!(agent["tool_calls"], 1);
    assert!(
        evs.iter()
            .any(|e| e["event"] == "signal" && e["signal"] == "complete"),
        "{stdout}"
    );
    let rows = csv_rows(&env.repo());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["tokens_in"], "2400");
    assert_eq!(rows[0]["tokens_out"], "60");
    assert!(rows[0]["cost_usd"].starts_with("0.0081"), "{rows:?}");
    assert_eq!(rows[0]["agent_exit_code"], "0");
}
