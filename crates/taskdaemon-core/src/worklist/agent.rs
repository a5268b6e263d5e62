//! One fresh agent process for one task or story iteration, through the agent step
//! ([`crate::agent::step`]: the contract environment, the log streamed as printed) and the engine's runner
//! (own process group, timeout and cancellation stop the whole group). The prompt and the
//! output are kept next to each other (`<log>.prompt.md`, `<log>.log`). An agent that
//! could not run at all (could-not-start, auth: `agent::classify`, as the engine does)
//! ends the loop with [`WorklistError::AgentCannotRun`] instead of counting as an attempt.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::WorklistError;
use super::events::{WorklistEvent, WorklistSink};
use crate::agent::preflight::{Finding, preflight_here, preflight_sandboxed};
use crate::agent::{AgentSpec, FailureClass, OutputFormat, step};
use crate::telemetry::{DEFAULT_LOG_CAP, IterationLog};

/// The agent every iteration uses, resolved by the binary (flag, config, environment).
#[derive(Debug, Clone)]
pub struct AgentSetup {
    pub agent: AgentSpec,
    pub format: OutputFormat,
    /// The executable that plays `script:` agents (the taskdaemon binary).
    pub script_runner: PathBuf,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// What the agents and the Verify commands are confined by (`--sandbox`).
    pub sandbox: crate::sandbox::SandboxPlan,
}

/// One agent run.
#[derive(Debug, Clone)]
pub struct AgentJob {
    pub setup: AgentSetup,
    pub label: String,
    pub cwd: PathBuf,
    pub prompt: String,
    pub env: Vec<(OsString, OsString)>,
    /// Without extension: `<log>.prompt.md` and `<log>.log` are written.
    pub log: PathBuf,
    pub contract: JobContract,
}

/// The agent contract's values of one invocation (`TASKDAEMON_RUN_ID`, …).
#[derive(Debug, Clone)]
pub struct JobContract {
    pub run_id: String,
    /// The loop type (implement, qa, story-implement, story-review).
    pub loop_name: String,
    pub iteration: u32,
    pub max_iterations: u32,
}

#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The agent's own words (an echoed prompt removed).
    pub words: String,
    pub exit_code: i32,
    pub timed_out: bool,
    pub interrupted: bool,
    pub duration: Duration,
    /// What the agent reported it cost (structured output only).
    pub cost_usd: Option<f64>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// The fingerprint of its tool calls (structured output only): the stall guard's input.
    pub tool_signature: Option<String>,
}

/// `log` with `suffix` appended (not `with_extension`: task ids like `1.2` hold dots).
fn suffixed(log: &Path, suffix: &str) -> PathBuf {
    let mut s = log.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

pub fn prompt_path(log: &Path) -> PathBuf {
    suffixed(log, ".prompt.md")
}

/// Before the first agent starts: the checks `run` does (`agent::preflight`). An agent
/// that cannot start is an error (nothing has changed yet); a `Verify` command whose
/// program is not on PATH is a warning, returned (the task's verification will fail).
pub fn check_agent(
    setup: &AgentSetup,
    verify: &[String],
    workdir: &Path,
) -> Result<Vec<String>, WorklistError> {
    let mut warnings = Vec::new();
    for f in preflight_sandboxed(&setup.agent, None, workdir, &setup.sandbox) {
        match f {
            Finding::AgentRefused { message, hint } => {
                return Err(WorklistError::AgentCannotRun {
                    class: FailureClass::CouldNotStart,
                    line: message,
                    hint,
                });
            }
            Finding::Warning(m) => warnings.push(m),
            Finding::ValidationMissing { .. } => {}
        }
    }
    // Each Verify command through the validation checks (`:`, a builtin, as the agent, so
    // only those apply).
    for cmd in verify {
        for f in preflight_here(
            &AgentSpec::Cmd {
                command: ":".into(),
            },
            Some(cmd),
            workdir,
        ) {
            match f {
                Finding::ValidationMissing { program } => warnings.push(format!(
                    "the Verify command `{cmd}` runs `{program}`, which is not on PATH: that task's verification will fail"
                )),
                Finding::Warning(m) => warnings.push(m),
                Finding::AgentRefused { .. } => {}
            }
        }
    }
    Ok(warnings)
}

/// What to do about an agent that could not run at all.
fn cannot_run_hint(class: FailureClass) -> &'static str {
    match class {
        FailureClass::Auth => {
            "log the agent CLI in (e.g. `claude` then /login, `codex login`) or set its API key; `taskdaemon doctor` checks"
        }
        _ => {
            "install it or make it executable, run as a normal user or set IS_SANDBOX=1 for Claude as root (`taskdaemon doctor` checks), or pick another with --agent"
        }
    }
}

