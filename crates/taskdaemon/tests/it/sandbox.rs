//! `--sandbox`: agents (and validation commands) confined to their work tree. Real bwrap,
//! real git, real processes; hostile agents are shell scripts. The test environments live
//! under the target directory, not /tmp: the sandbox's /tmp is private.
//!
//! Without bwrap these tests skip with a loud message, except under CI (`CI=true`), where
//! they fail. docker/podman tests run only where `docker info`/`podman info` answers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{Env, events, fixture, git, pid_alive, wait_timeout};
use serde_json::Value;

const SECRET: &str = "SECRET-KEY-MATERIAL-4711";

pub(crate) fn have(tool: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(tool).is_file())
}

/// Whether bwrap works here; skips loudly, or fails under CI.
pub(crate) fn bwrap_or_skip(test: &str) -> bool {
    let works = have("bwrap")
        && Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !works {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: bwrap is missing or does not work under CI (.ci/run installs bubblewrap)"
        );
        eprintln!(
            "\n*** SKIPPED {test}: bubblewrap (bwrap) is not installed or user namespaces are off ***\n"
        );
    }
    works
}

/// A test environment outside /tmp (the sandbox's /tmp is private, so files the test puts
/// beside the repository must lie elsewhere), with a home holding secrets and a sibling
/// directory: under the build's temp dir, or `/var/tmp` when the checkout itself lies
/// under /tmp (a clone in /tmp, as CI may make).
pub(crate) fn sandbox_env() -> Env {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.starts_with("/tmp") && Path::new("/var/tmp").is_dir() {
        Path::new("/var/tmp")
    } else {
        target
    };
    let env = Env::new_in(base);
    let ssh = env.home().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), SECRET).unwrap();
    let sibling = env.root().join("sibling");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("keep.txt"), "keep me\n").unwrap();
    env
}

/// A PATH of symlinks (under the environment, not /tmp) to the tools on the test's PATH,
/// without the agent CLIs and without `leave_out`.
pub(crate) fn path_without(env: &Env, leave_out: &[&str]) -> OsString {
    let bin = env.root().join(format!("bin-{}", leave_out.join("-")));
    std::fs::create_dir_all(&bin).unwrap();
    let skip = ["claude", "codex", "gemini", "opencode", "amp"];
    for d in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            let link = bin.join(&name);
            if skip.contains(&n.as_ref()) || leave_out.contains(&n.as_ref()) || link.exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), &link);
        }
    }
    bin.into_os_string()
}

fn script(env: &Env, name: &str, body: &str) -> PathBuf {
    let p = env.root().join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// Every file under `dir`, read as text (lossy), joined.
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.push_str(&String::from_utf8_lossy(&b));
        }
    }
    out
}

/// The hostile part every fake agent here plays: a file in the home directory, a sibling
/// directory removed, the SSH keys read.
const HOSTILE: &str = r#"touch "$HOME/outside-marker"
rm -rf "$SIBLING"
cat "$HOME"/.ssh/id_*
"#;

fn assert_nothing_outside_changed(env: &Env) {
    assert!(
        !env.home().join("outside-marker").exists(),
        "a file appeared in the home directory"
    );
    assert_eq!(
        std::fs::read_to_string(env.root().join("sibling/keep.txt")).unwrap(),
        "keep me\n",
        "the sibling directory was touched"
    );
}

