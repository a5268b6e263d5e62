//! What `taskdaemon status --json` shows, and the first line (`snapshot`) of the event
//! stream: the tree plan → specs → runs with the daemon's own state.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskstore::Filter;

use super::events::Subject;
use crate::scheduler::context;
use crate::store::{AnyRecord, Kind, LoopKind, LoopRun, Records, RunStatus, StoreError};

/// The daemon's own state (`daemon status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    pub started_at: String,
    pub project: PathBuf,
    /// Runs with a live process.
    pub active: Vec<String>,
    /// Records whose merge is under way.
    pub merging: Vec<String>,
    pub max_loops: usize,
    #[serde(default)]
    pub quota_governor: Value,
    /// The API agents' shared request limits (`api:` in config), per provider.
    #[serde(default)]
    pub api_scheduler: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: String,
    /// The run's task, or its spec's or plan's title.
    #[serde(default)]
    pub title: String,
    pub loop_type: LoopKind,
    pub status: RunStatus,
    /// Marked running, but no daemon runs it (it stopped or was killed): it resumes on the
    /// next `daemon start`.
    #[serde(default)]
    pub interrupted: bool,
    pub iteration: u32,
    /// The last finished iteration's outcome (`continue`, `rejected`, …), as in summary.csv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<String>,
    pub elapsed_ms: u64,
    pub cost_usd: Option<f64>,
    pub worktree: Option<String>,
    pub note: Option<String>,
    pub phase: Option<Value>,
    /// The daemon whose lease it holds (shared queue): `host:pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// An implement run's tasks as its worktree's tasks.md has them: (`id title`,
    /// done/pending).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "task_pairs")]
    pub tasks: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecView {
    pub id: String,
    pub title: String,
    pub status: String,
    pub note: Option<String>,
    pub deps: Vec<String>,
    pub ready: bool,
    /// What it waits for: `(id, status)` of each unfinished dependency; in JSON
    /// `waiting_for: [{id, status}]`, as `list` and `show` have it.
    #[serde(default, rename = "waiting_for", with = "waiting_pairs")]
    pub waiting: Vec<(String, String)>,
    pub runs: Vec<RunView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub id: String,
    pub title: String,
    pub status: String,
    pub note: Option<String>,
    pub target_branch: Option<String>,
    pub runs: Vec<RunView>,
    pub specs: Vec<SpecView>,
}

/// `status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    /// `null` when no daemon runs.
    pub daemon: Option<DaemonState>,
    /// The shared queue (`null` for the JSONL store): reachable, or since when the holders
    /// shown are stale.
    #[serde(default)]
    pub queue: Option<QueueView>,
    pub plans: Vec<PlanView>,
    /// Runs of no plan or spec.
    pub runs: Vec<RunView>,
    /// Loops of the repository running in the foreground, not the daemon's (filled by
    /// `status`: [`super::local::foreground_runs`]).
    #[serde(default)]
    pub foreground: Vec<super::local::ForegroundRun>,
    /// The plan's records and documents git has not got as they are (filled by `status`:
    /// [`super::local::uncommitted_records`]).
    #[serde(default)]
    pub uncommitted: Vec<String>,
}

