//! `taskdaemon watch` driven for real in a terminal: tmux on a private socket
//! (`new-session -d -x 100 -y 30`, `send-keys`, `capture-pane -p`) against a daemon running
//! fake agents. The screen is polled until the expected text appears (bounded waits, no
//! timed assertion). Needs tmux: skipped loudly without it, except in CI (`CI=true`), where
//! it fails.

use crate::harness;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::Env;
use serde_json::Value;

/// `task-long`: prints a numbered line every 0.1 s for a minute, then commits.
/// `task-decide`: first iteration asks which database; later ones save their prompt to
/// `$TD_DIR/prompt-N.txt`, then work like `task-long`.
const AGENT: &str = r#"#!/bin/sh
prompt=$(cat)
case "$prompt" in
*task-decide*)
  if [ "$TASKDAEMON_ITERATION" = 1 ]; then
    echo "thinking about storage"
    echo "<promise>DECIDE:Which database, sqlite or postgres?</promise>"
    exit 0
  fi
  printf '%s' "$prompt" > "$TD_DIR/prompt-$TASKDAEMON_ITERATION.txt" ;;
esac
i=0
while [ $i -lt 600 ]; do
  i=$((i+1))
  echo "line $i of $TASKDAEMON_RUN_ID"
  sleep 0.1
done
echo "iteration $TASKDAEMON_ITERATION" >> work.txt
git add -A && git commit -qm "iteration $TASKDAEMON_ITERATION"
"#;

/// The tmux binary, or `None` (then the test is skipped; in CI it fails).
fn tmux_binary() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("tmux"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "tmux is missing in CI: .ci/run installs it (apt-get install tmux)"
        );
        eprintln!(
            "SKIPPED: tmux is not installed; install it (apt-get install tmux) to run the TUI tests"
        );
    }
    found
}

struct Term<'a> {
    env: &'a Env,
    tmux: PathBuf,
    socket: String,
}

