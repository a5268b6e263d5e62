//! A repository attacking its user, and inputs that used to panic: each case seen from the
//! CLI. Hermetic like the other end-to-end tests (temp HOME, fixed clock, real git).

use crate::harness;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{Env, git};

/// Commit `link -> target` into the repository, as a cloned repository would bring it.
fn commit_link(env: &Env, link: &str, target: &Path) {
    let p = env.repo().join(link);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &p).unwrap();
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "hostile link"]);
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn run_once(env: &Env) -> harness::Run {
    env.run(&[
        "run",
        "--agent",
        "cmd:echo hi",
        "--max-iterations",
        "1",
        "--validate",
        "true",
        "the task",
    ])
}

#[test]
fn a_symlinked_run_lock_leaves_its_target_untouched() {
    let env = Env::new();
    let target = env.root().join("somefile");
    std::fs::write(&target, "precious\n").unwrap();
    commit_link(&env, ".ralph/run.lock", &target);
    let r = run_once(&env);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("run.lock") && r.stderr.contains("symbolic link"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
}

/// The agent deletes `.ralph/` (the run lock with it) and keeps working: a second loop in
/// the same directory is still refused, and `status` still sees the first one, by the run
/// lock the harness keeps in the git directory.
#[test]
fn an_agent_that_wipes_the_ralph_directory_does_not_let_a_second_loop_start_beside_it() {
    let env = Env::new();
    let marker = env.root().join("wiped");
    let agent = format!(
        "cmd:rm -rf .ralph && touch {} && sleep 30",
        marker.display()
    );
    let first = env.spawn(&[
        "run",
        "--agent",
        &agent,
        "--validate",
        "true",
        "--max-iterations",
        "1",
        "the task",
    ]);
    crate::harness::wait_for(&marker, Duration::from_secs(30));
    assert!(!env.repo().join(".ralph/run.lock").exists());
    let second = run_once(&env);
    assert_ne!(second.code, 0, "{}", second.stdout);
    assert!(
        second.stderr.contains("a loop is already running"),
        "{}",
        second.stderr
    );
    let (status, _) = first.interrupt(Duration::from_secs(30));
    assert!(status.code().is_some(), "{status:?}");
    // Once the first has ended, a loop starts here again.
    let third = run_once(&env);
    assert!(
        !third.stderr.contains("a loop is already running"),
        "{}",
        third.stderr
    );
}

/// The agent deletes `.ralph/logs` mid-iteration: the iteration's log (with what the agent
/// printed after) and its prompt are there again once the iteration ends.
#[test]
fn an_agent_that_wipes_the_logs_does_not_lose_its_iterations_log_or_prompt() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "--agent",
        "cmd:rm -rf .ralph/logs && echo printed-after-the-wipe",
        "--validate",
        "true",
        "the task",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let logs = env.repo().join(".ralph/logs");
    let log = std::fs::read_to_string(logs.join("iteration-001.log")).unwrap();
    assert!(log.contains("printed-after-the-wipe"), "{log}");
    assert!(log.contains("iteration 1 ended"), "{log}");
    let prompt = std::fs::read_to_string(logs.join("iteration-001.prompt.md")).unwrap();
    assert!(prompt.contains("the task"), "{prompt}");
}

