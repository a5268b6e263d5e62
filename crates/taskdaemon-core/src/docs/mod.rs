//! The documents the cascade passes along: a plan (markdown that the `plan` loop refines)
//! and the spec documents the `spec` loop writes (markdown with YAML front matter). Parsing
//! and checking only; the checks are the built-in loops' validation (`taskdaemon check-doc`).

pub mod plan_doc;
pub mod spec_doc;

pub use plan_doc::{PlanCheck, REVIEW_PASSES, check_plan};
pub use spec_doc::{SpecDoc, SpecSet, check_specs, read_specs};

/// One problem in a document: where, what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The file (and `:line` when known).
    pub place: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

/// The `## ` headings of a markdown text, in order.
pub fn sections(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect()
}
