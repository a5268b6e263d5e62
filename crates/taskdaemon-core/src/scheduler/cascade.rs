//! The cascade, derived from the records alone (so a restarted daemon just continues):
//!
//! ```text
//! plan run complete ─► Plan ready ─► spec run ─► Plan in-progress
//! spec run complete ─► one Spec per document (deps resolved)
//! Spec pending, deps complete ─► phase run 1 ─► … ─► phase run N complete ─► merge
//! merge done ─► Spec complete; every Spec complete ─► Plan complete
//! ```
//!
//! A failed dep leaves its dependents `blocked` with the reason in their note; they become
//! pending again if the dep is resumed. A standalone run (ralph) that completes waits in
//! `rebasing` for its merge.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use taskstore::Filter;

use super::context::{self, branch_for};
use super::{plans, runs, specs};
use crate::docs::{self, spec_doc::DepRef};
use crate::store::{
    AnyRecord, LoopRun, NewRun, NewSpec, Plan, PlanStatus, Records, Resolution, Result, RunStatus,
    Spec, SpecStatus, StoreError,
};

/// The note a paused plan or spec had before `paused` was a status (stores written then
/// still load: such a record becomes `paused` on the next pass).
pub const PAUSED: &str = "paused by a person";

/// Work the daemon must do outside the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Merge the branch of worktree `worktree` into `target`; then report with [`merged`].
    Merge {
        /// The spec or run that is finished when the merge is.
        id: String,
        worktree: String,
        branch: String,
        target: String,
    },
    /// A worktree nothing needs any more.
    RemoveWorktree { name: String },
}

/// What one pass did and what it asks for.
#[derive(Debug, Default)]
pub struct Step {
    pub actions: Vec<Action>,
    /// One line per change, for the daemon's log.
    pub notes: Vec<String>,
}

/// One pass over plans, specs and standalone runs. `default_target` is the branch used
/// when a plan or run names none.
pub fn advance(records: &mut Records, now: i64, default_target: &str) -> Result<Step> {
    let mut step = Step::default();
    for plan in plans(records, &[])? {
        if plan.note.as_deref() == Some(PAUSED) {
            set_plan(records, plan, PlanStatus::Paused, None, now, &mut step)?;
            continue;
        }
        match plan.status {
            PlanStatus::Draft | PlanStatus::Ready | PlanStatus::InProgress => {
                advance_plan(records, plan, now, &mut step)?
            }
            _ => {}
        }
    }
    for spec in specs(records, &[])? {
        match spec.status {
            SpecStatus::Pending | SpecStatus::Blocked | SpecStatus::Running => {
                advance_spec(records, spec, now, default_target, &mut step)?
            }
            _ => {}
        }
    }
    block_runs_on_failed_deps(records, now, &mut step)?;
    for run in runs(records, &[Filter::eq("status", "rebasing")])? {
        let target = context::RunContext::get(&run.context.target_branch)
            .unwrap_or(default_target)
            .to_string();
        step.actions.push(Action::Merge {
            id: run.id.clone(),
            worktree: run.id.clone(),
            branch: branch_for(&run.id),
            target,
        });
    }
    Ok(step)
}

/// A pending run whose dep failed, stopped or is blocked waits `blocked`, with the reason;
/// it is pending again once no dep is in that state. Looks only at runs that name such a
/// dep, so it costs nothing while nothing fails.
fn block_runs_on_failed_deps(records: &mut Records, now: i64, step: &mut Step) -> Result<()> {
    let mut bad = Vec::new();
    for status in ["failed", "stopped", "blocked"] {
        for r in records.list(crate::store::Kind::Run, &[Filter::eq("status", status)])? {
            bad.push((r.id().to_string(), status));
        }
    }
    for (dep, status) in &bad {
        for r in runs(records, &[Filter::contains("deps", dep.as_str())])? {
            if r.status == RunStatus::Pending {
                let mut r = r;
                let note = format!("dep {dep} {status}");
                step.notes
                    .push(format!("run {}: pending -> blocked ({note})", r.id));
                r.status = RunStatus::Blocked;
                r.note = Some(note);
                records.update(AnyRecord::Run(r), now)?;
            }
        }
    }
    for r in runs(records, &[Filter::eq("status", "blocked")])? {
        if !r.note.as_deref().is_some_and(|n| n.starts_with("dep ")) {
            continue;
        }
        let still = r.deps.iter().any(|d| bad.iter().any(|(b, _)| b == d));
        if !still {
            let mut r = r;
            step.notes.push(format!(
                "run {}: blocked -> pending (its deps recovered)",
                r.id
            ));
            r.status = RunStatus::Pending;
            r.note = None;
            records.update(AnyRecord::Run(r), now)?;
        }
    }
    Ok(())
}

