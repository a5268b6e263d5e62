//! Runs one loop: render prompt → agent → signals → gates → guards → decide → record.
//! Emits [`EngineEvent`]s; never prints.

mod outcome;
mod prompt;
mod state;

mod completion;
pub mod decide;
pub mod events;
mod evidence;
pub mod failures;
pub mod standalone;
mod watch;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

pub use events::{EngineEvent, EventSink};
pub use outcome::{Outcome, exit_code};
pub use state::{
    DEFAULT_ITERATION_TIMEOUT, DEFAULT_KILL_GRACE, DEFAULT_MAX_STALL, DEFAULT_MAX_STUCK,
    ResolveError, RunConfig, RunState, StateError,
};

use crate::agent::{OutputFormat, ProcessSpec, step};
use crate::clock;
use crate::duration::format_duration;
use crate::gates::evidence::{Tally, TallyLines};
use crate::gates::{Validation, run_validation};
use crate::git::snapshot::Snapshots;
use crate::git::{Git, GitError};
use crate::guards;
use crate::lifecycle::stall;
use crate::loops::{PromptTemplate, TemplateError};
use crate::signals::{self, Signal};
use crate::telemetry::{IterationLog, RunSummary, SummaryRow, count_stories, write_row_deferred};
use crate::workspace::{StoppedLoop, Workspace, WorkspaceError};

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

