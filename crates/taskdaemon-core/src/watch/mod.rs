//! The model behind `taskdaemon watch`: what each loop does, folded from the store (a
//! snapshot), the daemon's pushed events, or a local run's `.ralph/` files. The binary
//! draws it; nothing here prints.

mod detail;
mod events;
mod local;
mod logs;
mod rows;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::store::{AnyRecord, Kind as RecordKind, LoopRun, Records, RunStatus, StoreError};

pub use detail::{IterationRow, Validation};
pub use events::changes_records;
pub use local::local_model;
pub use logs::{export_log, run_log_dirs};
pub use rows::{Row, RowKind, symbol};

/// Why a run waits for something other than its agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Waiting {
    /// BLOCKED: the agent's reason.
    Blocked(String),
    /// DECIDE: the agent's question.
    Decide(String),
    /// The agent's usage limit; the run goes on at `until`.
    UsageLimit { until: String },
    /// Merged onto an integration branch, held there (`taskdaemon/integration/…`).
    MergeHeld(String),
    /// A merge conflict to resolve.
    MergeConflict(String),
}

impl Waiting {
    pub fn label(&self) -> String {
        match self {
            Waiting::Blocked(r) => format!("BLOCKED: {r}"),
            Waiting::Decide(q) => format!("DECIDE: {q}"),
            Waiting::UsageLimit { until } => format!("usage limit: waits until {until}"),
            Waiting::MergeHeld(n) => format!("merge held: {n}"),
            Waiting::MergeConflict(n) => format!("merge conflict: {n}"),
        }
    }
}

/// One loop as the watcher sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    pub id: String,
    /// The plan, spec or task title.
    pub title: String,
    pub loop_type: String,
    pub status: RunStatus,
    pub iteration: u32,
    pub max_iterations: Option<u32>,
    /// `plan`/`build` (phase gate) or the phase number of a phase run.
    pub phase: Option<String>,
    pub last_tool: Option<String>,
    pub elapsed_ms: u64,
    pub cost_usd: Option<f64>,
    pub waiting: Option<Waiting>,
    /// Where its `.ralph/` is.
    pub workdir: Option<PathBuf>,
    pub note: Option<String>,
    /// Tasks of an implement run: (title, status).
    pub tasks: Vec<(String, String)>,
    /// What the agent printed in the current iteration, as pushed by the daemon (the log
    /// file is written in blocks); the last [`LIVE_LINES`].
    pub live: Vec<String>,
    /// Running, and asked to pause when its iteration ends.
    pub pausing: bool,
    /// Running: when the watcher saw `elapsed_ms` as it was; the time shown goes on from
    /// there ([`RunView::elapsed_at`]).
    pub since: Option<Instant>,
}

/// How many pushed agent lines a run keeps.
pub const LIVE_LINES: usize = 2000;

impl RunView {
    fn from_record(r: &LoopRun, title: &str) -> RunView {
        let note = r.note.clone();
        RunView {
            id: r.id.clone(),
            title: title.to_string(),
            loop_type: r.loop_type.to_string(),
            status: r.status,
            iteration: r.iteration,
            max_iterations: None,
            phase: r.context.phase_number.clone(),
            last_tool: None,
            elapsed_ms: r.elapsed_ms,
            cost_usd: r.cost_usd,
            waiting: note.as_deref().and_then(waiting_from_note),
            workdir: r.worktree.as_ref().map(PathBuf::from),
            note,
            tasks: crate::worklist::tasks_md::of_run(r),
            live: Vec::new(),
            pausing: r.status == RunStatus::Running
                && crate::daemon::control::is_pausing(r.note.as_deref()),
            since: None,
        }
    }

    /// The elapsed time to show at `now`: a running run's goes on from when it was seen.
    pub fn elapsed_at(&self, now: Instant) -> u64 {
        match (self.status, self.since) {
            (RunStatus::Running, Some(t)) => {
                self.elapsed_ms + now.saturating_duration_since(t).as_millis() as u64
            }
            _ => self.elapsed_ms,
        }
    }

