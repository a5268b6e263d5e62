//! Starting and finishing a task, and the snapshot operations that must respect a running
//! loop.

use std::path::PathBuf;

use crate::clock;
use crate::engine::Outcome;
use crate::gates::contract::Contract;
use crate::gates::count::count_items;
use crate::git::snapshot::{Kind, Rollback, SaveRequest, Snapshot, SnapshotError, Snapshots};
use crate::git::{Git, GitError};
use crate::workspace::Workspace;

use super::TaskFiles;
use super::parser::{Clarification, ParsedTask, quoted_message, task_md};

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: expected the task number, found {text:?}\n  hint: put the number of the last task there (0 if none), or delete the file"
    )]
    BadCounter { path: PathBuf, text: String },
    #[error(
        "cannot roll back: a loop is running in {0} (its run lock is held)\n  hint: stop it first (Ctrl-C in its terminal), then roll back"
    )]
    LoopRunning(PathBuf),
    #[error("the task message is empty\n  hint: `taskdaemon task \"what to do next\"`")]
    EmptyMessage,
}

impl LifecycleError {
    /// A loop's stop ended its wait for another holder of a snapshot lock
    /// ([`Snapshots::stopped_by`]): nothing was saved or rolled back.
    pub fn is_stopped(&self) -> bool {
        self.stopped_waiting_for().is_some()
    }

    /// The lock whose wait a loop's stop ended, when that is what this is.
    pub fn stopped_waiting_for(&self) -> Option<&std::path::Path> {
        match self {
            LifecycleError::Snapshot(SnapshotError::Stopped { path }) => Some(path),
            _ => None,
        }
    }
}

/// What `begin_task` did.
#[derive(Debug, Clone)]
pub struct TaskStart {
    pub number: u32,
    /// `task-N-pre`; `None` for the first task of an empty project.
    pub pre: Option<Snapshot>,
    /// The line appended to `task-history.md` for the previous task.
    pub history_line: Option<String>,
    /// What was written to `task.md` (the loop's task description).
    pub task_text: String,
}

fn now_ms() -> i64 {
    clock::now().as_millisecond()
}

/// The first line of a text, shortened for a tag message or a history line.
fn headline(text: &str) -> String {
    let line = text
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 {
        out.push('…');
    }
    out
}

/// `taskdaemon snapshot save`: a `manual-<seconds>` snapshot, numbered with the current task.
pub fn save_manual(
    snaps: &Snapshots,
    ws: &Workspace,
    message: &str,
) -> Result<Snapshot, LifecycleError> {
    // Saving is a safety net: a damaged counter file only leaves the task number out.
    let task = TaskFiles::new(ws).read_counter().ok().filter(|n| *n > 0);
    Ok(snaps.save(&SaveRequest {
        kind: Kind::Manual,
        task,
        message,
        time_ms: now_ms(),
    })?)
}

/// Roll back to `tag`, refusing while a loop runs in this work tree.
pub fn rollback(snaps: &Snapshots, ws: &Workspace, tag: &str) -> Result<Rollback, LifecycleError> {
    for w in [ws.clone(), Workspace::new(snaps.top())] {
        if w.is_locked() {
            let dir = w.root().parent().unwrap_or(w.root()).to_path_buf();
            return Err(LifecycleError::LoopRunning(dir));
        }
    }
    Ok(snaps.rollback(tag, now_ms())?)
}

/// Whether the project has nothing yet: no commit and no file outside `.ralph/`.
fn is_empty_project(snaps: &Snapshots) -> Result<bool, LifecycleError> {
    let git = Git::new(snaps.top());
    if git.head()?.is_some() {
        return Ok(false);
    }
    let files = git
        .call(&["ls-files", "-z", "-c", "-o", "--exclude-standard"])
        .bytes()?;
    Ok(files
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .all(|p| p.starts_with(b".ralph/")))
}

/// The number the next task gets and how `task.md` names the previous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextTask {
    pub number: u32,
    /// The counter file's number: the task before this one (0 if none).
    pub previous: u32,
    /// `task-N-post`, `task N (it did not complete)` or `none`.
    pub previous_ref: String,
}

