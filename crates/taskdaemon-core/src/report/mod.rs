//! `taskdaemon report`: one self-contained HTML file (no network, no script; inline SVG)
//! describing a run, a task or a daemon plan, read from what the runs left on disk
//! (`summary.csv`, `run.json`, iteration logs and prompts). Logs and prompts are untrusted
//! input: every byte of them is HTML-escaped, and each is bounded.

mod cards;
mod facts;
mod html;
mod load;
mod records;
mod snapshots;
mod svg;

pub use facts::{Amount, Review, ReviewVerdict, Stalls, heading_text};
pub use html::render;
pub use load::{RecordFacts, RunDir, load_run, run_ids};
pub use records::{record_tree, run_dir, run_title};
pub use snapshots::settle_snapshots;

/// Bytes of one prompt or log kept in the report (its first and last part).
pub const EXCERPT_CAP: usize = 48 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(
        "{path}: no run found (no summary.csv rows and no run.json)\n  hint: start one with `taskdaemon run`, or name a record: `taskdaemon report REF`"
    )]
    NoRun { path: std::path::PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// What a report shows: one or more runs, and for a plan its records.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was asked for (`run 2026…`, `plan plan-oauth`, …).
    pub subject: String,
    /// RFC 3339 time the report was made.
    pub generated_at: String,
    pub runs: Vec<RunData>,
    /// A plan's or spec's records (plan → specs → runs), with status.
    pub records: Vec<RecordRow>,
}

#[derive(Debug, Clone)]
pub struct RecordRow {
    pub id: String,
    pub kind: String,
    pub title: String,
    pub status: String,
    pub note: Option<String>,
}

/// How an iteration ended (summary.csv's `outcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    Complete,
    Rejected,
    Blocked,
    Decide,
    Stuck,
    Limit,
    Timeout,
    Interrupted,
    Crashed,
    ValidationMissing,
    PlanPhase,
    StallRecovery,
    Failed,
    Other(String),
}

impl Outcome {
    pub fn parse(s: &str) -> Outcome {
        match s.trim() {
            "continue" => Outcome::Continue,
            "complete" => Outcome::Complete,
            "rejected" => Outcome::Rejected,
            "blocked" => Outcome::Blocked,
            "decide" => Outcome::Decide,
            "stuck" => Outcome::Stuck,
            "limit" => Outcome::Limit,
            "timeout" => Outcome::Timeout,
            "interrupted" => Outcome::Interrupted,
            "crashed" => Outcome::Crashed,
            "validation-missing" => Outcome::ValidationMissing,
            "plan-phase" => Outcome::PlanPhase,
            "stall-recovery" => Outcome::StallRecovery,
            "failed" => Outcome::Failed,
            other => Outcome::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Outcome::Continue => "continue",
            Outcome::Complete => "complete",
            Outcome::Rejected => "rejected",
            Outcome::Blocked => "blocked",
            Outcome::Decide => "decide",
            Outcome::Stuck => "stuck",
            Outcome::Limit => "limit",
            Outcome::Timeout => "timeout",
            Outcome::Interrupted => "interrupted",
            Outcome::Crashed => "crashed",
            Outcome::ValidationMissing => "validation-missing",
            Outcome::PlanPhase => "plan-phase",
            Outcome::StallRecovery => "stall-recovery",
            Outcome::Failed => "failed",
            Outcome::Other(s) => s,
        }
    }

    /// Its colour in the report (also readable on paper).
    pub fn colour(&self) -> &'static str {
        match self {
            Outcome::Complete => "#2e9d4f",
            Outcome::Continue | Outcome::PlanPhase => "#3b7dd8",
            Outcome::Rejected => "#e08a1e",
            Outcome::Blocked => "#c93c3c",
            Outcome::Decide => "#8a52c9",
            Outcome::Stuck | Outcome::Failed | Outcome::Crashed => "#8b1e1e",
            Outcome::StallRecovery | Outcome::ValidationMissing => "#b8860b",
            Outcome::Limit | Outcome::Interrupted => "#7a7f87",
            Outcome::Timeout => "#a0652a",
            Outcome::Other(_) => "#5a5f66",
        }
    }
}

