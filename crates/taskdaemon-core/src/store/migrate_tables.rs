//! The queue's tables beside the records — leases, iteration logs (`run_logs`) and merge
//! records (`merges`) — as `store migrate` carries them: one JSON object per row (PostgreSQL's
//! own `row_to_json`, so a time keeps its microseconds), one file per table. A JSONL store has
//! no place for them, so a migration to JSONL keeps them in `.git/taskdaemon/queue-tables/`
//! and a migration back restores them; a forced migration saves the rows it replaces the
//! same way. A round trip gives back every row byte for byte.

use std::path::{Path, PathBuf};

use postgres::Transaction;
use serde::Serialize;

use super::pg_conn::{QueueConfig, QueueError};
use super::{Result, StoreError};

/// Each table: its name, its columns besides `project`, and the order its rows are kept in.
const TABLES: [(&str, &str, &str); 3] = [
    ("leases", "run_id, holder, host, pid, expires_at", "run_id"),
    ("run_logs", "run_id, iteration, text", "run_id, iteration"),
    ("merges", "run_id, target, commit, recorded_at", "run_id"),
];

/// The rows of one project's side tables, each table's as JSON lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SideRows {
    tables: Vec<(&'static str, Vec<String>)>,
}

/// How many rows of each table a migration carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SideCounts {
    pub leases: usize,
    pub run_logs: usize,
    pub merges: usize,
}

impl SideRows {
    /// Every row of `project` in the three tables.
    pub fn read(tx: &mut Transaction<'_>, queue: &QueueConfig) -> Result<SideRows> {
        let mut tables = Vec::new();
        for (table, cols, order) in TABLES {
            let sql = format!(
                "select row_to_json(t)::text from (select {cols} from {table} where project = $1 order by {order}) t"
            );
            let rows = tx
                .query(&sql, &[&queue.project])
                .map_err(|e| QueueError::sql(queue, "reading the project's side tables", e))?;
            tables.push((table, rows.iter().map(|r| r.get::<_, String>(0)).collect()));
        }
        Ok(SideRows { tables })
    }

    /// Write every row into `project` (whose rows of these tables are gone).
    pub fn insert(&self, tx: &mut Transaction<'_>, queue: &QueueConfig) -> Result<()> {
        for (table, rows) in &self.tables {
            let Some((_, cols, _)) = TABLES.iter().find(|(t, _, _)| t == table) else {
                continue;
            };
            let sql = format!(
                "insert into {table} (project, {cols}) select $1, {cols} from json_populate_record(null::{table}, $2::text::json)"
            );
            for row in rows {
                tx.execute(&sql, &[&queue.project, row]).map_err(|e| {
                    StoreError::from(QueueError::sql(queue, "restoring a side table's row", e))
                })?;
            }
        }
        Ok(())
    }

    pub fn counts(&self) -> SideCounts {
        let n = |name: &str| {
            self.tables
                .iter()
                .find(|(t, _)| *t == name)
                .map_or(0, |(_, r)| r.len())
        };
        SideCounts {
            leases: n("leases"),
            run_logs: n("run_logs"),
            merges: n("merges"),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|(_, r)| r.is_empty())
    }

    /// Write each table as `<dir>/<table>.jsonl` (atomically).
    pub fn save(&self, dir: &Path) -> Result<()> {
        for (table, rows) in &self.tables {
            let path = dir.join(format!("{table}.jsonl"));
            let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
            crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(io_err(&path))?;
        }
        Ok(())
    }

    /// What [`SideRows::save`] wrote in `dir` (a missing file: no rows of that table); a
    /// line that is not a JSON object is refused with its file and line.
    pub fn load(dir: &Path) -> Result<SideRows> {
        let mut tables = Vec::new();
        for (table, _, _) in TABLES {
            let path = dir.join(format!("{table}.jsonl"));
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(io_err(&path)(e)),
            };
            let mut rows = Vec::new();
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
                if !serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object()) {
                    return Err(StoreError::Invalid {
                        field: format!("{}:{}", path.display(), i + 1),
                        reason: "not a JSON object (a row of the queue's table)".into(),
                        hint: "restore the file from the migration's saved copy, or remove it to migrate without these rows".into(),
                    });
                }
                rows.push(line.to_string());
            }
            tables.push((table, rows));
        }
        Ok(SideRows { tables })
    }
}

/// Where a migration to JSONL keeps the side tables: `<project>/.git/taskdaemon/queue-tables/`
/// (outside git's history: iteration logs can be large, and leases mean nothing there).
pub fn kept_dir(project: &Path) -> PathBuf {
    project.join(".git").join("taskdaemon").join("queue-tables")
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| {
        StoreError::Store(taskstore::Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
