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
    },
    Warning {
        message: String,
    },
    /// The evidence baseline recorded (or read back) before iteration 1: what completions
    /// are compared with (issue 36).
    Evidence {
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
        #[serde(flatten)]
        activity: Activity,
    },
    AgentFinished {
        iteration: u32,
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
}
