//! The agent CLIs taskdaemon knows, with the non-interactive flags each needs. Checked
//! against the real CLIs on 2026-11-21 (claude 2.1.197, codex 0.169.0, gemini 0.61.0,
//! opencode 1.18.33, amp 0.0.1790142911): all five read the prompt from stdin.

use std::path::{Path, PathBuf};

use super::parse::OutputFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    Claude,
    Codex,
    Gemini,
    Opencode,
    Amp,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::Claude,
        Preset::Codex,
        Preset::Gemini,
        Preset::Opencode,
        Preset::Amp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Claude => "claude",
            Preset::Codex => "codex",
            Preset::Gemini => "gemini",
            Preset::Opencode => "opencode",
            Preset::Amp => "amp",
        }
    }

    pub fn from_name(s: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The executable looked up on PATH.
    pub fn binary(self) -> &'static str {
        self.name()
    }

    pub fn install_hint(self) -> &'static str {
        match self {
            Preset::Claude => "npm install -g @anthropic-ai/claude-code",
            Preset::Codex => "npm install -g @openai/codex",
            Preset::Gemini => "npm install -g @google/gemini-cli",
            Preset::Opencode => "npm install -g opencode-ai",
            Preset::Amp => "npm install -g @sourcegraph/amp",
        }
    }

    /// Arguments for a one-shot, non-interactive run with every tool allowed.
    pub fn args(self, system_prompt: Option<&str>) -> Vec<String> {
        let mut a: Vec<String> = match self {
            Preset::Claude => vec![
                "-p",
                "--dangerously-skip-permissions",
                "--output-format",
                "stream-json",
                "--verbose",
            ],
            Preset::Codex => vec![
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
            ],
            // Without --skip-trust gemini silently drops --yolo in an untrusted folder.
            Preset::Gemini => vec!["--yolo", "--skip-trust", "--output-format", "stream-json"],
            // Without --auto, `opencode run` rejects every permission request.
            // --format json: one JSON event per finished part (text, tool_use, step_finish).
            Preset::Opencode => vec!["run", "--auto", "--format", "json"],
            // --stream-json is Claude Code-compatible stream JSON.
            Preset::Amp => vec!["--execute", "--dangerously-allow-all", "--stream-json"],
        }
        .into_iter()
        .map(String::from)
        .collect();
        if let (Preset::Claude, Some(sp)) = (self, system_prompt) {
            a.push("--append-system-prompt".into());
            a.push(sp.into());
        }
        if self == Preset::Codex {
            // `-` reads the prompt from stdin.
            a.push("-".into());
        }
        a
    }

    /// Whether the CLI takes a system prompt by flag; otherwise it goes before the prompt.
    pub fn takes_system_prompt_flag(self) -> bool {
        self == Preset::Claude
    }

    pub fn format(self) -> OutputFormat {
        match self {
            Preset::Claude | Preset::Amp => OutputFormat::ClaudeStreamJson,
            Preset::Codex => OutputFormat::CodexJson,
            Preset::Gemini => OutputFormat::GeminiStreamJson,
            Preset::Opencode => OutputFormat::OpencodeJson,
        }
    }
}

/// Find an executable on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// A regular file with an execute bit (a program `exec` would run).
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first preset whose CLI is installed, in the order of [`Preset::ALL`].
pub fn first_installed() -> Option<Preset> {
    Preset::ALL
        .into_iter()
        .find(|p| find_on_path(p.binary()).is_some())
}
