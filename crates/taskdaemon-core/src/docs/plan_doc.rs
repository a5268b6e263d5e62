//! A plan document and the check the `plan` loop's validation runs: a title, sections, and
//! all five Rule of Five review passes done.

use std::path::Path;

use super::{Problem, sections};

/// The Rule of Five: the plan is reviewed in five passes, one per iteration.
pub const REVIEW_PASSES: u32 = 5;

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanCheck {
    pub title: Option<String>,
    pub sections: Vec<String>,
    pub problems: Vec<Problem>,
}

impl PlanCheck {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The check's word after a pass before the last: not a problem of the plan, the passes to
/// go (the report shows such an iteration as a review, not a failed validation).
pub fn passes_to_go(pass: u32) -> String {
    format!(
        "review pass {pass} of {REVIEW_PASSES} done; the plan is finished after pass {REVIEW_PASSES}"
    )
}

/// Check the plan at `file` after review pass `pass` (1-based).
pub fn check_plan(file: &Path, pass: u32) -> PlanCheck {
    let place = file.display().to_string();
    let mut problems = Vec::new();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            return PlanCheck {
                title: None,
                sections: Vec::new(),
                problems: vec![Problem {
                    place,
                    message: format!("cannot read the plan ({e}): write it there"),
                }],
            };
        }
    };
    let title = text
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    if title.is_none() {
        problems.push(Problem {
            place: place.clone(),
            message: "no title: the plan starts with a `# Title` line".into(),
        });
    }
    let found = sections(&text);
    if found.is_empty() {
        problems.push(Problem {
            place: place.clone(),
            message: "no sections: organise the plan in `## ` sections (goals, approach, risks, …)"
                .into(),
        });
    }
    if pass < REVIEW_PASSES {
        problems.push(Problem {
            place,
            message: passes_to_go(pass),
        });
    }
    PlanCheck {
        title,
        sections: found,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_passes_only_after_five_reviews_with_title_and_sections() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.md");
        assert!(!check_plan(&f, 5).passed());
        std::fs::write(&f, "# OAuth\n\n## Goals\nlog in\n").unwrap();
        let c = check_plan(&f, 3);
        assert_eq!(c.problems.len(), 1, "{c:?}");
        assert!(c.problems[0].message.contains("review pass 3 of 5"));
        assert!(check_plan(&f, 5).passed());
        std::fs::write(&f, "no title\n").unwrap();
        assert_eq!(check_plan(&f, 5).problems.len(), 2);
    }
}
