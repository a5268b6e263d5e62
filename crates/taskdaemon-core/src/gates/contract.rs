//! The task's requirements as the harness's own contract (issue 12): every `[ADD] N`,
//! `PRESERVE` and `[REMOVE]` requirement of the parsed task becomes a check at completion
//! against `task-N-pre`, whether or not the agent writes plan markers. Each requirement is
//! mapped to files by the task parser when the task starts; a requirement that maps to no
//! file takes the files of the plan section holding its `TASK-N` marker, and when there is
//! none it can never be checked: a hard failure with its reason, never a silent pass.
//!
//! The contract is written to `.ralph/requirements.json` by `begin_task` and listed in
//! `task.md` under `## Checks at completion`, so the agent knows from iteration 1.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::count::{Measure, Unit, count_items, measure};
use super::scope::{GateResult, ScopeWorld, Severity};
use crate::lifecycle::parser::{Marker, ParsedTask, TaskKind, files_for};
use crate::lifecycle::plan::{MarkerKind, Plan};

/// What the harness checks for one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "kebab-case")]
pub enum Check {
    /// Exactly `count` more items than at `task-N-pre`.
    Add { count: u32 },
    /// No fewer items than at `task-N-pre`, and none of the existing lines changed.
    Preserve,
    /// Fewer items (by `count` when given), or the files changed.
    Remove { count: Option<u32> },
}

