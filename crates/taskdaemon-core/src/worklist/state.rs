//! `<spec>/.ralph-state.json` (spec 5 Component 4), with the spec's camelCase fields.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::WorklistError;
use crate::fsutil::{read_optional, write_atomic};

pub const STATE_FILE: &str = ".ralph-state.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParallelGroup {
    pub start_index: usize,
    pub end_index: usize,
    pub task_indices: Vec<usize>,
    pub is_parallel: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Pending,
    Success,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The task's attempt (1 until it is rejected): each task keeps its own, so a group
    /// member that waits for a usage limit keeps its attempt while another is retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImplementState {
    pub phase: String,
    pub task_index: usize,
    pub total_tasks: usize,
    pub task_iteration: u32,
    pub max_task_iterations: u32,
    pub base_path: String,
    #[serde(default)]
    pub awaiting_approval: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group: Option<ParallelGroup>,
    /// Keyed by the task index as a string (the spec's shape).
    #[serde(default)]
    pub task_results: BTreeMap<String, TaskResult>,
    /// Coordinator iterations so far (a parallel group is one); the limit is
    /// totalTasks × maxTaskIterations × 2.
    #[serde(default)]
    pub global_iteration: u32,
}

impl ImplementState {
    pub fn new(base_path: &Path, total_tasks: usize, max_task_iterations: u32) -> ImplementState {
        ImplementState {
            phase: "execution".into(),
            task_index: 0,
            total_tasks,
            task_iteration: 1,
            max_task_iterations,
            base_path: base_path.display().to_string(),
            awaiting_approval: false,
            parallel_group: None,
            task_results: BTreeMap::new(),
            global_iteration: 0,
        }
    }

    pub fn path(spec_dir: &Path) -> PathBuf {
        spec_dir.join(STATE_FILE)
    }

    /// `Ok(None)` without a state file; `Err(Corrupt)` when it cannot be read as a state.
    pub fn load(spec_dir: &Path) -> Result<Option<ImplementState>, WorklistError> {
        let path = Self::path(spec_dir);
        let Some(text) = read_optional(&path).map_err(WorklistError::io(&path))? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| WorklistError::CorruptState {
                path,
                message: e.to_string(),
            })
    }

    pub fn save(&self, spec_dir: &Path) -> Result<(), WorklistError> {
        let path = Self::path(spec_dir);
        let mut text = serde_json::to_string_pretty(self).map_err(|e| WorklistError::Io {
            path: path.clone(),
            message: e.to_string(),
        })?;
        text.push('\n');
        write_atomic(&path, text.as_bytes()).map_err(WorklistError::io(&path))
    }

    /// Delete the state file; whether there was one.
    pub fn remove(spec_dir: &Path) -> Result<bool, WorklistError> {
        let path = Self::path(spec_dir);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(WorklistError::io(&path)(e)),
        }
    }

    /// The reason the last attempt of task `index` was rejected (kept while it is retried).
    pub fn last_error(&self, index: usize) -> Option<&str> {
        self.task_results
            .get(&index.to_string())
            .and_then(|r| r.error.as_deref())
    }

    pub fn record(&mut self, index: usize, status: TaskStatus, error: Option<String>) {
        let attempt = self
            .task_results
            .get(&index.to_string())
            .and_then(|r| r.attempt);
        self.task_results.insert(
            index.to_string(),
            TaskResult {
                status,
                error,
                attempt,
            },
        );
    }

    /// The attempt task `index` is at (1 for a task never rejected).
    pub fn attempt(&self, index: usize) -> u32 {
        self.task_results
            .get(&index.to_string())
            .and_then(|r| r.attempt)
            .unwrap_or(1)
    }

    /// Task `index` was rejected: its next attempt's number.
    pub fn next_attempt(&mut self, index: usize) -> u32 {
        let next = self.attempt(index).saturating_add(1);
        if let Some(r) = self.task_results.get_mut(&index.to_string()) {
            r.attempt = Some(next);
        }
        next
    }

    /// The coordinator's iteration limit.
    pub fn max_iterations(&self) -> u32 {
        (self.total_tasks as u32)
            .saturating_mul(self.max_task_iterations)
            .saturating_mul(2)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_fields_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ImplementState::new(dir.path(), 8, 5);
        s.parallel_group = Some(ParallelGroup {
            start_index: 1,
            end_index: 2,
            task_indices: vec![1, 2],
            is_parallel: true,
        });
        s.record(1, TaskStatus::Failed, Some("no checkmark".into()));
        s.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(ImplementState::path(dir.path())).unwrap();
        for f in [
            "\"phase\": \"execution\"",
            "taskIndex",
            "totalTasks",
            "taskIteration",
            "maxTaskIterations",
            "parallelGroup",
            "startIndex",
            "isParallel",
            "taskResults",
            "\"status\": \"failed\"",
        ] {
            assert!(text.contains(f), "{f} missing in {text}");
        }
        let back = ImplementState::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, s);
        assert_eq!(back.last_error(1), Some("no checkmark"));
        assert_eq!(back.max_iterations(), 80);
    }

    #[test]
    fn corrupt_state_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(ImplementState::path(dir.path()), "{ not json").unwrap();
        assert!(matches!(
            ImplementState::load(dir.path()),
            Err(WorklistError::CorruptState { .. })
        ));
        assert!(ImplementState::remove(dir.path()).unwrap());
        assert!(ImplementState::load(dir.path()).unwrap().is_none());
    }
}
