//! `plan update` (spec 1 §6): the structured `task.md` of task N turned into change markers
//! in the existing plan. Each requirement goes to the section it names best (words of the
//! section's name and files), or to a new section; sections no requirement touches get
//! `NO CHANGES for task-N`; what an ADD adds to gets `EXISTING n … PRESERVED` with the count
//! of its files today. Running it twice changes nothing the second time.

use std::collections::BTreeSet;
use std::path::Path;

use super::plan::{MarkerKind, Plan, PlanFormat, Section};
use crate::gates::count::count_items;

/// One requirement of `task.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    pub kind: MarkerKind,
    pub text: String,
}

/// The task number and requirements of a `task.md` in the parser's format.
pub fn task_requirements(task_md: &str) -> (Option<u32>, Vec<Requirement>) {
    let counter = task_md
        .lines()
        .find_map(|l| l.strip_prefix("Counter:"))
        .and_then(|v| v.trim().parse().ok());
    let reqs = task_md
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("- ")?;
            let (kind, rest) = [
                ("[ADD]", MarkerKind::Add),
                ("[MODIFY]", MarkerKind::Modify),
                ("[FIX]", MarkerKind::Fix),
                ("[REMOVE]", MarkerKind::Remove),
            ]
            .into_iter()
            .find_map(|(p, k)| l.strip_prefix(p).map(|r| (k, r)))?;
            let text = rest.trim().to_string();
            (!text.is_empty() && text != "...").then_some(Requirement { kind, text })
        })
        .collect();
    (counter, reqs)
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .flat_map(split_camel)
        .map(|w| w.to_lowercase())
        .map(|w| w.strip_suffix('s').map(str::to_string).unwrap_or(w))
        .filter(|w| w.len() >= 3 && !STOP.contains(&w.as_str()))
        .collect()
}

fn split_camel(w: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in w.chars() {
        if c.is_uppercase() && out.last().is_some_and(|s| !s.is_empty()) {
            out.push(String::new());
        }
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

const STOP: &[&str] = &[
    "the",
    "and",
    "for",
    "with",
    "add",
    "new",
    "more",
    "fix",
    "make",
    "from",
    "into",
    "that",
    "this",
    "not",
    "existing",
    "keep",
    "all",
    "src",
    "component",
    "tsx",
    "ts",
    "js",
    "index",
    "modify",
    "remove",
    "update",
    "change",
    "refine",
    "one",
    "them",
    "they",
    "working",
];

/// The result of an update: the new text and what changed, one line each.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub text: String,
    pub changes: Vec<String>,
}

/// Why `plan update` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    #[error(
        "requirement `[{kind}] {text}` matches no file of the repository and no section of the plan that names files, so its count could never be checked\n  hint: add a section for it with `Files: path` (the files it changes) to the plan, then run `taskdaemon plan update` again"
    )]
    NoFiles { kind: &'static str, text: String },
}

/// What `update_plan` reads of the work tree.
pub struct UpdateWorld<'a> {
    /// A file of the work tree (for the counts of PRESERVED).
    pub read: &'a dyn Fn(&str) -> Option<String>,
    /// The files a requirement's words point at (the task parser's mapping).
    pub files_for: &'a dyn Fn(&str) -> Vec<String>,
}

/// The section a requirement goes to: the one listing most of its files, else the one
/// whose name and files share most of its words.
fn best_section<'p>(plan: &'p Plan, text: &str, files: &[String]) -> Option<&'p Section> {
    let rw = words(text);
    plan.sections
        .iter()
        .map(|s| {
            let by_file = s.files.iter().filter(|f| files.contains(f)).count();
            let mut sw = words(&s.name);
            for f in &s.files {
                sw.extend(words(f));
            }
            (by_file * 100 + rw.intersection(&sw).count(), s)
        })
        .filter(|(score, _)| *score > 0)
        .max_by_key(|(score, s)| (*score, std::cmp::Reverse(s.line)))
        .map(|(_, s)| s)
}

