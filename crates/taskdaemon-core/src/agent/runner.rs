//! Runs one child process and never leaves anything behind.
//!
//! - The child leads a new session and process group (setsid), so a terminal's Ctrl-C
//!   reaches only the harness, and nothing in it can be stopped by the terminal. It gets a
//!   parent-death signal (KILL): it dies with the harness, even a `kill -9`ed one.
//! - Every process of the spawn carries a token (see [`super::tracked`]), recorded on disk
//!   before the spawn when tracking is on, so a restarted harness can end what a dead one
//!   left.
//! - On timeout or cancellation the whole tree (process group, token carriers, their
//!   descendants: also what called `setsid` or double-forked) gets TERM, then KILL after
//!   the grace time.
//! - When the leader exits on its own, whatever it left running is ended the same way: an
//!   iteration owns nothing after it is over.
//! - With [`become_subreaper`], orphaned descendants are re-parented to the harness and
//!   reaped here, so none lingers as a zombie.
//! - Output is split into lines (long lines are cut at [`MAX_LINE`]) and handed to a
//!   callback in the order read, stdout and stderr interleaved.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Lines longer than this are delivered in pieces.
pub const MAX_LINE: usize = 256 * 1024;

/// How long to wait for output still in the pipes once the process group is gone.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    /// Written to stdin, which is then closed. `None`: stdin is /dev/null.
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    /// Time between TERM and KILL.
    pub grace: Duration,
    /// A command run once a tree ended by a timeout or a cancel is gone, to remove what
    /// lives on outside it: a container, which belongs to the runtime's daemon or
    /// monitor, not to this tree (`podman rm -f NAME`).
    pub after_stop: Option<Vec<OsString>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// The shell's convention: the exit code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProcessResult {
    pub status: ExitStatus,
    pub timed_out: bool,
    pub interrupted: bool,
    pub duration: Duration,
    /// Processes of the group still running after the leader exited, which were ended.
    pub leftovers_ended: bool,
}

/// Whether [`become_subreaper`] succeeded: every orphaned descendant is then our child.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Make this process the reaper of its orphaned descendants (Linux). Call once at start.
/// The watchdog ([`super::watchdog`]), if the binary named one, is started first, so it is
/// not re-parented to us; a watchdog that cannot start is said in the result (the harness
/// then works as without one).
pub fn become_subreaper() -> std::io::Result<()> {
    let watchdog = super::watchdog::start();
    #[cfg(target_os = "linux")]
    {
        if nix::sys::prctl::set_child_subreaper(true).is_ok() {
            SUBREAPER.store(true, Ordering::SeqCst);
            super::orphans::start_reaping();
        }
    }
    watchdog
}

/// In a child between fork and exec (async-signal-safe, touches no memory of the
/// parent): it gets a parent-death signal (KILL) so it dies with the harness `parent`, and
/// fails to start when the harness died before that was set. Linux sends the signal when
/// the spawning *thread* exits: spawn from a thread that waits for the child.
pub(crate) fn die_with(parent: Pid) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_pdeathsig(Some(Signal::SIGKILL)).map_err(std::io::Error::from)?;
        if nix::unistd::getppid() != parent {
            return Err(std::io::Error::other("the harness is gone"));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    Ok(())
}

/// The child's command: its program, arguments, directory (also as `PWD`), environment
/// with the spawn's token, piped output, its own session and the parent-death signal.
fn command(spec: &ProcessSpec, token: &str) -> Command {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args).current_dir(&spec.cwd);
    cmd.env(super::tracked::GROUP_VAR, token);
    // A new session: the child leads its own process group (so the group can be signalled
    // as a whole) and has no controlling terminal, so a tool that opens /dev/tty (a password
    // prompt, pinentry) fails instead of being stopped by SIGTTIN until the timeout.
    // The parent-death signal ends it with the harness; a harness that died between the
    // fork and the prctl is caught by comparing the parent pid. (Linux sends it when the
    // spawning *thread* exits: call this from a thread that outlives the child, as tokio's
    // workers and a current-thread runtime's thread do; never from `block_in_place`.)
    let parent = nix::unistd::getpid();
    // SAFETY: setsid, prctl and getppid are async-signal-safe and touch no memory of the
    // parent.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)?;
            die_with(parent)
        });
    }
    cmd.stdin(if spec.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    for (k, v) in &spec.env {
        if k != super::tracked::GROUP_VAR {
            cmd.env(k, v);
        }
    }
    // Its directory in `PWD` too (some agents, opencode, take their directory from it, not
    // from the cwd); the harness's `OLDPWD` means nothing to it.
    cmd.env(
        "PWD",
        std::path::absolute(&spec.cwd).unwrap_or_else(|_| spec.cwd.clone()),
    )
    .env_remove("OLDPWD");
    cmd
}

