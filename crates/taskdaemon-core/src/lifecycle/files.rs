//! The `.ralph/` files of a task (spec 1 §3 ".ralph/ State Transitions").

use std::path::{Path, PathBuf};

use crate::fsutil::{append_record, read_optional, write_atomic};
use crate::workspace::Workspace;

use super::LifecycleError;

/// Paths and typed access to the task files; every write is atomic.
#[derive(Debug, Clone)]
pub struct TaskFiles {
    root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LifecycleError + '_ {
    move |source| LifecycleError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl TaskFiles {
    pub fn new(ws: &Workspace) -> TaskFiles {
        TaskFiles {
            root: ws.root().to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn task(&self) -> PathBuf {
        self.root.join("task.md")
    }
    pub fn counter(&self) -> PathBuf {
        self.root.join("task-counter.txt")
    }
    pub fn history(&self) -> PathBuf {
        self.root.join("task-history.md")
    }
    pub fn summary(&self) -> PathBuf {
        self.root.join("summary.md")
    }
    pub fn feedback(&self) -> PathBuf {
        self.root.join("feedback.md")
    }
    pub fn status(&self) -> PathBuf {
        self.root.join("status.txt")
    }
    pub fn iteration(&self) -> PathBuf {
        self.root.join("iteration.txt")
    }
    pub fn origin(&self) -> PathBuf {
        self.root.join("origin.md")
    }

    pub fn read(&self, path: &Path) -> Result<Option<String>, LifecycleError> {
        read_optional(path).map_err(io(path))
    }

    pub fn write(&self, path: &Path, text: &str) -> Result<(), LifecycleError> {
        write_atomic(path, text.as_bytes()).map_err(io(path))
    }

    pub fn append(&self, path: &Path, line: &str) -> Result<(), LifecycleError> {
        append_record(path, line.as_bytes(), true).map_err(io(path))
    }

    /// The number of the current task; 0 before the first.
    pub fn read_counter(&self) -> Result<u32, LifecycleError> {
        let path = self.counter();
        let Some(text) = self.read(&path)? else {
            return Ok(0);
        };
        let t = text.trim();
        if t.is_empty() {
            return Ok(0);
        }
        t.parse().map_err(|_| LifecycleError::BadCounter {
            path: path.clone(),
            text: t.chars().take(40).collect(),
        })
    }
}
