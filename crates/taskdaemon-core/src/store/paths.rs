//! File paths in records. A path given on the command line is made absolute
//! ([`absolute`]: relative to the directory the person typed it in, `.` and `..` resolved,
//! symlinks in the part that exists resolved). In memory records hold absolute paths; in
//! the store (tracked by git, so read by every clone) a path inside the repository is
//! written relative to its top level ([`portable`]) and made absolute again when read
//! ([`local`]). An old absolute path is read as it is and written relative the next time
//! the record is saved.
//!
//! A record is input (it may come from someone else's clone): every path it names must
//! resolve inside the repository ([`inside`]) before the daemon uses it, and `store check`
//! reports those that do not.

use std::path::{Component, Path, PathBuf};

pub fn absolute(input: &Path, base: &Path) -> PathBuf {
    let joined = if input.is_absolute() {
        input.to_path_buf()
    } else {
        base.join(input)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    // Resolve symlinks in the longest part that exists.
    let mut existing = out.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return out,
        }
    }
    match existing.canonicalize() {
        Ok(mut p) => {
            for name in rest.into_iter().rev() {
                p.push(name);
            }
            p
        }
        Err(_) => out,
    }
}

/// The keys of a run's context that hold paths.
pub const CONTEXT_PATHS: &[&str] = &["plan-file", "specs-dir", "spec-file"];

/// `path` relative to `project` when it lies inside it (as typed or with links resolved).
fn relative_to(path: &Path, project: &Path) -> Option<PathBuf> {
    let path = crate::fsutil::normalize(path);
    let real = project.canonicalize().ok();
    [Some(project.to_path_buf()), real]
        .into_iter()
        .flatten()
        .find_map(|base| path.strip_prefix(&base).ok().map(Path::to_path_buf))
        .filter(|rel| !rel.as_os_str().is_empty())
}

/// The stored form: relative to the repository's top level when inside it, else as is.
pub fn portable(path: &str, project: &Path) -> String {
    let p = Path::new(path);
    if p.is_relative() {
        return path.to_string();
    }
    relative_to(p, project).map_or_else(|| path.to_string(), |r| r.display().to_string())
}

/// The in-memory form: a stored relative path joined to the repository's top level.
pub fn local(stored: &str, project: &Path) -> String {
    let p = Path::new(stored);
    if stored.is_empty() || p.is_absolute() {
        return stored.to_string();
    }
    project.join(p).display().to_string()
}

/// `path` (absolute, or relative to the repository) resolved with links in the part that
/// exists: it must lie inside `project`. The message names the path and the hint.
pub fn inside(path: &str, project: &Path) -> Result<PathBuf, String> {
    let resolved = absolute(Path::new(path), project);
    let real_project = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    if resolved.starts_with(&real_project)
        || resolved.starts_with(crate::fsutil::normalize(project))
    {
        return Ok(resolved);
    }
    Err(format!(
        "`{path}` resolves to {}, outside the repository {}; taskdaemon reads and writes only inside it (a record may come from someone else's clone); move the file into the repository and point the record at it (a plan or spec: `taskdaemon edit REF --file PATH`)",
        resolved.display(),
        project.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_and_local_round_trip_inside_and_refuse_outside() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(project.join("specs")).unwrap();
        let abs = project.join("specs/a.md").display().to_string();
        assert_eq!(portable(&abs, &project), "specs/a.md");
        assert_eq!(local("specs/a.md", &project), abs);
        assert_eq!(portable("/elsewhere/x.md", &project), "/elsewhere/x.md");
        assert!(inside("specs/a.md", &project).is_ok());
        assert!(inside(&abs, &project).is_ok());
        for bad in ["../../outside/plan.md", "/etc/passwd", "specs/../../x"] {
            let e = inside(bad, &project).unwrap_err();
            assert!(e.contains("outside the repository"), "{bad}: {e}");
        }
        // A link inside the repository that leads out is outside.
        std::os::unix::fs::symlink(d.path(), project.join("out")).unwrap();
        assert!(inside("out/x.md", &project).is_err());
    }

    #[test]
    fn relative_paths_become_absolute() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("specs")).unwrap();
        assert_eq!(
            absolute(Path::new("specs/./x/../oauth.md"), &base),
            base.join("specs/oauth.md")
        );
        assert_eq!(
            absolute(Path::new("/a/b/../c"), &base),
            PathBuf::from("/a/c")
        );
        assert_eq!(
            absolute(Path::new("new/dir/f.md"), &base),
            base.join("new/dir/f.md")
        );
    }
}