/// Run `spec`; call `on_line` for every line of output. Returns when the child and every
/// process of its group are gone.
pub async fn run_process(
    spec: &ProcessSpec,
    cancel: &CancellationToken,
    mut on_line: impl FnMut(Stream, &[u8]),
) -> std::io::Result<ProcessResult> {
    let start = Instant::now();
    let token = super::tracked::token();
    let mut cmd = command(spec, &token);
    // Recorded before it exists: a harness killed at any later moment leaves a record.
    let _record = super::tracked::record(&token, &spec.env)?;
    // And told to the watchdog, which ends the tree if the harness dies.
    let _watched = super::watchdog::Watched::new(&token);
    // Read before the spawn: only then is every orphan of this tree re-parented to us.
    // A command line that names the token's variable hands the token on to processes
    // outside the tree (a container runtime's `--env TASKDAEMON_GROUP`: the container's
    // processes are children of its daemon): those are found only by the walk.
    let names_token = spec
        .args
        .iter()
        .any(|a| a.to_string_lossy().contains(super::tracked::GROUP_VAR));
    let reaper = SUBREAPER.load(Ordering::SeqCst) && !names_token;
    // Named as ours while it runs: the orphan reaper leaves it to our wait.
    let (mut child, _leader) = super::Leader::spawn(|| cmd.spawn(), |c| c.id())?;
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    test_pause_after_spawn().await;
    let stop = Tree {
        procs: std::sync::Arc::new(TreeProcs {
            token,
            pgid,
            reaper,
            seen: std::sync::Mutex::default(),
        }),
        grace: spec.grace,
    };

    if let (Some(mut stdin), Some(data)) = (child.stdin.take(), spec.stdin.clone()) {
        // An agent that never reads stdin must not block us: write from a task, ignore EPIPE.
        tokio::spawn(async move {
            let _ = stdin.write_all(&data).await;
            let _ = stdin.shutdown().await;
        });
    }

    // Small: a line may be MAX_LINE long, and a flood must not fill memory.
    let (tx, mut rx) = mpsc::channel::<(Stream, Vec<u8>)>(64);
    let readers = [
        child
            .stdout
            .take()
            .map(|o| tokio::spawn(read_lines(o, Stream::Stdout, tx.clone()))),
        child
            .stderr
            .take()
            .map(|e| tokio::spawn(read_lines(e, Stream::Stderr, tx.clone()))),
    ];
    drop(tx);

    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let timer = async move {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timer);

    let mut timed_out = false;
    let mut interrupted = false;
    let status = loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                interrupted = true;
                break stop_group(&mut child, &stop, &mut rx, &mut on_line).await?;
            }
            _ = &mut timer => {
                timed_out = true;
                break stop_group(&mut child, &stop, &mut rx, &mut on_line).await?;
            }
            st = child.wait() => break st?,
            Some((s, line)) = rx.recv() => on_line(s, &line),
        }
    };

    // The leader is reaped; end and reap whatever it left, in its group or out of it.
    let leftovers_ended = end_leftovers(&stop, &mut rx, &mut on_line).await;
    if timed_out || interrupted {
        run_after_stop(spec).await;
    }

    // Remaining output: everything is dead now, so the pipes close unless a process escaped
    // the tree holding them (emptied its environment and double-forked); do not wait for
    // that one forever.
    let drain = async {
        while let Some((s, line)) = rx.recv().await {
            on_line(s, &line);
        }
    };
    let _ = tokio::time::timeout(DRAIN_LIMIT, drain).await;
    for r in readers.into_iter().flatten() {
        r.abort();
    }

    let status = match (status.code(), status.signal()) {
        (Some(c), _) => ExitStatus::Code(c),
        (None, Some(s)) => ExitStatus::Signal(s),
        (None, None) => ExitStatus::Code(-1),
    };
    Ok(ProcessResult {
        status,
        timed_out,
        interrupted,
        duration: start.elapsed(),
        leftovers_ended,
    })
}

