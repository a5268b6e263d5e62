//! The one loop every kind of run goes through: its work source says what comes next and
//! judges the claims (`source.rs`); the engine does the rest — the agents (`agents.rs`),
//! their failures and waits (`failures.rs`), the decision (`decide.rs`) and its effects
//! (`effects.rs`), the records (`record.rs`), events, state and resume. Emits
//! [`EngineEvent`]s; never prints.

pub(crate) mod outcome;
mod prompt;
mod state;

mod agents;
mod completion;
pub mod decide;
mod effects;
pub mod events;
mod evidence;
pub mod failures;
mod iteration;
mod pre_run;
pub mod ralph;
mod record;
pub mod source;
pub mod standalone;
mod watch;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

pub use events::{EngineEvent, EventSink};
pub use outcome::{Outcome, exit_code};
pub use state::{
    DEFAULT_ITERATION_TIMEOUT, DEFAULT_KILL_GRACE, DEFAULT_MAX_STALL, DEFAULT_MAX_STUCK,
    ResolveError, RunConfig, RunState, StateError,
};

pub use agents::AgentRun;
use effects::loop_snapshots;
pub use source::{SourceSpec, WorkSource};

use crate::agent::OutputFormat;
use crate::clock;
use crate::git::{Git, GitError};
use crate::guards;
use crate::loops::TemplateError;
use crate::telemetry::RunSummary;
use crate::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Prompt(#[from] prompt::PromptError),
    #[error(transparent)]
    Lifecycle(#[from] crate::lifecycle::LifecycleError),
    #[error(transparent)]
    Snapshot(#[from] crate::git::snapshot::SnapshotError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A work source's own error (a work list's file, its state); `user_fault`: the person
    /// can fix it (exit 64).
    #[error("{error}")]
    Source {
        error: Box<dyn std::error::Error + Send + Sync>,
        user_fault: bool,
    },
}

impl EngineError {
    /// Whether the person can fix it (bad input or state, a link in the repository that
    /// the harness refuses to follow out of it): exit 64.
    pub fn is_user_fault(&self) -> bool {
        matches!(
            self,
            EngineError::Source {
                user_fault: true,
                ..
            }
        ) || crate::fsutil::refusal_in(self)
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Io { what, source }
}

/// What the engine needs from its host.
#[derive(Debug, Clone)]
pub struct EngineContext {
    /// The executable that plays `script:` agents (the taskdaemon binary).
    pub script_runner: PathBuf,
    pub events: EventSink,
    /// Set: the run stops between iterations, as [`Outcome::Interrupted`] (the iteration
    /// under way finishes and counts; the daemon's graceful pause). The `cancel` token
    /// stops it at once instead.
    pub pause: CancellationToken,
}

/// How a run begins, and how many temporary files of killed writes its start removed from
/// `logs/` before the engine (while setting an earlier run's logs aside): the engine says
/// them with the ones it removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// A new run: the engine leaves `logs/` alone (its start listed it).
    New { temps_removed: usize },
    /// A run going on from a saved state: the engine removes what a kill left in `logs/`.
    Resumed { temps_removed: usize },
}

impl Begin {
    pub fn is_resumed(self) -> bool {
        matches!(self, Begin::Resumed { .. })
    }

    fn temps_removed(self) -> usize {
        match self {
            Begin::New { temps_removed } | Begin::Resumed { temps_removed } => temps_removed,
        }
    }
}

/// Run the ralph loop of `st` (its config's source is [`SourceSpec::Ralph`]) until an
/// outcome. A work list's run goes through [`run_source`] with its own source.
pub async fn run_loop(
    st: RunState,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    begin: Begin,
) -> Result<(Outcome, RunSummary), EngineError> {
    let mut source = ralph::Ralph::new(&st.config, ws)?;
    run_source(st, &mut source, ws, ctx, cancel, begin).await
}

/// Run `st` with its work source until an outcome: the engine's one loop. State is saved
/// after every iteration.
pub async fn run_source<S: WorkSource>(
    mut st: RunState,
    source: &mut S,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    begin: Begin,
) -> Result<(Outcome, RunSummary), EngineError> {
    let resumed = begin.is_resumed();
    let cfg = st.config.clone();
    let git = Git::new(&cfg.workdir);
    let session = Instant::now();
    let earlier = Duration::from_millis(st.elapsed_ms);
    st.outcome = None;
    announce(&st, resumed, ctx, source);
    start_checks(&st, &git, ws, begin, ctx)?;
    if st.iterations_done == 0 && st.start_head.is_none() {
        st.start_head = git.head()?;
    }
    st.save_start(ws)?;
    let mut refused = preflight(&cfg, ctx);
    if refused.is_none() {
        if !st.uncommitted_checked && st.iterations_done == 0 {
            // The user's uncommitted work, saved before the source or an agent commits
            // (once: the record says it was, before any agent starts).
            refused = pre_run::save_uncommitted(&st, &git, ctx, cancel)?;
            if refused.is_none() {
                st.uncommitted_checked = true;
                st.save_start(ws)?;
            }
        }
        if refused.is_none() {
            refused = source.start(&mut st, resumed, ctx, cancel).await?;
        }
        if !resumed {
            // What the source committed at its start (a work list's progress file) is not
            // the agents' progress.
            st.last_head = git.head()?;
        }
    }
    // The last iteration's log and CSV row: synced with the state's next save.
    let mut pending = crate::fsutil::PendingSyncs::default();

    let outcome = loop {
        if let Some(o) = refused.take() {
            break o;
        }
        if cancel.is_cancelled() || ctx.pause.is_cancelled() {
            break Outcome::Interrupted;
        }
        // A usage limit's reset or a backoff (also one a resumed run was waiting for), or
        // the quota governor's pause of every loop on this account.
        failures::governed(&mut st);
        if st.failures.wait_until.is_some() {
            let stop = either(cancel, &ctx.pause);
            // Ends the task that watches the pause token, however the wait ends.
            let _watched = stop.clone().drop_guard();
            if !failures::wait(&mut st, ws, ctx, &stop).await? {
                break Outcome::Interrupted;
            }
        }
        let elapsed = earlier + session.elapsed();
        if let Some(o) = at_limit(&st, &cfg, elapsed) {
            break o;
        }
        let mut it = iteration::Iter {
            n: st.iterations_done + 1,
            remaining: cfg.max_runtime().map(|m| m.saturating_sub(elapsed)),
            st: &mut st,
            cfg: &cfg,
            ws,
            git: &git,
            ctx,
            cancel,
            pending: &mut pending,
        };
        // An iteration that ends the run, or leaves it at a limit, is saved once, below,
        // with the outcome: nothing happens between the two saves that a crash could split.
        let ended = iteration::iteration(&mut it, source).await;
        // Ended on an error after its row or log was written: they go to disk anyway.
        let ended = ended.inspect_err(|_| {
            let _ = std::mem::take(&mut pending).sync_now();
        })?;
        if let Some(o) = ended {
            break o;
        }
        let elapsed = earlier + session.elapsed();
        if let Some(o) = at_limit(&st, &cfg, elapsed) {
            break o;
        }
        st.elapsed_ms = elapsed.as_millis() as u64;
        st.save_after(ws, std::mem::take(&mut pending))?;
    };

    st.elapsed_ms = (earlier + session.elapsed()).as_millis() as u64;
    st.outcome = Some(outcome.clone());
    st.updated_at = clock::now_rfc3339();
    st.save_after(ws, pending)?;
    let ending = source.finish(&st, &outcome, ctx)?;
    let mut summary = summarize(&st, &outcome, ws, source);
    if let Some(detail) = ending.detail {
        summary.detail = detail;
    }
    ctx.events.emit(EngineEvent::RunFinished {
        summary: summary.clone(),
    });
    source.finished(&outcome, &summary.detail, ctx);
    Ok((outcome, summary))
}

/// A token cancelled when `a` or `b` is (a wait between iterations ends on a pause too);
/// cancelling it ends the task that watches `b`.
fn either(a: &CancellationToken, b: &CancellationToken) -> CancellationToken {
    let out = a.child_token();
    if b.is_cancelled() {
        out.cancel();
        return out;
    }
    let (b, o) = (b.clone(), out.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = b.cancelled() => o.cancel(),
            _ = o.cancelled() => {}
        }
    });
    out
}