impl Check {
    fn label(self) -> &'static str {
        match self {
            Check::Add { .. } => "ADD",
            Check::Preserve => "PRESERVE",
            Check::Remove { .. } => "REMOVE",
        }
    }
    /// The plan marker that can name files for this requirement.
    fn marker(self) -> MarkerKind {
        match self {
            Check::Add { .. } => MarkerKind::Add,
            Check::Preserve => MarkerKind::Preserved,
            Check::Remove { .. } => MarkerKind::Remove,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    #[serde(flatten)]
    pub check: Check,
    pub text: String,
    /// The files the parser mapped it to (empty: the plan must name them).
    pub files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    pub task: u32,
    pub requirements: Vec<Requirement>,
}

/// Preserve lines that name no collection of their own.
fn generic_preserve(text: &str) -> bool {
    let t = text.to_lowercase();
    t.starts_with("everything the requirements")
        || t.starts_with("nothing named")
        || t.starts_with("everything not named")
}

impl Contract {
    /// The contract of task `task`: `files` are the repository's files. A fresh task (a
    /// new build) has none: there is nothing existing to count against.
    pub fn of(task: u32, parsed: &ParsedTask, files: &[String]) -> Contract {
        let mut reqs: Vec<Requirement> = Vec::new();
        if parsed.kind == TaskKind::Fresh {
            return Contract {
                task,
                requirements: reqs,
            };
        }
        for r in &parsed.requirements {
            let mapped = files_for(&r.text, files);
            match (r.marker, r.count) {
                (Marker::Add, Some(count)) => reqs.push(Requirement {
                    check: Check::Add { count },
                    text: r.text.clone(),
                    files: mapped.clone(),
                }),
                (Marker::Remove, count) => reqs.push(Requirement {
                    check: Check::Remove { count },
                    text: r.text.clone(),
                    files: mapped.clone(),
                }),
                _ => {}
            }
            if r.marker == Marker::Add && r.keep_existing {
                reqs.push(Requirement {
                    check: Check::Preserve,
                    text: format!("the existing items the ADD extends ({})", r.text),
                    files: mapped,
                });
            }
        }
        for p in parsed.preserve.iter().filter(|p| !generic_preserve(p)) {
            let mapped = files_for(p, files);
            let covered = reqs
                .iter()
                .any(|r| r.check == Check::Preserve && !r.files.is_empty() && r.files == mapped);
            // "All existing drinks unchanged" of an ADD that found no file: that ADD's line.
            let of_an_add = mapped.is_empty()
                && p.to_lowercase().contains("existing")
                && reqs.iter().any(|r| r.check == Check::Preserve);
            if !covered && !of_an_add {
                reqs.push(Requirement {
                    check: Check::Preserve,
                    text: p.clone(),
                    files: mapped,
                });
            }
        }
        Contract {
            task,
            requirements: reqs,
        }
    }

    /// `requirements.json` in a `.ralph/` directory.
    pub fn path(ralph: &Path) -> PathBuf {
        ralph.join("requirements.json")
    }

    /// The contract in a `.ralph/` directory, when it is task `task`'s.
    pub fn load(ralph: &Path, task: u32) -> std::io::Result<Option<Contract>> {
        let Some(text) = crate::fsutil::read_optional(&Contract::path(ralph))? else {
            return Ok(None);
        };
        Ok(serde_json::from_str::<Contract>(&text)
            .ok()
            .filter(|c| c.task == task))
    }

    pub fn save(&self, ralph: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(&Contract::path(ralph), text.as_bytes())
    }

    /// `## Checks at completion` for task.md: what the harness will count, or that the plan
    /// must name the files. Empty when there is nothing to check.
    pub fn describe(&self, count_now: &dyn Fn(&str) -> usize) -> String {
        if self.requirements.is_empty() {
            return String::new();
        }
        let n = self.task;
        let mut s = String::from(
            "\n## Checks at completion\nThe harness checks these itself against task-",
        );
        s.push_str(&format!(
            "{n}-pre, whatever the plan says; a completion that fails one is rejected:\n"
        ));
        for r in &self.requirements {
            if r.files.is_empty() {
                s.push_str(&format!(
                    "- {} \"{}\": matches no file of the repository. Name its files in the plan: put its `TASK-{n}` marker in a section with `Files: path`{}. Until then this task cannot complete.\n",
                    r.check.label(),
                    r.text,
                    if r.check == Check::Preserve {
                        " and `<!-- EXISTING n items PRESERVED -->`"
                    } else {
                        ""
                    }
                ));
                continue;
            }
            let now: usize = r.files.iter().map(|f| count_now(f)).sum();
            let files = r.files.join(", ");
            let what = match r.check {
                Check::Add { count } => format!(
                    "{files}: {now} items now, exactly {} when done (add {count}; convert or replace none)",
                    now + count as usize
                ),
                Check::Preserve => format!(
                    "{files}: all {now} existing items stay, unchanged (no fewer, none rewritten)"
                ),
                Check::Remove { count: Some(k) } => {
                    format!(
                        "{files}: {now} items now, at most {} when done",
                        now.saturating_sub(k as usize)
                    )
                }
                Check::Remove { count: None } => format!("{files}: the item is removed"),
            };
            s.push_str(&format!("- {} \"{}\": {what}\n", r.check.label(), r.text));
        }
        s
    }
}

/// The files a requirement is checked in: its mapped files (the harness's own, whatever
/// the plan says), else those of the plan sections holding its marker for this task
/// (PRESERVED holds for every task).
fn files_of(r: &Requirement, task: u32, plan: Option<&Plan>) -> Vec<String> {
    if !r.files.is_empty() {
        return r.files.clone();
    }
    plan_files(r, task, plan)
}

/// The files of the plan sections holding the requirement's marker for this task.
fn plan_files(r: &Requirement, task: u32, plan: Option<&Plan>) -> Vec<String> {
    let mut out = BTreeSet::new();
    if let Some(plan) = plan {
        for (s, m) in plan.marked_for(task) {
            if m.kind == r.check.marker() {
                out.extend(s.files.iter().cloned());
            }
        }
    }
    out.into_iter().collect()
}

fn total(files: &[String], read: impl Fn(&str) -> Option<String>) -> usize {
    files
        .iter()
        .map(|f| read(f).map(|t| count_items(f, &t)).unwrap_or(0))
        .sum()
}

/// The items of a requirement's files on one side (at `task-N-pre`, or now), or why they
/// cannot be counted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Counted {
    /// `unit` is `None` when no file held a countable collection (or none exists).
    Items { count: usize, unit: Option<Unit> },
    /// The agent can make it countable: what is wrong.
    Fix(String),
    /// Only a person can resolve it: the harness cannot read a file.
    Ask(String),
}

