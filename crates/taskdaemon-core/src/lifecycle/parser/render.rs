//! `task.md` in spec 1 §5's structured format:
//!
//! ```markdown
//! # Task: Refine VIBRANT ENERGY landing page
//! Type: mutation
//! Previous: task-2-post
//! Counter: 3
//!
//! ## Requirements
//! - [MODIFY] …
//!
//! ## Scope
//! - PRESERVE: …
//! - AFFECTED FILES: …
//!
//! ## Original Message
//! > …
//! ```
//!
//! Readings the parser chose go under Scope as `- AMBIGUOUS:` lines; an answer to the
//! parser's question follows the original message under `## Clarification`.

use std::fmt::Write as _;

use super::{Clarification, Marker, ParsedTask, Requirement, TaskKind};

/// The heading that starts the quoted original message (read back for the history line).
pub const ORIGINAL_MESSAGE: &str = "## Original Message";

/// The text of `task.md` for task `number`.
pub fn task_md(
    number: u32,
    previous: &str,
    message: &str,
    task: &ParsedTask,
    clarification: Option<&Clarification>,
) -> String {
    let mut s = String::new();
    let title = one_line(&task.title);
    let _ = writeln!(
        s,
        "# Task: {}",
        if title.is_empty() {
            "(untitled)"
        } else {
            &title
        }
    );
    let _ = writeln!(s, "Type: {}", task.kind.label());
    let _ = writeln!(s, "Previous: {previous}");
    let _ = writeln!(s, "Counter: {number}");
    s.push_str("\n## Requirements\n");
    if task.requirements.is_empty() {
        s.push_str("- (none: see the question below)\n");
    }
    for r in &task.requirements {
        let _ = writeln!(s, "- [{}] {}", r.marker.label(), requirement_line(r));
    }
    s.push_str("\n## Scope\n");
    if task.preserve.is_empty() {
        let _ = writeln!(
            s,
            "- PRESERVE: {}",
            if task.kind == TaskKind::Fresh {
                "nothing named (a fresh build)"
            } else {
                "everything the requirements above do not name"
            }
        );
    }
    for p in &task.preserve {
        let _ = writeln!(s, "- PRESERVE: {}", one_line(p));
    }
    let files = if task.affected_files.is_empty() {
        if task.kind == TaskKind::Fresh {
            "none yet (new work)".to_string()
        } else {
            "not known (no file of the repository matched; find them while planning)".to_string()
        }
    } else {
        task.affected_files.join(", ")
    };
    let _ = writeln!(s, "- AFFECTED FILES: {files}");
    for a in &task.ambiguities {
        let _ = writeln!(s, "- AMBIGUOUS: {}", one_line(a));
    }
    if let Some(q) = &task.question {
        for l in q.lines().filter(|l| !l.trim().is_empty()) {
            let _ = writeln!(s, "- QUESTION: {}", l.trim());
        }
    }
    let _ = write!(s, "\n{ORIGINAL_MESSAGE}\n");
    for l in message.trim_end().lines() {
        if l.is_empty() {
            s.push_str(">\n");
        } else {
            let _ = writeln!(s, "> {l}");
        }
    }
    if let Some(c) = clarification {
        let _ = write!(
            s,
            "\n## Clarification\nQuestion: {}\nAnswer: {}\n",
            indent_continuation(c.question.trim()),
            indent_continuation(c.answer.trim())
        );
    }
    s
}

/// A requirement with what its count and "more" mean spelt out.
fn requirement_line(r: &Requirement) -> String {
    let text = one_line(&r.text);
    match (r.marker, r.count, r.keep_existing) {
        (Marker::Add, Some(n), true) => {
            format!("{text} ({n} new, in addition to the existing ones; keep them all)")
        }
        (Marker::Add, Some(n), false) => format!("{text} ({n} new)"),
        (Marker::Add, None, true) => {
            format!("{text} (new ones, in addition to the existing ones; keep them all)")
        }
        (Marker::Remove, Some(n), _) => format!("{text} ({n} to remove)"),
        _ => text,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn indent_continuation(s: &str) -> String {
    s.lines().collect::<Vec<_>>().join("\n  ")
}

/// The original message quoted in a `task.md` (structured or the older template form).
pub fn quoted_message(task_md: &str) -> String {
    let from = task_md
        .find(ORIGINAL_MESSAGE)
        .map(|i| &task_md[i..])
        .unwrap_or(task_md);
    from.lines()
        .skip_while(|l| !l.starts_with('>'))
        .take_while(|l| l.starts_with('>'))
        .map(|l| {
            l.strip_prefix("> ")
                .or_else(|| l.strip_prefix('>'))
                .unwrap_or(l)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_format() {
        let t = ParsedTask {
            kind: TaskKind::Mutation,
            title: "Refine VIBRANT ENERGY landing page".into(),
            requirements: vec![
                Requirement {
                    marker: Marker::Modify,
                    text: "Refine ad copy".into(),
                    count: None,
                    keep_existing: false,
                },
                Requirement {
                    marker: Marker::Add,
                    text: "Add 2 more drinks for nighttime".into(),
                    count: Some(2),
                    keep_existing: true,
                },
            ],
            preserve: vec!["All existing drinks unchanged".into()],
            affected_files: vec!["src/HeroSection.tsx".into(), "src/FlavorGrid.tsx".into()],
            question: None,
            ambiguities: vec![],
        };
        let md = task_md(
            3,
            "task-2-post",
            "refine ad copy!\nadd 2 more drinks\n",
            &t,
            None,
        );
        assert_eq!(
            md,
            "# Task: Refine VIBRANT ENERGY landing page\nType: mutation\nPrevious: task-2-post\nCounter: 3\n\n\
## Requirements\n- [MODIFY] Refine ad copy\n\
- [ADD] Add 2 more drinks for nighttime (2 new, in addition to the existing ones; keep them all)\n\n\
## Scope\n- PRESERVE: All existing drinks unchanged\n- AFFECTED FILES: src/HeroSection.tsx, src/FlavorGrid.tsx\n\n\
## Original Message\n> refine ad copy!\n> add 2 more drinks\n"
        );
        assert_eq!(quoted_message(&md), "refine ad copy!\nadd 2 more drinks");
    }
}
