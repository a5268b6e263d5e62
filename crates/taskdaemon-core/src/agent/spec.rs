//! Agent specs as written by people (`claude`, `script:demo.yaml`, `cmd:make fix`) and the
//! command line each becomes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::parse::OutputFormat;
use super::presets::{Preset, find_on_path};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AgentSpec {
    Preset {
        preset: Preset,
    },
    /// The built-in scripted agent playing a YAML script.
    Script {
        file: PathBuf,
    },
    /// Any command, run with `sh -c`, prompt on stdin.
    Cmd {
        command: String,
    },
    /// A model API called directly (`api:anthropic:MODEL`, `api:openai:MODEL`).
    Api {
        provider: super::api::Provider,
        model: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "unknown agent `{name}`{suggestion}\n  hint: use one of claude, codex, gemini, opencode, amp, script:FILE, cmd:COMMAND or api:anthropic|openai:MODEL"
    )]
    Unknown { name: String, suggestion: String },
    #[error(
        "`{0}` is not an API agent\n  hint: write api:anthropic:MODEL (e.g. api:anthropic:claude-sonnet-4-5) or api:openai:MODEL (any OpenAI-compatible server through api.openai.base-url)"
    )]
    BadApi(String),
    #[error(
        "`{0}` needs a value after the colon\n  hint: script:path/to/script.yaml or cmd:\"your command\""
    )]
    Empty(String),
    #[error("agent `{name}` is not installed (no `{binary}` on PATH)\n  hint: {install}")]
    NotInstalled {
        name: String,
        binary: String,
        install: String,
    },
    #[error(
        "no agent given and none of claude, codex, gemini, opencode, amp is installed\n  hint: pass --agent or set `agent:` in .taskdaemon/config.yaml; install one with:\n{choices}\n  or use script:FILE (the built-in scripted agent) or cmd:COMMAND"
    )]
    NoneInstalled { choices: String },
}

impl AgentSpec {
    pub fn parse(s: &str) -> Result<AgentSpec, AgentError> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("script:") {
            if rest.trim().is_empty() {
                return Err(AgentError::Empty(s.into()));
            }
            return Ok(AgentSpec::Script {
                file: PathBuf::from(rest.trim()),
            });
        }
        if let Some(rest) = s.strip_prefix("cmd:") {
            if rest.trim().is_empty() {
                return Err(AgentError::Empty(s.into()));
            }
            return Ok(AgentSpec::Cmd {
                command: rest.to_string(),
            });
        }
        if let Some(rest) = s.strip_prefix("api:") {
            let (provider, model) = rest.split_once(':').unwrap_or((rest, ""));
            let provider = super::api::Provider::from_name(provider.trim())
                .ok_or_else(|| AgentError::BadApi(s.into()))?;
            if model.trim().is_empty() {
                return Err(AgentError::BadApi(s.into()));
            }
            return Ok(AgentSpec::Api {
                provider,
                model: model.trim().to_string(),
            });
        }
        Preset::from_name(s)
            .map(|preset| AgentSpec::Preset { preset })
            .ok_or_else(|| {
                let names = Preset::ALL.map(Preset::name);
                AgentError::Unknown {
                    name: s.into(),
                    suggestion: crate::yaml::nearest(s, &names)
                        .map(|n| format!(" (did you mean `{n}`?)"))
                        .unwrap_or_default(),
                }
            })
    }

    /// The agent to use when none was given: the first installed CLI.
    pub fn detect() -> Result<AgentSpec, AgentError> {
        super::presets::first_installed()
            .map(|preset| AgentSpec::Preset { preset })
            .ok_or_else(|| AgentError::NoneInstalled {
                choices: Preset::ALL
                    .iter()
                    .map(|p| format!("    {:<9} {}", p.name(), p.install_hint()))
                    .collect::<Vec<_>>()
                    .join("\n"),
            })
    }

    /// Fails fast, before any state changes, when a preset's CLI is missing.
    pub fn check_installed(&self) -> Result<(), AgentError> {
        if let AgentSpec::Preset { preset } = self
            && find_on_path(preset.binary()).is_none()
        {
            return Err(AgentError::NotInstalled {
                name: preset.name().into(),
                binary: preset.binary().into(),
                install: preset.install_hint().into(),
            });
        }
        Ok(())
    }

    pub fn label(&self) -> String {
        match self {
            AgentSpec::Preset { preset } => preset.name().to_string(),
            AgentSpec::Script { file } => format!("script:{}", file.display()),
            AgentSpec::Cmd { command } => format!("cmd:{command}"),
            AgentSpec::Api { provider, model } => format!("api:{}:{model}", provider.name()),
        }
    }

    /// Resolve a relative script path against `base` (the directory the user ran in).
    pub fn absolutize(self, base: &Path) -> AgentSpec {
        match self {
            AgentSpec::Script { file } if file.is_relative() => AgentSpec::Script {
                file: base.join(file),
            },
            other => other,
        }
    }

    pub fn default_format(&self) -> OutputFormat {
        match self {
            AgentSpec::Preset { preset } => preset.format(),
            _ => OutputFormat::Text,
        }
    }

    /// The command line for one iteration. `script_runner` is the executable that plays
    /// scripts (the taskdaemon binary itself).
    pub fn invocation(
        &self,
        prompt: &str,
        system_prompt: Option<&str>,
        script_runner: &Path,
    ) -> Invocation {
        let with_system = |p: &str| match system_prompt {
            Some(sp) if !sp.trim().is_empty() => format!("{sp}\n\n---\n\n{p}"),
            _ => p.to_string(),
        };
        match self {
            AgentSpec::Preset { preset } => {
                let sp = system_prompt.filter(|s| !s.trim().is_empty());
                let prompt = if preset.takes_system_prompt_flag() {
                    prompt.to_string()
                } else {
                    with_system(prompt)
                };
                let args: Vec<OsString> = preset.args(sp).into_iter().map(OsString::from).collect();
                Invocation {
                    program: preset.binary().into(),
                    args,
                    stdin: Some(prompt),
                }
            }
            AgentSpec::Script { file } => Invocation {
                program: script_runner.as_os_str().to_owned(),
                args: vec!["__script-agent".into(), file.as_os_str().to_owned()],
                stdin: Some(with_system(prompt)),
            },
            AgentSpec::Cmd { command } => Invocation {
                program: "sh".into(),
                args: vec!["-c".into(), command.into()],
                stdin: Some(with_system(prompt)),
            },
            // The engine calls `agent::api::run_iteration` itself; where an agent runs as
            // a command (implement, stories, the task parser) the harness plays it.
            AgentSpec::Api { .. } => {
                let mut args: Vec<OsString> = vec!["__api-agent".into(), self.label().into()];
                if let Some(sp) = system_prompt.filter(|s| !s.trim().is_empty()) {
                    args.extend(["--system".into(), sp.into()]);
                }
                Invocation {
                    program: script_runner.as_os_str().to_owned(),
                    args,
                    stdin: Some(prompt.to_string()),
                }
            }
        }
    }
}