fn counted(files: &[String], task: u32, before: bool, world: &dyn ScopeWorld) -> Counted {
    let (mut count, mut unit) = (0, None);
    for f in files {
        let bytes = if before {
            world.before_bytes(f)
        } else {
            world.now_bytes(f)
        };
        let Some(bytes) = bytes else {
            continue;
        };
        match measure(f, &bytes) {
            Measure::Items { count: n, unit: u } => {
                count += n;
                unit = unit.or(Some(u));
            }
            Measure::NoList => {}
            Measure::Binary if before => {
                return Counted::Ask(format!(
                    "{f} is not a text file at task-{task}-pre: the harness cannot count items in it"
                ));
            }
            Measure::Binary => {
                return Counted::Fix(format!(
                    "{f} is not a text file now, though it was one at task-{task}-pre: the harness counts items in text; restore it as text"
                ));
            }
            Measure::Unparsable(why) if before => {
                return Counted::Ask(format!(
                    "{f} did not parse at task-{task}-pre ({why}), so the items it held then cannot be counted"
                ));
            }
            Measure::Unparsable(why) => {
                return Counted::Fix(format!(
                    "{f} does not parse now ({why}): the harness counts its items by parsing it; fix its syntax"
                ));
            }
        }
    }
    Counted::Items { count, unit }
}

/// Both sides counted, or the result that says why they cannot be.
/// Why a requirement's files could not be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uncountable {
    /// Nothing countable in them: another file may hold the list.
    NoList,
    /// A file the agent broke, or one the harness cannot read.
    Other,
}

fn count_both(
    files: &[String],
    task: u32,
    label: &str,
    world: &dyn ScopeWorld,
    fail: &dyn Fn(Severity, String) -> GateResult,
) -> Result<(usize, usize, Unit), (GateResult, Uncountable)> {
    let sides = (
        counted(files, task, true, world),
        counted(files, task, false, world),
    );
    let cannot = |why: &str, severity| {
        fail(
            severity,
            format!("task requirement {label} cannot be checked: {why}."),
        )
    };
    match sides {
        (Counted::Ask(why), _) | (_, Counted::Ask(why)) => {
            Err((cannot(&why, Severity::Ask), Uncountable::Other))
        }
        (_, Counted::Fix(why)) | (Counted::Fix(why), _) => {
            Err((cannot(&why, Severity::Hard), Uncountable::Other))
        }
        (Counted::Items { count: b, unit: ub }, Counted::Items { count: n, unit: un }) => {
            match un.or(ub) {
                Some(unit) => Ok((b, n, unit)),
                None => Err((
                    cannot(
                        &format!(
                            "{} hold(s) no list, table, array, map or enum the harness can count. Put the items into the file that holds the list; if that is another file, name it in the plan: a section with `Files: path` holding the `TASK-{task}` marker",
                            files.join(", ")
                        ),
                        Severity::Hard,
                    ),
                    Uncountable::NoList,
                )),
            }
        }
    }
}

/// A line as an item: trimmed, without a trailing `,`/`;`; lines of brackets alone are
/// not items.
fn item_line(l: &str) -> Option<String> {
    let t = l.trim().trim_end_matches([',', ';']).trim();
    t.chars().any(char::is_alphanumeric).then(|| t.to_string())
}