impl<'a> Term<'a> {
    /// A 100×30 tmux session on a private socket, running `taskdaemon watch` in the repo.
    fn start(env: &'a Env, tmux: PathBuf, extra_env: &[(&str, &str)]) -> Term<'a> {
        // Tests share this process: one socket per session, not per process.
        static SESSIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("td-watch-{}-{n}", std::process::id());
        let t = Term { env, tmux, socket };
        let mut cmd = format!(
            "env HOME={home} XDG_CONFIG_HOME={home}/.config GIT_CONFIG_GLOBAL={home}/.gitconfig GIT_CONFIG_NOSYSTEM=1 PATH={path} TERM=xterm-256color",
            home = env.home().display(),
            path = harness::narrowed_path().to_string_lossy(),
        );
        for (k, v) in extra_env {
            cmd.push_str(&format!(" {k}={v}"));
        }
        cmd.push_str(&format!(
            " {} -C {} watch",
            env!("CARGO_BIN_EXE_taskdaemon"),
            env.repo().display()
        ));
        // One client command: the option is set before the pane can have exited.
        t.tmux(&[
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "30",
            &cmd,
            ";",
            "set-option",
            "-g",
            "remain-on-exit",
            "on",
        ]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new(&self.tmux)
            .args(["-f", "/dev/null", "-L"])
            .arg(&self.socket)
            .args(args)
            .env("TMUX_TMPDIR", self.env.root())
            .env_remove("TMUX")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-l", text]);
    }

    /// Poll the screen until `ok` (at most two minutes), failing with the last screen.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{what} never showed; the screen:\n{s}\ndaemon log:\n{}",
                daemon_log(self.env)
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Which of `runs` (id, title) is on the selected line (`>`), if any.
    fn selected(&self, screen: &str, runs: &[(&str, &str)]) -> Option<String> {
        let line = screen.lines().find(|l| l.trim_start().starts_with('>'))?;
        runs.iter()
            .find(|(_, title)| line.contains(title))
            .map(|(id, _)| id.to_string())
    }
}

impl Drop for Term<'_> {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn daemon_log(env: &Env) -> String {
    std::fs::read_to_string(env.repo().join(".git/taskdaemon/daemon/daemon.log"))
        .unwrap_or_default()
}

fn status_of(env: &Env, id: &str) -> String {
    let s: Value = serde_json::from_str(&run(env, &["status", "--json"]).stdout).unwrap();
    s["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["id"] == id)
        .and_then(|r| r["status"].as_str())
        .unwrap_or("")
        .to_string()
}

fn agent_env(env: &Env) -> Vec<(String, String)> {
    let agent = env.root().join("agent.sh");
    if !agent.exists() {
        std::fs::write(&agent, AGENT).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    vec![
        (
            "TASKDAEMON_AGENT".into(),
            format!("cmd:{}", agent.display()),
        ),
        ("TD_DIR".into(), env.root().display().to_string()),
    ]
}

fn run(env: &Env, args: &[&str]) -> harness::Run {
    let mut c = env.cmd();
    for (k, v) in agent_env(env) {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    harness::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(env: &Env, args: &[&str]) -> String {
    let r = run(env, args);
    assert_eq!(r.code, 0, "{args:?}\n{}\n{}", r.stdout, r.stderr);
    r.stdout
}

fn submit(env: &Env, task: &str) -> String {
    let v: Value = serde_json::from_str(&ok(
        env,
        &["submit", "ralph", task, "--validate", "true", "--json"],
    ))
    .unwrap();
    v["created"][0]["id"].as_str().unwrap().to_string()
}

fn wait_file(path: &Path, env: &Env) -> String {
    let start = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(path)
            && !t.is_empty()
        {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} never appeared\nlog:\n{}",
            path.display(),
            daemon_log(env)
        );
        std::thread::sleep(Duration::from_millis(150));
    }
}

#[test]
fn watch_shows_two_loops_follows_the_log_pauses_one_and_answers_a_decide() {
    let Some(tmux) = tmux_binary() else { return };
    let env = Env::new();
    ok(
        &env,
        &["daemon", "start", "--tick", "0.2", "--max-loops", "3"],
    );
    let alpha = submit(&env, "task-long alpha");
    let beta = submit(&env, "task-long beta");
    let term = Term::start(&env, tmux, &[]);

    // Both loops, running.
    let screen = term.wait_for("two running loops", |s| {
        s.lines()
            .filter(|l| l.contains("task-long") && l.contains("running"))
            .count()
            == 2
    });
    assert!(screen.contains("daemon pid"), "{screen}");
    // The selected one's log, live.
    let selected = term
        .selected(
            &screen,
            &[(&alpha, "task-long alpha"), (&beta, "task-long beta")],
        )
        .unwrap_or_else(|| {
            panic!(
                "no run selected:\n{screen}\n{}",
                run(&env, &["status", "--json"]).stdout
            )
        });
    term.wait_for("the selected run's log", |s| {
        s.contains(&format!("of {selected}")) && s.contains(&format!(" {selected} iteration"))
    });
    // Another selection, another log.
    term.keys(&["j"]);
    let other = if selected == alpha { &beta } else { &alpha };
    term.wait_for("the other run's log", |s| {
        s.contains(&format!("of {other}"))
    });

    // Pause it with a key: the daemon's status says paused.
    term.keys(&["p"]);
    let start = Instant::now();
    while status_of(&env, other) != "paused" {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not paused:\n{}\n{}",
            term.screen(),
            daemon_log(&env)
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    term.wait_for("paused on screen", |s| {
        s.lines()
            .any(|l| l.contains("paused") && l.trim_start().starts_with('>'))
    });

    // A DECIDE, answered in the TUI.
    let gamma = submit(&env, "task-decide gamma");
    term.wait_for("the question", |s| {
        s.contains("DECIDE: Which database, sqlite or postgres?")
    });
    let start = Instant::now();
    loop {
        let s = term.screen();
        if term
            .selected(&s, &[(&gamma, "task-decide gamma")])
            .is_some()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cannot select the deciding run:\n{s}"
        );
        term.keys(&["j"]);
        std::thread::sleep(Duration::from_millis(300));
    }
    term.keys(&["a"]);
    term.wait_for("the answer prompt", |s| s.contains("answer (Enter sends"));
    term.type_text("sqlite, keep it simple");
    term.wait_for("the typed answer", |s| {
        s.contains("sqlite, keep it simple_")
    });
    term.keys(&["Enter"]);
    let prompt = wait_file(&env.root().join("prompt-2.txt"), &env);
    assert!(
        prompt.contains("sqlite, keep it simple"),
        "the answer is not in the next prompt:\n{prompt}"
    );
    term.wait_for("the run going on", |s| {
        s.lines()
            .any(|l| l.contains("task-decide gamma") && l.contains("running"))
    });

    // Ctrl-C: the UI exits and the shell gets its terminal back.
    term.keys(&["C-c"]);
    let start = Instant::now();
    while term.tmux(&["display-message", "-p", "#{pane_dead}"]).trim() != "1" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watch did not exit"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        term.tmux(&["display-message", "-p", "#{alternate_on}"])
            .trim(),
        "0",
        "the alternate screen was left"
    );
    ok(&env, &["daemon", "stop"]);
}

#[test]
fn a_panic_restores_the_terminal_and_once_prints_a_frame_without_colour() {
    let Some(tmux) = tmux_binary() else { return };
    let env = Env::new();
    let term = Term::start(&env, tmux, &[("TASKDAEMON_TEST_WATCH_PANIC", "1")]);
    let start = Instant::now();
    while term.tmux(&["display-message", "-p", "#{pane_dead}"]).trim() != "1" {
        assert!(start.elapsed() < Duration::from_secs(30), "no panic exit");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        term.tmux(&["display-message", "-p", "#{alternate_on}"])
            .trim(),
        "0",
        "the alternate screen is still on after the panic"
    );
    let s = term.screen();
    assert!(s.contains("test hook: a panic inside the UI"), "{s}");

    // --once: one frame of the asked size, as plain text.
    let mut c = env.cmd();
    c.env("NO_COLOR", "1");
    let out = c
        .args(["watch", "--once", "--width", "80", "--height", "24"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().count(), 24, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    assert!(
        text.contains("taskdaemon watch:") && text.contains("no daemon"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "escape codes in --once: {text:?}");
}
