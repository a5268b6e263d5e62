//! A rollback is a transaction: SIGKILLed at any point (at each step through the test
//! hook, and at random moments in real time), the next snapshot command leaves the work
//! tree, index and HEAD exactly the old or the new state, and `git commit` works. Crafted
//! tags are refused, stale locks of a killed snapshot command recovered, a live holder
//! reported with its pid, and the snapshot plumbing runs none of the user's hooks.

#[allow(dead_code)]
use crate::snapshot_state;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Env, git, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use snapshot_state::{State, state};

/// `TASKDAEMON_NOW` of the harness, in seconds: the name of the first manual snapshot.
const NOW_SECS: i64 = 1_795_262_400;

/// A repository with a snapshot of state A, then state B: another branch with a commit,
/// 120 files changed, 40 added, some deleted, a staged change and an untracked file.
/// Returns (the tag of A, A, B).
fn two_states(env: &Env) -> (String, State, State) {
    let repo = env.repo();
    for i in 0..160 {
        std::fs::create_dir_all(repo.join(format!("d{}", i % 8))).unwrap();
        std::fs::write(
            repo.join(format!("d{}/f{i}.txt", i % 8)),
            format!("a {i}\n"),
        )
        .unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "a"]);
    std::fs::write(repo.join("README.md"), "a, not staged\n").unwrap();
    let a = state(&repo);
    let tag = run_ok(env, &["snapshot", "save", "A", "--json"]);
    let tag: serde_json::Value = serde_json::from_str(&tag).unwrap();
    let tag = tag["tag"].as_str().unwrap().to_string();
    git(&repo, &["switch", "-q", "-c", "feat"]);
    for i in 0..120 {
        std::fs::write(
            repo.join(format!("d{}/f{i}.txt", i % 8)),
            format!("b {i}\n"),
        )
        .unwrap();
    }
    for i in 120..140 {
        std::fs::remove_file(repo.join(format!("d{}/f{i}.txt", i % 8))).unwrap();
    }
    for i in 0..40 {
        std::fs::create_dir_all(repo.join(format!("n{}", i % 4))).unwrap();
        std::fs::write(repo.join(format!("n{}/g{i}.txt", i % 4)), "new\n").unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "b"]);
    std::fs::write(repo.join("d0/f0.txt"), "b, staged\n").unwrap();
    git(&repo, &["add", "d0/f0.txt"]);
    std::fs::write(repo.join("untracked.txt"), "b\n").unwrap();
    let b = state(&repo);
    (tag, a, b)
}

fn run_ok(env: &Env, args: &[&str]) -> String {
    let r = env.run(args);
    assert_eq!(r.code, 0, "{args:?}: {}{}", r.stdout, r.stderr);
    r.stdout
}

fn spawn(env: &Env, args: &[&str], pause: Option<&str>) -> Child {
    let mut c = env.cmd();
    c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    if let Some(step) = pause {
        c.env("TASKDAEMON_TEST_ROLLBACK_PAUSE", step);
    }
    c.spawn().unwrap()
}

fn sigkill(child: &mut Child) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
    let _ = child.wait();
}

