//! Where a repository's daemon keeps its runtime files: inside the common git dir, so
//! nothing appears in anyone's work tree and every worktree of the repository finds the same
//! daemon.
//!
//! ```text
//! <git-common-dir>/taskdaemon/daemon/
//!   lock          held (flock) by the running daemon for its whole life
//!   info.json     pid, socket path, start time
//!   daemon.log    what the daemon did (a daemon started in the background writes here)
//!   groups/       process groups of running agents (see agent::tracked)
//!   logs/<name>/  the .ralph/ logs of worktrees removed after a merge
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::git::{Git, GitError};

/// Unix socket paths longer than this do not fit `sockaddr_un`.
const SOCKET_MAX: usize = 100;

#[derive(Debug, Clone)]
pub struct DaemonPaths {
    /// The repository's top level (the main work tree).
    pub project: PathBuf,
    pub dir: PathBuf,
}

/// What a running daemon publishes about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DaemonInfo {
    pub pid: u32,
    pub socket: PathBuf,
    pub started_at: String,
    pub project: PathBuf,
}

impl DaemonPaths {
    /// The daemon of the repository containing `dir`, keyed to its main work tree.
    pub fn for_repo(dir: &Path) -> Result<DaemonPaths, GitError> {
        let git = Git::new(dir);
        let common = git.common_dir()?;
        // The main work tree is the parent of the common dir (`<top>/.git`) for a normal
        // repository; a bare or unusual layout falls back to this tree's top level.
        let project = match common.file_name() {
            Some(n) if n == ".git" => common.parent().map(Path::to_path_buf),
            _ => None,
        }
        .map_or_else(|| git.toplevel(), Ok)?;
        Ok(DaemonPaths {
            project,
            dir: common.join("taskdaemon").join("daemon"),
        })
    }

    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    pub fn info(&self) -> PathBuf {
        self.dir.join("info.json")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }
    pub fn groups(&self) -> PathBuf {
        self.dir.join("groups")
    }
    /// Logs kept from a removed worktree `name`.
    pub fn kept_logs(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(name)
    }

    /// The socket: in the daemon dir when the path fits, else in the temp dir under a name
    /// made from the daemon dir.
    pub fn socket(&self) -> PathBuf {
        let p = self.dir.join("sock");
        if p.as_os_str().len() <= SOCKET_MAX {
            return p;
        }
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.dir.as_os_str().as_encoded_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let uid = nix::unistd::getuid();
        std::env::temp_dir().join(format!("taskdaemon-{uid}-{h:016x}.sock"))
    }

    /// The published info, if the file exists and parses.
    pub fn read_info(&self) -> Option<DaemonInfo> {
        let text = std::fs::read_to_string(self.info()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Whether a daemon holds the lock now.
    pub fn is_running(&self) -> bool {
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(false)
            .open(self.lock())
        else {
            return false;
        };
        match f.try_lock() {
            Ok(()) => {
                let _ = f.unlock();
                false
            }
            Err(_) => true,
        }
    }
}
