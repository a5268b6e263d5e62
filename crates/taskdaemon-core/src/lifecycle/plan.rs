//! The plan (spec 1 §6): `.ralph/plan.md` (markdown headings are sections, markers are
//! HTML comments) or `.ralph/plan.tsx` (`<Screen name>` / `<Section gumdrop>` elements,
//! markers are JSX comments). Sections are addressed by name; each may name its source
//! files (`Files: a.ts, b.ts` in markdown, `files="a.ts b.ts"` in tsx) for the scope gates.
//!
//! Markers: `TASK-N [ADD|MODIFY|FIX|REMOVE]: description` (a number in an ADD or REMOVE
//! description is its count; `check: CMD` in a FIX names its check), `NO CHANGES for
//! task-N`, and `… PRESERVED …` (a number in it is the count to keep).

use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanFormat {
    Markdown,
    Tsx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkerKind {
    Add,
    Modify,
    Fix,
    Remove,
    NoChanges,
    Preserved,
}

impl MarkerKind {
    pub fn label(self) -> &'static str {
        match self {
            MarkerKind::Add => "ADD",
            MarkerKind::Modify => "MODIFY",
            MarkerKind::Fix => "FIX",
            MarkerKind::Remove => "REMOVE",
            MarkerKind::NoChanges => "NO CHANGES",
            MarkerKind::Preserved => "PRESERVED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marker {
    pub kind: MarkerKind,
    /// The task it belongs to; `None` for PRESERVED (it holds for every task).
    pub task: Option<u32>,
    pub text: String,
    pub count: Option<u32>,
    /// FIX: the command that proves the fix.
    pub check: Option<String>,
    /// 1-based line in the plan file.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Section {
    pub name: String,
    pub line: usize,
    pub files: Vec<String>,
    pub markers: Vec<Marker>,
    /// The section's text (for "changed content" checks).
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub path: PathBuf,
    pub format: PlanFormat,
    pub sections: Vec<Section>,
}

/// A problem in the plan, with its line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanProblem {
    pub line: usize,
    pub message: String,
}

impl Plan {
    /// The plan file of a work tree: `.ralph/plan.md`, else `.ralph/plan.tsx`.
    pub fn locate(workdir: &Path) -> Option<PathBuf> {
        ["plan.md", "plan.tsx"]
            .iter()
            .map(|n| workdir.join(".ralph").join(n))
            .find(|p| p.is_file())
    }

    pub fn parse(path: &Path, text: &str) -> (Plan, Vec<PlanProblem>) {
        let format = if path.extension().is_some_and(|e| e == "tsx") {
            PlanFormat::Tsx
        } else {
            PlanFormat::Markdown
        };
        let mut problems = Vec::new();
        let mut sections: Vec<Section> = Vec::new();
        // A markdown plan without `##` headings is one section: the whole plan.
        if format == PlanFormat::Markdown
            && !text.lines().any(|l| section_start(format, l).is_some())
            && !text.trim().is_empty()
        {
            sections.push(Section {
                name: "plan".into(),
                line: 1,
                files: Vec::new(),
                markers: Vec::new(),
                body: String::new(),
            });
        }
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if let Some(name) = section_start(format, line) {
                sections.push(Section {
                    name,
                    line: n,
                    files: tsx_files(format, line),
                    markers: Vec::new(),
                    body: String::new(),
                });
                continue;
            }
            let Some(cur) = sections.last_mut() else {
                continue;
            };
            cur.body.push_str(line);
            cur.body.push('\n');
            if let Some(files) = line
                .trim()
                .trim_start_matches(['-', '*'])
                .trim()
                .strip_prefix("Files:")
            {
                cur.files.extend(
                    files
                        .split([',', ' '])
                        .map(|f| f.trim().trim_matches('`'))
                        .filter(|f| !f.is_empty())
                        .map(str::to_string),
                );
            }
            for comment in comments(format, line) {
                match parse_marker(comment, n) {
                    Ok(Some(m)) => cur.markers.push(m),
                    Ok(None) => {}
                    Err(message) => problems.push(PlanProblem { line: n, message }),
                }
            }
        }
        let plan = Plan {
            path: path.to_path_buf(),
            format,
            sections,
        };
        (plan, problems)
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        let want = name.trim().to_lowercase();
        self.sections.iter().find(|s| s.name.to_lowercase() == want)
    }

    /// Problems that make the plan invalid (spec 4: the phase flips to build only on a
    /// valid plan): no section, duplicate names, malformed markers, a count where a count
    /// cannot be checked.
    pub fn validate(&self, parse_problems: Vec<PlanProblem>) -> Vec<PlanProblem> {
        let mut p = parse_problems;
        if self.sections.is_empty() {
            p.push(PlanProblem {
                line: 1,
                message: match self.format {
                    PlanFormat::Markdown => {
                        "no sections: give each part of the work a `## name` heading".into()
                    }
                    PlanFormat::Tsx => {
                        "no sections: use <Screen name=\"…\"> or <Section gumdrop=\"…\"> elements"
                            .into()
                    }
                },
            });
        }
        for (i, s) in self.sections.iter().enumerate() {
            if self.sections[..i]
                .iter()
                .any(|o| o.name.eq_ignore_ascii_case(&s.name))
            {
                p.push(PlanProblem {
                    line: s.line,
                    message: format!("section `{}` appears twice; names must be unique", s.name),
                });
            }
            for m in &s.markers {
                let contradicts = m.kind == MarkerKind::NoChanges
                    && s.markers.iter().any(|o| {
                        o.task == m.task
                            && !matches!(o.kind, MarkerKind::NoChanges | MarkerKind::Preserved)
                    });
                if contradicts {
                    p.push(PlanProblem {
                        line: m.line,
                        message: format!(
                            "section `{}` says NO CHANGES for task-{} but also has a TASK-{} marker; keep one",
                            s.name,
                            m.task.unwrap_or(0),
                            m.task.unwrap_or(0)
                        ),
                    });
                }
                let counted = matches!(
                    m.kind,
                    MarkerKind::Add | MarkerKind::Preserved | MarkerKind::Remove
                );
                if counted && m.count.is_some() && s.files.is_empty() {
                    p.push(PlanProblem {
                        line: m.line,
                        message: format!(
                            "`{}` in section `{}` has a count but the section names no files to count in; add `Files: path` to the section",
                            m.kind.label(),
                            s.name
                        ),
                    });
                }
            }
        }
        p
    }

    /// Sections with markers of task `n` (PRESERVED counts for every task).
    pub fn marked_for(&self, n: u32) -> impl Iterator<Item = (&Section, &Marker)> {
        self.sections.iter().flat_map(move |s| {
            s.markers
                .iter()
                .filter(move |m| m.task.is_none_or(|t| t == n))
                .map(move |m| (s, m))
        })
    }
}

