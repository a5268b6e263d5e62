//! The daemon's scheduling, two scenarios in one run:
//!
//! 1. Overlap: SLEEPERS (default 8) independent ralph runs whose agent sleeps 2 s
//!    (`cmd:sleep 2`), at `max-loops` 4. Prints how many runs' agents were running at the
//!    same time at most (goal: 4) and the wall time against the ideal `runs × 2 s / 4`
//!    (ratio; a daemon that serialised worktree creation shows 1 overlapping run and ~4×).
//! 2. No-op runs: RUNS (default 200) LoopRuns (ralph, agent `cmd:true`, validation
//!    `true`) in a random dependency DAG, at concurrency LOOPS (default 4), each in its
//!    own worktree and merged back. Prints the wall time; the overhead per run (wall ×
//!    concurrency / runs, goal ≤ 100 ms, printed as a ratio to it); the scheduling
//!    overhead per run as the dispatcher times it; the daemon's CPU per run; where a
//!    run's time goes (from the daemon's millisecond log); the daemon's peak RSS.
//!
//! `cargo bench -p taskdaemon --bench daemon` (RUNS=N, LOOPS=N, SLEEPERS=N, SEED=N;
//! TASKDAEMON_BIN=PATH measures another build of the binary, e.g. the commit before a
//! change, with the same bench; SKIP_OVERLAP=1 runs the no-op scenario alone).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use taskdaemon_core::store::{NewRun, Records};

mod common;
use common::{env_num, git, hermetic};

struct Rng(fastrand::Rng);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
}

/// `(utime + stime) seconds, VmHWM kB` of a live process.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; here (after the command) 11 and 12.
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (ticks / 100.0, hwm)
}

fn ms_of(line: &str) -> Option<i64> {
    let t = line.split_whitespace().next()?;
    t.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

fn stats(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "mean {mean:8.1} ms  median {:8.1}  p90 {:8.1}  max {:8.1}",
        p(0.5),
        p(0.9),
        p(1.0)
    )
}

struct Project {
    _tmp: tempfile::TempDir,
    home: std::path::PathBuf,
    repo: std::path::PathBuf,
    log: std::path::PathBuf,
}

fn project() -> Project {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().canonicalize().expect("temp dir path");
    let home = root.join("home");
    let repo = root.join("repo");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&repo).expect("repo");
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = bench\n\temail = bench@example.com\n[init]\n\tdefaultBranch = main\n",
    )
    .expect("gitconfig");
    git(&repo, &home, &["init", "-q"]);
    std::fs::write(repo.join("README.md"), "bench\n").expect("readme");
    git(&repo, &home, &["add", "-A"]);
    git(&repo, &home, &["commit", "-qm", "initial"]);
    // The person works on another branch, so merges move main itself.
    git(&repo, &home, &["checkout", "-qb", "wip"]);
    Project {
        log: root.join("daemon.log"),
        _tmp: tmp,
        home,
        repo,
    }
}

