//! File paths in records are stored absolute (spec 3 §8): a relative path is taken
//! relative to a base (the directory the person typed it in), `.` and `..` are resolved,
//! and symlinks in the part that exists are resolved too. The file need not exist yet.

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

#[cfg(test)]
mod tests {
    use super::*;

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