/// Pairs as objects with two named fields (`[{"id": …, "status": …}]`), not as bare
/// two-element arrays.
macro_rules! named_pairs {
    ($module:ident, $first:literal, $second:literal) => {
        mod $module {
            use serde::{Deserialize, Deserializer, Serialize, Serializer};

            #[derive(Serialize, Deserialize)]
            struct Pair {
                #[serde(rename = $first)]
                first: String,
                #[serde(rename = $second)]
                second: String,
            }

            pub fn serialize<S: Serializer>(
                v: &[(String, String)],
                s: S,
            ) -> Result<S::Ok, S::Error> {
                let pairs: Vec<Pair> = v
                    .iter()
                    .map(|(a, b)| Pair {
                        first: a.clone(),
                        second: b.clone(),
                    })
                    .collect();
                pairs.serialize(s)
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Vec<(String, String)>, D::Error> {
                let pairs = Vec::<Pair>::deserialize(d)?;
                Ok(pairs.into_iter().map(|p| (p.first, p.second)).collect())
            }
        }
    };
}

named_pairs!(waiting_pairs, "id", "status");
named_pairs!(task_pairs, "task", "status");

/// A run's title: its task, else its spec's or plan's title, else its loop kind.
pub fn run_title(records: &Records, run: &LoopRun) -> String {
    if let Some(t) = context::RunContext::get(&run.context.task).filter(|t| !t.is_empty()) {
        return t.lines().next().unwrap_or(t).to_string();
    }
    let owner = context::RunContext::get(&run.context.spec_id)
        .or(context::RunContext::get(&run.context.plan_id))
        .or(run.parent.as_deref());
    match owner.and_then(|id| records.get(id).ok().flatten()) {
        Some(AnyRecord::Run(_)) | None => run.loop_type.to_string(),
        Some(r) => r.title().to_string(),
    }
}

/// Who an event about `run` is about.
pub fn subject_of(records: &Records, run: &LoopRun, repo: &Path) -> Subject {
    let parent = run
        .parent
        .as_deref()
        .and_then(|p| records.get(p).ok().flatten());
    let (plan, spec) = match parent {
        Some(AnyRecord::Spec(s)) => (Some(s.parent.clone()), Some(s.id.clone())),
        Some(AnyRecord::Plan(p)) => (Some(p.id.clone()), None),
        _ => (None, None),
    };
    Subject {
        run: run.id.clone(),
        title: run_title(records, run),
        loop_type: run.loop_type.to_string(),
        plan,
        spec,
        repo: repo.to_path_buf(),
    }
}

/// Who an event about the record `id` (a run or a spec) is about.
pub fn subject_of_id(records: &Records, id: &str, repo: &Path) -> Subject {
    match records.get(id).ok().flatten() {
        Some(AnyRecord::Run(r)) => subject_of(records, &r, repo),
        Some(AnyRecord::Spec(s)) => Subject {
            run: s.id.clone(),
            title: s.title.clone(),
            loop_type: String::new(),
            plan: Some(s.parent.clone()),
            spec: Some(s.id.clone()),
            repo: repo.to_path_buf(),
        },
        other => Subject {
            run: id.to_string(),
            title: other.map(|r| r.title().to_string()).unwrap_or_default(),
            loop_type: String::new(),
            plan: None,
            spec: None,
            repo: repo.to_path_buf(),
        },
    }
}

/// Who holds which run, from the queue's live leases (the JSONL store has none).
type Held = std::collections::HashMap<String, String>;

/// The shared queue as the snapshot saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    pub reachable: bool,
    /// Why it could not be read (with a hint); none when reachable.
    pub problem: Option<String>,
    /// When the holders shown were read (ms since the epoch): now, or, while the queue is
    /// unreachable, the last good read (`held_by` is then as of that moment: stale).
    pub holders_read_at_ms: Option<i64>,
}

/// What the last good read of the leases found, kept in `cache`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct HeldCache {
    read_at_ms: i64,
    held: Held,
}

/// The holders of the queue's runs and what the queue's state is (`None`: no queue). A
/// good read is kept in `cache`; when the queue cannot be read, the kept one stands in.
fn held(records: &Records, cache: Option<&Path>) -> (Held, Option<QueueView>) {
    if records.queue().is_none() {
        return (Held::new(), None);
    }
    match read_holders(records, cache) {
        Ok((held, now)) => {
            let view = QueueView {
                reachable: true,
                problem: None,
                holders_read_at_ms: Some(now),
            };
            (held, Some(view))
        }
        Err(e) => {
            let kept: Option<HeldCache> = cache
                .and_then(|p| std::fs::read(p).ok())
                .and_then(|b| serde_json::from_slice(&b).ok());
            let view = QueueView {
                reachable: false,
                problem: Some(e.to_string()),
                holders_read_at_ms: kept.as_ref().map(|k| k.read_at_ms),
            };
            (kept.map(|k| k.held).unwrap_or_default(), Some(view))
        }
    }
}

/// Read who holds which run (and when: now) and keep it in `cache`.
fn read_holders(records: &Records, cache: Option<&Path>) -> Result<(Held, i64), StoreError> {
    let held: Held = records
        .leases()?
        .into_iter()
        .filter(|l| !l.expired)
        .map(|l| (l.run_id, format!("{}:{}", l.host, l.pid)))
        .collect();
    let now = crate::clock::now().as_millisecond();
    if let Some(path) = cache {
        let kept = HeldCache {
            read_at_ms: now,
            held: held.clone(),
        };
        // Not synced: it is written on every snapshot a watcher asks for, and nothing is
        // decided on it after a crash (it is shown, marked stale).
        if let Ok(bytes) = serde_json::to_vec(&kept) {
            let _ = crate::fsutil::write_atomic_volatile(path, &bytes);
        }
    }
    Ok((held, now))
}

/// Keep who holds which run in `cache` (the daemon, every few seconds), for a `status`
/// asked while the queue does not answer.
pub fn keep_holders(records: &Records, cache: &Path) {
    let _ = read_holders(records, Some(cache));
}