/// The newest run of `loop_type` under `parent`.
fn latest(records: &Records, parent: &str, loop_type: &str) -> Result<Option<LoopRun>> {
    Ok(runs(records, &[Filter::eq("parent", parent)])?
        .into_iter()
        .rfind(|r| r.loop_type == loop_type))
}

fn set_plan(
    records: &mut Records,
    mut plan: Plan,
    status: PlanStatus,
    note: Option<String>,
    now: i64,
    step: &mut Step,
) -> Result<()> {
    if plan.status == status && plan.note == note {
        return Ok(());
    }
    step.notes.push(format!(
        "plan {}: {} -> {}{}",
        plan.id,
        plan.status,
        status,
        note.as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    ));
    plan.status = status;
    plan.note = note;
    records.update(AnyRecord::Plan(plan), now)?;
    Ok(())
}

fn set_spec(
    records: &mut Records,
    mut spec: Spec,
    status: SpecStatus,
    note: Option<String>,
    now: i64,
    step: &mut Step,
) -> Result<()> {
    if spec.status == status && spec.note == note {
        return Ok(());
    }
    step.notes.push(format!(
        "spec {}: {} -> {}{}",
        spec.id,
        spec.status,
        status,
        note.as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    ));
    spec.status = status;
    spec.note = note;
    records.update(AnyRecord::Spec(spec), now)?;
    Ok(())
}

fn run_problem(run: &LoopRun) -> String {
    format!(
        "{} run {} {}{}",
        run.loop_type,
        run.id,
        run.status,
        run.note
            .as_deref()
            .map(|n| format!(": {n}"))
            .unwrap_or_default()
    )
}