/// The run's start, announced.
fn announce<S: WorkSource>(st: &RunState, resumed: bool, ctx: &EngineContext, source: &S) {
    let cfg = &st.config;
    ctx.events.emit(EngineEvent::RunStarted {
        run_id: st.run_id.clone(),
        loop_type: cfg.loop_name.clone(),
        agent: cfg.agent.label(),
        workdir: cfg.workdir.display().to_string(),
        first_iteration: st.iterations_done + 1,
        max_iterations: cfg.max_iterations,
        validate: cfg.validate.clone(),
        resumed,
        sandbox: cfg.sandbox.label(),
        work: source.describe(resumed),
    });
}

/// Patterns for one line: all of three or fewer, else the first two and how many more.
fn few(patterns: &[String]) -> String {
    match patterns {
        [] | [_] | [_, _] | [_, _, _] => patterns.join(" "),
        [a, b, rest @ ..] => format!("{a} {b} and {} more patterns", rest.len()),
    }
}

/// What every run checks at its start: runtime files excluded from git, a cost limit the
/// agent cannot trigger, temporary files and git locks a killed run left.
fn start_checks(
    st: &RunState,
    git: &Git,
    ws: &Workspace,
    begin: Begin,
    ctx: &EngineContext,
) -> Result<(), EngineError> {
    let cfg = &st.config;
    let added = git.ensure_excluded(crate::workspace::IGNORED)?;
    if !added.is_empty() {
        warn(
            ctx,
            &format!(
                "added {} to .git/info/exclude so runtime files are never committed (`taskdaemon init` puts them in .gitignore)",
                few(&added)
            ),
        );
    }
    if cfg.max_cost.is_some() && cfg.agent_format == OutputFormat::Text {
        warn(
            ctx,
            "--max-cost is set but this agent's plain-text output reports no cost; the limit cannot trigger",
        );
    }
    let cleaned = state::clean_temp_files(ws, begin.is_resumed()) + begin.temps_removed();
    if cleaned > 0 {
        warn(
            ctx,
            &format!("removed {cleaned} temporary file(s) of writes a stopped run left unfinished"),
        );
    }
    // No agent of this run has started: a git lock nobody holds is one a killed git left.
    for m in crate::git::stale_locks::clear(&*git.facts()?, std::time::SystemTime::now()) {
        warn(
            ctx,
            &format!(
                "moved {} to {}: a git process that was killed left this lock, and while it was there no commit could be made",
                m.from.display(),
                m.to.display()
            ),
        );
    }
    Ok(())
}

