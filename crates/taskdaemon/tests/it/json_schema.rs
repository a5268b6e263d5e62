//! One JSON convention (docs/json.md) for every `--json` output and every event: each
//! command is run with `--json` against a real repository with a finished foreground run
//! and a daemon run, and every line it prints goes through the one schema check
//! (`taskdaemon_core::json::check`: snake_case keys at every depth, `"schema": 1`, an RFC
//! 3339 `at` on events, times as RFC 3339, `null` for unset, native types). The daemon's
//! event stream is read raw from its socket and checked the same way.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use taskdaemon_core::json::{Kind, check};

use crate::harness::{Env, Run};

/// Commits a line and claims completion.
const AGENT: &str = r#"#!/bin/sh
echo "hello from the agent"
echo "iteration $TASKDAEMON_ITERATION" >> work.txt
git add -A && git commit -qm "agent iteration $TASKDAEMON_ITERATION"
echo "<promise>COMPLETE</promise>"
"#;

struct Repo {
    env: Env,
    vars: Vec<(String, String)>,
    /// Every (command, problem) found so far: reported all at once at the end.
    problems: Vec<String>,
    checked: usize,
}

impl Repo {
    fn new() -> Repo {
        let env = Env::new();
        let agent = env.root().join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let vars = vec![(
            "TASKDAEMON_AGENT".to_string(),
            format!("cmd:{}", agent.display()),
        )];
        Repo {
            env,
            vars,
            problems: Vec::new(),
            checked: 0,
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.env.run_with(&self.vars, args)
    }

    /// Run `args` (which hold `--json`), check every line it printed, return the lines.
    fn json(&mut self, args: &[&str], kind: Kind) -> Vec<Value> {
        self.json_with(&[], args, kind)
    }

    fn json_with(&mut self, extra: &[(&str, &str)], args: &[&str], kind: Kind) -> Vec<Value> {
        let mut vars = self.vars.clone();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let r = self.env.run_with(&vars, args);
        let name = args.join(" ");
        let lines: Vec<&str> = r.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            self.problems.push(format!(
                "`{name}` printed nothing (exit {}): {}",
                r.code, r.stderr
            ));
        }
        lines
            .into_iter()
            .map(|line| {
                let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                    panic!("`{name}` printed a line that is not JSON ({e}): {line}")
                });
                self.look(&name, &v, kind);
                v
            })
            .collect()
    }

    fn look(&mut self, name: &str, v: &Value, kind: Kind) {
        self.checked += 1;
        // A command's error (a JSON document too) is no check of its output.
        let kind = if v.get("error").is_some() {
            Kind::Document
        } else {
            kind
        };
        for p in check(v, kind) {
            self.problems.push(format!("`{name}`: {p}\n    in {v}"));
        }
    }

    /// A check of what a document says: recorded with the convention's problems, so one
    /// run names every one of them.
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(what());
        }
    }

    fn one(&mut self, args: &[&str]) -> Value {
        let mut all = self.json(args, Kind::Document);
        assert_eq!(
            all.len(),
            1,
            "`{}` printed {} lines: {all:?}",
            args.join(" "),
            all.len()
        );
        all.remove(0)
    }

    fn socket(&self) -> PathBuf {
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(self.env.repo().join(".git/taskdaemon/daemon/info.json"))
                .unwrap(),
        )
        .unwrap();
        PathBuf::from(info["socket"].as_str().unwrap())
    }
}

/// The daemon's stream, line by line as it comes over the socket.
struct RawStream {
    lines: std::io::Lines<BufReader<UnixStream>>,
}

impl RawStream {
    fn open(socket: &Path) -> RawStream {
        let mut s = UnixStream::connect(socket).unwrap();
        let req = serde_json::to_string(&taskdaemon_core::daemon::ipc::Request::Subscribe).unwrap();
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        RawStream {
            lines: BufReader::new(s).lines(),
        }
    }

    /// Lines until one whose `event` is `last` (included), or the stream's end.
    fn until(&mut self, last: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let Some(Ok(line)) = self.lines.next() else {
                return seen;
            };
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = v["event"] == last;
            seen.push(v);
            if done {
                return seen;
            }
        }
    }
}