/// Lines of the files at `task-N-pre` that are gone now (first few).
fn lost_lines(files: &[String], world: &dyn ScopeWorld) -> Vec<String> {
    let mut lost = Vec::new();
    for f in files {
        let Some(before) = world.before(f) else {
            continue;
        };
        let now: BTreeSet<String> = world
            .now(f)
            .unwrap_or_default()
            .lines()
            .filter_map(item_line)
            .collect();
        for l in before.lines().filter_map(item_line) {
            if !now.contains(&l) && lost.len() < 4 {
                lost.push(format!("{f}: `{l}`"));
            }
        }
    }
    lost
}

/// The contract's checks at completion, one result per requirement.
pub fn check_contract(
    c: &Contract,
    plan: Option<&Plan>,
    world: &dyn ScopeWorld,
) -> Vec<GateResult> {
    c.requirements
        .iter()
        .map(|r| check_one(r, c.task, plan, world))
        .collect()
}

fn check_one(
    r: &Requirement,
    task: u32,
    plan: Option<&Plan>,
    world: &dyn ScopeWorld,
) -> GateResult {
    let gate = format!("task:{}", r.check.label().to_lowercase());
    let label = format!("[{}] {}", r.check.label(), r.text);
    let result = |severity: Severity, passed: bool, message: String| GateResult {
        gate: gate.clone(),
        severity,
        passed,
        message,
    };
    let fail = |message: String| result(Severity::Hard, false, message);
    let files = files_of(r, task, plan);
    if files.is_empty() {
        return fail(format!(
            "task requirement {label} cannot be checked: it matches no file of the repository and no plan section holding a TASK-{task} {} marker names files. Put the marker in the section that lists the files it changes (`Files: path`).",
            r.check.marker().label()
        ));
    }
    let where_ = files.join(", ");
    match r.check {
        Check::Add { .. } | Check::Remove { count: Some(_) } => {
            let cannot = |severity, message| result(severity, false, message);
            let mut used = files.clone();
            let mut counts = count_both(&used, task, &label, world, &cannot);
            // The mapped files hold nothing countable: the plan may name the file that does.
            let planned = plan_files(r, task, plan);
            if matches!(counts, Err((_, Uncountable::NoList)))
                && !planned.is_empty()
                && planned != used
            {
                used = planned;
                counts = count_both(&used, task, &label, world, &cannot);
            }
            match counts {
                Ok((b, n, unit)) => {
                    let (passed, message) =
                        counted_check(r.check, &label, &used.join(", "), (b, n), unit);
                    result(Severity::Hard, passed, message)
                }
                Err((cannot, _)) => cannot,
            }
        }
        Check::Preserve => preserve(r, task, &files, world, &where_, &gate),
        Check::Remove { count: None } => {
            let (b, n) = (
                total(&files, |f| world.before(f)),
                total(&files, |f| world.now(f)),
            );
            let changed = files.iter().any(|f| world.before(f) != world.now(f));
            if n < b || changed {
                result(
                    Severity::Hard,
                    true,
                    format!("task requirement {label}: {b} → {n} items in {where_}"),
                )
            } else {
                fail(format!(
                    "task requirement {label}: still present in {where_} ({b} → {n} items)"
                ))
            }
        }
    }
}

/// An exact ADD or a counted REMOVE: whether it holds, and what to say.
fn counted_check(
    check: Check,
    label: &str,
    where_: &str,
    (b, n): (usize, usize),
    unit: Unit,
) -> (bool, String) {
    let unit = unit.plural();
    match check {
        Check::Add { count } => {
            let want = b + count as usize;
            if n == want {
                (
                    true,
                    format!("task requirement {label}: {b} + {count} = {n} {unit} in {where_}"),
                )
            } else {
                (
                    false,
                    format!(
                        "task requirement {label}: expected {want} {unit}, found {n} in {where_} ({b} at the start + {count}). Add exactly {count} new items next to the existing ones; do not convert or replace them."
                    ),
                )
            }
        }
        Check::Remove { count: Some(k) } => {
            let at_most = b.saturating_sub(k as usize);
            (
                n <= at_most,
                format!(
                    "task requirement {label}: {b} → {n} {unit} in {where_} (at most {at_most} when done)"
                ),
            )
        }
        _ => (
            false,
            format!("task requirement {label}: not a counted requirement"),
        ),
    }
}

