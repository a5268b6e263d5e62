//! Scope-aware gates (spec 1 §7): what the plan's markers for task N promise, checked
//! against the files as they were at `task-N-pre` and as they are now. Hard failures block
//! completion; soft ones are reported.

use serde::Serialize;

use super::count::count_items;
use crate::lifecycle::plan::{Marker, MarkerKind, Plan, Section};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Blocks the completion; the agent can fix it.
    Hard,
    /// A reminder: reported, never blocks.
    Soft,
    /// Blocks the completion, and only a person can resolve it (the harness cannot
    /// measure the requirement): the run stops with DECIDE.
    Ask,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateResult {
    pub gate: String,
    pub severity: Severity,
    pub passed: bool,
    pub message: String,
}

impl GateResult {
    fn pass(gate: String, message: String) -> GateResult {
        GateResult {
            gate,
            severity: Severity::Hard,
            passed: true,
            message,
        }
    }
    fn fail(gate: String, severity: Severity, message: String) -> GateResult {
        GateResult {
            gate,
            severity,
            passed: false,
            message,
        }
    }
    /// A failure that blocks completion.
    pub fn blocks(&self) -> bool {
        !self.passed && self.severity != Severity::Soft
    }
}

/// What the gates read: a file at `task-N-pre`, a file now, and the result of a FIX check.
pub trait ScopeWorld {
    fn before(&self, path: &str) -> Option<String>;
    fn now(&self, path: &str) -> Option<String>;
    fn check_passes(&self, command: &str) -> bool;
    /// The file's bytes at the baseline (a binary file is not text).
    fn before_bytes(&self, path: &str) -> Option<Vec<u8>> {
        self.before(path).map(String::into_bytes)
    }
    /// The file's bytes now.
    fn now_bytes(&self, path: &str) -> Option<Vec<u8>> {
        self.now(path).map(String::into_bytes)
    }
}

/// The real world: files at a baseline commit (`git show`), files on disk, and FIX checks
/// already run (a check not in `checks` counts as failing).
pub struct GitWorld {
    pub workdir: std::path::PathBuf,
    pub git: crate::git::Git,
    /// A revision, e.g. `<snapshot commit>^{commit}`.
    pub baseline: String,
    pub checks: std::collections::HashMap<String, bool>,
}

impl ScopeWorld for GitWorld {
    fn before(&self, path: &str) -> Option<String> {
        self.before_bytes(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }
    fn now(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.workdir.join(path)).ok()
    }
    fn before_bytes(&self, path: &str) -> Option<Vec<u8>> {
        let out = self
            .git
            .call(&["show", &format!("{}:./{path}", self.baseline)])
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    }
    fn now_bytes(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.workdir.join(path)).ok()
    }
    fn check_passes(&self, command: &str) -> bool {
        self.checks.get(command).copied().unwrap_or(false)
    }
}

/// Every gate the markers of task `task` ask for, in plan order.
pub fn scope_gates(plan: &Plan, task: u32, world: &dyn ScopeWorld) -> Vec<GateResult> {
    plan.marked_for(task)
        .map(|(s, m)| gate(s, m, task, world))
        .collect()
}

fn total(files: &[String], read: impl Fn(&str) -> Option<String>) -> usize {
    files
        .iter()
        .map(|f| read(f).map(|t| count_items(f, &t)).unwrap_or(0))
        .sum()
}

fn changed(files: &[String], world: &dyn ScopeWorld) -> Vec<String> {
    files
        .iter()
        .filter(|f| world.before(f) != world.now(f))
        .cloned()
        .collect()
}