/// The commands a finished foreground run and the records give something to print.
fn check_store_commands(r: &mut Repo) {
    let plan = r.one(&["plan", "new", "Shop", "--json"]);
    let plan_id = plan["id"].as_str().unwrap().to_string();
    let a = r.one(&["spec", "new", "Cart", "--parent", &plan_id, "--json"]);
    let a_id = a["id"].as_str().unwrap().to_string();
    let b = r.one(&[
        "spec", "new", "Pay", "--parent", &plan_id, "--deps", &a_id, "--json",
    ]);
    let b_id = b["id"].as_str().unwrap().to_string();
    r.one(&["show", &b_id, "--json"]);
    r.one(&["edit", &b_id, "--title", "Payment", "--json"]);
    // The same field has one name, in status as in list: `waiting_for`, `[{id, status}]`.
    let find = |list: &Value, id: &str| -> Value {
        let items = list.as_array().cloned().unwrap_or_default();
        let found = items.into_iter().find(|x| x["id"] == id);
        found.map(|x| x["waiting_for"].clone()).unwrap_or_default()
    };
    let list = r.one(&["list", "--json"]);
    let listed = find(&list["records"], &b_id);
    let want = serde_json::json!([{"id": a_id, "status": "pending"}]);
    r.expect(listed == want, || {
        format!("`list --json`: waiting_for {want} expected, found {listed} in {list}")
    });
    let status = r.one(&["status", "--json"]);
    let spec = find(&status["plans"][0]["specs"], &b_id);
    r.expect(spec == want, || {
        format!(
            "`status --json`: waiting_for {want} expected (as in list), found {spec} in {status}"
        )
    });
    r.one(&["pause", &a_id, "--json"]);
    r.one(&["resume", &a_id, "--json"]);
    r.one(&["start", &plan_id, "--json"]);
    for args in [
        &["loops", "--json"][..],
        &["loops", "ralph", "--json"],
        &["snapshot", "list", "--json"],
        &["snapshot", "diff", "run-1-pre", "--json"],
        &["store", "stats", "--json"],
        &["store", "check", "--json"],
        &["worktree", "list", "--json"],
        &["trust", "--list", "--json"],
        &["unblock", "--json"],
        &["report", "--json"],
        &["check-doc", "plan", ".taskdaemon/plans/none.md", "--json"],
        &["show", "no-such-record", "--json"],
    ] {
        r.one(args);
    }
    r.json(&["doctor", "--json"], Kind::Document);
    r.json(&["logs", "--json"], Kind::Document);
    r.one(&["snapshot", "save", "--json", "--", "by hand"]);
    r.one(&["store", "compact", "--json"]);
    r.one(&["worktree", "prune", "--json"]);
    std::fs::write(
        r.env.repo().join(".ralph/plan.md"),
        "# Plan\n\n## Add a file\nFiles: a.txt\n<!-- TASK-1 [ADD]: a file -->\n",
    )
    .unwrap();
    r.one(&["plan", "validate", "--json"]);
    r.one(&["plan", "show", "--json"]);
    r.one(&["trust", "--json"]);
    r.one(&["untrust", "--json"]);
    r.one(&["delete", &b_id, "--json"]);
}

/// `config show`: unset is null, a number from the environment is a number as one from
/// the file is.
fn check_config(r: &mut Repo) {
    std::fs::write(
        r.env.repo().join(".taskdaemon/config.yaml"),
        "max-loops: 3\nagent-limits:\n  api:openai:gpt-5: 1\n",
    )
    .unwrap();
    // A map keyed by names is a list, so its keys are field names too.
    r.json(&["doctor", "--json"], Kind::Document);
    let shown = r.json_with(
        &[("TASKDAEMON_MAX_ITERATIONS", "9")],
        &["config", "show", "--json"],
        Kind::Document,
    );
    let settings = shown[0]["settings"].as_array().cloned().unwrap_or_default();
    let row = |key: &str| {
        let found = settings.iter().find(|s| s["key"] == key).cloned();
        found.unwrap_or_default()
    };
    for (key, field, want) in [
        ("max-iterations", "value", serde_json::json!(9)),
        ("max-loops", "value", serde_json::json!(3)),
        ("max-cost", "value", Value::Null),
        ("max-cost", "unset", serde_json::json!("no limit")),
        ("allow-test-changes", "value", serde_json::json!(false)),
        (
            "agent-limits",
            "value",
            serde_json::json!([{"agent": "api:openai:gpt-5", "limit": 1}]),
        ),
    ] {
        let found = row(key);
        r.expect(found[field] == want, || {
            format!("`config show --json`: {key}'s {field} {want} expected, found {found}")
        });
    }
}

