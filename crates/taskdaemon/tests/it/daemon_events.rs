//! The daemon's event stream as a subscriber sees it: a snapshot first, then typed events
//! of a run from its start to its merge, each naming the run, its title and the repository;
//! and the daemon's client commands (`logs --follow`, `status`, `daemon stop|status`) on it.
//! Real git, real processes; the agent is a small shell program.

use crate::harness;
use std::path::PathBuf;
use std::time::Duration;

use crate::harness::Env;
use serde_json::Value;
use taskdaemon_core::daemon::DaemonEvent;
use taskdaemon_core::daemon::events::AgentStream;
use taskdaemon_core::daemon::ipc;

/// Says two lines, commits, and claims completion; with `$WAIT_FOR` it first waits for that
/// file to exist (so a test can subscribe before the agent talks).
const AGENT: &str = r#"#!/bin/sh
if [ -n "$WAIT_FOR" ]; then
  while [ ! -e "$WAIT_FOR" ]; do sleep 0.05; done
fi
echo "hello from the agent"
echo "iteration $TASKDAEMON_ITERATION" >> work.txt
git add -A && git commit -qm "agent iteration $TASKDAEMON_ITERATION"
echo "<promise>COMPLETE</promise>"
"#;

struct Setup {
    env: Env,
    vars: Vec<(String, String)>,
}

impl Setup {
    fn new(extra: &[(&str, String)]) -> Setup {
        let env = Env::new();
        let agent = env.root().join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut vars = vec![(
            "TASKDAEMON_AGENT".to_string(),
            format!("cmd:{}", agent.display()),
        )];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Setup { env, vars }
    }

    /// `script` as the agent of `env`'s daemon runs, with `TD_CALLS` naming the file it may
    /// record its calls in (returned).
    fn with_agent(env: Env, name: &str, script: &str) -> (Setup, PathBuf) {
        let agent = env.root().join(name);
        std::fs::write(&agent, script).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let calls = env.root().join("calls");
        let vars = vec![
            (
                "TASKDAEMON_AGENT".to_string(),
                format!("cmd:{}", agent.display()),
            ),
            ("TD_CALLS".to_string(), calls.display().to_string()),
        ];
        (Setup { env, vars }, calls)
    }