fn gate(s: &Section, m: &Marker, task: u32, world: &dyn ScopeWorld) -> GateResult {
    let name = format!(
        "scope:{}:{}",
        s.name,
        m.kind.label().to_lowercase().replace(' ', "-")
    );
    let where_ = if s.files.is_empty() {
        String::new()
    } else {
        format!(" in {}", s.files.join(", "))
    };
    let needs_files = matches!(
        m.kind,
        MarkerKind::Add | MarkerKind::Preserved | MarkerKind::Remove | MarkerKind::NoChanges
    );
    if needs_files && s.files.is_empty() {
        return GateResult::fail(
            name,
            Severity::Soft,
            format!(
                "{} in section `{}` cannot be checked: the section names no files (add `Files: path`)",
                m.kind.label(),
                s.name
            ),
        );
    }
    match m.kind {
        MarkerKind::Add => add_gate(s, m, name, &where_, world),
        MarkerKind::Preserved => preserved_gate(s, m, name, &where_, world),
        MarkerKind::NoChanges => no_changes_gate(s, name, task, world),
        MarkerKind::Modify => modify_gate(s, name, &where_, world),
        MarkerKind::Remove => remove_gate(s, m, name, &where_, world),
        MarkerKind::Fix => fix_gate(s, m, name, world),
    }
}

/// Item counts of the section's files at `task-N-pre` and now.
fn before_and_now(s: &Section, world: &dyn ScopeWorld) -> (usize, usize) {
    let before = total(&s.files, |f| world.before(f));
    let now = total(&s.files, |f| world.now(f));
    (before, now)
}

/// `[ADD]`: the count rose by exactly `k`, or (without a count) something new appeared.
fn add_gate(
    s: &Section,
    m: &Marker,
    name: String,
    where_: &str,
    world: &dyn ScopeWorld,
) -> GateResult {
    let (b, n) = before_and_now(s, world);
    match m.count {
        Some(k) => {
            let want = b + k as usize;
            if b == 0 && n == 0 && !changed(&s.files, world).is_empty() {
                GateResult::fail(
                    name,
                    Severity::Soft,
                    format!(
                        "ADD {k} in `{}`: {} changed but holds no list, array or repeated element to count; not counted",
                        s.name,
                        s.files.join(", ")
                    ),
                )
            } else if n == want {
                GateResult::pass(
                    name,
                    format!("ADD {k} in `{}`: {b} + {k} = {n} items{where_}", s.name),
                )
            } else if n <= b {
                GateResult::fail(
                    name,
                    Severity::Hard,
                    format!(
                        "ADD {k} in `{}`: expected {want} items ({b} + {k}){where_}, found {n}. Add new items next to the existing ones; do not convert or replace them.",
                        s.name
                    ),
                )
            } else {
                GateResult::fail(
                    name,
                    Severity::Soft,
                    format!(
                        "ADD {k} in `{}`: expected {want} items ({b} + {k}){where_}, found {n}",
                        s.name
                    ),
                )
            }
        }
        None if n > b || !changed(&s.files, world).is_empty() => {
            GateResult::pass(name, format!("ADD in `{}`: new content{where_}", s.name))
        }
        None => GateResult::fail(
            name,
            Severity::Soft,
            format!("ADD in `{}`: no new content detected{where_}", s.name),
        ),
    }
}

/// `PRESERVED`: no fewer items than before (or than the count the marker names).
fn preserved_gate(
    s: &Section,
    m: &Marker,
    name: String,
    where_: &str,
    world: &dyn ScopeWorld,
) -> GateResult {
    let (b, n) = before_and_now(s, world);
    let keep = b.max(m.count.unwrap_or(0) as usize);
    if n < keep {
        GateResult::fail(
            name,
            Severity::Hard,
            format!(
                "PRESERVED violation in `{}`: had {keep} items{where_}, now {n}. The plan says they must not be removed or converted.",
                s.name
            ),
        )
    } else {
        GateResult::pass(
            name,
            format!("PRESERVED in `{}`: {n} ≥ {keep} items", s.name),
        )
    }
}

/// `NO CHANGES`: none of the section's files changed.
fn no_changes_gate(s: &Section, name: String, task: u32, world: &dyn ScopeWorld) -> GateResult {
    let touched = changed(&s.files, world);
    if touched.is_empty() {
        GateResult::pass(name, format!("NO CHANGES in `{}`: untouched", s.name))
    } else {
        GateResult::fail(
            name,
            Severity::Soft,
            format!(
                "{} modified, but the plan marks `{}` as NO CHANGES for task-{task}",
                touched.join(", "),
                s.name
            ),
        )
    }
}

