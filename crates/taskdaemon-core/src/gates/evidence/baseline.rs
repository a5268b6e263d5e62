//! The evidence as it was when a run (or a task) started: the validation's own sources
//! (`commands.rs`), every test file with its tests, skip markers and assertions
//! (`testfiles.rs`), and the tests the validation ran then (`runners.rs`). Kept in memory
//! by the engine and, for a resume, in the user's state directory
//! (`$XDG_STATE_HOME/taskdaemon/evidence/<repository key>/<run-id>.json`): not in `.ralph/`
//! nor in the git directory, which an agent writes (a sandboxed one cannot write there).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::assertions;
use super::bodies::{self, Body};
use super::commands::{self, Entry, Source};
use super::runners::Tally;
use super::testfiles::{self, TestScan};
use crate::fingerprint::fnv1a_hex;
use crate::git::GitError;

const VERSION: u32 = 1;
/// The hash of a source that was not there at the start (a configuration file a runner
/// would read).
pub const ABSENT: &str = "absent";
/// A source's text is kept for the diff in the next prompt up to this size (its hash always).
const MAX_TEXT: usize = 64 * 1024;
/// Test files larger than this are hashed, not scanned (generated data, not tests).
const MAX_TEST_FILE: u64 = 4 * 1024 * 1024;
/// At most this many test files are kept.
const MAX_TEST_FILES: usize = 50_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Baseline {
    pub version: u32,
    /// The validation command the sources were found from.
    pub validate: Option<String>,
    /// What the validation goes through (paths relative to the run's directory).
    pub sources: Vec<SourceText>,
    /// The test files (paths relative to the top of the work tree).
    pub tests: Vec<TestFile>,
    /// What the validation's output said at the start (`None`: no runner summary, or not run).
    pub tally: Option<Tally>,
    /// Test files this run's task may change (it names them).
    pub allowed: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SourceText {
    pub path: String,
    pub entry: Entry,
    pub hash: String,
    /// The text, when small enough to show a diff of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl SourceText {
    pub fn source(&self) -> Source {
        Source {
            path: self.path.clone(),
            entry: self.entry.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TestFile {
    pub path: String,
    pub hash: String,
    pub scan: TestScan,
    /// Its assertions that can never fail (`assert True`).
    #[serde(default)]
    pub trivial: Vec<testfiles::Skip>,
    /// Each test's lines (`bodies.rs`), in the order of `scan.tests`.
    #[serde(default)]
    pub bodies: Vec<Body>,
}

/// What a baseline is taken of.
pub struct Capture<'a> {
    /// The top of the work tree.
    pub top: &'a Path,
    /// Where the validation runs.
    pub workdir: &'a Path,
    pub validate: Option<&'a str>,
    /// The task's text: a sentence that asks to change named tests allows that.
    pub task: &'a str,
    /// Files the work source allows to change besides (a tasks.md task's **Files**).
    pub also_allowed: &'a [String],
}

impl Baseline {
    /// The evidence now. The test files are the index's (no untracked file counts).
    pub fn capture(c: &Capture<'_>) -> Result<Baseline, GitError> {
        let sources = c
            .validate
            .map(|v| commands::sources(v, c.workdir))
            .unwrap_or_default()
            .into_iter()
            .map(|s| match commands::text_of(&s, c.workdir) {
                Some(text) => SourceText {
                    hash: fnv1a_hex(text.as_bytes()),
                    text: (text.len() <= MAX_TEXT).then_some(text),
                    path: s.path,
                    entry: s.entry,
                },
                None => SourceText {
                    hash: ABSENT.into(),
                    text: None,
                    path: s.path,
                    entry: s.entry,
                },
            })
            .collect();
        let tests = committed_test_files(c.top, |_| true)?;
        let names: Vec<String> = tests.iter().map(|t| t.path.clone()).collect();
        let mut allowed = super::allowed::allowed_changes(c.task, &names);
        allowed.extend(c.also_allowed.iter().filter(|f| names.contains(f)).cloned());
        allowed.sort();
        allowed.dedup();
        Ok(Baseline {
            version: VERSION,
            validate: c.validate.map(String::from),
            sources,
            tests,
            tally: None,
            allowed,
        })
    }

    /// Where a run's baseline is kept.
    pub fn path(git_dir: &Path, run_id: &str) -> PathBuf {
        evidence_dir(git_dir).join(format!("{run_id}.json"))
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic_volatile(path, &text)
    }

    /// A saved baseline; `None` when there is none or it is not one this version reads.
    pub fn load(path: &Path) -> std::io::Result<Option<Baseline>> {
        let Some(text) = crate::fsutil::read_optional(path)? else {
            return Ok(None);
        };
        Ok(serde_json::from_str::<Baseline>(&text)
            .ok()
            .filter(|b| b.version == VERSION))
    }

    /// Whether there is anything to protect: the validation's own files, or test files.
    pub fn has_evidence(&self) -> bool {
        self.present().next().is_some() || !self.tests.is_empty()
    }

    /// How the sources that were there at the start are named in messages.
    fn source_names(&self) -> Vec<String> {
        self.present().map(|s| s.entry.describe(&s.path)).collect()
    }

    /// The sources that were there at the start.
    pub fn present(&self) -> impl Iterator<Item = &SourceText> {
        self.sources.iter().filter(|s| s.hash != ABSENT)
    }

    /// How many tests the test files define.
    pub fn test_count(&self) -> usize {
        self.tests.iter().map(|t| t.scan.tests.len()).sum()
    }

    /// One line for the run's start: what the harness will compare with.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let names = self.source_names();
        if !names.is_empty() {
            parts.push(format!("the validation's own files ({})", names.join(", ")));
        }
        if !self.tests.is_empty() {
            parts.push(format!(
                "{} test file(s) with {} test(s)",
                self.tests.len(),
                self.test_count()
            ));
        }
        if let Some(t) = &self.tally {
            parts.push(format!("{} test(s) ran, {} passed", t.ran, t.passed));
        }
        format!("evidence recorded: {}", parts.join("; "))
    }

    /// What the agent is told once in its prompt (empty when there is nothing to protect).
    pub fn rules(&self) -> String {
        if !self.has_evidence() && self.tally.is_none() {
            return String::new();
        }
        let mut s = String::from(
            "## Fixed evidence\nThe harness recorded the evidence this task is judged by before the work started, and compares every completion with it:",
        );
        if let Some(v) = &self.validate {
            s.push_str(&format!(" the validation `{v}`"));
            let names = self.source_names();
            if !names.is_empty() {
                s.push_str(&format!(" and what it runs ({})", names.join(", ")));
            }
            s.push(',');
        }
        if !self.tests.is_empty() {
            s.push_str(&format!(
                " the {} test file(s) and the {} test(s) they define,",
                self.tests.len(),
                self.test_count()
            ));
        }
        if let Some(t) = self.tally.filter(|t| t.ran > 0) {
            s.push_str(&format!(" the {} test(s) the validation ran,", t.ran));
        }
        if s.ends_with(',') {
            s.pop();
        }
        s.push_str(". Do not edit, delete, skip or weaken them: a completion that changes them is rejected. Add new tests freely. If a test itself is wrong, say so with DECIDE instead of changing it.");
        if !self.allowed.is_empty() {
            s.push_str(&format!(
                " This task names tests to change: {} may change.",
                self.allowed.join(", ")
            ));
        }
        s
    }
}

/// The part of a file that holds its tests: a Rust source outside `tests/` from its first
/// `#[cfg(test)]` on (its production code's `assert!`s are not a test's); the whole file
/// otherwise.
/// Returns the part and the number of lines above it.
fn test_region<'t>(path: &str, text: &'t str) -> (&'t str, u32) {
    if !path.ends_with(".rs") || path.split('/').any(|c| c == "tests") {
        return (text, 0);
    }
    match text.find("#[cfg(test)]") {
        Some(i) => (&text[i..], text[..i].matches('\n').count() as u32),
        None => (text, 0),
    }
}

/// The directory of the baselines of the work tree whose git directory is `git_dir`: in the
/// user's state directory, keyed by that path (the git directory itself without a home).
pub fn evidence_dir(git_dir: &Path) -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("state"))
        });
    match state {
        Some(s) => s
            .join("taskdaemon")
            .join("evidence")
            .join(fnv1a_hex(git_dir.as_os_str().as_encoded_bytes())),
        None => git_dir.join("taskdaemon").join("evidence"),
    }
}

