//! The notes for people of the work lists' own events (tasks, groups, stories); the
//! engine's renderer (`render/mod.rs`) shows them with every other event.

use taskdaemon_core::engine::events::WorkEvent;

/// The note for people, for events that have one.
pub fn describe(ev: &WorkEvent) -> Option<String> {
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
