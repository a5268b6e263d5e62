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
        Term::start_sized(env, tmux, extra_env, (100, 30))
    }

    /// [`Term::start`] in a terminal of `(columns, lines)`.
    fn start_sized(
        env: &'a Env,
        tmux: PathBuf,
        extra_env: &[(&str, &str)],
        (columns, lines): (u16, u16),
    ) -> Term<'a> {
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
        let (x, y) = (columns.to_string(), lines.to_string());
        t.tmux(&[
            "new-session",
            "-d",
            "-x",
            &x,
            "-y",
            &y,
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

    /// Select the first run (`g`) and wait until the screen shows it selected.
    fn first(&self) {
        self.keys(&["g"]);
        self.wait_for("the first run selected", |s| {
            s.lines()
                .find(|l| l.contains(" it "))
                .is_some_and(|l| l.starts_with("> "))
        });
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

    // Pause it with a key: it pauses when its (minute-long) iteration ends; a second `p`
    // pauses it now. The daemon's status says paused.
    term.keys(&["p"]);
    term.wait_for("pausing on screen", |s| {
        s.lines()
            .any(|l| l.contains("pausing") && l.trim_start().starts_with('>'))
    });
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
    // From the first run (g) down.
    term.first();
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

/// The plan's agent: the plan in one go, two spec documents (alpha, beta: two phases
/// each, done when `NAME.ready` is committed), and phases that take 0.3 s, except alpha's
/// first phase's first iteration: it says so in `$TD_DIR/holding`, waits for
/// `$TD_DIR/release`, then commits without making alpha ready (the iteration counts, the
/// phase goes on).
const PLAN_AGENT: &str = r#"#!/bin/sh
case "$TASKDAEMON_LOOP" in
plan)
  printf '# Widgets\n\n## Goals\nwidgets, pass %s\n\n## Approach\nspecs\n' "$TASKDAEMON_REVIEW_PASS" > "$TASKDAEMON_PLAN_FILE"
  ;;
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  for name in alpha beta; do
    printf -- '---\ntitle: %s\ndeps: []\nphases: ["Phase 1: one", "Phase 2: two"]\nvalidate: test -f %s.ready\n---\nBuild %s.\n' \
      "$name" "$name" "$name" > "$TASKDAEMON_SPECS_DIR/$name.md"
  done
  ;;
phase)
  spec=$(echo "$TASKDAEMON_SPEC_ID" | sed 's/^[0-9a-f]*-spec-//')
  at="$spec $TASKDAEMON_PHASE_INDEX $TASKDAEMON_ITERATION"
  echo "start $at" >> "$TD_DIR/agent.log"
  echo "working on $at"
  if [ "$at" = "alpha 0 1" ]; then
    touch "$TD_DIR/holding"
    while [ ! -f "$TD_DIR/release" ]; do sleep 0.05; done
    echo one > alpha-0.txt
    git add -A && git commit -qm "alpha phase 1, iteration 1"
    echo "end $at" >> "$TD_DIR/agent.log"
    exit 0
  fi
  sleep 0.3
  echo done > "$spec.ready"
  echo "$TASKDAEMON_ITERATION" >> "$spec-$TASKDAEMON_PHASE_INDEX.txt"
  git add -A && git commit -qm "$at"
  echo "end $at" >> "$TD_DIR/agent.log"
  echo "<promise>COMPLETE</promise>"
  ;;
esac
"#;

/// The daemon's event stream, read by the test itself.
struct Events {
    lines: std::io::Lines<std::io::BufReader<std::os::unix::net::UnixStream>>,
}

impl Events {
    fn subscribe(env: &Env) -> Events {
        use std::io::{BufRead, Write};
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(env.repo().join(".git/taskdaemon/daemon/info.json")).unwrap(),
        )
        .unwrap();
        let mut s =
            std::os::unix::net::UnixStream::connect(info["socket"].as_str().unwrap()).unwrap();
        s.write_all(b"{\"op\":\"subscribe\"}\n").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Events {
            lines: std::io::BufReader::new(s).lines(),
        }
    }

    /// The names of the events that came since the last look (none when none came).
    fn batch(&mut self) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(Ok(line)) = self.lines.next() {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            names.push(v["event"].as_str().unwrap_or("?").to_string());
        }
        names
    }
}