/// Which number the next task gets (never one a snapshot tag already used: after a
/// rollback the counter file goes back, the tags stay). Reads only.
pub fn next_task(snaps: &Snapshots, ws: &Workspace) -> Result<NextTask, LifecycleError> {
    let previous = TaskFiles::new(ws).read_counter()?;
    let known = snaps.list()?;
    let highest_tagged = known
        .iter()
        .filter(|s| matches!(s.kind, Kind::TaskPre | Kind::TaskPost))
        .filter_map(|s| s.task)
        .max()
        .unwrap_or(0);
    let previous_ref = if previous == 0 {
        "none".to_string()
    } else if known
        .iter()
        .any(|s| s.tag == format!("task-{previous}-post"))
    {
        format!("task-{previous}-post")
    } else {
        format!("task {previous} (it did not complete)")
    };
    Ok(NextTask {
        number: previous.max(highest_tagged) + 1,
        previous,
        previous_ref,
    })
}

/// Start a new task (spec 1 §3 phase 0 and §5 "State Cleanup at Task Start"): snapshot
/// `task-N-pre`, count, record the previous task in the history, reset the task files and
/// write `task.md` in the structured format of the parsed task.
pub fn begin_task(
    snaps: &Snapshots,
    ws: &Workspace,
    message: &str,
    parsed: &ParsedTask,
    clarification: Option<&Clarification>,
) -> Result<TaskStart, LifecycleError> {
    if message.trim().is_empty() {
        return Err(LifecycleError::EmptyMessage);
    }
    let files = TaskFiles::new(ws);
    let NextTask {
        number,
        previous,
        previous_ref,
    } = next_task(snaps, ws)?;

    let pre = if previous == 0 && is_empty_project(snaps)? {
        None
    } else {
        Some(snaps.save(&SaveRequest {
            kind: Kind::TaskPre,
            task: Some(number),
            message: &format!("before task {number}: {}", headline(message)),
            time_ms: now_ms(),
        })?)
    };

    let history_line = if previous > 0 {
        let summary = files.read(&files.summary())?.unwrap_or_default();
        let status = files.read(&files.status())?.unwrap_or_default();
        let what = match headline(&summary) {
            s if !s.is_empty() => s,
            _ => headline(&quoted_message(
                &files.read(&files.task())?.unwrap_or_default(),
            )),
        };
        let status = status.trim();
        let line = format!(
            "- Task {previous}: {}{}\n",
            if what.is_empty() {
                "(no summary)"
            } else {
                &what
            },
            if status.is_empty() {
                String::new()
            } else {
                format!(" ({status})")
            }
        );
        files.append(&files.history(), &line)?;
        Some(line.trim_end().to_string())
    } else {
        None
    };

    files.write(&files.summary(), "")?;
    files.write(&files.feedback(), "")?;
    files.write(&files.status(), "running\n")?;
    files.write(&files.iteration(), "0\n")?;
    // Spec 4: every task starts in the plan phase (inert when it has no plan).
    files.write(&files.root().join("phase.txt"), "plan\n")?;
    files.write(&files.counter(), &format!("{number}\n"))?;
    // The requirements the harness checks itself at completion (issue 12).
    let repo_files = super::parser::project_context(snaps.top(), ws).files;
    let contract = Contract::of(number, parsed, &repo_files);
    contract
        .save(files.root())
        .map_err(|source| LifecycleError::Io {
            path: Contract::path(files.root()),
            source,
        })?;
    let count_now = |f: &str| {
        std::fs::read_to_string(snaps.top().join(f))
            .map(|t| count_items(f, &t))
            .unwrap_or(0)
    };
    let mut task_text = task_md(number, &previous_ref, message, parsed, clarification);
    let mut checks = contract.describe(&count_now);
    checks.push_str(&tests_to_change(message, &repo_files, checks.is_empty()));
    task_text.push_str(&checks);
    files.write(&files.task(), &task_text)?;
    if files.read(&files.origin())?.is_none() {
        files.write(
            &files.origin(),
            &format!("# Origin\n\n{}\n", message.trim_end()),
        )?;
    }
    Ok(TaskStart {
        number,
        pre,
        history_line,
        task_text,
    })
}

/// The line of "Checks at completion" that names the tests a task asks to change (issue 36):
/// those may change, every other piece of evidence may not. Empty when it names none.
fn tests_to_change(message: &str, files: &[String], with_header: bool) -> String {
    let tests: Vec<String> = files
        .iter()
        .filter(|f| crate::gates::evidence::testfiles::is_test_file(f, None))
        .cloned()
        .collect();
    let allowed = crate::gates::evidence::allowed_changes(message, &tests);
    if allowed.is_empty() {
        return String::new();
    }
    format!(
        "{}- Tests this task may change (it names them): {}. Every other test, the validation's own files and the number of tests that run are fixed evidence: a completion that changes them is rejected.\n",
        if with_header {
            "\n## Checks at completion\n"
        } else {
            ""
        },
        allowed.join(", ")
    )
}