/// What one spawn owns: its processes, its process group, and how long TERM may take.
struct Tree {
    procs: std::sync::Arc<TreeProcs>,
    grace: Duration,
}

/// How the processes of one spawn are found in `/proc`.
struct TreeProcs {
    token: String,
    pgid: i32,
    /// This process was the subreaper when the tree started, and the token stays in the
    /// tree (see [`Tree::surely_gone`]).
    reaper: bool,
    /// Every member seen alive, by pid and start time: one that exited is a zombie with no
    /// token left to be found by, and still ours to reap.
    seen: std::sync::Mutex<HashMap<i32, u64>>,
}

impl Tree {
    /// The process group the spawn leads.
    fn pgid(&self) -> i32 {
        self.procs.pgid
    }

    /// Whether nothing of the tree can be left, known without walking `/proc`: its group is
    /// empty and this process, the subreaper since before the spawn, has no child at all.
    ///
    /// Why that suffices: a descendant's parent is either alive (and a descendant itself) or
    /// the nearest subreaper above it, which is a descendant or this process. So every live
    /// or unreaped descendant hangs below a member of the group or below a child of ours.
    /// The group is checked first: once it is empty, its members have exited and their
    /// children are re-parented, and a child of ours only stops being one when we reap it.
    /// Not covered, as a `/proc` walk would: a process outside the tree given the token on
    /// purpose by a command that does not name it (a container runtime's command line
    /// names it, and always gets the walk).
    fn surely_gone(&self) -> bool {
        self.procs.reaper && !group_exists(self.pgid()) && !has_children()
    }

    /// [`TreeProcs::live`] on a blocking thread: reading `/proc` may wait for a process in
    /// the middle of an `exec` (up to 100 ms each), which must not hold the runtime's
    /// thread (the other loops' output, in a daemon). Here when no thread can be had (the
    /// runtime is shutting down).
    async fn live(&self, leader_reaped: bool) -> Vec<i32> {
        let procs = self.procs.clone();
        match tokio::task::spawn_blocking(move || procs.live(leader_reaped)).await {
            Ok(live) => live,
            Err(_) => self.procs.live(leader_reaped),
        }
    }

    async fn signal(&self, sig: Signal, leader_reaped: bool) {
        signal_group(self.pgid(), sig);
        super::tracked::signal_all(&self.live(leader_reaped).await, sig);
    }
}

impl TreeProcs {
    /// The live processes of the tree; zombies among them that are our children (orphans
    /// re-parented to the subreaper) are reaped on the way. The group is reaped as a whole
    /// only once the leader is (`leader_reaped`): before, that would take the leader's
    /// status from tokio.
    fn live(&self, leader_reaped: bool) -> Vec<i32> {
        if leader_reaped {
            reap_group(self.pgid);
        }
        let me = nix::unistd::getpid().as_raw();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let known: Vec<(i32, u64)> = seen.iter().map(|(&pid, &start)| (pid, start)).collect();
        let mut procs = super::proctree::tree(&self.token, self.pgid, self.reaper, &known);
        seen.retain(|&pid, &mut start| {
            if procs.iter().any(|p| p.pid == pid) {
                return true;
            }
            // Not found by its token (an exited member) or its place: the same process?
            match super::proctree::read_proc(pid) {
                Some(p) if p.start == start => {
                    procs.push(p);
                    true
                }
                _ => false,
            }
        });
        let mut live = Vec::new();
        for p in procs {
            if p.zombie {
                if p.ppid == me && p.pid != self.pgid {
                    // Not the leader (tokio reaps it): an orphan only we can reap.
                    let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
                }
            } else {
                seen.insert(p.pid, p.start);
                live.push(p.pid);
            }
        }
        live
    }
}

/// TERM the tree, keep reading output during the grace time, then KILL; returns the
/// leader's status.
async fn stop_group(
    child: &mut Child,
    tree: &Tree,
    rx: &mut mpsc::Receiver<(Stream, Vec<u8>)>,
    on_line: &mut impl FnMut(Stream, &[u8]),
) -> std::io::Result<std::process::ExitStatus> {
    tree.signal(Signal::SIGTERM, false).await;
    let grace_timer = tokio::time::sleep(tree.grace);
    tokio::pin!(grace_timer);
    loop {
        tokio::select! {
            st = child.wait() => return st,
            _ = &mut grace_timer => break,
            Some((s, line)) = rx.recv() => on_line(s, &line),
        }
    }
    tree.signal(Signal::SIGKILL, false).await;
    child.wait().await
}

