//! What the engine tells its observers: renderers for people and machines, later the TUI
//! and the daemon. One JSON object per event with `--json`.

use serde::Serialize;
use tokio::sync::mpsc;

use crate::agent::Activity;
use crate::telemetry::RunSummary;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    RunStarted {
        run_id: String,
        loop_type: String,
        agent: String,
        workdir: String,
        first_iteration: u32,
        max_iterations: u32,
        validate: Option<String>,
        resumed: bool,
        /// The sandbox in force (`none`, `bwrap (network shared)`, …).
        sandbox: String,
        /// A work list's run: what it works through (`implement specs/login: 2 of 5 tasks
        /// done`).
        #[serde(skip_serializing_if = "Option::is_none")]
        work: Option<String>,
    },
    Warning {
        message: String,
    },
    /// The evidence baseline recorded (or read back) before iteration 1: what completions
    /// are compared with (issue 36).
    Evidence {
        message: String,
    },
    /// A new run found uncommitted changes: saved as `snapshot` (`run-N-pre`; `None` when
    /// the only ones are untracked files that look like secrets, which no snapshot takes).
    /// `files` counts the saved paths, `paths` names the first of them, `secrets` the
    /// untracked files left out.
    UncommittedSaved {
        snapshot: Option<String>,
        files: usize,
        paths: Vec<String>,
        secrets: Vec<String>,
        message: String,
    },
    /// A gate's verdict: `phase` (plan validated / claim swallowed) or `scope:SECTION:MARKER`.
    Gate {
        iteration: u32,
        gate: String,
        passed: bool,
        severity: crate::gates::scope::Severity,
        message: String,
    },
    /// The same tool calls `repeats` iterations in a row. Recovery 1 saved `snapshot` and
    /// wrote guidance to feedback.md; recovery 2 failed the run (`rolled_back_to`).
    Stall {
        iteration: u32,
        repeats: u32,
        recovery: u32,
        snapshot: Option<String>,
        rolled_back_to: Option<String>,
    },
    IterationStarted {
        iteration: u32,
        max_iterations: u32,
        prompt_bytes: usize,
        log: String,
    },
    Agent {
        iteration: u32,
        /// The task or story of a work list's agent.
        #[serde(skip_serializing_if = "Option::is_none")]
        member: Option<String>,
        #[serde(flatten)]
        activity: Activity,
    },
    AgentFinished {
        iteration: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        member: Option<String>,
        exit_code: i32,
        timed_out: bool,
        interrupted: bool,
        duration_ms: u64,
        tool_calls: u32,
        cost_usd: Option<f64>,
    },
    /// A promise tag the agent said.
    Signal {
        iteration: u32,
        signal: String,
        text: Option<String>,
    },
    ValidationStarted {
        iteration: u32,
        command: String,
    },
    ValidationFinished {
        iteration: u32,
        passed: bool,
        exit_code: i32,
        timed_out: bool,
        /// Ended by a stop (Ctrl-C, `cancel`): no verdict, neither passed nor failed.
        interrupted: bool,
        duration_ms: u64,
    },
    /// The agents changed git's own files (config, hooks, pointers: `git::guard`), found
    /// right after they finished; each was put back unless its `not_restored` says why
    /// not. The iteration is rejected.
    GitTampered {
        iteration: u32,
        changes: Vec<crate::git::guard::GitChange>,
    },
    /// The agent claimed completion but the evidence says otherwise.
    CompletionRejected {
        iteration: u32,
        reason: String,
    },
    IterationFinished {
        iteration: u32,
        outcome: String,
        duration_ms: f64,
        /// Harness time: the iteration minus the agent and validation processes.
        overhead_ms: f64,
        commit: Option<String>,
        stuck_count: u32,
        cost_total_usd: f64,
    },
    /// The agent failed (agent-failure model); what the engine does follows.
    AgentFailure {
        iteration: u32,
        class: crate::agent::FailureClass,
        line: Option<String>,
        reset_at: Option<String>,
    },
    /// The agent has printed nothing for a while.
    Quiet {
        iteration: u32,
        silent_ms: u64,
        elapsed_ms: u64,
        last_line: String,
        message: String,
    },
    /// Waiting before retrying `iteration` (a usage limit's reset, a backoff).
    Waiting {
        iteration: u32,
        class: crate::agent::FailureClass,
        until: String,
        wait_ms: u64,
        message: String,
        line: Option<String>,
    },
    WaitOver {
        iteration: u32,
        class: crate::agent::FailureClass,
    },
    RunFinished {
        summary: RunSummary,
    },
    /// A work list's own events (tasks.md, stories).
    #[serde(untagged)]
    Work(WorkEvent),
}