/// Put task `n`'s requirements into `plan_text` as markers. Refuses an ADD or REMOVE
/// that would land in a section without files.
pub fn update_plan(
    path: &Path,
    plan_text: &str,
    n: u32,
    reqs: &[Requirement],
    world: &UpdateWorld,
) -> Result<Update, UpdateError> {
    let (plan, _) = Plan::parse(path, plan_text);
    let comment = |body: &str| match plan.format {
        PlanFormat::Markdown => format!("<!-- {body} -->"),
        PlanFormat::Tsx => format!("{{/* {body} */}}"),
    };
    // Insertions after a line (1-based), lines dropped, and new sections at the end.
    let mut after: Vec<(usize, String)> = Vec::new();
    let mut drop: BTreeSet<usize> = BTreeSet::new();
    let mut appended: Vec<String> = Vec::new();
    let mut changes = Vec::new();
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut affected: BTreeSet<String> = BTreeSet::new();
    let mut preserved: BTreeSet<String> = BTreeSet::new();
    let has = |s: &Section, kind: MarkerKind, text: &str| {
        s.markers
            .iter()
            .any(|m| m.kind == kind && m.task == Some(n) && (text.is_empty() || m.text == text))
    };
    for r in reqs {
        let files = (world.files_for)(&r.text);
        affected.extend(files.iter().cloned());
        let counted = matches!(r.kind, MarkerKind::Add | MarkerKind::Remove);
        let marker = format!("TASK-{n} [{}]: {}", r.kind.label(), r.text);
        let best = best_section(&plan, &r.text, &files)
            .filter(|s| !(counted && s.files.is_empty() && !files.is_empty()));
        let Some(s) = best else {
            if counted && files.is_empty() {
                return Err(UpdateError::NoFiles {
                    kind: r.kind.label(),
                    text: r.text.clone(),
                });
            }
            let name: Vec<&str> = r.text.split_whitespace().take(5).collect();
            let name = name.join(" ").trim_end_matches([',', '.', ';']).to_string();
            appended.push(new_section(plan.format, &name, &files, &comment(&marker)));
            changes.push(format!("new section `{name}`: {marker}"));
            continue;
        };
        if counted && s.files.is_empty() {
            return Err(UpdateError::NoFiles {
                kind: r.kind.label(),
                text: r.text.clone(),
            });
        }
        touched.insert(s.name.clone());
        // A section that gets a marker of this task is no longer "NO CHANGES" for it.
        for m in s
            .markers
            .iter()
            .filter(|m| m.kind == MarkerKind::NoChanges && m.task == Some(n))
        {
            if drop.insert(m.line) {
                changes.push(format!("`{}`: NO CHANGES for task-{n} removed", s.name));
            }
        }
        if !has(s, r.kind, &r.text) {
            after.push((anchor(s), comment(&marker)));
            changes.push(format!("`{}`: {marker}", s.name));
        }
        let keeps = s.markers.iter().any(|m| m.kind == MarkerKind::Preserved);
        if r.kind == MarkerKind::Add && !keeps && preserved.insert(s.name.clone()) {
            let count: usize = s
                .files
                .iter()
                .filter_map(|f| (world.read)(f).map(|t| count_items(f, &t)))
                .sum();
            if count > 0 {
                let keep = format!("EXISTING {count} items PRESERVED — do not remove or convert");
                after.push((anchor(s), comment(&keep)));
                changes.push(format!("`{}`: {keep}", s.name));
            }
        }
    }
    for s in &plan.sections {
        let lists_affected = s.files.iter().any(|f| affected.contains(f));
        if !touched.contains(&s.name) && !lists_affected && !has(s, MarkerKind::NoChanges, "") {
            let m = format!("NO CHANGES for task-{n}");
            after.push((s.line, comment(&m)));
            changes.push(format!("`{}`: {m}", s.name));
        }
    }
    Ok(Update {
        text: splice(plan_text, plan.format, &after, &drop, appended),
        changes,
    })
}

/// The line after which a section's markers go: its heading, then its `Files:` line.
fn anchor(s: &Section) -> usize {
    s.body
        .lines()
        .position(|l| {
            l.trim()
                .trim_start_matches(['-', '*'])
                .trim()
                .starts_with("Files:")
        })
        .map(|i| s.line + 1 + i)
        .unwrap_or(s.line)
}

fn new_section(format: PlanFormat, name: &str, files: &[String], marker: &str) -> String {
    match format {
        PlanFormat::Markdown if files.is_empty() => format!("\n## {name}\n{marker}\n"),
        PlanFormat::Markdown => format!("\n## {name}\nFiles: {}\n{marker}\n", files.join(", ")),
        PlanFormat::Tsx => format!(
            "  <Section gumdrop=\"{}\"{}>\n    {marker}\n  </Section>\n",
            name.to_lowercase().replace(' ', "-"),
            if files.is_empty() {
                String::new()
            } else {
                format!(" files=\"{}\"", files.join(" "))
            }
        ),
    }
}

