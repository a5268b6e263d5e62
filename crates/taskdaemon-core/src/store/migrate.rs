//! `store migrate`: copy a project's records between its JSONL store and a shared queue,
//! line for line (same ids, same fields, `updated-at` kept), in both directions.
//!
//! To PostgreSQL: the live records of `.taskdaemon/store/`, in the order they first
//! appeared, in one transaction under the project's lock; a target project that already
//! holds records is refused unless `force`, and then its rows are saved to a file first.
//! To JSONL: every row of the project (tombstones too), each collection's file written
//! atomically; existing non-empty files are refused unless `force`, and then saved first.
//! The queue's other tables (leases, iteration logs, merge records) go with the records:
//! kept beside a JSONL store and restored from there ([`super::migrate_tables`]).

use std::path::{Path, PathBuf};

use serde::Serialize;
use taskstore::StoreOptions;
use taskstore::line::parse_meta;

use super::migrate_tables::{SideCounts, SideRows, kept_dir};
use super::pg::{CHANNEL, PROJECT_LOCK_SQL, PgStore};
use super::pg_conn::{QueueConfig, QueueError, connect};
use super::{Kind, Records, Result, StoreError, store_dir};

/// What a migration did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MigrateReport {
    /// Where from and where to (a URL with its password hidden, or a directory).
    pub from: String,
    pub to: String,
    pub project: String,
    pub plans: usize,
    pub specs: usize,
    pub runs: usize,
    /// Tombstones copied (to JSONL) or left behind (to PostgreSQL: deletions stay local).
    pub tombstones: usize,
    /// Records that were in the target and were replaced (`force`).
    pub replaced: usize,
    /// Where what was replaced was saved.
    pub saved: Option<PathBuf>,
    /// The rows of the queue's other tables carried: to JSONL kept in `tables_dir`, to
    /// PostgreSQL restored from it.
    pub tables: SideCounts,
    pub tables_dir: Option<PathBuf>,
    /// The rows of those tables that were in the target and were replaced (saved with the
    /// records).
    pub replaced_tables: SideCounts,
}

impl MigrateReport {
    fn count(&mut self, kind: Kind) {
        match kind {
            Kind::Plan => self.plans += 1,
            Kind::Spec => self.specs += 1,
            Kind::Run => self.runs += 1,
        }
    }
}

fn refused(reason: String, hint: &str) -> StoreError {
    StoreError::Invalid {
        field: "store migrate".into(),
        reason,
        hint: hint.into(),
    }
}