/// Whether `t` is a duration as the tree prints it (`850ms`, `3.2s`, `1m`, `05s`, `2h`).
fn is_duration(t: &str) -> bool {
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &t[digits.len()..];
    matches!(unit, "ms" | "s" | "m" | "h")
        && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// The tree's lines of a frame (between the `loops` border and the next one), without
/// the selection mark, with durations masked (a watcher's tick on, a fresh read's stay as
/// stored) and runs of spaces as one (durations differ in length).
fn tree_of(frame: &str) -> Vec<String> {
    frame
        .lines()
        .skip_while(|l| !l.contains(" loops "))
        .skip(1)
        .take_while(|l| !l.contains("──"))
        .map(|l| {
            let l = l
                .strip_prefix("> ")
                .or_else(|| l.strip_prefix("  "))
                .unwrap_or(l);
            let indent = l.len() - l.trim_start().len();
            let words: Vec<&str> = l
                .split_whitespace()
                .map(|t| if is_duration(t) { "~" } else { t })
                .collect();
            format!("{}{}", " ".repeat(indent), words.join(" "))
        })
        .collect()
}

struct PlanWatch<'a> {
    env: &'a Env,
    vars: Vec<(String, String)>,
    term: Term<'a>,
}

impl PlanWatch<'_> {
    fn once(&self) -> Vec<String> {
        let mut c = self.env.cmd();
        c.env("NO_COLOR", "1");
        let out = c
            .args(["watch", "--once", "--width", "100", "--height", "40"])
            .output()
            .unwrap();
        tree_of(&String::from_utf8_lossy(&out.stdout))
    }

    /// The screen's tree becomes what a fresh `watch --once` shows (bounded wait).
    fn agrees(&self, after: &[String]) {
        let start = Instant::now();
        loop {
            let screen = tree_of(&self.term.screen());
            let fresh = self.once();
            if !fresh.is_empty() && screen == fresh {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "after {after:?} the screen's tree is not the store's:\nscreen:\n{}\nwatch --once:\n{}\ndaemon log:\n{}",
                screen.join("\n"),
                fresh.join("\n"),
                daemon_log(self.env)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.env.ok_with(&self.vars, &["status", "--json"])).unwrap()
    }

    /// The selected line of the screen.
    fn selected_line(&self) -> String {
        self.term
            .screen()
            .lines()
            .find(|l| l.starts_with("> "))
            .unwrap_or("")
            .to_string()
    }

    /// Select the line containing `what` with `j`/`k` (bounded).
    fn select(&self, what: &str) {
        self.select_where(what, |l| l.contains(what));
    }

    /// Select the first line for which `ok` holds, from the top (bounded).
    fn select_where(&self, what: &str, ok: impl Fn(&str) -> bool) {
        self.term.first();
        for _ in 0..20 {
            if ok(&self.selected_line()) {
                return;
            }
            self.term.keys(&["j"]);
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("cannot select `{what}`:\n{}", self.term.screen());
    }
}

/// The elapsed time on a line (the first duration in it).
fn elapsed_on(line: &str) -> Option<String> {
    line.split(' ').find(|t| is_duration(t)).map(String::from)
}

#[test]
fn watch_follows_a_daemon_plan_of_two_specs_by_two_phases_to_its_merge_and_pauses_between_iterations()
 {
    let Some(tmux) = tmux_binary() else { return };
    let env = Env::new();
    // The target is not checked out: merges go onto it, none is held.
    harness::git(&env.repo(), &["checkout", "-qb", "wip"]);
    let agent = env.root().join("plan-agent.sh");
    std::fs::write(&agent, PLAN_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let vars = vec![
        (
            "TASKDAEMON_AGENT".to_string(),
            format!("cmd:{}", agent.display()),
        ),
        ("TD_DIR".to_string(), env.root().display().to_string()),
    ];
    env.ok_with(
        &vars,
        &["daemon", "start", "--tick", "0.2", "--max-loops", "2"],
    );
    let mut events = Events::subscribe(&env);
    let term = Term::start_sized(&env, tmux, &[], (100, 40));
    let w = PlanWatch {
        env: &env,
        vars,
        term,
    };
    w.term
        .wait_for("the empty tree", |s| s.contains("no loops here yet"));
    w.env.ok_with(
        &w.vars,
        &["submit", "plan", "build widgets", "--target", "main"],
    );

    // From the start to alpha's held iteration: after each batch of events, the tree is
    // the store's.
    let holding = env.root().join("holding");
    let mut seen = 0;
    let start = Instant::now();
    while !holding.exists() {
        let batch = events.batch();
        if !batch.is_empty() {
            seen += batch.len();
            w.agrees(&batch);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "alpha's first iteration never started:\n{}\n{}",
            w.term.screen(),
            daemon_log(&env)
        );
    }
    w.agrees(&events.batch());
    let screen = w.term.screen();
    let tree = tree_of(&screen);
    // Both specs under the plan, each phase run under its spec, none among loose runs.
    assert!(
        tree[0].starts_with("✓ plan") || tree[0].starts_with("● plan"),
        "{screen}"
    );
    assert!(!tree.iter().any(|l| l == "runs"), "{screen}");
    let spec_at = |name: &str| {
        tree.iter()
            .position(|l| l.contains(&format!("spec {name}")))
    };
    let (a, b) = (spec_at("alpha").unwrap(), spec_at("beta").unwrap());
    assert!(tree[a + 1].starts_with("    ● alpha"), "{screen}");
    assert!(tree[b + 1].starts_with("    "), "{screen}");

    // The held run's elapsed time ticks on screen (nothing is written meanwhile).
    w.select("● alpha");
    let first = elapsed_on(&w.selected_line());
    let start = Instant::now();
    while elapsed_on(&w.selected_line()) == first {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the elapsed time stays {first:?}:\n{}",
            w.term.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // `?` opens the keys, `?` closes them; Enter shows the run's iterations, Esc goes back.
    w.term.keys(&["?"]);
    w.term
        .wait_for("the help", |s| s.contains("keys (Esc or ? closes)"));
    w.term.keys(&["?"]);
    w.term
        .wait_for("the help closed", |s| !s.contains("keys (Esc or ?"));
    w.term.keys(&["Enter"]);
    let detail = w.term.wait_for("the run's iterations", |s| {
        s.contains("iteration(s) (Esc: back")
    });
    assert!(detail.contains("no finished iteration yet"), "{detail}");
    w.term.keys(&["Escape"]);
    w.term.wait_for("the tree again", |s| s.contains(" loops "));
    // G: the last run, g: the first.
    w.term.keys(&["G"]);
    w.term.wait_for("the last run", |s| {
        s.lines()
            .rfind(|l| l.contains(" it "))
            .is_some_and(|l| l.starts_with("> "))
    });
    w.term.first();

    // `p` on the held run: it pauses when its iteration ends, not before.
    w.select("● alpha");
    w.term.keys(&["p"]);
    w.term.wait_for("pausing", |s| {
        s.lines()
            .any(|l| l.starts_with("> ") && l.contains("pausing"))
    });
    let s = w.status();
    let alpha_run = |s: &Value| -> Value {
        s["plans"][0]["specs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|sp| sp["title"] == "alpha")
            .and_then(|sp| sp["runs"].as_array().and_then(|r| r.first().cloned()))
            .unwrap_or(Value::Null)
    };
    assert_eq!(alpha_run(&s)["status"], "running", "{s:#}");
    std::fs::write(env.root().join("release"), "").unwrap();
    w.term.wait_for("paused", |s| {
        s.lines()
            .any(|l| l.starts_with("> ") && l.contains("⏸") && l.contains("paused"))
    });
    let log = std::fs::read_to_string(env.root().join("agent.log")).unwrap();
    assert!(
        log.contains("end alpha 0 1"),
        "the iteration was stopped before its end:\n{log}"
    );
    let s = w.status();
    assert_eq!(alpha_run(&s)["status"], "paused", "{s:#}");
    assert_eq!(alpha_run(&s)["iteration"], 1, "{s:#}");
    w.agrees(&events.batch());
    // Enter: the finished iteration in the table.
    w.term.keys(&["Enter"]);
    let detail = w.term.wait_for("the finished iteration", |s| {
        s.contains("1 iteration(s)") && s.contains("validation")
    });
    assert!(detail.contains("outcome"), "{detail}");
    // The pane shows the iteration pointed at: its log, then (Enter) the prompt it got.
    w.term
        .wait_for("the iteration's log", |s| s.contains("iteration-001.log"));
    w.term.keys(&["Enter"]);
    let prompt = w.term.wait_for("the iteration's prompt", |s| {
        s.contains("iteration-001.prompt.md")
    });
    assert!(prompt.contains("Enter: its log"), "{prompt}");
    w.term.keys(&["Escape"]);
    // (A key right after Esc would be read as Alt+key.)
    w.term.wait_for("the tree again", |s| s.contains(" loops "));

    // `r`: it goes on at iteration 2 (the first was not lost), and the plan to its end.
    w.term.keys(&["r"]);
    let start = Instant::now();
    loop {
        let batch = events.batch();
        if !batch.is_empty() {
            seen += batch.len();
            w.agrees(&batch);
        }
        if w.status()["plans"][0]["status"] == "complete" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the plan did not complete:\n{}\n{}",
            w.term.screen(),
            daemon_log(&env)
        );
    }
    w.agrees(&events.batch());
    let log = std::fs::read_to_string(env.root().join("agent.log")).unwrap();
    // Iteration 1 ran once (not again after the pause), then iteration 2.
    assert_eq!(log.matches("start alpha 0 1\n").count(), 1, "{log}");
    assert!(log.contains("start alpha 0 2"), "{log}");
    let tree = tree_of(&w.term.screen());
    assert!(
        tree.iter()
            .filter(|l| !l.is_empty())
            .all(|l| l.trim_start().starts_with("✓ ") && l.contains(" complete")),
        "not all complete: {tree:#?}"
    );
    assert!(seen > 20, "only {seen} events");
    let files = harness::git(&env.repo(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        files.contains("alpha-1.txt") && files.contains("beta-1.txt"),
        "{files}"
    );

    // The plan's and the spec loop's runs show their own logs (their worktree is gone:
    // the daemon's kept copy of its .ralph/).
    let s = w.status();
    let plan_runs = s["plans"][0]["runs"].as_array().unwrap();
    let run_of = |kind: &str| -> String {
        plan_runs
            .iter()
            .find(|r| r["loop_type"] == kind)
            .and_then(|r| r["id"].as_str())
            .unwrap()
            .to_string()
    };
    let (plan_run, spec_run) = (run_of("plan"), run_of("spec"));
    w.select("it 5 ");
    w.term.wait_for("the plan run's log", |s| {
        s.contains(&format!(" {plan_run} iteration 5 · iteration-005.log"))
            && s.contains(&format!("run {plan_run} iteration 5/"))
    });
    // `e`: its log exported into .ralph/exports/, which git ignores.
    w.term.keys(&["e"]);
    let exported = env
        .repo()
        .join(format!(".ralph/exports/{plan_run}-iteration-005.log"));
    w.term.wait_for("the export", |s| {
        s.contains("exported") && exported.is_file()
    });
    let status = harness::git(
        &env.repo(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert!(!status.contains("exports"), "{status}");
    w.select_where("the spec loop's run", |l| {
        l.contains("build widgets") && l.contains(" it 1 ")
    });
    w.term.wait_for("the spec run's log", |s| {
        s.contains(&format!(" {spec_run} iteration 1 · iteration-001.log"))
            && s.contains(&format!("run {spec_run} iteration 1/"))
    });
    w.env.ok_with(&w.vars, &["daemon", "stop"]);
}