pub async fn run_agent(
    job: AgentJob,
    events: WorklistSink,
    cancel: CancellationToken,
) -> Result<AgentRun, WorklistError> {
    let prompt_file = prompt_path(&job.log);
    let out_file = suffixed(&job.log, ".log");
    if let Some(dir) = out_file.parent() {
        std::fs::create_dir_all(dir).map_err(WorklistError::io(dir))?;
    }
    let mut env = step::contract_env(&step::Contract {
        run_id: &job.contract.run_id,
        workdir: &job.cwd,
        loop_name: &job.contract.loop_name,
        iteration: job.contract.iteration,
        max_iterations: job.contract.max_iterations,
        prompt_file: &prompt_file,
        harness: &job.setup.script_runner,
    });
    for (k, v) in &job.env {
        env.retain(|(old, _)| old != k);
        env.push((k.clone(), v.clone()));
    }
    let sandbox = job.setup.sandbox.with_contract_dirs(&env);
    let req = step::StepRequest {
        agent: &job.setup.agent,
        format: job.setup.format,
        system_prompt: None,
        script_runner: &job.setup.script_runner,
        prompt: &job.prompt,
        prompt_file: &prompt_file,
        cwd: &job.cwd,
        env,
        timeout: job.setup.timeout,
        grace: job.setup.grace,
        sandbox: &sandbox,
    };
    let mut log =
        IterationLog::create(&out_file, DEFAULT_LOG_CAP).map_err(WorklistError::io(&out_file))?;
    log.note(&format!(
        "run {} {} invocation {}: agent {}; prompt {}",
        job.contract.run_id,
        job.contract.loop_name,
        job.contract.iteration,
        job.setup.agent.label(),
        prompt_file.display()
    ));
    let mut denied = crate::sandbox::DeniedWrites::new(&job.cwd);
    let ran = step::run_step(&req, &mut log, &cancel, |_, _, text, _| {
        denied.line(text);
        events.emit(WorklistEvent::AgentOutput {
            task_id: job.label.clone(),
            text: text.to_string(),
        });
    })
    .await;
    let r = match ran {
        Ok(r) => r,
        Err(e) => {
            log.note(&format!("the agent could not start: {e}"));
            let _ = log.finish();
            return Err(step_error(e, &job));
        }
    };
    if let Some(note) = denied.note() {
        log.note(&note);
    }
    log.note(&format!(
        "agent exited with {}{}{}",
        r.process.status.code(),
        if r.process.timed_out {
            " (timed out)"
        } else {
            ""
        },
        if r.process.interrupted {
            " (interrupted)"
        } else {
            ""
        }
    ));
    log.finish().map_err(WorklistError::io(&out_file))?;
    if let Some(result) = &r.failure
        && matches!(
            result.class,
            FailureClass::CouldNotStart | FailureClass::Auth
        )
    {
        return Err(WorklistError::AgentCannotRun {
            class: result.class,
            line: result
                .line
                .clone()
                .unwrap_or_else(|| format!("exit code {}", r.process.status.code())),
            hint: cannot_run_hint(result.class).into(),
        });
    }
    let run = AgentRun {
        words: r.words,
        exit_code: r.process.status.code(),
        timed_out: r.process.timed_out,
        interrupted: r.process.interrupted,
        duration: r.process.duration,
        cost_usd: r.parsed.cost_usd,
        tokens_in: r.parsed.tokens_in.unwrap_or(0),
        tokens_out: r.parsed.tokens_out.unwrap_or(0),
        tool_signature: r.parsed.tool_signature.clone(),
    };
    events.emit(WorklistEvent::AgentFinished {
        task_id: job.label,
        exit_code: run.exit_code,
        timed_out: run.timed_out,
        interrupted: run.interrupted,
        duration_ms: run.duration.as_millis() as u64,
    });
    Ok(run)
}

/// A step that could not run, as the work list says it.
fn step_error(e: step::StepError, job: &AgentJob) -> WorklistError {
    match e {
        step::StepError::Spawn { spec, source }
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            WorklistError::AgentCannotRun {
                class: FailureClass::CouldNotStart,
                line: format!("{}: {source}", spec.program.to_string_lossy()),
                hint: cannot_run_hint(FailureClass::CouldNotStart).into(),
            }
        }
        other => WorklistError::Io {
            path: job.cwd.clone(),
            message: format!("starting agent `{}`: {other}", job.setup.agent.label()),
        },
    }
}
