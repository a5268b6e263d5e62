//! Layered settings. Lowest to highest: built-in defaults, the loop type, the user's
//! `~/.config/taskdaemon/config.yaml`, the project's `.taskdaemon/config.yaml` (or a file
//! named with `--config`), then `TASKDAEMON_*` environment variables and flags (the binary
//! reads those two and hands them over as one more `Settings` layer).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::duration::parse_duration;
pub use crate::lifecycle::parser::ParserMode;
use crate::yaml::{self, YamlError};

/// A duration written as text in YAML (`30m`), checked while parsing so a bad value is
/// reported with its line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Dur(pub Duration);

impl From<Dur> for String {
    fn from(d: Dur) -> String {
        format!("{}ms", d.0.as_millis())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(secs) => {
                crate::duration::check_bound(&secs.to_string(), Duration::from_secs(secs))
                    .map(Dur)
                    .map_err(serde::de::Error::custom)
            }
            Raw::Text(s) => parse_duration(&s)
                .map(Dur)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Every setting a run can take. `None` means "not set in this layer".
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Settings {
    /// `claude`, `codex`, `gemini`, `opencode`, `amp`, `script:FILE` or `cmd:COMMAND`.
    pub agent: Option<String>,
    /// How to read the agent's output: `text`, `claude-stream-json` or `codex-json`.
    pub agent_format: Option<String>,
    /// Loop type name.
    #[serde(rename = "loop")]
    pub loop_type: Option<String>,
    /// Validation command (run with `sh -c`); empty string means none.
    pub validate: Option<String>,
    pub success_exit_code: Option<i32>,
    pub max_iterations: Option<u32>,
    /// Consecutive iterations without a new commit before giving up; 0 disables.
    pub max_stuck: Option<u32>,
    /// Consecutive iterations with identical tool calls before stall recovery; 0 disables.
    pub max_stall: Option<u32>,
    pub iteration_timeout: Option<Dur>,
    pub max_runtime: Option<Dur>,
    pub max_cost: Option<f64>,
    pub completion_promise: Option<String>,
    /// Turn off the evidence protection (a changed validation script, deleted or skipped
    /// tests, fewer tests run): findings are warnings, loudly. Never from a repository's
    /// own config: only flags, `TASKDAEMON_ALLOW_TEST_CHANGES`, the user's config or `--config`.
    pub allow_test_changes: Option<bool>,
    /// Time between TERM and KILL when an agent is stopped.
    pub kill_grace: Option<Dur>,
    /// The cap of one iteration's log: `50MB` (the default), `512KB`, `1GB`.
    pub max_log_size: Option<String>,
    /// How `taskdaemon task` parses the message: `auto`, `model` or `rules`.
    pub task_parser: Option<ParserMode>,
    /// The agent the task parser asks (option A); same forms as `agent`.
    pub parse_agent: Option<String>,
    /// The time budget of the task parser's call to the agent.
    pub parse_timeout: Option<Dur>,
    /// The daemon: how many loops run at once.
    pub max_loops: Option<u32>,
    /// The daemon: at most this many loops at once per agent (`claude: 2`, `cmd: 8`); ≥ 1.
    #[serde(default, deserialize_with = "de_agent_limits")]
    pub agent_limits: Option<std::collections::BTreeMap<String, u32>>,
    /// The shared queue: how long a run's lease lasts without renewal (a dead machine's
    /// runs are taken over after it) [default: 30s].
    pub queue_lease: Option<Dur>,
    /// The shared queue: at most this many loops at once for the project across all
    /// machines (each machine keeps its own max-loops too).
    pub queue_max_loops: Option<u32>,
    /// The daemon: the branch finished specs and runs are merged into [default: the branch
    /// checked out where the work was submitted]. Must be a valid branch name.
    #[serde(default, deserialize_with = "de_target_branch")]
    pub target_branch: Option<String>,
    /// Where loops' git worktrees live; relative paths start at the repository's top level
    /// (and may not leave it), absolute ones must be the user's own.
    #[serde(default, deserialize_with = "de_worktrees_dir")]
    pub worktrees_dir: Option<PathBuf>,
    /// At the agent's usage limit: `wait` for the reset (then retry the same iteration) or
    /// `stop` (exit 1).
    pub on_usage_limit: Option<String>,
    /// The longest wait for a usage limit's reset; a later reset stops the run.
    pub max_wait: Option<Dur>,
    /// The first wait after a transient agent failure (rate limit, overload, unreachable
    /// API), doubled each time.
    pub retry_backoff: Option<Dur>,
    /// Transient agent failures in a row before the run stops (exit 1).
    pub max_retries: Option<u32>,
    /// Say so when the agent prints nothing for this long; 0s: never.
    pub quiet_warning: Option<Dur>,
    /// Stop an agent that makes no progress (no words, no tool calls) while it only
    /// retries, after this long; 0s: never.
    pub no_progress_timeout: Option<Dur>,
    /// Pause when the agent reports this percentage of a usage window used (Claude with
    /// subscription auth), until the window resets: quota kept for a person's work.
    pub pause_at_usage: Option<u8>,
    /// Confine the agent: `none` (the default), `bwrap`, `docker` or `podman`.
    pub sandbox: Option<crate::sandbox::SandboxKind>,
    /// The validation command's sandbox [default: the agent's].
    pub sandbox_validate: Option<crate::sandbox::SandboxKind>,
    /// More read-write paths inside the sandbox (`~/` is the home directory).
    pub sandbox_rw: Option<Vec<PathBuf>>,
    /// More paths hidden inside the sandbox (besides ~/.ssh, ~/.aws, ~/.gnupg, …).
    pub sandbox_ro_hide: Option<Vec<PathBuf>>,
    /// `shared` (the default: the agent needs its model API) or `none`.
    pub sandbox_network: Option<crate::sandbox::SandboxNetwork>,
    /// The image docker/podman run the agent in.
    pub sandbox_image: Option<String>,
    /// Direct model API agents (`api:anthropic:MODEL`, `api:openai:MODEL`): endpoints,
    /// keys' variables, the request scheduler's limits, max-turns, prices.
    pub api: Option<crate::agent::api::ApiSettings>,
    /// Where notifications go (see `notify`): the user's sinks and the project's add up.
    pub notify: Option<Vec<crate::notify::SinkConfig>>,
    /// The shared queue: `postgres://…` keeps the project's records in PostgreSQL, shared
    /// by daemons on several machines (unset: the JSONL store in the repository).
    pub queue: Option<String>,
    /// The project's key in the queue, the same on every clone [default: the URL of the
    /// `queue-remote` remote, without credentials].
    pub queue_project: Option<String>,
    /// The git remote every clone shares (the queue's project key, pushes) [default: origin].
    pub queue_remote: Option<String>,
}

impl Settings {
    /// `over` wins wherever it sets a value.
    pub fn merge(self, over: Settings) -> Settings {
        Settings {
            agent: over.agent.or(self.agent),
            agent_format: over.agent_format.or(self.agent_format),
            loop_type: over.loop_type.or(self.loop_type),
            validate: over.validate.or(self.validate),
            success_exit_code: over.success_exit_code.or(self.success_exit_code),
            max_iterations: over.max_iterations.or(self.max_iterations),
            max_stuck: over.max_stuck.or(self.max_stuck),
            max_stall: over.max_stall.or(self.max_stall),
            iteration_timeout: over.iteration_timeout.or(self.iteration_timeout),
            max_runtime: over.max_runtime.or(self.max_runtime),
            max_cost: over.max_cost.or(self.max_cost),
            completion_promise: over.completion_promise.or(self.completion_promise),
            allow_test_changes: over.allow_test_changes.or(self.allow_test_changes),
            kill_grace: over.kill_grace.or(self.kill_grace),
            max_log_size: over.max_log_size.or(self.max_log_size),
            task_parser: over.task_parser.or(self.task_parser),
            parse_agent: over.parse_agent.or(self.parse_agent),
            parse_timeout: over.parse_timeout.or(self.parse_timeout),
            max_loops: over.max_loops.or(self.max_loops),
            agent_limits: over.agent_limits.or(self.agent_limits),
            queue_lease: over.queue_lease.or(self.queue_lease),
            queue_max_loops: over.queue_max_loops.or(self.queue_max_loops),
            target_branch: over.target_branch.or(self.target_branch),
            worktrees_dir: over.worktrees_dir.or(self.worktrees_dir),
            on_usage_limit: over.on_usage_limit.or(self.on_usage_limit),
            max_wait: over.max_wait.or(self.max_wait),
            retry_backoff: over.retry_backoff.or(self.retry_backoff),
            max_retries: over.max_retries.or(self.max_retries),
            quiet_warning: over.quiet_warning.or(self.quiet_warning),
            no_progress_timeout: over.no_progress_timeout.or(self.no_progress_timeout),
            pause_at_usage: over.pause_at_usage.or(self.pause_at_usage),
            sandbox: over.sandbox.or(self.sandbox),
            sandbox_validate: over.sandbox_validate.or(self.sandbox_validate),
            sandbox_rw: over.sandbox_rw.or(self.sandbox_rw),
            sandbox_ro_hide: over.sandbox_ro_hide.or(self.sandbox_ro_hide),
            sandbox_network: over.sandbox_network.or(self.sandbox_network),
            sandbox_image: over.sandbox_image.or(self.sandbox_image),
            api: match (self.api, over.api) {
                (Some(low), Some(high)) => Some(low.merge(high)),
                (low, high) => high.or(low),
            },
            queue: over.queue.or(self.queue),
            queue_project: over.queue_project.or(self.queue_project),
            queue_remote: over.queue_remote.or(self.queue_remote),
            notify: match (self.notify, over.notify) {
                (Some(mut low), Some(high)) => {
                    low.extend(high);
                    Some(low)
                }
                (low, high) => high.or(low),
            },
        }
    }

    /// The sandbox settings of this layer.
    pub fn sandbox_settings(&self) -> crate::sandbox::SandboxSettings {
        crate::sandbox::SandboxSettings {
            sandbox: self.sandbox,
            sandbox_validate: self.sandbox_validate,
            sandbox_rw: self.sandbox_rw.clone(),
            sandbox_ro_hide: self.sandbox_ro_hide.clone(),
            sandbox_network: self.sandbox_network,
            sandbox_image: self.sandbox_image.clone(),
        }
    }
}

fn de_agent_limits<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::collections::BTreeMap<String, u32>>, D::Error> {
    let map = std::collections::BTreeMap::<String, u32>::deserialize(d)?;
    if let Some((agent, _)) = map.iter().find(|(_, n)| **n == 0) {
        return Err(serde::de::Error::custom(format!(
            "agent-limits.{agent} is 0, so no `{agent}` run could ever start; write 1 or more, or remove the entry for no limit"
        )));
    }
    Ok(Some(map))
}

fn de_target_branch<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let name = String::deserialize(d)?;
    check_branch_name(&name).map_err(serde::de::Error::custom)?;
    Ok(Some(name))
}

fn de_worktrees_dir<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let path = PathBuf::deserialize(d)?;
    check_worktrees_dir(&path).map_err(serde::de::Error::custom)?;
    Ok(Some(path))
}

