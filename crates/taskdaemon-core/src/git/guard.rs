//! The repository's git files that make git run programs, watched across an agent's run.
//!
//! `-c` turns off what has a fixed name (`core.fsmonitor`, the hooks directory,
//! `diff.external`: see [`super::SAFE_CONFIG`]), but a filter, textconv or merge driver
//! of any name, a signing program or a remote helper is set in the repository's config,
//! and a hook planted in `.git/hooks` runs at the next commit that keeps the user's hooks.
//! So before the agents run, [`GitGuard::record`] keeps the bytes (and mode) of what the
//! agent could change there: the common directory's `config` and `hooks/` (each file),
//! `config.worktree`, the git directory's `commondir` (a main checkout's `.git` that grows
//! one takes its config from wherever it points) and a linked worktree's `.git` file.
//! Right after they finish, before the harness's first git call of the judging,
//! [`GitGuard::restore`] compares and puts back what changed (atomically, with its mode;
//! a planted file removed), never writing through a link: a directory that is no longer
//! the one recorded (replaced, or now a link) is reported and left alone.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::RepoFacts;

/// What a watched path was.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Absent,
    File {
        bytes: Vec<u8>,
        mode: u32,
    },
    Link(PathBuf),
    /// A directory (the hooks): its entries, one level (a subdirectory is `Other`).
    Dir {
        mode: u32,
        entries: BTreeMap<OsString, Entry>,
    },
    /// Anything else (a socket, a subdirectory of the hooks): compared by kind only.
    Other,
}

impl Entry {
    fn read(path: &Path, depth: u8) -> Entry {
        let Ok(m) = fs::symlink_metadata(path) else {
            return Entry::Absent;
        };
        let t = m.file_type();
        if t.is_symlink() {
            return fs::read_link(path).map_or(Entry::Other, Entry::Link);
        }
        if t.is_file() {
            return match fs::read(path) {
                Ok(bytes) => Entry::File {
                    bytes,
                    mode: m.permissions().mode() & 0o7777,
                },
                Err(_) => Entry::Other,
            };
        }
        if t.is_dir() && depth > 0 {
            let mut entries = BTreeMap::new();
            for e in fs::read_dir(path).into_iter().flatten().flatten() {
                entries.insert(e.file_name(), Entry::read(&e.path(), depth - 1));
            }
            return Entry::Dir {
                mode: m.permissions().mode() & 0o7777,
                entries,
            };
        }
        Entry::Other
    }
}

/// How a watched file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It was not there: planted.
    Added,
    /// Its content, mode or kind changed.
    Changed,
    Removed,
}

impl ChangeKind {
    pub fn label(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Changed => "changed",
            ChangeKind::Removed => "removed",
        }
    }
}

/// One watched file the agent changed, and whether it was put back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitChange {
    pub path: PathBuf,
    pub change: ChangeKind,
    /// `None`: put back as it was. `Some(why)`: left as found (the user must look).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_restored: Option<String>,
}

impl std::fmt::Display for GitChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}", self.path.display(), self.change.label())?;
        match &self.not_restored {
            None => write!(f, ", restored)"),
            Some(why) => write!(f, ", NOT restored: {why})"),
        }
    }
}

/// A watched path: its directory's identity when recorded, and what it was.
#[derive(Debug)]
struct Watched {
    path: PathBuf,
    parent: Option<(u64, u64)>,
    saved: Entry,
}

/// What the agents could change in the repositories' git files, as it was before they ran.
#[derive(Debug, Default)]
pub struct GitGuard {
    watched: Vec<Watched>,
}

/// The device and inode of `path` itself (not followed).
fn identity(path: &Path) -> Option<(u64, u64)> {
    fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// The paths watched for the repository whose facts are `f`.
fn watched_paths(f: &RepoFacts) -> Vec<(PathBuf, u8)> {
    let (git, common) = (&f.git_dir, &f.common_dir);
    let mut out = vec![
        (common.join("config"), 0),
        (common.join("hooks"), 1),
        (common.join("config.worktree"), 0),
        (git.join("config.worktree"), 0),
        (git.join("commondir"), 0),
    ];
    let dot_git = f.toplevel.join(".git");
    if fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        out.push((dot_git, 0));
    }
    out
}

impl GitGuard {
    /// Record the watched files of the repositories holding each of `dirs` (a directory
    /// outside any work tree is skipped; a path shared by two is watched once).
    pub fn record<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> GitGuard {
        let mut watched: Vec<Watched> = Vec::new();
        for dir in dirs {
            let Ok(facts) = RepoFacts::of(dir) else {
                continue;
            };
            for (path, depth) in watched_paths(&facts) {
                if watched.iter().any(|w| w.path == path) {
                    continue;
                }
                let parent = path.parent().and_then(identity);
                let saved = Entry::read(&path, depth);
                watched.push(Watched {
                    path,
                    parent,
                    saved,
                });
            }
        }
        GitGuard { watched }
    }

