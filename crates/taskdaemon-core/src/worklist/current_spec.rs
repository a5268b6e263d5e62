//! `specs/.current-spec`: the name of the spec `implement` and `cancel` work on when none is
//! given. The file is repository content (it may come from someone else's clone), so the
//! name must lead to a directory under `specs/` of this repository: `../../other/specs/x`,
//! an absolute path, or a link out of the repository are refused.

use std::path::{Component, Path, PathBuf};

/// Where the file lives in a work tree.
pub fn file(top: &Path) -> PathBuf {
    top.join("specs").join(".current-spec")
}

/// The spec directory `.current-spec` names (canonical), `Ok(None)` when there is no such
/// file, or a message saying what is wrong with it.
pub fn resolve(top: &Path) -> Result<Option<PathBuf>, String> {
    let current = file(top);
    let name = match crate::fsutil::read_optional(&current) {
        Ok(Some(t)) => t.trim().to_string(),
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", current.display())),
    };
    let named = Path::new(&name);
    let plain = !name.is_empty()
        && named
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    let specs = top.join("specs");
    let dir = specs.join(named);
    if !plain {
        return Err(format!(
            "{} names `{name}`, which is not a directory name under specs/ (no `..`, no absolute path)\n  hint: write the name of a directory under specs/ into it, or pass SPEC_DIR",
            current.display()
        ));
    }
    if !dir.is_dir() {
        return Err(format!(
            "{} names `{name}`, but {} is not a directory\n  hint: write the name of a directory under specs/ into it, or pass SPEC_DIR",
            current.display(),
            dir.display()
        ));
    }
    let real = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let real_top = top.canonicalize().unwrap_or_else(|_| top.to_path_buf());
    if !real.starts_with(&real_top) {
        return Err(format!(
            "{} names `{name}`, which leads to {}, outside the repository {}\n  hint: taskdaemon never follows a link out of the repository; write the name of a real directory under specs/",
            current.display(),
            real.display(),
            real_top.display()
        ));
    }
    Ok(Some(real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_outside_the_repository_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("repo");
        let other = d.path().join("other/specs/x");
        std::fs::create_dir_all(top.join("specs/login")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        assert_eq!(resolve(&top), Ok(None));
        std::fs::write(file(&top), "login\n").unwrap();
        assert_eq!(
            resolve(&top),
            Ok(Some(top.join("specs/login").canonicalize().unwrap()))
        );
        for bad in [
            "../../other/specs/x",
            "/etc",
            "login/../../../other/specs/x",
        ] {
            std::fs::write(file(&top), bad).unwrap();
            assert!(
                resolve(&top).unwrap_err().contains("not a directory name"),
                "{bad}"
            );
        }
        std::os::unix::fs::symlink(&other, top.join("specs/link")).unwrap();
        std::fs::write(file(&top), "link").unwrap();
        assert!(
            resolve(&top)
                .unwrap_err()
                .contains("outside the repository")
        );
    }
}
