//! The record a person audits afterwards (spec 2 §3–§4): one log per iteration,
//! `summary.csv` with one row per iteration, the final summary, and archives.

mod archive;
mod csv_row;
mod iteration_log;
mod summary;

pub use archive::{ArchiveError, ArchiveReport, archive};
pub use csv_row::{CSV_COLUMNS, SummaryRow, write_row, write_row_deferred};
pub use iteration_log::{DEFAULT_LOG_CAP, IterationLog, MIN_LOG_CAP, parse_size};
pub use summary::{RunSummary, WorkTally, WorkUnit, count_stories};