#[test]
fn symlinked_state_files_and_directories_are_refused_and_nothing_is_written_outside() {
    for link in [
        ".ralph",
        ".ralph/logs",
        ".ralph/logs/summary.csv",
        ".ralph/progress.md",
    ] {
        let env = Env::new();
        let outside = env.root().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let target = if link.ends_with(".csv") || link.ends_with(".md") {
            let f = outside.join("file");
            std::fs::write(&f, "precious\n").unwrap();
            f
        } else {
            // Named like the temporary file of a killed write: a start removes those from
            // `.ralph/` and its logs, never through a link.
            std::fs::write(outside.join(".tmp-precious"), "precious\n").unwrap();
            outside.clone()
        };
        let before = files_under(&outside);
        commit_link(&env, link, &target);
        let r = run_once(&env);
        assert_ne!(r.code, 0, "{link}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("refusing to use"), "{link}: {}", r.stderr);
        assert_eq!(files_under(&outside), before, "{link}");
        if target.is_file() {
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
        }
    }
}

/// A file of `.ralph/` the harness reads or writes, linked out of the repository by a
/// hostile clone: the run is refused as the repository's to fix (exit 64, not 70), the
/// message names the file and how to go on, and the link's target is untouched. The same
/// for a spec's `.progress.md` under `implement`.
#[test]
fn a_linked_harness_file_is_refused_with_exit_64_naming_it() {
    for link in [
        ".ralph/progress.md",
        ".ralph/feedback.md",
        ".ralph/run.json",
        ".ralph/logs/summary.csv",
        "specs/x/.progress.md",
    ] {
        let env = Env::new();
        let target = env.root().join("outside-file");
        std::fs::write(&target, "precious\n").unwrap();
        let r = if link.starts_with("specs/") {
            std::fs::create_dir_all(env.repo().join("specs/x")).unwrap();
            std::fs::write(env.repo().join("specs/x/tasks.md"), "- [ ] 1.1 do it\n").unwrap();
            std::fs::write(env.repo().join("specs/.current-spec"), "x\n").unwrap();
            commit_link(&env, link, &target);
            env.run(&["implement", "--agent", "cmd:true"])
        } else {
            commit_link(&env, link, &target);
            run_once(&env)
        };
        assert_eq!(r.code, 64, "{link}: {}\n{}", r.stdout, r.stderr);
        let file = env.repo().join(link);
        assert!(
            r.stderr
                .contains(&format!("refusing to use {}", file.display()))
                && r.stderr.contains(&format!("rm {}", file.display())),
            "{link}: {}",
            r.stderr
        );
        assert_eq!(r.stderr.matches("hint:").count(), 1, "{link}: {}", r.stderr);
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "precious\n",
            "{link}"
        );
    }
}

/// An earlier run's logs are set aside under `.ralph/logs/runs/`: a link there leads
/// nothing out of the repository.
#[test]
fn a_linked_earlier_runs_directory_is_refused_and_nothing_is_written_outside() {
    let env = Env::new();
    assert_eq!(run_once(&env).code, 0);
    let outside = env.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, env.repo().join(".ralph/logs/runs")).unwrap();
    let r = run_once(&env);
    assert_eq!(r.code, 64, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("refusing to use"), "{}", r.stderr);
    assert_eq!(
        r.stderr.matches("hint:").count(),
        1,
        "said once: {}",
        r.stderr
    );
    assert!(files_under(&outside).is_empty());
    assert!(
        env.repo().join(".ralph/logs/iteration-001.log").exists(),
        "the earlier run's logs stay where they were"
    );
}

#[test]
fn a_current_spec_pointing_outside_is_refused() {
    let env = Env::new();
    let other = env.root().join("other/specs/x");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("tasks.md"), "- [ ] 1.1 do it\n").unwrap();
    std::fs::create_dir_all(env.repo().join("specs")).unwrap();
    std::fs::write(
        env.repo().join("specs/.current-spec"),
        "../../other/specs/x\n",
    )
    .unwrap();
    let r = env.run(&["implement", "--agent", "cmd:true"]);
    assert_eq!(r.code, 64, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(".current-spec"), "{}", r.stderr);
    assert_eq!(files_under(&other), vec!["tasks.md".to_string()]);
}

/// A run record as it would arrive through `git pull` (never created on this machine).
fn cloned_run(env: &Env, hex: &str, context: serde_json::Value) -> String {
    let id = format!("{hex}-run-cloned");
    let line = serde_json::json!({
        "id": id,
        "loop-type": "ralph",
        "status": "pending",
        "iteration": 1,
        "context": context,
        "created-at": 1_700_000_000_000i64,
        "updated-at": 1_700_000_000_000i64,
    });
    let dir = env.repo().join(".taskdaemon/store");
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = std::fs::read_to_string(dir.join("runs.jsonl")).unwrap_or_default();
    text.push_str(&format!("{line}\n"));
    std::fs::write(dir.join("runs.jsonl"), text).unwrap();
    id
}

