//! Which evidence a task may change itself: a task whose own requirement is to change
//! tests ("Remove the obsolete test for the legacy parser", "rewrite the test for …") may
//! change the test files it names, and only those. A sentence counts when it speaks of
//! tests and asks for a change to them; its files are the paths it names literally and the
//! test files its words point at (the task parser's mapping, over test files only).

use crate::lifecycle::parser::files_for;

/// Verbs that ask for a change to what they name. Not "fix": "fix the failing test" asks
/// for the code to be fixed.
const CHANGE: &[&str] = &[
    "remove", "delete", "drop", "rewrite", "replace", "update", "change", "rename", "move",
    "adjust", "modify", "edit", "split", "merge", "retire", "disable", "skip", "ignore", "weaken",
    "relax", "loosen", "refactor",
];

/// Words that say the tests are the goal, not the object: "… so that the tests pass".
const GOAL: &[&str] = &[
    "pass", "passes", "passing", "green", "failing", "fails", "broken", "succeed", "succeeds",
];

/// Words that name tests.
const TESTS: &[&str] = &[
    "test",
    "tests",
    "spec",
    "specs",
    "testcase",
    "testcases",
    "assertion",
    "assertions",
];

/// The test files (of `test_files`) that `text` asks to change, sorted.
pub fn allowed_changes(text: &str, test_files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for sentence in sentences(text) {
        let words: Vec<String> = sentence
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let verb = words
            .iter()
            .position(|w| CHANGE.iter().any(|v| inflects(w, v)));
        let object = words.iter().rposition(|w| TESTS.contains(&w.as_str()));
        let goal = words.iter().any(|w| GOAL.contains(&w.as_str()));
        if goal || negated(&words) || !matches!((verb, object), (Some(v), Some(o)) if v < o) {
            continue;
        }
        let named: Vec<&String> = test_files
            .iter()
            .filter(|f| sentence.contains(f.as_str()))
            .collect();
        if named.is_empty() {
            // The one test file its words name best, when the file's own name is in them.
            out.extend(
                files_for(sentence, test_files)
                    .into_iter()
                    .filter(|f| named_by(f, &words))
                    .take(1),
            );
        } else {
            out.extend(named.into_iter().cloned());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `word` is `verb` or one of its forms (`removes`, `removed`, `removing`).
fn inflects(word: &str, verb: &str) -> bool {
    let e = verb.ends_with('e');
    let Some(rest) = word.strip_prefix(verb.trim_end_matches('e')) else {
        return false;
    };
    if e {
        matches!(rest, "e" | "es" | "ed" | "ing")
    } else {
        matches!(rest, "" | "s" | "ed" | "ing")
            || rest.len() == 1 + "ed".len() && rest.ends_with("ed")
    }
}

/// A sentence that forbids rather than asks: "do not change the tests".
fn negated(words: &[String]) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        matches!(
            w.as_str(),
            "not" | "never" | "without" | "keep" | "leave" | "dont"
        ) || w.ends_with('n') && words.get(i + 1).is_some_and(|t| t == "t")
    })
}

/// Whether a word of the file's name (not `test`) is among `words` (by its first 4 letters).
fn named_by(file: &str, words: &[String]) -> bool {
    let stem = file.rsplit('/').next().unwrap_or(file);
    let stem = stem.split('.').next().unwrap_or(stem).to_lowercase();
    stem.split(['_', '-'])
        .filter(|t| t.len() >= 3 && !TESTS.contains(t))
        .any(|t| {
            let key: String = t.chars().take(4).collect();
            words.iter().any(|w| w.starts_with(&key))
        })
}

/// Sentences and lines of a task's text (a `.` inside a path does not end one).
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    text.split(['\n', ';', '!', '?'])
        .flat_map(|l| l.split(". "))
        .map(|s| s.trim().trim_end_matches('.'))
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<String> {
        [
            "tests/test_calc.py",
            "tests/test_legacy_parser.py",
            "tests/test_io.py",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn a_task_that_names_a_test_may_change_it() {
        assert_eq!(
            allowed_changes("Remove the obsolete test for the legacy parser", &files()),
            ["tests/test_legacy_parser.py"]
        );
        assert_eq!(
            allowed_changes(
                "Rewrite tests/test_io.py for the new reader. Add a flag.",
                &files()
            ),
            ["tests/test_io.py"]
        );
    }

    #[test]
    fn a_task_that_does_not_ask_changes_no_test() {
        assert!(
            allowed_changes("Implement calc.sh so that sh test.sh passes", &files()).is_empty()
        );
        assert!(allowed_changes("Make the legacy parser faster", &files()).is_empty());
        assert!(allowed_changes("Fix the parser bug", &files()).is_empty());
        assert!(allowed_changes("Do not change the calc tests.", &files()).is_empty());
        assert!(allowed_changes("Don't remove the legacy parser tests", &files()).is_empty());
        assert!(allowed_changes("Add an editor command with tests", &files()).is_empty());
        assert_eq!(
            allowed_changes("Update tests/test_io.py and tests/test_calc.py.", &files()),
            ["tests/test_calc.py", "tests/test_io.py"]
        );
        assert!(allowed_changes("Update the legacy parser so the tests pass", &files()).is_empty());
        assert!(allowed_changes("Fix the failing test for the legacy parser", &files()).is_empty());
    }
}
