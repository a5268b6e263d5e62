//! tasks.md (spec 5): top-level checkbox items are tasks, numbered `Phase.Task`, with the
//! markers `[P]` (may run in parallel with its `[P]` neighbours) and `[VERIFY]` (a quality
//! checkpoint for the QA agent), and indented fields under them:
//!
//! ```markdown
//! ## Phase 1: Make it work
//!
//! - [ ] 1.1 [P] Add the parser
//!   - **Do**: write `src/parse.rs`
//!   - **Files**: src/parse.rs
//!   - **Done when**: it parses the examples
//!   - **Verify**: `cargo test parse`
//!   - **Commit**: `feat: parser`
//!   - _Requirements: FR-1, AC-1.2_
//!   - _Design: Component 1_
//! ```
//!
//! Parsing never fails and never panics: anything that is not a task is context.

/// One task of tasks.md.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Task {
    /// Position among the tasks (0-based): the spec's taskIndex.
    pub index: usize,
    /// `1.2` when the task is numbered, else its position counted from 1.
    pub id: String,
    pub title: String,
    pub done: bool,
    pub parallel: bool,
    pub verify_task: bool,
    /// 0-based line of the checkbox.
    pub line: usize,
    /// The task's lines as written (checkbox line and its indented body).
    pub block: String,
    pub fields: Fields,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fields {
    pub do_: Option<String>,
    pub files: Option<String>,
    pub done_when: Option<String>,
    pub verify: Option<String>,
    pub commit: Option<String>,
    pub requirements: Option<String>,
    pub design: Option<String>,
}

impl Task {
    /// `[VERIFY]` tasks never run in parallel: they break a group.
    pub fn runs_in_parallel(&self) -> bool {
        self.parallel && !self.verify_task
    }

    /// The shell command of the `Verify` field, without surrounding backticks.
    pub fn verify_command(&self) -> Option<String> {
        let v = self.fields.verify.as_deref()?.trim();
        let v = strip_code(v);
        (!v.is_empty()).then(|| v.to_string())
    }
}

/// Parse tasks.md.
pub fn parse(text: &str) -> Vec<Task> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut tasks: Vec<Task> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(head) = checkbox(lines[i]) else {
            i += 1;
            continue;
        };
        // The body: following lines until the next task, a heading or a line back at the
        // task's own indentation that is not a list continuation.
        let mut end = i + 1;
        while end < lines.len() {
            let l = lines[end];
            if checkbox(l).is_some() || l.trim_start().starts_with('#') && indent(l) == 0 {
                break;
            }
            if !l.trim().is_empty() && indent(l) <= head.indent {
                break;
            }
            end += 1;
        }
        // Trailing blank lines belong to nobody.
        let mut body_end = end;
        while body_end > i + 1 && lines[body_end - 1].trim().is_empty() {
            body_end -= 1;
        }
        let body = &lines[i + 1..body_end];
        let index = tasks.len();
        let (id, title, parallel, verify_task) = title_parts(head.rest, index);
        tasks.push(Task {
            index,
            id,
            title,
            done: head.done,
            parallel,
            verify_task,
            line: i,
            block: lines[i..body_end]
                .iter()
                .map(|l| l.trim_end_matches('\r'))
                .collect::<Vec<_>>()
                .join("\n"),
            fields: fields(body),
        });
        i = end;
    }
    tasks
}

/// `text` with the checkbox of the task on `line` set to `done`; `None` when that line is
/// not a task's checkbox.
pub fn set_done(text: &str, line: usize, done: bool) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n == line && checkbox(l).is_some() {
            let at = l.find('[')?;
            let mark = if done { "[x]" } else { "[ ]" };
            out.push_str(&l[..at]);
            out.push_str(mark);
            out.push_str(l.get(at + 3..)?);
            found = true;
        } else {
            out.push_str(l);
        }
    }
    found.then_some(out)
}

/// How many tasks are checked.
pub fn checked(tasks: &[Task]) -> usize {
    tasks.iter().filter(|t| t.done).count()
}

struct Head<'a> {
    indent: usize,
    done: bool,
    rest: &'a str,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start_matches([' ', '\t']).len()
}

