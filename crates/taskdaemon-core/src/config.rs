//! Layered settings. Lowest to highest: built-in defaults, the loop type, the user's
//! `~/.config/taskdaemon/config.yaml`, the project's `.taskdaemon/config.yaml` (or a file
//! named with `--config`), then `TASKDAEMON_*` environment variables and flags (the binary
//! reads those two and hands them over as one more `Settings` layer).
//!
//! The project's own file comes with the repository: until the user trusts it
//! (`trust`), its keys that run commands, name destinations or widen access are left out
//! (`untrusted`), and [`load_layers`] says which. Everything else is always trusted.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::duration::parse_duration;
pub use crate::lifecycle::parser::ParserMode;
use crate::yaml::{self, HINT_SEP, YamlError};

pub mod trust;
mod untrusted;
pub use untrusted::Untrusted;

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
            Raw::Num(n) => Err(serde::de::Error::custom(crate::duration::no_unit(
                &n.to_string(),
            ))),
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
    #[serde(default, deserialize_with = "de_max_iterations")]
    pub max_iterations: Option<u32>,
    /// Consecutive iterations without a new commit before giving up; 0 disables.
    pub max_stuck: Option<u32>,
    /// Consecutive iterations with identical tool calls before stall recovery; 0 disables.
    pub max_stall: Option<u32>,
    #[serde(default, deserialize_with = "de_iteration_timeout")]
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
    #[serde(default, deserialize_with = "de_max_loops")]
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
    /// More read-write paths inside the sandbox (`~/` is the home directory); never `/`.
    #[serde(default, deserialize_with = "de_sandbox_rw")]
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
            "agent-limits.{agent} is 0, so no `{agent}` run could ever start{HINT_SEP}write 1 or more, or remove the entry for no limit"
        )));
    }
    Ok(Some(map))
}

/// A count that must be at least 1: `what` says what 0 would mean, `hint` what to write.
fn at_least_one<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    what: &str,
    hint: &str,
) -> Result<Option<u32>, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(format!(
            "{field} is 0, so {what}{HINT_SEP}{hint}"
        ))),
        n => Ok(Some(n)),
    }
}

fn de_max_iterations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    at_least_one(
        d,
        "max-iterations",
        "no run could do any work",
        "write 1 or more, or remove the key for the loop type's own limit (ralph: 20)",
    )
}

fn de_max_loops<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    at_least_one(
        d,
        "max-loops",
        "the daemon could never start a run",
        "write 1 or more, or remove the key for the default, 4",
    )
}

fn de_iteration_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
    let t = Dur::deserialize(d)?;
    if t.0.is_zero() {
        return Err(serde::de::Error::custom(format!(
            "iteration-timeout is 0s, so every agent would be stopped as it starts{HINT_SEP}write a duration such as 30m (the default), or remove the key"
        )));
    }
    Ok(Some(t))
}

fn de_sandbox_rw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PathBuf>>, D::Error> {
    let paths = Vec::<PathBuf>::deserialize(d)?;
    let root = |p: &PathBuf| {
        p.has_root()
            && p.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::CurDir
                )
            })
    };
    if paths.iter().any(root) {
        return Err(serde::de::Error::custom(format!(
            "sandbox-rw names `/`, which makes the whole file system writable: the sandbox would confine nothing{HINT_SEP}name the directories the agent must write (e.g. `~/.cache/pip`), or run without a sandbox (`--sandbox none`) if that is what you mean"
        )));
    }
    Ok(Some(paths))
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
/// `.git`), or an absolute path that is not `/`, a top-level directory or inside the
/// system's own (`/etc`, `/usr`, …), and whose nearest existing directory belongs to the
/// current user. (A repository's own config may name no absolute path outside it at all:
/// [`check_repository_config`].) The message carries its hint after [`HINT_SEP`].
pub fn check_worktrees_dir(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(format!(
            "worktrees-dir is empty{HINT_SEP}remove it for the default `.taskdaemon/worktrees`"
        ));
    }
    if path.is_relative() {
        return check_relative_worktrees_dir(path);
    }
    if path.parent().is_none() {
        return Err(format!(
            "worktrees-dir `/` is the root directory{HINT_SEP}use a directory of yours, e.g. `~/worktrees/PROJECT` written out in full"
        ));
    }
    if is_system_dir(path) {
        return Err(format!(
            "worktrees-dir `{shown}` is a top-level or system directory, where loops' worktrees would mix with the system's files{HINT_SEP}use a directory of yours, e.g. `~/worktrees/PROJECT` written out in full, or a path inside the repository such as `.taskdaemon/worktrees`"
        ));
    }
    let mut cur = Some(path);
    while let Some(p) = cur {
        if let Ok(meta) = std::fs::metadata(p) {
            use std::os::unix::fs::MetadataExt;
            let me = nix::unistd::geteuid().as_raw();
            if meta.uid() != me || p.parent().is_none() {
                return Err(format!(
                    "worktrees-dir `{shown}`: {} belongs to another user{HINT_SEP}create the directory yourself first (`mkdir -p {shown}`), or use a relative path inside the repository",
                    p.display()
                ));
            }
            return Ok(());
        }
        cur = p.parent();
    }
    Ok(())
}