#[test]
fn bwrap_confines_a_hostile_agent_while_its_work_commits_and_the_loop_completes() {
    if !bwrap_or_skip("bwrap_confines_a_hostile_agent") {
        return;
    }
    let env = sandbox_env();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "{HOSTILE}echo \"iteration $TASKDAEMON_ITERATION\" >> work.txt\ngit add work.txt && git commit -qm 'sandboxed work'\necho done\n"
        ),
    );
    let escape = env.root().join("validation-escape");
    let validate = format!("test -f work.txt && ! touch {}", escape.display());
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .env("SIBLING", env.root().join("sibling"))
        .args([
            "run",
            "work in the tree",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--validate",
            &validate,
            "--sandbox",
            "bwrap",
            "--max-iterations",
            "2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_nothing_outside_changed(&env);
    assert!(!escape.exists(), "the validation command wrote outside");
    let log = git(&env.repo(), &["log", "--format=%s"]);
    assert!(log.contains("sandboxed work"), "{log}");
    assert!(
        stderr.contains("sandbox bwrap (network shared)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sandbox: 2 write(s) outside the work tree denied"),
        "{stderr}"
    );
    let logs = all_text(&env.repo().join(".ralph/logs"));
    assert!(logs.contains("Read-only file system"), "{logs}");
    for text in [&logs, &stderr.to_string()] {
        assert!(!text.contains(SECRET), "the secret was read: {text}");
    }
}

#[test]
fn bwrap_requested_without_bwrap_exits_64_with_an_install_hint_before_anything_changes() {
    let env = spec_env("- [ ] 1.1 Only\n  - **Verify**: `true`\n");
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &["bwrap"]))
        .args(["run", "x", "--agent", "cmd:true", "--sandbox", "bwrap"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("bubblewrap is not installed"), "{stderr}");
    assert!(stderr.contains("apt-get install bubblewrap"), "{stderr}");
    assert!(!env.repo().join(".ralph/run.json").exists());
    // The same for implement and daemon start.
    for args in [
        &[
            "implement",
            "specs/demo",
            "--agent",
            "cmd:true",
            "--sandbox",
            "bwrap",
        ][..],
        &["daemon", "start", "--foreground", "--sandbox", "bwrap"][..],
    ] {
        let out = env
            .cmd()
            .env("PATH", path_without(&env, &["bwrap"]))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("apt-get install bubblewrap"), "{stderr}");
    }
    assert!(!env.repo().join("specs/demo/.ralph-state.json").exists());
    assert!(!env.repo().join(".git/taskdaemon/daemon/info.json").exists());
}

/// Processes (zombies aside) whose command line holds `marker`.
pub(crate) fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
                && pid_alive(*pid)
        })
        .collect()
}

