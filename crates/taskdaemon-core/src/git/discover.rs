//! A repository's facts read from its files, the way `git rev-parse` finds them, for the
//! plain shapes only: a work tree with a `.git` directory, or a `.git` file naming a
//! linked worktree's (or a submodule's) git directory. Anything else (a variable that
//! changes discovery, `core.worktree`, an include, a bare repository, a file system
//! boundary, another owner, an extension this module does not know, text it cannot read)
//! is `None`: git is asked, and its answer, or its error, is the one given.
//!
//! Used by [`RepoFacts::of`](super::RepoFacts::of): a start then runs no git process
//! before its first iteration.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::RepoFacts;

/// Variables with which git finds or shapes a repository differently: with any of them
/// set, git answers.
const DISCOVERY_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
];

/// The facts of the work tree containing `dir`, or `None` when git must be asked.
pub(super) fn discover(dir: &Path) -> Option<RepoFacts> {
    if DISCOVERY_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return None;
    }
    let start = fs::canonicalize(dir).ok()?;
    let device = fs::metadata(&start).ok()?.dev();
    let mut at = start.as_path();
    loop {
        let dot_git = at.join(".git");
        match fs::symlink_metadata(&dot_git) {
            Ok(m) if m.is_dir() => return plain(at, dot_git),
            Ok(m) if m.is_file() => return linked(at, &dot_git),
            Ok(_) => return None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        // Inside a git directory itself, or a bare repository: git decides.
        if is_git_dir(at, at) {
            return None;
        }
        at = at.parent()?;
        if fs::metadata(at).ok()?.dev() != device {
            return None;
        }
    }
}

/// A work tree `top` whose `.git` is its git directory.
fn plain(top: &Path, git_dir: PathBuf) -> Option<RepoFacts> {
    // A `commondir` sends git elsewhere: git's answer says where (and is refused).
    if !is_git_dir(&git_dir, &git_dir) || fs::symlink_metadata(git_dir.join("commondir")).is_ok() {
        return None;
    }
    facts(top, git_dir.clone(), git_dir)
}

/// A work tree `top` whose `.git` file names its git directory (`gitdir: PATH`, relative
/// to `top` or absolute), which names the common directory in `commondir`.
fn linked(top: &Path, dot_git: &Path) -> Option<RepoFacts> {
    let text = fs::read_to_string(dot_git).ok()?;
    let named = text.strip_suffix('\n').unwrap_or(&text);
    let named = named.strip_prefix("gitdir: ")?;
    if named.is_empty() || named.contains('\n') {
        return None;
    }
    let git_dir = fs::canonicalize(top.join(named)).ok()?;
    let common_dir = match fs::read_to_string(git_dir.join("commondir")) {
        Ok(c) => {
            let c = c.strip_suffix('\n').unwrap_or(&c);
            if c.is_empty() || c.contains('\n') {
                return None;
            }
            fs::canonicalize(git_dir.join(c)).ok()?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => git_dir.clone(),
        Err(_) => return None,
    };
    if !is_git_dir(&git_dir, &common_dir) {
        return None;
    }
    facts(top, git_dir, common_dir)
}

/// Git's test of a git directory: a `HEAD` that names a ref or an object id, and the
/// common directory's `objects` and `refs` directories.
fn is_git_dir(git_dir: &Path, common_dir: &Path) -> bool {
    let head_ok = fs::symlink_metadata(git_dir.join("HEAD")).is_ok_and(|m| m.is_file())
        && fs::read_to_string(git_dir.join("HEAD")).is_ok_and(|h| {
            let h = h.trim_end();
            h.starts_with("ref: refs/")
                || (h.len() >= 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        });
    head_ok
        && fs::metadata(common_dir.join("objects")).is_ok_and(|m| m.is_dir())
        && fs::metadata(common_dir.join("refs")).is_ok_and(|m| m.is_dir())
}

/// The facts, once the repository's own files say nothing unusual and this user owns the
/// work tree and the git directory (git's `safe.directory` check is git's to make).
fn facts(top: &Path, git_dir: PathBuf, common_dir: PathBuf) -> Option<RepoFacts> {
    let me = nix::unistd::geteuid().as_raw();
    let owned = |p: &Path| fs::metadata(p).is_ok_and(|m| m.uid() == me);
    if !owned(top) || !owned(&git_dir) {
        return None;
    }
    let config = fs::read_to_string(common_dir.join("config")).ok()?;
    let object_format = read_config(&config)?;
    Some(RepoFacts {
        toplevel: top.to_path_buf(),
        object_format,
        index: git_dir.join("index"),
        info_exclude: common_dir.join("info").join("exclude"),
        plain: !common_dir.join("reftable").exists(),
        git_dir,
        common_dir,
    })
}

/// The object format a repository's `config` gives, when it is plainly a work tree's
/// config: no `core.worktree`, `core.bare` false or absent, no includes, a format version
/// of 0 or 1 and no extension but `objectFormat` and `refStorage`. Anything it cannot read
/// for certain is `None`.
fn read_config(text: &str) -> Option<String> {
    let mut section = String::new();
    let mut format = "sha1".to_string();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.ends_with('\\') {
            return None;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let (header, after) = rest.split_once(']')?;
            let after = after.trim();
            if !(after.is_empty() || after.starts_with('#') || after.starts_with(';')) {
                return None;
            }
            section = header.trim().to_ascii_lowercase();
            if section.starts_with("include") {
                return None;
            }
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), unquote(v.trim())?),
            None => {
                let key = line.split([';', '#']).next().unwrap_or("").trim();
                (key.to_ascii_lowercase(), "true".to_string())
            }
        };
        match (section.as_str(), key.as_str()) {
            ("core", "worktree") => return None,
            ("core", "bare") if !is_false(&value) => return None,
            ("core", "repositoryformatversion") if !matches!(value.as_str(), "0" | "1") => {
                return None;
            }
            ("extensions", "objectformat") => match value.to_ascii_lowercase().as_str() {
                f @ ("sha1" | "sha256") => format = f.to_string(),
                _ => return None,
            },
            ("extensions", "refstorage") => {}
            ("extensions", _) => return None,
            _ => {}
        }
    }
    Some(format)
}

/// A value without comments and surrounding quotes; `None` for escapes (git's to read).
fn unquote(v: &str) -> Option<String> {
    let v = match v.find([';', '#']) {
        Some(i) if !v[..i].contains('"') => v[..i].trim_end(),
        _ => v,
    };
    if v.contains('\\') {
        return None;
    }
    match v.strip_prefix('"') {
        Some(inner) => inner.strip_suffix('"').map(str::to_string),
        None if v.contains('"') => None,
        None => Some(v.to_string()),
    }
}

fn is_false(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "false" | "no" | "off" | "0" | ""
    )
}

#[cfg(test)]
#[path = "discover_tests.rs"]
mod tests;