/// Spawn `args` paused at `step`, wait until it stops there, kill it.
fn kill_at(env: &Env, args: &[&str], step: &str) {
    let mut child = spawn(env, args, Some(step));
    let marker = env.repo().join(format!(".git/taskdaemon/paused-{step}"));
    wait_for(&marker, Duration::from_secs(60));
    sigkill(&mut child);
    std::fs::remove_file(marker).unwrap();
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ended {
    Old,
    New,
}

/// After a kill: the next `snapshot status` recovers; the state is exactly A or B, no
/// `index.lock` is left, and `git commit` works.
fn check_after_kill(env: &Env, a: &State, b: &State, what: &str, exact_step: bool) -> Ended {
    let repo = env.repo();
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 0, "{what}: status after the kill: {}", r.stderr);
    let now = state(&repo);
    let ended = if now == *a {
        Ended::New
    } else if now == *b {
        Ended::Old
    } else {
        let diff: Vec<_> = now
            .files
            .iter()
            .filter(|(p, e)| a.files.get(*p) != Some(*e) && b.files.get(*p) != Some(*e))
            .map(|(p, _)| p.clone())
            .take(5)
            .collect();
        panic!(
            "{what}: neither the old nor the new state (head {} branch {}; files unlike both: {diff:?}; index equal to old {} new {})\n{}",
            now.head.trim(),
            now.branch.trim(),
            now.index == b.index,
            now.index == a.index,
            r.stderr
        );
    };
    if exact_step {
        assert!(
            r.stderr.contains("was interrupted"),
            "{what}: the recovery says nothing: {}",
            r.stderr
        );
    }
    assert!(
        !repo.join(".git/index.lock").exists(),
        "{what}: index.lock left"
    );
    assert!(!repo.join(".git/taskdaemon/rollback.journal").exists());
    git(
        &repo,
        &["commit", "-q", "--allow-empty", "-m", "after the kill"],
    );
    ended
}

/// Kill the rollback exactly at each step (and a recovery at its own step): steps before
/// the first destructive one end in the old state, the later ones in the new.
#[test]
fn a_rollback_killed_at_each_step_ends_old_or_new_exactly() {
    let steps = [
        ("prepared", Ended::Old),
        ("tagged", Ended::Old),
        ("locked", Ended::Old),
        ("work-tree", Ended::New),
        ("refs", Ended::New),
        ("index", Ended::New),
    ];
    for (step, want) in steps {
        for round in 0..2 {
            let env = Env::new();
            let (tag, a, b) = two_states(&env);
            kill_at(&env, &["snapshot", "rollback", &tag], step);
            if round == 1 && want == Ended::New {
                // The recovery itself killed: the one after still finishes it.
                kill_at(&env, &["snapshot", "status"], "recovering");
            }
            let ended = check_after_kill(&env, &a, &b, &format!("killed at {step}"), true);
            assert_eq!(ended, want, "killed at {step}");
        }
    }
}

/// The recovery of a rollback killed while restoring, with a file changed since, saves
/// what only the mix holds; a stale snapshot tag lock is there too. It removes the lock
/// under the number lock and lets go of that before it saves (which takes it again).
#[test]
fn a_recovery_that_saves_what_it_found_beside_a_stale_tag_lock_finishes() {
    let env = Env::new();
    let (tag, _, _) = two_states(&env);
    kill_at(&env, &["snapshot", "rollback", &tag], "work-tree");
    let repo = env.repo();
    std::fs::write(repo.join("d0/f0.txt"), "c 0\n").unwrap();
    let tag_lock = repo.join(".git/refs/tags/manual-1.lock");
    std::fs::write(&tag_lock, "").unwrap();
    let pre_rollbacks = || git(&repo, &["tag", "-l", "pre-rollback-*"]).lines().count();
    let before = pre_rollbacks();
    let mut child = spawn(&env, &["snapshot", "status"], None);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(60) {
            sigkill(&mut child);
            panic!("the recovery never finished (a lock it waits for is its own)");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(!tag_lock.exists(), "the stale tag lock is left");
    assert_eq!(
        pre_rollbacks(),
        before + 1,
        "what only the mix held is not saved"
    );
}

/// A seeded generator (fastrand): the seed is printed, so a failure can be replayed with
/// `ROLLBACK_KILL_SEED`.
struct Rng(fastrand::Rng);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }
}

