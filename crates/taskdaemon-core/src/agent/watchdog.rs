//! The harness's watchdog: a process of its own that outlives the harness only to end the
//! agents' trees when the harness dies, however it dies (`kill -9` included).
//!
//! The parent-death signal ends an agent's first process with the harness, but not what
//! that process started (a script under `sh -c`, a tool under a CLI): re-parented to pid 1,
//! those would go on working, and committing, for a harness that is gone. So a harness that
//! runs agents (the daemon, `run`, `task`) starts one watchdog (the binary's hidden
//! `__watchdog`) and tells it over a pipe the token of every tree it starts (`+TOKEN`) and
//! of every tree that is gone (`-TOKEN`). When the pipe reaches its end, because the harness
//! exited or was killed, the watchdog ends every process that still carries a token it was
//! told of (TERM, then KILL) and exits. A harness restarted later still ends what is
//! recorded on disk ([`super::tracked`]); the watchdog makes that unnecessary for the
//! moment in between.
//!
//! The watchdog is double-forked into a session of its own before the harness becomes the
//! subreaper ([`super::become_subreaper`] starts it), so it is not the harness's child (a
//! harness with no child left knows at once that a tree is gone), gets no signal from the
//! terminal, and holds none of the harness's output. Linux only, like the token walk.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The program that serves as the watchdog (`taskdaemon __watchdog`), set by the binary.
static PROGRAM: OnceLock<(PathBuf, Vec<OsString>)> = OnceLock::new();

/// The write end of the running watchdog's pipe (non-blocking, close-on-exec).
static PIPE: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// How long the processes of a dead harness's trees get between TERM and KILL.
const GRACE: Duration = Duration::from_millis(500);

/// Name the program that serves as this process's watchdog when it runs agents: it must
/// read its standard input as [`serve`] does. Without one, no watchdog is started.
pub fn set_program(program: PathBuf, args: Vec<OsString>) {
    let _ = PROGRAM.set((program, args));
}

/// Start the watchdog, once, if a program is set. Called by [`super::become_subreaper`]
/// before it makes this process the subreaper. A watchdog that cannot start leaves the
/// harness as it was without one (the records on disk still end a dead harness's trees
/// at the next start), so the reason is returned only for the caller to say.
pub(crate) fn start() -> std::io::Result<()> {
    let Some((program, args)) = PROGRAM.get() else {
        return Ok(());
    };
    if PIPE.get().is_some() {
        return Ok(());
    }
    let file = spawn(program, args)?;
    let _ = PIPE.set(Mutex::new(file));
    Ok(())
}

#[cfg(target_os = "linux")]
fn spawn(program: &PathBuf, args: &[OsString]) -> std::io::Result<std::fs::File> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: fork, setsid and _exit are async-signal-safe and touch no memory of the
    // parent. The first child exits at once; its child (re-parented away from us, since we
    // are not the subreaper yet) goes on to exec the watchdog in a session of its own. An
    // exec that fails still reaches the spawn's error pipe, which the grandchild holds.
    unsafe {
        cmd.pre_exec(|| {
            match nix::unistd::fork().map_err(std::io::Error::from)? {
                nix::unistd::ForkResult::Parent { .. } => nix::libc::_exit(0),
                nix::unistd::ForkResult::Child => {}
            }
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn()?;
    let stdin = child.stdin.take();
    child.wait()?;
    let stdin = stdin.ok_or_else(|| std::io::Error::other("the watchdog's pipe is missing"))?;
    let fd = std::os::fd::OwnedFd::from(stdin);
    {
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
        let flags = unsafe { nix::libc::fcntl(raw, nix::libc::F_GETFL) };
        if flags < 0
            || unsafe { nix::libc::fcntl(raw, nix::libc::F_SETFL, flags | nix::libc::O_NONBLOCK) }
                < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(std::fs::File::from(fd))
}

#[cfg(not(target_os = "linux"))]
fn spawn(_program: &PathBuf, _args: &[OsString]) -> std::io::Result<std::fs::File> {
    Err(std::io::Error::other("a watchdog needs Linux"))
}

/// Tell the watchdog a tree starts (`true`) or is gone (`false`). One line of well under
/// `PIPE_BUF` bytes is one atomic write; a full pipe (a watchdog that does not read) or a
/// gone watchdog loses the line, never blocks the harness.
fn tell(token: &str, starts: bool) {
    if let Some(pipe) = PIPE.get() {
        let line = format!("{}{token}\n", if starts { '+' } else { '-' });
        let mut f = pipe.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write(line.as_bytes());
    }
}

/// A tree the watchdog knows of from its creation until it is dropped.
pub(crate) struct Watched(String);

impl Watched {
    pub(crate) fn new(token: &str) -> Watched {
        tell(token, true);
        Watched(token.to_string())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        tell(&self.0, false);
    }
}

/// The watchdog's work: read `+TOKEN`/`-TOKEN` lines until the input ends (the harness
/// exited or died), then end every process that carries a token still open. Returns how
/// many processes were ended.
pub fn serve(input: impl BufRead) -> usize {
    let mut open: HashSet<String> = HashSet::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if let Some(t) = line.strip_prefix('+') {
            open.insert(t.to_string());
        } else if let Some(t) = line.strip_prefix('-') {
            open.remove(t);
        }
    }
    let tokens: Vec<String> = open.into_iter().collect();
    super::tracked::end_carriers(&tokens, GRACE)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn serve_ends_the_open_trees_and_spares_the_closed_ones() {
        let open = crate::agent::proctree::tests::spawn("wd-open-token", "sleep 600");
        let closed = crate::agent::proctree::tests::spawn("wd-closed-token", "sleep 600");
        let input = "+wd-open-token\n+wd-closed-token\n-wd-closed-token\n";
        let ended = serve(std::io::Cursor::new(input));
        // `sh -c` and, unless it execs, its `sleep`.
        assert!(ended >= 1, "{ended}");
        let mut open = open;
        let mut closed = closed;
        assert!(open.wait().is_ok_and(|s| !s.success()));
        assert!(
            closed.try_wait().is_ok_and(|s| s.is_none()),
            "a closed tree was ended"
        );
        let _ = closed.kill();
        let _ = closed.wait();
    }
}