#[test]
fn a_timed_out_sandboxed_agent_that_forks_sleepers_leaves_no_process_behind() {
    if !bwrap_or_skip("a_timed_out_sandboxed_agent") {
        return;
    }
    let env = sandbox_env();
    // A sleep length no other test uses, found in /proc by its command line.
    let secs = 7000 + std::process::id() % 1000;
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "sleep {secs} &\nsetsid sh -c 'sleep {secs}; :' &\nnohup sh -c 'sleep {secs}; :' >/dev/null 2>&1 &\necho started\nsleep {secs}\n"
        ),
    );
    let mut child = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .args([
            "run",
            "sleep",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--validate",
            "true",
            "--sandbox",
            "bwrap",
            "--iteration-timeout",
            "2s",
            "--kill-grace",
            "1s",
            "--max-iterations",
            "1",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // While it runs, the sleepers are there (inside the sandbox's PID namespace, visible
    // here).
    let marker = format!("sleep\0{secs}");
    let t = Instant::now();
    while processes_with(&marker).len() < 3 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(processes_with(&marker).len() >= 3, "the sleepers never ran");
    wait_timeout(&mut child, Duration::from_secs(120));
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let root = env.root().display().to_string();
    assert!(
        processes_with(&format!("--chdir\0{root}")).is_empty(),
        "a bwrap was left behind"
    );
}

pub(crate) fn spec_env(tasks: &str) -> Env {
    let env = sandbox_env();
    let spec = env.repo().join("specs/demo");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(spec.join("tasks.md"), tasks).unwrap();
    std::fs::write(spec.join("requirements.md"), "# Requirements\n\nFR-1.\n").unwrap();
    std::fs::write(spec.join("design.md"), "# Design\n\nFiles.\n").unwrap();
    git(&env.repo(), &["add", "-A"]);
    git(&env.repo(), &["commit", "-qm", "spec"]);
    env
}

#[test]
fn implement_parallel_tasks_under_bwrap_each_write_only_their_own_worktree() {
    if !bwrap_or_skip("implement_parallel_tasks_under_bwrap") {
        return;
    }
    let tasks = "- [ ] 1.1 [P] Left\n  - **Verify**: `test -f work/1.1.txt`\n- [ ] 1.2 [P] Right\n  - **Verify**: `test -f work/1.2.txt`\n";
    let env = spec_env(tasks);
    let repo = env.repo();
    // Each task also tries the main checkout and every other worktree next to its own.
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            r#"{HOSTILE}id="$TASKDAEMON_TASK_ID"
echo "$PWD" > "$TASKDAEMON_SPEC_DIR/.cwd-$id"
touch "{repo}/intrusion-$id"
for d in "$(dirname "$PWD")"/*; do [ "$d" = "$PWD" ] || touch "$d/intrusion-$id"; done
mkdir -p work && echo "$id" > "work/$id.txt"
git add work && git commit -qm "task $id"
flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE"
echo "all done. TASK_COMPLETE"
"#,
            repo = repo.display()
        ),
    );
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .env("SIBLING", env.root().join("sibling"))
        .args([
            "implement",
            "specs/demo",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--sandbox",
            "bwrap",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evs = events(&stdout);
    assert!(
        evs.iter().any(|e| e["event"] == "group_started"),
        "{stdout}"
    );
    assert_nothing_outside_changed(&env);
    let spec = repo.join("specs/demo");
    let cwds: Vec<String> = ["1.1", "1.2"]
        .iter()
        .map(|id| std::fs::read_to_string(spec.join(format!(".cwd-{id}"))).unwrap())
        .collect();
    assert_ne!(cwds[0], cwds[1], "each task ran in its own worktree");
    for c in &cwds {
        assert!(!c.trim().starts_with(&format!("{}/", repo.display())) || c.contains("/.git/"));
    }
    let intrusions = all_files(env.root())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("intrusion-"))
        .collect::<Vec<_>>();
    assert!(intrusions.is_empty(), "written outside: {intrusions:?}");
    for id in ["1.1", "1.2"] {
        assert!(
            repo.join(format!("work/{id}.txt")).exists(),
            "{id}'s work landed"
        );
    }
    let tasks = std::fs::read_to_string(spec.join("tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 2, "{tasks}");
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(all_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_daemon_run_under_bwrap_writes_only_its_worktree_and_its_work_is_merged() {
    if !bwrap_or_skip("a_daemon_run_under_bwrap") {
        return;
    }
    let env = sandbox_env();
    let repo = env.repo();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            r#"{HOSTILE}touch "{repo}/intrusion"
echo "ralph $TASKDAEMON_ITERATION" >> ralph.txt
git add ralph.txt && git commit -qm "ralph in the sandbox"
echo "<promise>COMPLETE</promise>"
"#,
            repo = repo.display()
        ),
    );
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("PATH", path_without(&env, &[]))
            .env("SIBLING", env.root().join("sibling"))
            .env("TASKDAEMON_AGENT", format!("cmd:{}", agent.display()))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    run(&[
        "submit",
        "ralph",
        "sandboxed task",
        "--validate",
        "test -f ralph.txt",
        "--sandbox",
        "bwrap",
    ]);
    run(&["daemon", "start", "--tick", "0.2"]);
    daemon_run_finished(&run, &repo);
    assert_nothing_outside_changed(&env);
    assert!(!repo.join("intrusion").exists(), "the checkout was written");
    let log = git(&repo, &["log", "--all", "--format=%s"]);
    assert!(log.contains("ralph in the sandbox"), "{log}");
}

/// `daemon start --sandbox bwrap` in the background: the daemon it starts has the sandbox
/// (and every other flag), and a run that names none is confined by it.
#[test]
fn a_background_daemon_started_with_sandbox_bwrap_confines_its_runs_and_keeps_every_flag() {
    if !bwrap_or_skip("a_background_daemon_started_with_sandbox_bwrap") {
        return;
    }
    let env = sandbox_env();
    let repo = env.repo();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "{HOSTILE}echo work >> work.txt\ngit add work.txt && git commit -qm 'daemon sandboxed'\necho '<promise>COMPLETE</promise>'\n"
        ),
    );
    let agent = format!("cmd:{}", agent.display());
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("PATH", path_without(&env, &[]))
            .env("SIBLING", env.root().join("sibling"))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}\n{stderr}");
        stdout
    };
    run(&["submit", "ralph", "task", "--agent", &agent]);
    run(&[
        "daemon",
        "start",
        "--sandbox",
        "bwrap",
        "--max-loops",
        "2",
        "--target",
        "main",
        "--agent",
        &agent,
        "--tick",
        "0.2",
    ]);
    let st: Value = serde_json::from_str(&run(&["daemon", "status", "--json"])).unwrap();
    let pid = st["daemon"]["pid"].as_u64().unwrap_or_default();
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv: Vec<String> = argv
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    daemon_run_finished(&run, &repo);
    assert_nothing_outside_changed(&env);
    let log = git(&repo, &["log", "--all", "--format=%s"]);
    assert!(log.contains("daemon sandboxed"), "{log}");
    let pairs = [
        ["--sandbox", "bwrap"],
        ["--max-loops", "2"],
        ["--target", "main"],
        ["--agent", agent.as_str()],
        ["--tick", "0.2"],
    ];
    for pair in pairs {
        assert!(
            argv.windows(2).any(|w| w == pair),
            "{pair:?} not in {argv:?}"
        );
    }
}

fn executable(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// A Claude-like agent script run by `interpreter` (a `#!` line): a commit, then a
/// stream-json result.
fn claude_script(interpreter: &str) -> String {
    format!(
        r#"#!{interpreter}
cat >/dev/null
echo work >> work.txt && git add work.txt && git commit -qm 'npm agent' >/dev/null
echo '{{"type":"result","subtype":"success","is_error":false,"result":"done"}}'
"#
    )
}

/// Claude installed the npm way in a project of the user's home (here under /tmp, which
/// the sandbox makes private): `node_modules/.bin/claude` a symlink into its package, a
/// `#!/usr/bin/env fakenode` script, `fakenode` itself a symlink on PATH. Under bwrap it
/// starts and the loop completes.
#[test]
fn an_npm_installed_agent_with_a_symlink_and_an_env_interpreter_starts_under_bwrap() {
    if !bwrap_or_skip("an_npm_installed_agent_starts_under_bwrap") {
        return;
    }
    // The preset, and a `cmd:` agent naming the same program on PATH.
    for agent in ["claude", "cmd:claude --print"] {
        let env = Env::new();
        assert!(
            env.home().starts_with("/tmp"),
            "the test needs its home under /tmp"
        );
        let path = npm_layout(&env);
        // The git config under this home (in /tmp) is not seen inside: the identity comes
        // by environment.
        let out = env
            .cmd()
            .env("PATH", &path)
            .envs(
                ["GIT_AUTHOR", "GIT_COMMITTER"]
                    .into_iter()
                    .flat_map(|w| [(format!("{w}_NAME"), "t"), (format!("{w}_EMAIL"), "t@t")]),
            )
            .args([
                "run",
                "npm agent",
                "--agent",
                agent,
                "--sandbox",
                "bwrap",
                "--validate",
                "test -f work.txt",
                "--max-iterations",
                "1",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{agent}: {stderr}");
        let log = git(&env.repo(), &["log", "--format=%s"]);
        let logs = all_text(&env.repo().join(".ralph/logs"));
        assert!(
            log.contains("npm agent"),
            "{agent}: {log}\n{stderr}\n{logs}"
        );
    }
}

/// `~/proj/node_modules/.bin/claude` → `../@anthropic-ai/claude-code/bin/claude.exe`, a
/// `#!/usr/bin/env fakenode` script; `~/node/bin/fakenode` → `../lib/fakenode`. The PATH
/// with both `bin` directories first.
fn npm_layout(env: &Env) -> OsString {
    let nm = env.home().join("proj/node_modules");
    let pkg = nm.join("@anthropic-ai/claude-code/bin/claude.exe");
    executable(&pkg, &claude_script("/usr/bin/env fakenode"));
    std::fs::create_dir_all(nm.join(".bin")).unwrap();
    std::os::unix::fs::symlink(
        "../@anthropic-ai/claude-code/bin/claude.exe",
        nm.join(".bin/claude"),
    )
    .unwrap();
    let node = env.home().join("node");
    executable(&node.join("lib/fakenode"), "#!/bin/sh\nexec sh \"$@\"\n");
    std::fs::create_dir_all(node.join("bin")).unwrap();
    std::os::unix::fs::symlink("../lib/fakenode", node.join("bin/fakenode")).unwrap();
    std::env::join_paths(
        [nm.join(".bin"), node.join("bin")]
            .into_iter()
            .chain(std::env::split_paths(crate::harness::narrowed_path())),
    )
    .unwrap()
}

/// An agent that exists outside the sandbox but not inside (on PATH in a hidden
/// directory): bwrap cannot run it, and that is could-not-start (exit 64) naming the
/// sandbox, not a crash.
#[test]
fn an_agent_bwrap_cannot_start_exits_64_naming_the_sandbox() {
    if !bwrap_or_skip("an_agent_bwrap_cannot_start_exits_64") {
        return;
    }
    for agent in ["claude", "cmd:claude"] {
        cannot_start_under_bwrap(agent);
    }
}

fn cannot_start_under_bwrap(agent: &str) {
    let env = sandbox_env();
    let hidden = env.home().join(".ssh/bin");
    executable(&hidden.join("claude"), &claude_script("/bin/sh"));
    let path = std::env::join_paths(
        std::iter::once(hidden).chain(std::env::split_paths(&path_without(&env, &[]))),
    )
    .unwrap();
    let out = env
        .cmd()
        .env("PATH", &path)
        .args([
            "run",
            "hidden agent",
            "--agent",
            agent,
            "--sandbox",
            "bwrap",
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{agent}: {stderr}");
    assert!(
        stderr.contains("could not be started inside the sandbox (bwrap)"),
        "{agent}: {stderr}"
    );
}

/// Codex with its state moved by `CODEX_HOME` (outside `~/.codex`): that directory is
/// made and writable in the sandbox; the home directory stays read-only.
#[test]
fn codex_home_is_writable_under_bwrap() {
    if !bwrap_or_skip("codex_home_is_writable_under_bwrap") {
        return;
    }
    let env = sandbox_env();
    let bin = env.root().join("agents");
    executable(
        &bin.join("codex"),
        r#"#!/bin/sh
cat >/dev/null
echo session > "$CODEX_HOME/session.jsonl" || exit 3
touch "$HOME/outside-marker"
echo work >> work.txt
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'
"#,
    );
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&path_without(&env, &[]))),
    )
    .unwrap();
    let codex_home = env.root().join("codex-home");
    let out = env
        .cmd()
        .env("PATH", &path)
        .env("CODEX_HOME", &codex_home)
        .env("SIBLING", env.root().join("sibling"))
        .args([
            "run",
            "codex",
            "--agent",
            "codex",
            "--sandbox",
            "bwrap",
            "--validate",
            "test -f work.txt",
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(codex_home.join("session.jsonl").is_file(), "{stderr}");
    assert_nothing_outside_changed(&env);
}

/// The real Claude Code CLI (`TASKDAEMON_REAL_CLAUDE=/path/to/claude`) under bwrap,
/// against the mock Anthropic API on 127.0.0.1: the loop completes, the CLI's state
/// directory is writable, the home directory is not.
#[test]
#[ignore = "needs the real Claude Code CLI: TASKDAEMON_REAL_CLAUDE=/path/to/claude, python3 and bwrap"]
fn the_real_claude_cli_completes_a_loop_under_bwrap() {
    let Some(claude) = std::env::var_os("TASKDAEMON_REAL_CLAUDE").map(PathBuf::from) else {
        panic!("set TASKDAEMON_REAL_CLAUDE to the claude binary");
    };
    assert!(bwrap_or_skip("the_real_claude_cli"), "bwrap is needed");
    let env = sandbox_env();
    let spec = env.root().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"fail": null, "fail_times": 0, "text": "Hello."}"#,
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut server = Command::new("python3")
        .arg(fixture("agent-failures/servers/fail_anthropic.py"))
        .arg(port.to_string())
        .arg(&spec)
        .arg(env.root().join("requests.jsonl"))
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed().as_secs() < 20, "the mock server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut path = path_without(&env, &[]);
    path.push(":");
    path.push(claude.parent().unwrap());
    let out = env
        .cmd()
        .env("PATH", path)
        // Run as root (CI, this machine), Claude needs IS_SANDBOX=1: the sandbox sets it.
        .env_remove("IS_SANDBOX")
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test-token")
        .env_remove("ANTHROPIC_API_KEY")
        .args([
            "run",
            "Reply with the single word: hello",
            "--json",
            "--agent",
            "claude",
            "--validate",
            "true",
            "--sandbox",
            "bwrap",
            "--max-iterations",
            "2",
        ])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        all_text(&env.repo().join(".ralph/logs"))
    );
    let evs = events(&stdout);
    let started = evs.iter().find(|e| e["event"] == "run_started").unwrap();
    assert_eq!(started["sandbox"], "bwrap (network shared)");
    let requests = std::fs::read_to_string(env.root().join("requests.jsonl")).unwrap();
    assert!(requests.contains("\"POST\""), "{requests}");
    // Its state directory was writable: the session's transcript is there.
    let projects = all_files(&env.home().join(".claude/projects"));
    assert!(
        projects
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "jsonl")),
        "Claude Code wrote no session: {projects:?}"
    );
    assert_nothing_outside_changed(&env);
}

/// docker, where its daemon answers: a cmd agent in the image writes the tree, not the
/// home directory. The image (`TASKDAEMON_SANDBOX_IMAGE`, default debian:stable-slim)
/// needs `sh`. (podman is tested everywhere, with an image made here: `containers.rs`.)
#[test]
fn docker_confines_the_agent_where_its_daemon_answers() {
    let image =
        std::env::var("TASKDAEMON_SANDBOX_IMAGE").unwrap_or_else(|_| "debian:stable-slim".into());
    let answers = have("docker")
        && Command::new("docker")
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success());
    if !answers {
        eprintln!("\n*** SKIPPED the docker sandbox test: no docker daemon answers here ***\n");
        return;
    }
    let env = sandbox_env();
    std::fs::write(
        env.repo().join(".taskdaemon-config.yaml"),
        format!("sandbox-image: {image}\n"),
    )
    .unwrap();
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .args([
            "--config",
            ".taskdaemon-config.yaml",
            "run",
            "x",
            "--agent",
            "cmd:touch \"$HOME/outside-marker\"; echo in-container > work.txt",
            "--validate",
            "test -f work.txt",
            "--sandbox",
            "docker",
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(env.repo().join("work.txt").exists());
    assert!(!env.home().join("outside-marker").exists());
}

/// Configured in `.taskdaemon/config.yaml`: no network, one more hidden directory, one more
/// writable one, and the validation command outside the sandbox.
#[test]
fn config_keys_set_network_hidden_and_writable_paths_and_the_validation_sandbox() {
    if !bwrap_or_skip("config_keys_set_network_hidden_and_writable_paths") {
        return;
    }
    let env = sandbox_env();
    let vault = env.home().join("vault");
    std::fs::create_dir_all(&vault).unwrap();
    std::fs::write(vault.join("token"), SECRET).unwrap();
    let cache = env.root().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        format!(
            "sandbox: bwrap\nsandbox-validate: none\nsandbox-network: none\nsandbox-ro-hide: [~/vault]\nsandbox-rw: [{}]\n",
            cache.display()
        ),
    )
    .unwrap();
    // The sandbox keys of a repository's config apply once it is trusted.
    assert_eq!(env.run(&["trust"]).code, 0);
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' > net.txt\ncat ~/vault/token > vault.txt 2>&1\necho cached > {}/c.txt\ngit add net.txt vault.txt && git commit -qm net\n",
            cache.display()
        ),
    );
    let outside = env.root().join("validation-was-here");
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .args([
            "run",
            "x",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--validate",
            &format!("touch {}", outside.display()),
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("sandbox bwrap (no network); validation: none"),
        "{stderr}"
    );
    let net = std::fs::read_to_string(env.repo().join("net.txt")).unwrap();
    assert_eq!(net.trim(), "lo", "only loopback inside");
    let vault_read = std::fs::read_to_string(env.repo().join("vault.txt")).unwrap();
    assert!(!vault_read.contains(SECRET), "{vault_read}");
    assert_eq!(
        std::fs::read_to_string(cache.join("c.txt")).unwrap(),
        "cached\n"
    );
    assert!(outside.exists(), "the validation ran outside the sandbox");
}

/// Wait (up to 2 min) for the daemon's first run to end, stop the daemon, and require that
/// the run completed.
fn daemon_run_finished(run: &dyn Fn(&[&str]) -> String, repo: &Path) {
    let t = Instant::now();
    let status = loop {
        let s: Value = serde_json::from_str(&run(&["status", "--json"])).unwrap();
        let st = s["runs"][0]["status"].as_str().unwrap_or("").to_string();
        if ["complete", "merged", "failed", "stopped", "blocked"].contains(&st.as_str())
            || t.elapsed() > Duration::from_secs(120)
        {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    run(&["daemon", "stop"]);
    let daemon_log =
        std::fs::read_to_string(repo.join(".git/taskdaemon/daemon/daemon.log")).unwrap_or_default();
    let st = status["runs"][0]["status"].as_str().unwrap_or("");
    assert!(
        st == "complete" || st == "merged",
        "{status:#}\n{daemon_log}"
    );
}

#[test]
fn the_task_parsers_agent_runs_in_the_runs_sandbox() {
    if !bwrap_or_skip("the_task_parsers_agent_runs_in_the_runs_sandbox") {
        return;
    }
    let env = sandbox_env();
    let parser = script(
        &env,
        "parser.sh",
        &format!(
            "cat > /dev/null\n{HOSTILE}printf '%s' '{{\"type\":\"fresh\",\"requirements\":[{{\"marker\":\"ADD\",\"text\":\"a greeting\"}}]}}'\n"
        ),
    );
    let done = env.script(
        "done.yaml",
        "iterations:\n  - steps:\n      - write: { path: hello.txt, content: \"hi\\n\" }\n      - commit: greet\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let out = env
        .cmd()
        .env("PATH", path_without(&env, &[]))
        .env("SIBLING", env.root().join("sibling"))
        .args([
            "task",
            "add a greeting",
            "--parse-agent",
            &format!("cmd:{}", parser.display()),
            "--agent",
            &done,
            "--sandbox",
            "bwrap",
            "--json",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("\"parser\":\"model\""),
        "the parse agent's answer was used: {stdout}"
    );
    assert_nothing_outside_changed(&env);
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
}

#[test]
fn an_agent_under_bwrap_sees_the_git_config_its_environment_names_under_tmp() {
    if !bwrap_or_skip("an_agent_under_bwrap_sees_the_git_config") {
        return;
    }
    // Env::new lies under the temp dir, its GIT_CONFIG_GLOBAL (the identity) with it.
    let env = Env::new();
    if !env.home().starts_with("/tmp") {
        eprintln!("SKIPPED: the temp dir is not under /tmp here; nothing to show");
        return;
    }
    let r = env.run(&[
        "run",
        "commit under bwrap",
        "--agent",
        "cmd:echo x >> f.txt && git add f.txt && git commit -qm sandboxed",
        "--validate",
        "git log --format=%s | grep -qx sandboxed",
        "--sandbox",
        "bwrap",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(
        r.code, 0,
        "the agent's commit needs its identity: {}",
        r.stderr
    );
}
