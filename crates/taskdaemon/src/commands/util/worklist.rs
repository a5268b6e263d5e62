//! What the work-list commands share (`implement`, `stories`, `cancel`): the agent and
//! limit flags, the spec directory, the agent preflight, the take-over of a killed loop's
//! processes, and driving a work list with its renderer and signals.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use taskdaemon_core::agent::script::{Script, ScriptFormat};
use taskdaemon_core::agent::{AgentSpec, OutputFormat};
use taskdaemon_core::config::{Dur, Settings};
use taskdaemon_core::engine::{DEFAULT_ITERATION_TIMEOUT, DEFAULT_KILL_GRACE};
use taskdaemon_core::git::Git;
use taskdaemon_core::sandbox::{self, SandboxKind, SandboxPlan};
use taskdaemon_core::worklist::{self, AgentSetup, WorklistError, WorklistEvent, WorklistSink};
use tokio_util::sync::CancellationToken;

use super::super::Ctx;
use super::{dur, settings, with_signals};
use crate::cli::user;

/// The engine's limits, as `run` has them.
#[derive(Debug, Args)]
pub struct LimitFlags {
    /// Stop (exit 4) after N rejected attempts in a row without a new commit; 0 disables [default: 3].
    #[arg(long, value_name = "N")]
    pub max_stuck: Option<u32>,
    /// Stop (exit 5) after N agents in a row with the same tool calls; 0 disables [default: 3].
    #[arg(long, value_name = "N")]
    pub max_stall: Option<u32>,
    /// Stop (exit 1) once the agents' reported cost reaches USD.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Stop (exit 1) once the loop has taken DUR.
    #[arg(long, value_name = "DUR", value_parser = dur)]
    pub max_runtime: Option<Dur>,
    /// Turn off the evidence protection: a changed Verify script, deleted or skipped tests and fewer tests run are warnings, not rejections.
    #[arg(long, env = "TASKDAEMON_ALLOW_TEST_CHANGES")]
    pub allow_test_changes: bool,
}

impl LimitFlags {
    /// `--allow-test-changes`, or the user's config (`allow-test-changes: true`).
    pub fn allow_test_changes(&self, dir: &Path, ctx: &Ctx) -> anyhow::Result<bool> {
        let flags = Settings {
            allow_test_changes: self.allow_test_changes.then_some(true),
            ..Settings::default()
        };
        let s = settings(dir, &flags, ctx.config.as_deref())?;
        Ok(s.allow_test_changes.unwrap_or(false))
    }

    pub fn limits(&self) -> anyhow::Result<worklist::Limits> {
        if let Some(c) = self.max_cost
            && !(c.is_finite() && c > 0.0)
        {
            return Err(user(format!(
                "invalid --max-cost {c}\n  hint: a positive amount in USD, e.g. --max-cost 5"
            )));
        }
        let d = worklist::Limits::default();
        Ok(worklist::Limits {
            max_stuck: self.max_stuck.unwrap_or(d.max_stuck),
            max_stall: self.max_stall.unwrap_or(d.max_stall),
            max_cost: self.max_cost,
            max_runtime: self.max_runtime.map(|d| d.0),
        })
    }
}

/// How the agent is chosen, as `run` does it: flag, then TASKDAEMON_*, then config files,
/// then the first installed CLI.
#[derive(Debug, Args)]
pub struct AgentFlags {
    /// claude, codex, gemini, opencode, amp, script:FILE, cmd:COMMAND or api:anthropic|openai:MODEL [default: config, else the first installed CLI].
    #[arg(long, value_name = "SPEC", env = "TASKDAEMON_AGENT")]
    pub agent: Option<String>,
    /// How to read the agent's output: text, claude-stream-json, codex-json [default: per agent].
    #[arg(long, value_name = "FORMAT", env = "TASKDAEMON_AGENT_FORMAT")]
    pub agent_format: Option<String>,
    /// Stop one agent after DUR [default: 30m].
    #[arg(long, value_name = "DUR", env = "TASKDAEMON_ITERATION_TIMEOUT", value_parser = dur)]
    pub iteration_timeout: Option<Dur>,
    /// Time between TERM and KILL when an agent is stopped [default: 5s].
    #[arg(long, value_name = "DUR", env = "TASKDAEMON_KILL_GRACE", value_parser = dur)]
    pub kill_grace: Option<Dur>,
    /// Confine the agents and the Verify commands: none, bwrap, docker, podman (docs/sandbox.md) [default: none].
    #[arg(long, value_name = "KIND", env = "TASKDAEMON_SANDBOX", value_parser = super::sandbox_kind)]
    pub sandbox: Option<SandboxKind>,
}