/// A branch name as `git check-ref-format --branch` takes it (and not `HEAD`): no `..`,
/// `@{`, `//`, control characters, space, `~^:?*[\\`; no component starting with `.` or
/// ending with `.lock`; not starting with `-`, not ending with `/` or `.`.
pub fn check_branch_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "`{name}` is not a valid branch name ({why}); write a name such as `main` or `release/1.2`"
        ))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "HEAD" || name == "@" {
        return bad("it is a reserved name");
    }
    if name.starts_with('-') {
        return bad("it starts with `-`");
    }
    if name.starts_with("refs/") {
        return bad("write the branch's short name, without `refs/`");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return bad("it contains `..`, `@{` or `//`");
    }
    if name
        .chars()
        .any(|c| c.is_control() || " ~^:?*[\\".contains(c))
    {
        return bad("it contains a space, a control character or one of ~^:?*[\\");
    }
    if name.ends_with('/') || name.ends_with('.') || name.starts_with('/') {
        return bad("it starts or ends with `/` or ends with `.`");
    }
    if name
        .split('/')
        .any(|c| c.starts_with('.') || c.ends_with(".lock"))
    {
        return bad("a part starts with `.` or ends with `.lock`");
    }
    Ok(())
}

/// `worktrees-dir`: a relative path that stays inside the repository (no `..`, not in
/// `.git`), or an absolute path that is not `/` and whose nearest existing directory
/// belongs to the current user.
pub fn check_worktrees_dir(path: &Path) -> Result<(), String> {
    use std::path::Component;
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(
            "worktrees-dir is empty; remove it for the default `.taskdaemon/worktrees`".into(),
        );
    }
    if path.is_relative() {
        let mut parts = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir));
        let first = parts.next();
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!(
                "worktrees-dir `{shown}` leaves the repository (`..`); use a path inside it such as `.taskdaemon/worktrees`, or an absolute directory of yours"
            ));
        }
        if first.is_none() || first == Some(Component::Normal(".git".as_ref())) {
            return Err(format!(
                "worktrees-dir `{shown}` is the repository itself or inside `.git`; use e.g. `.taskdaemon/worktrees`"
            ));
        }
        return Ok(());
    }
    if path.parent().is_none() {
        return Err("worktrees-dir `/` is the root directory; use a directory of yours, e.g. `~/worktrees/PROJECT` written out in full".into());
    }
    let mut cur = Some(path);
    while let Some(p) = cur {
        if let Ok(meta) = std::fs::metadata(p) {
            use std::os::unix::fs::MetadataExt;
            let me = nix::unistd::geteuid().as_raw();
            if meta.uid() != me || p.parent().is_none() {
                return Err(format!(
                    "worktrees-dir `{shown}`: {} belongs to another user; create the directory yourself first (`mkdir -p {shown}`), or use a relative path inside the repository",
                    p.display()
                ));
            }
            return Ok(());
        }
        cur = p.parent();
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "config file {0} does not exist\n  hint: check the path, or run `taskdaemon init` to write one with commented defaults"
    )]
    Missing(PathBuf),
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(YamlError),
    #[error(
        "{path}: `allow-test-changes` cannot be set in a repository's own config: it turns off the check that the agent did not change its evidence, and an agent or a cloned repository can write this file\n  hint: remove the key; to allow test changes for one run, pass --allow-test-changes (or set it in ~/.config/taskdaemon/config.yaml)"
    )]
    UntrustedKey { path: PathBuf },
}