/// A top-level checkbox item (indented at most one space): `- [ ] …`, `* [x] …`.
fn checkbox(line: &str) -> Option<Head<'_>> {
    let line = line.trim_end_matches('\r');
    let ind = indent(line);
    if ind > 1 {
        return None;
    }
    let t = &line[ind..];
    let t = t.strip_prefix("- ").or_else(|| t.strip_prefix("* "))?;
    let t = t.trim_start_matches(' ');
    let done = if t.starts_with("[ ]") {
        false
    } else if t.starts_with("[x]") || t.starts_with("[X]") {
        true
    } else {
        return None;
    };
    Some(Head {
        indent: ind,
        done,
        rest: t[3..].trim(),
    })
}

/// The number, the title without markers, and the markers.
fn title_parts(rest: &str, index: usize) -> (String, String, bool, bool) {
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    let mut id = None;
    if let Some(first) = words.first() {
        let w = first.trim_end_matches([':', '.', ')']);
        let numbered = !w.is_empty()
            && w.contains('.')
            && w.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if numbered {
            id = Some(w.to_string());
            words.remove(0);
        }
    }
    let mut parallel = false;
    let mut verify = false;
    words.retain(|w| {
        let u = w.to_ascii_uppercase();
        let u = u.trim_end_matches([':', ',']);
        match u {
            "[P]" => {
                parallel = true;
                false
            }
            "[VERIFY]" => {
                verify = true;
                false
            }
            _ => true,
        }
    });
    let title = words.join(" ");
    (
        id.unwrap_or_else(|| (index + 1).to_string()),
        title,
        parallel,
        verify,
    )
}

const FIELD_NAMES: &[&str] = &["do", "files", "done when", "verify", "commit"];

/// The name and value of a field line (`- **Do**: x`, `**Verify:** x`, `Files: x`,
/// `_Requirements: FR-1_`).
fn field_line(line: &str) -> Option<(String, String)> {
    let t = line.trim();
    let t = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))
        .unwrap_or(t)
        .trim();
    if let Some(inner) = t.strip_prefix('_') {
        let inner = inner.strip_suffix('_').unwrap_or(inner);
        let (name, value) = inner.split_once(':')?;
        let name = name.trim().to_ascii_lowercase();
        if name == "requirements" || name == "design" {
            return Some((name, value.trim().to_string()));
        }
        return None;
    }
    let plain = t.replace("**", "");
    let (name, value) = plain.split_once(':')?;
    let name = name.trim().to_ascii_lowercase();
    FIELD_NAMES
        .contains(&name.as_str())
        .then(|| (name, value.trim().to_string()))
}

