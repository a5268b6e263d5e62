//! Which repository config files the user trusts (`taskdaemon trust`, `untrust`,
//! `trust --list`), the way direnv and mise do it.
//!
//! A repository's `.taskdaemon/config.yaml` and its loop types in `.taskdaemon/loops/`
//! come with the clone: until the user trusts them, the config's keys that run commands,
//! name destinations or widen access are left out (`super::untrusted`), and so are the
//! loop types that set a validation command (`crate::loops`). Trust is for one content:
//! each file's SHA-256 is recorded with its path, so a changed file (a `git pull`, an
//! agent's edit) is untrusted again. The path is the repository's real directory (links
//! resolved) joined with the file's place in it: a repository whose config links to a
//! trusted file elsewhere is not trusted by it.
//!
//! The list is the user's: `$XDG_DATA_HOME/taskdaemon/trusted` (else
//! `~/.local/share/taskdaemon/trusted`), one `sha256:HEX PATH` line per file, replaced
//! atomically (a temporary file, synced, renamed) under a lock, mode 0600 in a 0700
//! directory.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{ConfigError, project_config_path};

/// One trusted file: the content's digest and the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `sha256:` and the hex digest of the content trusted.
    pub hash: String,
    pub path: PathBuf,
}

/// How a trusted file compares with what it holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Unchanged since it was trusted: it applies whole.
    Trusted,
    /// Changed since: untrusted again until trusted anew.
    Changed,
    /// No such file (any more).
    Missing,
}

/// What `trust` recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trusted {
    /// The files trusted: the config (when there is one), then each loop file.
    pub entries: Vec<Entry>,
    /// The keys of the config that apply now and did not while it was untrusted.
    pub applies: Vec<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(
        "{0} does not exist and there is no loop file in .taskdaemon/loops/, so there is nothing to trust\n  hint: run it in a repository with a .taskdaemon/config.yaml, or name one: `taskdaemon trust PATH`"
    )]
    NoConfig(PathBuf),
    #[error(
        "{0} is not a repository's config file\n  hint: name the repository's directory or its .taskdaemon/config.yaml; a file given with --config is always trusted and needs no trust"
    )]
    NotRepositoryConfig(PathBuf),
    #[error("cannot read {path}: {source}\n  hint: check that the file is yours and readable")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "cannot write the list of trusted config files {path}: {source}\n  hint: check that {path} and its directory are yours and writable"
    )]
    Write { path: PathBuf, source: io::Error },
    #[error(
        "neither XDG_DATA_HOME nor HOME is set, so there is no place for the list of trusted config files\n  hint: set HOME, or XDG_DATA_HOME to an absolute directory"
    )]
    NoDataDir,
    #[error(
        "{0} has a line break in its path, which the list of trusted files cannot hold\n  hint: move the repository to a path without one"
    )]
    BadPath(PathBuf),
    #[error("{0}\n  (nothing was trusted: fix the file first)")]
    Invalid(ConfigError),
    /// A loop file that does not load (its loader's error, as text).
    #[error("{0}\n  (nothing was trusted: fix the file first)")]
    InvalidLoop(String),
}

/// The list's file: `$XDG_DATA_HOME/taskdaemon/trusted`, else
/// `~/.local/share/taskdaemon/trusted`.
pub fn list_path() -> Result<PathBuf, TrustError> {
    let xdg = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = || {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".local").join("share"))
    };
    xdg.or_else(home)
        .map(|d| d.join("taskdaemon").join("trusted"))
        .ok_or(TrustError::NoDataDir)
}

/// `sha256:` and the hex digest of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let sum = Sha256::digest(bytes);
    let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The repository directory a PATH given to `trust`/`untrust` names: a directory, or a
