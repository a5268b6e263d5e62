//! What `status` shows beside the daemon's tree: the loops of the repository that run in
//! the foreground (`run`, `task`, `implement`, `stories` in the checkout or one of its
//! worktrees, not the daemon's), and the plan's records not committed yet.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::RunState;
use crate::git::Git;
use crate::workspace::Workspace;

/// A loop running in the foreground in one of the repository's work trees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForegroundRun {
    pub id: String,
    /// The work tree it runs in.
    pub dir: PathBuf,
    /// The process holding its lock (`None`: held, pid unreadable).
    pub pid: Option<i32>,
    pub loop_type: String,
    /// The task's first line.
    pub title: String,
    /// The iteration under way (the ones done, plus one).
    pub iteration: u32,
    pub max_iterations: u32,
    pub elapsed_ms: u64,
    pub cost_usd: Option<f64>,
}

/// The foreground loops of the repository at `project`: each work tree (the main one and
/// the linked ones) whose run lock is held by a process other than `daemon_pid`, with its
/// `.ralph/run.json`. Anything unreadable is left out (status shows what it can).
pub fn foreground_runs(project: &Path, daemon_pid: Option<u32>) -> Vec<ForegroundRun> {
    let mut out = Vec::new();
    for dir in work_trees(project) {
        let ws = Workspace::new(&dir);
        let Some(pid) = ws.holder() else {
            continue;
        };
        if pid.is_some() && pid.map(|p| p as u32) == daemon_pid {
            continue;
        }
        let Ok(Some(st)) = RunState::load(&ws) else {
            continue;
        };
        out.push(ForegroundRun {
            id: st.run_id.clone(),
            pid,
            loop_type: st.config.loop_name.clone(),
            title: st
                .config
                .task
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            iteration: st.iterations_done.saturating_add(1),
            max_iterations: st.config.max_iterations,
            elapsed_ms: st.elapsed_ms.saturating_add(since(&st.updated_at)),
            cost_usd: st.cost_reported.then_some(st.cost_usd),
            dir,
        });
    }
    out
}

/// Milliseconds from `at` (RFC 3339, when the run last saved its state) to now; 0 when
/// unreadable or ahead.
fn since(at: &str) -> u64 {
    at.parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| crate::clock::now().duration_since(t).try_into().ok())
        .map_or(0, |d: std::time::Duration| d.as_millis() as u64)
}

/// The checkout's work trees: the main one and every linked one, from git's own files
/// (`<common-dir>/worktrees/*/gitdir`; no git process); just `project` when they do not
/// say.
fn work_trees(project: &Path) -> Vec<PathBuf> {
    let Ok(facts) = Git::new(project).facts() else {
        return vec![project.to_path_buf()];
    };
    let common = &facts.common_dir;
    let main = match common.file_name() {
        Some(n) if n == ".git" => common.parent().map(Path::to_path_buf),
        _ => None,
    };
    let mut out: Vec<PathBuf> = main.into_iter().collect();
    if !out.contains(&facts.toplevel) {
        out.push(facts.toplevel.clone());
    }
    let linked = std::fs::read_dir(common.join("worktrees"))
        .into_iter()
        .flatten();
    for entry in linked.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("gitdir")) else {
            continue;
        };
        // `<worktree>/.git`, the file that points back here.
        if let Some(dir) = Path::new(text.trim_end()).parent()
            && dir.is_dir()
            && !out.iter().any(|d| d == dir)
        {
            out.push(dir.to_path_buf());
        }
    }
    out
}

/// The plan's records and documents (`.taskdaemon/store/`, `plans/`, `specs/`) that git
/// has not got as they are: new or changed files, relative to `project`.
pub fn uncommitted_records(project: &Path) -> Vec<String> {
    let args = [
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--",
        ".taskdaemon/store",
        ".taskdaemon/plans",
        ".taskdaemon/specs",
    ];
    let Ok(text) = Git::new(project).run(&args) else {
        return Vec::new();
    };
    // `XY path`; a rename's second entry (its old path) has no status of its own.
    let mut out = Vec::new();
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    while let Some(f) = fields.next() {
        let (status, path) = f.split_at(f.len().min(3));
        if status.starts_with('R') || status.starts_with('C') {
            fields.next();
        }
        out.push(path.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{git, init};

    #[test]
    fn new_and_changed_records_are_named_and_committed_ones_are_not() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        init(repo);
        std::fs::create_dir_all(repo.join(".taskdaemon/store")).unwrap();
        std::fs::create_dir_all(repo.join(".taskdaemon/plans")).unwrap();
        std::fs::write(repo.join(".taskdaemon/store/plans.jsonl"), "{}\n").unwrap();
        std::fs::write(repo.join("other.txt"), "x").unwrap();
        assert_eq!(
            uncommitted_records(repo),
            vec![".taskdaemon/store/plans.jsonl".to_string()]
        );
        git(repo, &["add", "-A"]);
        git(repo, &["commit", "-qm", "records"]);
        assert!(uncommitted_records(repo).is_empty());
        std::fs::write(repo.join(".taskdaemon/plans/p.md"), "# P\n").unwrap();
        std::fs::write(repo.join(".taskdaemon/store/plans.jsonl"), "{}\n{}\n").unwrap();
        let mut got = uncommitted_records(repo);
        got.sort();
        assert_eq!(
            got,
            vec![
                ".taskdaemon/plans/p.md".to_string(),
                ".taskdaemon/store/plans.jsonl".to_string()
            ]
        );
    }
}