fn advance_plan(records: &mut Records, plan: Plan, now: i64, step: &mut Step) -> Result<()> {
    match plan.status {
        PlanStatus::Draft => {
            let Some(run) = latest(records, &plan.id, "plan")? else {
                return Ok(());
            };
            match run.status {
                RunStatus::Complete => set_plan(records, plan, PlanStatus::Ready, None, now, step),
                RunStatus::Failed | RunStatus::Stopped => {
                    let note = run_problem(&run);
                    set_plan(records, plan, PlanStatus::Failed, Some(note), now, step)
                }
                RunStatus::Blocked => {
                    let note = run_problem(&run);
                    set_plan(records, plan, PlanStatus::Draft, Some(note), now, step)
                }
                _ => {
                    if plan.note.is_some() {
                        set_plan(records, plan, PlanStatus::Draft, None, now, step)?;
                    }
                    Ok(())
                }
            }
        }
        PlanStatus::Ready => {
            if latest(records, &plan.id, "spec")?.is_none() {
                // The plan's own (a submitted plan document), else its plan run's.
                let (agent, priority) = match latest(records, &plan.id, "plan")? {
                    Some(r) => (
                        context::RunContext::get(&r.context.agent).map(str::to_string),
                        r.priority,
                    ),
                    None => (None, 0),
                };
                let agent = plan.agent.clone().or(agent);
                let priority = if plan.priority != 0 {
                    plan.priority
                } else {
                    priority
                };
                let ctx = context::spec_run(records.project(), &plan, agent.as_deref());
                let run = records.create_run(
                    NewRun {
                        loop_type: "spec".into(),
                        name: Some(format!("specs {}", crate::store::ids::slug_part(&plan.id))),
                        parent: Some(plan.id.clone()),
                        context: ctx.into(),
                        priority,
                        ..NewRun::default()
                    },
                    now,
                )?;
                step.notes
                    .push(format!("plan {}: spec run {} queued", plan.id, run.id));
            }
            set_plan(records, plan, PlanStatus::InProgress, None, now, step)
        }
        PlanStatus::InProgress => {
            let mut children = specs(records, &[Filter::eq("parent", plan.id.as_str())])?;
            let spec_run = latest(records, &plan.id, "spec")?;
            // Documents without their spec (a crash while they were being made): make the rest.
            if !children.is_empty()
                && spec_run
                    .as_ref()
                    .is_some_and(|r| r.status == RunStatus::Complete)
                && document_count(records.project(), &plan.id) > children.len()
            {
                match create_specs(records, &plan, now) {
                    Ok(made) if !made.is_empty() => {
                        step.notes.push(format!(
                            "plan {}: {} more spec(s) created: {}",
                            plan.id,
                            made.len(),
                            made.join(", ")
                        ));
                        children = specs(records, &[Filter::eq("parent", plan.id.as_str())])?;
                    }
                    Ok(_) => {}
                    Err(problems) => step.notes.push(format!(
                        "plan {}: the remaining spec documents: {problems}",
                        plan.id
                    )),
                }
            }
            if children.is_empty() {
                let Some(run) = spec_run else {
                    return Ok(());
                };
                return match run.status {
                    RunStatus::Complete => match create_specs(records, &plan, now) {
                        Ok(made) => {
                            step.notes.push(format!(
                                "plan {}: {} spec(s) created: {}",
                                plan.id,
                                made.len(),
                                made.join(", ")
                            ));
                            step.actions.push(Action::RemoveWorktree {
                                name: plan.id.clone(),
                            });
                            Ok(())
                        }
                        Err(problems) => set_plan(
                            records,
                            plan,
                            PlanStatus::Failed,
                            Some(format!("the spec documents do not check: {problems}")),
                            now,
                            step,
                        ),
                    },
                    RunStatus::Failed | RunStatus::Stopped => {
                        let note = run_problem(&run);
                        set_plan(records, plan, PlanStatus::Failed, Some(note), now, step)
                    }
                    _ => Ok(()),
                };
            }
            if children.iter().all(|s| s.status == SpecStatus::Complete) {
                return set_plan(records, plan, PlanStatus::Complete, None, now, step);
            }
            let failed: Vec<&str> = children
                .iter()
                .filter(|s| s.status == SpecStatus::Failed)
                .map(|s| s.id.as_str())
                .collect();
            let note = (!failed.is_empty()).then(|| format!("failed: {}", failed.join(", ")));
            set_plan(records, plan, PlanStatus::InProgress, note, now, step)
        }
        _ => Ok(()),
    }
}

/// Create the plan's specs from the spec loop's documents, deps first. Idempotent: a
/// document whose spec already exists (same file) is not created again.
fn create_specs(records: &mut Records, plan: &Plan, now: i64) -> Result<Vec<String>, String> {
    let dir = context::specs_dir(records.project(), &plan.id);
    let (set, problems) = {
        let r: &Records = records;
        let external = |dep: &str| -> std::result::Result<Option<String>, String> {
            match r.resolution(dep) {
                Resolution::Found(id)
                    if crate::store::ids::kind_of(&id) == Some(crate::store::Kind::Spec) =>
                {
                    Ok(Some(id))
                }
                Resolution::Found(_) | Resolution::NotFound { .. } => Ok(None),
                Resolution::Ambiguous(c) => Err(format!("ambiguous: {}", c.join(", "))),
            }
        };
        docs::check_specs(&dir, &external)
    };
    if !problems.is_empty() {
        return Err(problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("; "));
    }
    let existing: HashMap<String, String> =
        specs(records, &[Filter::eq("parent", plan.id.as_str())])
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|s| (s.file, s.id))
            .collect();
    let mut ids: BTreeMap<usize, String> = BTreeMap::new();
    let mut made = Vec::new();
    // Deps first: repeat passes until every document whose deps have ids is made.
    while ids.len() < set.docs.len() {
        let before = ids.len();
        for (i, doc) in set.docs.iter().enumerate() {
            if ids.contains_key(&i) {
                continue;
            }
            let mut deps = Vec::new();
            let mut ready = true;
            for d in &set.resolved[i] {
                match d {
                    DepRef::Doc(j) => match ids.get(j) {
                        Some(id) => deps.push(id.clone()),
                        None => ready = false,
                    },
                    DepRef::Record(id) => deps.push(id.clone()),
                }
            }
            if !ready {
                continue;
            }
            let file = doc.file.display().to_string();
            if let Some(id) = existing.get(&file) {
                ids.insert(i, id.clone());
                continue;
            }
            let spec = records
                .create_spec(
                    NewSpec {
                        title: doc.title.clone(),
                        parent: plan.id.clone(),
                        file: Some(file),
                        deps,
                        phases: doc.phases.clone(),
                        status: None,
                        priority: doc.priority,
                    },
                    now,
                )
                .map_err(|e| e.to_string())?;
            made.push(spec.id.clone());
            ids.insert(i, spec.id);
        }
        if ids.len() == before {
            return Err("the documents' deps make a cycle".into());
        }
    }
    Ok(made)
}

