//! Spec documents: the `spec` loop writes one markdown file per spec into a directory,
//! each opening with YAML front matter:
//!
//! ```text
//! ---
//! title: OAuth endpoints
//! deps: [OAuth DB schema]        # titles or file names of specs in this set, or ids of specs in the store
//! phases:
//!   - name: Phase 1
//!     description: create the endpoint stubs
//!   - "Phase 2: token validation"
//! validate: cargo test           # optional: this spec's phases' validation command
//! priority: 0                    # optional: higher runs first
//! ---
//! body…
//! ```
//!
//! [`check_specs`] reads the set and reports every problem (bad front matter, an unknown or
//! ambiguous dep, a cycle) with its file and line, so the spec loop's next iteration can
//! fix it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Problem;
use crate::store::Phase;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    title: String,
    #[serde(default)]
    deps: Vec<String>,
    #[serde(default)]
    phases: Vec<PhaseEntry>,
    #[serde(default)]
    validate: Option<String>,
    #[serde(default)]
    priority: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PhaseEntry {
    Text(String),
    Full {
        name: String,
        #[serde(default)]
        description: String,
    },
}

/// A dep of a document, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepRef {
    /// Another document of the set (its index).
    Doc(usize),
    /// A spec already in the store (its id).
    Record(String),
}

/// One spec document.
#[derive(Debug, Clone)]
pub struct SpecDoc {
    pub file: PathBuf,
    pub title: String,
    pub deps: Vec<String>,
    pub phases: Vec<Phase>,
    pub validate: Option<String>,
    pub priority: i64,
    pub body: String,
}

/// The documents of a directory, sorted by file name, with their deps resolved.
#[derive(Debug, Clone, Default)]
pub struct SpecSet {
    pub docs: Vec<SpecDoc>,
    /// `resolved[i]` are the deps of `docs[i]`.
    pub resolved: Vec<Vec<DepRef>>,
}

/// Read every `*.md` in `dir` (not recursive). Problems are collected, not fatal.
pub fn read_specs(dir: &Path) -> (Vec<SpecDoc>, Vec<Problem>) {
    let mut docs = Vec::new();
    let mut problems = Vec::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file())
            .collect(),
        Err(e) => {
            problems.push(Problem {
                place: dir.display().to_string(),
                message: format!(
                    "cannot read the specs directory ({e}): write the spec documents there"
                ),
            });
            return (docs, problems);
        }
    };
    files.sort();
    for file in files {
        match read_one(&file) {
            Ok(d) => docs.push(d),
            Err(p) => problems.push(p),
        }
    }
    (docs, problems)
}

