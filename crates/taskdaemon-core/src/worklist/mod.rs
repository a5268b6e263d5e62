//! Work lists (spec 5): a spec's `tasks.md` run task by task (parallel groups in their own
//! worktrees, every claim checked by five verification layers), and user-story lists
//! (`tasks.json` / `prd.json`) with an implement → review cycle whose transitions the
//! harness checks. Emits [`WorklistEvent`]s; never prints.

mod agent;
pub mod cancel;
pub mod contradiction;
pub mod coordinator;
pub mod current_spec;
pub mod events;
mod evidence;
pub mod guards;
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

pub use agent::{AgentSetup, check_agent};
pub use coordinator::{ImplementConfig, implement};
pub use events::{WorklistEvent, WorklistSink};
pub use guards::Limits;
pub use state::ImplementState;
pub use stories::{StoriesConfig, run_stories};

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
    /// The agent could not run at all (could-not-start, auth): nothing to count as an
    /// attempt; a person must act.
    #[error("the agent cannot run ({}): {line}\n  hint: {hint}", class.name())]
    AgentCannotRun {
        class: crate::agent::FailureClass,
        line: String,
        hint: String,
    },
}

impl WorklistError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorklistError + '_ {
        move |e| WorklistError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }

    /// Whether the user can fix it (bad input, state, a running loop): exit 64.
    pub fn is_user_fault(&self) -> bool {
        matches!(
            self,
            WorklistError::CorruptState { .. }
                | WorklistError::Busy { .. }
                | WorklistError::Invalid(_)
                | WorklistError::AgentCannotRun { .. }
        )
    }
}
