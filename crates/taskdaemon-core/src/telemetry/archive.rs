//! `taskdaemon archive`: move the finished run's `.ralph/` files into
//! `.ralph/archive/<time>[-label]/`, so the next run starts clean. Logs move only with
//! `--include-logs`; otherwise they stay where they are. Nothing is deleted.

use std::path::PathBuf;

use crate::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("a loop is running in this work tree\n  hint: archive after it ends")]
    Running,
    #[error("nothing to archive in {0}")]
    Nothing(PathBuf),
    #[error("invalid label `{0}`\n  hint: use letters, digits, `-`, `_` and `.`")]
    Label(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ArchiveReport {
    pub dir: PathBuf,
    pub moved: Vec<String>,
    pub logs_included: bool,
}

pub fn archive(
    ws: &Workspace,
    stamp: &str,
    label: Option<&str>,
    include_logs: bool,
) -> Result<ArchiveReport, ArchiveError> {
    if ws.is_locked() {
        return Err(ArchiveError::Running);
    }
    if let Some(l) = label
        && (l.is_empty()
            || !l
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || l.starts_with('.'))
    {
        return Err(ArchiveError::Label(l.into()));
    }
    let root = ws.root();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(_) => return Err(ArchiveError::Nothing(root.to_path_buf())),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "archive" && n != "run.lock" && (include_logs || n != "logs"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(ArchiveError::Nothing(root.to_path_buf()));
    }
    let name = match label {
        Some(l) => format!("{stamp}-{l}"),
        None => stamp.to_string(),
    };
    let mut dest = ws.archive_dir().join(&name);
    let mut n = 2;
    while dest.exists() {
        dest = ws.archive_dir().join(format!("{name}-{n}"));
        n += 1;
    }
    std::fs::create_dir_all(&dest).map_err(|source| ArchiveError::Io {
        path: dest.clone(),
        source,
    })?;
    for n in &names {
        let from = root.join(n);
        let to = dest.join(n);
        // A rename: the archive is inside `.ralph/`, on the same file system.
        std::fs::rename(&from, &to).map_err(|source| ArchiveError::Io {
            path: from.clone(),
            source,
        })?;
    }
    Ok(ArchiveReport {
        dir: dest,
        moved: names,
        logs_included: include_logs,
    })
}
