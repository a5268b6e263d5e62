//! The verification layers run on every task completion (spec 5, Component 3 §7):
//!
//! 1. contradiction: the agent claims done, yet says manual action is needed;
//! 2. no uncommitted spec files;
//! 3. the checkmark count equals the expected count (and the task's own box is checked);
//! 4. the completion signal is present (`TASK_COMPLETE`; `VERIFICATION_PASS` for QA);
//! 5. the task's own `Verify` command, run by the harness.
//!
//! Layers 1–4 are pure functions of the evidence; layer 5 runs a command.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::tasks_md::Task;
use crate::gates::{Validation, ValidationResult, run_validation};

pub const TASK_COMPLETE: &str = "TASK_COMPLETE";
pub const VERIFICATION_PASS: &str = "VERIFICATION_PASS";
pub const VERIFICATION_FAIL: &str = "VERIFICATION_FAIL";

/// One failed layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub layer: u8,
    pub message: String,
}

/// Everything layers 1–4 look at for one task.
#[derive(Debug)]
pub struct Evidence<'a> {
    pub task: &'a Task,
    /// The agent's own words.
    pub words: &'a str,
    /// `git status --porcelain` lines for the spec directory (harness files are ignored).
    pub uncommitted_spec: &'a [String],
    /// Indices checked before the iteration.
    pub checked_before: &'a BTreeSet<usize>,
    /// tasks.md after the iteration.
    pub tasks_after: &'a [Task],
    /// The other tasks of the group that may be checked in the same iteration.
    pub group: &'a [usize],
}

pub use super::contradiction::contradiction;

/// The last of the QA signals in `words`.
fn qa_verdict(words: &str) -> Option<bool> {
    match (
        words.rfind(VERIFICATION_PASS),
        words.rfind(VERIFICATION_FAIL),
    ) {
        (Some(p), Some(f)) => Some(p > f),
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (None, None) => None,
    }
}

/// Whether the agent claims the task is done.
pub fn claims_done(task: &Task, words: &str) -> bool {
    if task.verify_task {
        qa_verdict(words) == Some(true)
    } else {
        words.contains(TASK_COMPLETE)
    }
}

/// Layers 1–4, every failure with what to do about it.
pub fn check(ev: &Evidence<'_>) -> Vec<Failure> {
    let mut out = Vec::new();
    let t = ev.task;
    let claimed = claims_done(t, ev.words);
    // Layer 1.
    if claimed && let Some(p) = contradiction(ev.words) {
        out.push(Failure {
            layer: 1,
            message: format!(
                "CONTRADICTION: you claimed task {} complete but also said \"{p}\", which leaves work to a human. Do the work yourself (write an automated check instead of asking for manual action), or do not claim completion",
                t.id
            ),
        });
    }
    // Layer 2.
    if !ev.uncommitted_spec.is_empty() {
        out.push(Failure {
            layer: 2,
            message: format!(
                "uncommitted spec files: {}. Commit tasks.md and .progress.md together with your work",
                ev.uncommitted_spec.join(", ")
            ),
        });
    }
    // Layer 3.
    let own_checked = ev
        .tasks_after
        .get(t.index)
        .is_some_and(|a| a.done && a.id == t.id);
    let before_others = ev
        .checked_before
        .iter()
        .filter(|i| **i != t.index && !ev.group.contains(i))
        .count();
    let after_others = ev
        .tasks_after
        .iter()
        .filter(|a| a.done && a.index != t.index && !ev.group.contains(&a.index))
        .count();
    if !own_checked {
        out.push(Failure {
            layer: 3,
            message: format!(
                "the checkbox of task {} is not checked in tasks.md: mark it `- [x] {}` (and commit tasks.md) when the task is done",
                t.id, t.id
            ),
        });
    } else if after_others != before_others {
        out.push(Failure {
            layer: 3,
            message: format!(
                "checkmark count mismatch: expected {} checked tasks, found {}. Check only the box of task {}",
                before_others + 1,
                after_others + 1,
                t.id
            ),
        });
    }
    // Layer 4.
    if t.verify_task {
        match qa_verdict(ev.words) {
            Some(true) => {}
            Some(false) => out.push(Failure {
                layer: 4,
                message: format!(
                    "the QA check of task {} said {VERIFICATION_FAIL}: {}",
                    t.id,
                    tail(ev.words, 600)
                ),
            }),
            None => out.push(Failure {
                layer: 4,
                message: format!(
                    "no verdict: a [VERIFY] task must end with {VERIFICATION_PASS} or {VERIFICATION_FAIL}"
                ),
            }),
        }
    } else if !claimed {
        out.push(Failure {
            layer: 4,
            message: format!("the {TASK_COMPLETE} signal is missing: say {TASK_COMPLETE} only when the task is done"),
        });
    }
    out
}

