//! The shared queue (issue 19), against the single-machine JSONL daemon in the same run:
//!
//! 1. Claims per second: CLAIMS (default 2,000) pending runs in a real PostgreSQL (the
//!    tests' server, `tests/it/pg.rs`), claimed by two holders on two threads, each
//!    claiming 4 at a time from the same ready list (SKIP LOCKED: each run goes to one).
//! 2. End to end: RUNS (default 200) no-op runs (ralph, agent `cmd:true`, validation
//!    `true`, no deps), each in its own worktree and merged: one JSONL daemon at concurrency
//!    LOOPS (default 4), then two daemons on two clones of a bare remote, one queue, each at
//!    LOOPS. Prints the wall time and the overhead per run (wall × total concurrency / runs)
//!    of each.
//!
//! `cargo bench -p taskdaemon --bench multi_machine` (CLAIMS=N, RUNS=N, LOOPS=N).

mod common;
#[path = "../tests/it/pg.rs"]
mod pg;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use taskdaemon_core::store::{Holder, NewRun, QueueConfig, Records};

use common::{env_num, git, hermetic};

/// A temp root with a home, a repository `repo` on branch `wip` (merges move `main`).
struct Root {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    home: PathBuf,
}

impl Root {
    fn new() -> Root {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().canonicalize().expect("temp dir path");
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n",
        )
        .expect("gitconfig");
        let repo = dir.join("repo");
        std::fs::create_dir_all(&repo).expect("repo");
        git(&repo, &home, &["init", "-q"]);
        std::fs::write(repo.join("README.md"), "bench\n").expect("readme");
        git(&repo, &home, &["add", "-A"]);
        git(&repo, &home, &["commit", "-qm", "initial"]);
        Root {
            _tmp: tmp,
            dir,
            home,
        }
    }

    fn repo(&self) -> PathBuf {
        self.dir.join("repo")
    }
}

fn new_runs(records: &mut Records, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let mut ctx = Map::new();
        ctx.insert("task".into(), Value::from(format!("run {i}")));
        ctx.insert("agent".into(), Value::from("cmd:true"));
        ctx.insert("validate".into(), Value::from("true"));
        ctx.insert("target-branch".into(), Value::from("main"));
        let run = records
            .create_run(
                NewRun {
                    loop_type: "ralph".into(),
                    name: Some(format!("run {i}")),
                    context: Box::new(ctx.into()),
                    ..NewRun::default()
                },
                jiff::Timestamp::now().as_millisecond(),
            )
            .expect("create run");
        ids.push(run.id);
    }
    ids
}

fn claims(url: &str) {
    let n = env_num("CLAIMS", 2000) as usize;
    let root = Root::new();
    let q = QueueConfig {
        url: url.to_string(),
        project: "bench/claims".into(),
    };
    let mut records = Records::open_queue(&root.repo(), q.clone()).expect("queue");
    let ids = new_runs(&mut records, n);
    let start = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (q, ids, repo) = (q.clone(), ids.clone(), root.repo());
            std::thread::spawn(move || {
                let mut r = Records::open_queue(&repo, q).expect("queue");
                let holder = Holder::new("bench", 1000 + t, 0);
                let mut got = 0;
                for chunk in ids.chunks(4) {
                    got += r
                        .claim(chunk, &holder, Duration::from_secs(60))
                        .expect("claim")
                        .len();
                }
                got
            })
        })
        .collect();
    let got: Vec<usize> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let wall = start.elapsed().as_secs_f64();
    let total: usize = got.iter().sum();
    assert_eq!(total, n, "every run claimed exactly once: {got:?}");
    println!(
        "claims: {n} runs claimed by 2 holders (4 per call) in {wall:.2} s = {:.0} claims/s ({} + {})",
        n as f64 / wall,
        got[0],
        got[1]
    );
}

