//! The hermetic test environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

pub struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Default for Env {
    fn default() -> Self {
        Self::new()
    }
}

impl Env {
    pub fn new() -> Env {
        Env::new_in(&std::env::temp_dir())
    }

    /// [`Env::new`] under `base` (a sandbox with a private /tmp must still see the test's
    /// files).
    pub fn new_in(base: &Path) -> Env {
        let tmp = tempfile::tempdir_in(base).unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::write(
            root.join("home/.gitconfig"),
            "[user]\n\tname = test\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n",
        )
        .unwrap();
        let env = Env { _tmp: tmp, root };
        std::fs::create_dir_all(env.repo()).unwrap();
        git(&env.repo(), &["init", "-q"]);
        std::fs::write(env.repo().join("README.md"), "hello\n").unwrap();
        git(&env.repo(), &["add", "-A"]);
        git(&env.repo(), &["commit", "-qm", "initial"]);
        env
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    pub fn repo(&self) -> PathBuf {
        self.root.join("repo")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_taskdaemon"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TASKDAEMON_") {
                c.env_remove(k);
            }
        }
        hermetic(&mut c, &self.home());
        c.env("TASKDAEMON_NOW", "2026-11-21T12:00:00Z")
            .current_dir(self.repo());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(&[], args)
    }

    /// `taskdaemon ARGS` started in the test repository and left running.
    pub fn spawn(&self, args: &[&str]) -> Background {
        let err = self.root.join("background.err");
        let child = self
            .cmd()
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Background { child, err }
    }

    /// Run the binary with these variables set as well.
    pub fn run_with(&self, vars: &[(String, String)], args: &[&str]) -> Run {
        let mut c = self.cmd();
        c.envs(vars.iter().map(|(k, v)| (k, v)));
        let out = c.args(args).output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `run_with`, which must exit 0: its stdout.
    pub fn ok_with(&self, vars: &[(String, String)], args: &[&str]) -> String {
        let r = self.run_with(vars, args);
        assert_eq!(
            r.code, 0,
            "{args:?}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r.stdout
    }

    /// Write a scripted-agent script and return its agent spec.
    pub fn script(&self, name: &str, yaml: &str) -> String {
        let p = self.root.join(name);
        std::fs::write(&p, yaml).unwrap();
        format!("script:{}", p.display())
    }
}

fn hermetic(c: &mut Command, home: &Path) {
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        // Where `taskdaemon trust` keeps its list: never the host's.
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env("PATH", narrowed_path())
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
}

/// The agent CLIs a host may have installed. Tests never see them: a test that wants one
/// puts its own fake first on PATH.
const AGENT_CLIS: &[&str] = &["claude", "codex", "gemini", "opencode", "amp"];

/// The test's PATH with every agent CLI hidden: one directory of symlinks to everything
/// else on the PATH the tests were started with (first match wins, as for PATH), made
/// once per test binary. So a host with `claude` in /usr/bin gives the same results.
pub fn narrowed_path() -> &'static std::ffi::OsStr {
    static DIR: std::sync::OnceLock<(tempfile::TempDir, std::ffi::OsString)> =
        std::sync::OnceLock::new();
    let (_, path) = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let host = std::env::var_os("PATH").unwrap_or_default();
        for d in std::env::split_paths(&host) {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                if AGENT_CLIS.iter().any(|a| name == *a) {
                    continue;
                }
                let link = dir.path().join(&name);
                if !link.exists() && link.symlink_metadata().is_err() {
                    let _ = std::os::unix::fs::symlink(e.path(), &link);
                }
            }
        }
        let path = dir.path().as_os_str().to_owned();
        (dir, path)
    });
    path
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut c = Command::new("git");
    hermetic(&mut c, &dir.parent().unwrap().join("home"));
    let out = c.arg("-C").arg(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../taskdaemon-core/tests/fixtures")
        .join(rel)
}

/// Shell that prints a recorded agent-failure case (`fixtures/agent-failures/REL`): its
/// stdout, its stderr, and exits with its code.
pub fn replay(rel: &str) -> String {
    let dir = fixture("agent-failures").join(rel);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    format!(
        "cat '{}'\ncat '{}' >&2\nexit {}",
        dir.join("stdout.jsonl").display(),
        dir.join("stderr.txt").display(),
        meta["exit_code"].as_i64().unwrap()
    )
}

