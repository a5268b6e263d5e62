//! Crash safety of `run`: SIGKILLed again and again at random moments and resumed each
//! time, it leaves no process of its own running, lists no iteration twice and never goes
//! back; processes that leave the agent's session are ended with the iteration; floods of
//! output are capped in the log and in memory. Real processes; the agent is a shell script.

use crate::harness;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Env, csv_rows, git, pid_alive, wait_timeout};

/// The agent: records its pid and an escaped (setsid) sleeper's, works a little, commits.
const AGENT: &str = r#"#!/bin/sh
echo "$$ $TASKDAEMON_RUN_ID $TASKDAEMON_ITERATION" >> "$TD_TEST_DIR/starts"
setsid sh -c 'echo $$ >> "$TD_TEST_DIR/pids"; exec sleep 60' &
echo "$$" >> "$TD_TEST_DIR/pids"
sleep "${AGENT_SLEEP:-0.1}"
echo "iteration $TASKDAEMON_ITERATION" >> work.txt
git add work.txt && git commit -qm "iteration $TASKDAEMON_ITERATION"
echo "worked on iteration $TASKDAEMON_ITERATION"
"#;

fn setup(env: &Env) -> String {
    let agent = env.root().join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("cmd:{}", agent.display())
}

fn spawn(env: &Env, args: &[&str]) -> Child {
    env.cmd()
        .args(args)
        .env("TD_TEST_DIR", env.root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Live processes whose environment carries this test's directory, among `pids`.
fn ours_alive(env: &Env, pids: &[i32]) -> Vec<i32> {
    let mark = format!("TD_TEST_DIR={}", env.root().display());
    pids.iter()
        .copied()
        .filter(|p| {
            pid_alive(*p)
                && std::fs::read(format!("/proc/{p}/environ"))
                    .is_ok_and(|e| e.split(|b| *b == 0).any(|kv| kv == mark.as_bytes()))
        })
        .collect()
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn pids(env: &Env) -> Vec<i32> {
    lines(&env.root().join("pids"))
        .iter()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn fifty_sigkills_of_run_each_resumed_leave_no_process_no_repeated_row_and_never_go_back() {
    let env = Env::new();
    let agent = setup(&env);
    let starts = env.root().join("starts");
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.u64(..);
    let first = [
        "run",
        "count the iterations",
        "--agent",
        &agent,
        "--validate",
        "sleep 0.05; false",
        "--max-iterations",
        "1000",
        "--max-stuck",
        "0",
        "--kill-grace",
        "1s",
    ];
    let mut ended_messages = 0;
    for kill in 0..50 {
        let before = lines(&starts).len();
        // Everything the killed runs' agents started (each killed run's direct agent died
        // with it; what it setsid'ed is the resumed run's to end).
        let old = pids(&env);
        let mut child = if kill == 0 {
            spawn(&env, &first)
        } else {
            spawn(&env, &["run", "--resume"])
        };
        // This run's first agent started: whatever the killed one left must be gone by now.
        let t = Instant::now();
        while lines(&starts).len() <= before {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("kill {kill}: the run ended ({st:?}) before its agent started:\n{err}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "kill {kill}: no agent started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let survivors = ours_alive(&env, &old);
        assert!(
            survivors.is_empty(),
            "kill {kill}: processes of the killed run still alive beside the resumed one: {survivors:?}"
        );
        // Kill at a random moment: in the agent, the validation, or between.
        std::thread::sleep(Duration::from_millis(next() % 400));
        // Its watchdog first: this test is about what the next start ends.
        harness::kill_watchdogs(&env);
        child.kill().unwrap();
        let status = wait_timeout(&mut child, Duration::from_secs(10));
        assert!(
            status.code().is_none(),
            "run ended before the kill: {status:?}"
        );
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        if err.contains("that a stopped loop left running") {
            ended_messages += 1;
        }
    }
    // The last resume finishes: the validation passes now.
    let r = env
        .cmd()
        .args(["run", "--resume", "--validate", "true"])
        .env("TD_TEST_DIR", env.root())
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(ended_messages > 0, "no resume ended a leftover process");
    let all = pids(&env);
    assert!(
        ours_alive(&env, &all).is_empty(),
        "processes left after the run: {:?}",
        ours_alive(&env, &all)
    );

    // summary.csv: one row per iteration, 1..=N, none repeated, none lost.
    let rows = csv_rows(&env.repo());
    let its: Vec<u32> = rows
        .iter()
        .map(|r| r["iteration"].parse().unwrap())
        .collect();
    let run_ids: BTreeSet<&str> = rows.iter().map(|r| r["run_id"].as_str()).collect();
    assert_eq!(run_ids.len(), 1, "{run_ids:?}");
    assert_eq!(its, (1..=its.len() as u32).collect::<Vec<_>>(), "{its:?}");
    assert_eq!(rows.last().unwrap()["outcome"], "complete");
    // What the agents saw: iteration numbers never go back (a killed one is done again).
    let seen: Vec<u32> = lines(&starts)
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "went back: {seen:?}");
    assert_eq!(seen.last().copied(), its.last().copied());
    // No temp file of an interrupted write is left.
    let ralph = env.repo().join(".ralph");
    for dir in [ralph.clone(), ralph.join("logs")] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            assert!(
                !e.file_name().to_string_lossy().starts_with(".tmp-"),
                "{} left",
                e.path().display()
            );
        }
    }
    // Every commit made is on the branch.
    let log = git(&env.repo(), &["log", "--format=%s"]);
    // (When it is not, say why: lock files a killed git left, and the agent's log of the
    // first iteration that committed nothing.)
    let first_without = rows
        .iter()
        .find(|r| r["commit_hash"].is_empty())
        .map(|r| r["iteration"].parse::<u32>().unwrap_or(0))
        .unwrap_or(0);
    assert!(
        log.contains(&format!("iteration {}", its.len())),
        "{log}\nlock files in .git: {:?}\n{}",
        lock_files(&env.repo().join(".git")),
        std::fs::read_to_string(
            ralph
                .join("logs")
                .join(format!("iteration-{first_without:03}.log"))
        )
        .unwrap_or_default()
    );
}

/// Every `*.lock` file under `dir`, for a failure message.
fn lock_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(lock_files(&p));
        } else if p.extension().is_some_and(|x| x == "lock") {
            out.push(p.display().to_string());
        }
    }
    out
}

fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_flooding_agent_and_a_flooding_validation_are_capped_in_the_log_and_in_memory() {
    let env = Env::new();
    let agent = env.root().join("flood.sh");
    std::fs::write(&agent, "#!/bin/sh\nseq 200000\necho agent-end\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut child = env
        .cmd()
        .args([
            "run",
            "flood",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--validate",
            "seq 1000000 1200000; echo validation-end; false",
            "--max-iterations",
            "1",
            "--max-log-size",
            "256KB",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut peak = 0;
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(rss_kb(pid));
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the flood never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        child.wait().unwrap().code(),
        Some(1),
        "LIMIT after one iteration"
    );
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    let cap = 256 * 1024;
    assert!(
        log.len() <= cap + 4096,
        "log of {} bytes over the cap",
        log.len()
    );
    let lines: Vec<&str> = log.lines().collect();
    // The head and the tail of each flood are kept, with what was cut noted between.
    assert!(lines.contains(&"1") && lines.contains(&"2"), "head lost");
    assert!(lines.contains(&"agent-end") && lines.contains(&"validation-end"));
    assert!(lines.contains(&"1200000"), "the validation's tail lost");
    let cuts = lines.iter().filter(|l| l.contains("output cut")).count();
    assert_eq!(
        cuts,
        2,
        "one cut per flood:\n{}",
        lines
            .iter()
            .filter(|l| l.starts_with("[taskdaemon]"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
    for note in [
        "agent exited with 0",
        "validation: $ seq",
        "validation exited with 1",
        "iteration 1 ended",
    ] {
        assert!(log.contains(note), "the note `{note}` was dropped");
    }
    // The harness holds a bounded amount, not the 2.6 MB it was sent.
    eprintln!("flood: log {} bytes, harness peak RSS {peak} kB", log.len());
    assert!(peak > 0 && peak < 200 * 1024, "peak RSS {peak} kB");
}

/// A first interrupt gives the agent its grace period; a second one ends it at once: the
/// agent that ignores TERM (and its child) is killed, `run` exits 130 long before the
/// 60-second grace, and no process of it is left.
#[test]
fn a_second_interrupt_forces_run_to_stop_at_once() {
    let env = Env::new();
    let agent = env.root().join("stubborn.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\ntrap '' TERM\necho $$ >> \"$TD_TEST_DIR/pids\"\nsleep 300 &\necho $! >> \"$TD_TEST_DIR/pids\"\ntouch \"$TD_TEST_DIR/started\"\nwait\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spec = format!("cmd:{}", agent.display());
    let mut child = spawn(
        &env,
        &[
            "run",
            "stay",
            "--agent",
            &spec,
            "--kill-grace",
            "60s",
            "--max-iterations",
            "1",
        ],
    );
    harness::wait_for(&env.root().join("started"), Duration::from_secs(60));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let agent_pids = pids(&env);
    assert!(
        !ours_alive(&env, &agent_pids).is_empty(),
        "the grace period is on"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("forcing the stop"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ours_alive(&env, &agent_pids).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ours_alive(&env, &agent_pids), Vec::<i32>::new());
}

#[test]
fn a_git_lock_a_killed_git_left_is_moved_aside_so_the_agent_can_commit() {
    let env = Env::new();
    let repo = env.repo();
    let lock = repo.join(".git/index.lock");
    std::fs::write(&lock, "half an index of a killed git").unwrap();
    let r = env.run(&[
        "run",
        "commit once",
        "--agent",
        "cmd:git commit -q --allow-empty -m 'after the lock'",
        "--validate",
        "true",
        "--max-iterations",
        "1",
    ]);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(!lock.exists(), "{out}");
    assert!(
        out.contains("a git process that was killed left this lock"),
        "{out}"
    );
    let kept: Vec<_> = std::fs::read_dir(repo.join(".git/taskdaemon/stale-locks"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        std::fs::read_to_string(kept[0].path()).unwrap(),
        "half an index of a killed git"
    );
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s"]).trim(),
        "after the lock"
    );
}

/// A stop while the validation command runs ends it, and the loop says the validation was
/// interrupted (no verdict), never that it failed: in its output and in the iteration log.
#[test]
fn a_validation_ended_by_a_stop_is_interrupted_not_failed() {
    let env = Env::new();
    let marker = env.root().join("validating");
    let validate = format!("touch {}; sleep 30", marker.display());
    let run = env.spawn(&[
        "run",
        "--agent",
        "cmd:echo work > work.txt",
        "--validate",
        &validate,
        "--max-iterations",
        "3",
        "the task",
    ]);
    harness::wait_for(&marker, Duration::from_secs(30));
    let (status, err) = run.interrupt(Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("validation interrupted by the stop"), "{err}");
    assert!(!err.contains("validation failed"), "{err}");
    let log = std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(
        log.contains("validation was interrupted by the stop"),
        "{log}"
    );
    assert!(!log.contains(": failed"), "{log}");
}

/// The agent of the harness-death tests: its work is a child (`sh -c`, as under a CLI)
/// that sleeps, then writes a marker; both pids recorded, `started` once they are.
const SLEEPER: &str = r#"#!/bin/sh
sh -c 'echo $$ >> "$TD_TEST_DIR/pids"; sleep 4; touch "$TD_TEST_DIR/marker"' &
echo $$ >> "$TD_TEST_DIR/pids"
while [ "$(wc -l < "$TD_TEST_DIR/pids")" -lt 2 ]; do sleep 0.05; done
touch "$TD_TEST_DIR/started"
wait
"#;

/// Kill the harness `pid` with SIGKILL once its agent works: 1 s later no process of the
/// agent is left (the watchdog ended the tree, not the next start), and the marker the
/// agent's child would have written after its sleep never comes.
fn agents_die_with_the_killed_harness(env: &Env, pid: i32) {
    harness::wait_for(&env.root().join("started"), Duration::from_secs(60));
    let agent_pids = pids(env);
    assert_eq!(agent_pids.len(), 2, "{agent_pids:?}");
    assert_eq!(ours_alive(env, &agent_pids).len(), 2, "the agent works");
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    while !ours_alive(env, &agent_pids).is_empty() && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ours_alive(env, &agent_pids),
        Vec::<i32>::new(),
        "agent processes outlived their harness by 1 s"
    );
    // The child's sleep would have ended by now.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(killed.elapsed()));
    assert!(
        !env.root().join("marker").exists(),
        "the agent worked on for a dead harness"
    );
}

fn sleeper(env: &Env) -> String {
    let agent = env.root().join("sleeper.sh");
    std::fs::write(&agent, SLEEPER).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("cmd:{}", agent.display())
}

#[test]
fn a_sigkilled_run_leaves_no_agent_working() {
    let env = Env::new();
    let agent = sleeper(&env);
    let mut child = spawn(
        &env,
        &["run", "sleep", "--agent", &agent, "--max-iterations", "1"],
    );
    agents_die_with_the_killed_harness(&env, child.id() as i32);
    let _ = child.wait();
}

#[test]
fn a_sigkilled_daemon_leaves_no_agent_working() {
    let env = Env::new();
    let agent = sleeper(&env);
    let vars = [("TD_TEST_DIR".to_string(), env.root().display().to_string())];
    env.ok_with(&vars, &["daemon", "start", "--tick", "0.2"]);
    env.ok_with(
        &vars,
        &[
            "submit",
            "ralph",
            "sleep",
            "--agent",
            &agent,
            "--validate",
            "false",
        ],
    );
    harness::wait_for(&env.root().join("started"), Duration::from_secs(60));
    let info = env.repo().join(".git/taskdaemon/daemon/info.json");
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(info).unwrap()).unwrap();
    let pid = info["pid"].as_i64().unwrap() as i32;
    agents_die_with_the_killed_harness(&env, pid);
}