/// How many spec documents the spec loop of `plan_id` wrote.
fn document_count(project: &Path, plan_id: &str) -> usize {
    std::fs::read_dir(context::specs_dir(project, plan_id))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
                .count()
        })
        .unwrap_or(0)
}

/// The validation command a spec document names, if any.
fn doc_validate(spec: &Spec) -> Option<String> {
    let path = Path::new(&spec.file);
    let dir = path.parent()?;
    let (docs, _) = docs::read_specs(dir);
    docs.into_iter()
        .find(|d| d.file == path)
        .and_then(|d| d.validate)
}

/// The agent the plan's loops were submitted with, for its phases too.
fn plan_agent(records: &Records, plan_id: &str) -> Result<Option<String>> {
    for t in ["spec", "plan"] {
        if let Some(r) = latest(records, plan_id, t)?
            && let Some(a) = context::RunContext::get(&r.context.agent)
        {
            return Ok(Some(a.to_string()));
        }
    }
    Ok(None)
}

fn queue_phase(
    records: &mut Records,
    spec: &Spec,
    index: usize,
    after: Option<&str>,
    now: i64,
    step: &mut Step,
) -> Result<()> {
    let validate = doc_validate(spec);
    let agent = plan_agent(records, &spec.parent)?;
    let ctx = context::phase_run(spec, index, validate.as_deref(), agent.as_deref());
    let run = records.create_run(
        NewRun {
            loop_type: "phase".into(),
            name: Some(format!(
                "{} phase {}",
                crate::store::ids::slug_part(&spec.id),
                index + 1
            )),
            parent: Some(spec.id.clone()),
            deps: after.map(|a| vec![a.to_string()]).unwrap_or_default(),
            context: ctx.into(),
            priority: spec.priority,
            ..NewRun::default()
        },
        now,
    )?;
    step.notes.push(format!(
        "spec {}: phase {} of {} queued as {}",
        spec.id,
        index + 1,
        spec.phases.len().max(1),
        run.id
    ));
    Ok(())
}

fn target_of(records: &Records, spec: &Spec, default_target: &str) -> Result<String> {
    Ok(match records.get(&spec.parent)? {
        Some(AnyRecord::Plan(p)) => p
            .target_branch
            .unwrap_or_else(|| default_target.to_string()),
        _ => default_target.to_string(),
    })
}

