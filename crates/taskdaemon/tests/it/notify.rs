//! Notifications from a daemon run, delivered for real: a webhook receiver on 127.0.0.1 (a
//! listener in this test) and a command hook (a shell script that records what it got)
//! each get one message for blocked, decide, complete and a usage-limit wait, each with
//! the command to act; a dead webhook (one that accepts and never answers, one on a closed
//! port) slows no loop. Real git, real processes; the agent is a small shell program.

use crate::harness;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{Env, fixture};
use serde_json::Value;

/// Plays Claude (stream-json): reads the prompt, and by the task in it says BLOCKED, asks
/// to DECIDE, or completes; "limited" first hits the recorded usage limit (reset 2 s ahead).
fn agent_script(root: &Path) -> String {
    let limit = fixture("agent-failures/claude/usage-limit-subscription/stdout.jsonl");
    format!(
        r#"#!/bin/sh
prompt=$(cat)
say() {{
  printf '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"%s"}}]}}}}\n' "$1"
  printf '{{"type":"result","subtype":"success","is_error":false,"result":"%s","total_cost_usd":0.01}}\n' "$1"
}}
case "$prompt" in
*task-blocks*) say "<promise>BLOCKED:the API key is missing</promise>" ;;
*task-decides*) say "<promise>DECIDE:OAuth or passwords?</promise>" ;;
*task-limited*)
  if [ ! -e "{root}/limited-once" ]; then
    touch "{root}/limited-once"
    reset=$(( $(date +%s) + 2 ))
    sed "s/\"resetsAt\":[0-9]*/\"resetsAt\":$reset/" '{limit}'
    exit 1
  fi
  date +%s%N >> "{root}/limited-iterations"
  echo done > done.txt; git add -A; git commit -qm done
  say "<promise>COMPLETE</promise>" ;;
*)
  echo done > done.txt; git add -A; git commit -qm done
  say "<promise>COMPLETE</promise>" ;;
esac
"#,
        root = root.display(),
        limit = limit.display()
    )
}

/// Records each notice it is handed (one JSON line per call) and the event in its env.
const HOOK: &str = r#"#!/bin/sh
body=$(cat)
printf '%s\n' "$body" >> "$HOOK_OUT"
echo "$TASKDAEMON_NOTIFY_EVENT" >> "$HOOK_OUT.kinds"
"#;

struct Setup {
    env: Env,
    vars: Vec<(String, String)>,
}