/// Shell that prints Claude Code's recorded subscription usage-limit reply with its reset
/// `secs` from now, and exits 1.
pub fn usage_limit_in(secs: u32) -> String {
    let dir = fixture("agent-failures").join("claude/usage-limit-subscription");
    format!(
        "reset=$(( $(date +%s) + {secs} ))\nsed \"s/\\\"resetsAt\\\":[0-9]*/\\\"resetsAt\\\":$reset/\" '{}'\nexit 1",
        dir.join("stdout.jsonl").display()
    )
}

pub fn csv_rows(dir: &Path) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(dir.join(".ralph/logs/summary.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

pub fn events(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Poll `status()` until `done` holds; fail at once when a plan failed or after `limit`,
/// with the status and `context()` (the daemons' logs) in the message.
pub fn wait_for_status(
    limit: Duration,
    what: &str,
    status: impl Fn() -> serde_json::Value,
    context: impl Fn() -> String,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = status();
        if done(&s) {
            return s;
        }
        assert!(
            !s["plans"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["status"] == "failed")),
            "a plan failed while waiting for {what}\nstatus: {s:#}\n{}",
            context()
        );
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}\nstatus: {s:#}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn wait_for(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn wait_timeout(child: &mut std::process::Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid a process wrote into `p`; waits (up to 10 s) while the file is there but its
/// writer has not written the number yet (`echo $$ > file` creates it first).
pub fn read_pid(p: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(pid) = std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .parse()
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} holds no pid",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL the watchdogs of this environment's harnesses (`taskdaemon __watchdog`, found
/// by their `HOME`): what a kill of the harness leaves then is ended only by the next
/// start, the path these tests check.
pub fn kill_watchdogs(env: &Env) {
    let home = format!("HOME={}", env.home().display());
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if cmdline.split(|b| *b == 0).any(|a| a == b"__watchdog")
            && environ.split(|b| *b == 0).any(|kv| kv == home.as_bytes())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// SIGKILL `pid` and wait (10 s at most) until it is gone.
pub fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let t = Instant::now();
    while pid_alive(pid) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{pid} survived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Alive and not a zombie.
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Whether any process at all (zombies included) is in the process group.
pub fn group_exists(pgid: i32) -> bool {
    !matches!(
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// The absolute path of a tool on the test's own PATH.
pub fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} not on PATH"))
}

/// Hold the snapshot lock of `repo` as a stuck save of another taskdaemon would, until
/// the returned file is dropped.
pub fn hold_snapshot_lock(repo: &Path) -> std::fs::File {
    let dir = repo.join(".git/taskdaemon");
    std::fs::create_dir_all(&dir).unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join("snapshot.lock"))
        .unwrap();
    f.lock().unwrap();
    f
}

/// Wait until the file at `path` has `n` lines (a validation command that appends one
/// each time it runs tells how far a loop has come).
pub fn wait_for_lines(path: &Path, n: usize, limit: Duration) {
    let start = Instant::now();
    loop {
        let have = std::fs::read_to_string(path).map_or(0, |t| t.lines().count());
        if have >= n {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{} has {have} of {n} lines after {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `taskdaemon` started by [`Env::spawn`], its standard error written to a file as it
/// runs.
pub struct Background {
    child: std::process::Child,
    err: PathBuf,
}

impl Drop for Background {
    /// A test that failed before it waited for its run ends it (its agents die with it).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Background {
    /// Wait until its standard error says `text`.
    pub fn wait_to_say(&self, text: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            let have = std::fs::read_to_string(&self.err).unwrap_or_default();
            if have.contains(text) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "it does not say {text:?} after {limit:?}:\n{have}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait at most `limit` for it to exit by itself: its exit status and standard error.
    pub fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let status = wait_timeout(&mut self.child, limit);
        (status, std::fs::read_to_string(&self.err).unwrap())
    }

    /// Interrupt it (SIGINT, a Ctrl-C) and wait at most `limit` for it to exit: its exit
    /// status and standard error.
    pub fn interrupt(mut self, limit: Duration) -> (ExitStatus, String) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = wait_timeout(&mut self.child, limit);
        (status, std::fs::read_to_string(&self.err).unwrap())
    }
}
