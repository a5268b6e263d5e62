//! `.ralph/logs/summary.csv`: the columns of spec 2 §3, then run_id, outcome,
//! agent_exit_code, validation_passed, tokens_in, tokens_out, cost_usd. One row per
//! iteration, appended with one write and synced.

use std::path::Path;

use serde::Serialize;

use crate::fsutil::append_record;

pub const CSV_COLUMNS: &[&str] = &[
    "iteration",
    "mode",
    "duration_seconds",
    "commit_hash",
    "stories_complete",
    "stories_total",
    "stuck_count",
    "timestamp",
    "run_id",
    "outcome",
    "agent_exit_code",
    "validation_passed",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "waited_seconds",
];

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub iteration: u32,
    /// The loop type.
    pub mode: String,
    pub duration_seconds: String,
    /// Empty when the iteration made no commit.
    pub commit_hash: String,
    pub stories_complete: u32,
    pub stories_total: u32,
    pub stuck_count: u32,
    pub timestamp: String,
    pub run_id: String,
    /// continue, complete, rejected, blocked, decide, stuck, limit, timeout, interrupted.
    pub outcome: String,
    pub agent_exit_code: i32,
    /// true, false, or skipped (no validation command, or not run).
    pub validation_passed: String,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: String,
    /// Time waited before this iteration ran (a usage limit's reset, backoff).
    pub waited_seconds: String,
}

pub fn append_row(path: &Path, row: &SummaryRow) -> std::io::Result<()> {
    let needs_header = std::fs::metadata(path)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    if needs_header {
        w.write_record(CSV_COLUMNS).map_err(std::io::Error::other)?;
    }
    w.serialize(row).map_err(std::io::Error::other)?;
    let bytes = w
        .into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    append_record(path, &bytes, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_once_then_rows_with_every_column() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("logs/summary.csv");
        let row = SummaryRow {
            iteration: 1,
            mode: "ralph".into(),
            duration_seconds: "1.250".into(),
            commit_hash: String::new(),
            stories_complete: 0,
            stories_total: 0,
            stuck_count: 1,
            timestamp: "2026-11-21T12:00:00Z".into(),
            run_id: "r".into(),
            outcome: "continue".into(),
            agent_exit_code: 0,
            validation_passed: "false".into(),
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: "0.000000".into(),
            waited_seconds: "0.000".into(),
        };
        append_row(&p, &row).unwrap();
        append_row(
            &p,
            &SummaryRow {
                iteration: 2,
                ..row
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(lines[1].split(',').count(), CSV_COLUMNS.len());
    }
}