/// The outcome of a run that has reached one of its limits (iterations, runtime, cost).
fn at_limit(st: &RunState, cfg: &RunConfig, elapsed: Duration) -> Option<Outcome> {
    guards::limit_reached(
        st.iterations_done,
        cfg.max_iterations,
        elapsed,
        cfg.max_runtime(),
        st.cost_usd,
        cfg.max_cost,
    )
    .map(|limit| Outcome::LimitReached { limit })
}

fn warn(ctx: &EngineContext, message: &str) {
    ctx.events.emit(EngineEvent::Warning {
        message: message.to_string(),
    });
}

fn counters(st: &RunState) -> decide::Counters {
    decide::Counters {
        stuck: st.stuck_count,
        stall: st.stall_count,
        last_signature: st.last_signature.clone(),
        stall_recoveries: st.stall_recoveries,
    }
}

fn policy(cfg: &RunConfig) -> decide::Policy {
    decide::Policy {
        max_iterations: cfg.max_iterations,
        max_cost: cfg.max_cost,
        max_stuck: cfg.max_stuck,
        max_stall: cfg.max_stall,
        promise_required: cfg.completion_promise.is_some(),
        has_validation: cfg.validate.is_some(),
    }
}

/// What the preflight would refuse a run of `cfg` for (an agent that cannot start, a
/// validation program that does not exist), without its warnings: asked before a new run
/// replaces an unfinished one.
pub fn preflight_refusal(cfg: &RunConfig) -> Option<Outcome> {
    preflight(
        cfg,
        &EngineContext {
            script_runner: std::path::PathBuf::new(),
            events: EventSink::none(),
            pause: CancellationToken::new(),
        },
    )
}

/// Before iteration 1: an agent that cannot start or a validation program that does not
/// exist ends the run at once (exit 64); doubts are warnings.
fn preflight(cfg: &RunConfig, ctx: &EngineContext) -> Option<Outcome> {
    use crate::agent::preflight::Finding;
    let found = crate::agent::preflight::preflight_sandboxed(
        &cfg.agent,
        cfg.validate.as_deref(),
        &cfg.workdir,
        &cfg.sandbox,
    );
    let mut refused = None;
    for f in found {
        match f {
            Finding::Warning(m) => warn(ctx, &m),
            Finding::AgentRefused { message, hint } => {
                refused.get_or_insert(Outcome::AgentFailed {
                    class: crate::agent::FailureClass::CouldNotStart,
                    reason: format!("the agent cannot start: {message}\n  hint: {hint}"),
                });
            }
            Finding::ValidationMissing { program } => {
                refused.get_or_insert(Outcome::ValidationMissing {
                    command: cfg.validate.clone().unwrap_or_default(),
                    output: format!("`{program}` is not on PATH"),
                });
            }
        }
    }
    refused
}

fn summarize<S: WorkSource>(
    st: &RunState,
    outcome: &Outcome,
    ws: &Workspace,
    source: &S,
) -> RunSummary {
    RunSummary {
        run_id: st.run_id.clone(),
        exit_label: outcome.label().to_string(),
        exit_code: outcome.exit_code(),
        detail: outcome.detail(),
        iterations: st.iterations_done,
        max_iterations: st.config.max_iterations,
        duration_ms: st.elapsed_ms,
        avg_iteration_ms: st
            .elapsed_ms
            .checked_div(u64::from(st.iterations_done))
            .unwrap_or(0),
        stuck_iterations: st.stuck_iterations,
        stuck_count: st.stuck_count,
        work: source.tally(),
        cost_usd: st.cost_reported.then_some(st.cost_usd),
        tokens_in: st.tokens_in,
        tokens_out: st.tokens_out,
        summary_csv: ws.summary_csv(),
        logs_dir: ws.logs_dir(),
        outcome: Some(outcome.clone()),
    }
}

#[cfg(test)]
mod either_tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_on_a_stop_or_a_pause_and_its_watcher_with_it() {
        let (stop, pause) = (CancellationToken::new(), CancellationToken::new());
        let w = either(&stop, &pause);
        assert!(!w.is_cancelled());
        pause.cancel();
        w.cancelled().await;
        let (stop, pause) = (CancellationToken::new(), CancellationToken::new());
        let w = either(&stop, &pause);
        stop.cancel();
        assert!(w.is_cancelled());
        // Paused before the wait: it does not start.
        pause.cancel();
        let w = either(&CancellationToken::new(), &pause);
        assert!(w.is_cancelled());
    }
}
