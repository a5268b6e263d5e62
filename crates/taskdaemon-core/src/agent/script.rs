//! The scripted agent's script: per iteration, a list of steps. The binary plays it as a
//! real child process (`taskdaemon __script-agent FILE`), so scripted runs go through the
//! same process machinery as Claude Code. Used by the demo and the tests.
//!
//! ```yaml
//! format: text            # or stream-json: print Claude Code stream-json lines
//! after-last: idle        # idle | repeat-last | fail — what iterations past the list do
//! iterations:
//!   - note: first try
//!     steps:
//!       - write: { path: calc.sh, content: "…" }
//!       - run: sh test.sh
//!       - commit: first try
//!       - say: "<promise>COMPLETE</promise>"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::yaml::{self, YamlError};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Script {
    #[serde(default)]
    pub format: ScriptFormat,
    #[serde(default)]
    pub after_last: AfterLast,
    pub iterations: Vec<ScriptIteration>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScriptFormat {
    #[default]
    Text,
    StreamJson,
}

/// What the agent does in iterations past the end of the list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AfterLast {
    /// Say that the script has nothing left, change nothing, exit 0.
    #[default]
    Idle,
    /// Play the last iteration again.
    RepeatLast,
    /// Say so on stderr and exit 1.
    Fail,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ScriptIteration {
    #[serde(default)]
    pub note: Option<String>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Print text as the agent's own words (an assistant message in stream-json).
    Say(String),
    /// Print text on stderr.
    Stderr(String),
    /// Write a file (creating directories).
    Write(FileWrite),
    /// Append to a file.
    Append(FileWrite),
    /// Delete a file or directory.
    Delete(PathBuf),
    /// Run a shell command (`sh -c`); its output is printed (as a tool call in stream-json).
    Run(String),
    /// `git add -A && git commit -m MESSAGE`.
    Commit(String),
    /// A tool call as Claude Code would print it (stream-json); its input and output are
    /// not the agent's words.
    Tool(ToolCall),
    /// Sleep this many seconds.
    Sleep(f64),
    /// Report this cost in US dollars in the final result (stream-json).
    Cost(f64),
    /// Exit now with this code.
    Exit(i32),
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileWrite {
    pub path: PathBuf,
    pub content: String,
    #[serde(default)]
    pub executable: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub input: serde_json::Value,
    #[serde(default)]
    pub output: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error(
        "script {0} does not exist\n  hint: pass the path of a YAML script (see `taskdaemon demo` for one)"
    )]
    Missing(PathBuf),
    #[error("cannot read script {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(YamlError),
    #[error("script {0} has no iterations\n  hint: add at least one entry under `iterations:`")]
    Empty(PathBuf),
}

impl Script {
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ScriptError::Missing(path.to_path_buf())
            } else {
                ScriptError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let script = yaml::parse::<Script>(path, &text)
            .map_err(ScriptError::Invalid)?
            .ok_or_else(|| ScriptError::Empty(path.to_path_buf()))?;
        if script.iterations.is_empty() {
            return Err(ScriptError::Empty(path.to_path_buf()));
        }
        Ok(script)
    }

    /// The steps for 1-based `iteration`, following `after-last` past the end. `None`
    /// means "idle" or "fail" (see `after_last`).
    pub fn steps_for(&self, iteration: u32) -> Option<&ScriptIteration> {
        let idx = iteration.saturating_sub(1) as usize;
        match self.iterations.get(idx) {
            Some(it) => Some(it),
            None if self.after_last == AfterLast::RepeatLast => self.iterations.last(),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_step_kind() {
        let src = r#"
format: stream-json
after-last: repeat-last
iterations:
  - note: one
    steps:
      - say: "hi <promise>COMPLETE</promise>"
      - stderr: warn
      - write: { path: a.txt, content: "x\n", executable: true }
      - append: { path: a.txt, content: "y\n" }
      - delete: b.txt
      - run: "echo hi"
      - commit: msg
      - tool: { name: Bash, input: { command: "ls" }, output: "a.txt" }
      - sleep: 0.5
      - cost: 0.01
      - exit: 3
"#;
        let s: Script = yaml::parse(Path::new("s.yaml"), src).unwrap().unwrap();
        assert_eq!(s.format, ScriptFormat::StreamJson);
        assert_eq!(s.iterations[0].steps.len(), 11);
        assert_eq!(s.steps_for(5).and_then(|i| i.note.as_deref()), Some("one"));
    }

    #[test]
    fn idle_after_the_last_entry_by_default() {
        let s: Script = yaml::parse(Path::new("s"), "iterations:\n  - steps: [ { say: a } ]\n")
            .unwrap()
            .unwrap();
        assert!(s.steps_for(1).is_some() && s.steps_for(2).is_none());
        assert_eq!(s.after_last, AfterLast::Idle);
    }

    #[test]
    fn unknown_step_is_located() {
        let e = yaml::parse::<Script>(
            Path::new("s.yaml"),
            "iterations:\n  - steps:\n      - shout: a\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(3));
    }
}