    fn run(&self, args: &[&str]) -> harness::Run {
        self.env.run_with(&self.vars, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok_with(&self.vars, args)
    }

    fn socket(&self) -> PathBuf {
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(self.env.repo().join(".git/taskdaemon/daemon/info.json"))
                .unwrap(),
        )
        .unwrap();
        PathBuf::from(info["socket"].as_str().unwrap())
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
}

/// Read events until `last` matches one, failing (with the daemon's log) if the stream
/// ends first or falls silent for a minute.
fn read_until(
    sub: &mut ipc::Subscription,
    s: &Setup,
    last: impl Fn(&DaemonEvent) -> bool,
) -> Vec<DaemonEvent> {
    sub.set_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut seen = Vec::new();
    loop {
        match sub.next() {
            Some(Ok(e)) => {
                let done = last(&e);
                seen.push(e);
                if done {
                    return seen;
                }
            }
            other => panic!(
                "the stream ended ({other:?}) after {:#?}\nlog:\n{}",
                seen.iter().map(DaemonEvent::name).collect::<Vec<_>>(),
                s.log()
            ),
        }
    }
}

#[test]
fn a_subscriber_sees_a_snapshot_then_a_run_from_start_to_merge_then_the_stop() {
    let go = Env::new();
    let go_file = go.root().join("go");
    let s = Setup::new(&[("WAIT_FOR", go_file.display().to_string())]);
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let first = read_until(&mut sub, &s, |_| true);
    let DaemonEvent::Snapshot(snap) = &first[0] else {
        panic!("the first event is not a snapshot: {first:?}");
    };
    assert!(snap.daemon.is_some(), "{snap:?}");
    assert!(snap.runs.is_empty() && snap.plans.is_empty(), "{snap:?}");

    let id = s.submit("say hello");
    let started = read_until(&mut sub, &s, |e| e.name() == "iteration_started");
    std::fs::write(&go_file, "").unwrap();
    let rest = read_until(&mut sub, &s, |e| matches!(e, DaemonEvent::Merged { .. }));
    let all: Vec<&DaemonEvent> = started.iter().chain(&rest).collect();
    let names: Vec<String> = all.iter().map(|e| e.name()).collect();
    for want in [
        "run_started",
        "iteration_started",
        "agent_line",
        "gate_result",
        "iteration_finished",
        "complete",
        "merged",
    ] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    // Everything about the run names it, its title and the repository.
    for e in all.iter().filter_map(|e| e.subject()) {
        assert_eq!(e.run, id);
        assert_eq!(e.title, "say hello");
        assert_eq!(e.repo, s.env.repo());
    }
    assert!(
        all.iter().any(|e| matches!(e, DaemonEvent::AgentLine { line, stream: AgentStream::Text | AgentStream::Other, .. } if line == "hello from the agent")),
        "{all:#?}"
    );
    assert!(all.iter().any(|e| matches!(e,
        DaemonEvent::GateResult { gate, passed: true, .. } if gate == "validate")));
    // The order a watcher relies on.
    let pos = |n: &str| names.iter().position(|x| x == n).unwrap();
    assert!(pos("run_started") < pos("iteration_started"));
    assert!(pos("iteration_finished") < pos("complete"));
    assert!(pos("complete") < pos("merged"));

    s.ok(&["daemon", "stop"]);
    let end = read_until(&mut sub, &s, |e| e.name() == "daemon_stopped");
    assert!(end.iter().any(|e| e.name() == "daemon_stopping"), "{end:?}");
    assert!(
        sub.next().is_none(),
        "the stream goes on after the daemon stopped"
    );
}

/// Subscribe and read until the run named `id` is in its first iteration.
fn wait_iteration_started(s: &Setup, sub: &mut ipc::Subscription, id: &str) {
    read_until(
        sub,
        s,
        |e| matches!(e, DaemonEvent::IterationStarted { subject, .. } if subject.run == id),
    );
}

/// A daemon whose run `title` is in its first iteration, waiting there until `go` is
/// written (`_home` keeps `go`'s directory).
struct Waiting {
    _home: Env,
    go: std::path::PathBuf,
    s: Setup,
    sub: ipc::Subscription,
    id: String,
}

fn waiting_run(title: &str) -> Waiting {
    let home = Env::new();
    let go = home.root().join("go");
    let s = Setup::new(&[("WAIT_FOR", go.display().to_string())]);
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let id = s.submit(title);
    wait_iteration_started(&s, &mut sub, &id);
    Waiting {
        _home: home,
        go,
        s,
        sub,
        id,
    }
}

/// Let the run `id` go (once subscribed) and read until it is merged.
fn let_go_until_merged(s: &Setup, go: &std::path::Path, id: &str) {
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    std::fs::write(go, "").unwrap();
    read_until(
        &mut sub,
        s,
        |e| matches!(e, DaemonEvent::Merged { subject, .. } if subject.run == id),
    );
}

#[test]
fn logs_follow_prints_a_daemon_run_as_it_goes_and_ends_with_its_status() {
    let go = Env::new();
    let go_file = go.root().join("go");
    let s = Setup::new(&[("WAIT_FOR", go_file.display().to_string())]);
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let id = s.submit("follow me");
    wait_iteration_started(&s, &mut sub, &id);
    let mut c = s.env.cmd();
    for (k, v) in &s.vars {
        c.env(k, v);
    }
    let follower = c
        .args(["logs", &id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&go_file, "").unwrap();
    let out = follower.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("hello from the agent"),
        "{stdout}\nlog:\n{}",
        s.log()
    );
    assert!(
        stdout.contains(&format!("-- run {id} is complete --")),
        "{stdout}"
    );

    // As JSON: pieces of the log, then the status.
    let json = s.ok(&["logs", &id, "--json"]);
    let lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello from the agent"))),
        "{json}"
    );
    assert!(lines.iter().all(|l| l["run"] == id.as_str()), "{json}");
    s.ok(&["daemon", "stop"]);
}