/// One spec document.
pub fn read_one(file: &Path) -> Result<SpecDoc, Problem> {
    let place = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| Problem {
        place: place.clone(),
        message: format!("cannot read: {e}"),
    })?;
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Err(Problem {
            place: format!("{place}:1"),
            message: "no front matter: start the file with a `---` line, the YAML fields (title, deps, phases), and another `---` line".into(),
        });
    };
    let end = rest
        .find("\n---\n")
        .map(|i| (i, i + 5))
        .or_else(|| rest.find("\n---\r\n").map(|i| (i, i + 6)))
        .or_else(|| rest.strip_suffix("\n---").map(|r| (r.len(), rest.len())));
    let Some((yaml_end, body_start)) = end else {
        return Err(Problem {
            place: format!("{place}:1"),
            message: "the front matter is not closed: end it with a `---` line".into(),
        });
    };
    let yaml = &rest[..yaml_end];
    // Line numbers of the YAML start at line 2 of the file.
    let fm: FrontMatter = match crate::yaml::parse::<FrontMatter>(file, yaml) {
        Ok(Some(fm)) => fm,
        Ok(None) => {
            return Err(Problem {
                place: format!("{place}:2"),
                message: "the front matter is empty: it needs at least `title:` and `phases:`"
                    .into(),
            });
        }
        Err(e) => {
            let line = e.line.map(|l| l + 1).unwrap_or(2);
            return Err(Problem {
                place: format!("{place}:{line}"),
                message: format!(
                    "front matter: {}{}",
                    e.message,
                    e.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                ),
            });
        }
    };
    let title = fm.title.trim().to_string();
    if title.is_empty() || title.chars().count() > crate::store::TITLE_MAX {
        return Err(Problem {
            place: format!("{place}:2"),
            message: format!(
                "`title` must be 1 to {} characters",
                crate::store::TITLE_MAX
            ),
        });
    }
    let mut phases = Vec::new();
    for p in fm.phases {
        let phase = match p {
            PhaseEntry::Text(t) => Phase::parse(&t).map_err(|e| Problem {
                place: place.clone(),
                message: e.to_string(),
            })?,
            PhaseEntry::Full { name, description } => Phase {
                name: name.trim().to_string(),
                description: description.trim().to_string(),
            },
        };
        if phase.name.is_empty() {
            return Err(Problem {
                place,
                message: "a phase has no name".into(),
            });
        }
        phases.push(phase);
    }
    if phases.is_empty() {
        return Err(Problem {
            place,
            message:
                "no `phases`: list at least one, e.g. `phases: [\"Phase 1: create the schema\"]`"
                    .into(),
        });
    }
    Ok(SpecDoc {
        file: file.to_path_buf(),
        title,
        deps: fm.deps.iter().map(|d| d.trim().to_string()).collect(),
        phases,
        validate: fm.validate.filter(|v| !v.trim().is_empty()),
        priority: fm.priority.unwrap_or(0),
        body: rest[body_start..].to_string(),
    })
}

/// Read and check the set in `dir`. `external` resolves a dep that names no document of the
/// set to the id of a spec in the store (`Ok(None)`: no such spec; `Err`: ambiguous, with
/// the candidates).
pub fn check_specs(
    dir: &Path,
    external: &dyn Fn(&str) -> Result<Option<String>, String>,
) -> (SpecSet, Vec<Problem>) {
    let (docs, mut problems) = read_specs(dir);
    if docs.is_empty() && problems.is_empty() {
        problems.push(Problem {
            place: dir.display().to_string(),
            message: "no spec documents yet: write one `NN-name.md` per spec here".into(),
        });
    }
    let mut by_title: BTreeMap<String, usize> = BTreeMap::new();
    for (i, d) in docs.iter().enumerate() {
        if let Some(j) = by_title.insert(d.title.to_lowercase(), i) {
            problems.push(Problem {
                place: d.file.display().to_string(),
                message: format!(
                    "title `{}` is also the title of {}: titles must differ",
                    d.title,
                    docs[j].file.display()
                ),
            });
        }
    }
    let stem = |d: &SpecDoc| {
        d.file
            .file_stem()
            .map(|s| s.to_string_lossy().to_lowercase())
            .unwrap_or_default()
    };
    let mut resolved = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let mut refs = Vec::new();
        for dep in &d.deps {
            let key = dep.to_lowercase();
            let key_md = key.trim_end_matches(".md");
            let local = by_title
                .get(&key)
                .copied()
                .or_else(|| docs.iter().position(|o| stem(o) == key_md));
            match local {
                Some(j) if j == i => problems.push(Problem {
                    place: d.file.display().to_string(),
                    message: format!("`{}` depends on itself", d.title),
                }),
                Some(j) => refs.push(DepRef::Doc(j)),
                None => match external(dep) {
                    Ok(Some(id)) => refs.push(DepRef::Record(id)),
                    Ok(None) => problems.push(Problem {
                        place: d.file.display().to_string(),
                        message: format!(
                            "dep `{dep}` names no spec: use the title of another spec of this set ({}) or the id of an existing spec",
                            docs.iter()
                                .map(|o| format!("`{}`", o.title))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }),
                    Err(m) => problems.push(Problem {
                        place: d.file.display().to_string(),
                        message: format!("dep `{dep}`: {m}"),
                    }),
                },
            }
        }
        resolved.push(refs);
    }
    if let Some(cycle) = find_cycle(&resolved) {
        let names: Vec<String> = cycle.iter().map(|&i| docs[i].title.clone()).collect();
        problems.push(Problem {
            place: docs[cycle[0]].file.display().to_string(),
            message: format!(
                "deps make a cycle: {}; remove one of these deps",
                names.join(" -> ")
            ),
        });
    }
    (SpecSet { docs, resolved }, problems)
}

