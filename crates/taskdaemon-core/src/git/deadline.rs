//! A git process with a time limit, for git talking to a remote: a remote that accepts the
//! connection and never answers, or an `ssh` waiting for a host-key answer nobody can give,
//! would otherwise hold a run (and the lease it keeps renewing) forever. The process runs
//! in its own process group (so its `ssh` or `git-remote-https` is ended with it) and dies
//! with the harness (parent-death signal), its output is read beside it, and when the
//! limit passes the whole group is killed and the leader reaped.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long output still in the pipes is waited for once git has exited (a process it
/// left in the background may hold them).
const DRAIN: Duration = Duration::from_secs(2);

/// Why [`output_within`] gave no output.
pub(super) enum Ended {
    Io(std::io::Error),
    TimedOut,
}

/// Run `c` (stdin: `input`, or nothing) to completion within `limit`.
pub(super) fn output_within(
    mut c: Command,
    input: Option<Vec<u8>>,
    limit: Duration,
) -> Result<Output, Ended> {
    use std::os::unix::process::CommandExt;
    // Its own group is out of reach of a terminal's Ctrl-C to the harness: it is ended by
    // a parent-death signal instead, so it never outlives the harness that would end it
    // (this thread waits for it).
    let parent = nix::unistd::getpid();
    // SAFETY: `die_with` is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(move || crate::agent::die_with(parent));
    }
    c.process_group(0)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = c.spawn().map_err(Ended::Io)?;
    let group = Pid::from_raw(child.id() as i32);
    if let (Some(mut stdin), Some(data)) = (child.stdin.take(), input) {
        // A git that writes before it has read everything must not deadlock against us.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let (tx, rx) = mpsc::channel();
    read_to_end(child.stdout.take(), 1, tx.clone());
    read_to_end(child.stderr.take(), 2, tx);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= limit => {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
                return Err(Ended::TimedOut);
            }
            // Short waits while most git commands finish, longer ones after.
            Ok(None) => std::thread::sleep(
                (start.elapsed() / 10).clamp(Duration::from_millis(1), Duration::from_millis(25)),
            ),
            Err(e) => {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = child.wait();
                return Err(Ended::Io(e));
            }
        }
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let until = Instant::now() + DRAIN;
    for _ in 0..2 {
        let wait = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok((1, bytes)) => stdout = bytes,
            Ok((_, bytes)) => stderr = bytes,
            Err(_) => break,
        }
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Read `pipe` to its end on a thread and send the bytes, tagged `which`.
fn read_to_end(
    pipe: Option<impl Read + Send + 'static>,
    which: u8,
    tx: mpsc::Sender<(u8, Vec<u8>)>,
) {
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send((which, bytes));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn output_and_status_come_back_within_the_limit() {
        let out = output_within(
            sh("cat; echo err >&2; exit 3"),
            Some(b"in\n".to_vec()),
            Duration::from_secs(30),
        )
        .ok()
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"in\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_process_past_its_limit_is_ended_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let t = Instant::now();
        let r = output_within(sh(&script), None, Duration::from_millis(300));
        assert!(matches!(r, Err(Ended::TimedOut)));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background `sleep` was in its group: killed (a zombie until its parent's
        // parent reaps it, or gone).
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        let t = Instant::now();
        while !gone(pid) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone(pid), "the group's sleep ({pid}) survived");
    }
}
