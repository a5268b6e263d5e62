//! One fresh agent process for one task or story iteration, through the engine's runner
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
use crate::agent::{
    AgentSpec, FailureClass, OutputFormat, OutputParser, ProcessSpec, classify, run_process,
};
use crate::fsutil::write_atomic;
use crate::signals;

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
}

#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The agent's own words (an echoed prompt removed).
    pub words: String,
    pub exit_code: i32,
    pub timed_out: bool,
    pub interrupted: bool,
    pub duration: Duration,
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
    write_atomic(&prompt_file, job.prompt.as_bytes()).map_err(WorklistError::io(&prompt_file))?;
    let inv = job
        .setup
        .agent
        .invocation(&job.prompt, None, &job.setup.script_runner);
    let mut env = job.env.clone();
    env.push(("TASKDAEMON_PROMPT_FILE".into(), prompt_file.clone().into()));
    let spec = ProcessSpec {
        program: inv.program,
        args: inv.args,
        cwd: job.cwd.clone(),
        env,
        stdin: inv.stdin.map(String::into_bytes),
        timeout: job.setup.timeout,
        grace: job.setup.grace,
    };
    let sandbox = job.setup.sandbox.with_contract_dirs(&spec.env);
    let spec = crate::sandbox::wrap(spec, &sandbox);
    let mut parser = OutputParser::new(job.setup.format);
    let mut log = String::new();
    let mut denied = crate::sandbox::DeniedWrites::new(&job.cwd);
    let r = run_process(&spec, &cancel, |stream, line| {
        let text = String::from_utf8_lossy(line);
        denied.line(&text);
        log.push_str(&text);
        log.push('\n');
        if log.len() > 4 * 1024 * 1024 {
            log = crate::fsutil::bound_text(&log, 2 * 1024 * 1024);
        }
        let _ = parser.line(stream, &text);
        events.emit(WorklistEvent::AgentOutput {
            task_id: job.label.clone(),
            text: text.into_owned(),
        });
    })
    .await
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
            WorklistError::AgentCannotRun {
                class: FailureClass::CouldNotStart,
                line: format!("{}: {e}", spec.program.to_string_lossy()),
                hint: cannot_run_hint(FailureClass::CouldNotStart).into(),
            }
        }
        _ => WorklistError::Io {
            path: job.cwd.clone(),
            message: format!("starting agent `{}`: {e}", job.setup.agent.label()),
        },
    })?;
    if let Some(note) = denied.note() {
        log.push_str(&format!("[taskdaemon] {note}\n"));
    }
    let out_file = suffixed(&job.log, ".log");
    write_atomic(&out_file, log.as_bytes()).map_err(WorklistError::io(&out_file))?;
    let parsed = parser.finish();
    let words = match job.setup.format {
        OutputFormat::Text => signals::strip_prompt_echo(&parsed.words, &job.prompt),
        _ => parsed.words,
    };
    if !r.interrupted {
        let result = classify(
            r.status.code(),
            r.timed_out,
            &parsed.evidence,
            &jiff::Zoned::now(),
        );
        if matches!(
            result.class,
            FailureClass::CouldNotStart | FailureClass::Auth
        ) {
            return Err(WorklistError::AgentCannotRun {
                class: result.class,
                line: result
                    .line
                    .unwrap_or_else(|| format!("exit code {}", r.status.code())),
                hint: cannot_run_hint(result.class).into(),
            });
        }
    }
    let run = AgentRun {
        words,
        exit_code: r.status.code(),
        timed_out: r.timed_out,
        interrupted: r.interrupted,
        duration: r.duration,
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