fn fields(body: &[&str]) -> Fields {
    let mut f = Fields::default();
    let mut current: Option<(String, String, usize)> = None;
    let mut finished: Vec<(String, String)> = Vec::new();
    for l in body {
        let l = l.trim_end_matches('\r');
        if let Some((name, value)) = field_line(l) {
            if let Some((n, v, _)) = current.take() {
                finished.push((n, v));
            }
            current = Some((name, value, indent(l)));
            continue;
        }
        match &mut current {
            // A deeper line continues the field (Do's numbered steps).
            Some((_, v, ind)) if !l.trim().is_empty() && indent(l) > *ind => {
                if !v.is_empty() {
                    v.push('\n');
                }
                v.push_str(l.trim());
            }
            Some(_) if l.trim().is_empty() => {}
            _ => {
                if let Some((n, v, _)) = current.take() {
                    finished.push((n, v));
                }
            }
        }
    }
    if let Some((n, v, _)) = current.take() {
        finished.push((n, v));
    }
    for (name, value) in finished {
        let slot = match name.as_str() {
            "do" => &mut f.do_,
            "files" => &mut f.files,
            "done when" => &mut f.done_when,
            "verify" => &mut f.verify,
            "commit" => &mut f.commit,
            "requirements" => &mut f.requirements,
            "design" => &mut f.design,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    f
}

/// `` `cmd` `` → `cmd` (also ```` ``cmd`` ````).
fn strip_code(v: &str) -> &str {
    let t = v.trim();
    let n = t.len() - t.trim_start_matches('`').len();
    if n > 0 && t.len() > 2 * n && t.ends_with(&"`".repeat(n)) {
        return t[n..t.len() - n].trim();
    }
    t
}

/// An implement run's tasks from its worktree's `tasks.md` (`status`, `watch`).
pub fn of_run(r: &crate::store::LoopRun) -> Vec<(String, String)> {
    if r.loop_type != crate::store::LoopKind::Implement {
        return Vec::new();
    }
    let (Some(wt), Some(dir)) = (
        r.worktree.as_ref(),
        crate::scheduler::context::RunContext::get(&r.context.spec_dir),
    ) else {
        return Vec::new();
    };
    tasks_in(std::path::Path::new(wt), dir)
}

/// The tasks of `<worktree>/<spec_dir>/tasks.md`: (`id title`, done/pending). The file is
/// the repository's (untrusted): read confined to the worktree, parsed, never trusted
/// further; nothing when it cannot be read.
pub fn tasks_in(worktree: &std::path::Path, spec_dir: &str) -> Vec<(String, String)> {
    if crate::store::paths::inside(spec_dir, worktree).is_err() {
        return Vec::new();
    }
    let text = match crate::fsutil::read_optional(&worktree.join(spec_dir).join("tasks.md")) {
        Ok(Some(t)) => t,
        _ => return Vec::new(),
    };
    parse(&text)
        .into_iter()
        .map(|t| {
            let status = if t.done { "done" } else { "pending" };
            (format!("{} {}", t.id, t.title), status.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# Tasks\n\n## Phase 1: POC\n\n- [ ] 1.1 [P] Add the parser\n  - **Do**: write the parser\n    1. read input\n    2. split lines\n  - **Files**: src/parse.rs\n  - **Done when**: examples parse\n  - **Verify**: `cargo test parse`\n  - **Commit**: `feat: parser`\n  - _Requirements: FR-1, AC-1.2_\n  - _Design: Parser_\n\n- [x] 1.2 [P] Add the printer\n  - **Verify**: `true`\n- [ ] 1.3 [VERIFY] Quality checkpoint\n  - **Do**: run all checks\n\n## Phase 2\n\n- [ ] 2.1 Refactor\n  - [ ] a sub-step is not a task\n";

    #[test]
    fn parses_numbers_markers_and_fields() {
        let t = parse(SAMPLE);
        assert_eq!(t.len(), 4, "{t:#?}");
        assert_eq!(t[0].id, "1.1");
        assert!(t[0].parallel && !t[0].verify_task && !t[0].done);
        assert_eq!(t[0].title, "Add the parser");
        assert_eq!(
            t[0].fields.do_.as_deref(),
            Some("write the parser\n1. read input\n2. split lines")
        );
        assert_eq!(t[0].fields.files.as_deref(), Some("src/parse.rs"));
        assert_eq!(t[0].fields.done_when.as_deref(), Some("examples parse"));
        assert_eq!(t[0].verify_command().as_deref(), Some("cargo test parse"));
        assert_eq!(t[0].fields.commit.as_deref(), Some("`feat: parser`"));
        assert_eq!(t[0].fields.requirements.as_deref(), Some("FR-1, AC-1.2"));
        assert_eq!(t[0].fields.design.as_deref(), Some("Parser"));
        assert!(t[1].done && t[1].parallel);
        assert!(t[2].verify_task && !t[2].runs_in_parallel());
        assert_eq!(t[3].id, "2.1");
        assert!(t[3].block.contains("sub-step"));
        assert_eq!(checked(&t), 1);
    }

    #[test]
    fn set_done_changes_only_that_checkbox() {
        let t = parse(SAMPLE);
        let out = set_done(SAMPLE, t[2].line, true).unwrap();
        let t2 = parse(&out);
        assert!(t2[2].done);
        assert_eq!(checked(&t2), 2);
        assert_eq!(out.len(), SAMPLE.len());
        let back = set_done(&out, t[2].line, false).unwrap();
        assert_eq!(back, SAMPLE);
        assert!(set_done(SAMPLE, 0, true).is_none());
    }

    #[test]
    fn unnumbered_tasks_get_their_position() {
        let t = parse("- [ ] first\n- [X] second [p]\n");
        assert_eq!(t[0].id, "1");
        assert_eq!(t[1].id, "2");
        assert!(t[1].done && t[1].parallel);
    }
}