/// Layer 5: run the task's `Verify` command in `dir`. `None` when it has none.
pub async fn run_verify_command(
    task: &Task,
    dir: &Path,
    timeout: Option<Duration>,
    grace: Duration,
    sandbox: &crate::sandbox::SandboxPlan,
    cancel: &CancellationToken,
) -> std::io::Result<Option<(String, ValidationResult)>> {
    let Some(cmd) = task.verify_command() else {
        return Ok(None);
    };
    let r = run_validation(
        Validation {
            command: &cmd,
            dir,
            env: Vec::new(),
            success_exit_code: 0,
            timeout,
            grace,
            sandbox,
        },
        cancel,
        |_| {},
    )
    .await?;
    Ok(Some((cmd, r)))
}

/// The layer-5 failure for a failed Verify command.
pub fn verify_failure(task: &Task, cmd: &str, r: &ValidationResult) -> Failure {
    Failure {
        layer: 5,
        message: format!(
            "the Verify command of task {} failed (`{cmd}` exited {}{}):\n{}",
            task.id,
            r.exit_code,
            if r.timed_out { ", timed out" } else { "" },
            tail(&r.output, 2000)
        ),
    }
}

/// All failures as one reason for the next prompt.
pub fn reason(failures: &[Failure]) -> String {
    failures
        .iter()
        .map(|f| format!("- layer {}: {}", f.layer, f.message))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worklist::tasks_md::parse;

    fn ev<'a>(
        task: &'a Task,
        words: &'a str,
        before: &'a BTreeSet<usize>,
        after: &'a [Task],
    ) -> Evidence<'a> {
        Evidence {
            task,
            words,
            uncommitted_spec: &[],
            checked_before: before,
            tasks_after: after,
            group: &[],
        }
    }

    #[test]
    fn each_layer_names_its_failure() {
        let before_text = "- [x] 1.1 a\n- [ ] 1.2 b\n- [ ] 1.3 [VERIFY] c\n";
        let tasks = parse(before_text);
        let before: BTreeSet<usize> = [0].into();
        let after = parse("- [x] 1.1 a\n- [x] 1.2 b\n- [ ] 1.3 [VERIFY] c\n");
        assert!(check(&ev(&tasks[1], "done TASK_COMPLETE", &before, &after)).is_empty());
        // Box not checked.
        let f = check(&ev(&tasks[1], "TASK_COMPLETE", &before, &tasks));
        assert_eq!(f.iter().map(|f| f.layer).collect::<Vec<_>>(), [3]);
        // Contradiction.
        let f = check(&ev(
            &tasks[1],
            "TASK_COMPLETE but this requires manual testing",
            &before,
            &after,
        ));
        assert_eq!(f[0].layer, 1);
        // No signal.
        let f = check(&ev(&tasks[1], "did stuff", &before, &after));
        assert_eq!(f[0].layer, 4);
        // An extra box.
        let extra = parse("- [x] 1.1 a\n- [x] 1.2 b\n- [x] 1.3 [VERIFY] c\n");
        let f = check(&ev(&tasks[1], "TASK_COMPLETE", &before, &extra));
        assert!(
            f[0].message.contains("expected 2 checked tasks, found 3"),
            "{f:?}"
        );
        // QA verdicts.
        let qa_after = parse("- [x] 1.1 a\n- [ ] 1.2 b\n- [x] 1.3 [VERIFY] c\n");
        assert!(check(&ev(&tasks[2], "VERIFICATION_PASS", &before, &qa_after)).is_empty());
        let f = check(&ev(
            &tasks[2],
            "VERIFICATION_FAIL: lint",
            &before,
            &qa_after,
        ));
        assert!(f.iter().any(|f| f.layer == 4 && f.message.contains("lint")));
        // Uncommitted.
        let dirty = ["M specs/x/tasks.md".to_string()];
        let mut e = ev(&tasks[1], "TASK_COMPLETE", &before, &after);
        e.uncommitted_spec = &dirty;
        assert_eq!(check(&e)[0].layer, 2);
    }
}
