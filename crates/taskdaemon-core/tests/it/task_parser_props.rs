//! The task parser on any input: the rules never panic and always give a usable task
//! (a question exactly when it needs clarification, requirements otherwise, only real
//! files); the model reply checker never panics and never lets an invalid reply through.

use proptest::prelude::*;
use taskdaemon_core::lifecycle::parser::{
    Clarification, ParseInput, ProjectContext, TaskKind, model, rules, task_md,
};

const VOCAB: &[&str] = &[
    "add",
    "fix",
    "remove",
    "make",
    "turn",
    "more",
    "2",
    "two",
    "another",
    "new",
    "the",
    "a",
    "drinks",
    "it",
    "some",
    "of",
    "into",
    "or",
    "and",
    ",",
    ".",
    "!",
    "?",
    ";",
    ":",
    "keep",
    "don't",
    "touch",
    "without",
    "breaking",
    "1.",
    "2)",
    "-",
    "*",
    "\n",
    "'",
    "\"",
    "```",
    "should",
    "be",
    "not",
    "working",
    "broken",
    "I",
    "want",
    "please",
    "also",
    "then",
    "src/a.rs",
    "README",
    "é",
    "😞",
    "İ",
    "—",
    "start",
    "over",
    "build",
    "me",
    "change",
    "stuff",
    "better",
    "which",
    "whichever",
    "bug",
    "404",
    "more",
    "contrast",
    "pls",
    "can",
    "you",
    "get",
    "rid",
];

fn files() -> Vec<String> {
    [
        "src/a.rs",
        "src/drinks.ts",
        "README.md",
        "src/ThemeToggle.tsx",
    ]
    .map(String::from)
    .to_vec()
}

fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .,;:!?'\"`()\\[\\]{}/\\n#*>•—é😞İ-]{0,200}",
        prop::collection::vec(prop::sample::select(VOCAB), 0..40).prop_map(|ws| ws.join(" ")),
        prop::collection::vec(prop::sample::select(VOCAB), 0..40).prop_map(|ws| ws.concat()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn rules_always_give_a_usable_task(m in message(), plan in any::<bool>(), answer in proptest::option::of(message())) {
        let input = ParseInput {
            message: m.clone(),
            clarification: answer.map(|a| Clarification { question: "q".into(), answer: a }),
            context: ProjectContext { plan_exists: plan, previous_summary: None, files: files() },
        };
        let t = rules::parse(&input);
        prop_assert_eq!(t.kind == TaskKind::NeedsClarification, t.question.is_some());
        if input.clarification.is_some() {
            prop_assert!(t.kind != TaskKind::NeedsClarification);
        }
        if t.kind != TaskKind::NeedsClarification {
            prop_assert!(!t.requirements.is_empty());
        }
        for r in &t.requirements {
            prop_assert!(!r.text.trim().is_empty());
            prop_assert!(r.count.is_none_or(|c| c > 0));
        }
        for f in &t.affected_files {
            prop_assert!(files().contains(f));
        }
        let md = task_md(1, "none", &m, &t, input.clarification.as_ref());
        prop_assert!(md.contains("\n## Requirements\n") && md.contains("\n## Scope\n"));
    }

    #[test]
    fn the_reply_checker_never_panics(reply in message()) {
        let input = ParseInput { message: "add a".into(), clarification: None, context: ProjectContext::default() };
        if let Ok(t) = model::extract(&reply, &input) {
            prop_assert!(t.kind == TaskKind::NeedsClarification || !t.requirements.is_empty());
        }
    }
}