/// PRESERVE: no fewer items, and none of the existing lines changed.
fn preserve(
    r: &Requirement,
    task: u32,
    files: &[String],
    world: &dyn ScopeWorld,
    where_: &str,
    gate: &str,
) -> GateResult {
    let (b, n) = (
        total(files, |f| world.before(f)),
        total(files, |f| world.now(f)),
    );
    let result = |passed: bool, message: String| GateResult {
        gate: gate.to_string(),
        severity: Severity::Hard,
        passed,
        message,
    };
    let is_binary =
        |b: Option<Vec<u8>>, f: &str| b.is_some_and(|b| measure(f, &b) == Measure::Binary);
    for f in files {
        let (then, now) = (
            is_binary(world.before_bytes(f), f),
            is_binary(world.now_bytes(f), f),
        );
        if then || now {
            let (severity, why) = if then {
                (
                    Severity::Ask,
                    format!(
                        "{f} is not a text file: the harness cannot tell whether its items were kept"
                    ),
                )
            } else {
                (
                    Severity::Hard,
                    format!(
                        "{f} is not a text file now, though it was one at task-{task}-pre: restore it as text"
                    ),
                )
            };
            return GateResult {
                severity,
                ..result(
                    false,
                    format!(
                        "task requirement PRESERVE {} cannot be checked: {why}.",
                        r.text
                    ),
                )
            };
        }
    }
    if n < b {
        return result(
            false,
            format!(
                "task requirement PRESERVE {}: had {b} items in {where_}, now {n}; the existing ones must stay.",
                r.text
            ),
        );
    }
    let lost = lost_lines(files, world);
    if lost.is_empty() {
        result(
            true,
            format!(
                "task requirement PRESERVE {}: all {b} items kept in {where_}",
                r.text
            ),
        )
    } else {
        result(
            false,
            format!(
                "task requirement PRESERVE {}: existing items were changed or removed: {}. Restore them as they were at task-{task}-pre; add new items instead.",
                r.text,
                lost.join("; ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::lifecycle::parser::Requirement as Req;

    use crate::gates::test_world::World;

    fn list(names: &[&str]) -> String {
        let items: Vec<String> = names.iter().map(|n| format!("  \"{n}\",")).collect();
        format!("export const flavors = [\n{}\n];\n", items.join("\n"))
    }

    const EIGHT: &[&str] = &["a1", "b2", "c3", "d4", "e5", "f6", "g7", "h8"];

    fn world(now: &[&str]) -> World {
        World {
            before: HashMap::from([("src/flavors.ts", list(EIGHT))]),
            now: HashMap::from([("src/flavors.ts", list(now))]),
        }
    }

    fn parsed(reqs: Vec<Req>, preserve: Vec<&str>) -> ParsedTask {
        ParsedTask {
            kind: TaskKind::Mutation,
            title: "t".into(),
            requirements: reqs,
            preserve: preserve.into_iter().map(String::from).collect(),
            affected_files: Vec::new(),
            question: None,
            ambiguities: Vec::new(),
        }
    }

    fn req(marker: Marker, text: &str, count: Option<u32>, keep: bool) -> Req {
        Req {
            marker,
            text: text.into(),
            count,
            keep_existing: keep,
        }
    }

    fn files() -> Vec<String> {
        vec!["src/flavors.ts".into(), "src/store.ts".into()]
    }

    fn blocks(c: &Contract, w: &World, plan: Option<&Plan>) -> Vec<String> {
        check_contract(c, plan, w)
            .into_iter()
            .filter(GateResult::blocks)
            .map(|r| r.message)
            .collect()
    }

    #[test]
    fn add_n_counts_exactly_and_keeps_the_existing_items() {
        let c = Contract::of(
            1,
            &parsed(
                vec![req(Marker::Add, "Add 2 more flavors", Some(2), true)],
                vec![],
            ),
            &files(),
        );
        assert_eq!(c.requirements.len(), 2, "{c:?}");
        assert_eq!(c.requirements[0].files, ["src/flavors.ts"]);
        let mut ten = EIGHT.to_vec();
        ten.extend(["n1", "n2"]);
        assert!(blocks(&c, &world(&ten), None).is_empty());
        let mut eleven = ten.clone();
        eleven.push("n3");
        let b = blocks(&c, &world(&eleven), None);
        assert!(
            b[0].contains("expected 10 elements, found 11 in src/flavors.ts (8 at the start + 2)"),
            "{b:?}"
        );
        let mut converted = EIGHT.to_vec();
        converted[4..].copy_from_slice(&["n1", "n2", "n3", "n4"]);
        let b = blocks(&c, &world(&converted), None);
        assert_eq!(b.len(), 2, "{b:?}");
        assert!(b[0].contains("found 8"), "{b:?}");
        assert!(
            b[1].contains("existing items were changed or removed: src/flavors.ts: `\"e5\"`"),
            "{b:?}"
        );
    }

    #[test]
    fn preserve_fails_when_the_collection_shrinks_or_an_item_changes() {
        let c = Contract::of(
            1,
            &parsed(
                vec![req(Marker::Modify, "Polish the store", None, false)],
                vec![
                    "Keep the existing flavors",
                    "Everything the requirements above do not name",
                ],
            ),
            &files(),
        );
        assert_eq!(c.requirements.len(), 1, "{c:?}");
        assert_eq!(c.requirements[0].check, Check::Preserve);
        assert!(blocks(&c, &world(EIGHT), None).is_empty());
        let b = blocks(&c, &world(&EIGHT[..7]), None);
        assert!(
            b[0].contains("had 8 items in src/flavors.ts, now 7"),
            "{b:?}"
        );
        let mut renamed = EIGHT.to_vec();
        renamed[0] = "zz";
        let b = blocks(&c, &world(&renamed), None);
        assert!(b[0].contains("`\"a1\"`"), "{b:?}");
    }

    #[test]
    fn remove_needs_fewer_items() {
        let c = Contract::of(
            1,
            &parsed(
                vec![req(Marker::Remove, "Remove 2 flavors", Some(2), false)],
                vec![],
            ),
            &files(),
        );
        assert!(!blocks(&c, &world(EIGHT), None).is_empty());
        assert!(blocks(&c, &world(&EIGHT[..6]), None).is_empty());
        assert!(!blocks(&c, &world(&EIGHT[..7]), None).is_empty());
    }

    #[test]
    fn an_unmappable_requirement_fails_until_the_plan_names_its_files() {
        let c = Contract::of(
            1,
            &parsed(
                vec![req(Marker::Add, "Add 2 widgets", Some(2), false)],
                vec![],
            ),
            &files(),
        );
        assert!(c.requirements[0].files.is_empty());
        assert!(
            c.describe(&|_| 0)
                .contains("matches no file of the repository")
        );
        let mut ten = EIGHT.to_vec();
        ten.extend(["n1", "n2"]);
        let b = blocks(&c, &world(&ten), None);
        assert!(b[0].contains("cannot be checked"), "{b:?}");
        let text = "## widgets\nFiles: src/flavors.ts\n<!-- TASK-1 [ADD]: 2 widgets -->\n";
        let (plan, _) = Plan::parse(Path::new("plan.md"), text);
        assert!(blocks(&c, &world(&ten), Some(&plan)).is_empty());
        // A fresh task has nothing existing to count against.
        let mut fresh = parsed(
            vec![req(Marker::Add, "Add 2 widgets", Some(2), false)],
            vec![],
        );
        fresh.kind = TaskKind::Fresh;
        assert!(Contract::of(1, &fresh, &files()).requirements.is_empty());
    }
}