/// Runs with these agents and deps (indexes of earlier runs); their ids.
fn submit(p: &Project, runs: &[(&str, Vec<usize>)]) -> Vec<String> {
    let mut records = Records::open(&p.repo).expect("store");
    let mut ids: Vec<String> = Vec::with_capacity(runs.len());
    for (i, (agent, deps)) in runs.iter().enumerate() {
        let mut ctx = Map::new();
        ctx.insert("task".into(), Value::from(format!("run {i}")));
        ctx.insert("agent".into(), Value::from(*agent));
        ctx.insert("validate".into(), Value::from("true"));
        ctx.insert("target-branch".into(), Value::from("main"));
        let run = records
            .create_run(
                NewRun {
                    loop_type: "ralph".into(),
                    name: Some(format!("run {i}")),
                    deps: deps.iter().map(|d| ids[*d].clone()).collect(),
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

/// Start the daemon, wait until `runs` runs ended; wall time, CPU seconds, peak RSS kB, log.
fn daemon(p: &Project, loops: u64, runs: usize) -> (Duration, f64, u64, String) {
    let exe = std::env::var_os("TASKDAEMON_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_BIN_EXE_taskdaemon")).to_path_buf());
    println!("daemon binary: {}", exe.display());
    let log = std::fs::File::create(&p.log).expect("log");
    let mut c = Command::new(&exe);
    hermetic(&mut c, &p.home);
    if std::env::var_os("GIT_PROCS").is_some() {
        c.env("GIT_TRACE", git_trace(p));
    }
    let start = Instant::now();
    let mut daemon = c
        .current_dir(&p.repo)
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
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("daemon starts");
    let pid = daemon.id();
    let mut peak = (0.0, 0);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let u = usage(pid);
        if u.1 > 0 {
            peak = u;
        }
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        let ended = text
            .lines()
            .filter(|l| {
                l.contains(": rebasing -> complete")
                    || l.contains("-> failed")
                    || l.contains("-> blocked")
            })
            .count();
        if ended >= runs {
            break;
        }
        if let Ok(Some(s)) = daemon.try_wait() {
            panic!("the daemon exited early ({s}); see {}", p.log.display());
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "no end after an hour"
        );
    }
    let wall = start.elapsed();
    let (cpu, hwm) = usage(pid);
    let (cpu, hwm) = if hwm > 0 { (cpu, hwm) } else { peak };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = daemon.wait();
    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
    (wall, cpu, hwm, text)
}

/// Per run id: when it started (worktree ready), its loop ended, it was merged.
struct Times {
    first: i64,
    started: HashMap<String, i64>,
    finished: HashMap<String, i64>,
    merged: HashMap<String, i64>,
}

fn times(text: &str) -> Times {
    let mut t = Times {
        first: text.lines().next().and_then(ms_of).unwrap_or(0),
        started: HashMap::new(),
        finished: HashMap::new(),
        merged: HashMap::new(),
    };
    for l in text.lines() {
        let Some(at) = ms_of(l) else { continue };
        let words: Vec<&str> = l.split_whitespace().collect();
        let (Some(kind), Some(id)) = (words.get(1), words.get(2)) else {
            continue;
        };
        if *kind != "run" {
            continue;
        }
        let id = id.trim_end_matches(':').to_string();
        if l.contains(" started at iteration") {
            t.started.insert(id, at);
        } else if l.contains("(ralph) -> rebasing") || l.contains("(ralph) -> complete") {
            // The loop is done (then the merge); older daemons logged `-> rebasing`.
            t.finished.insert(id, at);
        } else if l.contains(": rebasing -> complete") {
            t.merged.insert(id, at);
        }
    }
    t
}

/// The most intervals open at one time.
fn peak_overlap(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(a, b)| [(*a, 1), (*b, -1)])
        .collect();
    edges.sort();
    let (mut open, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        peak = peak.max(open);
    }
    peak as usize
}

fn overlap_scenario() {
    let n = env_num("SLEEPERS", 8) as usize;
    let loops = 4;
    let p = project();
    let ids = submit(&p, &vec![("cmd:sleep 2", Vec::new()); n]);
    let (wall, _, _, text) = daemon(&p, loops, n);
    let t = times(&text);
    let intervals: Vec<(i64, i64)> = ids
        .iter()
        .filter_map(|id| Some((*t.started.get(id)?, *t.finished.get(id)?)))
        .collect();
    let ideal = n as f64 * 2.0 / loops as f64;
    println!(
        "overlap: {n} runs of a 2 s agent at max-loops {loops}: at most {} running at once (goal {loops}); all merged in {:.2} s = {:.2}x the ideal {ideal:.1} s ({} of {n} complete)",
        peak_overlap(&intervals),
        wall.as_secs_f64(),
        wall.as_secs_f64() / ideal,
        t.merged.len()
    );
}