fn advance_spec(
    records: &mut Records,
    spec: Spec,
    now: i64,
    default_target: &str,
    step: &mut Step,
) -> Result<()> {
    if spec.note.as_deref() == Some(PAUSED) {
        return set_spec(records, spec, SpecStatus::Paused, None, now, step);
    }
    let mut phase_runs: Vec<LoopRun> = runs(records, &[Filter::eq("parent", spec.id.as_str())])?
        .into_iter()
        .filter(|r| r.loop_type == crate::store::LoopKind::Phase)
        .collect();
    phase_runs.sort_by_key(|r| r.context.phase_index.unwrap_or(0));
    if phase_runs.is_empty() {
        // Not started: waiting for deps.
        let mut failed = Vec::new();
        let mut waiting = false;
        for d in &spec.deps {
            match records.get(d)? {
                Some(r) if r.is_complete() => {}
                Some(r) if matches!(r.status(), "failed" | "cancelled" | "stopped") => {
                    failed.push(format!("{d} {}", r.status()))
                }
                Some(AnyRecord::Spec(s)) if s.status == SpecStatus::Blocked => {
                    failed.push(format!("{d} blocked"))
                }
                Some(_) => waiting = true,
                None => failed.push(format!("{d} missing")),
            }
        }
        if !failed.is_empty() {
            let note = format!("dep {}", failed.join(", "));
            return set_spec(records, spec, SpecStatus::Blocked, Some(note), now, step);
        }
        if waiting {
            if spec.status == SpecStatus::Blocked {
                return set_spec(records, spec, SpecStatus::Pending, None, now, step);
            }
            return Ok(());
        }
        if spec.status == SpecStatus::Blocked
            && spec.note.as_deref().is_some_and(|n| !n.starts_with("dep "))
        {
            // Blocked for another reason (set by a person): leave it.
            return Ok(());
        }
        queue_phase(records, &spec, 0, None, now, step)?;
        return set_spec(records, spec, SpecStatus::Running, None, now, step);
    }
    if spec.status != SpecStatus::Running {
        // Blocked on a phase or a merge: a person resumes it.
        return Ok(());
    }
    let Some(last) = phase_runs.last().cloned() else {
        return Ok(());
    };
    let index = last.context.phase_index.unwrap_or(0) as usize;
    match last.status {
        RunStatus::Complete => {
            if index + 1 < spec.phases.len() {
                queue_phase(records, &spec, index + 1, Some(&last.id), now, step)
            } else {
                let target = target_of(records, &spec, default_target)?;
                step.actions.push(Action::Merge {
                    id: spec.id.clone(),
                    worktree: spec.id.clone(),
                    branch: branch_for(&spec.id),
                    target,
                });
                Ok(())
            }
        }
        RunStatus::Failed | RunStatus::Stopped => {
            let note = run_problem(&last);
            set_spec(records, spec, SpecStatus::Failed, Some(note), now, step)
        }
        RunStatus::Blocked => {
            let note = run_problem(&last);
            set_spec(records, spec, SpecStatus::Blocked, Some(note), now, step)
        }
        _ => Ok(()),
    }
}

/// How a merge of [`Action::Merge`] ended, for [`merged`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeEnd {
    /// In the target (or already there); `note` says e.g. that it was held (and `held`
    /// where).
    Done {
        note: Option<String>,
        held: Option<Held>,
    },
    /// Conflict: the files, and what to do.
    Conflict { note: String },
    /// Something else failed (git error): retried on `resume`.
    Failed { note: String },
}

/// A merge held instead of made: the work waits on `integration_branch` because the
/// target is checked out in `checkout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub integration_branch: String,
    pub checkout: std::path::PathBuf,
}

/// Record the end of a merge of `id` (a spec or a standalone run).
pub fn merged(records: &mut Records, id: &str, end: MergeEnd, now: i64) -> Result<Step> {
    let mut step = Step::default();
    match records.get(id)? {
        Some(AnyRecord::Spec(spec)) => match end {
            MergeEnd::Done { note, .. } => {
                step.actions.push(Action::RemoveWorktree {
                    name: spec.id.clone(),
                });
                set_spec(records, spec, SpecStatus::Complete, note, now, &mut step)?;
            }
            MergeEnd::Conflict { note } | MergeEnd::Failed { note } => {
                set_spec(
                    records,
                    spec,
                    SpecStatus::Blocked,
                    Some(note),
                    now,
                    &mut step,
                )?;
            }
        },
        Some(AnyRecord::Run(mut run)) => {
            let (status, note) = match end {
                MergeEnd::Done { note, .. } => {
                    step.actions.push(Action::RemoveWorktree {
                        name: run.id.clone(),
                    });
                    (RunStatus::Complete, note)
                }
                MergeEnd::Conflict { note } | MergeEnd::Failed { note } => {
                    (RunStatus::Blocked, Some(note))
                }
            };
            step.notes
                .push(format!("run {}: {} -> {status}", run.id, run.status));
            run.status = status;
            run.note = note;
            records.update(AnyRecord::Run(run), now)?;
        }
        Some(_) => {}
        None => {
            return Err(StoreError::NotFound {
                reference: id.to_string(),
                nearest: vec![],
            });
        }
    }
    Ok(step)
}

#[cfg(test)]
#[path = "cascade_tests.rs"]
mod tests;