/// A concrete command line.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The prompt on stdin, when the agent reads it from there.
    pub stdin: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_agent_gets_a_did_you_mean() {
        let e = AgentSpec::parse("claud").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown agent `claud` (did you mean `claude`?)"),
            "{e}"
        );
        let e = AgentSpec::parse("zzzzzz").unwrap_err().to_string();
        assert!(e.starts_with("unknown agent `zzzzzz`\n  hint:"), "{e}");
    }

    #[test]
    fn parses_all_forms() {
        assert_eq!(
            AgentSpec::parse("claude").unwrap(),
            AgentSpec::Preset {
                preset: Preset::Claude
            }
        );
        assert_eq!(
            AgentSpec::parse("cmd:make fix").unwrap(),
            AgentSpec::Cmd {
                command: "make fix".into()
            }
        );
        assert_eq!(
            AgentSpec::parse("script:a.yaml").unwrap(),
            AgentSpec::Script {
                file: "a.yaml".into()
            }
        );
        assert!(matches!(
            AgentSpec::parse("cmd:").unwrap_err(),
            AgentError::Empty(_)
        ));
        let e = AgentSpec::parse("gpt").unwrap_err().to_string();
        assert!(
            e.contains("claude, codex, gemini, opencode, amp, script:FILE, cmd:COMMAND or api:"),
            "{e}"
        );
        let api = AgentSpec::parse("api:openai:qwen2.5:7b").unwrap();
        assert_eq!(
            api,
            AgentSpec::Api {
                provider: crate::agent::api::Provider::OpenAi,
                model: "qwen2.5:7b".into()
            }
        );
        assert_eq!(api.label(), "api:openai:qwen2.5:7b");
        for bad in ["api:", "api:gemini:x", "api:anthropic", "api:anthropic: "] {
            assert!(
                matches!(AgentSpec::parse(bad), Err(AgentError::BadApi(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn claude_gets_stream_json_and_system_prompt_flag() {
        let inv = AgentSpec::Preset {
            preset: Preset::Claude,
        }
        .invocation("do it", Some("be brief"), Path::new("td"));
        let args: Vec<String> = inv
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            args.windows(2)
                .any(|w| w == ["--output-format", "stream-json"])
        );
        assert!(
            args.windows(2)
                .any(|w| w == ["--append-system-prompt", "be brief"])
        );
        assert_eq!(inv.stdin.as_deref(), Some("do it"));
    }

    #[test]
    fn cmd_gets_system_prompt_before_the_prompt() {
        let inv = AgentSpec::Cmd {
            command: "cat".into(),
        }
        .invocation("task", Some("sys"), Path::new("td"));
        assert_eq!(inv.stdin.as_deref(), Some("sys\n\n---\n\ntask"));
    }
}
