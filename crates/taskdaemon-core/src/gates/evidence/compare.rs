//! A completion claim against the baseline: what of the evidence changed since the run
//! started. Each finding says what changed and what to do, and carries the diff for the
//! next prompt when there is one. Files the task may change are left out; a test that
//! moved to another committed file (same name, its lines kept) still counts.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::baseline::{ABSENT, Baseline, TestFile, committed_test_files, test_file};
use super::bodies::{Body, keeps};
use super::commands;
use super::runners::Tally;
use super::testfiles;
use crate::fingerprint::fnv1a_hex;

/// One change of the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file it is about (or `validation` for the tests that ran).
    pub path: String,
    pub message: String,
    /// A diff of the file since the run started, for the next prompt.
    pub diff: Option<String>,
}

/// Bound of one diff in the prompt.
const MAX_DIFF: usize = 6 * 1024;

/// What of `b` changed, with the validation's tally now (`None`: no runner summary, or
/// the claim was not validated).
pub fn compare(b: &Baseline, top: &Path, workdir: &Path, now: Option<Tally>) -> Vec<Finding> {
    let mut out = sources(b, workdir);
    let tests = tests(b, top);
    out.extend(tests.findings);
    out.extend(tally(b, now, tests.removed_allowed, tests.added));
    out
}

fn sources(b: &Baseline, workdir: &Path) -> Vec<Finding> {
    let cmd = b.validate.as_deref().unwrap_or("");
    let mut out = Vec::new();
    for s in &b.sources {
        if b.allowed.contains(&s.path) {
            continue;
        }
        let now = commands::text_of(&s.source(), workdir);
        let now_hash = now.as_deref().map(|t| fnv1a_hex(t.as_bytes()));
        if now_hash.as_ref() == Some(&s.hash) || now_hash.is_none() && s.hash == ABSENT {
            continue;
        }
        let what = s.entry.describe(&s.path);
        if s.hash == ABSENT {
            out.push(Finding {
                path: s.path.clone(),
                message: format!(
                    "{what} was made since the run started: the validation `{cmd}` reads it, so it changes how the tests run; remove it, or explain in DECIDE why it is needed"
                ),
                diff: now.as_deref().map(|t| diff(&s.path, "", t)),
            });
            continue;
        }
        let how = match now.as_deref() {
            None => " and is gone".to_string(),
            Some(t) => short(t)
                .map(|l| format!(": the validation now runs `{l}`"))
                .unwrap_or_default(),
        };
        out.push(Finding {
            path: s.path.clone(),
            message: format!(
                "{what} changed since the run started{how}. The validation `{cmd}` goes through it, so the agent cannot change it: restore it, or explain in DECIDE why it must change"
            ),
            diff: s
                .text
                .as_deref()
                .map(|before| diff(&s.path, before, now.as_deref().unwrap_or(""))),
        });
    }
    out
}

/// A text of at most three short lines, as one line.
fn short(t: &str) -> Option<String> {
    let lines: Vec<&str> = t
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("#!"))
        .collect();
    let joined = lines.join("; ");
    (lines.len() <= 3 && joined.len() <= 120).then_some(joined)
}

/// A unified diff of one file, bounded (in size, and in time: a flood of lines is cut).
fn diff(path: &str, before: &str, now: &str) -> String {
    let now = crate::fsutil::bound_text(now, 4 * MAX_DIFF);
    let d = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(before, now.as_str())
        .unified_diff()
        .context_radius(2)
        .header(&format!("{path} (at the start)"), &format!("{path} (now)"))
        .to_string();
    crate::fsutil::bound_text(&d, MAX_DIFF)
}

struct Tests {
    findings: Vec<Finding>,
    /// Tests removed from the files the task may change (they lower the expected tally).
    removed_allowed: u64,
    /// Tests written since the start (they raise it).
    added: u64,
}

/// Test files deleted or emptied, tests gone or edited, skip markers and assertions that
/// can never fail added, assertions removed.
fn tests(b: &Baseline, top: &Path) -> Tests {
    let mut removed_allowed = 0;
    // The test files of the start that changed, as they are now (None: gone).
    let mut changed: Vec<(&TestFile, Option<TestFile>)> = Vec::new();
    for t in &b.tests {
        let now = test_file(top, &t.path, true);
        if now.as_ref().is_some_and(|n| n.hash == t.hash) {
            continue;
        }
        if b.allowed.contains(&t.path) {
            let left = now.as_ref().map(|n| n.scan.tests.len()).unwrap_or(0);
            removed_allowed += t.scan.tests.len().saturating_sub(left) as u64;
            continue;
        }
        changed.push((t, now));
    }
    let mut findings = Vec::new();
    let mut pool = Pool::default();
    if !changed.is_empty() || b.tally.is_some() {
        pool = Pool::of(b, top, &changed);
    }
    for (before, now) in &changed {
        findings.extend(file_findings(before, now.as_ref(), &mut pool));
    }
    Tests {
        findings,
        removed_allowed,
        added: pool.left(),
    }
}

