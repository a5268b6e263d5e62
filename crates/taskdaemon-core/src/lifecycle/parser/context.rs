//! What the parser knows about the project: whether a plan exists, what the previous task
//! did, which files there are. Gathering it never fails: what cannot be read is left out.

use std::path::Path;

use serde::Serialize;

use crate::fsutil::read_optional;
use crate::git::Git;
use crate::workspace::Workspace;

/// At most this many files are considered.
const MAX_FILES: usize = 20_000;

/// Files that do not make a project "existing work" on their own.
const TRIVIAL: &[&str] = &[
    "readme",
    "license",
    "licence",
    "copying",
    ".gitignore",
    ".gitattributes",
    ".editorconfig",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProjectContext {
    /// `.ralph/plan.md` or `.ralph/plan.tsx` exists.
    pub plan_exists: bool,
    /// The previous task's one-line summary.
    pub previous_summary: Option<String>,
    /// The repository's files (tracked and untracked, not ignored), `.ralph/` left out.
    pub files: Vec<String>,
}

impl ProjectContext {
    /// Whether there is something to change: a plan, or files beyond a README or licence.
    pub fn has_existing_work(&self) -> bool {
        self.plan_exists
            || self.files.iter().any(|f| {
                let name = f.rsplit('/').next().unwrap_or(f).to_lowercase();
                !f.starts_with(".taskdaemon/")
                    && !TRIVIAL
                        .iter()
                        .any(|t| name == *t || name.starts_with(&format!("{t}.")))
            })
    }
}

/// The context of the work tree at `top` with workspace `ws`.
pub fn project_context(top: &Path, ws: &Workspace) -> ProjectContext {
    let plan_exists = ["plan.md", "plan.tsx"]
        .iter()
        .any(|p| ws.root().join(p).is_file());
    let previous_summary = read_optional(&ws.root().join("summary.md"))
        .ok()
        .flatten()
        .and_then(|s| first_line(&s))
        .or_else(|| {
            read_optional(&ws.root().join("task-history.md"))
                .ok()
                .flatten()
                .and_then(|h| {
                    h.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(|l| l.trim().trim_start_matches("- ").to_string())
                })
        });
    let files = Git::new(top)
        .call(&["ls-files", "-z", "-c", "-o", "--exclude-standard"])
        .bytes()
        .map(|b| {
            let mut v: Vec<String> = b
                .split(|c| *c == 0)
                .filter(|p| !p.is_empty() && !p.starts_with(b".ralph/"))
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .take(MAX_FILES)
                .collect();
            v.sort();
            v.dedup();
            v
        })
        .unwrap_or_default();
    ProjectContext {
        plan_exists,
        previous_summary,
        files,
    }
}

fn first_line(s: &str) -> Option<String> {
    s.lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readme_alone_is_no_existing_work() {
        let mut c = ProjectContext {
            files: vec!["README.md".into(), "LICENSE".into(), ".gitignore".into()],
            ..Default::default()
        };
        assert!(!c.has_existing_work());
        c.files.push("src/main.rs".into());
        assert!(c.has_existing_work());
        let plan = ProjectContext {
            plan_exists: true,
            ..Default::default()
        };
        assert!(plan.has_existing_work());
    }
}