fn section_start(format: PlanFormat, line: &str) -> Option<String> {
    let t = line.trim();
    match format {
        PlanFormat::Markdown => {
            let hashes = t.chars().take_while(|c| *c == '#').count();
            (hashes >= 2 && t[hashes..].starts_with(' '))
                .then(|| t[hashes..].trim().to_string())
                .filter(|n| !n.is_empty())
        }
        PlanFormat::Tsx => {
            let attr = if t.starts_with("<Section") {
                "gumdrop"
            } else if t.starts_with("<Screen") {
                "name"
            } else {
                return None;
            };
            attribute(t, attr)
        }
    }
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let at = tag.find(&format!("{name}=\""))? + name.len() + 2;
    let end = tag[at..].find('"')?;
    Some(tag[at..at + end].to_string())
}

fn tsx_files(format: PlanFormat, line: &str) -> Vec<String> {
    if format != PlanFormat::Tsx {
        return Vec::new();
    }
    attribute(line.trim(), "files")
        .map(|f| {
            f.split([' ', ','])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The comments on one line: `<!-- … -->` in markdown, `{/* … */}` in tsx.
fn comments(format: PlanFormat, line: &str) -> Vec<&str> {
    let (open, close) = match format {
        PlanFormat::Markdown => ("<!--", "-->"),
        PlanFormat::Tsx => ("{/*", "*/}"),
    };
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(a) = rest.find(open) {
        let after = &rest[a + open.len()..];
        let Some(b) = after.find(close) else { break };
        out.push(after[..b].trim());
        rest = &after[b + close.len()..];
    }
    out
}

fn first_number(text: &str) -> Option<u32> {
    text.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}

/// A marker from a comment's text; `Ok(None)` for other comments.
fn parse_marker(c: &str, line: usize) -> Result<Option<Marker>, String> {
    let upper = c.to_uppercase();
    if let Some(rest) = upper.strip_prefix("NO CHANGES") {
        let task = rest
            .find("TASK-")
            .and_then(|i| first_number(&rest[i + 5..]))
            .ok_or_else(|| format!("`{c}`: say which task, e.g. `NO CHANGES for task-3`"))?;
        return Ok(Some(Marker {
            kind: MarkerKind::NoChanges,
            task: Some(task),
            text: c.to_string(),
            count: None,
            check: None,
            line,
        }));
    }
    if let Some(rest) = upper.strip_prefix("TASK-") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let task: u32 = digits.parse().map_err(|_| {
            format!("`{c}`: expected TASK-<number> [ADD|MODIFY|FIX|REMOVE]: description")
        })?;
        let after = rest[digits.len()..].trim_start();
        let (kind, len) = [
            ("[ADD]", MarkerKind::Add),
            ("[MODIFY]", MarkerKind::Modify),
            ("[FIX]", MarkerKind::Fix),
            ("[REMOVE]", MarkerKind::Remove),
        ]
        .into_iter()
        .find(|(p, _)| after.starts_with(p))
        .map(|(p, k)| (k, p.len()))
        .ok_or_else(|| {
            format!("`{c}`: the marker must be one of [ADD], [MODIFY], [FIX], [REMOVE]")
        })?;
        // The description in its original case.
        let offset = c.len() - after.len() + len;
        let text = c[offset..]
            .trim_start_matches([':', ' '])
            .trim()
            .to_string();
        let check = text
            .to_lowercase()
            .find("check:")
            .map(|i| text[i + 6..].trim().trim_matches('`').to_string())
            .filter(|s| !s.is_empty());
        let count = matches!(kind, MarkerKind::Add | MarkerKind::Remove)
            .then(|| first_number(&text))
            .flatten();
        return Ok(Some(Marker {
            kind,
            task: Some(task),
            text,
            count,
            check,
            line,
        }));
    }
    if upper.contains("PRESERVED") {
        return Ok(Some(Marker {
            kind: MarkerKind::Preserved,
            task: None,
            text: c.to_string(),
            count: first_number(c),
            check: None,
            line,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD: &str = "# Plan: VIBRANT ENERGY\n\n## hero\nFiles: src/Hero.tsx\n<!-- TASK-3 [MODIFY]: Refine copy, less generic -->\n\n## features\n- Files: `src/flavors.ts`\n<!-- TASK-3 [ADD]: 2 nighttime drink flavors (Moonlit Calm, Deep Rest) -->\n<!-- EXISTING 8 flavors PRESERVED — do not remove or convert -->\n\n## store\nFiles: src/Store.tsx\n<!-- NO CHANGES for task-3 -->\n";

    #[test]
    fn markdown_sections_files_and_markers() {
        let (plan, problems) = Plan::parse(Path::new(".ralph/plan.md"), MD);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(plan.sections.len(), 3);
        let f = plan.section("Features").unwrap();
        assert_eq!(f.files, ["src/flavors.ts"]);
        assert_eq!(f.markers[0].kind, MarkerKind::Add);
        assert_eq!(f.markers[0].count, Some(2));
        assert_eq!(f.markers[0].task, Some(3));
        assert_eq!(f.markers[1].kind, MarkerKind::Preserved);
        assert_eq!(f.markers[1].count, Some(8));
        assert_eq!(
            plan.section("store").unwrap().markers[0].kind,
            MarkerKind::NoChanges
        );
        assert_eq!(plan.marked_for(3).count(), 4);
        assert_eq!(
            plan.marked_for(4).count(),
            1,
            "PRESERVED holds for every task"
        );
        assert!(plan.validate(Vec::new()).is_empty());
    }

    #[test]
    fn tsx_sections_and_jsx_comment_markers() {
        let tsx = "<App name=\"x\">\n  <Screen name=\"landing\">\n    <Section gumdrop=\"features\" files=\"src/flavors.ts\" cols={5}>\n      {/* TASK-3 [ADD]: 2 nighttime flavors */}\n      {/* EXISTING 8 flavors PRESERVED */}\n    </Section>\n  </Screen>\n  <Screen name=\"store\">\n    {/* NO CHANGES for task-3 — preserve as-is */}\n  </Screen>\n</App>\n";
        let (plan, problems) = Plan::parse(Path::new("plan.tsx"), tsx);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<&str> = plan.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["landing", "features", "store"]);
        assert_eq!(plan.section("features").unwrap().files, ["src/flavors.ts"]);
        assert_eq!(plan.section("features").unwrap().markers.len(), 2);
    }

    #[test]
    fn malformed_markers_and_plans_are_reported_with_lines() {
        let (plan, problems) = Plan::parse(
            Path::new("plan.md"),
            "## a\n<!-- TASK-x [ADD]: y -->\n<!-- TASK-2 [CONVERT]: y -->\n<!-- NO CHANGES -->\n## A\n<!-- TASK-2 [ADD]: 3 more -->\n",
        );
        let all = plan.validate(problems);
        let lines: Vec<usize> = all.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 3, 4, 5, 6], "{all:?}");
        let (flat, p) = Plan::parse(
            Path::new("plan.md"),
            "# Plan\n- step one\n<!-- TASK-1 [ADD]: x -->\n",
        );
        assert!(flat.validate(p).is_empty());
        assert_eq!(flat.sections[0].name, "plan");
        assert_eq!(flat.sections[0].markers.len(), 1);
        let (empty, p) = Plan::parse(Path::new("plan.tsx"), "<App>\n</App>\n");
        assert_eq!(empty.validate(p).len(), 1);
    }

    #[test]
    fn a_section_with_a_task_marker_and_no_changes_for_it_is_invalid() {
        let text = "## features\nFiles: a.ts\n<!-- TASK-2 [ADD]: 2 drinks -->\n<!-- NO CHANGES for task-2 -->\n";
        let (plan, problems) = Plan::parse(Path::new("plan.md"), text);
        let p = plan.validate(problems);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].line, 4);
        assert!(
            p[0].message
                .contains("says NO CHANGES for task-2 but also has a TASK-2 marker")
        );
    }
}
