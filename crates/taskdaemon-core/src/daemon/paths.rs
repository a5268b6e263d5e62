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
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};

/// Why the daemon's socket path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "refusing the daemon socket path {path}: {why}\n  hint: someone else may have put it there to pose as the daemon; check it, remove it (`rm -r {path}`) if it is safe, and start again"
    )]
    Squatted { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The private directory for sockets whose path would be too long: `<temp>/taskdaemon-<uid>`.
pub fn fallback_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    std::env::temp_dir().join(format!("taskdaemon-{uid}"))
}

/// Set `dir` to 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// `path` must be ours, not a link, and (for a directory) a directory only we can use.
fn check_owned(path: &Path, is_dir: bool) -> Result<(), SocketError> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| SocketError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let squatted = |why: String| SocketError::Squatted {
        path: path.to_path_buf(),
        why,
    };
    let me = nix::unistd::geteuid().as_raw();
    if meta.file_type().is_symlink() {
        return Err(squatted("it is a symbolic link".into()));
    }
    if meta.uid() != me {
        return Err(squatted(format!(
            "it belongs to uid {}, not to you (uid {me})",
            meta.uid()
        )));
    }
    if is_dir {
        if !meta.is_dir() {
            return Err(squatted("it is not a directory".into()));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            private_dir(path).map_err(|source| SocketError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        }
    } else if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
        return Err(squatted("it is not a socket".into()));
    }
    Ok(())
}

/// Make a freshly bound socket 0600 (read and write for its owner only).
pub fn restrict_socket(socket: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
}

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
        let common = Git::new(dir).common_dir()?;
        // The one project resolver (`crate::project`): the same store `plan new` opens.
        let project = crate::project::project_dir(dir)?;
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
    /// Where the last good read of the shared queue's lease holders is kept (`status`
    /// shows it, marked stale, while the queue cannot be read).
    pub fn queue_holders(&self) -> PathBuf {
        self.dir.join("queue-holders.json")
    }

    pub fn kept_logs(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(name)
    }

    /// The socket: in the daemon dir when the path fits, else in the user's private
    /// directory `<temp>/taskdaemon-<uid>/` under a name made from the daemon dir.
    pub fn socket(&self) -> PathBuf {
        let p = self.dir.join("sock");
        if p.as_os_str().len() <= SOCKET_MAX {
            return p;
        }
        let h = crate::fingerprint::fnv1a_hex(self.dir.as_os_str().as_encoded_bytes());
        fallback_dir().join(format!("{h}.sock"))
    }

    /// Create the daemon's directory (and `<git-common-dir>/taskdaemon`) mode 0700 whatever
    /// the umask, so no other user reaches its files or socket.
    pub fn prepare_dir(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        for d in [self.dir.parent(), Some(self.dir.as_path())]
            .into_iter()
            .flatten()
        {
            private_dir(d)?;
        }
        Ok(())
    }

    /// Make the socket's directory ready and clear a stale socket of ours. A fallback
    /// directory that another user owns, or a link, or a socket path someone else's file
    /// occupies, is refused (a squatter could otherwise pose as the daemon).
    pub fn prepare_socket(&self) -> Result<PathBuf, SocketError> {
        let socket = self.socket();
        let dir = socket.parent().unwrap_or(Path::new("/")).to_path_buf();
        if dir != self.dir {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(SocketError::Io { path: dir, source }),
            }
            check_owned(&dir, true)?;
        }
        if std::fs::symlink_metadata(&socket).is_ok() {
            check_owned(&socket, false)?;
            std::fs::remove_file(&socket).map_err(|source| SocketError::Io {
                path: socket.clone(),
                source,
            })?;
        }
        Ok(socket)
    }

    /// The published info, if the file exists and parses.
    pub fn read_info(&self) -> Option<DaemonInfo> {
        let text = crate::fsutil::read_optional(&self.info()).ok()??;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn paths(dir: &Path) -> DaemonPaths {
        DaemonPaths {
            project: dir.to_path_buf(),
            dir: dir.join("taskdaemon").join("daemon"),
        }
    }

    #[test]
    fn dirs_are_private_whatever_the_umask() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        std::fs::create_dir_all(&p.dir).unwrap();
        std::fs::set_permissions(&p.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        p.prepare_dir().unwrap();
        for dir in [&p.dir, &d.path().join("taskdaemon")] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
    }

    #[test]
    fn a_foreign_file_at_the_socket_path_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        p.prepare_dir().unwrap();
        // Not a socket: a file someone put there.
        std::fs::write(p.dir.join("sock"), "x").unwrap();
        let e = p.prepare_socket().unwrap_err();
        assert!(matches!(e, SocketError::Squatted { .. }), "{e}");
        assert!(e.to_string().contains("not a socket"), "{e}");
        std::fs::remove_file(p.dir.join("sock")).unwrap();
        std::os::unix::fs::symlink("/tmp", p.dir.join("sock")).unwrap();
        assert!(
            p.prepare_socket()
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        // A stale socket of ours is cleared.
        std::fs::remove_file(p.dir.join("sock")).unwrap();
        let l = std::os::unix::net::UnixListener::bind(p.dir.join("sock")).unwrap();
        drop(l);
        assert_eq!(p.prepare_socket().unwrap(), p.dir.join("sock"));
        assert!(!p.dir.join("sock").exists());
    }

    #[test]
    fn a_squatted_fallback_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let own = d.path().join("mine");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777)).unwrap();
        check_owned(&own, true).unwrap();
        let mode = std::fs::metadata(&own).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        assert!(matches!(
            check_owned(&link, true),
            Err(SocketError::Squatted { .. })
        ));
        if !nix::unistd::geteuid().is_root() {
            // `/` belongs to root: another user's directory.
            let e = check_owned(Path::new("/"), true).unwrap_err();
            assert!(e.to_string().contains("belongs to uid 0"), "{e}");
        }
    }
}
