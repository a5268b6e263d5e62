//! Daemons on several machines (issue 19): two real `taskdaemon daemon start` processes,
//! each in its own clone of one bare remote, sharing one real PostgreSQL server (started by
//! `pg.rs`). The agent is a small shell program that plays each loop type and says
//! in which clone it ran.

use crate::harness;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Env, git, pid_alive};
use serde_json::Value;

/// Plan: writes the plan. Spec: the documents of `specs.txt` (`name|deps|phases`).
/// Phase: one commit per iteration, done (its validation passes) at iteration `$DONE_AT`
/// (default 1); each start and end logged with the clone it ran in (`$PWD`).
const AGENT: &str = r#"#!/bin/sh
log="$TD_TEST_DIR/agent.log"
case "$TASKDAEMON_LOOP" in
plan)
  printf '# Widgets\n\n## Goals\nwidgets, pass %s\n\n## Approach\nspecs\n' "$TASKDAEMON_REVIEW_PASS" > "$TASKDAEMON_PLAN_FILE"
  ;;
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  n=0
  while IFS='|' read -r name deps phases; do
    n=$((n+1))
    printf -- '---\ntitle: %s\ndeps: [%s]\nphases: [%s]\nvalidate: test -f %s-$TASKDAEMON_PHASE_INDEX.done\n---\nBuild %s.\n' \
      "$name" "$deps" "$phases" "$name" "$name" > "$TASKDAEMON_SPECS_DIR/0$n-$name.md"
  done < "$TD_TEST_DIR/specs.txt"
  ;;
phase)
  spec=$(echo "$TASKDAEMON_SPEC_ID" | sed 's/^[0-9a-f]*-spec-//')
  echo "$$" >> "$TD_TEST_DIR/pids"
  echo "start $spec $TASKDAEMON_PHASE_INDEX $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID $PWD" >> "$log"
  sleep "${PHASE_SLEEP:-1}" &
  echo "$!" >> "$TD_TEST_DIR/pids"
  wait
  f="$spec-$TASKDAEMON_PHASE_INDEX.txt"
  echo "iteration $TASKDAEMON_ITERATION" >> "$f"
  if [ "$TASKDAEMON_ITERATION" -ge "${DONE_AT:-1}" ]; then echo done > "$spec-$TASKDAEMON_PHASE_INDEX.done"; fi
  git add -A && git commit -qm "$spec phase $TASKDAEMON_PHASE_NUMBER iteration $TASKDAEMON_ITERATION"
  echo "end $spec $TASKDAEMON_PHASE_INDEX $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID $PWD" >> "$log"
  echo "<promise>COMPLETE</promise>"
  ;;
ralph)
  echo "start ralph $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID $PWD" >> "$log"
  sleep "${RALPH_SLEEP:-0}" &
  echo "$!" >> "$TD_TEST_DIR/pids"
  wait
  echo "$TASKDAEMON_RUN_ID iteration $TASKDAEMON_ITERATION" >> "ralph-$TASKDAEMON_RUN_ID.txt"
  git add -A && git commit -qm "ralph $TASKDAEMON_RUN_ID iteration $TASKDAEMON_ITERATION"
  echo "end ralph $TASKDAEMON_ITERATION $TASKDAEMON_RUN_ID $PWD" >> "$log"
  if [ "$TASKDAEMON_ITERATION" -ge "${RALPH_DONE_AT:-1}" ]; then echo "<promise>COMPLETE</promise>"; fi
  ;;
esac
"#;

/// Two clones of one bare remote, one queue, one agent.
struct Machines {
    env: Env,
    a: PathBuf,
    b: PathBuf,
    bare: PathBuf,
    vars: Vec<(String, String)>,
}

impl Machines {
    /// `None` (after a loud message) when PostgreSQL is not installed outside CI.
    fn new(specs: &str, vars: &[(&str, &str)]) -> Option<Machines> {
        let url = crate::pg::database()?.url();
        Some(Machines::on(url, specs, vars))
    }