/// `.taskdaemon/config.yaml` (which may be gone, for `untrust`).
pub fn repository_of(path: &Path) -> Result<PathBuf, TrustError> {
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let named = path.file_name().is_some_and(|n| n == "config.yaml")
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == ".taskdaemon");
    match path.parent().and_then(Path::parent) {
        Some(repo) if named && repo.as_os_str().is_empty() => Ok(PathBuf::from(".")),
        Some(repo) if named => Ok(repo.to_path_buf()),
        _ => Err(TrustError::NotRepositoryConfig(path.to_path_buf())),
    }
}

/// The name a repository's config is trusted by: its real directory (links resolved;
/// where it no longer exists, the absolute path) and `.taskdaemon/config.yaml`.
pub fn key(repo: &Path) -> PathBuf {
    project_config_path(&real_dir(repo))
}

/// The name loop file `name` of `repo` (in `.taskdaemon/loops/`) is trusted by.
pub fn loop_key(repo: &Path, name: &std::ffi::OsStr) -> PathBuf {
    loops_dir(&real_dir(repo)).join(name)
}

/// A repository's directory of loop types.
pub fn loops_dir(repo: &Path) -> PathBuf {
    repo.join(".taskdaemon").join("loops")
}

fn real_dir(repo: &Path) -> PathBuf {
    fs::canonicalize(repo)
        .or_else(|_| std::path::absolute(repo))
        .unwrap_or_else(|_| repo.to_path_buf())
}

/// Whether entry `e` is one of `repo`'s files (its config or a loop file).
fn of_repo(e: &Entry, repo: &Path) -> bool {
    e.path == key(repo) || e.path.parent() == Some(loops_dir(&real_dir(repo)).as_path())
}

/// Every trusted file (none when the list does not exist yet).
pub fn entries() -> Result<Vec<Entry>, TrustError> {
    read_entries(&list_path()?)
}

/// The file of `e` now, compared with what was trusted.
pub fn state(e: &Entry) -> State {
    match fs::read(&e.path) {
        Ok(bytes) if digest(&bytes) == e.hash => State::Trusted,
        Ok(_) => State::Changed,
        Err(_) => State::Missing,
    }
}

/// Whether the user trusts exactly `text` as the config of `repo`. Anything unreadable
/// is no trust.
pub(crate) fn is_trusted(repo: &Path, text: &[u8]) -> bool {
    is_trusted_file(&key(repo), text)
}

/// Whether the user trusts exactly `bytes` as the file trusted by the name `key`.
pub(crate) fn is_trusted_file(key: &Path, bytes: &[u8]) -> bool {
    let hash = digest(bytes);
    entries().is_ok_and(|all| all.iter().any(|e| e.path == key && e.hash == hash))
}

