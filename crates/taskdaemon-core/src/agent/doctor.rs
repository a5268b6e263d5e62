//! `taskdaemon doctor`'s checks of the agent CLIs: installed, version, logged in (through
//! each CLI's own status command, never by calling a model), structured output, what it
//! reports about usage; and git. Each program runs through the runner (own process group,
//! a time limit).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::presets::{Preset, find_on_path};
use super::runner::{ProcessSpec, Stream, run_process};
use super::spec::AgentSpec;

const CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// One agent, checked.
#[derive(Debug, Clone, Serialize)]
pub struct AgentCheck {
    pub agent: String,
    pub path: Option<PathBuf>,
    pub version: Option<String>,
    /// None: this CLI has no status command to ask.
    pub logged_in: Option<bool>,
    pub login_detail: String,
    pub structured_output: &'static str,
    pub usage_reporting: &'static str,
    pub hint: Option<String>,
}

impl AgentCheck {
    /// Installed, and not known to be logged out.
    pub fn usable(&self) -> bool {
        self.path.is_some() && self.logged_in != Some(false)
    }
}

/// A program's exit code and output (stdout then stderr), or None when it could not run.
pub async fn capture(program: &Path, args: &[&str], cwd: &Path) -> Option<(i32, String)> {
    let spec = ProcessSpec {
        program: program.as_os_str().to_owned(),
        args: args.iter().map(Into::into).collect(),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        stdin: None,
        timeout: Some(CHECK_TIMEOUT),
        grace: Duration::from_secs(1),
        after_stop: None,
    };
    let (mut out, mut err) = (String::new(), String::new());
    let r = run_process(&spec, &CancellationToken::new(), |s, line| {
        let buf = if s == Stream::Stdout {
            &mut out
        } else {
            &mut err
        };
        buf.push_str(&String::from_utf8_lossy(line));
        buf.push('\n');
    })
    .await
    .ok()?;
    out.push_str(&err);
    Some((r.status.code(), out))
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .chars()
        .take(200)
        .collect()
}

fn facts(p: Preset) -> (&'static str, &'static str) {
    match p {
        Preset::Claude => (
            "stream-json (tool calls, cost, tokens, errors)",
            "rate_limit_event with utilization and reset, with subscription auth only (--pause-at-usage works)",
        ),
        Preset::Codex => (
            "exec --json (tool calls, tokens, errors)",
            "none in its output (only in $CODEX_HOME/sessions); the usage limit's reset is read from its text",
        ),
        Preset::Amp => ("stream-json (Claude-compatible)", "none"),
        Preset::Gemini => (
            "stream-json (tool calls, tokens, errors; no cost)",
            "none in its output",
        ),
        Preset::Opencode => (
            "run --format json (tool calls, tokens and cost per step, errors)",
            "none in its output",
        ),
    }
}

/// Check one preset.
pub async fn check_preset(p: Preset, cwd: &Path) -> AgentCheck {
    let (structured_output, usage_reporting) = facts(p);
    let mut c = AgentCheck {
        agent: p.name().into(),
        path: find_on_path(p.binary()),
        version: None,
        logged_in: None,
        login_detail: String::new(),
        structured_output,
        usage_reporting,
        hint: None,
    };
    let Some(bin) = c.path.clone() else {
        c.login_detail = "not installed".into();
        c.hint = Some(p.install_hint().into());
        return c;
    };
    c.version = capture(&bin, &["--version"], cwd)
        .await
        .map(|(_, o)| first_line(&o));
    let status: &[&str] = match p {
        Preset::Claude => &["auth", "status"],
        Preset::Codex => &["login", "status"],
        _ => &[],
    };
    if status.is_empty() {
        c.login_detail = "the CLI has no status command".into();
        return c;
    }
    match capture(&bin, status, cwd).await {
        Some((code, out)) => {
            let json = serde_json::from_str::<serde_json::Value>(out.trim()).ok();
            let json_says = json
                .as_ref()
                .and_then(|v| v.get("loggedIn").and_then(serde_json::Value::as_bool));
            let logged_in = json_says.unwrap_or(code == 0);
            c.logged_in = Some(logged_in);
            let said = match &json {
                Some(v) => v.to_string(),
                None => out
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty() && !l.starts_with("WARNING"))
                    .map(first_line)
                    .unwrap_or_default(),
            };
            c.login_detail = format!("`{} {}` says {said}", p.binary(), status.join(" "));
            if !logged_in {
                c.hint = Some(match p {
                    Preset::Claude => {
                        "run `claude` and /login, or `claude setup-token`, or set ANTHROPIC_API_KEY"
                            .into()
                    }
                    _ => "run `codex login`, or set CODEX_API_KEY".into(),
                });
            }
        }
        None => c.login_detail = "its status command could not run".into(),
    }
    c
}

/// Check an agent spec: presets as above; `cmd:` by its program; `script:` by its file.
pub async fn check_spec(spec: &AgentSpec, cwd: &Path) -> AgentCheck {
    match spec {
        AgentSpec::Preset { preset } => check_preset(*preset, cwd).await,
        AgentSpec::Cmd { command } => {
            let program = command.split_whitespace().next().unwrap_or_default();
            let found = if program.contains('/') {
                Some(cwd.join(program)).filter(|p| p.exists())
            } else {
                find_on_path(program)
            };
            AgentCheck {
                agent: spec.label(),
                hint: found
                    .is_none()
                    .then(|| format!("`{program}` is not on PATH; cmd:COMMAND runs with sh -c")),
                path: found,
                version: None,
                logged_in: None,
                login_detail: "a command, not a known CLI".into(),
                structured_output: "as --agent-format says (default text)",
                usage_reporting: "none",
            }
        }
        AgentSpec::Api { provider, model } => {
            super::api::check(*provider, model, &super::api::ApiSettings::default())
        }
        AgentSpec::Script { file } => AgentCheck {
            agent: spec.label(),
            path: Some(file.clone()).filter(|f| f.exists()),
            version: None,
            logged_in: None,
            login_detail: "the scripted agent: nothing to log in".into(),
            structured_output: "as the script says",
            usage_reporting: "none",
            hint: (!file.exists()).then(|| format!("{} does not exist", file.display())),
        },
    }
}
