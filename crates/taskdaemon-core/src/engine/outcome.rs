//! How a loop ends, and the one mapping from outcomes to exit codes.

use serde::{Deserialize, Serialize};

use crate::guards::Limit;

/// Exit codes, mapped in exactly this place (see DESIGN.md).
pub mod exit_code {
    pub const COMPLETE: i32 = 0;
    pub const LIMIT: i32 = 1;
    pub const BLOCKED: i32 = 2;
    pub const DECIDE: i32 = 3;
    pub const STUCK: i32 = 4;
    pub const FAILED: i32 = 5;
    /// Usage or configuration error (never 2: 2 means BLOCKED).
    pub const USAGE: i32 = 64;
    pub const INTERNAL: i32 = 70;
    pub const INTERRUPTED: i32 = 130;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Completion evidence verified (or, without validation, the promise alone).
    Complete {
        verified: bool,
    },
    LimitReached {
        limit: Limit,
    },
    Blocked {
        reason: String,
    },
    Decide {
        question: String,
    },
    Stuck {
        iterations: u32,
    },
    Failed {
        reason: String,
    },
    /// The agent failed to run (agent-failure model): exit 64 when a person must act
    /// (could-not-start, auth), else 1.
    AgentFailed {
        class: crate::agent::FailureClass,
        reason: String,
    },
    /// The validation command's program does not exist (exit 127): exit 64.
    ValidationMissing {
        command: String,
        output: String,
    },
    Interrupted,
}

impl Outcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Complete { .. } => exit_code::COMPLETE,
            Outcome::LimitReached { .. } => exit_code::LIMIT,
            Outcome::Blocked { .. } => exit_code::BLOCKED,
            Outcome::Decide { .. } => exit_code::DECIDE,
            Outcome::Stuck { .. } => exit_code::STUCK,
            Outcome::Failed { .. } => exit_code::FAILED,
            Outcome::AgentFailed { class, .. } if class.needs_a_person() => exit_code::USAGE,
            Outcome::AgentFailed { .. } => exit_code::LIMIT,
            Outcome::ValidationMissing { .. } => exit_code::USAGE,
            Outcome::Interrupted => exit_code::INTERRUPTED,
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Complete { .. } => "COMPLETE",
            Outcome::LimitReached { .. } => "LIMIT",
            Outcome::Blocked { .. } => "BLOCKED",
            Outcome::Decide { .. } => "DECIDE",
            Outcome::Stuck { .. } => "STUCK",
            Outcome::Failed { .. } => "FAILED",
            Outcome::AgentFailed { .. } => "AGENT-FAILED",
            Outcome::ValidationMissing { .. } => "VALIDATION-MISSING",
            Outcome::Interrupted => "INTERRUPTED",
        }
    }

    /// Why the loop ended and what to do next.
    pub fn detail(&self) -> String {
        match self {
            Outcome::Complete { verified: true } => "validation passed".into(),
            Outcome::Complete { verified: false } => {
                "the agent promised completion; no validation command verified it (set --validate)"
                    .into()
            }
            Outcome::LimitReached { limit } => format!(
                "{} reached before completion; continue with `taskdaemon run --resume {} N`",
                limit.describe(),
                limit.flag()
            ),
            Outcome::Blocked { reason } => format!(
                "blocked: {} See .ralph/blocked.txt; resolve it, `taskdaemon unblock`, then `taskdaemon run --resume`",
                sentence(reason)
            ),
            Outcome::Decide { question } => format!(
                "decision needed: {} Answer with `taskdaemon answer \"…\"`, then `taskdaemon run --resume`",
                sentence(question)
            ),
            Outcome::Stuck { iterations } => format!(
                "no progress in {iterations} consecutive iterations (no new commit, or only commits the harness rejected for changing the evidence); read the iteration logs, then `taskdaemon run --resume` (the stuck count restarts)"
            ),
            Outcome::Failed { reason } => reason.clone(),
            Outcome::AgentFailed { class, reason } => format!("{}: {reason}", class.name()),
            Outcome::ValidationMissing { command, output } => format!(
                "the validation command `{command}` could not run (exit 127: its program was not found): {}\n  hint: fix --validate (or `validate:` in the config); `taskdaemon run --resume` continues",
                output.lines().last().unwrap_or_default().trim()
            ),
            Outcome::Interrupted => {
                "interrupted; state saved. Continue with `taskdaemon run --resume`".into()
            }
        }
    }

    /// Whether `run --resume` may continue after this outcome.
    pub fn resumable(&self) -> bool {
        !matches!(self, Outcome::Complete { .. } | Outcome::Failed { .. })
    }
}

/// `text` as a sentence: ended with a full stop unless it ends with one of its own
/// (`red or blue?` stays as it is, not `red or blue?.`).
pub(crate) fn sentence(text: &str) -> String {
    let t = text.trim_end();
    if t.ends_with(['.', '?', '!', ':', ';']) {
        t.to_string()
    } else {
        format!("{t}.")
    }
}
