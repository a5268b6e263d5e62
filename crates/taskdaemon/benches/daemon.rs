//! The daemon's scheduling: 1,000 LoopRuns (ralph, no-op agent `cmd:true`, validation
//! `true`) in a random dependency DAG, at concurrency 8, each in its own worktree and
//! merged back. Prints the wall time; the scheduling overhead per run as the dispatcher
//! times it (its passes: sync, cascade, pick; and recording the runs' reports in the store);
//! the daemon process's CPU per run (also the engines it runs in-process, not the git or
//! agent processes); where a run's time goes (from the daemon's millisecond log); and the
//! daemon's peak RSS (goal ≤ 60 MB).
//!
//! `cargo bench -p taskdaemon --bench daemon` (RUNS=N, LOOPS=N, SEED=N to change).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use taskdaemon_core::store::{NewRun, Records};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn hermetic(c: &mut Command, home: &Path) {
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TASKDAEMON_") {
            c.env_remove(k);
        }
    }
}

fn git(repo: &Path, home: &Path, args: &[&str]) {
    let mut c = Command::new("git");
    hermetic(&mut c, home);
    let s = c.arg("-C").arg(repo).args(args).status().expect("git runs");
    assert!(s.success(), "git {args:?}");
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

fn main() {
    let runs = env_num("RUNS", 1000) as usize;
    let loops = env_num("LOOPS", 8);
    let mut rng = Rng(env_num("SEED", 0x9e37_79b9_7f4a_7c15) | 1);
    let exe = Path::new(env!("CARGO_BIN_EXE_taskdaemon"));
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

    // The DAG: each run depends on up to 3 random earlier runs (about 40% have none).
    let t0 = Instant::now();
    let mut records = Records::open(&repo).expect("store");
    let mut ids: Vec<String> = Vec::with_capacity(runs);
    let mut deps_of: HashMap<String, Vec<String>> = HashMap::new();
    let mut edges = 0;
    for i in 0..runs {
        let mut deps = Vec::new();
        if i > 0 && rng.next() % 10 >= 4 {
            for _ in 0..=(rng.next() % 3) {
                let d = ids[(rng.next() % i as u64) as usize].clone();
                if !deps.contains(&d) {
                    deps.push(d);
                }
            }
        }
        edges += deps.len();
        let mut ctx = Map::new();
        ctx.insert("task".into(), Value::from(format!("no-op {i}")));
        ctx.insert("agent".into(), Value::from("cmd:true"));
        ctx.insert("validate".into(), Value::from("true"));
        ctx.insert("target-branch".into(), Value::from("main"));
        let run = records
            .create_run(
                NewRun {
                    loop_type: "ralph".into(),
                    name: Some(format!("noop {i}")),
                    deps: deps.clone(),
                    context: ctx,
                    ..NewRun::default()
                },
                jiff::Timestamp::now().as_millisecond(),
            )
            .expect("create run");
        deps_of.insert(run.id.clone(), deps);
        ids.push(run.id);
    }
    drop(records);
    println!(
        "{runs} runs, {edges} dependency edges, concurrency {loops}; records written in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let log_path = root.join("daemon.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut c = Command::new(exe);
    hermetic(&mut c, &home);
    let start = Instant::now();
    let mut daemon = c
        .current_dir(&repo)
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
        std::thread::sleep(Duration::from_millis(500));
        let u = usage(pid);
        if u.1 > 0 {
            peak = u;
        }
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let done = text
            .lines()
            .filter(|l| l.contains(": rebasing -> complete"))
            .count();
        let failed = text
            .lines()
            .filter(|l| l.contains("-> failed") || l.contains("-> blocked"))
            .count();
        if done + failed >= runs {
            break;
        }
        if let Ok(Some(s)) = daemon.try_wait() {
            panic!("the daemon exited early ({s}); see {}", log_path.display());
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
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let dispatcher = text
        .lines()
        .find_map(|l| l.split_once(" dispatcher: ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| "(no dispatcher line in the log)".into());

    // Where a run's time went, from the daemon's log.
    let first = text.lines().next().and_then(ms_of).unwrap_or(0);
    let mut started: HashMap<String, i64> = HashMap::new();
    let mut finished: HashMap<String, i64> = HashMap::new();
    let mut merged: HashMap<String, i64> = HashMap::new();
    for l in text.lines() {
        let Some(t) = ms_of(l) else { continue };
        let words: Vec<&str> = l.split_whitespace().collect();
        let (Some(kind), Some(id)) = (words.get(1), words.get(2)) else {
            continue;
        };
        if *kind != "run" {
            continue;
        }
        let id = id.trim_end_matches(':').to_string();
        if l.contains(" started at iteration") {
            started.insert(id, t);
        } else if l.contains("(ralph) -> rebasing") {
            finished.insert(id, t);
        } else if l.contains(": rebasing -> complete") {
            merged.insert(id, t);
        }
    }
    let failed = text
        .lines()
        .filter(|l| l.contains("-> failed") || l.contains("-> blocked"))
        .count();
    let mut latency = Vec::new();
    let mut engine = Vec::new();
    let mut merge = Vec::new();
    for id in &ids {
        let (Some(s), Some(f), Some(m)) = (started.get(id), finished.get(id), merged.get(id))
        else {
            continue;
        };
        let ready = deps_of[id]
            .iter()
            .filter_map(|d| merged.get(d))
            .max()
            .copied()
            .unwrap_or(first);
        latency.push((s - ready) as f64);
        engine.push((f - s) as f64);
        merge.push((m - f) as f64);
    }
    println!(
        "all runs done in {:.1} s ({:.1} runs/s); {} complete, {failed} failed or blocked",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64(),
        merged.len()
    );
    println!(
        "daemon process CPU (dispatcher and the in-process engines; not the git/agent processes): {cpu:.2} s = {:.2} ms per run",
        cpu * 1000.0 / runs as f64
    );
    println!("scheduling overhead (the dispatcher's own timing): {dispatcher}");
    println!(
        "wall time x concurrency per run: {:.1} ms",
        wall.as_secs_f64() * 1000.0 * loops as f64 / runs as f64
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
}
