//! The daemon's event stream as a subscriber sees it: a snapshot first, then typed events
//! of a run from its start to its merge, each naming the run, its title and the repository;
//! and the daemon's client commands (`logs --follow`, `status`, `daemon stop|status`) on it.
//! Real git, real processes; the agent is a small shell program.

#[allow(dead_code)]
mod harness;

use std::path::PathBuf;
use std::time::Duration;

use harness::Env;
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

    fn run(&self, args: &[&str]) -> harness::Run {
        let mut c = self.env.cmd();
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        let out = c.args(args).output().unwrap();
        harness::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert_eq!(
            r.code, 0,
            "{args:?}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r.stdout
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
    let started = read_until(&mut sub, &s, |e| e.name() == "iteration-started");
    std::fs::write(&go_file, "").unwrap();
    let rest = read_until(&mut sub, &s, |e| matches!(e, DaemonEvent::Merged { .. }));
    let all: Vec<&DaemonEvent> = started.iter().chain(&rest).collect();
    let names: Vec<String> = all.iter().map(|e| e.name()).collect();
    for want in [
        "run-started",
        "iteration-started",
        "agent-line",
        "gate-result",
        "iteration-finished",
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
    assert!(pos("run-started") < pos("iteration-started"));
    assert!(pos("iteration-finished") < pos("complete"));
    assert!(pos("complete") < pos("merged"));

    s.ok(&["daemon", "stop"]);
    let end = read_until(&mut sub, &s, |e| e.name() == "daemon-stopped");
    assert!(end.iter().any(|e| e.name() == "daemon-stopping"), "{end:?}");
    assert!(
        sub.next().is_none(),
        "the stream goes on after the daemon stopped"
    );
}