/// `[MODIFY]`: the section's files changed (a section without files passes).
fn modify_gate(s: &Section, name: String, where_: &str, world: &dyn ScopeWorld) -> GateResult {
    if s.files.is_empty() || !changed(&s.files, world).is_empty() {
        GateResult::pass(
            name,
            format!("MODIFY in `{}`: section present, content changed", s.name),
        )
    } else {
        GateResult::fail(
            name,
            Severity::Soft,
            format!("MODIFY in `{}`: its files are unchanged{where_}", s.name),
        )
    }
}

/// `[REMOVE]`: the count fell by at least `k`, or (without a count) something went.
fn remove_gate(
    s: &Section,
    m: &Marker,
    name: String,
    where_: &str,
    world: &dyn ScopeWorld,
) -> GateResult {
    let (b, n) = before_and_now(s, world);
    let gone = match m.count {
        Some(k) => n + (k as usize) <= b,
        None => n < b || !changed(&s.files, world).is_empty(),
    };
    if gone {
        GateResult::pass(name, format!("REMOVE in `{}`: {b} → {n} items", s.name))
    } else {
        GateResult::fail(
            name,
            Severity::Soft,
            format!(
                "REMOVE in `{}`: still present ({b} → {n} items{where_})",
                s.name
            ),
        )
    }
}

/// `[FIX]`: the named check passes; without one the validation command decides.
fn fix_gate(s: &Section, m: &Marker, name: String, world: &dyn ScopeWorld) -> GateResult {
    match &m.check {
        Some(cmd) if !world.check_passes(cmd) => GateResult::fail(
            name,
            Severity::Hard,
            format!("FIX in `{}`: its check `{cmd}` still fails", s.name),
        ),
        Some(cmd) => GateResult::pass(name, format!("FIX in `{}`: `{cmd}` passes", s.name)),
        None => GateResult::pass(
            name,
            format!(
                "FIX in `{}`: no check named; the validation command decides",
                s.name
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    use crate::gates::test_world::World;

    fn flavors(n: usize) -> String {
        let items: Vec<String> = (0..n).map(|i| format!("  {{ name: 'F{i}' }},")).collect();
        format!("export const flavors = [\n{}\n];\n", items.join("\n"))
    }

    const PLAN: &str = "## features\nFiles: src/flavors.ts\n<!-- TASK-3 [ADD]: 2 nighttime flavors -->\n<!-- EXISTING 8 flavors PRESERVED -->\n## store\nFiles: src/store.ts\n<!-- NO CHANGES for task-3 -->\n## toggle\n<!-- TASK-3 [FIX]: mood toggle, check: false -->\n";

    fn run(now_count: usize, store_changed: bool) -> Vec<GateResult> {
        let (plan, _) = Plan::parse(Path::new("plan.md"), PLAN);
        let mut before = HashMap::new();
        before.insert("src/flavors.ts", flavors(8));
        before.insert("src/store.ts", "store".to_string());
        let mut now = before.clone();
        now.insert("src/flavors.ts", flavors(now_count));
        if store_changed {
            now.insert("src/store.ts", "store v2".to_string());
        }
        scope_gates(&plan, 3, &World { before, now })
    }

    #[test]
    fn vibrant_energy_add_two_keep_eight() {
        let converted = run(8, false);
        assert!(converted[0].blocks());
        assert!(
            converted[0]
                .message
                .contains("expected 10 items (8 + 2) in src/flavors.ts, found 8"),
            "{}",
            converted[0].message
        );
        let added = run(10, false);
        assert!(added[0].passed && added[1].passed);
        let dropped = run(6, false);
        assert!(dropped[1].blocks() && dropped[1].message.contains("had 8 items"));
        let many = run(12, false);
        assert!(
            !many[0].passed && !many[0].blocks(),
            "a different rise only warns"
        );
        let touched = run(10, true);
        assert!(
            !touched[2].passed && !touched[2].blocks(),
            "NO CHANGES only warns"
        );
        assert!(touched[3].blocks(), "FIX with a failing check blocks");
    }
}
