//! Evidence the agent cannot rewrite (issue 36). At the start of every run (and so of
//! every task) the harness records what it will judge by: the validation's own sources,
//! the test files with their tests, skip markers and assertions, and the tests the
//! validation ran. At every completion claim the evidence is compared with that baseline:
//! a change the task did not ask for rejects the claim, with the diff for the next prompt.
//!
//! - `commands.rs`: the files and entries a validation command goes through;
//! - `testfiles.rs`: which files are tests, and what each defines;
//! - `runners.rs`: how many tests ran, from the well-known runners' summary lines;
//! - `allowed.rs`: the tests a task names to change;
//! - `bodies.rs`, `assertions.rs`: each test's lines, assertions as lines;
//! - `baseline.rs`: the record, kept in the user's state directory;
//! - `compare.rs`: the claim against the record.

mod allowed;
mod assertions;
mod baseline;
mod bodies;
pub mod commands;
mod compare;
pub mod runners;
pub mod testfiles;

pub use allowed::allowed_changes;
pub use baseline::{Baseline, Capture, SourceText, TestFile, evidence_dir};
pub use compare::{Finding, compare};
pub use runners::Tally;

/// The lines of a validation's output a tally reads (its runners' summaries), bounded:
/// kept while the output streams, so a long output's middle is not lost to the 64 KiB the
/// validation keeps for the prompt.
#[derive(Debug, Default)]
pub struct TallyLines {
    text: String,
}

/// Every line is kept up to the first bound, then only lines with a digit up to the second.
const ALL_LINES: usize = 2 * 1024 * 1024;
const MAX_TALLY_LINES: usize = 4 * 1024 * 1024;

impl TallyLines {
    /// Keep `line` when a runner's summary could be on it.
    pub fn push(&mut self, line: &str) {
        let full = self.text.len() > ALL_LINES;
        if self.text.len() > MAX_TALLY_LINES || full && !line.bytes().any(|b| b.is_ascii_digit()) {
            return;
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    pub fn tally(&self) -> Option<Tally> {
        runners::tally(&self.text)
    }
}
