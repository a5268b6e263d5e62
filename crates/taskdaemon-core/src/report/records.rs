//! A daemon record's report: the record, its descendants (plan → specs → runs) as rows,
//! and each run's files: its worktree's `.ralph/`, else the daemon's kept copy of it.

use std::path::PathBuf;

use taskstore::Filter;

use super::{RecordRow, RunDir};
use crate::daemon::DaemonPaths;
use crate::store::{AnyRecord, Kind, LoopRun, Records, StoreError};

/// A record's rows (itself and all under it) and its runs with their titles.
pub type RecordTree = (Vec<RecordRow>, Vec<(LoopRun, String)>);

fn row(r: &AnyRecord, parent: Option<&str>) -> RecordRow {
    RecordRow {
        id: r.id().to_string(),
        kind: r.kind().tag().to_string(),
        title: match r {
            AnyRecord::Run(run) => run_title(run, parent),
            other => other.title().to_string(),
        },
        status: r.status().to_string(),
        note: match r {
            AnyRecord::Run(run) => run.note.clone(),
            _ => None,
        },
    }
}

fn children(records: &Records, kind: Kind, parent: &str) -> Result<Vec<AnyRecord>, StoreError> {
    records.list(kind, &[Filter::eq("parent", parent)])
}

fn loop_rank(loop_type: &str) -> u8 {
    match loop_type {
        "plan" => 0,
        "spec" => 1,
        _ => 2,
    }
}

/// The record and everything under it, depth first, with the runs found (and their titles).
pub fn record_tree(records: &Records, rec: AnyRecord) -> Result<RecordTree, StoreError> {
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let parent_title = |r: &AnyRecord| {
        r.parent()
            .and_then(|p| records.get(p).ok().flatten())
            .map(|p| p.title().to_string())
    };
    let mut stack = vec![(parent_title(&rec), rec)];
    while let Some((parent, r)) = stack.pop() {
        let row = row(&r, parent.as_deref());
        let id = r.id().to_string();
        match r {
            AnyRecord::Run(run) => runs.push((run, row.title.clone())),
            AnyRecord::Plan(_) | AnyRecord::Spec(_) => {
                let mut kids = children(records, Kind::Run, &id)?;
                // A plan's own runs in the order they work: its plan loop, then its spec
                // loop (made in one second, their ids would order them by chance).
                kids.sort_by_key(|k| match k {
                    AnyRecord::Run(r) => loop_rank(&r.loop_type.to_string()),
                    _ => 2,
                });
                kids.extend(children(records, Kind::Spec, &id)?);
                kids.reverse();
                let title = r.title().to_string();
                stack.extend(kids.into_iter().map(|k| (Some(title.clone()), k)));
            }
        }
        rows.push(row);
    }
    Ok((rows, runs))
}

/// Where a daemon run's files are, most complete first: the kept copy (saved when its
/// worktree was removed), then the worktree.
pub fn run_dir(paths: &DaemonPaths, run: &LoopRun, title: Option<String>) -> Option<RunDir> {
    let wt = PathBuf::from(run.worktree.as_ref()?);
    let mut candidates = Vec::new();
    if let Some(name) = wt.file_name() {
        candidates.push(paths.kept_logs(&name.to_string_lossy()));
    }
    candidates.push(wt.join(".ralph"));
    let ralph = candidates
        .into_iter()
        .find(|c| c.join("logs/summary.csv").is_file() || c.join("run.json").is_file())?;
    Some(RunDir {
        ralph,
        run_id: Some(run.id.clone()),
        title,
        record: Some(super::RecordFacts {
            status: run.status.as_str().to_string(),
            loop_type: run.loop_type.to_string(),
            note: run.note.clone(),
        }),
    })
}

/// What a run works on, in a few words: its phase, its task or its plan's request, with
/// the loop type; `parent`: the spec's or plan's title.
pub fn run_title(run: &LoopRun, parent: Option<&str>) -> String {
    let ctx = |f: &Option<String>| {
        f.as_deref()
            .map(super::heading_text)
            .filter(|s| !s.is_empty())
    };
    let shorten = |s: String| -> String {
        if s.chars().count() > 72 {
            format!("{}…", s.chars().take(71).collect::<String>())
        } else {
            s
        }
    };
    let what = if let Some(phase) = ctx(&run.context.phase_name) {
        let n = ctx(&run.context.phase_number)
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        match parent {
            Some(p) => format!("{p}: phase{n}: {phase}"),
            None => format!("phase{n}: {phase}"),
        }
    } else if let Some(t) = ctx(&run.context.task) {
        t
    } else if let Some(r) = ctx(&run.context.user_request) {
        r
    } else if let Some(p) = parent {
        p.to_string()
    } else {
        return run.loop_type.to_string();
    };
    format!("{} ({})", shorten(what), run.loop_type)
}
