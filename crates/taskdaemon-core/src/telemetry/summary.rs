//! The final summary of spec 2 §3, as data: the binary prints it, `--json` serializes it.

use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    /// COMPLETE, LIMIT, BLOCKED, DECIDE, STUCK, FAILED, INTERRUPTED.
    pub exit_label: String,
    pub exit_code: i32,
    /// One sentence: why the loop ended and what to do next.
    pub detail: String,
    pub iterations: u32,
    pub max_iterations: u32,
    pub duration_ms: u64,
    pub avg_iteration_ms: u64,
    pub stuck_iterations: u32,
    pub stuck_count: u32,
    /// The work list's units done of all (`None`: a loop with no list).
    pub work: Option<WorkTally>,
    pub cost_usd: Option<f64>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub summary_csv: PathBuf,
    pub logs_dir: PathBuf,
    /// The outcome itself (for notices, which word it as a daemon run's are).
    #[serde(skip)]
    pub outcome: Option<crate::engine::Outcome>,
}

/// What a loop's list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkUnit {
    Tasks,
    Stories,
}

impl WorkUnit {
    pub fn label(self) -> &'static str {
        match self {
            WorkUnit::Tasks => "tasks",
            WorkUnit::Stories => "stories",
        }
    }
}

/// Units of a loop's list done, of all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkTally {
    pub unit: WorkUnit,
    pub done: u32,
    pub total: u32,
}

/// Stories complete/total from a `prd.json` or `tasks.json` in `.ralph/` or the work tree
/// (`{"userStories": [...]}` or a list; a story with `"passes": true` is complete).
pub fn count_stories(dir: &Path) -> Option<(u32, u32)> {
    for rel in [
        ".ralph/tasks.json",
        ".ralph/prd.json",
        "tasks.json",
        "prd.json",
    ] {
        let Ok(text) = std::fs::read_to_string(dir.join(rel)) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let list = v
            .get("userStories")
            .or_else(|| v.get("stories"))
            .unwrap_or(&v)
            .as_array()?
            .clone();
        let done = list
            .iter()
            .filter(|s| s.get("passes").and_then(serde_json::Value::as_bool) == Some(true))
            .count();
        return Some((done as u32, list.len() as u32));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_passing_stories() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(count_stories(d.path()), None);
        std::fs::write(
            d.path().join("prd.json"),
            r#"{"userStories":[{"passes":true},{"passes":false},{}]}"#,
        )
        .unwrap();
        assert_eq!(count_stories(d.path()), Some((1, 3)));
    }
}
