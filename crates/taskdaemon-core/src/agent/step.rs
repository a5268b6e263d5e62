//! One agent step: the single way every loop (the engine's iterations, `implement`'s
//! executors and QA, `stories`' implement and review) runs one agent invocation.
//!
//! It writes the prompt file, builds the process in one place ([`process_spec`]), streams
//! every output line to the iteration log as it is printed (the log flushes each line, so
//! an interrupted or `kill -9`ed harness leaves what was printed; the log is synced when
//! the caller finishes it), parses the structured output ([`OutputParser`]) and classifies
//! a failure ([`classify_now`](super::failure::classify_now)). A direct model API agent (not a process) gets its own arm in
//! [`run_step`] and returns the same [`StepResult`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    Activity, AgentResult, AgentSpec, OutputFormat, OutputParser, ParsedOutput, ProcessResult,
    ProcessSpec, Stream, run_process,
};
use crate::fsutil::write_atomic_volatile;
use crate::telemetry::IterationLog;

/// What one agent invocation needs.
#[derive(Debug, Clone)]
pub struct StepRequest<'a> {
    pub agent: &'a AgentSpec,
    pub format: OutputFormat,
    pub system_prompt: Option<&'a str>,
    /// The executable that plays `script:` agents (the taskdaemon binary).
    pub script_runner: &'a Path,
    pub prompt: &'a str,
    /// Where the prompt is written (the agent gets it as `TASKDAEMON_PROMPT_FILE`).
    pub prompt_file: &'a Path,
    pub cwd: &'a Path,
    /// The agent's whole environment ([`contract_env`] plus the loop's own variables).
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// What the agent is confined by (`--sandbox`); applied in [`process_spec`].
    pub sandbox: &'a crate::sandbox::SandboxPlan,
}

/// What one agent invocation left.
#[derive(Debug, Clone)]
pub struct StepResult {
    pub process: ProcessResult,
    pub parsed: ParsedOutput,
    /// The agent's own words; for plain-text agents an echoed prompt is removed.
    pub words: String,
    /// The failure class (`None` when the step was interrupted: nothing to judge).
    pub failure: Option<AgentResult>,
}

/// Why a step could not run.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("writing the prompt file {}: {source}", path.display())]
    Prompt {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The agent's program could not be started; the spec says what was tried.
    #[error("starting `{}`: {source}", spec.program.to_string_lossy())]
    Spawn {
        spec: Box<ProcessSpec>,
        source: std::io::Error,
    },
}

/// The standard agent environment (DESIGN.md, the agent contract).
#[derive(Debug, Clone)]
pub struct Contract<'a> {
    pub run_id: &'a str,
    pub workdir: &'a Path,
    pub loop_name: &'a str,
    pub iteration: u32,
    pub max_iterations: u32,
    pub prompt_file: &'a Path,
    /// The harness's executable: its directory leads `PATH`.
    pub harness: &'a Path,
}

/// The contract's variables, the harness's directory first on `PATH`.
pub fn contract_env(c: &Contract<'_>) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        (
            "TASKDAEMON_PROMPT_FILE".into(),
            c.prompt_file.as_os_str().to_owned(),
        ),
        (
            "TASKDAEMON_ITERATION".into(),
            c.iteration.to_string().into(),
        ),
        (
            "TASKDAEMON_MAX_ITERATIONS".into(),
            c.max_iterations.to_string().into(),
        ),
        ("TASKDAEMON_RUN_ID".into(), c.run_id.into()),
        (
            "TASKDAEMON_WORKDIR".into(),
            c.workdir.as_os_str().to_owned(),
        ),
        ("TASKDAEMON_BIN".into(), c.harness.as_os_str().to_owned()),
        ("TASKDAEMON_LOOP".into(), c.loop_name.into()),
    ];
    if let Some(dir) = c.harness.parent() {
        let mut dirs = vec![dir.to_path_buf()];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        if let Ok(path) = std::env::join_paths(dirs) {
            env.push(("PATH".into(), path));
        }
    }
    env
}

/// Set `key` in `env` (replacing an earlier value).
pub fn set_env(env: &mut Vec<(OsString, OsString)>, key: &str, value: impl Into<OsString>) {
    env.retain(|(k, _)| k != key);
    env.push((key.into(), value.into()));
}

/// The process of one step: the one place a step's `ProcessSpec` is built.
pub fn process_spec(req: &StepRequest<'_>) -> ProcessSpec {
    let inv = req
        .agent
        .invocation(req.prompt, req.system_prompt, req.script_runner);
    let spec = ProcessSpec {
        program: inv.program,
        args: inv.args,
        cwd: req.cwd.to_path_buf(),
        env: req.env.clone(),
        stdin: inv.stdin.map(String::into_bytes),
        timeout: req.timeout,
        grace: req.grace,
        after_stop: None,
    };
    crate::sandbox::wrap(spec, req.sandbox)
}