/// The tests that are new since the start (in new test files, or beyond a file's own at
/// the start): where a test may have moved, and what adds to the tests that run.
#[derive(Default)]
struct Pool {
    tests: HashMap<String, Vec<Body>>,
    hashes: Vec<String>,
}

/// How a test of the start is found among the new ones.
enum Found {
    Kept,
    Changed,
    Missing,
}

impl Pool {
    fn of(b: &Baseline, top: &Path, changed: &[(&TestFile, Option<TestFile>)]) -> Pool {
        let known: HashSet<&str> = b.tests.iter().map(|t| t.path.as_str()).collect();
        let mut pool = Pool::default();
        // A destination is a committed file: what the agent did not commit is no test of
        // the project. An unreadable index gives none: every lost test stays lost.
        for t in committed_test_files(top, |p| !known.contains(p)).unwrap_or_default() {
            pool.add_all(t);
        }
        for (before, now) in changed {
            if let Some(now) = now {
                pool.add_extra(before, now);
            }
        }
        pool
    }

    fn add_all(&mut self, t: TestFile) {
        for (n, body) in t.scan.tests.into_iter().zip(t.bodies) {
            self.tests.entry(n).or_default().push(body);
        }
        self.hashes.push(t.hash);
    }

    /// The tests of a changed file beyond the ones it had at the start.
    fn add_extra(&mut self, before: &TestFile, now: &TestFile) {
        let mut had: HashMap<&str, usize> = HashMap::new();
        for n in &before.scan.tests {
            *had.entry(n.as_str()).or_default() += 1;
        }
        for (n, body) in now.scan.tests.iter().zip(&now.bodies) {
            if !take(&mut had, n.as_str()) {
                self.tests.entry(n.clone()).or_default().push(body.clone());
            }
        }
    }

    /// Find a test of the start named `name` among the new ones.
    fn take(&mut self, name: &str, before: &Body) -> Found {
        let Some(found) = self.tests.get_mut(name).filter(|v| !v.is_empty()) else {
            return Found::Missing;
        };
        if let Some(i) = found.iter().position(|now| keeps(before, now)) {
            found.remove(i);
            return Found::Kept;
        }
        found.remove(0);
        Found::Changed
    }

    /// The new tests no test of the start moved into.
    fn left(&self) -> u64 {
        self.tests.values().map(|v| v.len() as u64).sum()
    }
}

/// Take one of `key` from a multiset; whether there was one.
fn take<K, Q>(set: &mut HashMap<K, usize>, key: &Q) -> bool
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    match set.get_mut(key) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// The findings of one changed test file.
fn file_findings(before: &TestFile, now: Option<&TestFile>, pool: &mut Pool) -> Vec<Finding> {
    let path = &before.path;
    let finding = |message: String| Finding {
        path: path.clone(),
        message,
        diff: None,
    };
    let mut out = Vec::new();
    // The tests of the file now, by name: their bodies, in order.
    let mut here: HashMap<&str, Vec<&Body>> = HashMap::new();
    if let Some(n) = now {
        for (name, body) in n.scan.tests.iter().zip(&n.bodies) {
            here.entry(name.as_str()).or_default().push(body);
        }
    }
    let empty_body = Body::new();
    let (mut gone, mut edited) = (Vec::new(), Vec::new());
    for (i, name) in before.scan.tests.iter().enumerate() {
        let was = before.bodies.get(i).unwrap_or(&empty_body);
        match here.get_mut(name.as_str()).filter(|v| !v.is_empty()) {
            Some(v) => {
                if !keeps(was, v.remove(0)) {
                    edited.push(name.as_str());
                }
            }
            None => match pool.take(name, was) {
                Found::Kept => {}
                Found::Changed => edited.push(name.as_str()),
                Found::Missing => gone.push(name.as_str()),
            },
        }
    }
    let empty = now.is_some_and(|n| n.scan == testfiles::TestScan::default())
        && !before.scan.tests.is_empty();
    let whole_moved = now.is_none() && pool.hashes.contains(&before.hash);
    if now.is_none() && gone.is_empty() && !whole_moved && before.scan.tests.is_empty() {
        out.push(finding(format!(
            "{path} was deleted since the run started: a test file is evidence; restore it (`git checkout <start> -- {path}`), or explain in DECIDE why it must go"
        )));
    }
    if !gone.is_empty() {
        let total = before.scan.tests.len();
        let how = if now.is_none() {
            "was deleted".to_string()
        } else if empty {
            "was emptied".to_string()
        } else {
            format!("lost {} of its {total} test(s)", gone.len())
        };
        out.push(finding(format!(
            "{path} {how} since the run started ({}): a test the task did not ask to remove is evidence; restore it, or explain in DECIDE why it must go",
            list(&gone)
        )));
    }
    if !edited.is_empty() {
        out.push(finding(format!(
            "{path}: {} changed since the run started: an existing test is evidence the task did not ask to change; restore it and add new tests instead, or explain in DECIDE why it must change",
            list(&edited)
        )));
    }
    // A test that moved kept its lines (`Pool::take`), its assertions with them.
    let Some(now) = now else {
        return out;
    };
    out.extend(skips(before, now).map(finding));
    out.extend(trivial(before, now).map(finding));
    if gone.is_empty() && edited.is_empty() && now.scan.assertions < before.scan.assertions {
        out.push(finding(format!(
            "{path}: {} assertion(s) at the start, {} now: a weakened test proves less; restore the assertions",
            before.scan.assertions, now.scan.assertions
        )));
    }
    out
}

