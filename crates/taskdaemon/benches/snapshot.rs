//! Snapshot save and rollback on a repository of FILES files (default 10,000, ~45 MB;
//! `FILES=100000` for the large case), next to the naive way on an identical copy, in the
//! same run. Each round modifies 20 files and adds 1 (in both copies), then times through
//! the real binary (process start included):
//!
//! - save: `taskdaemon snapshot save` vs `git add -A && git commit && git tag`;
//! - rollback (after another such change): `taskdaemon snapshot rollback` vs the naive
//!   "save what you replace, then reset": `git add -A && git commit && git tag &&
//!   git reset --hard <the tag saved before>`.
//!
//! Ratios are taken round by round (same load); printed as median and min–max. In each
//! round the contestants are measured in turn, another one first each round ([`in_turn`]),
//! and the rounds fall into one phase per copy, each contestant working in another copy
//! in each phase ([`copy_for`]; a copy's place on disk alone moved a ratio by 5–15%).
//! `cargo bench -p taskdaemon --bench snapshot` (ROUNDS=N, FILES=N). `TASKDAEMON_BEFORE=
//! /path/to/an/older/taskdaemon` runs that build too, with a third identical copy, in the
//! same rounds, and prints this build's ratios to it.
//! Goals (issue 16): save ≤ 0.8× naive, rollback ≤ 1.0× naive and < 1 s at 100k files;
//! the first save (private index seeded from the user's) next to one `git status`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FILE_BYTES: usize = 4_600;
const MODIFY: usize = 20;

struct Rng(fastrand::Rng);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
}

fn content(rng: &mut Rng) -> String {
    let mut s = String::with_capacity(FILE_BYTES + 80);
    while s.len() < FILE_BYTES {
        s.push_str(&format!(
            "{:016x} {:016x} {:016x}\n",
            rng.next(),
            rng.next(),
            rng.next()
        ));
    }
    s
}

fn files() -> usize {
    std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn path_of(i: usize) -> String {
    format!("src/m{:03}/f{:05}.txt", i % 100, i)
}

fn git(dir: &Path, args: &[&str]) {
    let s = hermetic(Command::new("git"), dir)
        .arg("-C")
        .arg(dir)
        .args(args)
        .status()
        .expect("git runs");
    assert!(s.success(), "git {args:?}");
}

fn hermetic(mut c: Command, dir: &Path) -> Command {
    let home = dir.parent().expect("repo has a parent").join("home");
    c.env("HOME", &home)
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1");
    c
}

fn build(root: &Path) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join(".gitconfig"),
        // No automatic gc: one started in the background by a commit packs objects while
        // the rounds copy the repository (`cp` then fails) and while they are timed; the
        // repository is packed once when it is made.
        "[user]\n\tname = bench\n\temail = bench@example.com\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n",
    )
    .expect("gitconfig");
    let repo = root.join("repo");
    let mut rng = Rng(fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15));
    let mut bytes = 0;
    for i in 0..files() {
        let p = repo.join(path_of(i));
        std::fs::create_dir_all(p.parent().expect("dir")).expect("mkdir");
        let c = content(&mut rng);
        bytes += c.len();
        std::fs::write(p, c).expect("write");
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "initial"]);
    // Packed, as a clone is; then no gc runs while the rounds are timed (see the config).
    git(&repo, &["gc", "--quiet"]);
    eprintln!(
        "repository: {} files, {:.1} MB",
        files(),
        bytes as f64 / 1_000_000.0
    );
    repo
}

/// Modify 20 files and add 1, different ones each round.
fn churn(repo: &Path, round: usize, rng: &mut Rng) {
    for k in 0..MODIFY {
        let i = (round * 397 + k * 491) % files();
        std::fs::write(repo.join(path_of(i)), content(rng)).expect("modify");
    }
    std::fs::write(repo.join(format!("new-{round}.txt")), content(rng)).expect("add");
}