/// Run one agent invocation. Every line goes to `log` (flushed as it comes), then to
/// `on_line` with what the parser saw in it.
pub async fn run_step(
    req: &StepRequest<'_>,
    log: &mut IterationLog,
    cancel: &CancellationToken,
    mut on_line: impl FnMut(&mut IterationLog, Stream, &str, Vec<Activity>),
) -> Result<StepResult, StepError> {
    // Atomic, not synced: a killed harness leaves it whole (the page cache), and the agent
    // reads it from there. It is what the report shows as the prompt; the records a resume
    // goes on from (run.json, the CSV row, the iteration log) are synced, and a crash of
    // the machine before the kernel writes this file back loses only this copy.
    write_atomic_volatile(req.prompt_file, req.prompt.as_bytes()).map_err(|source| {
        StepError::Prompt {
            path: req.prompt_file.to_path_buf(),
            source,
        }
    })?;
    let spec = process_spec(req);
    let mut parser = OutputParser::new(req.format);
    let ran = run_process(&spec, cancel, |stream, line| {
        log.output(stream, line);
        let text = String::from_utf8_lossy(line);
        let acts = parser.line(stream, &text);
        on_line(log, stream, &text, acts);
    })
    .await;
    let process = ran.map_err(|source| StepError::Spawn {
        spec: Box::new(spec),
        source,
    })?;
    let parsed = parser.finish();
    Ok(finish(req, process, parsed))
}

/// The words, and the failure class of a step that was not interrupted.
fn finish(req: &StepRequest<'_>, process: ProcessResult, parsed: ParsedOutput) -> StepResult {
    let words = match req.format {
        OutputFormat::Text => crate::signals::strip_prompt_echo(&parsed.words, req.prompt),
        _ => parsed.words.clone(),
    };
    let failure = (!process.interrupted).then(|| {
        let (code, timed_out) = (process.status.code(), process.timed_out);
        super::failure::classify_process(code, timed_out, &parsed.evidence, req.sandbox)
    });
    StepResult {
        process,
        parsed,
        words,
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        agent: &'a AgentSpec,
        dir: &'a Path,
        prompt_file: &'a Path,
        env: Vec<(OsString, OsString)>,
    ) -> StepRequest<'a> {
        StepRequest {
            agent,
            format: OutputFormat::Text,
            system_prompt: None,
            script_runner: Path::new("/nonexistent/taskdaemon"),
            prompt: "do it",
            prompt_file,
            cwd: dir,
            env,
            timeout: Some(Duration::from_secs(60)),
            grace: Duration::from_secs(1),
            sandbox: &NO_SANDBOX,
        }
    }

    static NO_SANDBOX: std::sync::LazyLock<crate::sandbox::SandboxPlan> =
        std::sync::LazyLock::new(crate::sandbox::SandboxPlan::default);

    #[tokio::test]
    async fn a_step_writes_the_prompt_streams_the_log_and_gives_the_contract() {
        let d = tempfile::tempdir().unwrap();
        let prompt_file = d.path().join("prompt.md");
        let log_path = d.path().join("iteration-001.log");
        let agent = AgentSpec::Cmd {
            command: "cat \"$TASKDAEMON_PROMPT_FILE\"; echo; echo \"run=$TASKDAEMON_RUN_ID it=$TASKDAEMON_ITERATION/$TASKDAEMON_MAX_ITERATIONS\"; echo oops >&2; exit 3".into(),
        };
        let env = contract_env(&Contract {
            run_id: "r1",
            workdir: d.path(),
            loop_name: "implement",
            iteration: 2,
            max_iterations: 9,
            prompt_file: &prompt_file,
            harness: Path::new("/nonexistent/taskdaemon"),
        });
        let r = req(&agent, d.path(), &prompt_file, env);
        let mut log = IterationLog::create(&log_path, 1 << 20).unwrap();
        let mut seen = Vec::new();
        let out = run_step(
            &r,
            &mut log,
            &CancellationToken::new(),
            |log, _, text, _| {
                // Already in the file when the callback sees it.
                let now = std::fs::read_to_string(log.path()).unwrap();
                assert!(now.contains(text), "{now:?} lacks {text:?}");
                seen.push(text.to_string());
            },
        )
        .await
        .unwrap();
        log.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&prompt_file).unwrap(), "do it");
        assert!(seen.contains(&"run=r1 it=2/9".to_string()), "{seen:?}");
        assert_eq!(out.process.status.code(), 3);
        assert!(out.words.contains("run=r1"));
        let class = out.failure.map(|f| f.class);
        assert_ne!(class, Some(crate::agent::FailureClass::Ok));
        let text = std::fs::read_to_string(&log_path).unwrap();
        assert!(text.contains("[stderr] oops"), "{text}");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let prompt_file = d.path().join("prompt.md");
        let agent = AgentSpec::Script {
            file: d.path().join("x.yaml"),
        };
        let r = req(&agent, d.path(), &prompt_file, Vec::new());
        let mut log = IterationLog::create(&d.path().join("l.log"), 1 << 20).unwrap();
        let e = run_step(&r, &mut log, &CancellationToken::new(), |_, _, _, _| {})
            .await
            .unwrap_err();
        assert!(matches!(e, StepError::Spawn { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/taskdaemon"), "{e}");
    }
}