#[test]
fn store_check_refuses_paths_outside_the_repository() {
    let env = Env::new();
    let id = cloned_run(
        &env,
        "a1b2c3",
        serde_json::json!({"task": "t", "specs-dir": "/tmp/outside-specs", "plan-file": "../../x/plan.md"}),
    );
    let r = env.run(&["store", "check"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&id)
            && r.stdout.contains("context.specs-dir")
            && r.stdout.contains("outside the repository"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("context.plan-file"), "{}", r.stdout);
}

#[test]
fn new_records_store_repository_relative_paths() {
    let env = Env::new();
    std::fs::write(env.repo().join("plan.md"), "# P\n\n## Goals\ng\n").unwrap();
    let r = env.run(&["plan", "new", "P", "--file", "plan.md"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let stored = std::fs::read_to_string(env.repo().join(".taskdaemon/store/plans.jsonl")).unwrap();
    assert!(stored.contains("\"file\":\"plan.md\""), "{stored}");
    let shown = env.run(&["show", "P", "--json"]);
    assert!(
        shown
            .stdout
            .contains(&env.repo().join("plan.md").display().to_string()),
        "{}",
        shown.stdout
    );
    let r = env.run(&["plan", "new", "Q", "--file", "../elsewhere.md"]);
    assert_eq!(r.code, 64, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("outside the repository"), "{}", r.stderr);
}

struct DaemonGuard<'a>(&'a Env);
impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["daemon", "stop"]);
    }
}

