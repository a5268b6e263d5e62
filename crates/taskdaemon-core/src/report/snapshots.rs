//! Which run a snapshot belongs to, when the runs of one directory are reported together
//! (`report --all`): each run lists the snapshots saved from its start to its end, so
//! runs that met within one second (a fast run and the next) can both list one; here it
//! goes to one of them only.

use super::{RunData, SnapshotMark};

/// The run a snapshot's message names (`before run ID: the uncommitted changes`).
pub(super) fn named_run(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("before run ")?;
    let id = rest.split(':').next()?.trim();
    (!id.is_empty()).then_some(id)
}

/// Whether `s`, listed by run `run` and an earlier one, is `run`'s: from its own start
/// snapshot on (`run-N-pre`, which names it). A run without one (its tree was clean at
/// its start) leaves a snapshot of that second to the earlier run.
fn is_later_runs(s: &SnapshotMark, run: &RunData) -> bool {
    run.snapshots
        .iter()
        .filter(|m| named_run(&m.message) == Some(run.run_id.as_str()))
        .map(|m| m.seq)
        .min()
        .is_some_and(|start| s.seq >= start)
}

/// Leave each snapshot under one run only. `runs`: one directory's runs, oldest first.
/// A run that never ended (killed) lists to now: it keeps nothing saved after the next
/// run's start.
pub fn settle_snapshots(runs: &mut [RunData]) {
    let start = |r: &RunData| {
        r.started_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    for k in 1..runs.len() {
        if let Some(next) = start(&runs[k]) {
            runs[k - 1]
                .snapshots
                .retain(|s| s.time_ms.div_euclid(1000) <= next);
        }
    }
    let mut owners: Vec<(String, usize)> = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        for s in &run.snapshots {
            let owner = owners.iter_mut().find(|(tag, _)| tag == &s.tag);
            match owner {
                Some((_, earlier)) if is_later_runs(s, run) => *earlier = k,
                Some(_) => {}
                None => owners.push((s.tag.clone(), k)),
            }
        }
    }
    for (k, run) in runs.iter_mut().enumerate() {
        run.snapshots.retain(|s| {
            owners
                .iter()
                .any(|(tag, owner)| tag == &s.tag && *owner == k)
        });
    }
}