    /// The two clones on the queue at `url`.
    fn on(url: String, specs: &str, vars: &[(&str, &str)]) -> Machines {
        let env = Env::new();
        let root = env.root().to_path_buf();
        let a = env.repo();
        let bare = root.join("remote.git");
        git(&root, &["clone", "-q", "--bare", "repo", "remote.git"]);
        git(
            &a,
            &["remote", "add", "origin", &bare.display().to_string()],
        );
        git(&a, &["fetch", "-q", "origin"]);
        git(&root, &["clone", "-q", "remote.git", "b"]);
        let b = root.join("b");
        let agent = root.join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(root.join("specs.txt"), specs).unwrap();
        let mut v: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.push(("TD_TEST_DIR".into(), root.display().to_string()));
        v.push(("TASKDAEMON_QUEUE".into(), url));
        v.push((
            "TASKDAEMON_AGENT".into(),
            format!("cmd:{}", agent.display()),
        ));
        Machines {
            env,
            a,
            b,
            bare,
            vars: v,
        }
    }

    fn run(&self, clone: &Path, args: &[&str]) -> harness::Run {
        let mut c = self.env.cmd();
        c.current_dir(clone)
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        let out = c.args(args).output().unwrap();
        harness::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ok(&self, clone: &Path, args: &[&str]) -> String {
        let r = self.run(clone, args);
        assert_eq!(
            r.code,
            0,
            "{args:?} in {}\nstdout: {}\nstderr: {}",
            clone.display(),
            r.stdout,
            r.stderr
        );
        r.stdout
    }

    fn start(&self, clone: &Path) {
        self.ok(
            clone,
            &["daemon", "start", "--max-loops", "1", "--tick", "0.3"],
        );
    }

    fn stop(&self, clone: &Path) {
        let _ = self.run(clone, &["daemon", "stop"]);
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&self.a, &["status", "--json"])).unwrap()
    }

    fn daemon_dir(clone: &Path) -> PathBuf {
        clone.join(".git/taskdaemon/daemon")
    }

    fn pid(clone: &Path) -> i32 {
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(Self::daemon_dir(clone).join("info.json")).unwrap(),
        )
        .unwrap();
        info["pid"].as_i64().unwrap() as i32
    }

    /// Wait (2 minutes at most) until the agent's log has a line starting with `prefix`.
    fn wait_for_agent(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.agent_log().lines().any(|l| l.starts_with(prefix)) {
            assert!(
                Instant::now() < deadline,
                "no agent line `{prefix}`\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        let read = |c: &Path| {
            std::fs::read_to_string(Self::daemon_dir(c).join("daemon.log")).unwrap_or_default()
        };
        format!("--- A:\n{}\n--- B:\n{}", read(&self.a), read(&self.b))
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(self.env.root().join("agent.log")).unwrap_or_default()
    }

    /// Wait until `done(status)`, or fail with the status and both daemons' logs.
    fn wait_until(&self, limit: Duration, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        harness::wait_for_status(
            limit,
            what,
            || self.status(),
            || format!("{}\nagent log:\n{}", self.logs(), self.agent_log()),
            done,
        )
    }

    /// The files of the remote's `main`.
    fn remote_files(&self) -> String {
        git(&self.bare, &["ls-tree", "-r", "--name-only", "main"])
    }

    /// Commit subjects on the remote's `main`.
    fn remote_subjects(&self) -> Vec<String> {
        git(&self.bare, &["log", "--format=%s", "main"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn plan_status(s: &Value) -> &str {
    s["plans"][0]["status"].as_str().unwrap_or("")
}

/// (clone "a" or "b", spec, phase index, iteration) of each phase iteration that ended.
fn ended(m: &Machines) -> Vec<(String, String, String, u32)> {
    let b = m.b.display().to_string();
    m.agent_log()
        .lines()
        .filter(|l| l.starts_with("end "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let clone = if f[5].starts_with(&b) { "b" } else { "a" };
            (
                clone.to_string(),
                f[1].to_string(),
                f[2].to_string(),
                f[3].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn two_daemons_on_two_clones_build_a_plan_together_and_merge_every_spec_once() {
    let Some(m) = Machines::new(
        "alpha||\"Phase 1: schema\", \"Phase 2: queries\"\n\
         beta||\"Phase 1: api\", \"Phase 2: client\"\n\
         gamma||\"Phase 1: ui\", \"Phase 2: docs\"\n",
        &[("PHASE_SLEEP", "1")],
    ) else {
        return;
    };
    m.ok(
        &m.a,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    m.start(&m.a);
    m.start(&m.b);
    let s = m.wait_until(Duration::from_secs(300), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    m.stop(&m.a);
    m.stop(&m.b);

    let specs = s["plans"][0]["specs"].as_array().unwrap();
    assert_eq!(specs.len(), 3, "{s:#}");
    for sp in specs {
        assert_eq!(sp["status"], "complete", "{sp:#}");
        let runs = sp["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "one run per phase, never two: {sp:#}");
        for r in runs {
            assert_eq!(r["status"], "complete", "{r:#}");
        }
    }
    // Phases ran on both machines (each daemon runs one loop at a time, three specs were
    // ready together).
    let ends = ended(&m);
    assert_eq!(ends.len(), 6, "six phase iterations:\n{}", m.agent_log());
    assert!(
        ends.iter().any(|e| e.0 == "a") && ends.iter().any(|e| e.0 == "b"),
        "every phase ran on one machine:\n{}",
        m.agent_log()
    );
    // The remote's main holds all the work, each phase's commit once.
    let files = m.remote_files();
    for spec in ["alpha", "beta", "gamma"] {
        for phase in ["0", "1"] {
            let f = format!("{spec}-{phase}.txt");
            assert!(
                files.lines().any(|l| l == f),
                "{f} not on the remote:\n{files}"
            );
        }
    }
    let subjects = m.remote_subjects();
    for spec in ["alpha", "beta", "gamma"] {
        for phase in ["1", "2"] {
            let want = format!("{spec} phase {phase} of 2 iteration 1");
            let n = subjects.iter().filter(|s| **s == want).count();
            assert_eq!(n, 1, "{want}: {n} times on main:\n{subjects:#?}");
        }
    }
    // Every spec merged exactly once (by one of the daemons).
    let logs = m.logs();
    for sp in specs {
        let id = sp["id"].as_str().unwrap();
        let merged = logs
            .lines()
            .filter(|l| l.contains("merged ") && l.contains(&format!("({id})")))
            .count();
        assert_eq!(merged, 1, "spec {id} merged {merged} times:\n{logs}");
    }
    // A run that ran on A has its logs read on B from the queue (B has no files of it).
    let b = m.b.display().to_string();
    let log = m.agent_log();
    let on_a = log
        .lines()
        .filter(|l| l.starts_with("end "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| !f[5].starts_with(&b))
        .map(|f| f[4].to_string())
        .expect("a phase ended on A");
    let out = m.ok(&m.b, &["logs", &on_a]);
    assert!(out.contains("(from the queue)"), "{out}");
    assert!(out.contains("<promise>COMPLETE</promise>"), "{out}");
}

#[test]
fn a_daemon_killed_mid_phase_is_taken_over_from_its_pushed_branch_and_nothing_is_lost() {
    let Some(m) = Machines::new(
        "alpha||\"Phase 1: schema\", \"Phase 2: queries\"\n\
         beta||\"Phase 1: api\", \"Phase 2: client\"\n",
        &[
            ("PHASE_SLEEP", "1"),
            ("DONE_AT", "4"),
            ("TASKDAEMON_QUEUE_LEASE", "3s"),
        ],
    ) else {
        return;
    };
    m.ok(
        &m.a,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    m.start(&m.a);
    m.start(&m.b);
    // A phase run on A past its second iteration.
    let a = m.a.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    let run_id = loop {
        let log = m.agent_log();
        let hit = log.lines().filter(|l| l.starts_with("end ")).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[5].starts_with(&a) && f[3].parse::<u32>().unwrap_or(0) >= 2)
                .then(|| f[4].to_string())
        });
        if let Some(h) = hit {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "no phase reached iteration 2 on A\n{}\n{log}",
            m.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // It is held by A's daemon.
    let pid_a = Machines::pid(&m.a);
    let held = m.ok(&m.b, &["status"]);
    assert!(
        held.contains("held by ") && held.contains(&format!(":{pid_a}")),
        "{held}"
    );
    let spec_id = spec_worktree(&m, &run_id);
    let branch = format!("refs/heads/taskdaemon/{spec_id}");
    harness::sigkill(pid_a);
    // What A had pushed when it died.
    let pushed = git(&m.bare, &["rev-parse", &branch]).trim().to_string();

    let s = m.wait_until(Duration::from_secs(300), "the plan completing on B", |s| {
        plan_status(s) == "complete"
    });
    let logs = m.logs();
    assert!(
        logs.contains(&format!("taking over run {run_id}")),
        "{logs}"
    );
    // B went on at the next iteration, never from 1.
    let b_iterations: Vec<u32> = m
        .agent_log()
        .lines()
        .filter(|l| l.starts_with("start ") && l.contains(&run_id))
        .filter(|l| l.contains(&m.b.display().to_string()))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect();
    assert!(
        !b_iterations.is_empty(),
        "B never ran {run_id}:\n{}",
        m.agent_log()
    );
    assert!(
        b_iterations.iter().all(|i| *i >= 2),
        "B restarted {run_id} at iteration 1: {b_iterations:?}\n{}",
        m.agent_log()
    );
    // No commit lost: what A pushed is in the remote's main.
    git(&m.bare, &["merge-base", "--is-ancestor", &pushed, "main"]);
    let files = m.remote_files();
    for f in ["alpha-0.txt", "alpha-1.txt", "beta-0.txt", "beta-1.txt"] {
        assert!(
            files.lines().any(|l| l == f),
            "{f} not on the remote:\n{files}"
        );
    }
    for sp in s["plans"][0]["specs"].as_array().unwrap() {
        assert_eq!(sp["status"], "complete", "{sp:#}");
    }
    // Issue 42: `logs` of the taken-over run prints the same iterations on both machines
    // (the queue's set), each once.
    let iterations = |clone: &Path| -> Vec<String> {
        m.ok(clone, &["logs", &run_id])
            .lines()
            .filter(|l| l.starts_with("==> run "))
            .map(str::to_string)
            .collect()
    };
    let (on_a, on_b) = (iterations(&m.a), iterations(&m.b));
    assert_eq!(on_a, on_b, "logs of {run_id} differ between the machines");
    let numbers: Vec<&str> = on_a
        .iter()
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    assert!(
        numbers.len() >= 2 && numbers.windows(2).all(|w| w[0] < w[1]),
        "{on_a:?}"
    );
    // A's agent died with it (parent-death signal): nothing of A runs once the sleeps end;
    // A restarts clean: whatever its records name is ended, nothing is left running, and
    // its worktree of the spec B finished is gone (what only it held kept first).
    let stale = m.a.join(".taskdaemon/worktrees").join(&spec_id);
    assert!(
        stale.exists(),
        "A's worktree of {spec_id} was not there to go stale"
    );
    m.start(&m.a);
    m.stop(&m.a);
    m.stop(&m.b);
    assert!(
        !stale.exists(),
        "A kept its stale worktree {}\n{}",
        stale.display(),
        m.logs()
    );
    assert!(m.logs().contains("stale worktree"), "{}", m.logs());
    std::thread::sleep(Duration::from_millis(1500));
    let left: Vec<i32> = std::fs::read_to_string(m.env.root().join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|p| pid_alive(*p))
        .collect();
    assert!(left.is_empty(), "orphans: {left:?}\n{}", m.logs());
}

/// The worktree (the spec) a phase run works in: its spec id from the status.
fn spec_worktree(m: &Machines, run_id: &str) -> String {
    let s = m.status();
    for sp in s["plans"][0]["specs"].as_array().unwrap() {
        if sp["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == run_id)
        {
            return sp["id"].as_str().unwrap().to_string();
        }
    }
    panic!("run {run_id} has no spec: {s:#}")
}

#[test]
fn a_remote_that_holds_a_push_does_not_hold_the_daemon() {
    // The remote takes no push until `release` exists. The run's iterations go on and are
    // recorded meanwhile: the push after an iteration runs beside the daemon's loop (which
    // also renews the leases), not in it.
    let Some(m) = Machines::new("", &[]) else {
        return;
    };
    let root = m.env.root().to_path_buf();
    let hook = m.bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ntouch {held}\nwhile [ ! -f {release} ]; do sleep 0.1; done\ncat >/dev/null\n",
            held = root.join("held").display(),
            release = root.join("release").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let agent = root.join("ralph.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\necho \"$TASKDAEMON_ITERATION\" >> work.txt\ngit add -A && git commit -qm \"iteration $TASKDAEMON_ITERATION\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = m.ok(
        &m.a,
        &[
            "submit",
            "ralph",
            "count",
            "--validate",
            "false",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let run = v["created"][0]["id"].as_str().unwrap().to_string();
    m.start(&m.a);
    let iteration = || -> u64 {
        let out = m.ok(&m.a, &["show", &run, "--json"]);
        serde_json::from_str::<Value>(&out).unwrap()["iteration"]
            .as_u64()
            .unwrap_or(0)
    };
    let t = Instant::now();
    while !(root.join("held").exists() && iteration() >= 4) {
        if t.elapsed() > Duration::from_secs(60) {
            // Let the held push (and the daemon) go before failing.
            std::fs::write(root.join("release"), "").unwrap();
            m.stop(&m.a);
            panic!(
                "held: {}, iteration {}\n{}",
                root.join("held").exists(),
                iteration(),
                m.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its last iteration done (the iteration limit, 20), its end waits for the held push:
    // the daemon still answers meanwhile.
    let branch = format!("refs/heads/taskdaemon/{run}");
    let t = Instant::now();
    while git(&m.a, &["log", "-1", "--format=%s", &branch]).trim() != "iteration 20" {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", m.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut ask = m.env.cmd();
    ask.current_dir(&m.a)
        .envs(m.vars.iter().map(|(k, v)| (k, v)))
        .args(["daemon", "status"])
        .stdout(std::process::Stdio::piped());
    let mut ask = ask.spawn().unwrap();
    let t = Instant::now();
    while ask.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let answered = ask.try_wait().unwrap().is_some_and(|s| s.success());
    let _ = ask.kill();
    let mut said = String::new();
    if let Some(mut out) = ask.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut said);
    }
    let _ = ask.wait();
    assert!(!root.join("release").exists());
    std::fs::write(root.join("release"), "").unwrap();
    assert!(answered && said.contains(&run), "{said}\n{}", m.logs());
    let t = Instant::now();
    let status = loop {
        let out = m.ok(&m.a, &["show", &run, "--json"]);
        let s = serde_json::from_str::<Value>(&out).unwrap()["status"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if s != "running" && s != "pending" {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{}", m.logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    m.stop(&m.a);
    // Its last commit reached the remote before its end (here: its iteration limit) was
    // recorded.
    assert_eq!(
        git(&m.bare, &["rev-parse", &branch]),
        git(&m.a, &["rev-parse", &branch]),
        "{status}\n{}",
        m.logs()
    );
}

/// Issue 42: a queue daemon killed with SIGKILL while a phase's agent works leaves no agent
/// process 1 s later, and the agent never finishes its iteration (no `end` in its log).
#[test]
fn a_sigkilled_queue_daemon_leaves_no_agent_working() {
    let Some(m) = Machines::new("alpha||\"Phase 1: schema\"\n", &[("PHASE_SLEEP", "4")]) else {
        return;
    };
    m.ok(
        &m.a,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    m.start(&m.a);
    let pids_file = m.env.root().join("pids");
    let deadline = Instant::now() + Duration::from_secs(120);
    let pids: Vec<i32> = loop {
        let text = std::fs::read_to_string(&pids_file).unwrap_or_default();
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= 2 {
            break pids;
        }
        assert!(
            Instant::now() < deadline,
            "no phase agent started\n{}",
            m.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(pids.iter().all(|p| pid_alive(*p)), "the agent works");
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(Machines::pid(&m.a)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    while pids.iter().any(|p| pid_alive(*p)) && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<i32> = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
    assert!(
        alive.is_empty(),
        "agent processes {alive:?} outlived their daemon by 1 s"
    );
    std::thread::sleep(Duration::from_secs(5).saturating_sub(killed.elapsed()));
    let log = m.agent_log();
    assert!(
        !log.contains("\nend ") && !log.starts_with("end "),
        "the agent worked on for a dead daemon:\n{log}"
    );
}

/// The zombie children of `pid` (state `Z` in `/proc/*/stat`, parent `pid`).
fn zombies_of(pid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((name, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&pid.to_string().as_str()) {
            found.push(format!("{}){}", name, fields[..2].join(" ")));
        }
    }
    found
}

/// Issue 42: a queue daemon reaps every child it starts. 50 ralph runs from one queue
/// daemon, each merged: not one zombie is left among its children (there was one `git`
/// per run).
#[test]
fn fifty_queue_runs_leave_no_zombie_behind() {
    let Some(m) = Machines::new("", &[]) else {
        return;
    };
    const RUNS: usize = 50;
    for i in 0..RUNS {
        m.ok(
            &m.a,
            &[
                "submit",
                "ralph",
                &format!("task {i}"),
                "--target",
                "main",
                "--validate",
                "true",
                "-q",
            ],
        );
    }
    m.ok(
        &m.a,
        &["daemon", "start", "--max-loops", "4", "--tick", "0.3"],
    );
    let pid = Machines::pid(&m.a);
    m.wait_until(Duration::from_secs(600), "every run merged", |s| {
        let runs = s["runs"].as_array().cloned().unwrap_or_default();
        runs.len() == RUNS && runs.iter().all(|r| r["status"] == "complete")
    });
    // The last run's clean-up (its worktree, its branch) ends a moment after its status.
    std::thread::sleep(Duration::from_secs(2));
    let zombies = zombies_of(pid);
    m.stop(&m.a);
    assert!(
        zombies.is_empty(),
        "{} zombies under the daemon after {RUNS} runs: {zombies:?}",
        zombies.len()
    );
}

/// Issue 42: a queue daemon restarted after a SIGKILL goes on with its dead predecessor's
/// runs at once: their leases (5 minutes here) are released at its start, not waited out.
#[test]
fn a_restarted_queue_daemon_takes_its_dead_predecessors_runs_without_waiting_out_the_lease() {
    let Some(m) = Machines::new(
        "alpha||\"Phase 1: schema\"\n",
        &[
            ("PHASE_SLEEP", "1"),
            ("DONE_AT", "3"),
            ("TASKDAEMON_QUEUE_LEASE", "5m"),
        ],
    ) else {
        return;
    };
    m.ok(
        &m.a,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    m.start(&m.a);
    m.wait_for_agent("end ");
    harness::sigkill(Machines::pid(&m.a));
    m.start(&m.a);
    // Far less than the 5-minute lease: the plan completes.
    m.wait_until(Duration::from_secs(90), "the plan completing", |s| {
        plan_status(s) == "complete"
    });
    m.stop(&m.a);
    let logs = m.logs();
    assert!(
        logs.contains("released 1 lease(s) of this clone's previous daemon"),
        "{logs}"
    );
}

/// Issue 42: while the queue is unreachable, `status` says so and exits 69, and shows who
/// held each run at the last good read, marked as such, instead of calling another
/// machine's live run "interrupted — the daemon stopped".
#[test]
fn status_during_a_queue_outage_says_so_and_keeps_the_holders_marked_stale() {
    let Some(server) = crate::pg::private_server() else {
        return;
    };
    let db = server.database();
    let m = Machines::on(
        db.url(),
        "alpha||\"Phase 1: schema\"\n",
        &[("PHASE_SLEEP", "30")],
    );
    m.ok(
        &m.a,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    m.start(&m.a);
    m.wait_for_agent("start ");
    // B's view while the queue answers: held by A's daemon.
    let pid_a = Machines::pid(&m.a);
    let good = m.run(&m.b, &["status"]);
    assert_eq!(good.code, 0, "{}", good.stderr);
    assert!(
        good.stdout.contains(&format!(":{pid_a}")),
        "{}",
        good.stdout
    );
    server.stop();
    // A's daemon answers from what it has; the queue's state is said, the holder kept.
    let r = m.run(&m.a, &["status"]);
    let all = format!("{}{}", r.stdout, r.stderr);
    server.start_again();
    m.stop(&m.a);
    assert_eq!(r.code, 69, "{all}");
    assert!(all.contains("queue: UNREACHABLE"), "{all}");
    assert!(all.contains("as of the last good read"), "{all}");
    assert!(
        all.contains(&format!(":{pid_a} (as of the last read of the queue)")),
        "{all}"
    );
    assert!(!all.contains("interrupted"), "{all}");
}

/// Issue 42: the queue's database stops twice while four 5-iteration runs go on two
/// machines: first for longer than a renewal interval and shorter than a lease (the runs
/// go on; what could not be written is kept and written when it answers), then for longer
/// than a lease (the runs stop before another machine could take them, and go on where they
/// were once it answers, on the machine that held them). Every iteration's commit reaches
/// the remote's `main` exactly once, every record and log is there, and no run is taken over.
#[test]
fn a_database_outage_shorter_and_longer_than_a_lease_loses_and_repeats_no_iteration() {
    let Some(server) = crate::pg::private_server() else {
        return;
    };
    let db = server.database();
    let m = Machines::on(
        db.url(),
        "",
        &[
            ("RALPH_SLEEP", "3"),
            ("RALPH_DONE_AT", "5"),
            ("TASKDAEMON_QUEUE_LEASE", "6s"),
        ],
    );
    for i in 0..4 {
        m.ok(
            &m.a,
            &[
                "submit",
                "ralph",
                &format!("task {i}"),
                "--target",
                "main",
                "-q",
            ],
        );
    }
    for clone in [&m.a, &m.b] {
        m.ok(
            clone,
            &["daemon", "start", "--max-loops", "2", "--tick", "0.3"],
        );
    }
    let ends = || {
        m.agent_log()
            .lines()
            .filter(|l| l.starts_with("end ralph"))
            .count()
    };
    let wait_for_ends = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while ends() < n {
            assert!(Instant::now() < deadline, "{}\n{}", m.logs(), m.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Mid-run: every run past its first iteration's start.
    wait_for_ends(2);
    // Longer than a renewal (2 s), shorter than the lease (6 s).
    server.stop();
    std::thread::sleep(Duration::from_millis(3500));
    server.start_again();
    wait_for_ends(ends() + 2);
    // Longer than the lease.
    server.stop();
    std::thread::sleep(Duration::from_secs(10));
    server.start_again();
    let s = m.wait_until(Duration::from_secs(240), "every run merged", |s| {
        let runs = s["runs"].as_array().cloned().unwrap_or_default();
        runs.len() == 4 && runs.iter().all(|r| r["status"] == "complete")
    });
    std::thread::sleep(Duration::from_secs(1));
    let logs = m.logs();
    m.stop(&m.a);
    m.stop(&m.b);
    assert!(!logs.contains("taking over run"), "{logs}");
    assert!(logs.contains("kept while it did not were made"), "{logs}");
    assert!(
        logs.contains("goes on here: the queue answers again"),
        "{logs}"
    );
    let subjects = m.remote_subjects();
    for run in s["runs"].as_array().unwrap() {
        let id = run["id"].as_str().unwrap();
        for k in 1..=5 {
            let subject = format!("ralph {id} iteration {k}");
            let n = subjects.iter().filter(|l| **l == subject).count();
            assert_eq!(
                n, 1,
                "`{subject}` {n} times on the remote's main\n{subjects:#?}\n{logs}"
            );
        }
        assert!(
            !subjects
                .iter()
                .any(|l| *l == format!("ralph {id} iteration 6")),
            "{subjects:#?}"
        );
        // Its record counted every iteration; the queue has each iteration's log once.
        let shown: Value = serde_json::from_str(&m.ok(&m.b, &["show", id, "--json"])).unwrap();
        let progress = shown["progress"].as_str().unwrap_or_default().to_string();
        for k in 1..=5 {
            assert!(
                progress.contains(&format!("iteration {k}:")),
                "{id}: {progress}\n{shown:#}"
            );
        }
        let printed: Vec<String> = m
            .ok(&m.b, &["logs", id])
            .lines()
            .filter(|l| l.starts_with("==> run "))
            .map(str::to_string)
            .collect();
        assert_eq!(printed.len(), 5, "{id}: {printed:?}");
    }
}