impl Setup {
    /// A repository whose project config names `sinks` (YAML list items) and the agent's
    /// output format.
    fn new(sinks: &str) -> Setup {
        let env = Env::new();
        let agent = env.root().join("agent.sh");
        std::fs::write(&agent, agent_script(env.root())).unwrap();
        let hook = env.root().join("hook.sh");
        std::fs::write(&hook, HOOK).unwrap();
        for p in [&agent, &hook] {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
        std::fs::write(
            env.repo().join(".taskdaemon/config.yaml"),
            format!("agent-format: claude-stream-json\nnotify:\n{sinks}"),
        )
        .unwrap();
        let vars = vec![
            (
                "TASKDAEMON_AGENT".to_string(),
                format!("cmd:{}", agent.display()),
            ),
            (
                "HOOK_OUT".to_string(),
                env.root().join("hook.out").display().to_string(),
            ),
        ];
        Setup { env, vars }
    }

    /// The command hook, in the user's config (an untrusted project's config may not run
    /// commands), and more sinks (YAML list items).
    fn user_hook_and(&self, sinks: &str) {
        let dir = self.env.home().join(".config/taskdaemon");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "notify:\n  - command: {}\n{sinks}",
                self.env.root().join("hook.sh").display()
            ),
        )
        .unwrap();
    }

    fn user_hook(&self) {
        self.user_hook_and("");
    }

    /// The project's config: the agent's output format and `sinks`, trusted by the user.
    fn project(&self, sinks: &str) {
        self.untrusted_project(sinks);
        self.ok(&["trust"]);
    }

    /// The project's config as a clone brings it: not trusted.
    fn untrusted_project(&self, sinks: &str) {
        std::fs::write(
            self.env.repo().join(".taskdaemon/config.yaml"),
            format!("agent-format: claude-stream-json\nnotify:\n{sinks}"),
        )
        .unwrap();
    }

    fn run(&self, args: &[&str]) -> harness::Run {
        self.env.run_with(&self.vars, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok_with(&self.vars, args)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.env.repo().join(".git/taskdaemon/daemon/daemon.log"))
            .unwrap_or_default()
    }

    fn submit(&self, task: &str) -> String {
        let out = self.ok(&["submit", "ralph", task, "--validate", "true", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v["created"][0]["id"].as_str().unwrap().to_string()
    }

    fn hooked(&self) -> Vec<Value> {
        std::fs::read_to_string(self.env.root().join("hook.out"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn run_status(&self, id: &str) -> String {
        let s: Value = serde_json::from_str(&self.ok(&["status", "--json"])).unwrap();
        s["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["id"] == id)
            .and_then(|r| r["status"].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// Wait (bounded) until `done`, failing with what was seen and the daemon's log.
    fn wait_for(&self, what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{what} did not happen\nhook got: {:#?}\nlog:\n{}",
                self.hooked(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A webhook receiver: answers 200 to every POST and keeps the bodies.
fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook/secret-token", l.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            if let Some(body) = read_request(&s) {
                keep.lock().unwrap().push(body);
            }
            let _ = (&s)
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (url, got)
}

/// One HTTP request's JSON body.
fn read_request(s: &TcpStream) -> Option<Value> {
    let mut r = BufReader::new(s);
    let mut len = 0usize;
    let mut first = String::new();
    r.read_line(&mut first).ok()?;
    assert!(first.starts_with("POST /hook/secret-token "), "{first}");
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

/// A webhook that accepts connections and never answers; the accepted sockets are kept.
fn hanging() -> (String, Arc<Mutex<Vec<TcpStream>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hang", l.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    (url, held)
}

/// A URL on a port nothing listens on.
fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/closed", l.local_addr().unwrap());
    drop(l);
    url
}

/// (kind, run) of each notice.
fn kinds(v: &[Value]) -> Vec<(String, String)> {
    v.iter()
        .map(|n| {
            (
                n["event"].as_str().unwrap_or("").to_string(),
                n["run"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn has(v: &[Value], kind: &str, run: &str) -> bool {
    kinds(v).iter().any(|(k, r)| k == kind && r == run)
}

#[test]
fn a_webhook_and_a_command_hook_get_one_message_per_event_with_the_action() {
    let (url, got) = receiver();
    let mut s = Setup::new("");
    s.user_hook_and(&format!(
        "  - webhook: {url}\n    events: [blocked, decide, complete, usage-limit-wait]\n"
    ));
    let evil = s.env.root().join("evil.out");
    s.untrusted_project(&format!("  - command: touch {}\n", evil.display()));
    s.vars
        .push(("TASKDAEMON_MAX_ITERATIONS".into(), "3".into()));
    s.ok(&["daemon", "start", "--tick", "0.2", "--max-loops", "4"]);
    let blocks = s.submit("task-blocks: add the payment API");
    let decides = s.submit("task-decides: add login");
    let completes = s.submit("task-completes: write the readme");
    let limited = s.submit("task-limited: fix the flaky test");
    let want = [
        ("blocked", &blocks),
        ("decide", &decides),
        ("complete", &completes),
        ("usage_limit_wait", &limited),
        ("complete", &limited),
    ];
    s.wait_for("every notice at both sinks", || {
        let web = got.lock().unwrap().clone();
        let hook = s.hooked();
        want.iter()
            .all(|(k, r)| has(&web, k, r) && has(&hook, k, r))
    });
    s.wait_for("the usage-limit wait's end at the hook", || {
        has(&s.hooked(), "usage_limit_over", &limited)
    });
    s.ok(&["daemon", "stop"]);
    let web = got.lock().unwrap().clone();
    let hook = s.hooked();
    // One message each; the webhook's filter kept the others out.
    for (k, r) in &want {
        let n = |v: &[Value]| kinds(v).iter().filter(|(a, b)| a == k && b == *r).count();
        assert_eq!(n(&web), 1, "{k} of {r} at the webhook: {web:#?}");
        assert_eq!(n(&hook), 1, "{k} of {r} at the hook: {hook:#?}");
    }
    assert!(!has(&web, "usage_limit_over", &limited), "{web:#?}");
    let repo = s.env.repo().display().to_string();
    for n in web.iter().chain(&hook) {
        let text = n["text"].as_str().unwrap();
        assert_eq!(n["repository"], repo.as_str(), "{n:#}");
        match n["action"].as_str() {
            Some(action) => {
                assert!(
                    action.contains("taskdaemon") || action.starts_with("git -C"),
                    "no command in {n:#}"
                );
                assert!(text.contains(action), "the text names the action: {n:#}");
            }
            None => assert!(
                text.contains(n["action_note"].as_str().unwrap()),
                "the text says what to do: {n:#}"
            ),
        }
        assert!(text.contains(n["run"].as_str().unwrap()), "{n:#}");
        assert!(!n["title"].as_str().unwrap().is_empty(), "{n:#}");
    }
    let find = |k: &str| web.iter().find(|n| n["event"] == k).unwrap().clone();
    let b = find("blocked");
    assert_eq!(b["reason"], "the API key is missing");
    assert_eq!(b["title"], "task-blocks: add the payment API");
    assert!(b["action"].as_str().unwrap().contains("unblock"), "{b:#}");
    let d = find("decide");
    assert_eq!(d["reason"], "OAuth or passwords?");
    assert!(d["action"].as_str().unwrap().contains("answer"), "{d:#}");
    let w = find("usage_limit_wait");
    assert!(
        w["reason"].as_str().unwrap().contains("session limit"),
        "the agent's own words: {w:#}"
    );
    // The untrusted repository's own command hook never ran, and the log says why.
    assert!(!evil.exists(), "a project's command hook ran");
    assert!(
        s.log().contains("ignoring `notify.command` from"),
        "{}",
        s.log()
    );
    let kinds_file = std::fs::read_to_string(s.env.root().join("hook.out.kinds")).unwrap();
    assert!(kinds_file.lines().any(|l| l == "decide"), "{kinds_file}");
}

/// The keys of payload schema 1 (docs/notifications.md), in no particular order.
const SCHEMA_KEYS: &[&str] = &[
    "schema",
    "event",
    "at",
    "repository",
    "run",
    "title",
    "reason",
    "action",
    "action_note",
    "iterations",
    "duration_ms",
    "cost_usd",
    "commit",
    "link",
    "merge",
    "text",
    "markdown",
];

/// A payload of a JSON-format sink against the documented schema 1: exactly its keys,
/// snake_case, each of its type (`null` where the schema allows it), and the Markdown
/// with no code span inside another.
fn check_schema(n: &Value) {
    let o = n
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {n:#}"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = SCHEMA_KEYS.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want, "{n:#}");
    assert_eq!(n["schema"], 1, "{n:#}");
    let events = [
        "blocked",
        "decide",
        "complete",
        "failed",
        "stuck",
        "usage_limit_wait",
        "usage_limit_over",
        "merge_conflict",
        "merge_held",
        "daemon_stopped",
    ];
    assert!(events.contains(&n["event"].as_str().unwrap_or("")), "{n:#}");
    let at = n["at"].as_str().unwrap();
    assert!(
        at.len() >= 20 && at.as_bytes()[10] == b'T' && at.ends_with('Z'),
        "{at}"
    );
    let string_or_null = |k: &str| {
        assert!(n[k].is_string() || n[k].is_null(), "{k} in {n:#}");
    };
    for k in ["run", "title", "action", "action_note", "commit", "link"] {
        string_or_null(k);
    }
    for k in ["repository", "reason", "text", "markdown"] {
        assert!(n[k].is_string(), "{k} in {n:#}");
    }
    assert!(n["iterations"].is_u64(), "{n:#}");
    assert!(n["duration_ms"].is_u64(), "{n:#}");
    assert!(n["cost_usd"].is_f64() || n["cost_usd"].is_null(), "{n:#}");
    if let Some(m) = n["merge"].as_object() {
        let mut mk: Vec<&str> = m.keys().map(String::as_str).collect();
        mk.sort_unstable();
        assert_eq!(
            mk,
            [
                "branch",
                "checkout",
                "integration_branch",
                "outcome",
                "target"
            ],
            "{n:#}"
        );
        assert!(
            ["merged", "held"].contains(&m["outcome"].as_str().unwrap()),
            "{n:#}"
        );
    } else {
        assert!(n["merge"].is_null(), "{n:#}");
    }
    if let Some(a) = n["action"].as_str() {
        assert!(!a.contains('`'), "an action is one command line: {a}");
        let ok = std::process::Command::new("sh")
            .args(["-n", "-c", a])
            .status()
            .unwrap()
            .success();
        assert!(ok, "sh -n refuses the action {a}");
        let md = n["markdown"].as_str().unwrap();
        assert!(md.contains(&format!("`{a}`")), "one code span: {md}");
    }
}

/// Run a notice's `action` as a person would paste it: `sh -c` in the repository, with
/// `taskdaemon` (this build) and git on PATH, in the test's hermetic environment. Its
/// exit code.
fn paste(s: &Setup, line: &str) -> i32 {
    let bin = s.env.root().join("bin");
    if !bin.join("taskdaemon").exists() {
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_taskdaemon"), bin.join("taskdaemon"))
            .unwrap();
    }
    let template = s.env.cmd();
    let mut c = std::process::Command::new("sh");
    c.args(["-c", line]).current_dir(s.env.repo());
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    for (k, v) in &s.vars {
        c.env(k, v);
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        harness::narrowed_path().to_string_lossy()
    );
    let out = c.env("PATH", path).output().unwrap();
    if !out.status.success() {
        eprintln!(
            "{line}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.code().unwrap_or(-1)
}

fn only<'a>(v: &'a [Value], kind: &str, run: &str) -> &'a Value {
    let found: Vec<&Value> = v
        .iter()
        .filter(|n| n["event"] == kind && n["run"] == run)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} of {run}: {v:#?}");
    found[0]
}

/// The daemon: BLOCKED, DECIDE, COMPLETE merged (into a branch nobody has checked out),
/// COMPLETE held (main is checked out in the repository) and a usage-limit wait, each
/// payload of the documented schema with the command a person runs next; the held
/// one's command, run, takes the work into main.
#[test]
fn a_daemon_sends_each_outcome_with_the_next_command_in_the_documented_schema() {
    let (url, got) = receiver();
    let s = Setup::new("");
    s.user_hook_and(&format!("  - webhook: {url}\n"));
    s.project("");
    harness::git(&s.env.repo(), &["branch", "release"]);
    s.ok(&["daemon", "start", "--tick", "0.2", "--max-loops", "5"]);
    let blocks = s.submit("task-blocks: add the payment API");
    let decides = s.submit("task-decides: add login");
    let out = s.ok(&[
        "submit",
        "ralph",
        "task-completes: write the readme",
        "--validate",
        "true",
        "--target",
        "release",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let merged = v["created"][0]["id"].as_str().unwrap().to_string();
    let limited = s.submit("task-limited: fix the flaky test");
    let want = [
        ("blocked", &blocks),
        ("decide", &decides),
        ("complete", &merged),
        ("usage_limit_wait", &limited),
        ("complete", &limited),
    ];
    s.wait_for("every notice at the webhook", || {
        let web = got.lock().unwrap().clone();
        want.iter().all(|(k, r)| has(&web, k, r))
    });
    s.ok(&["daemon", "stop"]);
    let web = got.lock().unwrap().clone();
    for n in &web {
        check_schema(n);
    }
    let repo = s.env.repo().display().to_string();
    let wt = |id: &str| format!("{repo}/.taskdaemon/worktrees/{id}");
    let b = only(&web, "blocked", &blocks);
    assert_eq!(b["reason"], "the API key is missing");
    assert_eq!(
        b["action"],
        format!(
            "taskdaemon -C {} unblock && taskdaemon -C {repo} resume {blocks}",
            wt(&blocks)
        )
        .as_str()
    );
    assert_eq!(b["iterations"], 1);
    assert!(
        (b["cost_usd"].as_f64().unwrap() - 0.01).abs() < 1e-9,
        "{b:#}"
    );
    let d = only(&web, "decide", &decides);
    assert_eq!(d["reason"], "OAuth or passwords?");
    assert_eq!(
        d["action"],
        format!(
            "taskdaemon -C {} answer \"…\" && taskdaemon -C {repo} resume {decides}",
            wt(&decides)
        )
        .as_str()
    );
    let m = only(&web, "complete", &merged);
    assert_eq!(m["reason"], "validation passed");
    assert_eq!(m["merge"]["outcome"], "merged", "{m:#}");
    assert_eq!(m["merge"]["target"], "release");
    assert_eq!(
        m["action"],
        format!("taskdaemon -C {repo} report {merged}").as_str()
    );
    let commit = m["commit"].as_str().expect("the run's commit");
    let on_release = harness::git(&s.env.repo(), &["log", "--format=%H", "release"]);
    assert!(
        commit.len() >= 12 && on_release.lines().any(|l| l.starts_with(commit)),
        "{commit} in release: {on_release}"
    );
    let w = only(&web, "usage_limit_wait", &limited);
    assert!(
        w["action"].is_null(),
        "nothing to run while it waits: {w:#}"
    );
    assert!(
        w["action_note"]
            .as_str()
            .unwrap()
            .contains("resumes on its own at"),
        "{w:#}"
    );
    assert!(w["reason"].as_str().unwrap().contains("(until "), "{w:#}");
    let h = only(&web, "complete", &limited);
    assert_eq!(h["merge"]["outcome"], "held", "{h:#}");
    assert_eq!(
        h["merge"]["integration_branch"],
        "taskdaemon/integration/main"
    );
    let take = format!("git -C {repo} merge --no-edit taskdaemon/integration/main");
    assert_eq!(h["action"], take.as_str());
    assert!(h["text"].as_str().unwrap().contains("HELD"), "{h:#}");
    assert_eq!(
        h["iterations"], 1,
        "the limited attempt is done again: {h:#}"
    );
    // The commands do what they say: the report is written, the work is in main.
    assert_eq!(paste(&s, m["action"].as_str().unwrap()), 0);
    assert!(!s.env.repo().join("done.txt").exists());
    assert_eq!(paste(&s, &take), 0);
    assert!(s.env.repo().join("done.txt").exists(), "{take}");
}

/// A foreground `run` sends the same payloads (schema, reasons) as a daemon run, with its
/// own commands: BLOCKED, DECIDE, COMPLETE and the usage-limit wait.
#[test]
fn a_foreground_run_sends_each_outcome_with_the_next_command_in_the_documented_schema() {
    let (url, got) = receiver();
    let cases = [
        ("task-blocks: add the payment API", 2, "blocked"),
        ("task-decides: add login", 3, "decide"),
        ("task-completes: write the readme", 0, "complete"),
        ("task-limited: fix the flaky test", 0, "complete"),
    ];
    let mut repos = Vec::new();
    for (task, code, _) in cases {
        let s = Setup::new("");
        s.user_hook_and(&format!("  - webhook: {url}\n"));
        s.project("");
        let r = s.run(&["run", task, "--max-iterations", "3", "--validate", "true"]);
        assert_eq!(r.code, code, "{task}\n{}\n{}", r.stdout, r.stderr);
        repos.push(s);
    }
    let web = got.lock().unwrap().clone();
    for n in &web {
        check_schema(n);
    }
    let of = |i: usize, kind: &str| {
        let repo = repos[i].env.repo().display().to_string();
        let found: Vec<&Value> = web
            .iter()
            .filter(|n| n["event"] == kind && n["repository"] == repo.as_str())
            .collect();
        assert_eq!(found.len(), 1, "one {kind} in {repo}: {web:#?}");
        (found[0].clone(), repo)
    };
    let (b, repo) = of(0, "blocked");
    assert_eq!(b["reason"], "the API key is missing");
    assert_eq!(
        b["action"],
        format!("taskdaemon -C {repo} unblock && taskdaemon -C {repo} run --resume").as_str()
    );
    assert_eq!(b["iterations"], 1);
    assert!(
        (b["cost_usd"].as_f64().unwrap() - 0.01).abs() < 1e-9,
        "{b:#}"
    );
    let (d, repo) = of(1, "decide");
    assert_eq!(d["reason"], "OAuth or passwords?");
    assert_eq!(
        d["action"],
        format!("taskdaemon -C {repo} answer \"…\" && taskdaemon -C {repo} run --resume").as_str()
    );
    // Pasted, each goes on with the run (which blocks or asks again: the agent is scripted).
    assert_eq!(paste(&repos[0], b["action"].as_str().unwrap()), 2);
    assert_eq!(paste(&repos[1], d["action"].as_str().unwrap()), 3);
    let (c, repo) = of(2, "complete");
    assert_eq!(paste(&repos[2], c["action"].as_str().unwrap()), 0);
    assert!(repos[2].env.repo().join(".ralph/logs/report.html").exists());
    assert_eq!(c["reason"], "validation passed", "as a daemon run says it");
    assert_eq!(c["action"], format!("taskdaemon -C {repo} report").as_str());
    assert!(c["merge"].is_null());
    let head = harness::git(&repos[2].env.repo(), &["rev-parse", "HEAD"]);
    let commit = c["commit"].as_str().unwrap();
    assert!(
        commit.len() >= 12 && head.starts_with(commit),
        "{commit} of {head}"
    );
    let (w, _) = of(3, "usage_limit_wait");
    assert!(w["action"].is_null(), "{w:#}");
    assert!(
        w["action_note"]
            .as_str()
            .unwrap()
            .contains("resumes on its own at"),
        "{w:#}"
    );
    assert!(w["reason"].as_str().unwrap().contains("(until "), "{w:#}");
    let (over, _) = of(3, "usage_limit_over");
    assert!(over["action"].is_null(), "{over:#}");
    let (c, _) = of(3, "complete");
    assert_eq!(
        c["iterations"], 1,
        "the limited attempt is done again: {c:#}"
    );
}

#[test]
fn a_dead_webhook_slows_no_loop() {
    let (hang_url, held) = hanging();
    let closed = closed_port();
    // Baseline: the same run with only the command hook.
    let quick = Setup::new("");
    quick.user_hook();
    quick.project("");
    let base = timed_limited_run(&quick);
    quick.ok(&["daemon", "stop"]);

    let s = Setup::new("");
    s.user_hook();
    s.project(&format!(
        "  - webhook: {hang_url}\n    timeout: 10m\n    retries: 0\n  - webhook: {closed}\n"
    ));
    let with_dead = timed_limited_run(&s);
    eprintln!(
        "wall time of the run: {base:?} with a working hook only, {with_dead:?} with a hanging and a closed webhook too"
    );
    // The run went through its wait and completed while the hanging webhook still holds
    // the first notice's connection, unanswered and open.
    let conns = held.lock().unwrap();
    assert!(!conns.is_empty(), "the hanging webhook was never called");
    let first = &conns[0];
    first.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let mut open = true;
    loop {
        match (&*first).read(&mut buf) {
            Ok(0) => {
                open = false;
                break;
            }
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    assert!(
        open,
        "the client gave up on the hanging webhook: delivery blocked something"
    );
    drop(conns);
    s.ok(&["daemon", "stop"]);
    // The closed port's failure was reported once, not per message (three notices).
    let log = s.log();
    assert!(
        log.contains("cannot connect"),
        "the closed port's failure is in the log:\n{log}"
    );
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("notify: webhook") && l.contains("failed"))
            .count(),
        1,
        "one line per failing sink:\n{log}"
    );
}

/// Run the usage-limited task to completion under a daemon; the wall time from submit to
/// complete (printed, not asserted). The daemon is left running.
fn timed_limited_run(s: &Setup) -> Duration {
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let t = Instant::now();
    let id = s.submit("task-limited: fix the flaky test");
    s.wait_for("the run's completion", || {
        matches!(s.run_status(&id).as_str(), "complete" | "rebasing")
            || has(&s.hooked(), "complete", &id)
    });
    let took = t.elapsed();
    s.wait_for("the complete notice at the hook", || {
        has(&s.hooked(), "complete", &id)
    });
    assert!(
        has(&s.hooked(), "usage_limit_wait", &id),
        "{:#?}",
        s.hooked()
    );
    took
}

#[test]
fn a_foreground_run_notifies_from_its_own_events() {
    let s = Setup::new("");
    s.user_hook();
    s.project("");
    let r = s.run(&[
        "run",
        "task-blocks: add the payment API",
        "--max-iterations",
        "2",
    ]);
    assert_eq!(r.code, 2, "blocked\n{}\n{}", r.stdout, r.stderr);
    let got = s.hooked();
    assert_eq!(got.len(), 1, "{got:#?}");
    let n = &got[0];
    assert_eq!(n["event"], "blocked");
    assert_eq!(n["reason"], "the API key is missing");
    assert_eq!(n["title"], "task-blocks: add the payment API");
    let repo = s.env.repo().display().to_string();
    assert_eq!(n["repository"], repo.as_str());
    assert_eq!(
        n["action"],
        format!("taskdaemon -C {repo} unblock && taskdaemon -C {repo} run --resume").as_str()
    );
}

/// A webhook that answers every request with a redirect to `to`, counting them.
fn redirecting(to: &str) -> (String, Arc<Mutex<u32>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook/secret-token", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(0));
    let keep = seen.clone();
    let answer = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let _ = read_request(&s);
            *keep.lock().unwrap() += 1;
            let _ = (&s).write_all(answer.as_bytes());
        }
    });
    (url, seen)
}

#[test]
fn a_webhook_that_redirects_is_not_followed_and_a_hanging_one_delays_the_exit_little() {
    let (elsewhere, got_elsewhere) = receiver();
    let (url, redirects) = redirecting(&elsewhere);
    let (hang, _held) = hanging();
    let s = Setup::new("");
    s.user_hook_and(&format!(
        "  - webhook: {url}\n    events: [blocked]\n  - webhook: {hang}\n    events: [blocked]\n    timeout: 60s\n"
    ));
    s.project("");
    let t = std::time::Instant::now();
    let r = s.run(&[
        "run",
        "task-blocks: add the payment API",
        "--max-iterations",
        "2",
    ]);
    let took = t.elapsed();
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(*redirects.lock().unwrap() >= 1, "the webhook was called");
    assert!(
        got_elsewhere.lock().unwrap().is_empty(),
        "the notice went only to the address configured"
    );
    assert!(
        took < std::time::Duration::from_secs(8),
        "a receiver that never answers holds the exit {took:?}"
    );
}

/// A webhook that accepts the connection and never answers holds a daemon's stop no
/// longer than the flush (its timeout is a minute): `daemon stop` returns with the daemon
/// gone, and the log names the notice that was dropped. The time the stop took is printed.
#[test]
fn a_hanging_webhook_holds_a_daemon_stop_briefly_and_the_dropped_notice_is_logged() {
    let (hang, held) = hanging();
    let s = Setup::new("");
    s.user_hook_and(&format!(
        "  - webhook: {hang}\n    events: [blocked]\n    timeout: 60s\n    retries: 0\n"
    ));
    s.project("");
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let info = s.env.repo().join(".git/taskdaemon/daemon/info.json");
    let info: Value = serde_json::from_str(&std::fs::read_to_string(info).unwrap()).unwrap();
    let pid = i32::try_from(info["pid"].as_i64().unwrap()).unwrap();
    let id = s.submit("task-blocks: add the payment API");
    s.wait_for("the blocked notice at the command hook", || {
        has(&s.hooked(), "blocked", &id)
    });
    s.wait_for("the hanging webhook's connection", || {
        !held.lock().unwrap().is_empty()
    });
    let t = Instant::now();
    s.ok(&["daemon", "stop"]);
    eprintln!(
        "daemon stop with a webhook that never answers: {:?}",
        t.elapsed()
    );
    assert!(
        !harness::pid_alive(pid),
        "the daemon (pid {pid}) is still there after `daemon stop` returned\n{}",
        s.log()
    );
    let log = s.log();
    let dropped = log
        .lines()
        .find(|l| l.contains("not delivered") && l.contains("dropped"))
        .unwrap_or_else(|| panic!("no line names the dropped notice:\n{log}"));
    assert!(
        dropped.contains(&format!("blocked of run {id}"))
            && dropped.contains("webhook http://127.0.0.1"),
        "{dropped}"
    );
}