/// Trust the config of `repo` as it is now, and its loop files `loops` (each name in
/// `.taskdaemon/loops/` with the content its caller checked): the config must be a
/// valid repository config (what would be refused anyway is not trusted). Whatever of
/// the repository was trusted before is replaced.
pub(crate) fn trust(
    repo: &Path,
    loops: &[(std::ffi::OsString, Vec<u8>)],
) -> Result<Trusted, TrustError> {
    let file = project_config_path(repo);
    let (mut entries, mut applies) = (Vec::new(), Vec::new());
    match fs::read_to_string(&file) {
        Ok(text) => {
            let settings = super::parse_text(&file, &text).map_err(TrustError::Invalid)?;
            super::check_repository_config(repo, &file, &text, &settings)
                .map_err(TrustError::Invalid)?;
            applies = super::untrusted::split(settings).1;
            entries.push(Entry {
                hash: digest(text.as_bytes()),
                path: key(repo),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(TrustError::Read { path: file, source }),
    }
    for (name, bytes) in loops {
        entries.push(Entry {
            hash: digest(bytes),
            path: loop_key(repo, name),
        });
    }
    if entries.is_empty() {
        return Err(TrustError::NoConfig(file));
    }
    if let Some(e) = entries
        .iter()
        .find(|e| e.path.to_string_lossy().contains(['\n', '\r']))
    {
        return Err(TrustError::BadPath(e.path.clone()));
    }
    let kept = entries.clone();
    let repo = repo.to_path_buf();
    update(move |all| {
        all.retain(|e| !of_repo(e, &repo));
        all.extend(kept);
    })?;
    Ok(Trusted { entries, applies })
}

/// Forget the trust in the config and loop files of `repo`: the entries removed.
pub fn untrust(repo: &Path) -> Result<Vec<Entry>, TrustError> {
    let repo = repo.to_path_buf();
    update(move |all| {
        let (gone, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(all)
            .into_iter()
            .partition(|e| of_repo(e, &repo));
        *all = kept;
        gone
    })
}

fn read_entries(list: &Path) -> Result<Vec<Entry>, TrustError> {
    let text = match fs::read_to_string(list) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TrustError::Read {
                path: list.to_path_buf(),
                source,
            });
        }
    };
    Ok(text.lines().filter_map(parse_line).collect())
}

/// `sha256:HEX PATH`; comments and anything else are skipped.
fn parse_line(line: &str) -> Option<Entry> {
    let (hash, path) = line.split_once(' ')?;
    let hex = hash.strip_prefix("sha256:")?;
    let valid = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    (valid && Path::new(path).is_absolute()).then(|| Entry {
        hash: hash.to_string(),
        path: PathBuf::from(path),
    })
}

const HEADER: &str = "# Repository config files taskdaemon trusts (`taskdaemon trust`): the SHA-256 of the content trusted, then the file.\n";

/// Read, change and replace the list, under its lock.
fn update<R>(change: impl FnOnce(&mut Vec<Entry>) -> R) -> Result<R, TrustError> {
    let list = list_path()?;
    let failed = |source: io::Error| TrustError::Write {
        path: list.clone(),
        source,
    };
    let dir = list.parent().ok_or(TrustError::NoDataDir)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let lock = File::create(dir.join("trusted.lock")).map_err(failed)?;
    lock.lock().map_err(failed)?;
    let mut all = read_entries(&list)?;
    let out = change(&mut all);
    let mut text = String::from(HEADER);
    for e in &all {
        text.push_str(&format!("{} {}\n", e.hash, e.path.display()));
    }
    write_private(&list, text.as_bytes()).map_err(failed)?;
    Ok(out)
}

/// Replace `path` with `bytes` atomically and durably, readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".trusted-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256() {
        assert_eq!(
            digest(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn lines_that_are_not_entries_are_skipped() {
        let good = format!("sha256:{} /r/.taskdaemon/config.yaml", "a".repeat(64));
        assert_eq!(
            parse_line(&good).map(|e| e.path),
            Some(PathBuf::from("/r/.taskdaemon/config.yaml"))
        );
        for bad in [
            "# comment",
            "",
            "sha256:abc /r/x",
            &format!("md5:{} /r/x", "a".repeat(64)),
            &format!("sha256:{} relative/x", "a".repeat(64)),
            &format!("sha256:{} /with space/x", "g".repeat(64)),
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
        let spaced = format!(
            "sha256:{} /with space/.taskdaemon/config.yaml",
            "b".repeat(64)
        );
        assert_eq!(
            parse_line(&spaced).map(|e| e.path),
            Some(PathBuf::from("/with space/.taskdaemon/config.yaml"))
        );
    }

    #[test]
    fn a_path_names_its_repository() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(repository_of(d.path()).unwrap(), d.path());
        let file = d.path().join("r/.taskdaemon/config.yaml");
        assert_eq!(repository_of(&file).unwrap(), d.path().join("r"));
        assert_eq!(
            repository_of(Path::new(".taskdaemon/config.yaml")).unwrap(),
            Path::new(".")
        );
        for other in ["x.yaml", "/r/config.yaml", "/r/.taskdaemon/other.yaml"] {
            assert!(
                matches!(
                    repository_of(Path::new(other)),
                    Err(TrustError::NotRepositoryConfig(_))
                ),
                "{other}"
            );
        }
    }
}