fn check_relative_worktrees_dir(path: &Path) -> Result<(), String> {
    use std::path::Component;
    let shown = path.display();
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!(
            "worktrees-dir `{shown}` leaves the repository (`..`){HINT_SEP}use a path inside it such as `.taskdaemon/worktrees`, or an absolute directory of yours"
        ));
    }
    let first = path.components().find(|c| !matches!(c, Component::CurDir));
    if first.is_none() || first == Some(Component::Normal(".git".as_ref())) {
        return Err(format!(
            "worktrees-dir `{shown}` is the repository itself or inside `.git`{HINT_SEP}use e.g. `.taskdaemon/worktrees`"
        ));
    }
    Ok(())
}

/// Directories that belong to the system: any top-level directory itself (`/etc`,
/// `/home`, `/tmp`), and whatever lies in the system's own trees.
fn is_system_dir(path: &Path) -> bool {
    use std::path::Component;
    const SYSTEM: &[&str] = &[
        "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin",
        "sys", "usr",
    ];
    let parts: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    parts.len() < 2
        || parts
            .first()
            .is_some_and(|top| SYSTEM.iter().any(|s| *top == *s))
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
    match read_text(path)? {
        Some(text) => parse_text(path, &text),
        None => Err(ConfigError::Missing(path.to_path_buf())),
    }
}

