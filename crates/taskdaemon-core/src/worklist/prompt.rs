//! The prompts of one task: the executor's (one task, with the context it needs) and the
//! QA agent's for `[VERIFY]` tasks.

use std::fmt::Write as _;
use std::path::Path;

use super::tasks_md::Task;
use super::verify::{TASK_COMPLETE, VERIFICATION_FAIL, VERIFICATION_PASS};
use crate::fsutil::{bound_text, read_optional};
use crate::shell::quote;

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

/// `flock LOCK sed -i 's/^- \[ \] ID /- [x] ID /' TASKS`, every word shell-quoted and the
/// id's regex characters escaped, so that it works pasted into `sh` wherever the files are.
pub fn mark_command(id: &str, pp: &ParallelPaths<'_>) -> String {
    let escaped: String = id
        .chars()
        .flat_map(|c| {
            let special = ".[]*^$\\/&".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect();
    let script = format!("s/^- \\[ \\] {escaped} /- [x] {escaped} /");
    format!(
        "flock {} sed -i {} {}",
        quote(&pp.lock.display().to_string()),
        quote(&script),
        quote(&pp.tasks_file.display().to_string())
    )
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
            "## Your previous attempt was rejected\n\nThe harness checked the last attempt of this task and rejected it:\n\n{err}\n\nFix this, and do the whole task as its **Do** and **Done when** say: checking the box or saying {TASK_COMPLETE} without the work is rejected again.\n"
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
    let commit = t
        .fields
        .commit
        .as_deref()
        .map(|c| format!(" (message: {c})"))
        .unwrap_or_default();
    match &p.parallel {
        None => {
            rule(
                &mut s,
                format!(
                    "When the task is done: check its box in `{}/tasks.md` (`- [x] {}`), add what you did and learned to `{}/.progress.md`, and commit your work together with tasks.md and .progress.md{commit}.",
                    p.spec_rel, t.id, p.spec_rel,
                ),
            );
        }
        Some(pp) => {
            rule(
                &mut s,
                format!(
                    "You run in your own git worktree, at the same time as other tasks. Commit your work there{commit}; do not edit tasks.md or .progress.md in the worktree."
                ),
            );
            rule(
                &mut s,
                format!(
                    "When the task is done: check its box in the shared tasks.md under its lock, with this command exactly: `{}`, and write your progress notes to `{}` (the harness merges them into .progress.md).",
                    mark_command(&t.id, pp),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The mark command, pasted into `sh` in a directory whose path holds a space and a
    /// quote, checks exactly the task's box and leaves no stray file.
    #[test]
    fn the_mark_command_works_pasted_into_sh_anywhere() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("my spec's dir");
        std::fs::create_dir_all(&dir).unwrap();
        let tasks = dir.join("tasks.md");
        std::fs::write(
            &tasks,
            "- [ ] 1.2 first\n- [ ] 1.20 other\n- [ ] 1x2 near\n",
        )
        .unwrap();
        let lock = dir.join(".tasks.md.lock");
        let progress = dir.join(".progress-task-1.2.md");
        let pp = ParallelPaths {
            tasks_file: &tasks,
            lock: &lock,
            progress_file: &progress,
        };
        let parsed =
            crate::worklist::tasks_md::parse("- [ ] 1.2 first\n  - **Commit**: feat: first\n");
        let task = &parsed[0];
        let prompt = task_prompt(&TaskPrompt {
            task,
            spec_name: "s",
            spec_rel: "specs/s",
            spec_dir: &dir,
            attempt: 1,
            max_attempts: 3,
            previous_error: None,
            progress: "",
            parallel: Some(pp),
        });
        assert!(prompt.contains("(message: feat: first)"), "{prompt}");
        // Every command in backticks that starts with a program the prompt names.
        let cmd = prompt
            .split('`')
            .find(|c| c.starts_with("flock "))
            .unwrap_or_else(|| panic!("{prompt}"));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&tasks).unwrap(),
            "- [x] 1.2 first\n- [ ] 1.20 other\n- [ ] 1x2 near\n"
        );
        let mut entries: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            ["my spec's dir"],
            "no stray file outside the spec dir"
        );
    }
}