/// A daemon run from its submission to its merge, on the socket and through the client
/// commands.
fn check_daemon(r: &mut Repo) {
    r.one(&["daemon", "start", "--tick", "0.2", "--json"]);
    let mut stream = RawStream::open(&r.socket());
    let mut events = stream.until("snapshot");
    // `daemon events --json`: the same stream, a line per event, until the daemon stops.
    let printed = r.env.root().join("events.jsonl");
    let mut printer = r
        .env
        .cmd()
        .args(["daemon", "events", "--json"])
        .stdout(std::fs::File::create(&printed).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::harness::wait_for_lines(&printed, 1, Duration::from_secs(60));
    let submitted = r.one(&[
        "submit",
        "ralph",
        "say hello",
        "--validate",
        "true",
        "--json",
    ]);
    let id = submitted["created"][0]["id"].as_str().unwrap().to_string();
    events.extend(stream.until("merged"));
    r.one(&["status", "--json"]);
    r.one(&["daemon", "status", "--json"]);
    r.json(&["logs", &id, "--json"], Kind::Document);
    r.json(&["logs", &id, "--follow", "--json"], Kind::Document);
    // `status --watch --json`: a document per change, until the daemon stops.
    let watched = r.env.root().join("watch.jsonl");
    let mut watch = r
        .env
        .cmd()
        .args(["status", "--watch", "--json"])
        .stdout(std::fs::File::create(&watched).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::harness::wait_for_lines(&watched, 1, Duration::from_secs(60));
    r.one(&["daemon", "stop", "--json"]);
    events.extend(stream.until("daemon_stopped"));
    crate::harness::wait_timeout(&mut watch, Duration::from_secs(60));
    for line in std::fs::read_to_string(&watched).unwrap().lines() {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            r.look("status --watch --json", &v, Kind::Document);
        }
    }
    for e in &events {
        r.look("the daemon's event stream", e, Kind::Event);
    }
    crate::harness::wait_timeout(&mut printer, Duration::from_secs(60));
    let printed: Vec<Value> = std::fs::read_to_string(&printed)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for e in &printed {
        r.look("daemon events --json", e, Kind::Event);
    }
    let printed: Vec<&str> = printed.iter().filter_map(|e| e["event"].as_str()).collect();
    for want in ["snapshot", "run_started", "merged", "daemon_stopped"] {
        r.expect(printed.contains(&want), || {
            format!("`daemon events --json`: no {want} in {printed:?}")
        });
    }
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for want in [
        "snapshot",
        "run_started",
        "iteration_finished",
        "complete",
        "merged",
    ] {
        r.expect(names.contains(&want), || {
            format!("the daemon's stream: no {want} in {names:?}")
        });
    }
    // The project's clock stamps them (TASKDAEMON_NOW in the harness).
    let clock = events.iter().all(|e| e["at"] == "2026-11-21T12:00:00Z");
    r.expect(clock, || {
        "the daemon's events are not stamped by the project's clock".into()
    });
}

#[test]
fn every_json_output_and_event_keeps_the_one_convention() {
    let mut r = Repo::new();
    r.one(&["init", "--json"]);
    let events = r.json(
        &["run", "--validate", "true", "--json", "say hello"],
        Kind::Event,
    );
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        names.contains(&"run_started") && names.contains(&"run_finished"),
        "{names:?}"
    );
    let clock = events.iter().all(|e| e["at"] == "2026-11-21T12:00:00Z");
    r.expect(clock, || {
        "`run --json`'s events are not stamped by the project's clock".into()
    });
    check_store_commands(&mut r);
    check_config(&mut r);
    std::fs::write(r.env.repo().join(".ralph/decide.txt"), "red or blue?\n").unwrap();
    r.one(&["answer", "red", "--json"]);
    r.one(&["task", "parse", "add a file a.txt", "--json"]);
    let task = r.json(
        &["task", "add a file a.txt", "--validate", "true", "--json"],
        Kind::Event,
    );
    assert!(
        task.iter().any(|e| e["event"] == "task_finished"),
        "{task:?}"
    );
    r.json(&["plan", "diff", "--task", "1", "--json"], Kind::Document);
    r.one(&["snapshot", "status", "--json"]);
    r.one(&["snapshot", "prune", "--keep", "1", "--dry-run", "--json"]);
    let done = r.run(&["archive", "--json"]);
    assert_eq!(done.code, 0, "{}", done.stderr);
    r.look(
        "archive",
        &serde_json::from_str(&done.stdout).unwrap(),
        Kind::Document,
    );
    let demo = r.env.root().join("demo");
    r.json(
        &["demo", "--path", demo.to_str().unwrap(), "--json"],
        Kind::Event,
    );
    check_daemon(&mut r);
    r.one(&["snapshot", "rollback", "run-1-pre", "--json"]);
    assert!(
        r.problems.is_empty(),
        "{} of {} documents break the convention:\n{}",
        r.problems.len(),
        r.checked,
        r.problems.join("\n")
    );
}