#[test]
fn daemon_status_and_stop_without_a_daemon_exit_1_and_say_so() {
    let s = Setup::new(&[]);
    let r = s.run(&["daemon", "status"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("no daemon runs"), "{}", r.stderr);
    let r = s.run(&["daemon", "stop", "--json"]);
    assert_eq!(r.code, 1);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["running"], false);
    let r = s.run(&["daemon", "status", "--json"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&r.stdout).unwrap()["running"],
        false
    );

    let v: Value =
        serde_json::from_str(&s.ok(&["daemon", "start", "--tick", "0.2", "--json"])).unwrap();
    assert_eq!(v["started"], true, "{v}");
    let v: Value = serde_json::from_str(&s.ok(&["daemon", "status", "--json"])).unwrap();
    assert_eq!(v["running"], true, "{v}");
    let v: Value = serde_json::from_str(&s.ok(&["daemon", "stop", "--json"])).unwrap();
    assert_eq!(v["stopped"], true, "{v}");
}

#[test]
fn status_after_the_daemon_was_killed_shows_the_run_interrupted_not_running() {
    let Waiting {
        _home,
        go: go_file,
        s,
        mut sub,
        id,
    } = waiting_run("interrupt me");
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(s.env.repo().join(".git/taskdaemon/daemon/info.json")).unwrap(),
    )
    .unwrap();
    let pid = info["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Its end: the stream closes.
    while let Some(Ok(_)) = sub.next() {}

    let v: Value = serde_json::from_str(&s.ok(&["status", "--json"])).unwrap();
    assert!(v["daemon"].is_null(), "{v}");
    assert_eq!(v["runs"][0]["status"], "running", "{v}");
    assert_eq!(v["runs"][0]["interrupted"], true, "{v}");
    let text = s.ok(&["status"]);
    assert!(text.contains("interrupted"), "{text}");
    assert!(
        text.contains("resumes on `taskdaemon daemon start`"),
        "{text}"
    );

    // The next start ends what the dead daemon left and runs it to the end (let go only
    // once subscribed: the resumed run may otherwise merge before the subscription).
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let_go_until_merged(&s, &go_file, &id);
    s.ok(&["daemon", "stop"]);
}

