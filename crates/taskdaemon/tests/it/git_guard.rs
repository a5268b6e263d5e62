//! The harness's git never runs agent-controlled code (issue 37 item 5): an agent that
//! sets `core.fsmonitor`, plants hooks, a filter or a `commondir` of its own cannot make
//! taskdaemon's git (outside the sandbox) run them — not in the same run, not in a later
//! `task` or `snapshot status`. Under bwrap the writes fail; without a sandbox they are
//! found after the iteration, reported, put back, and the iteration is rejected. Real
//! git, real bwrap, real processes; every program the agent plants leaves a mark in a
//! directory outside the repository when it runs.

use std::path::{Path, PathBuf};

use crate::harness::{Env, csv_rows};
use crate::sandbox::{bwrap_or_skip, sandbox_env};

/// The marks left by programs that ran (empty: none did).
fn marks(env: &Env) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(env.root().join("marks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Shell lines that arm the repository's git every way an agent can (each write's result
/// in `tried.txt`), each armed program leaving its mark in `marks/` when it runs.
fn arming(env: &Env) -> String {
    let m = env.root().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    let m = m.display();
    format!(
        r#"try() {{ if "$@" 2>/dev/null; then echo "wrote $TRY" >> tried.txt; else echo "refused $TRY" >> tried.txt; fi; }}
TRY=fsmonitor try git config core.fsmonitor "touch {m}/fsmonitor; false #"
TRY=filter try git config filter.x.clean "sh -c 'touch {m}/clean; cat'"
TRY=attributes try sh -c 'mkdir -p .git/info && echo "* filter=x" > .git/info/attributes'
for h in post-checkout reference-transaction post-index-change post-commit; do
  TRY=$h try sh -c "printf '#!/bin/sh\ntouch {m}/$h\n' > .git/hooks/$h && chmod +x .git/hooks/$h"
done
TRY=move-git try sh -c 'mv .git .git-moved && mv .git-moved .git'
# A common directory of its own: git takes the config (a filter) and hooks from there.
mkdir -p evil/info evil/hooks && cp -r .git/objects .git/refs .git/HEAD evil/
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch {m}/evil-fsmonitor; false #"\n[filter "x"]\n\tclean = "sh -c \\"touch {m}/evil-clean; cat\\""\n' > evil/config
echo "* filter=x" > evil/info/attributes
printf '#!/bin/sh\ntouch {m}/evil-hook\n' > evil/hooks/reference-transaction && chmod +x evil/hooks/reference-transaction
TRY=commondir try sh -c "echo '$PWD/evil' > .git/commondir"
"#
    )
}

fn executable(env: &Env, name: &str, body: &str) -> PathBuf {
    let p = env.root().join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// A ralph agent: commit a file of its work, arm git, then change a tracked file (same
/// size: git must read it to see the change).
fn arming_agent(env: &Env) -> PathBuf {
    let body = format!(
        "echo work >> work.txt && git add work.txt && git commit -qm work\n{}echo HELLO > README.md\necho done\n",
        arming(env)
    );
    executable(env, "agent.sh", &body)
}

/// The git files the agent must not change, as bytes (the hooks directory listed).
fn git_files(repo: &Path) -> Vec<(String, Vec<u8>)> {
    let g = repo.join(".git");
    let mut out = vec![("config".into(), std::fs::read(g.join("config")).unwrap())];
    let mut hooks: Vec<_> = std::fs::read_dir(g.join("hooks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    hooks.sort();
    for h in hooks {
        out.push((h.display().to_string(), std::fs::read(&h).unwrap()));
    }
    out.push((
        "commondir".into(),
        std::fs::read(g.join("commondir")).unwrap_or_default(),
    ));
    out
}

/// Run `taskdaemon` with `args`; then a `task parse` and a `snapshot status`, which must
/// run nothing either. The run's stderr.
fn run_then_more(env: &Env, agent: &Path, sandbox: &str, path: Option<&std::ffi::OsStr>) -> String {
    let mut c = env.cmd();
    if let Some(p) = path {
        c.env("PATH", p);
    }
    let out = c
        .args([
            "run",
            "tidy the readme",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--sandbox",
            sandbox,
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "the iteration limit: {stderr}");
    assert_eq!(
        marks(env),
        Vec::<String>::new(),
        "taskdaemon's git ran the agent's program: {stderr}"
    );
    for args in [
        &["task", "parse", "fix the readme"][..],
        &["snapshot", "status"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert_eq!(
            marks(env),
            Vec::<String>::new(),
            "{args:?} ran the agent's program"
        );
    }
    stderr
}

#[test]
fn a_bwrap_agent_cannot_set_fsmonitor_plant_hooks_or_move_git_and_its_commondir_is_undone() {
    if !bwrap_or_skip("a_bwrap_agent_cannot_set_fsmonitor") {
        return;
    }
    let env = sandbox_env();
    let repo = env.repo();
    let before = git_files(&repo);
    let agent = arming_agent(&env);
    let path = crate::sandbox::path_without(&env, &[]);
    let stderr = run_then_more(&env, &agent, "bwrap", Some(&path));
    let tried = std::fs::read_to_string(repo.join("tried.txt")).unwrap();
    for what in [
        "fsmonitor",
        "filter",
        "post-checkout",
        "reference-transaction",
        "post-index-change",
        "post-commit",
        "move-git",
    ] {
        assert!(
            tried.contains(&format!("refused {what}\n")),
            "{what}: {tried}"
        );
    }
    // What the sandbox cannot stop (a new file in .git) is found and undone.
    assert!(tried.contains("wrote commondir\n"), "{tried}");
    assert!(
        stderr.contains("the agent changed git's own files")
            && stderr.contains(&format!(
                "{}/.git/commondir (added, restored)",
                repo.display()
            )),
        "{stderr}"
    );
    assert_eq!(git_files(&repo), before);
    assert_eq!(csv_rows(&repo)[0]["outcome"], "rejected");
    let log = std::fs::read_to_string(repo.join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(log.contains("the agent changed git's own files"), "{log}");
}

#[test]
fn without_a_sandbox_what_the_agent_arms_is_found_reported_undone_and_never_run() {
    let env = Env::new();
    let repo = env.repo();
    let before = git_files(&repo);
    let agent = arming_agent(&env);
    let stderr = run_then_more(&env, &agent, "none", None);
    let tried = std::fs::read_to_string(repo.join("tried.txt")).unwrap();
    assert!(!tried.contains("refused"), "{tried}");
    for what in [
        ".git/config (changed, restored)",
        ".git/hooks/post-checkout (added, restored)",
        ".git/hooks/reference-transaction (added, restored)",
        ".git/hooks/post-index-change (added, restored)",
        ".git/hooks/post-commit (added, restored)",
        ".git/commondir (added, restored)",
    ] {
        assert!(
            stderr.contains(&format!("{}/{what}", repo.display())),
            "{what}: {stderr}"
        );
    }
    assert_eq!(git_files(&repo), before, "put back byte for byte");
    let rows = csv_rows(&repo);
    assert_eq!(rows[0]["outcome"], "rejected");
    // The next prompt says why.
    let state = std::fs::read_to_string(repo.join(".ralph/run.json")).unwrap();
    assert!(state.contains("changed git's own files"), "{state}");
}

#[test]
fn a_config_armed_before_taskdaemon_runs_has_its_monitor_and_hooks_ignored() {
    let env = Env::new();
    let repo = env.repo();
    let m = env.root().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    let config = repo.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[core]\n\tfsmonitor = \"touch {}/fsmonitor; false #\"\n",
        m.display()
    ));
    std::fs::write(&config, text).unwrap();
    for h in [
        "post-checkout",
        "reference-transaction",
        "post-index-change",
        "post-commit",
        "pre-auto-gc",
    ] {
        let p = repo.join(".git/hooks").join(h);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {}/{h}\n", m.display())).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::write(repo.join("README.md"), "HELLO\n").unwrap();
    // An agent that runs no git: whatever runs, runs from taskdaemon's git.
    let agent = executable(&env, "quiet.sh", "echo 'looked around'\n");
    let stderr = run_then_more(&env, &agent, "none", None);
    assert!(!stderr.contains("changed git's own files"), "{stderr}");
    for args in [&["snapshot", "save", "by hand"][..], &["snapshot", "list"]] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    assert_eq!(marks(&env), Vec::<String>::new());
}

#[test]
fn implement_judges_nothing_with_the_armed_git_and_tells_the_next_prompt() {
    let env = crate::sandbox::spec_env("- [ ] 1.1 Only\n  - **Verify**: `test -f work/1.1.txt`\n");
    let repo = env.repo();
    let before = git_files(&repo);
    let root = env.root().display().to_string();
    // The first attempt does the task, then arms git; the second does it plainly.
    let body = format!(
        r#"cat > "{root}/prompt-$(ls {root} | grep -c prompt-)"
id="$TASKDAEMON_TASK_ID"
mkdir -p work && echo "$id" > "work/$id.txt"
sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE"
git add work "$TASKDAEMON_TASKS_FILE" "$TASKDAEMON_PROGRESS_FILE" && git commit -qm "task $id"
if [ ! -e "{root}/armed" ]; then touch "{root}/armed"
{}fi
echo "done. TASK_COMPLETE"
"#,
        arming(&env)
    );
    let agent = executable(&env, "agent.sh", &body);
    let r = env.run(&[
        "implement",
        "specs/demo",
        "--agent",
        &format!("cmd:{}", agent.display()),
    ]);
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", r.stderr);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("the agent changed git's own files"),
        "{}",
        r.stderr
    );
    assert_eq!(git_files(&repo), before);
    let second = std::fs::read_to_string(env.root().join("prompt-1")).unwrap();
    assert!(second.contains("changed git's own files"), "{second}");
    let tasks = std::fs::read_to_string(repo.join("specs/demo/tasks.md")).unwrap();
    assert!(tasks.contains("- [x] 1.1"), "{tasks}");
}

#[test]
fn parallel_tasks_under_bwrap_cannot_repoint_their_worktree_or_arm_the_common_git() {
    if !bwrap_or_skip("parallel_tasks_under_bwrap_cannot_repoint_their_worktree") {
        return;
    }
    let tasks = "- [ ] 1.1 [P] Left\n  - **Verify**: `test -f work/1.1.txt`\n- [ ] 1.2 [P] Right\n  - **Verify**: `test -f work/1.2.txt`\n";
    let env = crate::sandbox::spec_env(tasks);
    let repo = env.repo();
    let before = git_files(&repo);
    let body = r#"id="$TASKDAEMON_TASK_ID"
gd=$(git rev-parse --absolute-git-dir)
common=$(cd "$(git rev-parse --git-common-dir)" && pwd)
try() { if (eval "$2") 2>/dev/null; then echo "TRIED wrote $1 $id"; else echo "TRIED refused $1 $id"; fi; }
try dotgit 'echo "gitdir: /nowhere" > .git'
try commondir 'echo /nowhere > "$gd/commondir"'
try config 'git config core.fsmonitor "touch /nowhere"'
try hook 'echo x > "$common/hooks/post-commit"'
mkdir -p work && echo "$id" > "work/$id.txt"
git add work && git commit -qm "task $id"
flock "$TASKDAEMON_TASKS_LOCK" sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
echo "notes of $id" > "$TASKDAEMON_PROGRESS_FILE"
echo "all done. TASK_COMPLETE"
"#;
    let agent = executable(&env, "agent.sh", body);
    let out = env
        .cmd()
        .env("PATH", crate::sandbox::path_without(&env, &[]))
        .args([
            "implement",
            "specs/demo",
            "--agent",
            &format!("cmd:{}", agent.display()),
            "--sandbox",
            "bwrap",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut logs = String::new();
    for e in std::fs::read_dir(repo.join(".ralph/logs"))
        .unwrap()
        .flatten()
    {
        logs.push_str(&String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()));
    }
    for what in ["dotgit", "commondir", "config", "hook"] {
        for id in ["1.1", "1.2"] {
            assert!(
                logs.contains(&format!("TRIED refused {what} {id}")),
                "{what} {id}: {logs}"
            );
        }
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("changed git's own files"), "{stderr}");
    assert_eq!(git_files(&repo), before);
    let tasks = std::fs::read_to_string(repo.join("specs/demo/tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 2, "{tasks}");
}
