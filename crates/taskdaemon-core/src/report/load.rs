//! Reading a run from disk: its rows of `summary.csv`, its `run.json`, its iteration
//! logs and prompts, and from git the snapshots and merges made while it ran. Every file
//! is optional and read leniently (columns by name): a report shows what is there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    EXCERPT_CAP, Excerpt, Iteration, Outcome, ReportError, RunData, SnapshotMark, Validation,
};
use crate::git::Git;

/// Where one run's files are.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The `.ralph/` directory (a worktree's, or a daemon's kept copy of one).
    pub ralph: PathBuf,
    /// Which run (default: the one `run.json` names, else the last in summary.csv).
    pub run_id: Option<String>,
    /// A title to show (a record's), else the run's task.
    pub title: Option<String>,
    /// What the daemon's record says of the run, for what its files lack (a kept copy
    /// has no `run.json`): its status, loop type and note.
    pub record: Option<RecordFacts>,
}

/// A daemon record's view of its run.
#[derive(Debug, Clone)]
pub struct RecordFacts {
    pub status: String,
    pub loop_type: String,
    pub note: Option<String>,
}

type Row = HashMap<String, String>;

fn read_rows(csv_path: &Path) -> Vec<Row> {
    let Ok(mut r) = csv::ReaderBuilder::new().flexible(true).from_path(csv_path) else {
        return Vec::new();
    };
    let Ok(header) = r.headers().cloned() else {
        return Vec::new();
    };
    r.records()
        .flatten()
        .map(|rec| {
            header
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The run ids of `ralph/logs/summary.csv`, oldest first.
pub fn run_ids(ralph: &Path) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for row in read_rows(&ralph.join("logs/summary.csv")) {
        if let Some(id) = row.get("run_id")
            && !id.is_empty()
            && !ids.contains(id)
        {
            ids.push(id.clone());
        }
    }
    ids
}

fn read_state(ralph: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(ralph.join("run.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn text_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut at = v;
    for p in path {
        at = at.get(p)?;
    }
    match at {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

pub fn load_run(dir: &RunDir) -> Result<RunData, ReportError> {
    let state = read_state(&dir.ralph);
    let state_id = state.as_ref().and_then(|s| text_at(s, &["run_id"]));
    let run_id = dir
        .run_id
        .clone()
        .or_else(|| state_id.clone())
        .or_else(|| run_ids(&dir.ralph).pop())
        .ok_or_else(|| ReportError::NoRun {
            path: dir.ralph.clone(),
        })?;
    // This run's own state only: a later run in the same directory set it aside beside
    // this run's logs (`logs/runs/<id>/run.json`), or replaced it (before that was done).
    let state = state
        .filter(|_| state_id.as_deref() == Some(run_id.as_str()))
        .or_else(|| {
            crate::workspace::earlier_run_dirs(&dir.ralph.join("logs"), &run_id)
                .iter()
                .filter_map(|d| read_state(d))
                .find(|s| text_at(s, &["run_id"]).as_deref() == Some(run_id.as_str()))
        });
    let logs = logs_dir(&dir.ralph, &run_id, state.is_some());
    let mut rows: Vec<Row> = read_rows(&dir.ralph.join("logs/summary.csv"));
    if let Some(l) = &logs
        && l != &dir.ralph.join("logs")
    {
        rows.extend(read_rows(&l.join("summary.csv")));
    }
    rows.retain(|r| r.get("run_id").map(String::as_str) == Some(run_id.as_str()));
    let mut iterations: Vec<Iteration> = Vec::new();
    for row in &rows {
        let it = iteration(row, logs.as_deref());
        iterations.retain(|i| i.n != it.n);
        iterations.push(it);
    }
    iterations.sort_by_key(|i| i.n);
    if iterations.is_empty() && state.is_none() {
        return Err(ReportError::NoRun {
            path: dir.ralph.clone(),
        });
    }
    let mut run = RunData {
        run_id,
        iterations,
        source: dir.ralph.display().to_string(),
        ..RunData::default()
    };
    if let Some(s) = &state {
        fill_from_state(&mut run, s);
    }
    if let Some(r) = &dir.record {
        if run.loop_name.is_empty() {
            run.loop_name = r.loop_type.clone();
        }
        if run.outcome.is_none() && r.status != "running" && r.status != "pending" {
            run.outcome = Some(r.status.clone());
            run.reason = r.note.clone();
        }
    }
    run.title = dir
        .title
        .clone()
        .unwrap_or_else(|| super::heading_text(&run.task));
    let workdir = dir.ralph.parent().unwrap_or(&dir.ralph);
    if workdir.join(".git").exists() {
        run.snapshots = snapshots_during(workdir, &run);
        run.merges = merges_in(workdir, state.as_ref());
    }
    Ok(run)
}

fn fill_from_state(run: &mut RunData, s: &Value) {
    run.task = text_at(s, &["config", "task"]).unwrap_or_default();
    run.loop_name = text_at(s, &["config", "loop_name"]).unwrap_or_default();
    run.max_iterations = s
        .pointer("/config/max_iterations")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    run.outcome = text_at(s, &["outcome", "outcome"]);
    run.reason = text_at(s, &["outcome", "reason"]);
    run.started_at = text_at(s, &["started_at"]);
    run.elapsed_ms = u64_at(s, "elapsed_ms");
    run.updated_at = text_at(s, &["updated_at"]);
    run.cost_reported = s.get("cost_reported").and_then(Value::as_bool);
    run.stall_recoveries = u64_at(s, "stall_recoveries")
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    run.allow_test_changes = s
        .pointer("/config/allow_test_changes")
        .and_then(Value::as_bool)
        .unwrap_or(false);
}

/// The directory of the run's iteration files: its own `logs/runs/<run id>/` (or the
/// `logs/<run id>/` of the layout before), else `logs/` when `run.json` names this run (a
/// directory's current run).
fn logs_dir(ralph: &Path, run_id: &str, current: bool) -> Option<PathBuf> {
    let own = crate::workspace::earlier_run_dirs(&ralph.join("logs"), run_id);
    let with_logs = own.iter().find(|d| has_iteration_files(d));
    if let Some(d) = with_logs.or(own.first()) {
        return Some(d.clone());
    }
    current.then(|| ralph.join("logs"))
}

fn has_iteration_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().as_encoded_bytes().starts_with(b"iteration-"))
}

fn num<T: std::str::FromStr + Default>(row: &Row, key: &str) -> T {
    row.get(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_default()
}

fn iteration(row: &Row, logs: Option<&Path>) -> Iteration {
    let n: u32 = num(row, "iteration");
    let get = |k: &str| row.get(k).cloned().unwrap_or_default();
    let read = |suffix: &str| {
        let dir = logs?;
        std::fs::read(dir.join(format!("iteration-{n:03}.{suffix}"))).ok()
    };
    // The log as the agent's words and one line per tool call, as everywhere else.
    let log = read("log").map(|bytes| {
        let text = crate::agent::readable::readable_log(&String::from_utf8_lossy(&bytes));
        Excerpt::new(text.as_bytes(), EXCERPT_CAP)
    });
    let notes = log
        .as_ref()
        .map(|l| {
            l.text
                .lines()
                .filter_map(|line| line.strip_prefix("[taskdaemon] "))
                .map(|s| s.chars().take(300).collect())
                .collect()
        })
        .unwrap_or_default();
    let commit = get("commit_hash");
    let validation = match get("validation_passed").as_str() {
        "true" => Validation::Passed,
        "false" => Validation::Failed,
        _ => Validation::Skipped,
    };
    // A plan loop validates with the plan's check after each review pass.
    let review =
        (get("mode") == "plan").then(|| super::Review::of_iteration(n, validation, log.as_ref()));
    Iteration {
        n,
        outcome: Outcome::parse(&get("outcome")),
        duration_s: num(row, "duration_seconds"),
        commit: (!commit.is_empty()).then_some(commit),
        stuck_count: num(row, "stuck_count"),
        validation,
        tokens_in: num(row, "tokens_in"),
        tokens_out: num(row, "tokens_out"),
        cost_usd: num(row, "cost_usd"),
        waited_s: num(row, "waited_seconds"),
        timestamp: get("timestamp"),
        review,
        notes,
        prompt: read("prompt.md").map(|b| Excerpt::new(&b, EXCERPT_CAP)),
        log,
    }
}

/// Snapshot tags saved while the run went on: from its start to its end (its state's last
/// write once it ended, else its last iteration; a run not ended: to now). A later run's
/// snapshots are taken away by [`super::settle_snapshots`], which knows the runs after it.
fn snapshots_during(workdir: &Path, run: &RunData) -> Vec<SnapshotMark> {
    let second = |t: &str| t.parse::<jiff::Timestamp>().ok().map(|t| t.as_second());
    let Some(start) = run
        .started_at
        .as_deref()
        .or_else(|| run.iterations.first().map(|i| i.timestamp.as_str()))
        .and_then(second)
    else {
        return Vec::new();
    };
    let end = if run.outcome.is_some() {
        run.updated_at
            .as_deref()
            .or_else(|| run.iterations.last().map(|i| i.timestamp.as_str()))
            .and_then(second)
            .unwrap_or(i64::MAX)
    } else {
        i64::MAX
    };
    let Ok(list) = crate::git::snapshot::Snapshots::open(workdir).and_then(|s| s.list()) else {
        return Vec::new();
    };
    let mut marks: Vec<SnapshotMark> = list
        .into_iter()
        .filter(|s| (start..=end).contains(&s.time_ms.div_euclid(1000)))
        .filter(|s| super::snapshots::named_run(&s.message).is_none_or(|id| id == run.run_id))
        .map(|s| SnapshotMark {
            time: jiff::Timestamp::from_millisecond(s.time_ms)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            tag: s.tag,
            message: s.message,
            time_ms: s.time_ms,
            seq: s.seq,
        })
        .collect();
    marks.sort_by_key(|m| m.seq);
    marks
}

/// Merge commits between the run's first and last HEAD.
fn merges_in(workdir: &Path, state: Option<&Value>) -> Vec<String> {
    let Some(s) = state else {
        return Vec::new();
    };
    let (Some(from), Some(to)) = (text_at(s, &["start_head"]), text_at(s, &["last_head"])) else {
        return Vec::new();
    };
    let hex = |h: &str| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit());
    if !hex(&from) || !hex(&to) {
        return Vec::new();
    }
    Git::new(workdir)
        .run(&[
            "log",
            "--merges",
            "--format=%h %s",
            "-n",
            "50",
            &format!("{from}..{to}"),
        ])
        .map(|out| out.lines().map(str::to_string).collect())
        .unwrap_or_default()
}