fn run_view(
    records: &Records,
    r: &LoopRun,
    daemon: Option<&DaemonState>,
    (held, unknown): (&Held, bool),
) -> RunView {
    let held_by = held.get(&r.id).cloned();
    // On the queue, a run some daemon holds a live lease on is running (on some machine);
    // with the queue unreachable, nobody can say a run is not held.
    let live = daemon.is_some_and(|d| d.active.contains(&r.id)) || held_by.is_some() || unknown;
    RunView {
        held_by,
        id: r.id.clone(),
        title: run_title(records, r),
        loop_type: r.loop_type.clone(),
        status: r.status,
        interrupted: r.status == RunStatus::Running && !live,
        iteration: r.iteration,
        last_outcome: last_outcome(&r.progress),
        tasks: crate::worklist::tasks_md::of_run(r),
        elapsed_ms: r.elapsed_ms,
        cost_usd: r.cost_usd,
        worktree: r.worktree.clone(),
        note: r.note.clone(),
        phase: r
            .context
            .phase_number
            .clone()
            .map(serde_json::Value::String),
    }
}

/// The outcome of the last `iteration N: OUTCOME` line of a run's progress.
fn last_outcome(progress: &str) -> Option<String> {
    progress
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("iteration ")?.split_once(": "))
        .map(|(_, outcome)| outcome.trim().to_string())
}

fn runs_of(
    records: &Records,
    parent: &str,
    daemon: Option<&DaemonState>,
    held: (&Held, bool),
) -> Result<Vec<RunView>, StoreError> {
    Ok(
        crate::scheduler::runs(records, &[Filter::eq("parent", parent)])?
            .iter()
            .map(|r| run_view(records, r, daemon, held))
            .collect(),
    )
}

/// The status tree of `records`, with the daemon's state when one runs. On a shared queue
/// each good read of its holders is kept in `held_cache`, which stands in (marked stale)
/// while the queue cannot be read.
pub fn snapshot(
    records: &Records,
    daemon: Option<DaemonState>,
    held_cache: Option<&Path>,
) -> Result<StatusSnapshot, StoreError> {
    let d = daemon.as_ref();
    let (held_map, queue) = held(records, held_cache);
    let held = (&held_map, queue.as_ref().is_some_and(|q| !q.reachable));
    let mut plans = Vec::new();
    for p in records.list(Kind::Plan, &[])? {
        let AnyRecord::Plan(p) = p else { continue };
        let mut specs = Vec::new();
        for s in records.list(Kind::Spec, &[Filter::eq("parent", p.id.as_str())])? {
            let readiness = records.readiness(&s)?;
            let AnyRecord::Spec(s) = s else { continue };
            specs.push(SpecView {
                runs: runs_of(records, &s.id, d, held)?,
                id: s.id,
                title: s.title,
                status: s.status.as_str().to_string(),
                note: s.note,
                deps: s.deps,
                ready: readiness.ready,
                waiting: readiness.waiting,
            });
        }
        plans.push(PlanView {
            runs: runs_of(records, &p.id, d, held)?,
            id: p.id,
            title: p.title,
            status: p.status.as_str().to_string(),
            note: p.note,
            target_branch: p.target_branch,
            specs,
        });
    }
    let mut runs = Vec::new();
    for r in records.list(Kind::Run, &[])? {
        if let AnyRecord::Run(r) = r
            && r.parent.is_none()
        {
            runs.push(run_view(records, &r, d, held));
        }
    }
    Ok(StatusSnapshot {
        daemon,
        queue,
        plans,
        runs,
        foreground: Vec::new(),
        uncommitted: Vec::new(),
    })
}

/// The integration branch a "held on BRANCH: …" note names.
fn held_branch_of(note: &str) -> Option<&str> {
    let rest = note.strip_prefix("held on ")?;
    Some(rest.split_once(':').map_or(rest, |(b, _)| b).trim())
}

/// Notes "held on taskdaemon/integration/T" of records whose held work a person has since
/// taken into `T` (the integration branch is merged into it) are cleared. One line per
/// cleared note.
pub fn clear_taken_holds(
    records: &mut Records,
    project: &Path,
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let git = crate::git::Git::new(project);
    let mut lines = Vec::new();
    for kind in [Kind::Spec, Kind::Run] {
        for mut rec in records.list(kind, &[])? {
            let note = match &rec {
                AnyRecord::Spec(s) => s.note.clone(),
                AnyRecord::Run(r) => r.note.clone(),
                AnyRecord::Plan(_) => None,
            };
            let Some(branch) = note.as_deref().and_then(held_branch_of) else {
                continue;
            };
            let Some(target) = branch.strip_prefix("taskdaemon/integration/") else {
                continue;
            };
            let taken = matches!(git.is_ancestor(branch, target), Ok(true));
            if !taken {
                continue;
            }
            lines.push(format!(
                "{}: the work held on {branch} is in {target} now",
                rec.id()
            ));
            match &mut rec {
                AnyRecord::Spec(s) => s.note = None,
                AnyRecord::Run(r) => r.note = None,
                AnyRecord::Plan(_) => {}
            }
            records.update(rec, now)?;
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_held_branch_is_read_from_the_note() {
        assert_eq!(
            held_branch_of("held on taskdaemon/integration/main: main is checked out in /r"),
            Some("taskdaemon/integration/main")
        );
        assert_eq!(held_branch_of("BLOCKED: no"), None);
    }
}
