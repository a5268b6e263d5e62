//! One `git update-ref --stdin` for both ref transactions of a rollback (issue 16): the
//! check before anything changes (`prepare`, then `abort`: a ref it could not write stops
//! the rollback early) and, later, the move itself (`commit`). Git answers each
//! `start`/`prepare`/`abort`/`commit` with `<command>: ok` and dies on the first error, so
//! each transaction is written whole and its answers read back before the next.
//!
//! Between transactions git holds no lock and waits on its input. Dropping the session
//! closes that input and reaps the process; a killed taskdaemon closes it too, and git
//! aborts a transaction left open at the end of its input.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use super::SnapshotError;
use crate::git::{Git, GitError};

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Locks taken and released: nothing written.
    Abort,
    Commit,
}

impl End {
    fn word(self) -> &'static str {
        match self {
            End::Abort => "abort",
            End::Commit => "commit",
        }
    }
}

pub(super) struct RefSession {
    child: Child,
    input: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    dir: std::path::PathBuf,
}

impl RefSession {
    /// Start `update-ref -m <why> --stdin` (every ref it moves gets `why` in its reflog).
    pub fn start(git: &Git, why: &str) -> Result<RefSession, SnapshotError> {
        let mut child = git
            .command(&["update-ref", "-m", why, "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(GitError::Spawn)?;
        let (Some(input), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(GitError::Spawn(std::io::Error::other("no pipes to update-ref")).into());
        };
        Ok(RefSession {
            child,
            input: Some(input),
            answers: BufReader::new(out),
            dir: git.dir().to_path_buf(),
        })
    }

    /// One transaction of the `update`/`delete`/`verify`/`option` lines `body`, ended by
    /// `end` after `prepare`. An error (git's message) ends the session.
    pub fn transaction(&mut self, body: &str, end: End) -> Result<(), SnapshotError> {
        let text = format!("start\n{body}prepare\n{}\n", end.word());
        let written = match self.input.as_mut() {
            Some(i) => i
                .write_all(text.as_bytes())
                .and_then(|()| i.flush())
                .is_ok(),
            None => false,
        };
        if written {
            let mut ok = true;
            for word in ["start", "prepare", end.word()] {
                let mut line = String::new();
                let read = self.answers.read_line(&mut line).unwrap_or(0);
                if read == 0 || line.trim_end() != format!("{word}: ok") {
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(());
            }
        }
        Err(self.failure())
    }

    /// Git stopped (or answered something else): its message, once it exited.
    fn failure(&mut self) -> SnapshotError {
        drop(self.input.take());
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let _ = self.child.wait();
        GitError::Failed {
            args: "update-ref --stdin".into(),
            dir: self.dir.clone(),
            stderr: stderr.trim().to_string(),
        }
        .into()
    }
}

impl Drop for RefSession {
    fn drop(&mut self) {
        drop(self.input.take());
        // Its answers must not fill the pipe while it finishes.
        let _ = std::io::copy(&mut self.answers, &mut std::io::sink());
        let _ = self.child.wait();
    }
}