fn wait_for_note(env: &Env, id: &str) -> String {
    let start = Instant::now();
    loop {
        let r = env.run(&["show", id, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
        let rec = v.get("record").unwrap_or(&v);
        if rec["status"] == "blocked" {
            return rec["note"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "run {id} never blocked: {}",
            r.stdout
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_daemon_runs_no_command_and_uses_no_outside_path_from_a_cloned_record() {
    let env = Env::new();
    let pwned = env.root().join("pwned");
    let cmd_run = cloned_run(
        &env,
        "d4e5f6",
        serde_json::json!({"task": "t", "agent": format!("cmd:touch {}", pwned.display())}),
    );
    let path_run = cloned_run(
        &env,
        "a7b8c9",
        serde_json::json!({"task": "t", "specs-dir": env.root().join("outside").display().to_string()}),
    );
    let r = env.run(&["daemon", "start", "--agent", "cmd:true", "--tick", "0.2"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let _guard = DaemonGuard(&env);
    let note = wait_for_note(&env, &cmd_run);
    assert!(
        note.contains("not created on this machine") && note.contains("store trust"),
        "{note}"
    );
    let note = wait_for_note(&env, &path_run);
    assert!(note.contains("outside the repository"), "{note}");
    assert!(!pwned.exists());
    assert!(!env.root().join("outside").exists());
}

#[test]
fn the_daemon_socket_is_private_under_umask_000() {
    let env = Env::new();
    let mut c = env.cmd();
    c.env("TASKDAEMON_AGENT", "cmd:true");
    let prog = c.get_program().to_owned();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" daemon start --tick 0.2")
        .arg(&prog)
        .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .current_dir(env.repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _guard = DaemonGuard(&env);
    let dir = env.repo().join(".git/taskdaemon/daemon");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("sock")), 0o600);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(dir.parent().unwrap()), 0o700);
    let r = env.run(&["daemon", "status"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

/// `sh -c "taskdaemon ARGS | head -c1"` (or with `2>&1`): taskdaemon's own exit status and
/// its stderr.
fn piped(env: &Env, args: &str, both: bool) -> (i32, String) {
    let c = env.cmd();
    let redirect = if both { "2>&1" } else { "2>\"$1\"" };
    let errfile = env.root().join("stderr.txt");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "\"$0\" {args} {redirect} | head -c1 >/dev/null; exit ${{PIPESTATUS[0]}}"
        ))
        .arg(c.get_program())
        .arg(&errfile)
        .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .current_dir(env.repo())
        .output()
        .unwrap();
    let err = std::fs::read_to_string(&errfile).unwrap_or_default()
        + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let env = Env::new();
    assert_eq!(env.run(&["init"]).code, 0);
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "init"]);
    assert_eq!(env.run(&["snapshot", "save", "one"]).code, 0);
    for (args, both) in [
        ("loops ralph", false),
        ("loops", false),
        ("snapshot list", false),
        ("--help", true),
        ("run --iteration-timeout 99999999999999999999h x", true),
        ("loops nosuchloop", true),
    ] {
        let (code, err) = piped(&env, args, both);
        assert!(!err.contains("panicked"), "{args}: {err}");
        assert!(code == 0 || code == 64, "{args}: exit {code}: {err}");
    }
}

#[test]
fn huge_durations_are_a_usage_error() {
    let env = Env::new();
    let r = env.run(&["run", "--iteration-timeout", "99999999999999999999h", "x"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("too long"), "{}", r.stderr);
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "iteration-timeout: 99999999999999999999h\n",
    )
    .unwrap();
    let r = env.run(&["run", "--agent", "cmd:true", "x"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("config.yaml:1:") && r.stderr.contains("too long"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_bad_template_fails_at_load_with_exit_64() {
    let env = Env::new();
    let loops = env.repo().join(".taskdaemon/loops");
    std::fs::create_dir_all(&loops).unwrap();
    let deep = format!(
        "{}x{}",
        "{{#if progress}}".repeat(6000),
        "{{/if}}".repeat(6000)
    );
    for (name, template) in [
        ("paths", "{{iteration.a.b.c}}".to_string()),
        ("up", "{{../../x}}".to_string()),
        ("deep", deep),
    ] {
        let yaml = format!(
            "{name}:\n  description: d\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iterations: 3\n  inputs: []\n  outputs: []\n  prompt-template: |\n    {template}\n"
        );
        std::fs::write(loops.join(format!("{name}.yaml")), yaml).unwrap();
        let r = env.run(&["run", "--loop", name, "--agent", "cmd:true", "x"]);
        assert_eq!(r.code, 64, "{name}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("template"), "{name}: {}", r.stderr);
        assert!(!env.repo().join(".ralph/run.json").exists(), "{name}");
        std::fs::remove_file(loops.join(format!("{name}.yaml"))).unwrap();
    }
}

#[test]
fn harness_written_files_keep_their_mode() {
    let env = Env::new();
    let gi = env.repo().join(".gitignore");
    std::fs::write(&gi, "target/\n").unwrap();
    std::fs::set_permissions(&gi, std::fs::Permissions::from_mode(0o640)).unwrap();
    let c = env.cmd();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 022; exec \"$0\" init")
        .arg(c.get_program())
        .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .current_dir(env.repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&gi), 0o640);
    assert!(
        std::fs::read_to_string(&gi)
            .unwrap()
            .contains(".ralph/logs/")
    );
    for f in [".gitattributes", ".taskdaemon/config.yaml"] {
        let p = env.repo().join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o644, "{f}");
        }
    }
}

#[test]
fn a_plan_linked_out_of_the_repository_never_reaches_a_prompt() {
    let env = Env::new();
    let secret = env.root().join("outside-plan.md");
    std::fs::write(&secret, "# Plan\n\n## Keys\nSECRET-PLAN-TEXT\n").unwrap();
    commit_link(&env, ".ralph/plan.md", &secret);
    let r = run_once(&env);
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("refusing to use"), "{}", r.stderr);
    let mut seen = Vec::new();
    let logs = env.repo().join(".ralph/logs");
    for dir in [env.repo().join(".ralph"), logs] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_file() && !p.is_symlink() {
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                if text.contains("SECRET-PLAN-TEXT") {
                    seen.push(p);
                }
            }
        }
    }
    assert!(seen.is_empty(), "the outside plan was read into {seen:?}");
    assert!(!r.stdout.contains("SECRET-PLAN-TEXT") && !r.stderr.contains("SECRET-PLAN-TEXT"));
}