/// SIGKILL at random moments of a real rollback (no pauses): `ROLLBACK_KILLS` times
/// (default 24), each delay drawn up to the time one whole rollback takes here.
#[test]
fn random_sigkills_of_rollback_end_old_or_new_exactly() {
    let kills: usize = std::env::var("ROLLBACK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seed = std::env::var("ROLLBACK_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("ROLLBACK_KILL_SEED={seed}");
    let mut rng = Rng(fastrand::Rng::with_seed(seed));

    // How long one rollback takes on this machine now.
    let env = Env::new();
    let (tag, _, _) = two_states(&env);
    let start = Instant::now();
    run_ok(&env, &["snapshot", "rollback", &tag]);
    let whole = start.elapsed().as_micros().max(1000) as u64;

    let (mut old, mut new) = (0, 0);
    for k in 0..kills {
        let env = Env::new();
        let (tag, a, b) = two_states(&env);
        let delay = Duration::from_micros(rng.next() % whole);
        let mut child = spawn(&env, &["snapshot", "rollback", &tag], None);
        std::thread::sleep(delay);
        sigkill(&mut child);
        match check_after_kill(&env, &a, &b, &format!("kill {k} after {delay:?}"), false) {
            Ended::Old => old += 1,
            Ended::New => new += 1,
        }
    }
    eprintln!("{kills} random kills (rollback ~{whole} µs): {old} ended old, {new} new");
}

/// A tag whose trailers point elsewhere: refused with a clear message, nothing deleted,
/// nothing moved.
#[test]
fn a_crafted_tag_deletes_nothing_and_is_refused() {
    let env = Env::new();
    let repo = env.repo();
    git(&repo, &["branch", "other"]);
    git(&repo, &["tag", "v1"]);
    git(&repo, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    let out = run_ok(&env, &["snapshot", "save", "real", "--json"]);
    let real: serde_json::Value = serde_json::from_str(&out).unwrap();
    let commit = real["commit"].as_str().unwrap().to_string();
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let tree = git(&repo, &["rev-parse", "HEAD^{tree}"]).trim().to_string();
    let blob = git(&repo, &["rev-parse", "HEAD:README.md"])
        .trim()
        .to_string();
    let craft = |name: &str, branch: &str, head: &str| {
        let msg = format!(
            "evil\n\nSnapshot-Kind: manual\nSnapshot-Branch: {branch}\nSnapshot-Head: {head}\nSnapshot-Time: 1\nSnapshot-Seq: 99\n"
        );
        std::fs::write(env.root().join("msg"), msg).unwrap();
        let msg_file = env.root().join("msg");
        git(
            &repo,
            &["tag", "-a", "-F", msg_file.to_str().unwrap(), name, &commit],
        );
    };
    let cases = [
        (
            "manual-1",
            "refs/heads/other",
            "unborn",
            "deletes no branch",
        ),
        (
            "manual-2",
            "refs/tags/v1",
            head.as_str(),
            "not a valid branch",
        ),
        (
            "manual-3",
            "refs/remotes/origin/main",
            head.as_str(),
            "not a valid branch",
        ),
        (
            "manual-4",
            "refs/heads/a..b",
            head.as_str(),
            "not a valid branch",
        ),
        ("manual-5", "HEAD", head.as_str(), "not a valid branch"),
        ("manual-6", "detached", "v1", "not a commit id"),
        (
            "manual-7",
            "detached",
            tree.as_str(),
            "not an existing commit",
        ),
        (
            "manual-8",
            "refs/heads/other",
            blob.as_str(),
            "not an existing commit",
        ),
        (
            "manual-9",
            "detached",
            &"0".repeat(40),
            "not an existing commit",
        ),
    ];
    for (name, branch, h, _) in &cases {
        craft(name, branch, h);
    }
    std::fs::write(repo.join("README.md"), "work in progress\n").unwrap();
    let refs = git(&repo, &["for-each-ref"]);
    let before = state(&repo);
    for (name, branch, h, says) in &cases {
        let r = env.run(&["snapshot", "rollback", name]);
        assert_eq!(
            r.code, 64,
            "{name} ({branch} {h}): {}{}",
            r.stdout, r.stderr
        );
        assert!(r.stderr.contains(says), "{name}: {}", r.stderr);
        assert!(r.stderr.contains(name), "{name}: {}", r.stderr);
        assert_eq!(git(&repo, &["for-each-ref"]), refs, "{name} changed a ref");
        assert_eq!(state(&repo), before, "{name} changed the repository");
    }
    // The genuine snapshot still rolls back, and its safety snapshot records the ref moved.
    run_ok(
        &env,
        &["snapshot", "rollback", real["tag"].as_str().unwrap()],
    );
    let pre = git(&repo, &["tag", "--list", "pre-rollback-*"]);
    let msg = git(&repo, &["tag", "-l", "--format=%(contents)", pre.trim()]);
    assert!(
        msg.contains(&format!("Snapshot-Ref: refs/heads/main {head} {head}")),
        "{msg}"
    );
    assert!(git(&repo, &["branch", "--list", "other"]).contains("other"));
}

/// The pid written in `snapshot.lock` by a process that no longer runs.
fn dead_pid() -> i32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id() as i32;
    c.wait().unwrap();
    pid
}

#[test]
fn stale_locks_of_a_dead_owner_are_recovered_with_a_message() {
    let env = Env::new();
    let repo = env.repo();
    let private = repo.join(".git/taskdaemon");
    run_ok(&env, &["snapshot", "status"]);
    let dead = dead_pid();
    std::fs::write(private.join("snapshot.lock"), format!("{dead}\n")).unwrap();
    std::fs::write(private.join("snapshot.index.lock"), "").unwrap();
    // flock files of others in the same directory are not ours to remove.
    std::fs::write(private.join("worktrees.lock"), "").unwrap();
    std::fs::write(private.join("merge.lock"), "").unwrap();
    let tag_lock = repo.join(format!(".git/refs/tags/manual-{NOW_SECS}.lock"));
    std::fs::write(&tag_lock, "").unwrap();
    // A git that the dead owner left running is waited for.
    let mut orphan = std::process::Command::new("sleep")
        .arg("1")
        .env("TASKDAEMON_SNAPSHOT_OWNER", dead.to_string())
        .spawn()
        .unwrap();
    std::fs::write(repo.join("README.md"), "edited\n").unwrap();
    let r = env.run(&["snapshot", "save", "after a crash"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        orphan.try_wait().unwrap().is_some(),
        "recovery did not wait for the dead owner's git"
    );
    for lock in ["snapshot.index.lock", &format!("manual-{NOW_SECS}.lock")] {
        assert!(
            r.stderr.contains("removed the stale lock") && r.stderr.contains(lock),
            "{lock}: {}",
            r.stderr
        );
    }
    assert!(r.stderr.contains(&format!("pid {dead}")), "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!("saved manual-{NOW_SECS}")),
        "{}",
        r.stdout
    );
    assert!(!tag_lock.exists() && !private.join("snapshot.index.lock").exists());
    assert!(private.join("worktrees.lock").exists() && private.join("merge.lock").exists());
    // Nothing stale any more: the next command says nothing.
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 0);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn a_live_holder_is_reported_with_its_pid_then_its_kill_recovered() {
    let env = Env::new();
    let repo = env.repo();
    run_ok(&env, &["snapshot", "save", "base"]);
    std::fs::write(repo.join("README.md"), "edited\n").unwrap();
    let before = state(&repo);
    let mut child = spawn(
        &env,
        &["snapshot", "rollback", &format!("manual-{NOW_SECS}")],
        Some("tagged"),
    );
    wait_for(
        &repo.join(".git/taskdaemon/paused-tagged"),
        Duration::from_secs(60),
    );
    for args in [
        &["snapshot", "status"][..],
        &["snapshot", "save", "x"],
        &["snapshot", "diff", "pre-rollback-1795262400"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("(pid {})", child.id())),
            "{args:?}: {}",
            r.stderr
        );
    }
    sigkill(&mut child);
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("interrupted before it changed anything"),
        "{}",
        r.stderr
    );
    assert_eq!(state(&repo), before);
}