/// The plan text with the insertions, without the dropped lines, new sections at the end.
fn splice(
    plan_text: &str,
    format: PlanFormat,
    after: &[(usize, String)],
    drop: &BTreeSet<usize>,
    mut appended: Vec<String>,
) -> String {
    let mut out = String::new();
    for (i, line) in plan_text.lines().enumerate() {
        if format == PlanFormat::Tsx && line.trim() == "</App>" {
            for b in &appended {
                out.push_str(b);
            }
            appended.clear();
        }
        if !drop.contains(&(i + 1)) {
            out.push_str(line);
            out.push('\n');
        }
        for (_, c) in after.iter().filter(|(at, _)| *at == i + 1) {
            out.push_str(c);
            out.push('\n');
        }
    }
    for b in appended {
        out.push_str(&b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Plan: VIBRANT ENERGY\n\n## hero\nFiles: src/components/HeroSection.tsx\n\n## features\nFiles: src/data/flavors.ts\n\n## store\nFiles: src/pages/Store.tsx\n";
    const TASK: &str = "# Task: x\nType: mutation\nCounter: 3\n\n## Requirements\n- [MODIFY] Refine hero copy — less generic\n- [ADD] Add 2 more drinks for nighttime (2 new flavors)\n- [FIX] Theme toggle not switching moods\n\n## Scope\n- PRESERVE: All existing drinks\n";

    #[test]
    fn requirements_land_in_their_sections_and_the_rest_is_no_changes() {
        let (n, reqs) = task_requirements(TASK);
        assert_eq!(n, Some(3));
        assert_eq!(reqs.len(), 3);
        let read = |f: &str| {
            (f == "src/data/flavors.ts")
                .then(|| "export const f = [1, 2, 3, 4, 5, 6, 7, 8];".to_string())
        };
        let files_for = |t: &str| {
            if t.contains("drinks") {
                vec!["src/data/flavors.ts".to_string()]
            } else {
                Vec::new()
            }
        };
        let world = UpdateWorld {
            read: &read,
            files_for: &files_for,
        };
        let u = update_plan(Path::new("plan.md"), PLAN, 3, &reqs, &world).unwrap();
        let (plan, problems) = Plan::parse(Path::new("plan.md"), &u.text);
        assert!(plan.validate(problems).is_empty(), "{}", u.text);
        let hero = plan.section("hero").unwrap();
        assert_eq!(hero.markers[0].kind, MarkerKind::Modify);
        let features = plan.section("features").unwrap();
        assert_eq!(features.markers[0].kind, MarkerKind::Add);
        assert_eq!(features.markers[0].count, Some(2));
        assert_eq!(features.markers[1].kind, MarkerKind::Preserved);
        assert_eq!(features.markers[1].count, Some(8));
        assert_eq!(
            plan.section("store").unwrap().markers[0].kind,
            MarkerKind::NoChanges
        );
        // The FIX names no section: a new one.
        assert!(
            plan.section("Theme toggle not switching moods").is_some(),
            "{}",
            u.text
        );
        // Idempotent.
        let again = update_plan(Path::new("plan.md"), &u.text, 3, &reqs, &world).unwrap();
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        assert_eq!(again.text, u.text);
    }

    #[test]
    fn the_parser_mapping_places_the_add_and_nothing_contradicts() {
        // "drinks" shares no word with `features`; the parser maps it to the file.
        let plan = "## features\nFiles: src/flavors.ts\n<!-- NO CHANGES for task-1 -->\n\n## store\nFiles: src/store.ts\n";
        let reqs = vec![Requirement {
            kind: MarkerKind::Add,
            text: "Add 2 more drinks for nighttime".into(),
        }];
        let read = |_: &str| Some("[1, 2, 3, 4, 5, 6, 7, 8]".to_string());
        let files_for = |_: &str| vec!["src/flavors.ts".to_string()];
        let world = UpdateWorld {
            read: &read,
            files_for: &files_for,
        };
        let u = update_plan(Path::new("plan.md"), plan, 1, &reqs, &world).unwrap();
        let (p, problems) = Plan::parse(Path::new("plan.md"), &u.text);
        assert!(p.validate(problems).is_empty(), "{}", u.text);
        let kinds: Vec<MarkerKind> = p
            .section("features")
            .unwrap()
            .markers
            .iter()
            .map(|m| m.kind)
            .collect();
        assert_eq!(
            kinds,
            [MarkerKind::Add, MarkerKind::Preserved],
            "{}",
            u.text
        );
        // Refused: an ADD that would land where no file can be counted.
        let none = |_: &str| Vec::new();
        let world = UpdateWorld {
            read: &read,
            files_for: &none,
        };
        let bare = "## ideas\n";
        let reqs = vec![Requirement {
            kind: MarkerKind::Add,
            text: "Add 2 widgets".into(),
        }];
        let e = update_plan(Path::new("plan.md"), bare, 1, &reqs, &world).unwrap_err();
        assert!(e.to_string().contains("matches no file"), "{e}");
        // A section listing an affected file is never NO CHANGES.
        let two = "## grid\nFiles: src/flavors.ts\n\n## data\nFiles: src/flavors.ts, src/x.ts\n";
        let reqs = vec![Requirement {
            kind: MarkerKind::Modify,
            text: "Refine the grid".into(),
        }];
        let world = UpdateWorld {
            read: &read,
            files_for: &files_for,
        };
        let u = update_plan(Path::new("plan.md"), two, 1, &reqs, &world).unwrap();
        assert!(!u.text.contains("NO CHANGES"), "{}", u.text);
    }
}