fn timed(mut c: Command) -> Duration {
    let t = Instant::now();
    let out = c.output().expect("runs");
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn td(repo: &Path, args: &[&str]) -> Command {
    td_with(env!("CARGO_BIN_EXE_taskdaemon"), repo, args)
}

fn td_with(bin: &str, repo: &Path, args: &[&str]) -> Command {
    let mut c = hermetic(Command::new(bin), repo);
    c.current_dir(repo).args(args);
    c
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{name:<40} median {:7.1} ms   min {:7.1} ms   max {:7.1} ms   (n={})",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

/// Round-by-round ratios of `ours` to `naive`: median and min–max.
fn ratio(name: &str, ours: &[Duration], naive: &[Duration]) {
    let mut r: Vec<f64> = ours
        .iter()
        .zip(naive)
        .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
        .collect();
    r.sort_by(f64::total_cmp);
    println!(
        "{name:<40} ratio median {:5.2}x   min {:5.2}x   max {:5.2}x",
        r[r.len() / 2],
        r[0],
        r[r.len() - 1]
    );
}

fn naive(dir: &Path, script: &str) -> Command {
    let mut c = hermetic(Command::new("sh"), dir);
    c.current_dir(dir).args(["-c", script]);
    c
}

/// The newest snapshot saved with message `tag`, by `bin`.
fn saved_tag(bin: &str, repo: &Path, tag: &str) -> String {
    let listed = td_with(bin, repo, &["snapshot", "list", "--json"])
        .output()
        .expect("list");
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    list.as_array()
        .and_then(|a| a.iter().rev().find(|s| s["message"] == tag))
        .and_then(|s| s["tag"].as_str())
        .expect("saved tag")
        .to_string()
}

/// A copy of the repository `from` whose index stat data is valid (a copy's files are
/// new inodes: without the refresh, the first command there would hash every file).
fn copy(from: &Path, to: &Path) {
    let s = Command::new("cp")
        .args(["-a"])
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(s.success());
    git(to, &["update-index", "-q", "--refresh"]);
}

/// Remove what the snapshots of `repo` left (the private directory, the tags), so the
/// next save is a first one again.
fn forget_snapshots(repo: &Path) {
    let dir = repo.join(".git/taskdaemon");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove the private directory");
    }
    let out = hermetic(Command::new("git"), repo)
        .arg("-C")
        .arg(repo)
        .args(["tag", "--list", "manual-*"])
        .output()
        .expect("git tag");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tags: Vec<&str> = text.lines().collect();
    if !tags.is_empty() {
        let out = hermetic(Command::new("git"), repo)
            .arg("-C")
            .arg(repo)
            .args(["tag", "-d"])
            .args(tags)
            .output()
            .expect("git tag -d");
        assert!(out.status.success(), "git tag -d");
    }
}

/// The order in which round `r` measures its `n` contestants: turned by one each round,
/// so none is always first (the one measured first in a round was ~7% slower on saves and
/// ~13% on first saves in an A/A run, whatever it was).
fn in_turn(r: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (r + i) % n)
}

/// The phase of round `r` of `rounds`: the rounds fall into `n` phases, one per copy.
fn phase_of(r: usize, rounds: usize, n: usize) -> usize {
    r * n / rounds.max(1)
}

/// The copy contestant `who` works in during `phase`: each takes every copy in turn.
fn copy_for(who: usize, phase: usize, n: usize) -> usize {
    (who + phase) % n
}

/// A new phase: every contestant now works where another did. Each copy's snapshots are
/// forgotten and every contestant takes one unmeasured step in its new copy (taskdaemon a
/// first save, which seeds its private index from the copy's index; the naive way a
/// commit and a tag), so the measured rounds start from the same kind of state.
fn settle_in(copies: &[(PathBuf, Rng)], phase: usize, r: usize, before: Option<&str>) {
    let n = copies.len();
    for (dir, _) in copies {
        forget_snapshots(dir);
    }
    let at = |who: usize| &copies[copy_for(who, phase, n)].0;
    let steps = [
        td(at(0), &["snapshot", "save", "settle"]),
        naive(
            at(1),
            &format!(
                "git add -A && git commit -q --allow-empty -m settle{r} && git tag naive-settle-{r}"
            ),
        ),
    ];
    for step in steps {
        timed(step);
    }
    if let Some(bin) = before {
        timed(td_with(bin, at(2), &["snapshot", "save", "settle"]));
    }
}

