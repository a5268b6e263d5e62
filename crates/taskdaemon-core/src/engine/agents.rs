//! The agent step of an iteration, the same for every work source: each member of the
//! unit runs as one [`crate::agent::step`] (or one API conversation) with the quiet watcher
//! beside it; a group's members run at the same time. Then each is accounted (cost,
//! tokens, its end announced) and its failure classified (`failures::decide`).

use std::ffi::OsString;
use std::time::Duration;

use super::iteration::Iter;
use super::source::Member;
use super::{EngineError, EngineEvent, RunState, failures, io_err, warn, watch};
use crate::agent::{ProcessSpec, step};
use crate::duration::format_duration;
use crate::telemetry::IterationLog;

/// What running an agent left for the rest of the iteration.
pub struct AgentRun {
    pub agent: crate::agent::ProcessResult,
    pub parsed: crate::agent::ParsedOutput,
    /// The agent's environment; the validation command gets the same.
    pub env: Vec<(OsString, OsString)>,
    /// The iteration's timeout, and whether the run's remaining runtime set it.
    pub timeout: Option<Duration>,
    pub cut_by_runtime: bool,
}

/// The agent ran, or could not be started.
pub(super) enum Spawned {
    Ran(Box<AgentRun>),
    CouldNotStart(ProcessSpec, std::io::Error),
}

/// Run every member of the unit, at the same time; one result per member, in order.
pub(super) async fn run_members(
    it: &Iter<'_>,
    members: &[Member],
    logs: &mut [IterationLog],
) -> Result<Vec<Spawned>, EngineError> {
    let runs = members
        .iter()
        .zip(logs.iter_mut())
        .map(|(m, log)| run_agent(it, m, log));
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .collect()
}

/// The timeout of this iteration's agents, and whether the run's remaining runtime set it.
fn timeout(it: &Iter<'_>) -> (Option<Duration>, bool) {
    match (it.cfg.iteration_timeout(), it.remaining) {
        (Some(t), Some(r)) if r < t => (Some(r), true),
        (None, Some(r)) => (Some(r), true),
        (t, _) => (t, false),
    }
}

