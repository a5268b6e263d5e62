//! What a rollback must restore: files (with modes and symlinks), index, HEAD, branch;
//! ignored files apart. Shared by the snapshot test binaries.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::git;

/// Everything a rollback must restore, plus the ignored files it must leave alone.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub head: String,
    pub branch: String,
    pub index: String,
    pub files: BTreeMap<PathBuf, Entry>,
    pub ignored: BTreeMap<PathBuf, Entry>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    File { bytes: Vec<u8>, exec: bool },
    Link(PathBuf),
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if rel.as_os_str().is_empty() && name == ".git" {
            continue;
        }
        let r = rel.join(&name);
        let meta = std::fs::symlink_metadata(root.join(&r)).unwrap();
        if meta.file_type().is_symlink() {
            out.insert(
                r.clone(),
                Entry::Link(std::fs::read_link(root.join(&r)).unwrap()),
            );
        } else if meta.is_dir() {
            walk(root, &r, out);
        } else {
            out.insert(
                r.clone(),
                Entry::File {
                    bytes: std::fs::read(root.join(&r)).unwrap(),
                    exec: meta.permissions().mode() & 0o100 != 0,
                },
            );
        }
    }
}

pub fn git_ok(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env(
            "GIT_CONFIG_GLOBAL",
            dir.parent().unwrap().join("home/.gitconfig"),
        )
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.parent().unwrap().join("home"))
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn state(repo: &Path) -> State {
    let mut all = BTreeMap::new();
    walk(repo, Path::new(""), &mut all);
    let (ignored, files) = all
        .into_iter()
        .partition(|(p, _)| p.to_string_lossy().ends_with(".log"));
    State {
        head: git_ok(repo, &["rev-parse", "-q", "--verify", "HEAD"]).unwrap_or_default(),
        branch: git_ok(repo, &["symbolic-ref", "-q", "HEAD"]).unwrap_or_default(),
        index: git(repo, &["ls-files", "-s", "-z"]) + &git(repo, &["diff", "--cached"]),
        files,
        ignored,
    }
}
