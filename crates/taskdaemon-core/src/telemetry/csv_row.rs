//! `.ralph/logs/summary.csv`: the columns of spec 2 §3, then run_id, outcome,
//! agent_exit_code, validation_passed, tokens_in, tokens_out, cost_usd. One row per
//! (run id, iteration): a new one is appended with one write and synced; an iteration done
//! again after a kill (its row written, the run state not yet) replaces its row, so no
//! iteration is ever listed twice.

use std::path::Path;

use serde::Serialize;

use crate::fsutil::{PendingSyncs, append_record, append_record_deferred, write_atomic};

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
    pub outcome: crate::engine::decide::IterationOutcome,
    pub agent_exit_code: i32,
    /// true, false, or skipped (no validation command, or not run).
    pub validation_passed: crate::engine::decide::ValidationResult,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: String,
    /// Time waited before this iteration ran (a usage limit's reset, backoff).
    pub waited_seconds: String,
}

/// The end of a long file that is searched for a row to replace: such a row is the last
/// one a run wrote (its iteration done again after a kill), so the whole file, which grows
/// by a row per iteration of every run, is not read at each iteration.
const TAIL: u64 = 16 * 1024;

/// Write `row`: replace the row of the same (run id, iteration), else append.
pub fn write_row(path: &Path, row: &SummaryRow) -> std::io::Result<()> {
    write_row_with(path, row, |bytes| append_record(path, bytes, true))
}

/// [`write_row`] whose appended row is synced with the next `write_atomic_after` of
/// `pending` (a replaced row is written and synced at once).
pub fn write_row_deferred(
    path: &Path,
    row: &SummaryRow,
    pending: &mut PendingSyncs,
) -> std::io::Result<()> {
    write_row_with(path, row, |bytes| {
        append_record_deferred(path, bytes, pending)
    })
}

fn write_row_with(
    path: &Path,
    row: &SummaryRow,
    append: impl FnOnce(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (window, offset) = match read_window(path) {
        Ok(w) => w,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
        Err(e) => return Err(e),
    };
    let needs_header = window.is_empty();
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
    match find_row(&window, &row.run_id, row.iteration) {
        Some(range) => {
            // Rare (a kill between the row and the run state): the whole file, rewritten.
            let existing = std::fs::read(path)?;
            let (start, end) = (range.start + offset, range.end + offset);
            if end > existing.len() {
                return Err(std::io::Error::other(
                    "summary.csv changed while being read",
                ));
            }
            let mut out = Vec::with_capacity(existing.len() + bytes.len());
            out.extend_from_slice(&existing[..start]);
            out.extend_from_slice(&bytes);
            out.extend_from_slice(&existing[end..]);
            write_atomic(path, &out)
        }
        None => append(&bytes),
    }
}

/// The file as [`find_row`] reads it: all of a short file; of a long one, its header line
/// followed by the whole rows of its last [`TAIL`] bytes. With the number to add to a
/// position after the header to get the file's position there.
fn read_window(path: &Path) -> std::io::Result<(Vec<u8>, usize)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len <= 2 * TAIL {
        let mut all = Vec::new();
        f.read_to_end(&mut all)?;
        return Ok((all, 0));
    }
    let mut head = vec![0; 4096];
    let n = f.read(&mut head)?;
    head.truncate(n);
    let Some(eol) = head.iter().position(|&b| b == b'\n') else {
        return Ok((head, 0));
    };
    head.truncate(eol + 1);
    let from = len - TAIL;
    f.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::new();
    f.take(TAIL).read_to_end(&mut tail)?;
    let skip = tail
        .iter()
        .position(|&b| b == b'\n')
        .map_or(tail.len(), |i| i + 1);
    let offset = (from as usize + skip) - head.len();
    head.extend_from_slice(&tail[skip..]);
    Ok((head, offset))
}

