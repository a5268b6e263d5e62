//! The template variables of one iteration. Only variables the template names are computed:
//! `git status` and `git diff` cost tens of milliseconds on a large repository.

use serde_json::{Map, Value, json};

use super::state::RunState;
use crate::fsutil::bound_text;
use crate::git::{Git, GitError};
use crate::loops::PromptTemplate;
use crate::workspace::{Workspace, WorkspaceError};

/// Bounds on what goes into a prompt (bytes).
const MAX_ERRORS: usize = 8 * 1024;
const MAX_DIFF: usize = 16 * 1024;
const MAX_STATUS: usize = 8 * 1024;
const MAX_STATE: usize = 4 * 1024;
/// Harness notes of this many earlier iterations go into `progress`.
pub const PROGRESS_NOTES: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

pub fn variables(
    t: &PromptTemplate,
    st: &RunState,
    iteration: u32,
    decision: Option<&str>,
    ws: &Workspace,
    git: &Git,
) -> Result<Value, PromptError> {
    let cfg = &st.config;
    let mut m = Map::new();
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    set("iteration", json!(iteration));
    set("max-iterations", json!(cfg.max_iterations));
    set("task-description", json!(cfg.task));
    set(
        "working-directory",
        json!(cfg.workdir.display().to_string()),
    );
    set("completion-promise", json!(cfg.completion_text()));
    set("decision", json!(decision.unwrap_or_default()));
    set(
        "previous-errors",
        json!(
            st.previous_errors
                .as_deref()
                .map(|e| bound_text(e, MAX_ERRORS))
                .unwrap_or_default()
        ),
    );
    let progress = if t.uses("progress") {
        let skip = st.progress.len().saturating_sub(PROGRESS_NOTES);
        st.progress[skip..].join("\n")
    } else {
        String::new()
    };
    set("progress", json!(progress));
    let state = if t.uses("current-state") {
        ws.read_progress_notes()?
            .map(|s| bound_text(s.trim(), MAX_STATE))
            .unwrap_or_default()
    } else {
        String::new()
    };
    set("current-state", json!(state));
    let feedback = if t.uses("feedback") {
        ws.read_feedback()?
            .map(|s| bound_text(s.trim(), MAX_ERRORS))
            .unwrap_or_default()
    } else {
        String::new()
    };
    set("feedback", json!(feedback));
    let status = if t.uses("git-status") {
        bound_text(&git.status_porcelain()?, MAX_STATUS)
    } else {
        String::new()
    };
    set("git-status", json!(status));
    let diff = if t.uses("git-diff") {
        bound_text(&git.diff_head()?, MAX_DIFF)
    } else {
        String::new()
    };
    set("git-diff", json!(diff));
    Ok(Value::Object(m))
}