/// Read one settings file. A missing file is an error: callers decide whether a file is
/// optional (the default locations) or required (named on the command line).
pub fn load_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ConfigError::Missing(path.to_path_buf()));
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    Ok(yaml::parse::<Settings>(path, &text)
        .map_err(ConfigError::Invalid)?
        .unwrap_or_default())
}

fn load_optional(path: &Path) -> Result<Settings, ConfigError> {
    match load_file(path) {
        Err(ConfigError::Missing(_)) => Ok(Settings::default()),
        other => other,
    }
}

/// `$XDG_CONFIG_HOME/taskdaemon` or `~/.config/taskdaemon`.
pub fn user_config_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("taskdaemon"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".config").join("taskdaemon"))
}

/// Where project settings live.
pub fn project_config_path(repo: &Path) -> PathBuf {
    repo.join(".taskdaemon").join("config.yaml")
}

/// The file layers: user config, then the project's config, or `explicit` instead of the
/// project's when one was named (then it must exist and parse).
pub fn load_layers(repo: &Path, explicit: Option<&Path>) -> Result<Settings, ConfigError> {
    let user = match user_config_dir() {
        Some(dir) => load_optional(&dir.join("config.yaml"))?,
        None => Settings::default(),
    };
    let project = match explicit {
        Some(p) => load_file(p)?,
        None => {
            let path = project_config_path(repo);
            let project = load_optional(&path)?;
            if project.allow_test_changes.is_some() {
                return Err(ConfigError::UntrustedKey { path });
            }
            project
        }
    };
    Ok(user.merge(project))
}