/// `<project>/.git/taskdaemon/saved/migrate-<ms>/` (outside git; inside the repository).
fn save_dir(project: &Path, now_ms: i64) -> PathBuf {
    project
        .join(".git")
        .join("taskdaemon")
        .join("saved")
        .join(format!("migrate-{now_ms}"))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| {
        StoreError::Store(taskstore::Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Copy the project's JSONL store into the queue.
pub fn to_postgres(
    project: &Path,
    queue: &QueueConfig,
    force: bool,
    now_ms: i64,
) -> Result<MigrateReport> {
    let src = Records::open_jsonl(
        project,
        StoreOptions {
            max_bytes: None,
            ..Default::default()
        },
    )?;
    let jsonl = src.store().jsonl().ok_or(StoreError::Stopped)?;
    // A connection only (the schema made or checked): what the project holds is read
    // below, under its lock.
    let mut c = connect(queue)?;
    let mut report = MigrateReport {
        from: store_dir(project).display().to_string(),
        to: queue.shown(),
        project: queue.project.clone(),
        plans: 0,
        specs: 0,
        runs: 0,
        tombstones: 0,
        replaced: 0,
        saved: None,
        tables: SideCounts::default(),
        tables_dir: None,
        replaced_tables: SideCounts::default(),
    };
    let mut rows: Vec<(Kind, String)> = Vec::new();
    for k in Kind::ALL {
        for (_, line) in jsonl.list_raw(k.collection(), &[])? {
            rows.push((k, String::from_utf8_lossy(&line).into_owned()));
        }
        report.tombstones += jsonl
            .ids_with_prefix(k.collection(), "")?
            .iter()
            .filter(|(_, deleted)| *deleted)
            .count();
    }
    let sql = |what: &'static str| move |e| StoreError::from(QueueError::sql(queue, what, e));
    let mut tx = c.transaction().map_err(sql("beginning the copy"))?;
    tx.execute(PROJECT_LOCK_SQL, &[&queue.project])
        .map_err(sql("taking the project's lock"))?;
    // What the project holds is read under its lock: a record another machine writes
    // meanwhile is either saved here or written after the copy, never deleted unsaved.
    let existing: Vec<(String, String)> = tx
        .query(
            "select collection, body::text from records where project = $1 order by first_seq",
            &[&queue.project],
        )
        .map_err(sql("reading the project's records"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let existing_tables = SideRows::read(&mut tx, queue)?;
    if !existing.is_empty() || !existing_tables.is_empty() {
        let saved = save_replaced(project, queue, &existing, force, now_ms)?;
        existing_tables.save(&saved)?;
        report.saved = Some(saved);
        report.replaced = existing.len();
        report.replaced_tables = existing_tables.counts();
    }
    // What a migration to JSONL kept of the queue's other tables comes back with them.
    let kept = kept_dir(project);
    let restore = if kept.is_dir() {
        report.tables_dir = Some(kept.clone());
        SideRows::load(&kept)?
    } else {
        SideRows::default()
    };
    report.tables = restore.counts();
    // The project is replaced whole: its leases, logs and merge records went with the runs
    // they were about (left, an old lease would block a claim and an old merge record
    // would answer for a run id the copy reuses); they were saved above.
    for table in ["records", "leases", "run_logs", "merges"] {
        tx.execute(
            &format!("delete from {table} where project = $1"),
            &[&queue.project],
        )
        .map_err(sql("replacing the project's records"))?;
    }
    for (k, line) in &rows {
        let m = parse_meta(line.as_bytes(), &[]).map_err(|reason| QueueError::BadRecord {
            collection: k.collection().into(),
            reason,
        })?;
        tx.execute(
            "insert into records (project, collection, id, updated_at, deleted, seq, first_seq, body)
             values ($1, $2, $3, $4, false, nextval('taskdaemon_seq'), currval('taskdaemon_seq'),
                     $5::text::json)",
            &[&queue.project, &k.collection(), &m.id, &m.updated_at, line],
        )
        .map_err(sql("copying a record"))?;
        report.count(*k);
    }
    restore.insert(&mut tx, queue)?;
    tx.execute("select pg_notify($1, $2)", &[&CHANNEL, &queue.project])
        .map_err(sql("notifying"))?;
    tx.commit().map_err(sql("committing the copy"))?;
    Ok(report)
}

/// Save the records `existing` (collection, line) that a forced copy replaces, one JSONL
/// file per collection in a new directory (returned); refused without `force`.
fn save_replaced(
    project: &Path,
    queue: &QueueConfig,
    existing: &[(String, String)],
    force: bool,
    now_ms: i64,
) -> Result<PathBuf> {
    if !force {
        return Err(refused(
            format!(
                "{} already holds {} record(s) of project `{}`",
                queue.shown(),
                existing.len(),
                queue.project
            ),
            "migrate into an empty project (set `queue-project`), or pass --force to replace them (they are saved to a file first, with the project's leases, iteration logs and merge records)",
        ));
    }
    let dir = save_dir(project, now_ms);
    for k in Kind::ALL {
        let text: String = existing
            .iter()
            .filter(|(c, _)| c == k.collection())
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        let path = dir.join(format!("{}.jsonl", k.collection()));
        crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(io_err(&path))?;
    }
    Ok(dir)
}

/// Write the queue's records of the project into its JSONL store.
pub fn to_jsonl(
    project: &Path,
    queue: &QueueConfig,
    force: bool,
    now_ms: i64,
) -> Result<MigrateReport> {
    let source = PgStore::open(queue.clone(), Kind::ALL.iter().map(|k| k.def()).collect())?;
    let dir = store_dir(project);
    let mut report = MigrateReport {
        from: queue.shown(),
        to: dir.display().to_string(),
        project: queue.project.clone(),
        plans: 0,
        specs: 0,
        runs: 0,
        tombstones: 0,
        replaced: 0,
        saved: None,
        tables: SideCounts::default(),
        tables_dir: None,
        replaced_tables: SideCounts::default(),
    };
    let file = |k: Kind| dir.join(format!("{}.jsonl", k.collection()));
    let kept = kept_dir(project);
    let occupied: Vec<PathBuf> = Kind::ALL
        .into_iter()
        .map(file)
        .chain(["leases", "run_logs", "merges"].map(|t| kept.join(format!("{t}.jsonl"))))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .collect();
    if !occupied.is_empty() {
        if !force {
            return Err(refused(
                format!(
                    "{} already holds records ({})",
                    dir.display(),
                    occupied
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "pass --force to replace them (the files are saved first)",
            ));
        }
        let save = save_dir(project, now_ms);
        for p in &occupied {
            let name = p.file_name().unwrap_or_default();
            let dest = if p.starts_with(&kept) {
                save.join("queue-tables").join(name)
            } else {
                save.join(name)
            };
            let bytes = std::fs::read(p).map_err(io_err(p))?;
            crate::fsutil::write_atomic(&dest, &bytes).map_err(io_err(&dest))?;
            report.replaced += bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
        }
        report.saved = Some(save);
    }
    let lines = source.all_lines();
    for k in Kind::ALL {
        let mut text = String::new();
        for (_, _, deleted, line) in lines.iter().filter(|(c, _, _, _)| *c == k.collection()) {
            text.push_str(&String::from_utf8_lossy(line));
            text.push('\n');
            if *deleted {
                report.tombstones += 1;
            } else {
                report.count(k);
            }
        }
        let path = file(k);
        crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(io_err(&path))?;
    }
    let mut c = connect(queue)?;
    let mut tx = c.transaction().map_err(|e| {
        StoreError::from(QueueError::sql(
            queue,
            "reading the project's side tables",
            e,
        ))
    })?;
    let tables = SideRows::read(&mut tx, queue)?;
    drop(tx);
    tables.save(&kept)?;
    report.tables = tables.counts();
    report.tables_dir = Some(kept);
    // The index cache describes the old files: rebuilt at the next open.
    let index = dir.join(".index");
    if index.is_dir() {
        std::fs::remove_dir_all(&index).map_err(io_err(&index))?;
    }
    Ok(report)
}