/// What the work lists tell besides the engine's events: tasks started, judged and
/// landed, parallel groups, stories' transitions, and the list's last word.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkEvent {
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
    ProgressMerged { task_ids: Vec<String> },
    ImplementFinished {
        outcome: String,
        exit_code: i32,
        detail: String,
        done_tasks: usize,
        total_tasks: usize,
        /// The task the loop stopped at, when it did not finish.
        stopped_at: Option<String>,
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
    StoryAutoApproved { story_id: String, reviews: u32 },
    StoriesFinished {
        outcome: String,
        exit_code: i32,
        detail: String,
        passing: usize,
        stories: usize,
    },
}

impl WorkEvent {
    /// The note for people, for events that have one (the CLI's renderer, the daemon's
    /// notes).
    pub fn describe(&self) -> Option<String> {
        let ev = self;
        Some(match ev {
            WorkEvent::GroupStarted {
                iteration,
                task_ids,
            } => format!(
                "iteration {iteration}: parallel group {} (one worktree each)",
                task_ids.join(", ")
            ),
            WorkEvent::TaskStarted {
                iteration,
                task_id,
                title,
                role,
                attempt,
                max_attempts,
                ..
            } => format!(
                "iteration {iteration}: task {task_id} {title} ({role}, attempt {attempt} of {max_attempts})"
            ),
            WorkEvent::VerifyCommand {
                task_id,
                command,
                passed,
                exit_code,
            } => format!(
                "task {task_id}: Verify `{command}` {}",
                if *passed {
                    "passed".to_string()
                } else {
                    format!("failed (exit {exit_code})")
                }
            ),
            WorkEvent::TaskCompleted {
                task_id, commits, ..
            } => format!(
                "task {task_id}: verified complete ({} commit(s))",
                commits.len()
            ),
            WorkEvent::TaskRejected {
                task_id,
                attempt,
                reason,
                ..
            } => format!("task {task_id}: attempt {attempt} rejected:\n{reason}"),
            WorkEvent::ProgressMerged { task_ids } => format!(
                "merged the progress of {} into .progress.md",
                task_ids.join(", ")
            ),
            WorkEvent::ImplementFinished {
                outcome,
                detail,
                stopped_at,
                ..
            } => format!(
                "{outcome}: {detail}{}\n  an HTML report of the runs here: `taskdaemon report --all`",
                stopped_at
                    .as_deref()
                    .map(|t| format!(" (stopped at task {t})"))
                    .unwrap_or_default()
            ),
            WorkEvent::StoryIteration {
                iteration,
                mode,
                story_id,
                ..
            } => format!(
                "iteration {iteration}: {mode}{}",
                story_id
                    .as_deref()
                    .map(|s| format!(" {s}"))
                    .unwrap_or_default()
            ),
            WorkEvent::StoryRejected {
                iteration, reason, ..
            } => format!("iteration {iteration} rejected, file restored: {reason}"),
            WorkEvent::StoryAccepted {
                iteration, changes, ..
            } => format!(
                "iteration {iteration} accepted{}",
                if changes.is_empty() {
                    String::new()
                } else {
                    format!(": {}", changes.join("; "))
                }
            ),
            WorkEvent::StoryAutoApproved { story_id, reviews } => format!(
                "{story_id} reached the review cap ({reviews} reviews): approved by the harness, with a note"
            ),
            WorkEvent::StoriesFinished {
                outcome, detail, ..
            } => format!("{outcome}: {detail}"),
        })
    }
}

/// Where events go. Sending never fails the engine: a gone observer is ignored.
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    tx: Option<mpsc::UnboundedSender<EngineEvent>>,
}

impl EventSink {
    pub fn new(tx: mpsc::UnboundedSender<EngineEvent>) -> EventSink {
        EventSink { tx: Some(tx) }
    }

    pub fn none() -> EventSink {
        EventSink { tx: None }
    }

    pub fn emit(&self, e: EngineEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
        }
    }

    /// A work list's own event.
    pub fn work(&self, e: WorkEvent) {
        self.emit(EngineEvent::Work(e));
    }

    pub fn warn(&self, message: impl Into<String>) {
        self.emit(EngineEvent::Warning {
            message: message.into(),
        });
    }
}