/// The project config `taskdaemon init` writes: every key, commented, at its default.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("config_default.yaml");

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::duration::format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_file_parses_to_nothing_set() {
        let s = yaml::parse::<Settings>(Path::new("d"), DEFAULT_CONFIG_YAML).unwrap();
        assert_eq!(s.unwrap_or_default(), Settings::default());
    }

    #[test]
    fn every_commented_key_is_a_real_setting() {
        // Uncomment every `# key: value` line: the result must parse.
        let uncommented: String = DEFAULT_CONFIG_YAML
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|r| {
                r.split_once(": ")
                    .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let s = yaml::parse::<Settings>(Path::new("d"), &uncommented)
            .unwrap()
            .unwrap();
        assert_eq!(s.max_stuck, Some(3));
        assert_eq!(s.iteration_timeout, Some(Dur(Duration::from_secs(1800))));
        assert_eq!(s.task_parser, Some(ParserMode::Auto));
        assert_eq!(s.parse_timeout, Some(Dur(Duration::from_secs(2))));
        assert_eq!(
            s.worktrees_dir.as_deref(),
            Some(Path::new(crate::git::worktree::DEFAULT_BASE))
        );
    }

    #[test]
    fn bad_duration_points_at_the_line() {
        let e = yaml::parse::<Settings>(
            Path::new("c.yaml"),
            "max-stuck: 2\nmax-runtime: 5 parsecs\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(
            e.message.contains("parsecs") || e.message.contains("duration"),
            "{e}"
        );
    }

    #[test]
    fn garbage_values_are_refused_with_their_line() {
        let cases = [
            ("iteration-timeout: 99999999999999999999h\n", "too long"),
            ("max-runtime: 18446744073709551615\n", "too long"),
            ("agent-limits: {cmd: 0}\n", "agent-limits.cmd is 0"),
            ("worktrees-dir: /\n", "root directory"),
            ("worktrees-dir: ../../outside\n", "leaves the repository"),
            ("worktrees-dir: .git/wt\n", "inside `.git`"),
            ("target-branch: -x\n", "not a valid branch name"),
            ("target-branch: a..b\n", "not a valid branch name"),
            ("target-branch: HEAD\n", "reserved"),
        ];
        for (text, want) in cases {
            let e = yaml::parse::<Settings>(Path::new("c.yaml"), &format!("max-stuck: 2\n{text}"))
                .unwrap_err();
            assert_eq!(e.line, Some(2), "{text}: {e}");
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let ok = yaml::parse::<Settings>(
            Path::new("c.yaml"),
            "agent-limits: {cmd: 1}\ntarget-branch: release/1.2\nworktrees-dir: .taskdaemon/wt\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.target_branch.as_deref(), Some("release/1.2"));
    }

    #[test]
    fn branch_names_follow_check_ref_format() {
        for good in ["main", "feature/x-1", "a.b", "v1.2"] {
            assert!(check_branch_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-x",
            "a..b",
            "HEAD",
            "a b",
            "x.lock",
            ".x",
            "a/",
            "a//b",
            "a@{1}",
            "x:y",
            "refs/heads/x",
            "a/.b",
        ] {
            assert!(check_branch_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_absolute_worktrees_dir_must_be_the_users() {
        let d = tempfile::tempdir().unwrap();
        assert!(check_worktrees_dir(&d.path().join("not/yet")).is_ok());
        if !nix::unistd::geteuid().is_root() {
            assert!(check_worktrees_dir(Path::new("/usr/local/wt")).is_err());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Any text, and any value under every key, parses or fails with a message.
        #[test]
        fn config_never_panics(text in "\\PC{0,200}", key in proptest::sample::select(vec![
            "agent", "iteration-timeout", "max-runtime", "kill-grace", "agent-limits",
            "target-branch", "worktrees-dir", "max-iterations", "task-parser", "max-cost",
        ]), value in "[ -~]{0,40}") {
            let _ = yaml::parse::<Settings>(Path::new("c.yaml"), &text);
            let _ = yaml::parse::<Settings>(Path::new("c.yaml"), &format!("{key}: {value}\n"));
        }
    }

    #[test]
    fn merge_prefers_the_upper_layer() {
        let low = Settings {
            max_stuck: Some(3),
            agent: Some("claude".into()),
            ..Default::default()
        };
        let high = Settings {
            max_stuck: Some(5),
            ..Default::default()
        };
        let m = low.merge(high);
        assert_eq!(m.max_stuck, Some(5));
        assert_eq!(m.agent.as_deref(), Some("claude"));
    }
}

/// Where a setting in force came from (`config show`, `doctor`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Origin {
    /// Not set anywhere: the built-in default (`value` is what `init` writes, commented).
    Default,
    /// A settings file; `flag`: named with `--config`.
    File {
        path: PathBuf,
        line: Option<usize>,
        flag: bool,
    },
    /// A `TASKDAEMON_*` environment variable.
    Env { var: String },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File { path, line, flag } => {
                if *flag {
                    f.write_str("--config ")?;
                }
                write!(f, "{}", path.display())?;
                match line {
                    Some(l) => write!(f, ":{l}"),
                    None => Ok(()),
                }
            }
            Origin::Env { var } => write!(f, "environment {var}"),
        }
    }
}

/// One setting in force: its key, its value (JSON; null when unset with no default), where
/// it came from.
#[derive(Debug, Clone, Serialize)]
pub struct InForce {
    pub key: String,
    pub value: serde_json::Value,
    pub from: Origin,
}

/// The environment variable of a key: `max-iterations` → `TASKDAEMON_MAX_ITERATIONS`.
pub fn env_var_of(key: &str) -> String {
    format!("TASKDAEMON_{}", key.to_ascii_uppercase().replace('-', "_"))
}

/// Keys whose commented line in the default file is an example, not the default: what
/// happens when they are unset.
const UNSET_MEANS: &[(&str, &str)] = &[
    (
        "agent",
        "(unset: the first of claude, codex, gemini, opencode, amp on PATH)",
    ),
    ("agent-format", "(unset: the agent's own format)"),
    ("validate", "(unset: the loop type's, else none)"),
    ("max-iterations", "(unset: the loop type's; ralph: 20)"),
    ("max-runtime", "(unset: no limit)"),
    ("max-cost", "(unset: no limit)"),
    ("completion-promise", "(unset: validation alone)"),
    ("allow-test-changes", "false"),
    ("parse-agent", "(unset: the built-in rules)"),
    ("queue-max-loops", "(unset: only each machine's max-loops)"),
    (
        "target-branch",
        "(unset: the branch checked out where work is submitted)",
    ),
    ("pause-at-usage", "(unset: never)"),
    ("agent-limits", "(unset: max-loops for every agent)"),
    ("queue", "(unset: the JSONL store in the repository)"),
    (
        "queue-project",
        "(unset: the URL of queue-remote, without credentials)",
    ),
    ("queue-remote", "origin"),
    ("sandbox-validate", "(unset: the agent's sandbox)"),
    (
        "sandbox-rw",
        "(unset: none besides the work tree, git's paths and the agent's state)",
    ),
    (
        "sandbox-ro-hide",
        "(unset: only the built-in ones: ~/.ssh, ~/.aws, ~/.gnupg, …)",
    ),
    ("sandbox-image", "(unset: none; docker and podman need one)"),
];

/// The defaults `init` writes commented (`# key: value`), by key; for a key whose line is
/// only an example, what unset means.
fn documented_defaults() -> std::collections::BTreeMap<String, String> {
    let mut out: std::collections::BTreeMap<String, String> = UNSET_MEANS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for line in DEFAULT_CONFIG_YAML.lines() {
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        if let Some((k, v)) = rest.split_once(": ")
            && !k.is_empty()
            && k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        {
            out.entry(k.to_string())
                .or_insert_with(|| v.trim().to_string());
        }
    }
    out
}

/// Every setting in force, lowest layer first overridden: the built-in default, the user's
/// file, the project's file (or `--config FILE`), the `TASKDAEMON_*` variables. Files are
/// read as `load_layers` reads them (a named file must exist).
pub fn settings_in_force(
    repo: &Path,
    explicit: Option<&Path>,
) -> Result<Vec<InForce>, ConfigError> {
    let keys = match serde_json::to_value(Settings::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    let defaults = documented_defaults();
    let mut rows: Vec<InForce> = keys
        .iter()
        .map(|k| InForce {
            key: k.clone(),
            value: defaults
                .get(k)
                .map(|v| serde_json::Value::String(v.clone()))
                .unwrap_or(serde_json::Value::Null),
            from: Origin::Default,
        })
        .collect();
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(d) = user_config_dir() {
        files.push((d.join("config.yaml"), false));
    }
    match explicit {
        Some(p) => files.push((p.to_path_buf(), true)),
        None => files.push((project_config_path(repo), false)),
    }
    for (path, flag) in files {
        let settings = match load_file(&path) {
            Ok(s) => s,
            Err(ConfigError::Missing(_)) if !flag => continue,
            Err(e) => return Err(e),
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&settings) {
            for (k, v) in m.into_iter().filter(|(_, v)| !v.is_null()) {
                let line = text
                    .lines()
                    .position(|l| l.starts_with(&format!("{k}:")))
                    .map(|i| i + 1);
                set(
                    &mut rows,
                    &k,
                    v,
                    Origin::File {
                        path: path.clone(),
                        line,
                        flag,
                    },
                );
            }
        }
    }
    for k in &keys {
        let var = env_var_of(k);
        if let Ok(v) = std::env::var(&var) {
            set(
                &mut rows,
                k,
                serde_json::Value::String(v),
                Origin::Env { var },
            );
        }
    }
    Ok(rows)
}

fn set(rows: &mut [InForce], key: &str, value: serde_json::Value, from: Origin) {
    // The queue's URL may hold a password: never shown.
    let value = match (key, &value) {
        ("queue", serde_json::Value::String(u)) => {
            serde_json::Value::String(crate::store::pg_conn::redact(u))
        }
        _ => value,
    };
    if let Some(r) = rows.iter_mut().find(|r| r.key == key) {
        r.value = value;
        r.from = from;
    }
}

#[cfg(test)]
mod in_force_tests {
    use super::*;

    #[test]
    fn every_key_with_its_source_and_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("c.yaml");
        std::fs::write(&f, "# comment\nmax-iterations: 7\nagent: codex\n").unwrap();
        let rows = settings_in_force(d.path(), Some(&f)).unwrap();
        let row = |k: &str| rows.iter().find(|r| r.key == k).unwrap();
        assert_eq!(row("max-iterations").value, serde_json::json!(7));
        assert_eq!(
            row("max-iterations").from.to_string(),
            format!("--config {}:2", f.display())
        );
        assert_eq!(
            row("agent").from.to_string(),
            format!("--config {}:3", f.display())
        );
        assert_eq!(row("max-stuck").from, Origin::Default);
        assert_eq!(row("max-stuck").value, serde_json::json!("3"));
        assert!(row("max-cost").value.as_str().unwrap().contains("no limit"));
        assert!(rows.iter().any(|r| r.key == "loop"));
        assert_eq!(env_var_of("max-iterations"), "TASKDAEMON_MAX_ITERATIONS");
        let missing = settings_in_force(d.path(), Some(&d.path().join("nope.yaml")));
        assert!(matches!(missing, Err(ConfigError::Missing(_))));
    }
}