impl AgentFlags {
    /// The agent, resolved and checked (a missing CLI fails here, before any state change).
    pub fn resolve(&self, dir: &Path, ctx: &Ctx) -> anyhow::Result<AgentSetup> {
        let flags = Settings {
            agent: self.agent.clone(),
            agent_format: self.agent_format.clone(),
            iteration_timeout: self.iteration_timeout,
            kill_grace: self.kill_grace,
            sandbox: self.sandbox,
            ..Settings::default()
        };
        let s = settings(dir, &flags, ctx.config.as_deref())?;
        let spec = match &s.agent {
            Some(a) => AgentSpec::parse(a).map_err(user)?,
            None => AgentSpec::detect().map_err(user)?,
        };
        let base = ctx.workdir()?;
        let spec = spec.absolutize(&base);
        let mut format = spec.default_format();
        if let AgentSpec::Script { file } = &spec {
            let script = Script::load(file).map_err(user)?;
            if script.format == ScriptFormat::StreamJson {
                format = OutputFormat::ClaudeStreamJson;
            }
        }
        spec.check_installed().map_err(user)?;
        if let Some(f) = &s.agent_format {
            format =
                OutputFormat::parse(f).map_err(|m| user(format!("invalid --agent-format: {m}")))?;
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let sandbox =
            SandboxPlan::resolve(&s.sandbox_settings(), &spec, home.as_deref()).map_err(user)?;
        sandbox::check_available(&sandbox).map_err(user)?;
        Ok(AgentSetup {
            sandbox,
            agent: spec,
            format,
            script_runner: std::env::current_exe().context("finding the taskdaemon executable")?,
            timeout: Some(
                s.iteration_timeout
                    .map(|d| d.0)
                    .unwrap_or(DEFAULT_ITERATION_TIMEOUT),
            ),
            grace: s.kill_grace.map(|d| d.0).unwrap_or(DEFAULT_KILL_GRACE),
        })
    }
}

/// The spec directory: the argument, else `specs/<name>` from `specs/.current-spec` at the
/// top of the repository, else the current directory when it has a tasks.md.
pub(crate) fn spec_dir(arg: Option<&Path>, ctx: &Ctx) -> anyhow::Result<PathBuf> {
    let cwd = ctx.workdir()?;
    if let Some(a) = arg {
        let p = cwd.join(a);
        if !p.is_dir() {
            return Err(user(format!(
                "{} is not a directory\n  hint: pass the spec directory that holds tasks.md, e.g. `specs/login`",
                p.display()
            )));
        }
        return std::fs::canonicalize(&p).with_context(|| format!("resolving {}", p.display()));
    }
    let top = Git::new(&cwd).toplevel().map_err(user)?;
    let current = worklist::current_spec::file(&top);
    if let Some(dir) = worklist::current_spec::resolve(&top).map_err(user)? {
        return Ok(dir);
    }
    if cwd.join(worklist::coordinator::TASKS_FILE).is_file() {
        return Ok(cwd);
    }
    Err(user(format!(
        "no spec given, no {} and no tasks.md in {}\n  hint: `taskdaemon implement specs/NAME`, or write NAME into specs/.current-spec",
        current.display(),
        cwd.display()
    )))
}

/// The git top level of `dir`, canonical.
pub(crate) fn repo_of(dir: &Path) -> anyhow::Result<PathBuf> {
    let top = Git::new(dir).toplevel().map_err(user)?;
    Ok(top.canonicalize().unwrap_or(top))
}

pub(crate) fn worklist_err(e: WorklistError) -> anyhow::Error {
    if e.is_user_fault() {
        user(e)
    } else {
        anyhow::Error::new(e)
    }
}

/// Before the first agent: the checks `run` does (exit 64 when the agent cannot start),
/// warnings printed.
pub(crate) fn check_agent(setup: &AgentSetup, verify: &[String], dir: &Path) -> anyhow::Result<()> {
    for w in worklist::check_agent(setup, verify, dir).map_err(worklist_err)? {
        eprintln!("taskdaemon: warning: {w}");
    }
    Ok(())
}

/// End every process a killed loop on `target` (spec directory or stories file) left
/// running, and record this loop's processes before each starts. Holds the records'
/// lock for the rest of the process, so two loops on one target never end each other's.
pub(crate) fn take_over_worklist(target: &Path, setup: &AgentSetup) -> anyhow::Result<()> {
    static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    let dir = taskdaemon_core::agent::tracked::worklist_records_dir(target).map_err(user)?;
    let mut lock_path = dir.clone().into_os_string();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let f = taskdaemon_core::fsutil::open_lock_file(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(user(format!(
                "another loop is running on {} (it holds {})\n  hint: wait for it or stop it, then start again",
                target.display(),
                lock_path.display()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(anyhow::Error::new(e).context(format!("locking {}", lock_path.display())));
        }
    }
    let _ = HELD.set(f);
    super::take_over_in(dir, target, setup.grace)
}

/// Run a work-list loop on a runtime with signal handling and rendering.
pub(crate) fn drive<T, F, Fut>(json: bool, body: F) -> anyhow::Result<T>
where
    F: FnOnce(WorklistSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<T, WorklistError>>,
{
    with_signals(|cancel| async move {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<WorklistEvent>();
        let renderer = tokio::spawn(crate::render::worklist::run(json, rx));
        let result = body(WorklistSink::new(tx), cancel).await;
        let _ = renderer.await;
        result.map_err(worklist_err)
    })
}