/// A settings file's text; `None` when there is no such file.
fn read_text(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn parse_text(path: &Path, text: &str) -> Result<Settings, ConfigError> {
    Ok(yaml::parse::<Settings>(path, text)
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

/// The settings of the config files, and what was left out of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layers {
    pub settings: Settings,
    /// The repository's own config is not trusted (as it is now): the keys left out.
    /// The caller tells the user (the core never prints).
    pub untrusted: Option<Untrusted>,
}

/// The file layers: user config, then the project's config, or `explicit` instead of the
/// project's when one was named (then it must exist and parse). The user's file and
/// `explicit` are the user's own and apply whole; the project's is [`load_project`]'s.
pub fn load_layers(repo: &Path, explicit: Option<&Path>) -> Result<Layers, ConfigError> {
    let user = match user_config_dir() {
        Some(dir) => load_optional(&dir.join("config.yaml"))?,
        None => Settings::default(),
    };
    let project = match explicit {
        Some(p) => Layers {
            settings: load_file(p)?,
            untrusted: None,
        },
        None => load_project(repo)?,
    };
    Ok(Layers {
        settings: user.merge(project.settings),
        untrusted: project.untrusted,
    })
}

/// The repository's own `.taskdaemon/config.yaml` as it applies: refused when it sets
/// what no repository may ([`check_repository_config`]); without the keys that run
/// commands, name destinations or widen access unless the user trusts this very content
/// (`trust`). No file: nothing set.
pub fn load_project(repo: &Path) -> Result<Layers, ConfigError> {
    let path = project_config_path(repo);
    let Some(text) = read_text(&path)? else {
        return Ok(Layers::default());
    };
    let settings = parse_text(&path, &text)?;
    check_repository_config(repo, &path, &text, &settings)?;
    let (kept, ignored) = untrusted::split(settings.clone());
    if ignored.is_empty() || trust::is_trusted(repo, text.as_bytes()) {
        return Ok(Layers {
            settings,
            untrusted: None,
        });
    }
    Ok(Layers {
        settings: kept,
        untrusted: Some(Untrusted { path, ignored }),
    })
}

/// What a repository's own config may never set, trusted or not: `allow-test-changes`
/// (an agent can write the file), an absolute `worktrees-dir` outside the repository.
fn check_repository_config(
    repo: &Path,
    path: &Path,
    text: &str,
    s: &Settings,
) -> Result<(), ConfigError> {
    if s.allow_test_changes.is_some() {
        return Err(ConfigError::UntrustedKey {
            path: path.to_path_buf(),
        });
    }
    match &s.worktrees_dir {
        Some(dir) if dir.is_absolute() && !inside_repository(repo, dir) => {
            Err(ConfigError::Invalid(YamlError {
                file: path.to_path_buf(),
                line: key_line(text, "worktrees-dir").map(|l| l as u64),
                column: Some(1),
                message: format!(
                    "worktrees-dir `{}` is outside the repository, and a repository's own config may not send its worktrees (and the loops' work) elsewhere",
                    dir.display()
                ),
                hint: Some("use a path inside the repository, such as `.taskdaemon/worktrees`; an absolute directory of yours goes in your own ~/.config/taskdaemon/config.yaml (or `--config FILE`)".into()),
            }))
        }
        _ => Ok(()),
    }
}

/// Whether the absolute `dir` lies inside `repo` (its real path), not in `.git`.
fn inside_repository(repo: &Path, dir: &Path) -> bool {
    use std::path::Component;
    let repo = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.to_path_buf());
    let rest = match dir.strip_prefix(&repo) {
        Ok(r) => r,
        Err(_) => return false,
    };
    let first = rest.components().next();
    !rest.components().any(|c| matches!(c, Component::ParentDir))
        && first.is_some()
        && first != Some(Component::Normal(".git".as_ref()))
}

/// The line (from 1) where the top-level `key:` is written.
fn key_line(text: &str, key: &str) -> Option<usize> {
    let prefix = format!("{key}:");
    text.lines()
        .position(|l| l.starts_with(&prefix))
        .map(|i| i + 1)
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
            ("max-runtime: 18446744073709551615\n", "has no unit"),
            ("kill-grace: 600\n", "`600` has no unit; write 600s"),
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
    fn values_that_would_do_nothing_or_everything_are_refused_with_their_own_hint() {
        let cases = [
            (
                "max-iterations: 0\n",
                "max-iterations is 0",
                "write 1 or more",
            ),
            ("iteration-timeout: 0s\n", "iteration-timeout is 0s", "30m"),
            ("max-loops: 0\n", "max-loops is 0", "write 1 or more"),
            ("worktrees-dir: /etc\n", "system directory", "~/worktrees"),
            (
                "worktrees-dir: /usr/local/wt\n",
                "system directory",
                "~/worktrees",
            ),
            ("worktrees-dir: /home\n", "top-level", "~/worktrees"),
            (
                "sandbox-rw: [/srv, /]\n",
                "whole file system",
                "--sandbox none",
            ),
            (
                "agent-limits: {cmd: 0}\n",
                "agent-limits.cmd is 0",
                "write 1 or more",
            ),
        ];
        for (text, want, hint) in cases {
            let e = yaml::parse::<Settings>(Path::new("c.yaml"), &format!("max-stuck: 2\n{text}"))
                .unwrap_err();
            assert_eq!(e.line, Some(2), "{text}: {e}");
            assert!(e.message.contains(want), "{text}: {e}");
            let got = e.hint.clone().unwrap_or_default();
            assert!(got.contains(hint), "{text}: {e}");
            assert!(!got.contains("unclosed bracket"), "{text}: {e}");
        }
        let ok = yaml::parse::<Settings>(
            Path::new("c.yaml"),
            "max-iterations: 1\niteration-timeout: 1s\nmax-loops: 1\nsandbox-rw: [/srv]\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.max_loops, Some(1));
    }

    #[test]
    fn a_repository_config_keeps_its_worktrees_inside_it() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().canonicalize().unwrap();
        let file = project_config_path(&repo);
        let check = |dir: &Path| {
            let text = format!("max-stuck: 2\nworktrees-dir: {}\n", dir.display());
            let s = parse_text(&file, &text).unwrap();
            check_repository_config(&repo, &file, &text, &s)
        };
        let e = check(&d.path().join("../elsewhere/wt")).unwrap_err();
        let ConfigError::Invalid(y) = &e else {
            panic!("{e}")
        };
        assert_eq!(y.line, Some(2), "{e}");
        assert!(y.message.contains("outside the repository"), "{e}");
        assert!(check(&repo.join(".git/wt")).is_err());
        assert!(check(&repo).is_err());
        check(&repo.join(".taskdaemon/wt")).unwrap();
        check(Path::new("trees")).unwrap();
        let text = "allow-test-changes: true\n";
        let s = parse_text(&file, text).unwrap();
        assert!(matches!(
            check_repository_config(&repo, &file, text, &s),
            Err(ConfigError::UntrustedKey { .. })
        ));
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
    /// The value with its own type (a number is `9` whether the file or the environment
    /// set it); `null` when unset.
    pub value: serde_json::Value,
    pub from: Origin,
    /// What being unset means (`no limit`), for a key whose default is no value.
    pub unset: Option<String>,
}

impl InForce {
    /// The value as the JSON convention shows it (docs/json.md): a map keyed by names, not
    /// field names (`agent-limits` by agent, `api.prices` by model), as a list of objects,
    /// so every key stays a field name.
    pub fn json_value(&self) -> serde_json::Value {
        use serde_json::{Value, json};
        let named = |m: &serde_json::Map<String, Value>, name: &str, value: &str| -> Value {
            m.iter()
                .map(|(k, v)| match v {
                    Value::Object(fields) => {
                        let mut o = fields.clone();
                        o.insert(name.into(), k.clone().into());
                        Value::Object(o)
                    }
                    other => json!({ name: k, value: other }),
                })
                .collect()
        };
        match (self.key.as_str(), &self.value) {
            ("agent-limits", Value::Object(m)) => named(m, "agent", "limit"),
            ("api", Value::Object(m)) => {
                let mut m = m.clone();
                if let Some(Value::Object(prices)) = m.get("prices") {
                    let listed = named(prices, "model", "price");
                    m.insert("prices".into(), listed);
                }
                Value::Object(m)
            }
            (_, v) => v.clone(),
        }
    }
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

/// [`settings_in_force`]: the rows, and what the repository's untrusted config had that
/// was left out (its rows show the layer below).
#[derive(Debug, Clone)]
pub struct InForceReport {
    pub rows: Vec<InForce>,
    pub untrusted: Option<Untrusted>,
}

/// Every setting in force, lowest layer first overridden: the built-in default, the user's
/// file, the project's file (or `--config FILE`), the `TASKDAEMON_*` variables. Files are
/// read as `load_layers` reads them (a named file must exist; the project's without what
/// waits for trust).
pub fn settings_in_force(
    repo: &Path,
    explicit: Option<&Path>,
) -> Result<InForceReport, ConfigError> {
    let keys = match serde_json::to_value(Settings::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    let mut rows = default_rows(&keys);
    if let Some(d) = user_config_dir() {
        let path = d.join("config.yaml");
        match load_file(&path) {
            Ok(s) => set_from_file(&mut rows, &path, &s, false),
            Err(ConfigError::Missing(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let untrusted = match explicit {
        Some(p) => {
            set_from_file(&mut rows, p, &load_file(p)?, true);
            None
        }
        None => {
            let project = load_project(repo)?;
            set_from_file(
                &mut rows,
                &project_config_path(repo),
                &project.settings,
                false,
            );
            project.untrusted
        }
    };
    for k in &keys {
        let var = env_var_of(k);
        if let Ok(v) = std::env::var(&var) {
            set(&mut rows, k, typed(k, &v), Origin::Env { var });
        }
    }
    Ok(InForceReport { rows, untrusted })
}

/// Every key at its documented default: its value typed as the key takes it, or `null`
/// with what unset means.
fn default_rows(keys: &[String]) -> Vec<InForce> {
    let defaults = documented_defaults();
    keys.iter()
        .map(|k| {
            let text = defaults.get(k);
            let unset = text.and_then(|t| t.strip_prefix("(unset: ")?.strip_suffix(')'));
            InForce {
                key: k.clone(),
                value: match (text, unset) {
                    (Some(t), None) => typed(k, t),
                    _ => serde_json::Value::Null,
                },
                from: Origin::Default,
                unset: unset.map(String::from),
            }
        })
        .collect()
}

/// `text` (an environment variable's value, a documented default) as the value of `key`
/// in its own type: read as YAML, then through [`Settings`] (so `9` is a number for
/// `max-iterations` and `"123"` stays text for `target-branch`); the text itself when the
/// key does not take it (the run reports that error).
fn typed(key: &str, text: &str) -> serde_json::Value {
    let through = |v: serde_json::Value| {
        let one = serde_json::Value::Object([(key.to_string(), v)].into_iter().collect());
        let s: Settings = serde_json::from_value(one).ok()?;
        serde_json::to_value(s).ok()?.get(key).cloned()
    };
    let parsed = serde_saphyr::from_str::<serde_json::Value>(text).ok();
    parsed
        .and_then(through)
        .or_else(|| through(serde_json::Value::String(text.to_string())))
        .unwrap_or_else(|| serde_json::Value::String(text.to_string()))
}

/// The keys `settings` (read from `path`) sets, with their lines.
fn set_from_file(rows: &mut [InForce], path: &Path, settings: &Settings, flag: bool) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let Ok(serde_json::Value::Object(m)) = serde_json::to_value(settings) else {
        return;
    };
    for (k, v) in m.into_iter().filter(|(_, v)| !v.is_null()) {
        let from = Origin::File {
            path: path.to_path_buf(),
            line: key_line(&text, &k),
            flag,
        };
        set(rows, &k, v, from);
    }
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
        let rows = settings_in_force(d.path(), Some(&f)).unwrap().rows;
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
        // Defaults in their own types; unset is null, with what it means beside it.
        assert_eq!(row("max-stuck").value, serde_json::json!(3));
        assert_eq!(row("allow-test-changes").value, serde_json::json!(false));
        assert_eq!(row("loop").value, serde_json::json!("ralph"));
        assert!(row("max-cost").value.is_null());
        assert_eq!(row("max-cost").unset.as_deref(), Some("no limit"));
        assert!(rows.iter().any(|r| r.key == "loop"));
        assert_eq!(env_var_of("max-iterations"), "TASKDAEMON_MAX_ITERATIONS");
        let missing = settings_in_force(d.path(), Some(&d.path().join("nope.yaml")));
        assert!(matches!(missing, Err(ConfigError::Missing(_))));
    }

    #[test]
    fn a_value_from_text_takes_the_type_of_its_key() {
        assert_eq!(typed("max-iterations", "9"), serde_json::json!(9));
        assert_eq!(typed("allow-test-changes", "true"), serde_json::json!(true));
        assert_eq!(typed("max-cost", "2.5"), serde_json::json!(2.5));
        // A key that takes text keeps digits as text; a bad value stays what was written.
        assert_eq!(typed("target-branch", "123"), serde_json::json!("123"));
        assert_eq!(typed("max-iterations", "many"), serde_json::json!("many"));
        assert_eq!(
            typed("agent", "cmd:make test"),
            serde_json::json!("cmd:make test")
        );
    }

    #[test]
    fn maps_keyed_by_names_are_lists_in_json() {
        let row = |key: &str, value: serde_json::Value| InForce {
            key: key.into(),
            value,
            from: Origin::Default,
            unset: None,
        };
        let limits = row("agent-limits", serde_json::json!({"api:openai:gpt-5": 2}));
        assert_eq!(
            limits.json_value(),
            serde_json::json!([{"agent": "api:openai:gpt-5", "limit": 2}])
        );
        let api = row(
            "api",
            serde_json::json!({"max-turns": 9, "prices": {"gpt-5": {"input": 1.0, "output": 2.0}}}),
        );
        assert_eq!(
            api.json_value(),
            serde_json::json!({"max-turns": 9, "prices": [{"model": "gpt-5", "input": 1.0, "output": 2.0}]})
        );
        assert_eq!(row("max-loops", 3.into()).json_value(), 3);
    }
}