/// Run the loop of `st` until an outcome. State is saved after every iteration.
pub async fn run_loop(
    mut st: RunState,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    begin: Begin,
) -> Result<(Outcome, RunSummary), EngineError> {
    let resumed = begin.is_resumed();
    let cfg = st.config.clone();
    let template = PromptTemplate::compile(&cfg.loop_name, &cfg.loop_def.prompt_template)?;
    let git = Git::new(&cfg.workdir);
    let session = Instant::now();
    let earlier = Duration::from_millis(st.elapsed_ms);
    st.outcome = None;
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
    });
    let added = git.ensure_excluded(crate::workspace::IGNORED)?;
    if !added.is_empty() {
        warn(
            ctx,
            &format!(
                "added {} to .git/info/exclude so runtime files are never committed (`taskdaemon init` puts them in .gitignore)",
                added.join(" ")
            ),
        );
    }
    if cfg.validate.is_none() {
        warn(
            ctx,
            "no validation command: the agent's COMPLETE promise will end the loop unverified (set --validate)",
        );
    }
    if cfg.max_cost.is_some() && cfg.agent_format == OutputFormat::Text {
        warn(
            ctx,
            "--max-cost is set but this agent's plain-text output reports no cost; the limit cannot trigger",
        );
    }
    let cleaned = state::clean_temp_files(ws, resumed) + begin.temps_removed();
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
    if st.iterations_done == 0 && st.start_head.is_none() {
        st.start_head = git.head()?;
    }
    st.save_start(ws)?;
    let mut refused = preflight(&cfg, ctx);
    if refused.is_none() {
        evidence::record(&mut st, resumed, ctx, cancel).await?;
    }
    // The last iteration's log and CSV row: synced with the state's next save.
    let mut pending = crate::fsutil::PendingSyncs::default();

    let outcome = loop {
        if let Some(o) = refused.take() {
            break o;
        }
        if cancel.is_cancelled() {
            break Outcome::Interrupted;
        }
        // A usage limit's reset or a backoff (also one a resumed run was waiting for), or
        // the quota governor's pause of every loop on this account.
        failures::governed(&mut st);
        if st.failures.wait_until.is_some() && !failures::wait(&mut st, ws, ctx, cancel).await? {
            break Outcome::Interrupted;
        }
        let elapsed = earlier + session.elapsed();
        if let Some(o) = at_limit(&st, &cfg, elapsed) {
            break o;
        }
        let n = st.iterations_done + 1;
        let remaining = cfg.max_runtime().map(|m| m.saturating_sub(elapsed));
        // An iteration that ends the run, or leaves it at a limit, is saved once, below,
        // with the outcome: nothing happens between the two saves that a crash could split.
        let ended = iteration(
            &mut st,
            &cfg,
            n,
            remaining,
            &template,
            ws,
            &git,
            ctx,
            cancel,
            &mut pending,
        )
        .await;
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
    if matches!(outcome, Outcome::Complete { .. }) {
        evidence::forget(&st);
    }
    let summary = summarize(&st, &outcome, ws);
    ctx.events.emit(EngineEvent::RunFinished {
        summary: summary.clone(),
    });
    Ok((outcome, summary))
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

/// One iteration. Returns the loop's outcome when this iteration ends it.
#[allow(clippy::too_many_arguments)]
async fn iteration(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    remaining_runtime: Option<Duration>,
    template: &PromptTemplate,
    ws: &Workspace,
    git: &Git,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    pending: &mut crate::fsutil::PendingSyncs,
) -> Result<Option<Outcome>, EngineError> {
    let started = Instant::now();
    let started_at = clock::now_rfc3339();

    let phase_note = phase_step(st, cfg, n, ws, ctx)?;
    let written = write_prompt(st, n, template, ws, git)?;
    completion::take_answer(st, written.answer.as_deref());
    let log_path = ws.iteration_log(n);
    let mut log = open_log(
        st,
        cfg,
        n,
        &started_at,
        &written,
        phase_note.as_deref(),
        &log_path,
        ctx,
    )?;

    let ran = match run_agent(
        st,
        cfg,
        n,
        remaining_runtime,
        &written,
        &mut log,
        ctx,
        cancel,
    )
    .await?
    {
        Spawned::Ran(ran) => *ran,
        Spawned::CouldNotStart(spec, e) => return could_not_spawn(cfg, &spec, e, log, ctx, n),
    };
    account_agent(st, n, &ran, written.decision.is_some(), ws, &mut log, ctx)?;

    let head = git.head()?;
    let new_commit = head.is_some() && head != st.last_head;
    let no_work = match judge_agent(
        st,
        cfg,
        n,
        &ran.agent,
        &ran.parsed,
        new_commit,
        &mut log,
        ctx,
    ) {
        failures::Verdict::Proceed => None,
        failures::Verdict::NoWork { reason } => Some(reason),
        failures::Verdict::Stop(o) => {
            log.finish()
                .map_err(io_err(format!("writing {}", log_path.display())))?;
            return Ok(Some(o));
        }
        failures::Verdict::Retry => {
            log.finish()
                .map_err(io_err(format!("writing {}", log_path.display())))?;
            return Ok(None);
        }
    };

    let (ev, validation_time) = gather(
        st,
        cfg,
        n,
        &ran,
        no_work,
        &head,
        &written.prompt,
        &mut log,
        ctx,
        cancel,
        ws,
    )
    .await?;
    let d = decide::decide(&ev, &counters(st), &policy(cfg));
    let d = apply(st, cfg, n, ws, &ran, d, &mut log, ctx, cancel)?;
    st.last_head = head.clone();
    st.iterations_done = n;

    let commit = new_commit.then(|| head.clone().unwrap_or_default());
    let short = commit.as_deref().map(|c| c[..c.len().min(12)].to_string());
    record_progress(st, n, started, &ran, &d, short.as_deref());
    let duration = started.elapsed();
    record_row(
        st, cfg, n, duration, started_at, &ran, &d, &short, ws, pending,
    )?;
    finish_iteration(
        st,
        cfg,
        n,
        duration,
        &ran,
        d,
        validation_time,
        short,
        log,
        &log_path,
        pending,
        ctx,
    )
}

/// Spec 4: in the plan phase a plan with content is validated first; valid → build.
/// Returns the note for the iteration's log.
fn phase_step(
    st: &RunState,
    cfg: &RunConfig,
    n: u32,
    ws: &Workspace,
    ctx: &EngineContext,
) -> Result<Option<String>, EngineError> {
    let step = crate::gates::phase::at_iteration_top(&cfg.workdir, &ws.feedback_file(), st.task)
        .map_err(io_err(
            "checking the plan phase (.ralph/phase.txt, the plan)",
        ))?;
    Ok(match step {
        crate::gates::phase::PhaseStep::Inert => None,
        crate::gates::phase::PhaseStep::Flipped { plan } => {
            let message = format!("{} is valid: the phase is now build", plan.display());
            ctx.events.emit(EngineEvent::Gate {
                iteration: n,
                gate: "phase".into(),
                passed: true,
                severity: crate::gates::scope::Severity::Hard,
                message: message.clone(),
            });
            Some(message)
        }
        crate::gates::phase::PhaseStep::Invalid { plan, problems } => {
            let message = format!(
                "{} has {} problem(s): still in the plan phase (see .ralph/feedback.md)",
                plan.display(),
                problems.len()
            );
            ctx.events.emit(EngineEvent::Gate {
                iteration: n,
                gate: "phase".into(),
                passed: false,
                severity: crate::gates::scope::Severity::Soft,
                message: message.clone(),
            });
            Some(message)
        }
    })
}

/// The iteration's prompt as rendered and written.
struct WrittenPrompt {
    prompt: String,
    path: PathBuf,
    /// A human's answer to an earlier DECIDE, as it went into the prompt.
    decision: Option<String>,
    /// The answer alone.
    answer: Option<String>,
}

/// Render the prompt (with a human's answer to an earlier DECIDE) and write it.
fn write_prompt(
    st: &RunState,
    n: u32,
    template: &PromptTemplate,
    ws: &Workspace,
    git: &Git,
) -> Result<WrittenPrompt, EngineError> {
    if st.task.is_some() {
        crate::lifecycle::note_iteration(ws, n)?;
    }
    // A human's answer to an earlier DECIDE goes into this prompt.
    let decide = ws.read_decide()?;
    let decision = decide.as_ref().and_then(|d| {
        d.answer
            .as_ref()
            .map(|a| format!("Question: {}\nAnswer: {}", d.question, a))
    });
    let vars = prompt::variables(template, st, n, decision.as_deref(), ws, git)?;
    let prompt = template.render(&vars)?;
    // Written by the agent step.
    let path = ws.prompt_file(n);
    Ok(WrittenPrompt {
        prompt,
        path,
        decision,
        answer: decide.and_then(|d| d.answer),
    })
}

/// Create the iteration's log and announce the iteration.
#[allow(clippy::too_many_arguments)]
fn open_log(
    st: &RunState,
    cfg: &RunConfig,
    n: u32,
    started_at: &str,
    written: &WrittenPrompt,
    phase_note: Option<&str>,
    log_path: &std::path::Path,
    ctx: &EngineContext,
) -> Result<IterationLog, EngineError> {
    let mut log = IterationLog::create(log_path, cfg.max_log_bytes)
        .map_err(io_err(format!("creating {}", log_path.display())))?;
    log.note(&format!(
        "run {} iteration {n}/{} started {started_at}; agent {}; prompt {} ({} bytes)",
        st.run_id,
        cfg.max_iterations,
        cfg.agent.label(),
        written.path.display(),
        written.prompt.len()
    ));
    if let Some(note) = phase_note {
        log.note(note);
    }
    log.keep(&written.path, written.prompt.as_bytes());
    ctx.events.emit(EngineEvent::IterationStarted {
        iteration: n,
        max_iterations: cfg.max_iterations,
        prompt_bytes: written.prompt.len(),
        log: log_path.display().to_string(),
    });
    Ok(log)
}

/// What running the agent left for the rest of the iteration.
struct AgentRun {
    agent: crate::agent::ProcessResult,
    parsed: crate::agent::ParsedOutput,
    /// The agent's environment; the validation command gets the same.
    env: Vec<(OsString, OsString)>,
    /// The iteration's timeout, and whether the run's remaining runtime set it.
    timeout: Option<Duration>,
    cut_by_runtime: bool,
}

/// The agent ran, or could not be started.
enum Spawned {
    Ran(Box<AgentRun>),
    CouldNotStart(ProcessSpec, std::io::Error),
}

/// Run the agent (one [`crate::agent::step`]) with the quiet watcher (quiet warning,
/// no-progress deadline) beside it.
#[allow(clippy::too_many_arguments)]
async fn run_agent(
    st: &RunState,
    cfg: &RunConfig,
    n: u32,
    remaining_runtime: Option<Duration>,
    written: &WrittenPrompt,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Spawned, EngineError> {
    let (timeout, cut_by_runtime) = match (cfg.iteration_timeout(), remaining_runtime) {
        (Some(t), Some(r)) if r < t => (Some(r), true),
        (None, Some(r)) => (Some(r), true),
        (t, _) => (t, false),
    };
    let env = agent_env(st, n, &written.path, &ctx.script_runner);
    if let crate::agent::AgentSpec::Api { provider, model } = &cfg.agent {
        // A direct API agent: a conversation instead of a process, same results.
        let it = crate::agent::api::Iteration {
            provider: *provider,
            model,
            settings: &cfg.api,
            system: cfg.loop_def.system_prompt.as_deref(),
            prompt: &written.prompt,
            workdir: &cfg.workdir,
            env: env.clone(),
            harness: &ctx.script_runner,
            timeout,
            grace: cfg.kill_grace(),
        };
        let events = &ctx.events;
        let (agent, parsed) = crate::agent::api::run_iteration(
            it,
            cancel,
            |line| log.output(crate::agent::Stream::Stdout, line.as_bytes()),
            |activity| {
                events.emit(EngineEvent::Agent {
                    iteration: n,
                    activity,
                })
            },
        )
        .await;
        return Ok(Spawned::Ran(Box::new(AgentRun {
            agent,
            parsed,
            env,
            timeout,
            cut_by_runtime,
        })));
    }
    let req = step::StepRequest {
        agent: &cfg.agent,
        format: cfg.agent_format,
        system_prompt: cfg.loop_def.system_prompt.as_deref(),
        script_runner: &ctx.script_runner,
        prompt: &written.prompt,
        prompt_file: &written.path,
        cwd: &cfg.workdir,
        env: env.clone(),
        timeout,
        grace: cfg.kill_grace(),
        sandbox: &cfg.sandbox,
    };
    let mut denied = crate::sandbox::DeniedWrites::new(&cfg.workdir);
    let events = &ctx.events;
    let watch = watch::Watch::new();
    let notes = std::sync::Mutex::new(Vec::<String>::new());
    let drain = || std::mem::take(&mut *notes.lock().unwrap_or_else(|e| e.into_inner()));
    let agent_cancel = cancel.child_token();
    let running = step::run_step(&req, log, &agent_cancel, |log, stream, text, acts| {
        for note in drain() {
            log.note(&note);
        }
        denied.line(text);
        watch.line(text, stream == crate::agent::Stream::Stdout, &acts);
        for activity in acts {
            events.emit(EngineEvent::Agent {
                iteration: n,
                activity,
            });
        }
    });
    let p = &cfg.failure_policy;
    let quiet = (p.quiet_warning_ms > 0).then(|| Duration::from_millis(p.quiet_warning_ms));
    let deadline = (p.no_progress_ms > 0).then(|| Duration::from_millis(p.no_progress_ms));
    let ran = tokio::select! {
        r = running => r,
        never = watch.run(n, quiet, deadline, events, &agent_cancel, &notes) => match never {},
    };
    for note in drain() {
        log.note(&note);
    }
    if let Some(note) = denied.note() {
        log.note(&note);
        warn(ctx, &format!("iteration {n}: {note}"));
    }
    let step = match ran {
        Ok(s) => s,
        Err(step::StepError::Spawn { spec, source }) => {
            return Ok(Spawned::CouldNotStart(*spec, source));
        }
        Err(e @ step::StepError::Prompt { .. }) => {
            return Err(EngineError::Io {
                what: "writing the prompt".into(),
                source: std::io::Error::other(e.to_string()),
            });
        }
    };
    let mut agent = step.process;
    if watch.stopped().is_some() && !cancel.is_cancelled() {
        // Stopped by the no-progress deadline: a timeout, not a person's interrupt.
        agent.interrupted = false;
        agent.timed_out = true;
    }
    Ok(Spawned::Ran(Box::new(AgentRun {
        agent,
        parsed: step.parsed,
        env,
        timeout,
        cut_by_runtime,
    })))
}

/// After the agent: its impossible values, its cost and tokens, its log line and event,
/// and the answered DECIDE archived.
fn account_agent(
    st: &mut RunState,
    n: u32,
    ran: &AgentRun,
    had_decision: bool,
    ws: &Workspace,
    log: &mut IterationLog,
    ctx: &EngineContext,
) -> Result<(), EngineError> {
    let (agent, parsed) = (&ran.agent, &ran.parsed);
    for r in &parsed.rejected {
        let m = format!("iteration {n}: ignored an impossible value the agent reported: {r}");
        log.note(&m);
        warn(ctx, &m);
    }
    if let Some(c) = parsed.cost_usd {
        st.cost_usd += c;
        st.cost_reported = true;
    }
    st.tokens_in = st.tokens_in.saturating_add(parsed.tokens_in.unwrap_or(0));
    st.tokens_out = st.tokens_out.saturating_add(parsed.tokens_out.unwrap_or(0));
    let agent_code = agent.status.code();
    log.note(&format!(
        "agent exited with {agent_code} after {}{}{}; {} tool calls{}",
        format_duration(agent.duration),
        if agent.timed_out {
            " (timed out: process group stopped)"
        } else {
            ""
        },
        if agent.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        parsed.tool_calls,
        if agent.leftovers_ended {
            "; background processes it left were ended"
        } else {
            ""
        },
    ));
    ctx.events.emit(EngineEvent::AgentFinished {
        iteration: n,
        exit_code: agent_code,
        timed_out: agent.timed_out,
        interrupted: agent.interrupted,
        duration_ms: agent.duration.as_millis() as u64,
        tool_calls: parsed.tool_calls,
        cost_usd: parsed.cost_usd,
    });
    if had_decision
        && !agent.interrupted
        && let Some(p) = ws.archive_decide(&clock::now().as_second().to_string())?
    {
        log.note(&format!(
            "the answered question was archived to {}",
            p.display()
        ));
    }
    Ok(())
}

/// The evidence of the iteration after the agent: its promise, the validation and the
/// completion gates (each run only when the evidence so far calls for it). Effects only:
/// logs, events, the commands; what it all means is [`decide::decide`]'s.
#[allow(clippy::too_many_arguments)]
async fn gather(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    ran: &AgentRun,
    no_work: Option<String>,
    head: &Option<String>,
    prompt: &str,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    ws: &Workspace,
) -> Result<(decide::Evidence, Duration), EngineError> {
    let mut ev = decide::Evidence {
        iteration: n,
        interrupted: ran.agent.interrupted,
        timed_out: ran.agent.timed_out,
        cut_by_runtime: ran.cut_by_runtime,
        timeout: ran.timeout,
        no_work,
        head_before: st.last_head.clone(),
        head_after: head.clone(),
        tool_signature: ran.parsed.tool_signature.clone(),
        ..decide::Evidence::default()
    };
    let mut validation_time = Duration::ZERO;
    let mut tally = None;
    if let Some(reason) = &ev.no_work {
        log.note(reason);
    }
    if !ev.interrupted && !ev.timed_out && ev.no_work.is_none() {
        ev.signal = signals_step(cfg, n, &ran.parsed, prompt, log, ctx);
        if !matches!(ev.signal, Some(Signal::Blocked(_) | Signal::Decide(_))) {
            let claimed = ev.signal == Some(Signal::Complete);
            let (v, t, counted) =
                validate_step(cfg, n, claimed, ran.env.clone(), log, ctx, cancel).await?;
            ev.validation = Some(v);
            validation_time = t;
            tally = counted;
        }
    }
    if decide::completing(&ev, &policy(cfg)).is_some() {
        ev.gates = Some(completion_step(st, n, tally, ws, log, ctx, cancel).await?);
    }
    ev.cost_usd = st.cost_usd;
    Ok((ev, validation_time))
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

/// Carry out the decision: the counters and feedback into the state, BLOCKED / DECIDE
/// written for a person, the stall guard's snapshot or rollback.
#[allow(clippy::too_many_arguments)]
fn apply(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    ws: &Workspace,
    ran: &AgentRun,
    mut d: decide::Decision,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<decide::Decision, EngineError> {
    let before = counters(st);
    st.stuck_count = d.counters.stuck;
    st.stall_count = d.counters.stall;
    st.last_signature = d.counters.last_signature.clone();
    st.stall_recoveries = d.counters.stall_recoveries;
    if d.stuck_counted {
        st.stuck_iterations += 1;
    }
    match &d.feedback {
        decide::Feedback::Keep => {}
        decide::Feedback::Clear => st.previous_errors = None,
        decide::Feedback::Set(t) => st.previous_errors = Some(t.clone()),
    }
    match &d.run_outcome {
        Some(Outcome::Blocked { reason }) => {
            ws.write_blocked(StoppedLoop::Run, reason, n, &clock::now_rfc3339())?
        }
        Some(Outcome::Decide { question }) => {
            ws.write_decide(StoppedLoop::Run, question, n, &clock::now_rfc3339())?
        }
        _ => {}
    }
    if let Some(action) = d.stall {
        let snaps = loop_snapshots(&cfg.workdir, n, ctx, cancel)?;
        match stall_effect(st, &snaps, n, ws, &ran.parsed, action, &mut d, log, ctx) {
            Err(EngineError::Lifecycle(e)) if e.is_stopped() => {
                stall_stopped(st, n, (action, &before), &mut d, log, ctx, &e)
            }
            r => r?,
        }
    }
    Ok(d)
}

/// The snapshots of a step of iteration `n` that may wait for another holder of a snapshot
/// lock (the stall guard's, a failing task's rollback): a wait that has lasted a second is
/// told as a warning, and the loop's stop ends it.
fn loop_snapshots(
    workdir: &std::path::Path,
    n: u32,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Snapshots, EngineError> {
    let events = ctx.events.clone();
    let tell = move |lock: &std::path::Path, pid: Option<i32>| {
        events.emit(EngineEvent::Warning {
            message: format!(
                "iteration {n}: {}",
                crate::git::snapshot::waiting_text(lock, pid)
            ),
        });
    };
    Ok(Snapshots::open(workdir)?
        .stopped_by(cancel)
        .telling_waits_to(std::sync::Arc::new(tell)))
}

/// A stop while the stall guard waited for another holder of the snapshot lock (a stuck
/// save of another loop): its step is not carried out, nothing was saved or rolled back,
/// and the loop ends as interrupted. The guard's counters are as they were `before` this
/// iteration (a resumed run that repeats the same tool calls stalls again at once, and is
/// recovered, or fails, then).
fn stall_stopped(
    st: &mut RunState,
    n: u32,
    (action, before): (decide::StallAction, &decide::Counters),
    d: &mut decide::Decision,
    log: &mut IterationLog,
    ctx: &EngineContext,
    e: &crate::lifecycle::LifecycleError,
) {
    st.stuck_count = before.stuck;
    st.stall_count = before.stall;
    st.stall_recoveries = before.stall_recoveries;
    d.counters.stuck = before.stuck;
    d.counters.stall = before.stall;
    d.counters.stall_recoveries = before.stall_recoveries;
    let what = match action {
        decide::StallAction::Recover { .. } => "recovery (a snapshot and guidance)",
        decide::StallAction::Fail { .. } => "failure of the task (its rollback)",
    };
    d.stall = None;
    d.run_outcome = None;
    d.outcome = decide::IterationOutcome::Interrupted;
    d.note.push_str("; stopped before the stall guard's step");
    let text = format!("stalled, but the stall guard's {what} was not carried out: {e}");
    log.note(&text);
    warn(ctx, &format!("iteration {n}: {text}"));
}

/// The stall guard's effect: the first stall is recovered (a snapshot and guidance), the
/// second fails the loop, rolling a task back.
#[allow(clippy::too_many_arguments)]
fn stall_effect(
    st: &mut RunState,
    snaps: &Snapshots,
    n: u32,
    ws: &Workspace,
    parsed: &crate::agent::ParsedOutput,
    action: decide::StallAction,
    d: &mut decide::Decision,
    log: &mut IterationLog,
    ctx: &EngineContext,
) -> Result<(), EngineError> {
    let repeats = match action {
        decide::StallAction::Recover { repeats } => {
            let snap = stall::recover(snaps, ws, st.task, n, repeats, &parsed.recent_tools)?;
            log.note(&format!(
                "stall: the same tool calls {repeats} iterations in a row; saved {}, recovery guidance in .ralph/feedback.md",
                snap.tag
            ));
            ctx.events.emit(EngineEvent::Stall {
                iteration: n,
                repeats,
                recovery: 1,
                snapshot: Some(snap.tag.clone()),
                rolled_back_to: None,
            });
            d.note.push_str(&format!("; stalled, saved {}", snap.tag));
            return Ok(());
        }
        decide::StallAction::Fail { repeats } => repeats,
    };
    let cause = format!("{} stall recoveries", st.stall_recoveries);
    let rb = crate::lifecycle::fail_task(snaps, ws, st.task, &cause)?;
    let reason = match &rb {
        Some(r) => format!(
            "stalled twice (the same tool calls {repeats} iterations in a row after a recovery); rolled back to {} (the stalled state is saved as {})",
            r.restored.tag, r.saved.tag
        ),
        None => format!(
            "stalled twice (the same tool calls {repeats} iterations in a row after a recovery); not a task, so nothing was rolled back"
        ),
    };
    log.note(&reason);
    ctx.events.emit(EngineEvent::Stall {
        iteration: n,
        repeats,
        recovery: st.stall_recoveries,
        snapshot: rb.as_ref().map(|r| r.saved.tag.clone()),
        rolled_back_to: rb.as_ref().map(|r| r.restored.tag.clone()),
    });
    d.run_outcome = Some(Outcome::Failed { reason });
    Ok(())
}

/// The agent's promise (logged, announced; ignored promises warned about).
fn signals_step(
    cfg: &RunConfig,
    n: u32,
    parsed: &crate::agent::ParsedOutput,
    prompt: &str,
    log: &mut IterationLog,
    ctx: &EngineContext,
) -> Option<Signal> {
    let words = match cfg.agent_format {
        OutputFormat::Text => signals::strip_prompt_echo(&parsed.words, prompt),
        _ => parsed.words.clone(),
    };
    let scan = signals::scan(&words, cfg.completion_text());
    for ignored in &scan.ignored {
        log.note(&format!("ignored promise: {ignored}"));
        warn(ctx, &format!("iteration {n}: ignored promise: {ignored}"));
    }
    let (kind, text) = match &scan.signal {
        Some(Signal::Complete) => ("complete", None),
        Some(Signal::Blocked(r)) => ("blocked", Some(r.clone())),
        Some(Signal::Decide(q)) => ("decide", Some(q.clone())),
        None => return None,
    };
    log.note(&format!(
        "promise: {kind}{}",
        text.as_deref()
            .map(|t| format!(": {t}"))
            .unwrap_or_default()
    ));
    ctx.events.emit(EngineEvent::Signal {
        iteration: n,
        signal: kind.into(),
        text,
    });
    scan.signal
}

/// The validation command, when there is one: its run as evidence, its time, and the
/// tests its output says ran.
async fn validate_step(
    cfg: &RunConfig,
    n: u32,
    claimed: bool,
    env: Vec<(OsString, OsString)>,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<(decide::ValidationEvidence, Duration, Option<Tally>), EngineError> {
    let Some(cmd) = &cfg.validate else {
        return Ok((decide::ValidationEvidence::NotRun, Duration::ZERO, None));
    };
    let mut tally = TallyLines::default();
    ctx.events.emit(EngineEvent::ValidationStarted {
        iteration: n,
        command: cmd.clone(),
    });
    log.section();
    log.note(&format!("validation: $ {cmd}"));
    let v = run_validation(
        Validation {
            command: cmd,
            dir: &cfg.workdir,
            env,
            success_exit_code: cfg.success_exit_code,
            timeout: cfg.iteration_timeout(),
            grace: cfg.kill_grace(),
            sandbox: &cfg.sandbox,
        },
        cancel,
        |line| {
            tally.push(line);
            log.output(crate::agent::Stream::Stdout, line.as_bytes())
        },
    )
    .await
    .map_err(io_err(format!("running validation `{cmd}`")))?;
    log.note(&if v.interrupted {
        format!(
            "validation was interrupted by the stop after {}: no verdict",
            format_duration(v.duration)
        )
    } else {
        format!(
            "validation exited with {}{} after {} (success is {}): {}",
            v.exit_code,
            if v.timed_out { " (timed out)" } else { "" },
            format_duration(v.duration),
            cfg.success_exit_code,
            if v.passed { "passed" } else { "failed" }
        )
    });
    ctx.events.emit(EngineEvent::ValidationFinished {
        iteration: n,
        passed: v.passed,
        exit_code: v.exit_code,
        timed_out: v.timed_out,
        interrupted: v.interrupted,
        duration_ms: v.duration.as_millis() as u64,
    });
    let evidence = if v.exit_code == 127 && cfg.success_exit_code != 127 && !v.interrupted {
        decide::ValidationEvidence::Missing {
            command: cmd.clone(),
            output: v.output.clone(),
        }
    } else if v.interrupted {
        decide::ValidationEvidence::Interrupted
    } else if v.passed {
        decide::ValidationEvidence::Passed
    } else {
        if claimed {
            let reason = format!(
                "COMPLETE claimed but validation failed (exit {}); its output goes into the next prompt",
                v.exit_code
            );
            log.note(&reason);
            ctx.events.emit(EngineEvent::CompletionRejected {
                iteration: n,
                reason,
            });
        }
        decide::ValidationEvidence::Failed {
            command: cmd.clone(),
            exit_code: v.exit_code,
            timed_out: v.timed_out,
            expected: cfg.success_exit_code,
            output: v.output.clone(),
        }
    };
    Ok((evidence, v.duration, tally.tally()))
}

/// The completion gates: the harness's last word on evidence that says done.
async fn completion_step(
    st: &mut RunState,
    n: u32,
    tally: Option<Tally>,
    ws: &Workspace,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<decide::GateVerdict, EngineError> {
    Ok(
        match completion::gates(st, n, tally, ws, log, ctx, cancel).await? {
            completion::Verdict::Complete => decide::GateVerdict::Complete,
            completion::Verdict::Swallowed => {
                log.note("completion claimed in the plan phase: ignored (spec 4)");
                decide::GateVerdict::Swallowed
            }
            completion::Verdict::Rejected {
                attempt,
                first,
                tampered,
            } => {
                let reason = format!(
                    "the harness's gates rejected the completion (attempt {attempt} of {}): {first}; see .ralph/feedback.md",
                    completion::MAX_GATE_FAILURES
                );
                log.note(&reason);
                ctx.events.emit(EngineEvent::CompletionRejected {
                    iteration: n,
                    reason,
                });
                decide::GateVerdict::Rejected { tampered }
            }
            completion::Verdict::Ask { question } => {
                log.note(&format!(
                    "the harness cannot measure a requirement: DECIDE: {question}"
                ));
                decide::GateVerdict::Ask { question }
            }
            completion::Verdict::Abort { reason } => {
                log.note(&reason);
                decide::GateVerdict::Abort { reason }
            }
        },
    )
}

/// The iteration's progress note for the next prompts (the last ones only).
fn record_progress(
    st: &mut RunState,
    n: u32,
    started: Instant,
    ran: &AgentRun,
    d: &decide::Decision,
    short: Option<&str>,
) {
    let parsed = &ran.parsed;
    let mut note = format!(
        "- iteration {n} ({}): agent exit {}, {} tool calls, {}; {}{}",
        format_duration(started.elapsed()),
        ran.agent.status.code(),
        parsed.tool_calls,
        short
            .map(|c| format!("commit {c}"))
            .unwrap_or_else(|| "no commit".into()),
        d.outcome,
        d.note,
    );
    if let Some(last) = &parsed.last_text {
        // Quoted tags would put promises into the next prompt: keep their text only.
        let last = last
            .replace("<promise>", "[promise: ")
            .replace("</promise>", "]");
        let last: String = last.trim().chars().take(160).collect();
        note.push_str(&format!(". Last words: \"{last}\""));
    }
    st.progress.push(note);
    let keep = st.progress.len().saturating_sub(2 * prompt::PROGRESS_NOTES);
    st.progress.drain(..keep);
}

/// The iteration's row in the summary CSV (written before the run's state is saved).
#[allow(clippy::too_many_arguments)]
fn record_row(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    duration: Duration,
    started_at: String,
    ran: &AgentRun,
    d: &decide::Decision,
    short: &Option<String>,
    ws: &Workspace,
    pending: &mut crate::fsutil::PendingSyncs,
) -> Result<(), EngineError> {
    let parsed = &ran.parsed;
    let (stories_complete, stories_total) = count_stories(&cfg.workdir).unwrap_or((0, 0));
    let row = SummaryRow {
        iteration: n,
        mode: cfg.loop_name.clone(),
        duration_seconds: format!("{:.3}", duration.as_secs_f64()),
        commit_hash: short.clone().unwrap_or_default(),
        stories_complete,
        stories_total,
        stuck_count: st.stuck_count,
        timestamp: started_at,
        run_id: st.run_id.clone(),
        outcome: d.outcome,
        agent_exit_code: ran.agent.status.code(),
        validation_passed: d.validation,
        tokens_in: parsed.tokens_in.unwrap_or(0),
        tokens_out: parsed.tokens_out.unwrap_or(0),
        cost_usd: format!("{:.6}", parsed.cost_usd.unwrap_or(0.0)),
        waited_seconds: format!("{:.3}", st.failures.waited_ms as f64 / 1000.0),
    };
    st.failures.waited_ms = 0;
    let csv = ws.summary_csv();
    write_row_deferred(&csv, &row, pending)
        .map_err(io_err(format!("writing to {}", csv.display())))?;
    Ok(())
}

/// After the decision: a pause at usage, the log's last line, and the iteration's end
/// announced.
#[allow(clippy::too_many_arguments)]
fn finish_iteration(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    duration: Duration,
    ran: &AgentRun,
    d: decide::Decision,
    validation_time: Duration,
    short: Option<String>,
    mut log: IterationLog,
    log_path: &std::path::Path,
    pending: &mut crate::fsutil::PendingSyncs,
    ctx: &EngineContext,
) -> Result<Option<Outcome>, EngineError> {
    let decide::Decision {
        outcome: label,
        run_outcome: outcome,
        ..
    } = d;
    if outcome.is_none()
        && failures::pause_at_usage(st, cfg, &ran.parsed.evidence, jiff::Timestamp::now())
    {
        log.note(&format!(
            "pause at usage: {}; the next iteration waits for the window's reset",
            st.failures.wait_line.as_deref().unwrap_or_default()
        ));
    }
    log.note(&format!(
        "iteration {n} ended: {}{}",
        label,
        outcome
            .as_ref()
            .map(|o| format!(" → loop ends: {}", o.label()))
            .unwrap_or_default()
    ));
    log.finish_deferred(pending)
        .map_err(io_err(format!("writing {}", log_path.display())))?;

    let overhead = duration.saturating_sub(ran.agent.duration + validation_time);
    ctx.events.emit(EngineEvent::IterationFinished {
        iteration: n,
        outcome: label.label().to_string(),
        duration_ms: duration.as_secs_f64() * 1000.0,
        overhead_ms: overhead.as_secs_f64() * 1000.0,
        commit: short,
        stuck_count: st.stuck_count,
        cost_total_usd: st.cost_usd,
    });
    Ok(outcome)
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

/// The agent's program could not be started (ENOENT, EACCES): stop for a person, exit 64.
fn could_not_spawn(
    cfg: &RunConfig,
    spec: &ProcessSpec,
    e: std::io::Error,
    mut log: IterationLog,
    ctx: &EngineContext,
    n: u32,
) -> Result<Option<Outcome>, EngineError> {
    use std::io::ErrorKind::{NotFound, PermissionDenied};
    if !matches!(e.kind(), NotFound | PermissionDenied) {
        return Err(io_err(format!("starting agent `{}`", cfg.agent.label()))(e));
    }
    let class = crate::agent::FailureClass::CouldNotStart;
    let line = format!("{}: {e}", spec.program.to_string_lossy());
    log.note(&format!("the agent could not start: {line}"));
    let _ = log.finish();
    ctx.events.emit(EngineEvent::AgentFailure {
        iteration: n,
        class,
        line: Some(line.clone()),
        reset_at: None,
    });
    Ok(Some(Outcome::AgentFailed {
        class,
        reason: format!(
            "the agent could not start: {line}\n  hint: install it or make it executable (`taskdaemon doctor` checks), or pick another with --agent"
        ),
    }))
}

/// Classify the agent's run and decide what it means (`failures::decide`); say so.
#[allow(clippy::too_many_arguments)]
fn judge_agent(
    st: &mut RunState,
    cfg: &RunConfig,
    n: u32,
    agent: &crate::agent::ProcessResult,
    parsed: &crate::agent::ParsedOutput,
    new_commit: bool,
    log: &mut IterationLog,
    ctx: &EngineContext,
) -> failures::Verdict {
    if agent.interrupted {
        return failures::Verdict::Proceed;
    }
    let (code, timed_out) = (agent.status.code(), agent.timed_out);
    let result =
        crate::agent::failure::classify_process(code, timed_out, &parsed.evidence, &cfg.sandbox);
    let verdict = failures::decide(
        st,
        cfg,
        &result,
        parsed.tool_calls,
        new_commit,
        jiff::Timestamp::now(),
    );
    if result.class != crate::agent::FailureClass::Ok {
        log.note(&format!(
            "agent failure: {}{}: {}",
            result.class.name(),
            result
                .reset_at
                .map(|t| format!(" (resets at {})", failures::describe(t)))
                .unwrap_or_default(),
            result.line.as_deref().unwrap_or("(no output)")
        ));
        ctx.events.emit(EngineEvent::AgentFailure {
            iteration: n,
            class: result.class,
            line: result.line.clone(),
            reset_at: result.reset_at.map(crate::clock::rfc3339),
        });
    }
    if verdict == failures::Verdict::Retry {
        log.note(&format!(
            "iteration {n} will run again after the wait; it is not counted"
        ));
    }
    verdict
}

/// The environment of the agent and the validation command (DESIGN.md, contract): the
/// agent step's contract plus the review pass and the spawned context. The harness's own
/// directory leads `PATH`, so the agent can call `taskdaemon snapshot save`.
fn agent_env(
    st: &RunState,
    n: u32,
    prompt_file: &std::path::Path,
    harness: &std::path::Path,
) -> Vec<(OsString, OsString)> {
    let mut env = step::contract_env(&step::Contract {
        run_id: &st.run_id,
        workdir: &st.config.workdir,
        loop_name: &st.config.loop_name,
        iteration: n,
        max_iterations: st.config.max_iterations,
        prompt_file,
        harness,
    });
    env.push((
        "TASKDAEMON_REVIEW_PASS".into(),
        prompt::review_pass(n).to_string().into(),
    ));
    // The spawned context (`plan-file` → TASKDAEMON_PLAN_FILE, …).
    for (k, v) in &st.config.context {
        let name = format!(
            "TASKDAEMON_{}",
            k.to_ascii_uppercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let value = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        env.push((name.into(), value.into()));
    }
    env
}

fn summarize(st: &RunState, outcome: &Outcome, ws: &Workspace) -> RunSummary {
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
        stories: count_stories(&st.config.workdir),
        cost_usd: st.cost_reported.then_some(st.cost_usd),
        tokens_in: st.tokens_in,
        tokens_out: st.tokens_out,
        summary_csv: ws.summary_csv(),
        logs_dir: ws.logs_dir(),
    }
}