/// The test files of the index of the work tree at `top` that `keep` takes (paths from
/// the top), scanned.
pub fn committed_test_files(
    top: &Path,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<TestFile>, GitError> {
    let listed = crate::git::snapshot::tracked_files_where(top, testfiles::may_be_test)?;
    let mut out = Vec::new();
    for path in &listed {
        if out.len() >= MAX_TEST_FILES || harness_file(path) || !keep(path) {
            continue;
        }
        let by_path = testfiles::is_test_file(path, None);
        if !by_path && !path.ends_with(".rs") {
            continue;
        }
        if let Some(t) = test_file(top, path, by_path) {
            out.push(t);
        }
    }
    Ok(out)
}

/// The harness's own files are never tests.
fn harness_file(path: &str) -> bool {
    path.starts_with(".ralph/") || path.starts_with(".taskdaemon/")
}

/// One file as a test file now (`None`: gone, unreadable, or not a test file).
pub fn test_file(top: &Path, path: &str, by_path: bool) -> Option<TestFile> {
    let full = top.join(path);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() > MAX_TEST_FILE {
        if !by_path {
            return None;
        }
        // Generated data, not tests: hashed, never scanned.
        let bytes = std::fs::read(&full).ok()?;
        return Some(TestFile {
            path: path.to_string(),
            hash: fnv1a_hex(&bytes),
            scan: TestScan::default(),
            trivial: Vec::new(),
            bodies: Vec::new(),
        });
    }
    let bytes = std::fs::read(&full).ok()?;
    let hash = fnv1a_hex(&bytes);
    let text = String::from_utf8_lossy(&bytes);
    if !by_path && !testfiles::is_test_file(path, Some(&text)) {
        return None;
    }
    let (region, above) = test_region(path, &text);
    let mut scan = testfiles::scan(path, region);
    for s in &mut scan.skips {
        s.line += above;
    }
    Some(TestFile {
        path: path.to_string(),
        hash,
        bodies: bodies::bodies(region, &scan.tests),
        scan,
        trivial: assertions::trivial(region)
            .into_iter()
            .map(|(line, marker)| testfiles::Skip {
                line: line + above,
                marker,
            })
            .collect(),
    })
}