#[test]
fn a_run_a_daemon_stop_interrupted_loses_its_note_when_it_goes_on() {
    let Waiting {
        _home, go, s, id, ..
    } = waiting_run("stop and go on");
    s.ok(&["daemon", "stop"]);
    let v: Value = serde_json::from_str(&s.ok(&["status", "--json"])).unwrap();
    assert_eq!(
        v["runs"][0]["note"], "interrupted by a daemon stop; resumes on the next start",
        "{v}"
    );
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    // The next daemon takes it up at once (perhaps before the subscription): the note goes.
    let going_on = (0..200).find_map(|_| {
        let v: Value = serde_json::from_str(&s.ok(&["status", "--json"])).ok()?;
        let run = &v["runs"][0];
        if run["status"] == "running" && run["note"].is_null() {
            return Some(v);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        None
    });
    assert!(
        going_on.is_some(),
        "the note stayed: {}",
        s.ok(&["status", "--json"])
    );
    let_go_until_merged(&s, &go, &id);
    s.ok(&["daemon", "stop"]);
}

#[test]
fn a_second_interrupt_forces_the_foreground_daemon_to_stop() {
    // An agent that ignores TERM, and a long grace: only a forced stop ends it soon.
    let go = Env::new();
    let go_file = go.root().join("never");
    let s = Setup::new(&[("WAIT_FOR", go_file.display().to_string())]);
    let agent = s.env.root().join("agent.sh");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        text.replacen(
            "#!/bin/sh\n",
            "#!/bin/sh\ntrap '' TERM\necho $$ > \"$PID_FILE\"\n",
            1,
        ),
    )
    .unwrap();
    let pid_file = s.env.root().join("agent.pid");
    std::fs::create_dir_all(s.env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        s.env.repo().join(".taskdaemon/config.yaml"),
        "kill-grace: 600s\n",
    )
    .unwrap();
    let mut c = s.env.cmd();
    for (k, v) in &s.vars {
        c.env(k, v);
    }
    c.env("PID_FILE", &pid_file);
    let mut daemon = c
        .args(["daemon", "start", "--foreground", "--tick", "0.2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    harness::wait_for(
        &s.env.repo().join(".git/taskdaemon/daemon/info.json"),
        Duration::from_secs(60),
    );
    let mut sub = loop {
        match ipc::subscribe(&s.socket()) {
            Ok(sub) => break sub,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let id = s.submit("ignore TERM");
    wait_iteration_started(&s, &mut sub, &id);
    harness::wait_for(&pid_file, Duration::from_secs(60));
    let agent_pid = harness::read_pid(&pid_file);
    let int = |p: u32| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap()
    };
    int(daemon.id());
    read_until(&mut sub, &s, |e| e.name() == "daemon_stopping");
    int(daemon.id());
    let status = harness::wait_timeout(&mut daemon, Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(daemon.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("forcing the stop"), "{err}");
    // The agent is gone (or a zombie waiting for its reaper).
    let gone = (0..200).any(|_| {
        let alive = harness::pid_alive(agent_pid);
        if alive {
            std::thread::sleep(Duration::from_millis(50));
        }
        !alive
    });
    assert!(gone, "agent {agent_pid} survived a forced stop");
}

/// The work-list agent (as `implement`'s tests play it): writes `work/<id>.txt` and commits
/// it, checks its box (under the tasks lock in a parallel group, writing its own progress
/// file), and says TASK_COMPLETE, or VERIFICATION_PASS as QA.
const WORKLIST_AGENT: &str = r#"#!/bin/sh
id="$TASKDAEMON_TASK_ID"
cat > /dev/null
echo "$id" >> "$TD_CALLS"
par=0
case "$TASKDAEMON_PROGRESS_FILE" in *.progress-task-*) par=1;; esac
mkdir -p work
echo "$id" > "work/$id.txt"
git add work && git commit -qm "task $id"
flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
if [ "$par" = 1 ]; then
  echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE"
else
  echo "- $id done" >> "$TASKDAEMON_SPEC_DIR/.progress.md"
  git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $id"
fi
if [ "$TASKDAEMON_TASK_ROLE" = qa ]; then echo "checks ran: VERIFICATION_PASS"; else echo "all done. TASK_COMPLETE"; fi
"#;

const FOUR_TASKS: &str = "# Tasks\n\n## Phase 1: Make it work\n\n- [ ] 1.1 Set up\n  - **Do**: create work/1.1.txt\n  - **Verify**: `test -f work/1.1.txt`\n\n- [ ] 1.2 [P] Part A\n  - **Do**: create work/1.2.txt\n  - **Verify**: `test -f work/1.2.txt`\n\n- [ ] 1.3 [P] Part B\n  - **Do**: create work/1.3.txt\n  - **Verify**: `test -f work/1.3.txt`\n\n- [ ] 1.4 [VERIFY] Checkpoint\n  - **Do**: check parts A and B\n  - **Verify**: `test -f work/1.2.txt && test -f work/1.3.txt`\n";

#[test]
fn submit_spec_of_a_tasks_md_directory_completes_under_the_daemon_and_merges() {
    let env = Env::new();
    let repo = env.repo();
    let spec = repo.join("specs/demo");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(spec.join("tasks.md"), FOUR_TASKS).unwrap();
    std::fs::write(
        spec.join("requirements.md"),
        "# Requirements\n\nFR-1: files exist.\n",
    )
    .unwrap();
    std::fs::write(spec.join("design.md"), "# Design\n\nOne file per task.\n").unwrap();
    harness::git(&repo, &["add", "-A"]);
    harness::git(&repo, &["commit", "-qm", "spec"]);
    // Nothing checked out: the result goes straight into main.
    harness::git(&repo, &["checkout", "-q", "--detach"]);
    let (s, calls) = Setup::with_agent(env, "worklist-agent.sh", WORKLIST_AGENT);
    s.ok(&["daemon", "start", "--tick", "0.2", "--target", "main"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let out = s.ok(&["submit", "spec", "specs/demo", "--target", "main", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let id = v["created"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(v["created"][0]["loop_type"], "implement", "{v}");
    let seen = read_until(&mut sub, &s, |e| {
        matches!(e, DaemonEvent::Merged { subject, .. } if subject.run == id)
            || matches!(e, DaemonEvent::Failed { subject, .. } if subject.run == id)
    });
    assert!(
        matches!(seen.last(), Some(DaemonEvent::Merged { .. })),
        "{seen:#?}\nlog:\n{}",
        s.log()
    );
    let st: Value = serde_json::from_str(&s.ok(&["status", "--json"])).unwrap();
    let run = st["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap();
    assert_eq!(run["status"], "complete", "{st}");
    // The engine's iteration reports, as for any run: 1.1, the group 1.2+1.3, 1.4.
    assert_eq!(run["iteration"], 3, "{st}");
    let finished: Vec<(u32, String)> = seen
        .iter()
        .filter_map(|e| match e {
            DaemonEvent::IterationFinished {
                subject,
                iteration,
                outcome,
                ..
            } if subject.run == id => Some((*iteration, outcome.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [
            (1, "continue".to_string()),
            (2, "continue".to_string()),
            (3, "complete".to_string())
        ],
        "{seen:#?}"
    );
    assert!(
        seen.iter().any(|e| matches!(e, DaemonEvent::Note { message, .. } if message.contains("task 1.2: verified complete"))),
        "the tasks are told: {seen:#?}"
    );
    // Every task's work and every box is in main.
    for t in ["1.1", "1.2", "1.3", "1.4"] {
        assert_eq!(
            harness::git(&repo, &["show", &format!("main:work/{t}.txt")]).trim(),
            t
        );
    }
    let tasks = harness::git(&repo, &["show", "main:specs/demo/tasks.md"]);
    assert_eq!(tasks.matches("- [x]").count(), 4, "{tasks}");
    let called = std::fs::read_to_string(&calls).unwrap();
    for t in ["1.1", "1.2", "1.3", "1.4"] {
        assert!(called.lines().any(|l| l == t), "{t} never ran: {called}");
    }
    s.ok(&["daemon", "stop"]);
}

#[test]
fn cancel_stops_a_foreground_run_from_another_terminal() {
    let go = Env::new();
    let never = go.root().join("never");
    let s = Setup::new(&[("WAIT_FOR", never.display().to_string())]);
    let agent = s.vars[0].1.clone();
    let mut c = s.env.cmd();
    for (k, v) in &s.vars {
        c.env(k, v);
    }
    let mut run = c
        .args([
            "run",
            "wait forever",
            "--agent",
            &agent,
            "--kill-grace",
            "1s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = s.env.repo().join(".ralph/run.lock");
    // Its lock holds its pid once the loop runs.
    let t = std::time::Instant::now();
    let state = s.env.repo().join(".ralph/run.json");
    while std::fs::read_to_string(&lock).unwrap_or_default().trim() != run.id().to_string()
        || !state.exists()
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the run never took its lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.run(&["cancel", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["stopped_pid"], run.id() as i64, "{v}");
    let status = harness::wait_timeout(&mut run, Duration::from_secs(60));
    assert!(!status.success(), "{status:?}");
    // Nothing holds the lock any more, and `logs` knows the local run.
    let r = s.run(&["cancel", "--json"]);
    assert_ne!(r.code, 0, "a second cancel found a loop: {}", r.stdout);
    let logs = s.ok(&["logs", "--json"]);
    assert!(
        logs.lines()
            .last()
            .is_some_and(|l| l.contains("\"status\"")),
        "{logs}"
    );
}

/// A stories agent: makes the story's file, commits it, sets the story passing, says
/// COMPLETE (review skipped).
const STORIES_AGENT: &str = r#"#!/bin/sh
cat > /dev/null
echo "$TASKDAEMON_STORY_ID" >> "$TD_CALLS"
echo hi > "story-$TASKDAEMON_STORY_ID.txt" && git add -A && git commit -qm "story $TASKDAEMON_STORY_ID"
sed -i 's/"passes": *false/"passes": true/' "$TASKDAEMON_STORIES_FILE"
echo "done <promise>COMPLETE</promise>"
"#;

#[test]
fn submit_stories_runs_a_stories_file_under_the_daemon_and_merges() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(
        repo.join("prd.json"),
        r#"{"userStories":[{"id":"US-1","title":"Greet","priority":1,"passes":false}]}"#,
    )
    .unwrap();
    harness::git(&repo, &["add", "-A"]);
    harness::git(&repo, &["commit", "-qm", "stories"]);
    harness::git(&repo, &["checkout", "-q", "--detach"]);
    let (s, _calls) = Setup::with_agent(env, "stories-agent.sh", STORIES_AGENT);
    // Refused with a hint when the file is not committed.
    std::fs::write(
        s.env.repo().join("loose.json"),
        r#"{"userStories":[{"id":"X"}]}"#,
    )
    .unwrap();
    let r = s.run(&["submit", "stories", "loose.json", "--target", "main"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("is not committed"), "{}", r.stderr);
    std::fs::remove_file(s.env.repo().join("loose.json")).unwrap();

    s.ok(&["daemon", "start", "--tick", "0.2", "--target", "main"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let out = s.ok(&[
        "submit",
        "stories",
        "prd.json",
        "--skip-review",
        "--target",
        "main",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let id = v["created"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(v["created"][0]["loop_type"], "stories", "{v}");
    let seen = read_until(&mut sub, &s, |e| {
        matches!(e, DaemonEvent::Merged { subject, .. } if subject.run == id)
            || matches!(e, DaemonEvent::Failed { subject, .. } if subject.run == id)
    });
    assert!(
        matches!(seen.last(), Some(DaemonEvent::Merged { .. })),
        "{seen:#?}\nlog:\n{}",
        s.log()
    );
    assert!(seen.iter().any(|e| matches!(
        e,
        DaemonEvent::IterationFinished { subject, outcome, .. } if subject.run == id && outcome == "complete"
    )));
    let prd = harness::git(&s.env.repo(), &["show", "main:prd.json"]);
    assert!(
        prd.contains("\"passes\": true") || prd.contains("\"passes\":true"),
        "{prd}"
    );
    assert_eq!(
        harness::git(&s.env.repo(), &["show", "main:story-US-1.txt"]).trim(),
        "hi"
    );
    s.ok(&["daemon", "stop"]);
}

#[test]
fn a_usage_limit_in_one_daemon_implement_run_pauses_the_other_on_the_same_account() {
    let env = Env::new();
    let repo = env.repo();
    for name in ["a", "b"] {
        let spec = repo.join("specs").join(name);
        std::fs::create_dir_all(&spec).unwrap();
        std::fs::write(
            spec.join("tasks.md"),
            format!("- [ ] 1.1 First of {name}\n- [ ] 1.2 Second of {name}\n"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(repo.join(".taskdaemon")).unwrap();
    std::fs::write(
        repo.join(".taskdaemon/config.yaml"),
        "agent-format: claude-stream-json\n",
    )
    .unwrap();
    harness::git(&repo, &["add", "-A"]);
    harness::git(&repo, &["commit", "-qm", "specs"]);
    harness::git(&repo, &["checkout", "-q", "--detach"]);
    let root = s_root(&env);
    // Spec a: its first call hits the limit (reset 6 s ahead). Spec b: its first call
    // takes 2 s, so its next iteration starts while a waits.
    let script = format!(
        r#"#!/bin/sh
cat > /dev/null
id="$TASKDAEMON_TASK_ID"
case "$TASKDAEMON_SPEC_DIR" in */specs/a) who=a;; *) who=b;; esac
n=$(cat "{root}/calls-$who" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{root}/calls-$who"
if [ $who = a ] && [ $n -eq 1 ]; then
{limit}
fi
if [ $who = b ] && [ $n -eq 1 ]; then sleep 2; fi
mkdir -p work && echo "$id" > "work/$who-$id.txt" && git add work && git commit -qm "task $who $id" >/dev/null
sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $who $id" >/dev/null
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done. TASK_COMPLETE"}}'
"#,
        limit = harness::usage_limit_in(6)
    );
    let agent = env.root().join("limited-agent.sh");
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = Setup {
        env,
        vars: vec![(
            "TASKDAEMON_AGENT".into(),
            format!("cmd:{}", agent.display()),
        )],
    };
    s.ok(&[
        "daemon",
        "start",
        "--tick",
        "0.2",
        "--target",
        "main",
        "--max-loops",
        "2",
    ]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let out = s.ok(&[
            "submit",
            "spec",
            &format!("specs/{name}"),
            "--target",
            "main",
            "--json",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        ids.push(v["created"][0]["id"].as_str().unwrap().to_string());
    }
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let governed = |e: &DaemonEvent| {
        matches!(e, DaemonEvent::Waiting { subject, message, .. }
            if subject.run == b && message.contains("paused by the quota governor"))
    };
    let mut seen = read_until(&mut sub, &s, |e| {
        governed(e) || matches!(e, DaemonEvent::Failed { .. } | DaemonEvent::Merged { .. })
    });
    assert!(
        seen.last().is_some_and(governed),
        "b pauses at its next boundary: {seen:#?}\nlog:\n{}",
        s.log()
    );
    // status says so while it lasts.
    let st: Value = serde_json::from_str(&s.ok(&["status", "--json"])).unwrap();
    assert!(
        st["daemon"]["quota_governor"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{st}"
    );
    let merged = std::cell::Cell::new(0);
    seen.extend(read_until(&mut sub, &s, |e| {
        if matches!(e, DaemonEvent::Merged { .. }) {
            merged.set(merged.get() + 1);
        }
        matches!(e, DaemonEvent::Failed { .. }) || merged.get() == 2
    }));
    assert!(
        !seen.iter().any(|e| matches!(e, DaemonEvent::Failed { .. })),
        "{seen:#?}\nlog:\n{}",
        s.log()
    );
    assert!(
        seen.iter().any(
            |e| matches!(e, DaemonEvent::Waiting { subject, message, .. }
            if subject.run == a && message.contains("usage limit"))
        ),
        "a waits for its reset: {seen:#?}"
    );
    for who in ["a", "b"] {
        for t in ["1.1", "1.2"] {
            assert_eq!(
                harness::git(
                    &s.env.repo(),
                    &["show", &format!("main:work/{who}-{t}.txt")]
                )
                .trim(),
                t
            );
        }
    }
    s.ok(&["daemon", "stop"]);
}

fn s_root(env: &Env) -> String {
    env.root().display().to_string()
}

#[test]
fn a_daemon_implement_run_is_seen_while_it_runs_as_any_run_is() {
    let env = Env::new();
    let repo = env.repo();
    let spec = repo.join("specs/demo");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(
        spec.join("tasks.md"),
        "- [ ] 1.1 Set up the thing\n- [ ] 1.2 Finish the thing\n",
    )
    .unwrap();
    harness::git(&repo, &["add", "-A"]);
    harness::git(&repo, &["commit", "-qm", "spec"]);
    harness::git(&repo, &["checkout", "-q", "--detach"]);
    let go = env.root().join("go");
    // Task 1.2 waits for `go`, so the run is seen in its second iteration.
    let script = WORKLIST_AGENT.replacen(
        "cat > /dev/null\n",
        &format!(
            "cat > /dev/null\nif [ \"$id\" = 1.2 ]; then echo 'working on 1.2'; while [ ! -e '{}' ]; do sleep 0.05; done; fi\n",
            go.display()
        ),
        1,
    );
    let (s, _calls) = Setup::with_agent(env, "worklist-agent.sh", &script);
    s.ok(&["daemon", "start", "--tick", "0.2", "--target", "main"]);
    let mut sub = ipc::subscribe(&s.socket()).unwrap();
    let out = s.ok(&["submit", "spec", "specs/demo", "--target", "main", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let id = v["created"][0]["id"].as_str().unwrap().to_string();
    read_until(
        &mut sub,
        &s,
        |e| matches!(e, DaemonEvent::IterationStarted { subject, iteration: 2, .. } if subject.run == id),
    );
    // status: its iteration and the last one's outcome.
    let st: Value = serde_json::from_str(&s.ok(&["status", "--json"])).unwrap();
    let run = st["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{st}"));
    assert_eq!(run["status"], "running", "{st}");
    assert_eq!(run["iteration"], 2, "{st}");
    assert_eq!(run["last_outcome"], "continue", "{st}");
    let human = s.ok(&["status"]);
    assert!(human.contains("iteration 2 (last: continue)"), "{human}");
    // watch: its tasks and its iteration.
    let w = s.ok(&["watch", "--once"]);
    assert!(
        w.contains("1.1 Set up the thing") && w.contains("1.2 Finish the thing"),
        "{w}"
    );
    // logs --follow streams the iteration running, to the run's end.
    let mut c = s.env.cmd();
    for (k, v) in &s.vars {
        c.env(k, v);
    }
    let follower = c
        .args(["logs", &id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&go, "").unwrap();
    let out = follower.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("working on 1.2"),
        "{stdout}\nlog:\n{}",
        s.log()
    );
    assert!(
        stdout.contains(&format!("-- run {id} is complete --")),
        "{stdout}"
    );
    s.ok(&["daemon", "stop"]);
}

/// A subscription on the daemon's socket, its snapshot read (the daemon streams to it).
fn subscribed(socket: &std::path::Path) -> std::io::BufReader<std::os::unix::net::UnixStream> {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.write_all(b"{\"op\":\"subscribe\"}\n").unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains("\"snapshot\""), "{line}");
    r
}

fn open_fds(pid: i64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// 50 subscribers that close their end are dropped while nothing happens: the daemon's
/// descriptors come back to what they were, and no event was broadcast meanwhile (a
/// subscriber kept open saw none). One that shut only its sending side still gets events.
#[test]
fn subscribers_that_go_are_dropped_without_waiting_for_an_event() {
    let s = Setup::new(&[]);
    s.ok(&["daemon", "start", "--tick", "0.2"]);
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(s.env.repo().join(".git/taskdaemon/daemon/info.json")).unwrap(),
    )
    .unwrap();
    let pid = info["pid"].as_i64().unwrap();
    let socket = s.socket();
    let witness = subscribed(&socket);
    let half = subscribed(&socket);
    half.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
    let baseline = open_fds(pid);
    let subs: Vec<_> = (0..50).map(|_| subscribed(&socket)).collect();
    let held = open_fds(pid);
    assert!(
        held >= baseline + 50,
        "{baseline} then {held} with 50 subscribers"
    );
    drop(subs);
    // A failure guard only: the descriptors go as soon as the daemon notices.
    let start = std::time::Instant::now();
    let mut now = open_fds(pid);
    while now > baseline && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
        now = open_fds(pid);
    }
    assert!(
        now <= baseline,
        "{held} descriptors with 50 subscribers, {now} after they closed (baseline {baseline})\nlog:\n{}",
        s.log()
    );
    eprintln!(
        "50 closed subscribers dropped in {:?} ({held} -> {now} descriptors)",
        start.elapsed()
    );
    let quiet = witness.get_ref();
    quiet.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let got = std::io::Read::read(&mut &*quiet, &mut buf);
    assert!(
        matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no event was broadcast meanwhile: {got:?} {:?}",
        String::from_utf8_lossy(&buf)
    );
    // The half-closed subscriber is still there: it gets the stop.
    s.ok(&["daemon", "stop"]);
    let rest: Vec<String> = std::io::BufRead::lines(half)
        .map_while(Result::ok)
        .collect();
    assert!(
        rest.iter().any(|l| l.contains("daemon_stopped")),
        "{rest:?}"
    );
}
