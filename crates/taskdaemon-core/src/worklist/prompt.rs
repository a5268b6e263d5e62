//! The prompts of one task: the executor's (one task, with the context it needs) and the
//! QA agent's for `[VERIFY]` tasks.

use std::fmt::Write as _;
use std::path::Path;

use super::tasks_md::Task;
use super::verify::{TASK_COMPLETE, VERIFICATION_FAIL, VERIFICATION_PASS};
use crate::fsutil::{bound_text, read_optional};

/// Spec files given to every task, with their size budget.
const SPEC_FILES: &[(&str, usize)] = &[("requirements.md", 8 * 1024), ("design.md", 12 * 1024)];

pub struct TaskPrompt<'a> {
    pub task: &'a Task,
    pub spec_name: &'a str,
    /// The spec directory as the agent sees it (relative to its working directory).
    pub spec_rel: &'a str,
    /// The main spec directory (absolute), read for context.
    pub spec_dir: &'a Path,
    pub attempt: u32,
    pub max_attempts: u32,
    pub previous_error: Option<&'a str>,
    pub progress: &'a str,
    /// Parallel: absolute paths of the main tasks.md, its lock and the task's progress file.
    pub parallel: Option<ParallelPaths<'a>>,
}

pub struct ParallelPaths<'a> {
    pub tasks_file: &'a Path,
    pub lock: &'a Path,
    pub progress_file: &'a Path,
}

pub fn task_prompt(p: &TaskPrompt<'_>) -> String {
    let t = p.task;
    let mut s = String::new();
    let role = if t.verify_task {
        format!(
            "You are the QA engineer of the spec `{}`. Run the verification checkpoint below and report the truth: {VERIFICATION_PASS} only when every check passes.",
            p.spec_name
        )
    } else {
        format!(
            "You are the executor of ONE task of the spec `{}` (directory `{}`). Do this task completely and nothing else; a fresh agent gets the next one.",
            p.spec_name, p.spec_rel
        )
    };
    let _ = writeln!(s, "{role}\n");
    let _ = writeln!(
        s,
        "## Task {} (attempt {} of {})\n\n```markdown\n{}\n```\n",
        t.id, p.attempt, p.max_attempts, t.block
    );
    if let Some(err) = p.previous_error {
        let _ = writeln!(
            s,
            "## Your previous attempt was rejected\n\nThe harness checked the last attempt of this task and rejected it:\n\n{err}\n\nFix exactly this, then finish the task.\n"
        );
    }
    for (name, max) in SPEC_FILES {
        if let Ok(Some(text)) = read_optional(&p.spec_dir.join(name))
            && !text.trim().is_empty()
        {
            let _ = writeln!(
                s,
                "## {}/{name}\n\n{}\n",
                p.spec_rel,
                bound_text(text.trim(), *max)
            );
        }
    }
    if !p.progress.is_empty() {
        let _ = writeln!(s, "## Progress so far (.progress.md)\n\n{}\n", p.progress);
    }
    let _ = writeln!(s, "## Rules\n");
    let mut n = 0;
    let mut rule = |s: &mut String, text: String| {
        n += 1;
        let _ = writeln!(s, "{n}. {text}");
    };
    if t.verify_task {
        rule(
            &mut s,
            "Run every check the task names (its **Do** and **Verify**). Do not change code to make checks pass; report what fails.".into(),
        );
    } else {
        rule(
            &mut s,
            "Do what **Do** says; touch only the files under **Files**; stop when **Done when** holds.".into(),
        );
    }
    if let Some(cmd) = t.verify_command() {
        rule(
            &mut s,
            format!(
                "Run the Verify command yourself: `{cmd}`. The harness runs it again after you finish; a failure rejects the attempt."
            ),
        );
    }
    let mark = format!("sed -i 's/^- \\[ \\] {} /- [x] {} /'", t.id, t.id);
    match &p.parallel {
        None => {
            rule(
                &mut s,
                format!(
                    "When the task is done: check its box in `{}/tasks.md` (`- [x] {}`), add what you did and learned to `{}/.progress.md`, and commit your work together with tasks.md and .progress.md{}.",
                    p.spec_rel,
                    t.id,
                    p.spec_rel,
                    t.fields
                        .commit
                        .as_deref()
                        .map(|c| format!(" (message: {c})"))
                        .unwrap_or_default()
                ),
            );
        }
        Some(pp) => {
            rule(
                &mut s,
                "You run in your own git worktree, at the same time as other tasks. Commit your work there; do not edit tasks.md or .progress.md in the worktree.".into(),
            );
            rule(
                &mut s,
                format!(
                    "When the task is done: check its box in the shared tasks.md under its lock: `flock {} {mark} {}`, and write your progress notes to `{}` (the harness merges them into .progress.md).",
                    pp.lock.display(),
                    pp.tasks_file.display(),
                    pp.progress_file.display()
                ),
            );
        }
    }
    rule(
        &mut s,
        "Never claim completion for work a human still has to do: automate the check instead."
            .into(),
    );
    if t.verify_task {
        rule(
            &mut s,
            format!(
                "If every check passes: check the box as above, commit, and end with {VERIFICATION_PASS}. Otherwise do not check the box; end with {VERIFICATION_FAIL} and what failed."
            ),
        );
    } else {
        rule(
            &mut s,
            format!(
                "End your reply with {TASK_COMPLETE} once the box is checked and everything is committed."
            ),
        );
    }
    s
}
