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

/// The agent's script: arm the repository's git every way it can (each write's result in
/// `tried.txt`), change a tracked file (same size: git must read it to see the change) and
/// commit a file of its own work first.
fn arming_agent(env: &Env) -> PathBuf {
    let m = env.root().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    let m = m.display();
    let body = format!(
        r#"#!/bin/sh
try() {{ if "$@" 2>/dev/null; then echo "wrote $TRY" >> tried.txt; else echo "refused $TRY" >> tried.txt; fi; }}
echo work >> work.txt && git add work.txt && git commit -qm work
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
echo HELLO > README.md
echo done
"#
    );
    let p = env.root().join("agent.sh");
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
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
    let agent = env.root().join("quiet.sh");
    std::fs::write(&agent, "#!/bin/sh\necho 'looked around'\n").unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let stderr = run_then_more(&env, &agent, "none", None);
    assert!(!stderr.contains("changed git's own files"), "{stderr}");
    for args in [&["snapshot", "save", "by hand"][..], &["snapshot", "list"]] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    assert_eq!(marks(&env), Vec::<String>::new());
}