/// An older build run in the same rounds (`TASKDAEMON_BEFORE`), with a third copy of its
/// own at the start (the copies then turn).
struct Before {
    bin: String,
    repo: PathBuf,
    save: Vec<Duration>,
    rollback: Vec<Duration>,
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = build(tmp.path());
    let plain = tmp.path().join("naive");
    copy(&repo, &plain);
    let mut before = std::env::var("TASKDAEMON_BEFORE").ok().map(|bin| {
        let b = tmp.path().join("before");
        copy(&repo, &b);
        Before {
            bin,
            repo: b,
            save: Vec::new(),
            rollback: Vec::new(),
        }
    });
    let (rng, rng2) = (
        Rng(fastrand::Rng::with_seed(42)),
        Rng(fastrand::Rng::with_seed(42)),
    );
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the start: {}", l.trim());
    }
    // This build and the naive way (or `git status`), and the build before if there is one.
    let contestants = if before.is_some() { 3 } else { 2 };

    // The first save seeds its private index from the user's: about a `git status` (in
    // the same repository, whose index stat data is valid; it writes nothing). FIRSTS
    // times (default 5), each after the private directory and tags were removed; the
    // build before's first saves in the same copy (no copy's place on disk between them).
    let firsts: usize = std::env::var("FIRSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let (mut status, mut first, mut before_first) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..firsts {
        for who in in_turn(i, contestants) {
            match who {
                0 => status.push(timed(naive(
                    &repo,
                    "GIT_OPTIONAL_LOCKS=0 git status --porcelain >/dev/null",
                ))),
                1 => {
                    forget_snapshots(&repo);
                    first.push(timed(td(&repo, &["snapshot", "save", "first"])));
                }
                _ => {
                    if let Some(b) = before.as_ref() {
                        forget_snapshots(&repo);
                        before_first.push(timed(td_with(
                            &b.bin,
                            &repo,
                            &["snapshot", "save", "first"],
                        )));
                    }
                }
            }
        }
    }
    let (mut save, mut rollback) = (Vec::new(), Vec::new());
    let (mut naive_save, mut naive_rollback) = (Vec::new(), Vec::new());
    // Each copy with its own churn (the same sequence in every copy). Who works in which
    // copy turns with the phase ([`copy_for`]): a copy's place on disk alone moved a
    // ratio by 5-15% (A/A runs), so every contestant spends an equal share of the rounds
    // in each copy.
    let mut copies: Vec<(PathBuf, Rng)> = vec![(repo.clone(), rng), (plain.clone(), rng2)];
    if let Some(b) = before.as_ref() {
        copies.push((b.repo.clone(), Rng(fastrand::Rng::with_seed(42))));
    }
    let before_bin = before.as_ref().map(|b| b.bin.clone());
    settle_in(&copies, 0, 0, before_bin.as_deref());
    let mut phase = 0;
    for r in 0..rounds {
        if phase_of(r, rounds, contestants) != phase {
            phase = phase_of(r, rounds, contestants);
            settle_in(&copies, phase, r, before.as_ref().map(|b| b.bin.as_str()));
        }
        let dirs: Vec<PathBuf> = (0..contestants)
            .map(|who| copies[copy_for(who, phase, contestants)].0.clone())
            .collect();
        let at = |who: usize| dirs[who].as_path();
        for (dir, rng) in copies.iter_mut() {
            churn(dir, r, rng);
        }
        let tag = format!("bench-{r}");
        for who in in_turn(r, contestants) {
            match who {
                0 => save.push(timed(td(at(0), &["snapshot", "save", &tag]))),
                1 => naive_save.push(timed(naive(
                    at(1),
                    &format!("git add -A && git commit -qm r{r} && git tag naive-{r}"),
                ))),
                _ => {
                    if let Some(b) = before.as_mut() {
                        b.save
                            .push(timed(td_with(&b.bin, at(2), &["snapshot", "save", &tag])));
                    }
                }
            }
        }
        let saved = saved_tag(env!("CARGO_BIN_EXE_taskdaemon"), at(0), &tag);
        let before_saved = before.as_ref().map(|b| saved_tag(&b.bin, at(2), &tag));
        for (dir, rng) in copies.iter_mut() {
            churn(dir, r + 1000, rng);
        }
        for who in in_turn(r, contestants) {
            match who {
                0 => rollback.push(timed(td(at(0), &["snapshot", "rollback", &saved]))),
                1 => naive_rollback.push(timed(naive(
                    at(1),
                    &format!(
                        "git add -A && git commit -qm pre{r} && git tag naive-pre-{r} && git reset -q --hard naive-{r}"
                    ),
                ))),
                _ => {
                    if let (Some(b), Some(saved)) = (before.as_mut(), before_saved.as_ref()) {
                        b.rollback.push(timed(td_with(
                            &b.bin,
                            at(2),
                            &["snapshot", "rollback", saved],
                        )));
                    }
                }
            }
        }
    }
    report("first save (private index seeded)", first.clone());
    report("git status", status.clone());
    ratio("first save / git status", &first, &status);
    report("taskdaemon snapshot save", save.clone());
    report("git add -A && git commit && git tag", naive_save.clone());
    ratio("save / naive", &save, &naive_save);
    report("taskdaemon snapshot rollback", rollback.clone());
    report(
        "naive: save what it replaces, reset",
        naive_rollback.clone(),
    );
    ratio("rollback / naive", &rollback, &naive_rollback);
    if let Some(b) = before {
        report("before: first save", before_first.clone());
        ratio("first save / before", &first, &before_first);
        ratio("before: first save / git status", &before_first, &status);
        report("before: snapshot save", b.save.clone());
        ratio("save / before", &save, &b.save);
        ratio("before: save / naive", &b.save, &naive_save);
        report("before: snapshot rollback", b.rollback.clone());
        ratio("rollback / before", &rollback, &b.rollback);
        ratio("before: rollback / naive", &b.rollback, &naive_rollback);
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the end: {}", l.trim());
    }
}