/// A tasks.md agent: does its task, checks its box, commits, claims it.
const TASK_AGENT: &str = r#"#!/bin/sh
id="$TASKDAEMON_TASK_ID"
mkdir -p work && echo "$id" > "work/$id.txt"
sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
git add -A && git commit -qm "task $id"
echo "done. TASK_COMPLETE"
"#;

#[test]
fn a_work_list_run_and_its_cancel_keep_the_one_convention() {
    let mut r = Repo::new();
    let spec = r.env.repo().join("specs/demo");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(
        spec.join("tasks.md"),
        "# Tasks\n\n- [ ] 1.1 Make a file\n  - **Verify**: `test -f work/1.1.txt`\n",
    )
    .unwrap();
    std::fs::write(
        spec.join("requirements.md"),
        "# Requirements\n\nFR-1: a file.\n",
    )
    .unwrap();
    std::fs::write(spec.join("design.md"), "# Design\n\nOne file.\n").unwrap();
    let agent = r.env.root().join("task-agent.sh");
    std::fs::write(&agent, TASK_AGENT).unwrap();
    crate::harness::git(&r.env.repo(), &["add", "-A"]);
    crate::harness::git(&r.env.repo(), &["commit", "-qm", "spec"]);
    let agent = format!("cmd:sh {}", agent.display());
    let events = r.json(
        &["implement", "specs/demo", "--agent", &agent, "--json"],
        Kind::Event,
    );
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for want in [
        "run_started",
        "task_started",
        "task_completed",
        "implement_finished",
    ] {
        assert!(names.contains(&want), "no {want} in {names:?}");
    }
    r.one(&["cancel", "specs/demo", "--json"]);
    r.one(&["check-doc", "specs", "specs", "--json"]);
    assert!(
        r.problems.is_empty(),
        "{} of {} documents break the convention:\n{}",
        r.problems.len(),
        r.checked,
        r.problems.join("\n")
    );
}

/// The variants of `pub enum NAME` in `source`, as their `event` names (snake_case); a
/// variant marked `#[serde(untagged)]` (the run's work-list events) is not one.
fn variants(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("pub enum {name} {{"))
        .unwrap_or_else(|| panic!("no enum {name}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").unwrap()];
    let mut out = Vec::new();
    let mut untagged = false;
    for line in body.lines().skip(1) {
        let Some(rest) = line.strip_prefix("    ") else {
            continue;
        };
        if rest.starts_with("#[serde(untagged)]") {
            untagged = true;
            continue;
        }
        if !rest.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if !std::mem::take(&mut untagged) {
            out.push(taskdaemon_core::json::snake(&ident));
        }
    }
    out
}

/// The `"event": "NAME"` literals of the binary's own events (`taskdaemon task`'s).
fn literal_events(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            literal_events(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for piece in text.split("\"event\": \"").skip(1) {
                out.push(piece.split('"').next().unwrap().to_string());
            }
        }
    }
}

