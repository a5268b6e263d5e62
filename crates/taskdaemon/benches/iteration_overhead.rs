//! Harness overhead per iteration: `taskdaemon run` with a no-op agent (`cmd:true`) and a
//! no-op validation (`true`) on a repository of 10,000 files. Prints figures; asserts
//! nothing (machines here are shared and noisy).
//!
//! `cargo bench -p taskdaemon --bench iteration_overhead` (env: BENCH_FILES, BENCH_ITERATIONS)
//!
//! Validation passes from the first iteration, so the run requires a completion promise the
//! no-op agent never says: every iteration then goes through the whole pipeline (prompt,
//! agent, signals, validation, stuck check, CSV row, state save) until max-iterations.
//!
//! Then start-up + one iteration (BENCH_STARTS runs, default 20, each a fresh
//! `taskdaemon run --max-iterations 1`) against its floor measured in the same rounds: a
//! bash script starting the processes such a run cannot avoid (git for the top level and
//! HEAD before and after, the agent `true`, the validation `true`). Prints medians,
//! min–max and the ratio. With `RALPH_BIN=/path/to/ralph` (a release build of
//! ralph-orchestrator's `ralph`), the same rounds also start `ralph run --autonomous
//! --max-iterations 1` with a custom backend `true` in an identical copy of the
//! repository (the two trade places halfway, so a repository's place on disk weighs on
//! both alike), and print taskdaemon / ralph-orchestrator per round. With
//! `BENCH_BEFORE=/path/to/taskdaemon` (an older build), that binary's start runs in the
//! same rounds too, and taskdaemon / it is printed per round.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn main() {
    let files: usize = env_or("BENCH_FILES", 10_000);
    let iterations: usize = env_or("BENCH_ITERATIONS", 100);
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = bench\n\temail = bench@example.com\n",
    )
    .unwrap();
    make_repo(&repo, &home, files);

    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_taskdaemon"))
        .args([
            "run",
            "benchmark task",
            "--agent",
            "cmd:true",
            "--validate",
            "true",
        ])
        .args([
            "--completion-promise",
            "NEVER",
            "--max-stuck",
            "0",
            "--json",
        ])
        .args(["--max-iterations", &iterations.to_string()])
        .current_dir(&repo)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("run taskdaemon");
    let total = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut wall = Vec::new();
    let mut overhead = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json event");
        if v["event"] == "iteration_finished" {
            wall.push(v["duration_ms"].as_f64().unwrap_or(0.0));
            overhead.push(v["overhead_ms"].as_f64().unwrap_or(0.0));
        }
    }
    println!(
        "iteration overhead: {files} files, {} iterations, agent cmd:true, validation `true`",
        wall.len()
    );
    report(
        "whole iteration (harness + spawning agent and validation)",
        &mut wall,
    );
    report(
        "harness only (iteration minus agent and validation processes)",
        &mut overhead,
    );
    println!(
        "  whole run incl. start-up: {:.1} ms",
        total.as_secs_f64() * 1000.0
    );
    let ralph = std::env::var_os("RALPH_BIN").map(|bin| {
        let copy = tmp.path().join("repo-ralph");
        make_repo(&copy, &home, files);
        (std::path::PathBuf::from(bin), copy)
    });
    // What making the repositories and the 100 iterations wrote goes to disk first: its
    // write-back would otherwise slow every sync of the rounds (more for the tool that
    // syncs more files), and measure this bench's set-up instead of a start.
    let _ = Command::new("sync").status();
    startup(&repo, &home, ralph.as_ref());
}

/// ralph-orchestrator's config for the same no-op run: a custom backend `true` that gets
/// the prompt on stdin, one iteration.
const RALPH_CONFIG: &str = "cli:\n  backend: custom\n  command: \"true\"\n  prompt_mode: stdin\nevent_loop:\n  max_iterations: 1\n";