/// Skip, ignore and focus markers added to a file.
fn skips(before: &TestFile, now: &TestFile) -> Option<String> {
    let mut had: HashMap<&str, usize> = HashMap::new();
    for s in &before.scan.skips {
        *had.entry(s.marker.as_str()).or_default() += 1;
    }
    let mut added = Vec::new();
    for s in &now.scan.skips {
        match had.get_mut(s.marker.as_str()) {
            Some(k) if *k > 0 => *k -= 1,
            _ => added.push(format!("`{}` at line {}", s.marker, s.line)),
        }
    }
    (!added.is_empty()).then(|| {
        format!(
            "{}: {} added since the run started: a skipped or narrowed test proves nothing; remove the marker and make the test pass",
            now.path,
            added.join(", ")
        )
    })
}

/// Assertions that can never fail, added to a file.
fn trivial(before: &TestFile, now: &TestFile) -> Option<String> {
    let had: Vec<&str> = before.trivial.iter().map(|t| t.marker.as_str()).collect();
    let added: Vec<String> = now
        .trivial
        .iter()
        .filter(|t| !had.contains(&t.marker.as_str()))
        .map(|t| format!("`{}` at line {}", t.marker, t.line))
        .collect();
    (!added.is_empty()).then(|| {
        format!(
            "{}: {} added since the run started: an assertion that can never fail proves nothing; assert what the code must do",
            now.path,
            added.join(", ")
        )
    })
}

fn list(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
    if names.len() > 5 {
        format!("{}, and {} more", shown.join(", "), names.len() - 5)
    } else {
        shown.join(", ")
    }
}

/// The tests the validation ran now against the start.
fn tally(b: &Baseline, now: Option<Tally>, removed_allowed: u64, added: u64) -> Option<Finding> {
    let start = b.tally?;
    if start.ran == 0 {
        return None;
    }
    let cmd = b.validate.as_deref().unwrap_or("");
    let finding = |message: String| Finding {
        path: "validation".into(),
        message,
        diff: None,
    };
    let Some(now) = now else {
        return Some(finding(format!(
            "{} tests ran at the start, and now the output of `{cmd}` reports no tests at all: the validation must still run the tests",
            start.ran
        )));
    };
    let want_ran = start.ran.saturating_sub(removed_allowed) + added;
    let want_passed = start.passed.saturating_sub(removed_allowed);
    if now.ran < want_ran {
        let none = if now.ran == 0 { " (none ran)" } else { "" };
        let with_new = if added > 0 {
            format!(" though {added} test(s) were written since, so at least {want_ran} should run")
        } else {
            String::new()
        };
        return Some(finding(format!(
            "{} tests ran at the start, {} now{none}{with_new}: `{cmd}` runs fewer tests than it did; restore the tests, or explain in DECIDE",
            start.ran, now.ran
        )));
    }
    (now.passed < want_passed).then(|| {
        finding(format!(
            "{} tests passed at the start, {} now: `{cmd}` passes fewer tests than it did",
            start.passed, now.passed
        ))
    })
}