/// Run one member's agent (one [`crate::agent::step`]) with the quiet watcher (quiet
/// warning, no-progress deadline) beside it.
async fn run_agent(
    it: &Iter<'_>,
    m: &Member,
    log: &mut IterationLog,
) -> Result<Spawned, EngineError> {
    let (cfg, n, ctx) = (it.cfg, it.n, it.ctx);
    let (timeout, cut_by_runtime) = timeout(it);
    let env = agent_env(it, m, &ctx.script_runner);
    let label = m.label.clone();
    if let crate::agent::AgentSpec::Api { provider, model } = &cfg.agent {
        // A direct API agent: a conversation instead of a process, same results.
        let req = crate::agent::api::Iteration {
            provider: *provider,
            model,
            settings: &cfg.api,
            system: m.system_prompt.as_deref(),
            prompt: &m.prompt,
            workdir: &m.cwd,
            env: env.clone(),
            harness: &ctx.script_runner,
            timeout,
            grace: cfg.kill_grace(),
        };
        let events = &ctx.events;
        let (agent, parsed) = crate::agent::api::run_iteration_sandboxed(
            req,
            &cfg.sandbox.with_contract_dirs(&env),
            it.cancel,
            |line| log.output(crate::agent::Stream::Stdout, line.as_bytes()),
            |activity| {
                events.emit(EngineEvent::Agent {
                    iteration: n,
                    member: label.clone(),
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
    let sandbox = cfg.sandbox.with_contract_dirs(&env);
    let req = step::StepRequest {
        agent: &cfg.agent,
        format: cfg.agent_format,
        system_prompt: m.system_prompt.as_deref(),
        script_runner: &ctx.script_runner,
        prompt: &m.prompt,
        prompt_file: &m.prompt_file,
        cwd: &m.cwd,
        env: env.clone(),
        timeout,
        grace: cfg.kill_grace(),
        sandbox: &sandbox,
    };
    let mut denied = crate::sandbox::DeniedWrites::new(&m.cwd);
    let events = &ctx.events;
    let watch = watch::Watch::new();
    let notes = std::sync::Mutex::new(Vec::<String>::new());
    let drain = || std::mem::take(&mut *notes.lock().unwrap_or_else(|e| e.into_inner()));
    let agent_cancel = it.cancel.child_token();
    let running = step::run_step(&req, log, &agent_cancel, |log, stream, text, acts| {
        for note in drain() {
            log.note(&note);
        }
        denied.line(text);
        watch.line(text, stream == crate::agent::Stream::Stdout, &acts);
        for activity in acts {
            events.emit(EngineEvent::Agent {
                iteration: n,
                member: label.clone(),
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
    if watch.stopped().is_some() && !it.cancel.is_cancelled() {
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

/// After an agent: its impossible values, its cost and tokens, its log line and event.
pub(super) fn account(it: &mut Iter<'_>, m: &Member, ran: &AgentRun, log: &mut IterationLog) {
    let (n, ctx) = (it.n, it.ctx);
    let (agent, parsed) = (&ran.agent, &ran.parsed);
    for r in &parsed.rejected {
        let msg = format!("iteration {n}: ignored an impossible value the agent reported: {r}");
        log.note(&msg);
        warn(ctx, &msg);
    }
    if let Some(c) = parsed.cost_usd {
        it.st.cost_usd += c;
        it.st.cost_reported = true;
    }
    it.st.tokens_in = it
        .st
        .tokens_in
        .saturating_add(parsed.tokens_in.unwrap_or(0));
    it.st.tokens_out = it
        .st
        .tokens_out
        .saturating_add(parsed.tokens_out.unwrap_or(0));
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
        member: m.label.clone(),
        exit_code: agent_code,
        timed_out: agent.timed_out,
        interrupted: agent.interrupted,
        duration_ms: agent.duration.as_millis() as u64,
        tool_calls: parsed.tool_calls,
        cost_usd: parsed.cost_usd,
    });
}

/// The agent's program could not be started (ENOENT, EACCES): stop for a person, exit 64.
pub(super) fn could_not_spawn(
    it: &Iter<'_>,
    spec: &ProcessSpec,
    e: std::io::Error,
    log: &mut IterationLog,
) -> Result<super::Outcome, EngineError> {
    use std::io::ErrorKind::{NotFound, PermissionDenied};
    if !matches!(e.kind(), NotFound | PermissionDenied) {
        return Err(io_err(format!("starting agent `{}`", it.cfg.agent.label()))(e));
    }
    let class = crate::agent::FailureClass::CouldNotStart;
    let line = format!("{}: {e}", spec.program.to_string_lossy());
    log.note(&format!("the agent could not start: {line}"));
    it.ctx.events.emit(EngineEvent::AgentFailure {
        iteration: it.n,
        class,
        line: Some(line.clone()),
        reset_at: None,
    });
    Ok(super::Outcome::AgentFailed {
        class,
        reason: format!(
            "the agent could not start: {line}\n  hint: install it or make it executable (`taskdaemon doctor` checks), or pick another with --agent"
        ),
    })
}

/// Classify the agent's run and decide what it means (`failures::decide`); say so.
pub(super) fn judge(
    it: &mut Iter<'_>,
    ran: &AgentRun,
    new_commit: bool,
    log: &mut IterationLog,
) -> failures::Verdict {
    let (agent, parsed) = (&ran.agent, &ran.parsed);
    if agent.interrupted {
        return failures::Verdict::Proceed;
    }
    let (code, timed_out) = (agent.status.code(), agent.timed_out);
    let cfg = it.cfg;
    let result =
        crate::agent::failure::classify_process(code, timed_out, &parsed.evidence, &cfg.sandbox);
    let verdict = failures::decide(
        it.st,
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
        it.ctx.events.emit(EngineEvent::AgentFailure {
            iteration: it.n,
            class: result.class,
            line: result.line.clone(),
            reset_at: result.reset_at.map(crate::clock::rfc3339),
        });
    }
    if verdict == failures::Verdict::Retry {
        log.note(&format!(
            "iteration {} will run again after the wait; it is not counted",
            it.n
        ));
    }
    verdict
}

/// The environment of a member's agent and of the validation command (DESIGN.md,
/// contract): the agent step's contract, then the member's own (which replace the
/// contract's). The harness's own directory leads `PATH`, so the agent can call
/// `taskdaemon snapshot save`.
fn agent_env(it: &Iter<'_>, m: &Member, harness: &std::path::Path) -> Vec<(OsString, OsString)> {
    let mut env = step::contract_env(&step::Contract {
        run_id: &it.st.run_id,
        workdir: &m.cwd,
        loop_name: &m.mode,
        iteration: it.n,
        max_iterations: it.cfg.max_iterations,
        prompt_file: &m.prompt_file,
        harness,
    });
    for (k, v) in &m.env {
        env.retain(|(old, _)| old != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// The environment of a ralph run's validation outside an iteration (the evidence
/// baseline's one run before iteration 1).
pub(super) fn baseline_env(st: &RunState, harness: &std::path::Path) -> Vec<(OsString, OsString)> {
    let mut env = step::contract_env(&step::Contract {
        run_id: &st.run_id,
        workdir: &st.config.workdir,
        loop_name: &st.config.loop_name,
        iteration: 0,
        max_iterations: st.config.max_iterations,
        prompt_file: std::path::Path::new(""),
        harness,
    });
    env.extend(super::ralph::extra_env(st, 0));
    env
}
