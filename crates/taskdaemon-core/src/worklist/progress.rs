//! `.progress.md` of a spec and the per-task progress files of a parallel group
//! (`.progress-task-<id>.md`), merged into it in task order after the group.

use std::path::{Path, PathBuf};

use super::WorklistError;
use crate::fsutil::{bound_text, read_optional, write_atomic};

pub const PROGRESS_FILE: &str = ".progress.md";

const DEFAULT: &str = "# Progress\n\n## Completed Tasks\n\n## Learnings\n";

pub fn path(spec_dir: &Path) -> PathBuf {
    spec_dir.join(PROGRESS_FILE)
}

/// The progress file of task `id` while it runs in a parallel group.
pub fn task_file(spec_dir: &Path, id: &str) -> PathBuf {
    spec_dir.join(format!(".progress-task-{id}.md"))
}

/// Create the default `.progress.md` when it is missing; whether it was created. A link
/// there is refused ([`WorklistError::Refused`]): the harness reads it into every prompt
/// and writes the groups' notes into it, never through a link.
pub fn ensure(spec_dir: &Path) -> Result<bool, WorklistError> {
    let p = path(spec_dir);
    crate::fsutil::confine(&p).map_err(WorklistError::io(&p))?;
    if p.exists() {
        return Ok(false);
    }
    write_atomic(&p, DEFAULT.as_bytes()).map_err(WorklistError::io(&p))?;
    Ok(true)
}

/// The progress notes for a prompt (head and tail when long).
pub fn read_for_prompt(spec_dir: &Path, max: usize) -> String {
    read_optional(&path(spec_dir))
        .ok()
        .flatten()
        .map(|t| bound_text(t.trim(), max))
        .unwrap_or_default()
}

/// Append the per-task files of `ids` (in that order) to `.progress.md` and delete them;
/// the ids whose file had something in it. The notes of a `rejected` task are marked so:
/// they are not work done.
pub fn merge(
    spec_dir: &Path,
    ids: &[String],
    rejected: &[String],
) -> Result<Vec<String>, WorklistError> {
    let main = path(spec_dir);
    let mut text = read_optional(&main)
        .map_err(WorklistError::io(&main))?
        .unwrap_or_else(|| DEFAULT.to_string());
    let mut merged = Vec::new();
    let mut files = Vec::new();
    for id in ids {
        let f = task_file(spec_dir, id);
        let Some(body) = read_optional(&f).map_err(WorklistError::io(&f))? else {
            continue;
        };
        files.push(f);
        if body.trim().is_empty() {
            continue;
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let heading = if rejected.contains(id) {
            format!("Task {id} (parallel group, REJECTED: not done, it will be retried)")
        } else {
            format!("Task {id} (parallel group)")
        };
        text.push_str(&format!("\n### {heading}\n\n{}\n", body.trim()));
        merged.push(id.clone());
    }
    if !merged.is_empty() {
        write_atomic(&main, text.as_bytes()).map_err(WorklistError::io(&main))?;
    }
    for f in files {
        std::fs::remove_file(&f).map_err(WorklistError::io(&f))?;
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_in_the_given_order_and_deletes_the_task_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ensure(dir.path()).unwrap());
        assert!(!ensure(dir.path()).unwrap());
        std::fs::write(task_file(dir.path(), "2.2"), "second\n").unwrap();
        std::fs::write(task_file(dir.path(), "2.1"), "first\n").unwrap();
        let merged = merge(
            dir.path(),
            &["2.1".into(), "2.2".into(), "2.3".into()],
            &["2.2".into()],
        )
        .unwrap();
        assert_eq!(merged, ["2.1", "2.2"]);
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(text.contains("### Task 2.1 (parallel group)\n"), "{text}");
        assert!(
            text.contains("### Task 2.2 (parallel group, REJECTED: not done"),
            "{text}"
        );
        let (a, b) = (text.find("first").unwrap(), text.find("second").unwrap());
        assert!(a < b, "{text}");
        assert!(!task_file(dir.path(), "2.1").exists());
    }
}