/// The section of docs/json.md under `heading`, up to the next heading of its level.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/json.md has no {heading:?}"));
    let rest = &doc[start + heading.len()..];
    let end = rest
        .find("\n### ")
        .or_else(|| rest.find("\n## "))
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn the_json_doc_lists_every_event_type_the_code_can_emit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let doc = read("docs/json.md");
    let engine = read("crates/taskdaemon-core/src/engine/events.rs");
    let daemon = read("crates/taskdaemon-core/src/daemon/events.rs");
    let mut run_events = variants(&engine, "EngineEvent");
    run_events.extend(variants(&engine, "WorkEvent"));
    literal_events(&root.join("crates/taskdaemon/src"), &mut run_events);
    let daemon_events = variants(&daemon, "DaemonEvent");
    assert!(run_events.len() > 20 && daemon_events.len() > 20);
    let mut missing = Vec::new();
    for (heading, names) in [
        ("### Run events", &run_events),
        ("### Daemon events", &daemon_events),
    ] {
        let listed = section(&doc, heading);
        for n in names {
            if !listed.contains(&format!("| `{n}` |")) {
                missing.push(format!("{heading}: `{n}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/json.md does not list these events (add a row for each):\n{}",
        missing.join("\n")
    );
}

/// A stories agent: implements the story (for review), then approves it and completes.
const STORIES_AGENT: &str = r#"#!/bin/sh
story() {
  printf '{"userStories":[{"id":"US-1","title":"Greeting","description":"Say hello","acceptanceCriteria":["hello.txt says hello"],"priority":1,"passes":%s,"reviewStatus":"%s","reviewCount":%s,"reviewFeedback":"","notes":"","dependsOn":[]}]}\n' "$1" "$2" "$3" > "$TASKDAEMON_STORIES_FILE"
}
case "$TASKDAEMON_ITERATION" in
1) echo hello > hello.txt; story false needs_review 0 ;;
*) story true approved 1; git add -A && git commit -qm "review"; echo "<promise>COMPLETE</promise>"; exit 0 ;;
esac
git add -A && git commit -qm "iteration $TASKDAEMON_ITERATION"
"#;

/// The `--json` commands the tests above leave out: `stories`, `plan update`, `store
/// trust`, `cancel` of a daemon run, and `store migrate` both ways (on PostgreSQL).
#[test]
fn the_other_json_commands_keep_the_one_convention() {
    let mut r = Repo::new();
    let repo = r.env.repo();
    std::fs::write(
        repo.join("tasks.json"),
        r#"{"userStories":[{"id":"US-1","title":"Greeting","description":"Say hello","acceptanceCriteria":["hello.txt says hello"],"priority":1,"passes":false,"reviewStatus":"pending","reviewCount":0,"reviewFeedback":"","notes":"","dependsOn":[]}]}
"#,
    )
    .unwrap();
    crate::harness::git(&repo, &["add", "-A"]);
    crate::harness::git(&repo, &["commit", "-qm", "stories"]);
    let agent = r.env.root().join("stories.sh");
    std::fs::write(&agent, STORIES_AGENT).unwrap();
    let agent = format!("cmd:sh {}", agent.display());
    let events = r.json(&["stories", "--agent", &agent, "--json"], Kind::Event);
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(names.contains(&"run_finished"), "{names:?}");
    std::fs::write(
        repo.join(".ralph/plan.md"),
        "# Plan\n\n## greeting\nFiles: hello.txt\n",
    )
    .unwrap();
    r.one(&["plan", "update", "--json"]);
    let plan = r.one(&["plan", "new", "Shop", "--json"]);
    let plan_id = plan["id"].as_str().unwrap().to_string();
    r.one(&["store", "trust", &plan_id, "--json"]);
    // A daemon run cancelled while its agent works.
    std::fs::write(r.env.root().join("agent.sh"), "#!/bin/sh\nsleep 30\n").unwrap();
    let sub = r.one(&["submit", "ralph", "wait", "--validate", "true", "--json"]);
    let run = sub["created"][0]["id"].as_str().unwrap().to_string();
    r.one(&["daemon", "start", "--tick", "0.2", "--json"]);
    let running = crate::harness::wait_for_status(
        Duration::from_secs(60),
        "the run running",
        || serde_json::from_str(&r.run(&["status", "--json"]).stdout).unwrap_or_default(),
        String::new,
        |s: &Value| {
            s["runs"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["status"] == "running"))
        },
    );
    assert!(running["runs"].is_array());
    r.one(&["cancel", &run, "--json"]);
    r.one(&["daemon", "stop", "--json"]);
    if let Some(db) = crate::pg::database() {
        let url = db.url();
        let q = [("TASKDAEMON_QUEUE_PROJECT", "json")];
        r.json_with(
            &q,
            &["store", "migrate", "--to", &url, "--json"],
            Kind::Document,
        );
        let back = [("TASKDAEMON_QUEUE", url.as_str()), q[0]];
        r.json_with(
            &back,
            &["store", "migrate", "--to", "jsonl", "--force", "--json"],
            Kind::Document,
        );
    }
    assert!(r.checked >= 8, "only {} documents were checked", r.checked);
    assert!(
        r.problems.is_empty(),
        "{} of {} documents break the convention:\n{}",
        r.problems.len(),
        r.checked,
        r.problems.join("\n")
    );
}
