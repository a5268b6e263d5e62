//! The end of a task's loop (spec 1 §3), for `task` and for `run --resume` finishing a
//! task: the task's status and history, `task-N-post` on verified completion, and what a
//! person needs to know (did it change anything, how to undo it). Returns [`TaskEnd`];
//! the binary renders it.

use std::path::Path;

use super::{LifecycleError, finish_task};
use crate::engine::Outcome;
use crate::git::snapshot::Snapshots;
use crate::workspace::Workspace;

/// How task `number` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnd {
    pub number: u32,
    /// `task-N-post`, saved on verified completion.
    pub post: Option<String>,
    /// The task's pre snapshot (`task-N-pre`, or `task-N-pre-2`… when that name was
    /// taken); none for the first task of an empty project.
    pub pre: Option<String>,
    /// Completed without changing anything outside `.ralph/` (the validation passed on the
    /// project as it was).
    pub unchanged: bool,
}

impl TaskEnd {
    /// The command that undoes the task, when there is something to go back to.
    pub fn rollback_command(&self) -> Option<String> {
        self.pre
            .as_ref()
            .map(|p| format!("taskdaemon snapshot rollback {p}"))
    }
}

/// After the loop of task `number` in `dir` ended with `outcome` after `iterations`.
pub fn end_task(
    dir: &Path,
    ws: &Workspace,
    number: u32,
    outcome: &Outcome,
    iterations: u32,
) -> Result<TaskEnd, LifecycleError> {
    let snaps = Snapshots::open(dir)?;
    let post = finish_task(&snaps, ws, number, outcome, iterations)?;
    let pre = snaps.task_pre(number)?.map(|s| s.tag);
    let unchanged = match (&post, &pre) {
        (Some(_), Some(pre)) => {
            let d = snaps.diff(pre)?;
            d.added
                .iter()
                .chain(&d.modified)
                .chain(&d.deleted)
                .all(|p| p.starts_with(".ralph/"))
        }
        _ => false,
    };
    Ok(TaskEnd {
        number,
        post: post.map(|s| s.tag),
        pre,
        unchanged,
    })
}
