//! Work lists (spec 5): a spec's `tasks.md` run task by task (parallel groups in their own
//! worktrees, every claim checked by five verification layers), and user-story lists
//! (`tasks.json` / `prd.json`) with an implement → review cycle whose transitions the
//! harness checks. Both are work sources of the engine's one loop
//! ([`crate::engine::WorkSource`]); their specific events are [`crate::engine::events::WorkEvent`]s.
//! Never prints.

mod agent;
pub mod cancel;
pub mod config;
pub mod contradiction;
pub mod coordinator;
pub mod current_spec;
mod evidence;
pub mod lock;
pub mod loop_prompt;
pub mod progress;
mod prompt;
pub mod state;
pub mod stories;
pub mod stories_rules;
pub mod tasks_md;
pub mod verify;

use std::path::{Path, PathBuf};

pub use agent::verify_warnings;
pub use coordinator::TasksSource;
pub use state::ImplementState;
pub use stories::StoriesSource;

#[derive(Debug, thiserror::Error)]
pub enum WorklistError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error(
        "{path} is not a readable state file ({message})\n  hint: it is reset to defaults; delete it by hand if this repeats"
    )]
    CorruptState { path: PathBuf, message: String },
    #[error(
        "an implement loop is already running for {spec} (pid {pid})\n  hint: wait for it, or stop it with `taskdaemon cancel {spec}`"
    )]
    Busy { spec: PathBuf, pid: String },
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error(transparent)]
    Worktree(#[from] crate::git::worktree::WorktreeError),
    #[error("{0}")]
    Invalid(String),
    /// A link in the repository the harness refuses to follow out of it (the message names
    /// the file and says what to do): the repository's to fix.
    #[error("{0}")]
    Refused(#[source] std::io::Error),
}

impl WorklistError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorklistError + '_ {
        move |e| {
            if crate::fsutil::is_refused_link(&e) {
                return WorklistError::Refused(e);
            }
            WorklistError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        }
    }

    /// Whether the user can fix it (bad input, state, a running loop): exit 64.
    pub fn is_user_fault(&self) -> bool {
        matches!(
            self,
            WorklistError::CorruptState { .. }
                | WorklistError::Busy { .. }
                | WorklistError::Invalid(_)
                | WorklistError::Refused(_)
        )
    }
}

impl From<WorklistError> for crate::engine::EngineError {
    fn from(e: WorklistError) -> crate::engine::EngineError {
        let user_fault = e.is_user_fault();
        crate::engine::EngineError::Source {
            error: Box::new(e),
            user_fault,
        }
    }
}

/// A person's answer to an earlier DECIDE, as it goes into the next prompts.
pub(crate) fn answered(ws: &crate::workspace::Workspace) -> Result<Option<String>, WorklistError> {
    Ok(ws
        .read_decide()
        .map_err(|e| WorklistError::Invalid(e.to_string()))?
        .and_then(|d| {
            d.answer
                .map(|a| format!("Question: {}\nAnswer: {a}", d.question))
        }))
}

/// The harness's guidance for the next agent (the stall guard's recovery writes it to
/// `.ralph/feedback.md`), taken: said once, in the next prompt.
pub(crate) fn take_feedback(
    ws: &crate::workspace::Workspace,
) -> Result<Option<String>, WorklistError> {
    let text = ws
        .read_feedback()
        .map_err(|e| WorklistError::Invalid(e.to_string()))?
        .filter(|t| !t.trim().is_empty());
    if text.is_some() {
        let p = ws.feedback_file();
        std::fs::remove_file(&p).map_err(WorklistError::io(&p))?;
    }
    Ok(text.map(|t| format!("\n\n## A note from the harness\n\n{}\n", t.trim_end())))
}

/// The final line of a work list's BLOCKED, DECIDE or stuck end, naming the command that
/// continues it; `None` for the other outcomes.
pub fn stop_detail(outcome: &crate::engine::Outcome, kind: &str) -> Option<String> {
    use crate::engine::Outcome;
    Some(match outcome {
        Outcome::Blocked { reason } => format!(
            "blocked: {} See .ralph/blocked.txt; resolve it, `taskdaemon unblock`, then `taskdaemon {kind}` again (it resumes)",
            crate::engine::outcome::sentence(reason)
        ),
        Outcome::Decide { question } => format!(
            "decision needed: {} Answer with `taskdaemon answer \"…\"`, then `taskdaemon {kind}` again: the answer goes into the next prompt",
            crate::engine::outcome::sentence(question)
        ),
        Outcome::Stuck { iterations } => format!(
            "stuck: {iterations} iterations in a row without a new commit (--max-stuck)\n  hint: read the last prompts' rejection reasons and the logs, fix the work list or the agent, then `taskdaemon {kind}` again"
        ),
        _ => return None,
    })
}

/// The limit's words for a work list's final line.
pub fn limit_detail(limit: crate::guards::Limit, kind: &str) -> String {
    format!(
        "{} reached\n  hint: run `taskdaemon {kind}` again to continue (it resumes), or raise the limit",
        limit.describe()
    )
}