/// The byte range (newline included) of the first row of `run_id` and `iteration`, by
/// the file's own header. Unreadable rows are skipped.
fn find_row(csv_bytes: &[u8], run_id: &str, iteration: u32) -> Option<std::ops::Range<usize>> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(csv_bytes);
    let header = r.byte_headers().ok()?.clone();
    let col = |name: &str| header.iter().position(|h| h == name.as_bytes());
    let (run_col, it_col) = (col("run_id")?, col("iteration")?);
    let iteration = iteration.to_string();
    let mut rec = csv::ByteRecord::new();
    let mut found: Option<usize> = None;
    loop {
        let start = r.position().byte() as usize;
        match r.read_byte_record(&mut rec) {
            Ok(false) => return found.map(|s| s..csv_bytes.len()),
            Ok(true) => {}
            // Skipped, unless the reader cannot get past it.
            Err(_) if r.position().byte() as usize > start => continue,
            Err(_) => return found.map(|s| s..csv_bytes.len()),
        }
        if let Some(s) = found {
            return Some(s..start);
        }
        if rec.get(run_col) == Some(run_id.as_bytes())
            && rec.get(it_col) == Some(iteration.as_bytes())
        {
            found = Some(start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::decide::{IterationOutcome, ValidationResult};

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
            outcome: IterationOutcome::Continue,
            agent_exit_code: 0,
            validation_passed: ValidationResult::Failed,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: "0.000000".into(),
            waited_seconds: "0.000".into(),
        };
        write_row(&p, &row).unwrap();
        write_row(
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

    #[test]
    fn a_redone_iteration_replaces_its_row() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("summary.csv");
        let row = |run: &str, n: u32, outcome: IterationOutcome| SummaryRow {
            iteration: n,
            mode: "ralph".into(),
            duration_seconds: "1.000".into(),
            commit_hash: String::new(),
            stories_complete: 0,
            stories_total: 0,
            stuck_count: 0,
            timestamp: "2026-11-21T12:00:00Z".into(),
            run_id: run.into(),
            outcome,
            agent_exit_code: 0,
            validation_passed: ValidationResult::Skipped,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: "0.000000".into(),
            waited_seconds: "0.000".into(),
        };
        use IterationOutcome::*;
        // A long file: only its end is searched, and its rows still come out right.
        let long = d.path().join("long.csv");
        for n in 1..=400 {
            write_row(&long, &row("before", n, Continue)).unwrap();
        }
        write_row(&long, &row("r", 1, Continue)).unwrap();
        write_row(&long, &row("r", 2, Interrupted)).unwrap();
        assert!(std::fs::metadata(&long).unwrap().len() > 2 * TAIL);
        write_row(&long, &row("r", 2, Continue)).unwrap();
        write_row(&long, &row("r", 3, Complete)).unwrap();
        let text = std::fs::read_to_string(&long).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 1 + 400 + 3);
        assert!(lines[402].starts_with("2,") && lines[402].contains(",r,continue,"));
        assert!(lines[403].starts_with("3,") && lines[403].contains(",r,complete,"));
        assert!(
            lines[1..=400]
                .iter()
                .all(|l| l.contains(",before,continue,"))
        );

        // Deferred: an appended row waits for the state's save; a replaced one is written
        // and synced at once.
        let mut pending = PendingSyncs::default();
        write_row_deferred(&p, &row("old", 1, Continue), &mut pending).unwrap();
        write_row(&p, &row("r", 1, Continue)).unwrap();
        write_row_deferred(&p, &row("r", 2, Interrupted), &mut pending).unwrap();
        assert_eq!(pending.len(), 2);
        write_row_deferred(&p, &row("r", 2, Interrupted), &mut pending).unwrap();
        assert_eq!(pending.len(), 2);
        write_row(&p, &row("r", 2, Continue)).unwrap();
        write_row(&p, &row("r", 1, Rejected)).unwrap();
        write_row(&p, &row("r", 3, Complete)).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let rows: Vec<(String, String, String)> = text
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[8].into(), f[0].into(), f[9].into())
            })
            .collect();
        let want = [
            ("old", "1", "continue"),
            ("r", "1", "rejected"),
            ("r", "2", "continue"),
            ("r", "3", "complete"),
        ];
        assert_eq!(
            rows,
            want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        );
    }
}