/// Run `spec.after_stop` to its end (at most [`AFTER_STOP_LIMIT`]), its output discarded:
/// what it removes may already be gone, which is no error.
async fn run_after_stop(spec: &ProcessSpec) {
    let Some((program, args)) = spec.after_stop.as_ref().and_then(|a| a.split_first()) else {
        return;
    };
    let mut cmd = Command::new(program);
    // The environment the stopped command had (a runtime's settings come from it).
    let env = spec
        .env
        .iter()
        .filter(|(k, _)| k != super::tracked::GROUP_VAR);
    cmd.args(args)
        .envs(env.map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .env("PWD", &spec.cwd)
        .env_remove("OLDPWD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let Ok(mut child) = cmd.spawn() else {
        return;
    };
    if tokio::time::timeout(AFTER_STOP_LIMIT, child.wait())
        .await
        .is_err()
    {
        if let Some(pid) = child.id() {
            signal_group(pid as i32, Signal::SIGKILL);
        }
        let _ = child.wait().await;
    }
}

/// How long a stop's clean-up command may take.
const AFTER_STOP_LIMIT: Duration = Duration::from_secs(30);

/// After the leader is gone: if processes of its tree remain (in its group, or escaped
/// with `setsid` or a double fork), TERM them, KILL after the grace time, and reap them.
/// Returns whether any were found.
async fn end_leftovers(
    tree: &Tree,
    rx: &mut mpsc::Receiver<(Stream, Vec<u8>)>,
    on_line: &mut impl FnMut(Stream, &[u8]),
) -> bool {
    reap_group(tree.pgid());
    if tree.surely_gone() || settled(tree, rx, on_line).await {
        return false;
    }
    tree.signal(Signal::SIGTERM, true).await;
    let until = Instant::now() + tree.grace;
    let mut last_kill: Option<Instant> = None;
    loop {
        let live = tree.live(true).await;
        if live.is_empty() && !group_exists(tree.pgid()) {
            return true;
        }
        let now = Instant::now();
        if now >= until && last_kill.is_none_or(|t| now >= t + Duration::from_millis(100)) {
            // Again and again: what forked since the last KILL is caught by the next.
            super::tracked::signal_all(&live, Signal::SIGKILL);
            signal_group(tree.pgid(), Signal::SIGKILL);
            last_kill = Some(now);
        }
        if now >= until + Duration::from_secs(5) {
            // Unkillable (uninterruptible sleep) or not our child to reap: give up waiting.
            return true;
        }
        // Keep the pipes flowing so a member blocked on a full pipe can see its signal.
        if let Ok(Some((s, line))) =
            tokio::time::timeout(Duration::from_millis(10), rx.recv()).await
        {
            on_line(s, &line);
        }
    }
}

/// How long what is still exiting when the leader has gone (the members a sandbox's pid
/// namespace took down with it, a shell's last child) may take to go on its own before it
/// counts as left behind.
const SETTLE: Duration = Duration::from_millis(500);

/// Whether the tree empties on its own within [`SETTLE`]: then nothing was left behind, and
/// the iteration's log does not say that something was ended.
async fn settled(
    tree: &Tree,
    rx: &mut mpsc::Receiver<(Stream, Vec<u8>)>,
    on_line: &mut impl FnMut(Stream, &[u8]),
) -> bool {
    let until = Instant::now() + SETTLE;
    loop {
        if tree.live(true).await.is_empty() && !group_exists(tree.pgid()) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        if let Ok(Some((s, line))) =
            tokio::time::timeout(Duration::from_millis(10), rx.recv()).await
        {
            on_line(s, &line);
        }
    }
}

/// A test hook: `TASKDAEMON_TEST_SPAWN_PAUSE_MS` holds the harness right after a spawn, so
/// tests can kill it in the moment between a process starting and anything else happening.
async fn test_pause_after_spawn() {
    if let Some(ms) = std::env::var("TASKDAEMON_TEST_SPAWN_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), sig);
        if sig == Signal::SIGTERM {
            // A stopped process does not act on TERM until continued.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGCONT);
        }
    }
}

/// Whether any process (zombies included) is still in the group.
fn group_exists(pgid: i32) -> bool {
    pgid > 0 && !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

/// Whether this process has any child, running or exited and not yet reaped, of any of
/// its threads. `WNOWAIT`: nothing is reaped, so no exit status is taken from its owner.
fn has_children() -> bool {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{Id, waitid};
        let flags = WaitPidFlag::WEXITED
            | WaitPidFlag::WNOHANG
            | WaitPidFlag::WNOWAIT
            | WaitPidFlag::__WALL;
        !matches!(waitid(Id::All, flags), Err(Errno::ECHILD))
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Reap exited members of the group that were re-parented to us (subreaper).
fn reap_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    loop {
        match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

async fn read_lines(
    mut r: impl AsyncRead + Unpin,
    stream: Stream,
    tx: mpsc::Sender<(Stream, Vec<u8>)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut split = LineSplitter::new(MAX_LINE);
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut lines = Vec::new();
        split.push(&buf[..n], |l| lines.push(l.to_vec()));
        for l in lines {
            if tx.send((stream, l)).await.is_err() {
                return;
            }
        }
    }
    let mut last = None;
    split.finish(|l| last = Some(l.to_vec()));
    if let Some(l) = last {
        let _ = tx.send((stream, l)).await;
    }
}

/// Splits a byte stream into lines without the newline (and a trailing `\r`), cutting lines
/// longer than `max`.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            max: max.max(1),
        }
    }

    pub fn push(&mut self, mut data: &[u8], mut emit: impl FnMut(&[u8])) {
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            self.buf.extend_from_slice(&data[..i]);
            self.emit_buf(&mut emit);
            data = &data[i + 1..];
        }
        self.buf.extend_from_slice(data);
        while self.buf.len() > self.max {
            let rest = self.buf.split_off(self.max);
            emit(&self.buf);
            self.buf = rest;
        }
    }

    pub fn finish(&mut self, mut emit: impl FnMut(&[u8])) {
        if !self.buf.is_empty() {
            self.emit_buf(&mut emit);
        }
    }

    fn emit_buf(&mut self, emit: &mut impl FnMut(&[u8])) {
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        while self.buf.len() > self.max {
            let rest = self.buf.split_off(self.max);
            emit(&self.buf);
            self.buf = rest;
        }
        emit(&self.buf);
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Option<Duration>) -> ProcessSpec {
        ProcessSpec {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![],
            stdin: Some(b"hello from stdin\n".to_vec()),
            timeout,
            grace: Duration::from_millis(300),
            after_stop: None,
        }
    }

    #[test]
    fn splitter_handles_partial_and_long_lines() {
        let mut s = LineSplitter::new(4);
        let mut out: Vec<String> = Vec::new();
        s.push(b"ab", |l| out.push(String::from_utf8_lossy(l).into()));
        s.push(b"c\r\nabcdefgh\nxy", |l| {
            out.push(String::from_utf8_lossy(l).into())
        });
        s.finish(|l| out.push(String::from_utf8_lossy(l).into()));
        assert_eq!(out, ["abc", "abcd", "efgh", "xy"]);
    }

    #[tokio::test]
    async fn reads_stdin_and_both_streams() {
        let mut lines = Vec::new();
        let r = run_process(
            &sh("cat; echo err >&2; exit 7", None),
            &CancellationToken::new(),
            |s, l| lines.push((s, String::from_utf8_lossy(l).into_owned())),
        )
        .await
        .unwrap();
        assert_eq!(r.status, ExitStatus::Code(7));
        assert!(lines.contains(&(Stream::Stdout, "hello from stdin".into())));
        assert!(lines.contains(&(Stream::Stderr, "err".into())));
    }

    #[tokio::test]
    async fn the_after_stop_command_runs_after_a_timeout_and_not_after_an_exit() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("removed");
        let with_after = |script: &str, timeout| ProcessSpec {
            after_stop: Some(vec!["touch".into(), mark.clone().into()]),
            ..sh(script, timeout)
        };
        let cancel = CancellationToken::new();
        let r = run_process(&with_after("exit 0", None), &cancel, |_, _| {})
            .await
            .unwrap();
        assert!(!r.timed_out);
        assert!(!mark.exists(), "an exit leaves nothing to remove");
        let r = run_process(
            &with_after("sleep 600", Some(Duration::from_millis(200))),
            &cancel,
            |_, _| {},
        )
        .await
        .unwrap();
        assert!(r.timed_out);
        assert!(mark.exists(), "run, and waited for, once the tree is gone");
    }

    #[tokio::test]
    async fn timeout_ends_the_whole_group_even_when_term_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("gc.pid");
        let script = format!(
            "trap '' TERM; (trap '' TERM; sleep 600) & echo $! > {}; sleep 600",
            pidfile.display()
        );
        let r = run_process(
            &sh(&script, Some(Duration::from_millis(300))),
            &CancellationToken::new(),
            |_, _| {},
        )
        .await
        .unwrap();
        assert!(r.timed_out);
        assert_eq!(r.status, ExitStatus::Signal(9));
        let gc: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            matches!(
                nix::sys::signal::kill(Pid::from_raw(gc), None),
                Err(Errno::ESRCH)
            ) || std::fs::read_to_string(format!("/proc/{gc}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true),
            "grandchild {gc} survived"
        );
    }

    #[tokio::test]
    async fn cancellation_interrupts() {
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            c2.cancel();
        });
        let r = run_process(&sh("sleep 600", None), &cancel, |_, _| {})
            .await
            .unwrap();
        assert!(r.interrupted && !r.timed_out);
    }

    #[tokio::test]
    async fn background_leftovers_are_ended_when_the_leader_exits() {
        let r = run_process(
            &sh("sleep 600 & echo started", None),
            &CancellationToken::new(),
            |_, _| {},
        )
        .await
        .unwrap();
        assert_eq!(r.status, ExitStatus::Code(0));
        assert!(r.leftovers_ended);
    }

    #[tokio::test]
    async fn what_exits_on_its_own_right_after_the_leader_is_not_reported_as_ended() {
        // A shell's last child, or what a sandbox's pid namespace takes down with it, is
        // still exiting when the leader is reaped: nothing was left behind.
        for script in ["echo only the leader", "sleep 0.02 & echo started"] {
            let r = run_process(&sh(script, None), &CancellationToken::new(), |_, _| {})
                .await
                .unwrap();
            assert_eq!(r.status, ExitStatus::Code(0));
            assert!(!r.leftovers_ended, "{script}: reported as left behind");
        }
    }

    /// Ended and reaped: not even a zombie is left.
    fn gone(pid: i32) -> bool {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn an_escapee_is_ended_when_the_group_it_left_is_empty() {
        // The group is empty once the leader exits: only the escapee, re-parented to the
        // subreaper, says that something is left (the check before any `/proc` walk).
        let _ = become_subreaper();
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a").display().to_string();
        let script = format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {a}; exec sleep 600' & \
             while [ ! -s {a} ]; do sleep 0.05; done"
        );
        let mut spec = sh(&script, None);
        spec.grace = Duration::from_millis(200);
        let r = run_process(&spec, &CancellationToken::new(), |_, _| {})
            .await
            .unwrap();
        assert_eq!(r.status, ExitStatus::Code(0));
        assert!(r.leftovers_ended);
        let pid: i32 = std::fs::read_to_string(&a).unwrap().trim().parse().unwrap();
        assert!(gone(pid), "the escapee ({pid}) survived the iteration");
    }

    #[tokio::test]
    async fn processes_that_left_the_group_are_ended_with_the_iteration() {
        let _ = become_subreaper();
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n).display().to_string();
        // One leaves the session, one is double-forked and orphaned; both ignore TERM.
        let script = format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {a}; exec sleep 600' & \
             (sh -c 'trap \"\" TERM; echo $$ > {b}; sleep 600' &) ; \
             while [ ! -s {a} ] || [ ! -s {b} ]; do sleep 0.05; done; echo started",
            a = p("a"),
            b = p("b")
        );
        let mut spec = sh(&script, None);
        spec.grace = Duration::from_millis(200);
        let r = run_process(&spec, &CancellationToken::new(), |_, _| {})
            .await
            .unwrap();
        assert_eq!(r.status, ExitStatus::Code(0));
        assert!(r.leftovers_ended);
        for f in ["a", "b"] {
            let pid: i32 = std::fs::read_to_string(p(f))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(gone(pid), "{f} ({pid}) survived the iteration");
        }
    }
}
