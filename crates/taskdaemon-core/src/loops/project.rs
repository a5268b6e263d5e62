//! A repository's own loop files, `.taskdaemon/loops/*.yaml`: they come with the clone,
//! so a definition in one that would run a validation command of its own waits for the
//! user's trust (`crate::config::trust`, which records each file's SHA-256 as it does
//! the config's); the others (prompts, limits) apply either way.

use std::fmt;
use std::path::{Path, PathBuf};

use super::registry::{LoopError, parse_file};
use crate::config::trust::{self, TrustError, Trusted};

/// One `*.yaml` (or `*.yml`) file of a loops directory and its text.
#[derive(Debug, Clone)]
pub(crate) struct LoopFile {
    pub path: PathBuf,
    pub text: String,
}

impl LoopFile {
    /// Whether the user trusts this file of `repo` as it is now.
    pub(crate) fn is_trusted(&self, repo: &Path) -> bool {
        self.path.file_name().is_some_and(|name| {
            trust::is_trusted_file(&trust::loop_key(repo, name), self.text.as_bytes())
        })
    }
}

/// The definitions of one of a repository's loop files left out because the file is
/// not trusted (as it is now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntrustedLoops {
    pub path: PathBuf,
    /// The repository, for the command that trusts it.
    pub repo: PathBuf,
    /// The loop types it defines that were left out.
    pub names: Vec<String>,
}

impl fmt::Display for UntrustedLoops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.names.iter().map(|n| format!("`{n}`")).collect();
        write!(
            f,
            "ignoring loop type{} {} from {}: this repository's loop files are not trusted (they came with the repository, and these set a validation command of their own)\n  hint: read the file; to apply it as it is now, `taskdaemon trust {}` (a changed file needs trusting again)",
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            self.path.display(),
            self.repo.display()
        )
    }
}

/// The loop files of `repo`'s `.taskdaemon/loops/`, in name order.
pub(crate) fn files(repo: &Path) -> Result<Vec<LoopFile>, LoopError> {
    yaml_files(&trust::loops_dir(repo))
}

/// The `*.yaml`/`*.yml` files of `dir` (none when it does not exist), in name order.
pub(crate) fn yaml_files(dir: &Path) -> Result<Vec<LoopFile>, LoopError> {
    let read = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LoopError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| match std::fs::read_to_string(&path) {
            Ok(text) => Ok(LoopFile { path, text }),
            Err(source) => Err(LoopError::Read { path, source }),
        })
        .collect()
}

/// `taskdaemon trust`: the repository's config and every loop file of it, as they are
/// now; a loop file that does not load is not trusted (nor anything else).
pub fn trust_repository(repo: &Path) -> Result<Trusted, TrustError> {
    let loops = files(repo).map_err(|e| TrustError::InvalidLoop(e.to_string()))?;
    let mut checked = Vec::new();
    for f in loops {
        parse_file(&f.path, &f.text).map_err(|e| TrustError::InvalidLoop(e.to_string()))?;
        if let Some(name) = f.path.file_name() {
            checked.push((name.to_os_string(), f.text.into_bytes()));
        }
    }
    trust::trust(repo, &checked)
}