/// A foreground daemon in `clone`, its output to `log`.
fn daemon(root: &Root, clone: &Path, loops: u64, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_taskdaemon"));
    hermetic(&mut c, &root.home);
    c.current_dir(clone)
        .args([
            "daemon",
            "start",
            "--foreground",
            "--max-loops",
            &loops.to_string(),
            "--tick",
            "0.5",
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log handle"))
        .stderr(out)
        .spawn()
        .expect("daemon starts")
}

/// Wait until the daemons' logs together say `runs` runs ended; the wall time since `start`.
fn wait_all(logs: &[PathBuf], daemons: &mut [Child], runs: usize, start: Instant) -> Duration {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let ended: usize = logs
            .iter()
            .map(|l| {
                std::fs::read_to_string(l)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| {
                        l.contains(": rebasing -> complete")
                            || l.contains("-> failed")
                            || l.contains("-> blocked")
                    })
                    .count()
            })
            .sum();
        if ended >= runs {
            return start.elapsed();
        }
        for d in daemons.iter_mut() {
            if let Ok(Some(s)) = d.try_wait() {
                panic!("a daemon exited early ({s}); see {logs:?}");
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "no end after an hour"
        );
    }
}

fn stop(daemons: Vec<Child>) {
    for mut d in daemons {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = d.wait();
    }
}

fn failures(logs: &[PathBuf]) -> usize {
    logs.iter()
        .map(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("-> failed") || l.contains("-> blocked"))
                .count()
        })
        .sum()
}

fn jsonl(runs: usize, loops: u64) -> f64 {
    let root = Root::new();
    let repo = root.repo();
    git(&repo, &root.home, &["checkout", "-qb", "wip"]);
    let mut records = Records::open_jsonl(&repo, Default::default()).expect("store");
    new_runs(&mut records, runs);
    drop(records);
    let log = root.dir.join("daemon.log");
    let start = Instant::now();
    let mut d = vec![daemon(&root, &repo, loops, &log)];
    let wall = wait_all(std::slice::from_ref(&log), &mut d, runs, start);
    stop(d);
    let per_run = wall.as_secs_f64() * 1000.0 * loops as f64 / runs as f64;
    println!(
        "single machine, JSONL: {runs} no-op runs, 1 daemon x {loops}: {:.1} s; overhead per run (wall x {loops} / runs) {per_run:.1} ms; {} failed or blocked",
        wall.as_secs_f64(),
        failures(&[log])
    );
    per_run
}

fn shared(url: &str, runs: usize, loops: u64, jsonl_per_run: f64) {
    let root = Root::new();
    let a = root.repo();
    let bare = root.dir.join("remote.git");
    git(
        &root.dir,
        &root.home,
        &["clone", "-q", "--bare", "repo", "remote.git"],
    );
    git(
        &a,
        &root.home,
        &["remote", "add", "origin", &bare.display().to_string()],
    );
    git(&a, &root.home, &["fetch", "-q", "origin"]);
    git(&a, &root.home, &["checkout", "-qb", "wip"]);
    git(&root.dir, &root.home, &["clone", "-q", "remote.git", "b"]);
    let b = root.dir.join("b");
    git(&b, &root.home, &["checkout", "-qb", "wip"]);
    // The queue in the (one) user's own config: a repository's would wait for its trust.
    let config = root.home.join(".config/taskdaemon");
    std::fs::create_dir_all(&config).expect("config dir");
    let project = "bench/shared";
    std::fs::write(
        config.join("config.yaml"),
        format!("queue: \"{url}\"\nqueue-project: {project}\n"),
    )
    .expect("config");
    let q = QueueConfig {
        url: url.to_string(),
        project: project.into(),
    };
    let mut records = Records::open_queue(&a, q).expect("queue");
    new_runs(&mut records, runs);
    drop(records);
    let logs = [root.dir.join("a.log"), root.dir.join("b.log")];
    let start = Instant::now();
    let mut d = vec![
        daemon(&root, &a, loops, &logs[0]),
        daemon(&root, &b, loops, &logs[1]),
    ];
    let wall = wait_all(&logs, &mut d, runs, start);
    stop(d);
    let per_run = wall.as_secs_f64() * 1000.0 * (2 * loops) as f64 / runs as f64;
    let on = |l: &Path| {
        std::fs::read_to_string(l)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" started at iteration"))
            .count()
    };
    println!(
        "shared queue: {runs} no-op runs, 2 daemons x {loops}: {:.1} s; overhead per run (wall x {} / runs) {per_run:.1} ms = {:.2}x the JSONL figure; runs started on A {} / B {}; {} failed or blocked",
        wall.as_secs_f64(),
        2 * loops,
        per_run / jsonl_per_run,
        on(&logs[0]),
        on(&logs[1]),
        failures(&logs)
    );
}

fn main() {
    let Some(db) = pg::database() else {
        return;
    };
    let url = db.url();
    claims(&url);
    let runs = env_num("RUNS", 200) as usize;
    let loops = env_num("LOOPS", 4);
    let per_run = jsonl(runs, loops);
    shared(
        &pg::database().expect("second database").url(),
        runs,
        loops,
        per_run,
    );
}