/// The harness's validation of an iteration (summary.csv's `validation_passed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    Passed,
    Failed,
    Skipped,
}

/// A prompt or log, bounded: its first and last part when it was longer.
#[derive(Debug, Clone, Default)]
pub struct Excerpt {
    pub text: String,
    /// Bytes left out in the middle (0: complete).
    pub cut_bytes: usize,
}

impl Excerpt {
    pub fn new(bytes: &[u8], cap: usize) -> Excerpt {
        if bytes.len() <= cap {
            return Excerpt {
                text: String::from_utf8_lossy(bytes).into_owned(),
                cut_bytes: 0,
            };
        }
        let head = &bytes[..cap / 2];
        let tail = &bytes[bytes.len() - cap / 2..];
        Excerpt {
            text: format!(
                "{}\n…\n{}",
                String::from_utf8_lossy(head),
                String::from_utf8_lossy(tail)
            ),
            cut_bytes: bytes.len() - head.len() - tail.len(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Iteration {
    pub n: u32,
    pub outcome: Outcome,
    pub duration_s: f64,
    pub commit: Option<String>,
    pub stuck_count: u32,
    pub validation: Validation,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    /// Time waited before it ran (a usage limit's reset, a backoff).
    pub waited_s: f64,
    pub timestamp: String,
    /// A plan loop's iteration: its review pass (its validation is the plan's check).
    pub review: Option<Review>,
    /// The harness's own lines of its log (`[taskdaemon] …`): gates, promises, waits.
    pub notes: Vec<String>,
    pub prompt: Option<Excerpt>,
    pub log: Option<Excerpt>,
}

impl Iteration {
    /// The harness notes about gates and validation.
    pub fn gate_notes(&self) -> impl Iterator<Item = &String> {
        self.notes.iter().filter(|n| {
            let l = n.to_ascii_lowercase();
            l.contains("validation") || l.contains("gate") || l.contains("guard")
        })
    }
}

/// A snapshot saved while the run went on.
#[derive(Debug, Clone)]
pub struct SnapshotMark {
    pub tag: String,
    pub message: String,
    pub time: String,
    /// Unix milliseconds and the repository's order of snapshots (ties of a second).
    pub time_ms: i64,
    pub seq: u64,
}

#[derive(Debug, Clone, Default)]
pub struct RunData {
    pub run_id: String,
    /// The record's title, or the run's task.
    pub title: String,
    pub loop_name: String,
    pub task: String,
    /// How the run ended (`run.json`), when it did.
    pub outcome: Option<String>,
    pub reason: Option<String>,
    pub max_iterations: Option<u32>,
    pub started_at: Option<String>,
    pub elapsed_ms: Option<u64>,
    /// When it last wrote its state (`run.json`'s `updated_at`): its end, once it ended.
    pub updated_at: Option<String>,
    /// Stalls detected (`run.json`'s `stall_recoveries`: the first is recovered, the second
    /// fails the run).
    pub stall_recoveries: u32,
    /// Whether the agent reported a cost (`run.json`); `None`: not known (no run.json).
    pub cost_reported: Option<bool>,
    /// `--allow-test-changes`: the evidence protection was off.
    pub allow_test_changes: bool,
    pub iterations: Vec<Iteration>,
    pub snapshots: Vec<SnapshotMark>,
    /// Merge commits made in the run's range (`git log --merges`), one line each.
    pub merges: Vec<String>,
    /// Where its files were read from.
    pub source: String,
}

impl RunData {
    pub fn total_cost(&self) -> f64 {
        self.iterations.iter().map(|i| i.cost_usd).sum()
    }
    pub fn total_tokens(&self) -> (u64, u64) {
        self.iterations
            .iter()
            .fold((0, 0), |(a, b), i| (a + i.tokens_in, b + i.tokens_out))
    }
    pub fn total_waited_s(&self) -> f64 {
        self.iterations.iter().map(|i| i.waited_s).sum()
    }
    pub fn max_stuck(&self) -> u32 {
        self.iterations
            .iter()
            .map(|i| i.stuck_count)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
