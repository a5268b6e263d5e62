//! An `implement` run under the daemon: a spec directory's `tasks.md` worked through in
//! the run's worktree by the work-list loop, its `[P]` groups in parallel worktrees, the
//! result merged like any standalone run. [`start_worklist`] is the one call into
//! `worklist/`, so the engine's work sources can take its place.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::events::{DaemonEvent, Subject};
use super::executor::{Launch, Report, Shared};
use crate::agent::AgentSpec;
use crate::config;
use crate::engine::{DEFAULT_ITERATION_TIMEOUT, DEFAULT_KILL_GRACE, Outcome};
use crate::scheduler::context::{self, branch_for};
use crate::worklist::{self, AgentSetup, ImplementConfig, WorklistEvent, WorklistSink};

/// The context key of an implement run: its spec directory, relative to the repository.
pub const SPEC_DIR: &str = "spec-dir";
/// Attempts per task before the run fails (as `implement`'s default).
const MAX_TASK_ITERATIONS: u32 = 5;
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Run the implement run `l` to an outcome.
pub async fn execute(
    shared: &Arc<Shared>,
    l: &Launch,
    cancel: &CancellationToken,
    tx: &UnboundedSender<Report>,
) -> Result<Outcome, String> {
    let cfg = {
        let (shared, l) = (shared.clone(), l.clone());
        tokio::task::spawn_blocking(move || {
            let start = crate::git::integrate::start_point(&shared.worktrees, &l.start);
            let path = shared
                .worktrees
                .ensure(&l.worktree, &branch_for(&l.worktree), &start)
                .map_err(|e| e.to_string())?;
            config_for(&shared, &path, &l)
        })
        .await
        .map_err(|e| format!("preparing the run: {e}"))??
    };
    let (announced, run_started) = tokio::sync::oneshot::channel();
    let _ = tx.send(Report::Started {
        run_id: l.run.id.clone(),
        worktree: cfg.repo.clone(),
        first_iteration: 1,
        resumed: false,
        announced,
    });
    let _lock = worklist::lock::acquire(&cfg.spec_dir).map_err(|e| e.to_string())?;
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
    let forward = {
        let events = shared.events.clone();
        let subject = l.subject.clone();
        tokio::spawn(async move {
            // After `run-started` (see `Report::Started`).
            let _ = run_started.await;
            while let Some(e) = erx.recv().await {
                if let Some(d) = daemon_event(&subject, &e) {
                    events.emit(d);
                }
            }
        })
    };
    let result = start_worklist(&cfg, WorklistSink::new(etx), cancel).await;
    let _ = forward.await;
    result
}

/// The work list's entry point (today `worklist::implement`).
async fn start_worklist(
    cfg: &ImplementConfig,
    sink: WorklistSink,
    cancel: &CancellationToken,
) -> Result<Outcome, String> {
    worklist::implement(cfg, &sink, cancel)
        .await
        .map(|r| r.outcome)
        .map_err(|e| e.to_string())
}

/// What a work-list event tells the subscribers: a note per task started and finished.
fn daemon_event(subject: &Subject, e: &WorklistEvent) -> Option<DaemonEvent> {
    let message = match e {
        WorklistEvent::TaskStarted {
            task_id,
            title,
            role,
            attempt,
            ..
        } => format!(
            "run {}: task {task_id} ({title}) {role}, attempt {attempt}",
            subject.run
        ),
        WorklistEvent::Warning { message } => format!("run {}: {message}", subject.run),
        _ => return None,
    };
    Some(DaemonEvent::Note {
        repo: subject.repo.clone(),
        warning: matches!(e, WorklistEvent::Warning { .. }),
        message,
    })
}

/// The work list's configuration: the spec directory inside the run's worktree, and the
/// agent (the run's, the daemon's `--agent`, else the project's settings).
fn config_for(shared: &Shared, worktree: &Path, l: &Launch) -> Result<ImplementConfig, String> {
    let project = &shared.paths.project;
    let s = config::load_layers(project, shared.config.as_deref())
        .map_err(|e| e.to_string())?
        .settings;
    let rel = context::RunContext::get(&l.run.context.spec_dir)
        .ok_or_else(|| format!("run {} names no {SPEC_DIR}", l.run.id))?;
    let spec_dir = worktree.join(rel);
    crate::store::paths::inside(rel, worktree).map_err(|why| format!("{SPEC_DIR} {rel}: {why}"))?;
    let agent = context::RunContext::get(&l.run.context.agent)
        .or(shared.default_agent.as_deref())
        .map(str::to_string)
        .or(s.agent.clone());
    let spec = match agent {
        Some(a) => AgentSpec::parse(&a).map_err(|e| e.to_string())?,
        None => AgentSpec::detect().map_err(|e| e.to_string())?,
    };
    let spec = spec.absolutize(project);
    // The run's own sandbox (`submit --sandbox`), else the daemon's, else the config's.
    let mut sandbox_settings = s.sandbox_settings();
    match context::RunContext::get(&l.run.context.sandbox) {
        Some(k) => sandbox_settings.sandbox = Some(crate::sandbox::SandboxKind::parse(k)?),
        None => sandbox_settings.sandbox = shared.default_sandbox.or(sandbox_settings.sandbox),
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let sandbox = crate::sandbox::SandboxPlan::resolve(&sandbox_settings, &spec, home.as_deref())
        .map_err(|e| e.to_string())?;
    crate::sandbox::check_available(&sandbox).map_err(|e| e.to_string())?;
    Ok(ImplementConfig {
        spec_dir,
        repo: worktree.to_path_buf(),
        setup: AgentSetup {
            sandbox,
            format: spec.default_format(),
            agent: spec,
            script_runner: shared.script_runner.clone(),
            timeout: Some(
                s.iteration_timeout
                    .map(|d| d.0)
                    .unwrap_or(DEFAULT_ITERATION_TIMEOUT),
            ),
            grace: s.kill_grace.map(|d| d.0).unwrap_or(DEFAULT_KILL_GRACE),
        },
        max_task_iterations: MAX_TASK_ITERATIONS,
        verify_timeout: Some(VERIFY_TIMEOUT),
        allow_test_changes: s.allow_test_changes.unwrap_or(false),
        limits: crate::worklist::Limits {
            max_cost: s.max_cost,
            max_runtime: s.max_runtime.map(|d| d.0),
            max_stuck: s.max_stuck.unwrap_or(crate::engine::DEFAULT_MAX_STUCK),
            ..Default::default()
        },
    })
}
