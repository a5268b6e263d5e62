//! Which parser a task gets (`task-parser`, `parse-agent`, `parse-timeout`, the run's
//! agent): the model to ask, or why the rules parse without asking one. A parse never
//! stops a task: a parse agent that is misspelt, missing or unreadable only means the
//! rules parse, and the reason is shown.

use std::path::{Path, PathBuf};

use super::{DEFAULT_PARSE_TIMEOUT, ModelParser, ParserMode};
use crate::agent::script::{Script, ScriptFormat};
use crate::agent::{AgentSpec, OutputFormat};
use crate::config::Settings;
use crate::sandbox::SandboxPlan;

/// A setting that makes no parse possible (the rest only means the rules parse).
#[derive(Debug, thiserror::Error)]
pub enum ParserSetupError {
    #[error("invalid value for parse-timeout: must be more than 0 (e.g. 2s)")]
    ZeroTimeout,
}

/// The parser `settings` ask for in `dir`: the model (with `script_runner` playing
/// `script:` agents and its log kept in `log_dir`), or none and why.
pub fn choose_parser(
    settings: &Settings,
    dir: &Path,
    script_runner: PathBuf,
    log_dir: Option<PathBuf>,
) -> Result<(Option<ModelParser>, Option<String>), ParserSetupError> {
    let timeout = settings
        .parse_timeout
        .map(|d| d.0)
        .unwrap_or(DEFAULT_PARSE_TIMEOUT);
    if timeout.is_zero() {
        return Err(ParserSetupError::ZeroTimeout);
    }
    let (text, own) = match which_agent(settings) {
        Ok(chosen) => chosen,
        Err(because) => return Ok((None, Some(because))),
    };
    let (agent, format) = match agent_and_format(settings, dir, &text, own) {
        Ok(chosen) => chosen,
        Err(because) => return Ok((None, Some(because))),
    };
    // The parse agent reads what came with the repository (its file names, the task's
    // words): it runs in the sandbox the run's agent gets.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let sandbox = match SandboxPlan::resolve(&settings.sandbox_settings(), &agent, home.as_deref())
    {
        Ok(plan) => plan,
        Err(e) => return Ok((None, Some(format!("the parse agent's sandbox: {e}")))),
    };
    Ok((
        Some(ModelParser {
            agent,
            format,
            timeout,
            script_runner,
            log_dir,
            sandbox,
        }),
        None,
    ))
}

/// The agent's text and whether it is the parser's own (`parse-agent`), or why none.
fn which_agent(settings: &Settings) -> Result<(String, bool), String> {
    match settings.task_parser.unwrap_or_default() {
        ParserMode::Rules => Err("task-parser is rules".into()),
        ParserMode::Auto => match &settings.parse_agent {
            Some(a) => Ok((a.clone(), true)),
            None => Err("no parse-agent is set; task-parser auto uses the rules then".into()),
        },
        ParserMode::Model => match (&settings.parse_agent, &settings.agent) {
            (Some(a), _) => Ok((a.clone(), true)),
            (None, Some(a)) => Ok((a.clone(), false)),
            (None, None) => AgentSpec::detect()
                .map(|spec| (spec.label(), false))
                .map_err(|_| "task-parser is model, but no agent is set or installed".into()),
        },
    }
}

/// The agent, installed, and how to read it; or why it cannot be asked.
fn agent_and_format(
    settings: &Settings,
    dir: &Path,
    text: &str,
    own: bool,
) -> Result<(AgentSpec, OutputFormat), String> {
    let setting = if own { "parse-agent" } else { "agent" };
    let first_line = |e: &dyn std::fmt::Display| {
        format!(
            "{setting}: {}",
            e.to_string().lines().next().unwrap_or_default()
        )
    };
    let agent = AgentSpec::parse(text)
        .map_err(|e| first_line(&e))?
        .absolutize(dir);
    agent.check_installed().map_err(|e| first_line(&e))?;
    let mut format = agent.default_format();
    if !own && let Some(f) = &settings.agent_format {
        format = OutputFormat::parse(f).map_err(|m| format!("agent-format: {m}"))?;
    }
    if let AgentSpec::Script { file } = &agent {
        let script = Script::load(file).map_err(|e| first_line(&e))?;
        if script.format == ScriptFormat::StreamJson {
            format = OutputFormat::ClaudeStreamJson;
        }
    }
    Ok((agent, format))
}
