//! A completion claim against the baseline: what of the evidence changed since the run
//! started. Each finding says what changed and what to do, and carries the diff for the
//! next prompt when there is one. Files the task may change are left out; a test that
//! moved to another file (same name) still counts.

use std::collections::HashMap;
use std::path::Path;

use super::baseline::{Baseline, TestFile, test_file};
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
    out.extend(tally(b, now, tests.removed_allowed));
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
        if now.as_deref().map(|t| fnv1a_hex(t.as_bytes())).as_ref() == Some(&s.hash) {
            continue;
        }
        let what = s.entry.describe(&s.path);
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

/// A unified diff of one file, bounded.
fn diff(path: &str, before: &str, now: &str) -> String {
    let d = similar::TextDiff::from_lines(before, now)
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
}

/// Test files deleted or emptied, tests gone, skip markers added, assertions removed.
fn tests(b: &Baseline, top: &Path) -> Tests {
    let mut findings = Vec::new();
    let mut removed_allowed = 0;
    // Per file: its scan now (None: gone), for the files that changed.
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
    if changed.is_empty() {
        return Tests {
            findings,
            removed_allowed,
        };
    }
    let mut moved = Moved::of(b, top);
    for (before, now) in &changed {
        findings.extend(file_findings(before, now.as_ref(), &mut moved));
    }
    Tests {
        findings,
        removed_allowed,
    }
}

/// The test files now that were not test files at the start: where a test may have moved.
struct Moved {
    names: HashMap<String, usize>,
    hashes: Vec<String>,
    asserted: HashMap<u64, usize>,
}

impl Moved {
    fn of(b: &Baseline, top: &Path) -> Moved {
        let known: std::collections::HashSet<&str> =
            b.tests.iter().map(|t| t.path.as_str()).collect();
        let listed = crate::git::Git::new(top)
            .call(&["ls-files", "-z", "-c", "-o", "--exclude-standard"])
            .bytes()
            .unwrap_or_default();
        let mut m = Moved {
            names: HashMap::new(),
            hashes: Vec::new(),
            asserted: HashMap::new(),
        };
        for p in listed.split(|c| *c == 0).filter(|p| !p.is_empty()) {
            let p = String::from_utf8_lossy(p);
            if known.contains(p.as_ref())
                || p.starts_with(".ralph/")
                || p.starts_with(".taskdaemon/")
            {
                continue;
            }
            let by_path = testfiles::is_test_file(&p, None);
            if !by_path && !p.ends_with(".rs") {
                continue;
            }
            if let Some(t) = test_file(top, &p, by_path) {
                for n in t.scan.tests {
                    *m.names.entry(n).or_default() += 1;
                }
                for a in t.asserted {
                    *m.asserted.entry(a).or_default() += 1;
                }
                m.hashes.push(t.hash);
            }
        }
        m
    }

    /// Take `name` from the moved tests; whether it was there.
    fn take(&mut self, name: &str) -> bool {
        take(&mut self.names, name)
    }

    /// How many of a deleted file's assertion lines are in no other test file now.
    fn missing_assertions(&mut self, asserted: &[u64]) -> usize {
        asserted
            .iter()
            .filter(|a| !take(&mut self.asserted, *a))
            .count()
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

impl Moved {}

/// The findings of one changed test file.
fn file_findings(before: &TestFile, now: Option<&TestFile>, moved: &mut Moved) -> Vec<Finding> {
    let path = &before.path;
    let finding = |message: String| Finding {
        path: path.clone(),
        message,
        diff: None,
    };
    let mut out = Vec::new();
    let mut left: HashMap<&str, usize> = HashMap::new();
    for n in now.map(|n| n.scan.tests.as_slice()).unwrap_or_default() {
        *left.entry(n.as_str()).or_default() += 1;
    }
    let mut gone = Vec::new();
    for n in &before.scan.tests {
        match left.get_mut(n.as_str()) {
            Some(k) if *k > 0 => *k -= 1,
            _ if moved.take(n) => {}
            _ => gone.push(n.as_str()),
        }
    }
    let empty = now.is_some_and(|n| n.scan == testfiles::TestScan::default())
        && !before.scan.tests.is_empty();
    let whole_moved = now.is_none() && moved.hashes.contains(&before.hash);
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
    let Some(now) = now else {
        // Its tests went elsewhere: their assertions must have gone with them.
        let missing = moved.missing_assertions(&before.asserted);
        if gone.is_empty() && missing > 0 {
            out.push(finding(format!(
                "{path} was deleted since the run started and its tests reappear elsewhere without {missing} of its {} assertion(s): a moved test keeps its assertions; restore them",
                before.asserted.len()
            )));
        }
        return out;
    };
    out.extend(skips(before, now).map(finding));
    out.extend(trivial(before, now).map(finding));
    if gone.is_empty() && now.scan.assertions < before.scan.assertions {
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
fn tally(b: &Baseline, now: Option<Tally>, removed_allowed: u64) -> Option<Finding> {
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
    let want_ran = start.ran.saturating_sub(removed_allowed);
    let want_passed = start.passed.saturating_sub(removed_allowed);
    if now.ran < want_ran {
        let none = if now.ran == 0 { " (none ran)" } else { "" };
        return Some(finding(format!(
            "{} tests ran at the start, {} now{none}: `{cmd}` runs fewer tests than it did; restore the tests, or explain in DECIDE",
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