/// The first three fields of `/proc/loadavg` (1, 5 and 15 minutes).
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    println!("load average at the start: {}", load_average());
    if std::env::var_os("SKIP_OVERLAP").is_none() {
        overlap_scenario();
    }
    let runs = env_num("RUNS", 200) as usize;
    let loops = env_num("LOOPS", 4);
    let mut rng = Rng(fastrand::Rng::with_seed(env_num(
        "SEED",
        0x9e37_79b9_7f4a_7c15,
    )));
    let p = project();
    // The DAG: each run depends on up to 3 random earlier runs (about 40% have none).
    let t0 = Instant::now();
    let mut plan: Vec<(&str, Vec<usize>)> = Vec::with_capacity(runs);
    let mut edges = 0;
    for i in 0..runs {
        let mut deps = Vec::new();
        if i > 0 && rng.next() % 10 >= 4 {
            for _ in 0..=(rng.next() % 3) {
                let d = (rng.next() % i as u64) as usize;
                if !deps.contains(&d) {
                    deps.push(d);
                }
            }
        }
        edges += deps.len();
        plan.push(("cmd:true", deps));
    }
    let ids = submit(&p, &plan);
    let deps_of: HashMap<&String, Vec<&String>> = ids
        .iter()
        .zip(&plan)
        .map(|(id, (_, deps))| (id, deps.iter().map(|d| &ids[*d]).collect()))
        .collect();
    println!(
        "{runs} runs, {edges} dependency edges, concurrency {loops}; records written in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let (wall, cpu, hwm, text) = daemon(&p, loops, runs);
    let dispatcher = text
        .lines()
        .find_map(|l| l.split_once(" dispatcher: ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| "(no dispatcher line in the log)".into());
    let t = times(&text);
    let failed = text
        .lines()
        .filter(|l| l.contains("-> failed") || l.contains("-> blocked"))
        .count();
    let mut latency = Vec::new();
    let mut engine = Vec::new();
    let mut merge = Vec::new();
    for id in &ids {
        let (Some(s), Some(f), Some(m)) = (t.started.get(id), t.finished.get(id), t.merged.get(id))
        else {
            continue;
        };
        let ready = deps_of[id]
            .iter()
            .filter_map(|d| t.merged.get(*d))
            .max()
            .copied()
            .unwrap_or(t.first);
        latency.push((s - ready) as f64);
        engine.push((f - s) as f64);
        merge.push((m - f) as f64);
    }
    println!(
        "all runs done in {:.1} s ({:.1} runs/s); {} complete, {failed} failed or blocked",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64(),
        t.merged.len()
    );
    println!(
        "daemon process CPU (dispatcher and the in-process engines; not the git/agent processes): {cpu:.2} s = {:.2} ms per run",
        cpu * 1000.0 / runs as f64
    );
    println!("scheduling overhead (the dispatcher's own timing): {dispatcher}");
    let per_run = wall.as_secs_f64() * 1000.0 * loops as f64 / runs as f64;
    println!(
        "no-op run overhead (wall x concurrency per run): {per_run:.1} ms = {:.2}x the 100 ms goal",
        per_run / 100.0
    );
    println!(
        "ready -> started (slot wait + worktree):  {}",
        stats(latency)
    );
    println!(
        "started -> loop done (engine, no-op):      {}",
        stats(engine)
    );
    println!(
        "loop done -> merged (serialized merges):   {}",
        stats(merge)
    );
    println!(
        "daemon peak RSS (VmHWM): {:.1} MB (goal <= 60 MB)",
        hwm as f64 / 1024.0
    );
    git_processes(&p, runs);
    println!("load average at the end: {}", load_average());
}

fn git_trace(p: &Project) -> std::path::PathBuf {
    p.log.with_extension("git-trace")
}

/// With GIT_PROCS set: the git processes the daemon and its runs started (git's own
/// children included), per run and by subcommand.
fn git_processes(p: &Project, runs: usize) {
    let Ok(text) = std::fs::read_to_string(git_trace(p)) else {
        println!("git processes per run: set GIT_PROCS=1 to count them");
        return;
    };
    let mut by: HashMap<String, usize> = HashMap::new();
    for l in text.lines() {
        if let Some((_, cmd)) = l.split_once("trace: built-in: git ") {
            let sub = cmd.split_whitespace().next().unwrap_or("").to_string();
            *by.entry(sub).or_default() += 1;
        }
    }
    let total: usize = by.values().sum();
    let mut by: Vec<_> = by.into_iter().collect();
    by.sort_by_key(|e| std::cmp::Reverse(e.1));
    let list: Vec<String> = by
        .iter()
        .map(|(k, n)| format!("{k} {:.2}", *n as f64 / runs as f64))
        .collect();
    println!(
        "git processes: {total} = {:.2} per run ({})",
        total as f64 / runs as f64,
        list.join(", ")
    );
}