/// Start-up + one iteration, against the bash floor, round by round.
fn startup(repo: &Path, home: &Path, ralph: Option<&(std::path::PathBuf, std::path::PathBuf)>) {
    let starts: usize = env_or("BENCH_STARTS", 20);
    let floor_script = "git rev-parse --show-toplevel >/dev/null && git rev-parse -q --verify 'HEAD^{commit}' >/dev/null && true && true && git rev-parse -q --verify 'HEAD^{commit}' >/dev/null";
    let env = |c: &mut Command, dir: &Path| {
        c.current_dir(dir)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
    };
    let run_once = |bin: &Path, dir: &Path| {
        let mut c = Command::new(bin);
        c.args([
            "run",
            "benchmark task",
            "--agent",
            "cmd:true",
            "--validate",
            "true",
        ])
        .args(["--completion-promise", "NEVER", "--max-stuck", "0"])
        .args(["--max-iterations", "1", "--json"]);
        env(&mut c, dir);
        let t = Instant::now();
        let _ = c.status().expect("run taskdaemon");
        t.elapsed().as_secs_f64() * 1000.0
    };
    // BENCH_BEFORE=/path/to/an/older/taskdaemon: the same start in the same rounds.
    let before_bin = std::env::var_os("BENCH_BEFORE").map(std::path::PathBuf::from);
    let (mut before, mut vs_before) = (Vec::new(), Vec::new());
    let (mut ours, mut floor, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut theirs, mut vs_ralph) = (Vec::new(), Vec::new());
    // With ralph-orchestrator the two repositories trade places halfway (a repository's
    // place on disk alone moved an A/A ratio by ±5%): each tool starts in each for half
    // the rounds, both from a clean `.ralph` at the start and at the trade.
    let places: Vec<&Path> = match ralph {
        Some((_, copy)) => vec![repo, copy.as_path()],
        None => vec![repo],
    };
    for dir in &places {
        std::fs::write(dir.join("ralph.yml"), RALPH_CONFIG).unwrap();
    }
    let mut half = usize::MAX;
    for k in 0..starts {
        if k * places.len() / starts.max(1) != half {
            half = k * places.len() / starts.max(1);
            for dir in &places {
                let _ = std::fs::remove_dir_all(dir.join(".ralph"));
            }
        }
        let (here, there) = (places[half], places[(half + 1) % places.len()]);
        if let Some(bin) = &before_bin {
            before.push(run_once(bin, here));
        }
        let a = run_once(Path::new(env!("CARGO_BIN_EXE_taskdaemon")), here);
        if let Some(b) = before.last() {
            vs_before.push(a / b);
        }
        let mut b = Command::new("bash");
        b.args(["-c", floor_script]);
        env(&mut b, here);
        let t = Instant::now();
        let _ = b.status().expect("run bash");
        let f = t.elapsed().as_secs_f64() * 1000.0;
        ours.push(a);
        floor.push(f);
        ratio.push(a / f);
        if let Some((bin, _)) = ralph {
            let r = ralph_once(bin, there, home);
            theirs.push(r);
            vs_ralph.push(a / r);
        }
    }
    println!(
        "start-up + one iteration, {starts} rounds (taskdaemon vs the bash floor, same rounds):"
    );
    report("taskdaemon run --max-iterations 1", &mut ours);
    if before_bin.is_some() {
        report("BENCH_BEFORE run --max-iterations 1", &mut before);
        report_in(
            "ratio taskdaemon / BENCH_BEFORE, per round",
            &mut vs_before,
            "x",
        );
    }
    report("bash floor (git top level, HEAD x2, true x2)", &mut floor);
    report_in("ratio taskdaemon / floor, per round", &mut ratio, "x");
    if ralph.is_some() {
        report("ralph-orchestrator run --max-iterations 1", &mut theirs);
        report_in(
            "ratio taskdaemon / ralph-orchestrator, per round",
            &mut vs_ralph,
            "x",
        );
    } else {
        println!("  (ralph-orchestrator: set RALPH_BIN to its `ralph` binary to compare)");
    }
}

/// One `ralph run` to the end of its first iteration, in ms; its output is checked once
/// so a broken setup is not measured as a fast one.
fn ralph_once(bin: &Path, repo: &Path, home: &Path) -> f64 {
    let mut c = Command::new(bin);
    c.args([
        "run",
        "--autonomous",
        "--max-iterations",
        "1",
        "-p",
        "benchmark task",
    ])
    .current_dir(repo)
    .env("HOME", home)
    .env("XDG_CONFIG_HOME", home.join(".config"))
    .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .stdin(std::process::Stdio::null());
    let t = Instant::now();
    let out = c.output().expect("run ralph-orchestrator");
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    static SHOWN: std::sync::Once = std::sync::Once::new();
    SHOWN.call_once(|| {
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        let tail = |t: &str| t.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        println!(
            "  ralph-orchestrator's first round: exit {:?}; stdout …{}; stderr …{}",
            out.status.code(),
            tail(&text),
            tail(&err)
        );
    });
    ms
}

fn report(what: &str, v: &mut [f64]) {
    report_in(what, v, " ms");
}

fn report_in(what: &str, v: &mut [f64], unit: &str) {
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "  {what}: median {:.2}{unit}, p10 {:.2}{unit}, p90 {:.2}{unit}, min {:.2}{unit}, max {:.2}{unit}",
        q(0.5),
        q(0.1),
        q(0.9),
        q(0.0),
        q(1.0)
    );
}

fn make_repo(repo: &Path, home: &Path, files: usize) {
    for i in 0..files {
        let dir = repo.join(format!("src/d{:03}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "10k files"],
    ] {
        let ok = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