/// `run` finds an interrupted rollback before its loop starts and finishes it.
#[test]
fn run_finishes_an_interrupted_rollback_first() {
    let env = Env::new();
    let (tag, a, _) = two_states(&env);
    kill_at(&env, &["snapshot", "rollback", &tag], "work-tree");
    let r = env.run(&[
        "run",
        "noop",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
    ]);
    assert!(
        r.stderr.contains("was interrupted half way"),
        "{}",
        r.stderr
    );
    // Finished before the run made its own files: nothing of the run's was in the way.
    assert!(!r.stderr.contains("what was found"), "{}", r.stderr);
    let now = state(&env.repo());
    assert_eq!((now.head, now.branch), (a.head, a.branch));
}

#[test]
fn snapshot_plumbing_runs_none_of_the_users_hooks() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let repo = env.repo();
    let log = env.root().join("hooks.log");
    let hooks = repo.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for name in [
        "reference-transaction",
        "post-index-change",
        "post-checkout",
        "pre-commit",
        "post-commit",
        "pre-auto-gc",
    ] {
        let p = hooks.join(name);
        let script = format!("#!/bin/sh\necho {name} >> '{}'\n", log.display());
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(repo.join("README.md"), "edited\n").unwrap();
    std::fs::write(repo.join("new.txt"), "new\n").unwrap();
    run_ok(&env, &["snapshot", "save", "one"]);
    git(&repo, &["switch", "-q", "-c", "feat"]); // the user's own: its hooks run
    let _ = std::fs::remove_file(&log);
    let first = format!("manual-{NOW_SECS}");
    run_ok(&env, &["snapshot", "status"]);
    run_ok(&env, &["snapshot", "diff", &first]);
    run_ok(&env, &["snapshot", "rollback", &first]);
    run_ok(&env, &["snapshot", "save", "two"]);
    run_ok(&env, &["snapshot", "rollback", "pre-rollback-1795262400"]);
    run_ok(&env, &["snapshot", "list"]);
    let fired = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(fired, "", "snapshot commands ran the user's hooks");
    // The hooks do work: the user's own commit runs them.
    git(&repo, &["commit", "-qam", "user"]);
    let fired = std::fs::read_to_string(&log).unwrap();
    assert!(fired.contains("pre-commit"), "{fired}");
}

