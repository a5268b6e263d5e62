//! The tasks.md parser never panics, and what it reads back is what was written.

use proptest::prelude::*;
use taskdaemon_core::worklist::tasks_md::{checked, parse, set_done};

/// Markdown-ish noise: checkboxes, markers, fields, headings, odd bytes.
fn noise() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("- [ ] ".to_string()),
        Just("- [x] ".to_string()),
        Just(" * [X] ".to_string()),
        Just("[P] ".to_string()),
        Just("[VERIFY] ".to_string()),
        Just("1.2 ".to_string()),
        Just("  - **Do**: ".to_string()),
        Just("**Verify:** `".to_string()),
        Just("_Requirements: ".to_string()),
        Just("_".to_string()),
        Just("## Phase 1\n".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("    ".to_string()),
        Just("é".to_string()),
        "[ -~]{0,12}".prop_map(|s| s),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

#[derive(Debug, Clone)]
struct Spec {
    done: bool,
    parallel: bool,
    verify: bool,
    title: String,
    cmd: Option<String>,
}

fn task() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        "[A-Za-z][A-Za-z ]{0,20}[A-Za-z]",
        proptest::option::of("[a-z][a-z /.-]{0,20}"),
    )
        .prop_map(|(done, parallel, verify, title, cmd)| Spec {
            done,
            parallel,
            verify,
            title,
            cmd,
        })
}

fn render(tasks: &[Spec]) -> String {
    let mut s = String::from("# Tasks\n\n## Phase 1\n\n");
    for (i, t) in tasks.iter().enumerate() {
        s.push_str(&format!(
            "- [{}] 1.{} {}{}{}\n",
            if t.done { "x" } else { " " },
            i + 1,
            if t.parallel { "[P] " } else { "" },
            if t.verify { "[VERIFY] " } else { "" },
            t.title
        ));
        s.push_str("  - **Do**: the work\n    1. step one\n");
        if let Some(c) = &t.cmd {
            s.push_str(&format!("  - **Verify**: `{c}`\n"));
        }
        s.push_str("  - _Requirements: FR-1_\n\n");
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_any_input(text in noise()) {
        let tasks = parse(&text);
        for t in &tasks {
            let _ = set_done(&text, t.line, !t.done);
            let _ = t.verify_command();
        }
        let _ = checked(&tasks);
    }

    #[test]
    fn never_panics_on_arbitrary_strings(text in any::<String>()) {
        let tasks = parse(&text);
        for t in &tasks {
            prop_assert!(set_done(&text, t.line, true).is_some());
        }
    }

    #[test]
    fn reads_back_what_was_written(specs in proptest::collection::vec(task(), 0..12)) {
        let text = render(&specs);
        let tasks = parse(&text);
        prop_assert_eq!(tasks.len(), specs.len());
        for (i, (t, s)) in tasks.iter().zip(&specs).enumerate() {
            prop_assert_eq!(&t.id, &format!("1.{}", i + 1));
            prop_assert_eq!(&t.title, &s.title.split_whitespace().collect::<Vec<_>>().join(" "));
            prop_assert_eq!(t.done, s.done);
            prop_assert_eq!(t.parallel, s.parallel);
            prop_assert_eq!(t.verify_task, s.verify);
            prop_assert_eq!(t.verify_command(), s.cmd.as_ref().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()));
            prop_assert_eq!(t.fields.requirements.as_deref(), Some("FR-1"));
            // Toggling one box changes exactly that task.
            let toggled = set_done(&text, t.line, !t.done).unwrap();
            let again = parse(&toggled);
            prop_assert_eq!(again[i].done, !s.done);
            prop_assert_eq!(checked(&again), checked(&tasks) + usize::from(!s.done) - usize::from(s.done));
        }
    }
}
