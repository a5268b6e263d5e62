//! Whether a loop may start here, or waits for a person: BLOCKED (`blocked.txt`) and an
//! unanswered DECIDE (`decide.txt`) stop `run`, `task` and the work lists from starting. A
//! question of the task parser is about a task that has not started: only `task` goes on
//! once it is answered. The binary renders what it gets, with what to do.

use std::path::PathBuf;

use crate::workspace::{Workspace, WorkspaceError};

/// Why a loop does not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// The loop said BLOCKED; `reason` is the file's text.
    Blocked { file: PathBuf, reason: String },
    /// The task parser asked about the next task and has no answer yet.
    ParserQuestion { file: PathBuf, question: String },
    /// The task parser's question is answered, but only `task` may start that task.
    ParserAnswerPending { file: PathBuf },
    /// The agent asked (DECIDE) and has no answer yet.
    AgentQuestion { file: PathBuf, question: String },
}

/// What stops a loop from starting in `ws` (`for_task`: the loop is `task`, which takes an
/// answered parser question).
pub fn waiting_for_a_human(
    ws: &Workspace,
    for_task: bool,
) -> Result<Option<Waiting>, WorkspaceError> {
    if let Some(text) = ws.read_blocked()? {
        return Ok(Some(Waiting::Blocked {
            file: ws.blocked_file(),
            reason: text.trim().to_string(),
        }));
    }
    let Some(d) = ws.read_decide()? else {
        return Ok(None);
    };
    let file = ws.decide_file();
    Ok(match (&d.task_message, &d.answer) {
        (Some(_), None) => Some(Waiting::ParserQuestion {
            file,
            question: d.question,
        }),
        (Some(_), Some(_)) if !for_task => Some(Waiting::ParserAnswerPending { file }),
        (None, None) => Some(Waiting::AgentQuestion {
            file,
            question: d.question,
        }),
        _ => None,
    })
}