/// End task `number`: record its status and, when its evidence was verified, snapshot
/// `task-N-post`. Other outcomes take no post snapshot: `task-N-pre` is the way back.
pub fn finish_task(
    snaps: &Snapshots,
    ws: &Workspace,
    number: u32,
    outcome: &Outcome,
    iterations: u32,
) -> Result<Option<Snapshot>, LifecycleError> {
    let files = TaskFiles::new(ws);
    let status = match outcome {
        Outcome::Complete { .. } => "complete",
        Outcome::LimitReached { .. } => "limit",
        Outcome::Blocked { .. } => "blocked",
        Outcome::Decide { .. } => "decide",
        Outcome::Stuck { .. } => "stuck",
        Outcome::Failed { .. } => "failed",
        Outcome::AgentFailed { .. } => "agent-failed",
        Outcome::ValidationMissing { .. } => "validation-missing",
        Outcome::Interrupted => "interrupted",
    };
    files.write(&files.status(), &format!("{status}\n"))?;
    files.write(&files.iteration(), &format!("{iterations}\n"))?;
    if !matches!(outcome, Outcome::Complete { .. }) {
        return Ok(None);
    }
    let task = files.read(&files.task())?.unwrap_or_default();
    let what = headline(&quoted_message(&task));
    Ok(Some(snaps.save(&SaveRequest {
        kind: Kind::TaskPost,
        task: Some(number),
        message: &format!("task {number} complete: {what}"),
        time_ms: now_ms(),
    })?))
}

/// At the top of iteration `n` of a task: `iteration.txt` says `n` and `status.txt`
/// `running` (whatever an agent wrote there: only the harness decides the status).
pub fn note_iteration(ws: &Workspace, n: u32) -> Result<(), LifecycleError> {
    let files = TaskFiles::new(ws);
    files.write(&files.iteration(), &format!("{n}\n"))?;
    files.write(&files.status(), "running\n")
}

/// Abort the task the loop works on (a second stall, gates failing again and again): roll
/// back to `task-N-pre` when there is one, mark it failed, and say why in `feedback.md`.
/// `cause` completes "failed after …". Returns the rollback, if one happened.
pub fn fail_task(
    snaps: &Snapshots,
    ws: &Workspace,
    task: Option<u32>,
    cause: &str,
) -> Result<Option<Rollback>, LifecycleError> {
    let pre = match task {
        Some(n) => snaps.task_pre(n)?,
        None => None,
    };
    let files = TaskFiles::new(ws);
    // The task's own record survives its rollback: task-N-pre is from before the task
    // started, so without this the counter, task.md and the history would describe the
    // task before it, and the failed task would vanish from the history.
    let kept: Vec<(PathBuf, Option<String>)> = [
        files.counter(),
        files.task(),
        files.history(),
        files.summary(),
        files.iteration(),
    ]
    .into_iter()
    .map(|p| files.read(&p).map(|t| (p, t)))
    .collect::<Result<_, _>>()?;
    let rollback = match &pre {
        Some(p) => Some(snaps.rollback_from_loop(&p.tag, now_ms())?),
        None => None,
    };
    if rollback.is_some() {
        for (p, text) in &kept {
            if let Some(t) = text {
                files.write(p, t)?;
            }
        }
    }
    files.write(&files.status(), "failed\n")?;
    let what = match (&rollback, task) {
        (Some(r), Some(n)) => format!(
            "Task {n} failed after {cause}.\nProject rolled back to {} (the state it replaced is saved as {}).\n",
            r.restored.tag, r.saved.tag
        ),
        _ => format!(
            "The run failed after {cause}. It was not started with `taskdaemon task`, so there is no task-N-pre snapshot to roll back to; nothing was rolled back.\n"
        ),
    };
    files.write(
        &files.feedback(),
        &format!("{what}Consider simplifying the task or breaking it into smaller requests.\n"),
    )?;
    Ok(rollback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headline_takes_the_first_line() {
        assert_eq!(headline("\n# Done: added mul\nmore"), "Done: added mul");
    }
}