/// A git of the user's holding `index.lock` when the recovery comes: it says what waits,
/// changes nothing, and finishes once that lock is gone.
#[test]
fn an_interrupted_rollback_waits_for_the_users_index_lock() {
    let env = Env::new();
    let repo = env.repo();
    let (tag, a, _) = two_states(&env);
    kill_at(&env, &["snapshot", "rollback", &tag], "work-tree");
    // Ours: the marked lock. Replaced by a foreign one, as if the user's git took it.
    let lock = repo.join(".git/index.lock");
    assert!(
        std::fs::read_to_string(&lock)
            .unwrap()
            .starts_with("taskdaemon rollback")
    );
    std::fs::write(&lock, "").unwrap();
    let mixed = state(&repo);
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("interrupted half way and cannot be finished yet")
            && r.stderr.contains("git is busy"),
        "{}",
        r.stderr
    );
    assert_eq!(state(&repo), mixed);
    std::fs::remove_file(&lock).unwrap();
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(state(&repo), a);
}

/// Someone worked on after the kill (a file changed to a third content, a commit): the
/// recovery saves that first, then finishes.
#[test]
fn work_done_after_the_kill_is_saved_before_the_recovery_finishes() {
    let env = Env::new();
    let repo = env.repo();
    let (tag, a, _) = two_states(&env);
    kill_at(&env, &["snapshot", "rollback", &tag], "refs");
    std::fs::write(repo.join("d1/f1.txt"), "third content\n").unwrap();
    let r = env.run(&["snapshot", "status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("what was found after the interruption"),
        "{}",
        r.stderr
    );
    assert_eq!(state(&repo), a);
    let found = git(&repo, &["tag", "--list", "pre-rollback-*-2"]);
    let found = found.trim();
    assert!(!found.is_empty(), "{}", git(&repo, &["tag"]));
    assert_eq!(
        git(&repo, &["show", &format!("{found}:d1/f1.txt")]),
        "third content\n"
    );
}