    /// How many paths are watched (for tests and the bench).
    pub fn len(&self) -> usize {
        self.watched.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// Compare each watched path with what was recorded and put back what changed. The
    /// changes, in the order watched (a hook by its own path); empty when nothing changed.
    pub fn restore(&self) -> Vec<GitChange> {
        let mut out = Vec::new();
        for w in &self.watched {
            let depth = u8::from(matches!(w.saved, Entry::Dir { .. }));
            let now = Entry::read(&w.path, depth);
            if now == w.saved {
                continue;
            }
            let moved = w.path.parent().and_then(identity) != w.parent;
            if moved {
                out.push(GitChange {
                    path: w.path.clone(),
                    change: change_kind(&w.saved, &now),
                    not_restored: Some(format!(
                        "{} is no longer the directory it was (replaced or moved); look at it before running git there",
                        w.path.parent().unwrap_or(&w.path).display()
                    )),
                });
                continue;
            }
            put_back(&w.path, &w.saved, &now, &mut out);
        }
        out
    }
}

fn change_kind(saved: &Entry, now: &Entry) -> ChangeKind {
    match (saved, now) {
        (Entry::Absent, _) => ChangeKind::Added,
        (_, Entry::Absent) => ChangeKind::Removed,
        _ => ChangeKind::Changed,
    }
}

/// Put `path` back to `saved` (it is `now`), reporting into `out`: a directory entry by
/// entry (a changed hook is reported by its own path).
fn put_back(path: &Path, saved: &Entry, now: &Entry, out: &mut Vec<GitChange>) {
    if let (
        Entry::Dir { entries, mode },
        Entry::Dir {
            entries: found,
            mode: found_mode,
        },
    ) = (saved, now)
    {
        for name in found.keys().filter(|n| !entries.contains_key(*n)) {
            let p = path.join(name);
            let r = remove_any(&p);
            out.push(change(p, ChangeKind::Added, r));
        }
        for (name, was) in entries {
            let is = found.get(name).unwrap_or(&Entry::Absent);
            if is != was {
                let p = path.join(name);
                let r = restore_entry(&p, was, is);
                out.push(change(p, change_kind(was, is), r));
            }
        }
        if mode != found_mode {
            let r = fs::set_permissions(path, fs::Permissions::from_mode(*mode))
                .map_err(|e| e.to_string());
            out.push(change(path.to_path_buf(), ChangeKind::Changed, r));
        }
        return;
    }
    let r = restore_entry(path, saved, now);
    out.push(change(path.to_path_buf(), change_kind(saved, now), r));
}

fn change(path: PathBuf, change: ChangeKind, r: Result<(), String>) -> GitChange {
    GitChange {
        path,
        change,
        not_restored: r.err(),
    }
}

/// Remove whatever is at `path` (a link itself, never its target).
fn remove_any(path: &Path) -> Result<(), String> {
    let r = match fs::symlink_metadata(path) {
        Err(_) => return Ok(()),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    r.map_err(|e| format!("cannot remove it: {e}"))
}

/// Make `path` (now `now`) what it was.
fn restore_entry(path: &Path, saved: &Entry, now: &Entry) -> Result<(), String> {
    let same_kind = matches!(
        (saved, now),
        (Entry::File { .. }, Entry::File { .. }) | (Entry::Dir { .. }, Entry::Dir { .. })
    );
    if !same_kind {
        remove_any(path)?;
    }
    match saved {
        Entry::Absent => Ok(()),
        Entry::File { bytes, mode } => {
            crate::fsutil::write_atomic(path, bytes).map_err(|e| e.to_string())?;
            fs::set_permissions(path, fs::Permissions::from_mode(*mode)).map_err(|e| e.to_string())
        }
        Entry::Link(target) => std::os::unix::fs::symlink(target, path).map_err(|e| e.to_string()),
        Entry::Dir { mode, entries } => {
            if !same_kind {
                fs::create_dir(path).map_err(|e| e.to_string())?;
            }
            for (name, was) in entries {
                let p = path.join(name);
                restore_entry(&p, was, &Entry::read(&p, 0))?;
            }
            fs::set_permissions(path, fs::Permissions::from_mode(*mode)).map_err(|e| e.to_string())
        }
        Entry::Other => Err("it was neither a file nor a link, and cannot be put back".into()),
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
