//! Rendering of work-list events: agent output on stdout (prefixed with its task),
//! `taskdaemon:` notes on stderr; or `--json`, one event per line on stdout.

use std::io::Write;

use taskdaemon_core::worklist::WorklistEvent;
use tokio::sync::mpsc::UnboundedReceiver;

pub async fn run(json: bool, mut rx: UnboundedReceiver<WorklistEvent>) {
    while let Some(ev) = rx.recv().await {
        if json {
            if let Ok(line) = serde_json::to_string(&ev) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            continue;
        }
        if let WorklistEvent::RunFinished { summary } = &ev {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", super::summary::summary_block(summary));
            let _ = out.flush();
        } else if let Some(text) = describe(&ev) {
            let _ = writeln!(std::io::stderr().lock(), "taskdaemon: {text}");
        } else if let WorklistEvent::AgentOutput { task_id, text } = &ev {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "[{task_id}] {text}");
            let _ = out.flush();
        }
    }
}

/// The note for people, for events that have one.
fn describe(ev: &WorklistEvent) -> Option<String> {
    Some(match ev {
        WorklistEvent::ImplementStarted {
            spec_dir,
            agent,
            total_tasks,
            done_tasks,
            max_iterations,
            max_task_iterations,
            resumed,
            sandbox,
            ..
        } => format!(
            "implement {spec_dir} · {} · {done_tasks} of {total_tasks} tasks done · agent {agent} · sandbox {sandbox} · at most {max_task_iterations} attempts per task, {max_iterations} iterations",
            if *resumed {
                "resuming from .ralph-state.json"
            } else {
                "starting"
            }
        ),
        WorklistEvent::Warning { message } => format!("warning: {message}"),
        WorklistEvent::GroupStarted {
            iteration,
            task_ids,
        } => format!(
            "iteration {iteration}: parallel group {} (one worktree each)",
            task_ids.join(", ")
        ),
        WorklistEvent::TaskStarted {
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
        WorklistEvent::AgentOutput { .. } | WorklistEvent::RunFinished { .. } => return None,
        WorklistEvent::AgentFinished {
            task_id,
            exit_code,
            timed_out,
            interrupted,
            duration_ms,
        } => format!(
            "task {task_id}: agent exited with {exit_code} after {:.1}s{}{}",
            *duration_ms as f64 / 1000.0,
            if *timed_out { " (timed out)" } else { "" },
            if *interrupted { " (interrupted)" } else { "" }
        ),
        WorklistEvent::VerifyCommand {
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
        WorklistEvent::TaskCompleted {
            task_id, commits, ..
        } => format!(
            "task {task_id}: verified complete ({} commit(s))",
            commits.len()
        ),
        WorklistEvent::TaskRejected {
            task_id,
            attempt,
            reason,
            ..
        } => format!("task {task_id}: attempt {attempt} rejected:\n{reason}"),
        WorklistEvent::ProgressMerged { task_ids } => format!(
            "merged the progress of {} into .progress.md",
            task_ids.join(", ")
        ),
        WorklistEvent::ImplementFinished {
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
        WorklistEvent::StoriesStarted {
            file,
            agent,
            stories,
            passing,
            review,
            max_iterations,
            sandbox,
        } => format!(
            "stories {file} · {passing} of {stories} pass · agent {agent} · sandbox {sandbox} · review {} · at most {max_iterations} iterations",
            if *review { "on" } else { "skipped" }
        ),
        WorklistEvent::StoryIteration {
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
        WorklistEvent::StoryRejected {
            iteration, reason, ..
        } => format!("iteration {iteration} rejected, file restored: {reason}"),
        WorklistEvent::StoryAccepted {
            iteration, changes, ..
        } => format!(
            "iteration {iteration} accepted{}",
            if changes.is_empty() {
                String::new()
            } else {
                format!(": {}", changes.join("; "))
            }
        ),
        WorklistEvent::StoryAutoApproved { story_id, reviews } => format!(
            "{story_id} reached the review cap ({reviews} reviews): approved by the harness, with a note"
        ),
        WorklistEvent::StoriesFinished {
            outcome, detail, ..
        } => format!("{outcome}: {detail}"),
    })
}