    /// The status word of its row: `pausing` for a running run that pauses after its
    /// iteration.
    pub fn status_word(&self) -> &'static str {
        if self.pausing && self.status == RunStatus::Running {
            "pausing"
        } else {
            self.status.as_str()
        }
    }

    pub fn iteration_text(&self) -> String {
        match self.max_iterations {
            Some(m) => format!("{}/{m}", self.iteration),
            None => self.iteration.to_string(),
        }
    }
}

/// What a daemon's note says a run waits for.
pub fn waiting_from_note(note: &str) -> Option<Waiting> {
    let rest = |p: &str| note.strip_prefix(p).map(|r| r.trim().to_string());
    if let Some(r) = rest("BLOCKED:") {
        return Some(Waiting::Blocked(r));
    }
    if let Some(q) = rest("DECIDE:") {
        let q = q.split(" (answer with").next().unwrap_or(&q).to_string();
        return Some(Waiting::Decide(q));
    }
    if note.starts_with("held on ") {
        return Some(Waiting::MergeHeld(note.to_string()));
    }
    if note.starts_with("merge conflict") {
        return Some(Waiting::MergeConflict(note.to_string()));
    }
    None
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpecNode {
    pub id: String,
    pub title: String,
    pub status: String,
    pub runs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanNode {
    pub id: String,
    pub title: String,
    pub status: String,
    pub runs: Vec<String>,
    pub specs: Vec<SpecNode>,
}

/// Everything the watcher shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub repository: PathBuf,
    /// The daemon's pid, when one runs.
    pub daemon: Option<u32>,
    pub plans: Vec<PlanNode>,
    /// Runs under no plan.
    pub standalone: Vec<String>,
    pub runs: BTreeMap<String, RunView>,
    /// The daemon's copies of removed worktrees' `.ralph/` (`<daemon dir>/logs/`).
    pub kept_logs: Option<PathBuf>,
}

impl Model {
    /// The tree as the store holds it now.
    pub fn load(repository: &Path, records: &Records) -> Result<Model, StoreError> {
        let mut m = Model {
            repository: repository.to_path_buf(),
            ..Model::default()
        };
        let all_runs: Vec<LoopRun> = records
            .list(RecordKind::Run, &[])?
            .into_iter()
            .filter_map(|r| match r {
                AnyRecord::Run(r) => Some(r),
                _ => None,
            })
            .collect();
        let titles: BTreeMap<String, String> = records
            .list(RecordKind::Plan, &[])?
            .into_iter()
            .chain(records.list(RecordKind::Spec, &[])?)
            .map(|r| (r.id().to_string(), r.title().to_string()))
            .collect();
        let runs_of = |parent: &str| -> Vec<String> {
            all_runs
                .iter()
                .filter(|r| r.parent.as_deref() == Some(parent))
                .map(|r| r.id.clone())
                .collect()
        };
        for p in records.list(RecordKind::Plan, &[])? {
            let AnyRecord::Plan(p) = p else { continue };
            let mut node = PlanNode {
                runs: runs_of(&p.id),
                id: p.id.clone(),
                title: p.title.clone(),
                status: p.status.as_str().to_string(),
                specs: Vec::new(),
            };
            for s in records.list(
                RecordKind::Spec,
                &[taskstore::Filter::eq("parent", p.id.as_str())],
            )? {
                let AnyRecord::Spec(s) = s else { continue };
                node.specs.push(SpecNode {
                    runs: runs_of(&s.id),
                    id: s.id,
                    title: s.title,
                    status: s.status.as_str().to_string(),
                });
            }
            m.plans.push(node);
        }
        for r in &all_runs {
            let title = run_title(r, &titles);
            let mut view = RunView::from_record(r, &title);
            if matches!(r.status, RunStatus::Running | RunStatus::Paused)
                && let Some(dir) = &view.workdir
            {
                view.max_iterations = logs::max_iterations(dir, &r.id);
            }
            m.runs.insert(r.id.clone(), view);
            if r.parent.is_none() {
                m.standalone.push(r.id.clone());
            }
        }
        Ok(m)
    }

    /// The runs in the order the tree shows them.
    pub fn run_order(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.plans {
            out.extend(p.runs.iter().cloned());
            for s in &p.specs {
                out.extend(s.runs.iter().cloned());
            }
        }
        out.extend(self.standalone.iter().cloned());
        out
    }

    /// A run's view, made (as a standalone run) if the model does not know it yet.
    pub fn run_mut(&mut self, id: &str) -> &mut RunView {
        if !self.runs.contains_key(id) {
            self.standalone.push(id.to_string());
        }
        self.runs
            .entry(id.to_string())
            .or_insert_with(|| RunView::blank(id))
    }

    /// Take the tree and records of `fresh` (the store read again), keeping what only
    /// the events told: agent lines, the last tool, the iteration limit, and when each
    /// running run's elapsed time was seen (moved to `now` when the store's changed).
    pub fn refresh(&mut self, mut fresh: Model, now: Instant) {
        fresh.kept_logs = fresh.kept_logs.or_else(|| self.kept_logs.take());
        for (id, r) in fresh.runs.iter_mut() {
            let old = self.runs.remove(id);
            if r.status != RunStatus::Running {
                r.since = None;
                continue;
            }
            let Some(old) = old else {
                r.since = Some(now);
                continue;
            };
            let same = old.status == RunStatus::Running && old.elapsed_ms == r.elapsed_ms;
            r.since = if same {
                old.since.or(Some(now))
            } else {
                Some(now)
            };
            r.live = old.live;
            r.last_tool = old.last_tool;
            r.max_iterations = r.max_iterations.or(old.max_iterations);
        }
        *self = fresh;
    }

    /// The log file the pane shows for run `id`: its current iteration's, wherever the
    /// run's logs are (its worktree, set aside by a later run there, or the daemon's copy
    /// of a removed worktree); else its last iteration's.
    pub fn log_path(&self, id: &str) -> Option<PathBuf> {
        let r = self.runs.get(id)?;
        let dir = r.workdir.as_ref()?;
        logs::iteration_log(self.kept_logs.as_deref(), dir, &r.id, r.iteration)
    }

    /// Iteration `n`'s log of run `id`, or (`prompt`) the prompt it was given.
    pub fn iteration_file(&self, id: &str, n: u32, prompt: bool) -> Option<PathBuf> {
        let r = self.runs.get(id)?;
        let dir = r.workdir.as_ref()?;
        logs::iteration_file(self.kept_logs.as_deref(), dir, &r.id, n, prompt)
    }
}

impl RunView {
    /// A run known only by its id (from an event) until the store is read.
    fn blank(id: &str) -> RunView {
        RunView {
            id: id.to_string(),
            title: String::new(),
            loop_type: String::new(),
            status: RunStatus::Running,
            iteration: 0,
            max_iterations: None,
            phase: None,
            last_tool: None,
            elapsed_ms: 0,
            cost_usd: None,
            waiting: None,
            workdir: None,
            note: None,
            tasks: Vec::new(),
            live: Vec::new(),
            pausing: false,
            since: None,
        }
    }
}

/// A run's title: its spec's or plan's, else the task in its context.
fn run_title(r: &LoopRun, titles: &BTreeMap<String, String>) -> String {
    if let Some(t) = r.parent.as_ref().and_then(|p| titles.get(p)) {
        return t.clone();
    }
    let title = r.context.extra.get("title").and_then(|v| v.as_str());
    if let Some(t) = title.or(r.context.task.as_deref()) {
        return t.lines().next().unwrap_or(t).to_string();
    }
    r.loop_type.to_string()
}

#[cfg(test)]
mod tests;