/// A cycle among the documents (indexes, first repeated at the end), if any.
fn find_cycle(resolved: &[Vec<DepRef>]) -> Option<Vec<usize>> {
    // 0 unvisited, 1 on the stack, 2 done.
    let mut mark = vec![0u8; resolved.len()];
    let mut path = Vec::new();
    fn visit(
        i: usize,
        resolved: &[Vec<DepRef>],
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        mark[i] = 1;
        path.push(i);
        for d in &resolved[i] {
            let DepRef::Doc(j) = d else { continue };
            if mark[*j] == 1 {
                let start = path.iter().position(|&p| p == *j).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(*j);
                return Some(cycle);
            }
            if mark[*j] == 0
                && let Some(c) = visit(*j, resolved, mark, path)
            {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }
    for i in 0..resolved.len() {
        if mark[i] == 0
            && let Some(c) = visit(i, resolved, &mut mark, &mut path)
        {
            return Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn none(_: &str) -> Result<Option<String>, String> {
        Ok(None)
    }

    #[test]
    fn a_valid_set_resolves_deps_by_title_and_file_name() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "01-schema.md",
            "---\ntitle: DB schema\nphases: [\"Phase 1: tables\"]\n---\nbody\n",
        );
        write(
            d.path(),
            "02-api.md",
            "---\ntitle: API\ndeps: [db schema]\nphases:\n  - name: Stubs\n    description: routes\n  - \"Tokens: validate\"\nvalidate: cargo test\n---\n",
        );
        write(
            d.path(),
            "03-ui.md",
            "---\ntitle: UI\ndeps: [02-api.md]\nphases: [Build]\npriority: 2\n---\n",
        );
        let (set, problems) = check_specs(d.path(), &none);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(set.docs.len(), 3);
        assert_eq!(set.resolved[1], vec![DepRef::Doc(0)]);
        assert_eq!(set.resolved[2], vec![DepRef::Doc(1)]);
        assert_eq!(set.docs[1].phases.len(), 2);
        assert_eq!(set.docs[1].phases[1].name, "Tokens");
        assert_eq!(set.docs[1].validate.as_deref(), Some("cargo test"));
        assert_eq!(set.docs[2].priority, 2);
        assert_eq!(set.docs[0].body, "body\n");
    }

    #[test]
    fn unknown_deps_cycles_and_bad_front_matter_are_problems_with_places() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "a.md",
            "---\ntitle: A\ndeps: [B]\nphases: [x]\n---\n",
        );
        write(
            d.path(),
            "b.md",
            "---\ntitle: B\ndeps: [A, Nope]\nphases: [x]\n---\n",
        );
        write(d.path(), "c.md", "no front matter\n");
        write(d.path(), "d.md", "---\ntitle: D\nphses: [x]\n---\n");
        let (_, problems) = check_specs(d.path(), &none);
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let all = text.join("\n");
        assert!(all.contains("c.md:1: no front matter"), "{all}");
        assert!(all.contains("d.md:") && all.contains("phses"), "{all}");
        assert!(all.contains("dep `Nope` names no spec"), "{all}");
        assert!(all.contains("deps make a cycle: A -> B -> A"), "{all}");
    }

    #[test]
    fn an_external_dep_resolves_to_a_record() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "a.md",
            "---\ntitle: A\ndeps: [oauth-db]\nphases: [x]\n---\n",
        );
        let ext = |r: &str| -> Result<Option<String>, String> {
            Ok((r == "oauth-db").then(|| "1a2b3c-spec-oauth-db".to_string()))
        };
        let (set, problems) = check_specs(d.path(), &ext);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            set.resolved[0],
            vec![DepRef::Record("1a2b3c-spec-oauth-db".into())]
        );
    }
}
