//! `snapshot prune` at many snapshots (issue 37 item 18): a repository with SNAPSHOTS
//! (default 800) snapshots, each of another commit, saved by `taskdaemon snapshot save`;
//! a copy of it is taken when it has SMALL (default 100). Times through the real binary:
//!
//! - `snapshot list` at SNAPSHOTS (the baseline: one listing of every snapshot);
//! - `snapshot prune --keep 10 --dry-run` at SMALL and at SNAPSHOTS;
//! - `snapshot prune --keep 10` (it removes all but 10) on a fresh copy each round, at
//!   SMALL and at SNAPSHOTS, its refs loose and then packed (`git pack-refs --all`, as a
//!   `git gc` leaves them: a deletion of a packed ref rewrites `packed-refs`).
//!
//! Prints each median (min–max), the dry run's ratio to the listing, and the cost per
//! snapshot at SNAPSHOTS over that at SMALL (flat is 1.0; a git process per snapshot that
//! reads every ref made it ~SNAPSHOTS/SMALL: 85 s at 800). Asserts nothing about time.
//! `cargo bench -p taskdaemon --bench prune` (SNAPSHOTS=N, SMALL=N, ROUNDS=N;
//! TASKDAEMON_BIN=PATH measures another build of the binary).
//! Goal: `prune --dry-run` at 800 snapshots ≤ 2 s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{env_num, git, hermetic};

const KEEP: &str = "10";

fn bin() -> PathBuf {
    std::env::var_os("TASKDAEMON_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_taskdaemon")))
}

fn td(repo: &Path, home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    hermetic(&mut c, home);
    c.current_dir(repo).args(args);
    c
}

fn ok(mut c: Command) -> Duration {
    let t = Instant::now();
    let out = c.output().expect("taskdaemon runs");
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn copy(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let s = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(s.success(), "cp -a {} {}", from.display(), to.display());
}

/// The repository with `small` snapshots (a copy) and the one with `n`.
fn build(root: &Path, home: &Path, small: usize, n: usize) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(home).expect("home");
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = bench\n\temail = bench@example.com\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n",
    )
    .expect("gitconfig");
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).expect("repo");
    std::fs::write(repo.join("README.md"), "bench\n").expect("readme");
    git(&repo, home, &["init", "-q", "-b", "main"]);
    git(&repo, home, &["add", "-A"]);
    git(&repo, home, &["commit", "-qm", "initial"]);
    let at_small = root.join(format!("repo-{small}"));
    let t = Instant::now();
    for i in 0..n {
        if i == small {
            copy(&repo, &at_small);
        }
        std::fs::write(repo.join("work.txt"), format!("round {i}\n")).expect("change");
        ok(td(&repo, home, &["snapshot", "save", &format!("save {i}")]));
    }
    eprintln!("{n} snapshots saved in {:.1} s", t.elapsed().as_secs_f64());
    (at_small, repo)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn report(name: &str, v: &[Duration]) -> Duration {
    let (m, lo, hi) = median(v.to_vec());
    println!(
        "{name:<44} median {:9.1} ms   min {:9.1} ms   max {:9.1} ms   (n={})",
        ms(m),
        ms(lo),
        ms(hi),
        v.len()
    );
    m
}

/// A real prune, `rounds` times, each on a fresh copy of `repo` (packed refs or not).
fn real_prunes(
    repo: &Path,
    home: &Path,
    scratch: &Path,
    packed: bool,
    rounds: usize,
) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            copy(repo, scratch);
            if packed {
                git(scratch, home, &["pack-refs", "--all"]);
            }
            ok(td(scratch, home, &["snapshot", "prune", "--keep", KEEP]))
        })
        .collect()
}

fn main() {
    let n = env_num("SNAPSHOTS", 800) as usize;
    let small = (env_num("SMALL", 100) as usize).clamp(1, n.saturating_sub(1).max(1));
    let rounds = env_num("ROUNDS", 5).max(1) as usize;
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let (at_small, at_n) = build(tmp.path(), &home, small, n);
    println!("taskdaemon binary: {}", bin().display());
    let dry = ["snapshot", "prune", "--keep", KEEP, "--dry-run"];
    let mut list = Vec::new();
    let mut dry_small = Vec::new();
    let mut dry_n = Vec::new();
    for _ in 0..rounds {
        list.push(ok(td(&at_n, &home, &["snapshot", "list"])));
        dry_small.push(ok(td(&at_small, &home, &dry)));
        dry_n.push(ok(td(&at_n, &home, &dry)));
    }
    let list_m = report(&format!("snapshot list, {n} snapshots"), &list);
    let small_m = report(&format!("prune --dry-run, {small} snapshots"), &dry_small);
    let n_m = report(&format!("prune --dry-run, {n} snapshots"), &dry_n);
    let scratch = tmp.path().join("scratch");
    let mut real = Vec::new();
    for packed in [false, true] {
        let refs = if packed { "packed" } else { "loose" };
        let a = real_prunes(&at_small, &home, &scratch, packed, rounds);
        let b = real_prunes(&at_n, &home, &scratch, packed, rounds);
        let a = report(&format!("prune (real), {small} snapshots, {refs} refs"), &a);
        let b = report(&format!("prune (real), {n} snapshots, {refs} refs"), &b);
        real.push((refs, a, b));
    }
    let per = |t: Duration, k: usize| t.as_secs_f64() / k as f64;
    println!(
        "dry run at {n} / listing at {n}: {:.2}x",
        n_m.as_secs_f64() / list_m.as_secs_f64()
    );
    println!(
        "dry run, cost per snapshot at {n} / at {small}: {:.2}x (flat: 1.0 or less; quadratic: ~{:.0})",
        per(n_m, n) / per(small_m, small),
        n as f64 / small as f64
    );
    for (refs, a, b) in real {
        println!(
            "real prune ({refs} refs), cost per snapshot at {n} / at {small}: {:.2}x",
            per(b, n) / per(a, small)
        );
    }
    println!(
        "goal: prune --dry-run at 800 snapshots <= 2 s: {:.0} ms at {n}",
        ms(n_m)
    );
}
