//! What the work-list loops tell their observers (the binary renders them for people, or
//! one JSON object per line with `--json`), in the engine's event style.

use serde::Serialize;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorklistEvent {
    ImplementStarted {
        spec_dir: String,
        agent: String,
        total_tasks: usize,
        done_tasks: usize,
        task_index: usize,
        max_iterations: u32,
        max_task_iterations: u32,
        resumed: bool,
        /// The sandbox in force (`none`, `bwrap (network shared)`, …).
        sandbox: String,
    },
    Warning {
        message: String,
    },
    /// One task handed to a fresh agent (`role`: executor or qa).
    TaskStarted {
        iteration: u32,
        task_id: String,
        task_index: usize,
        title: String,
        role: String,
        attempt: u32,
        max_attempts: u32,
        parallel: bool,
        prompt_file: String,
    },
    /// A parallel group of tasks starts, each in its own worktree.
    GroupStarted {
        iteration: u32,
        task_ids: Vec<String>,
    },
    AgentOutput {
        task_id: String,
        text: String,
    },
    AgentFinished {
        task_id: String,
        exit_code: i32,
        timed_out: bool,
        interrupted: bool,
        duration_ms: u64,
    },
    VerifyCommand {
        task_id: String,
        command: String,
        passed: bool,
        exit_code: i32,
    },
    /// The task's claim passed every verification layer.
    TaskCompleted {
        task_id: String,
        task_index: usize,
        commits: Vec<String>,
    },
    /// A layer refused the task's claim; it is retried with `reason` in its next prompt.
    TaskRejected {
        task_id: String,
        task_index: usize,
        attempt: u32,
        layers: Vec<u8>,
        reason: String,
    },
    /// Per-task progress files merged into .progress.md after a parallel group.
    ProgressMerged {
        task_ids: Vec<String>,
    },
    ImplementFinished {
        outcome: String,
        exit_code: i32,
        detail: String,
        done_tasks: usize,
        total_tasks: usize,
        /// The task the loop stopped at, when it did not finish.
        stopped_at: Option<String>,
    },
    StoriesStarted {
        file: String,
        agent: String,
        stories: usize,
        passing: usize,
        max_iterations: u32,
        review: bool,
        /// The sandbox in force.
        sandbox: String,
    },
    StoryIteration {
        iteration: u32,
        mode: String,
        story_id: Option<String>,
        prompt_file: String,
    },
    /// The iteration broke a transition rule: the file was restored.
    StoryRejected {
        iteration: u32,
        mode: String,
        reason: String,
    },
    StoryAccepted {
        iteration: u32,
        mode: String,
        changes: Vec<String>,
    },
    /// A story reached the review cap and was approved by the harness.
    StoryAutoApproved {
        story_id: String,
        reviews: u32,
    },
    StoriesFinished {
        outcome: String,
        exit_code: i32,
        detail: String,
        passing: usize,
        stories: usize,
    },
    /// The final summary block (spec 2 §3), just before the loop's own last event.
    RunFinished {
        summary: crate::telemetry::RunSummary,
    },
}

/// Where events go; a gone observer is ignored.
#[derive(Debug, Clone, Default)]
pub struct WorklistSink {
    tx: Option<mpsc::UnboundedSender<WorklistEvent>>,
}

impl WorklistSink {
    pub fn new(tx: mpsc::UnboundedSender<WorklistEvent>) -> WorklistSink {
        WorklistSink { tx: Some(tx) }
    }

    pub fn none() -> WorklistSink {
        WorklistSink { tx: None }
    }

    pub fn emit(&self, e: WorklistEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
        }
    }

    pub fn warn(&self, message: impl Into<String>) {
        self.emit(WorklistEvent::Warning {
            message: message.into(),
        });
    }
}
