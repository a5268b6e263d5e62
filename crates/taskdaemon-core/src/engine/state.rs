//! A run's settings and its progress, saved to `.ralph/run.json` after every iteration so
//! `run --resume` continues where it stopped (iteration, progress, stuck count, cost).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::outcome::Outcome;
use crate::agent::script::{Script, ScriptError, ScriptFormat};
use crate::agent::{AgentError, AgentSpec, OutputFormat};
use crate::config::Settings;
use crate::fsutil::{write_atomic, write_atomic_volatile};
use crate::loops::{LoopError, LoopType, PromptTemplate, Registry, TemplateError};
use crate::telemetry::{DEFAULT_LOG_CAP, MIN_LOG_CAP, parse_size};
use crate::workspace::Workspace;

pub const DEFAULT_LOOP: &str = "ralph";
pub const DEFAULT_MAX_STUCK: u32 = 3;
pub const DEFAULT_MAX_STALL: u32 = 3;
pub const DEFAULT_ITERATION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
pub const DEFAULT_COMPLETION_TEXT: &str = "COMPLETE";
const STATE_VERSION: u32 = 1;

/// Everything a run needs, resolved from the layers; saved so a resume needs no arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub workdir: PathBuf,
    pub task: String,
    pub loop_name: String,
    /// The definition as it was when the run started.
    pub loop_def: LoopType,
    pub agent: AgentSpec,
    pub agent_format: OutputFormat,
    pub validate: Option<String>,
    pub success_exit_code: i32,
    pub max_iterations: u32,
    pub max_stuck: u32,
    #[serde(default = "default_max_stall")]
    pub max_stall: u32,
    pub iteration_timeout_ms: Option<u64>,
    pub max_runtime_ms: Option<u64>,
    pub max_cost: Option<f64>,
    /// Set: completion also needs `<promise>TEXT</promise>`.
    pub completion_promise: Option<String>,
    pub kill_grace_ms: u64,
    /// The cap of one iteration's log (agent and validation output), in bytes.
    #[serde(default = "default_log_cap")]
    pub max_log_bytes: u64,
    /// Values the run was spawned with (a daemon run: `plan-file`, `spec-file`,
    /// `phase-name`, …): template variables, and `TASKDAEMON_<NAME>` in the agent's and
    /// the validation's environment.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub context: serde_json::Map<String, serde_json::Value>,
    /// What agent failures do (usage limits, backoff).
    #[serde(default)]
    pub failure_policy: super::failures::FailurePolicy,
    /// What the agent and the validation command are confined by (`--sandbox`).
    #[serde(default)]
    pub sandbox: crate::sandbox::SandboxPlan,
    /// Direct API agents' settings (`api:` in config).
    #[serde(default)]
    pub api: crate::agent::api::ApiSettings,
    /// `--allow-test-changes`: changes of the evidence are warnings, not rejections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_test_changes: bool,
    /// Where the run's work comes from (the ralph loop, a tasks.md, a stories file).
    #[serde(default, skip_serializing_if = "super::source::SourceSpec::is_ralph")]
    pub source: super::source::SourceSpec,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Loop(#[from] LoopError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("invalid value for {field}: {message}")]
    Value {
        field: &'static str,
        message: String,
    },
    #[error(
        "no task given\n  hint: pass the task as an argument (`taskdaemon run \"fix the failing test\"`) or with -f FILE"
    )]
    NoTask,
}

fn value(field: &'static str, message: impl Into<String>) -> ResolveError {
    ResolveError::Value {
        field,
        message: message.into(),
    }
}

impl RunConfig {
    /// Resolve the run's settings. Fails before any state changes when something is wrong:
    /// unknown loop, bad template, missing agent CLI, invalid script, bad values.
    pub fn resolve(
        workdir: &Path,
        task: String,
        s: &Settings,
        registry: &Registry,
    ) -> Result<RunConfig, ResolveError> {
        if task.trim().is_empty() {
            return Err(ResolveError::NoTask);
        }
        let loop_name = s
            .loop_type
            .clone()
            .unwrap_or_else(|| DEFAULT_LOOP.to_string());
        let entry = registry.get(&loop_name)?;
        PromptTemplate::compile(&loop_name, &entry.def.prompt_template)?;
        let def = entry.def.clone();
        let agent = match &s.agent {
            Some(a) => AgentSpec::parse(a)?,
            None => AgentSpec::detect()?,
        };
        let mut cfg = RunConfig {
            workdir: workdir.to_path_buf(),
            task,
            loop_name,
            agent_format: agent.default_format(),
            agent,
            validate: Some(def.validation_command.clone()),
            success_exit_code: def.success_exit_code,
            max_iterations: def.max_iterations,
            max_stuck: DEFAULT_MAX_STUCK,
            max_stall: DEFAULT_MAX_STALL,
            iteration_timeout_ms: Some(
                def.iteration_timeout_ms
                    .unwrap_or(DEFAULT_ITERATION_TIMEOUT.as_millis() as u64),
            ),
            max_runtime_ms: None,
            max_cost: None,
            completion_promise: None,
            kill_grace_ms: DEFAULT_KILL_GRACE.as_millis() as u64,
            max_log_bytes: DEFAULT_LOG_CAP,
            context: serde_json::Map::new(),
            failure_policy: Default::default(),
            sandbox: Default::default(),
            api: Default::default(),
            allow_test_changes: false,
            source: Default::default(),
            loop_def: def,
        };
        cfg.apply(s, false)?;
        Ok(cfg)
    }

    /// Apply the values `s` sets (used for resume overrides too). `agent_set` tells whether
    /// the agent was already changed by the caller.
    pub fn apply(&mut self, s: &Settings, reparse_agent: bool) -> Result<(), ResolveError> {
        if reparse_agent && let Some(a) = &s.agent {
            self.agent = AgentSpec::parse(a)?;
            self.agent_format = self.agent.default_format();
        }
        self.agent = self.agent.clone().absolutize(&self.workdir);
        if let AgentSpec::Script { file } = &self.agent {
            let script = Script::load(file)?;
            if script.format == ScriptFormat::StreamJson {
                self.agent_format = OutputFormat::ClaudeStreamJson;
            }
        }
        self.agent.check_installed()?;
        if let Some(api) = &s.api {
            self.api = std::mem::take(&mut self.api).merge(api.clone());
        }
        if let Some(f) = &s.agent_format {
            self.agent_format = OutputFormat::parse(f).map_err(|m| value("agent-format", m))?;
        }
        if let Some(v) = &s.validate {
            self.validate = Some(v.clone());
        }
        if self
            .validate
            .as_deref()
            .is_some_and(|v| v.trim().is_empty())
        {
            self.validate = None;
        }
        if let Some(c) = s.success_exit_code {
            if !(0..=255).contains(&c) {
                return Err(value(
                    "success-exit-code",
                    format!("{c} is not an exit code; use 0-255"),
                ));
            }
            self.success_exit_code = c;
        }
        if let Some(n) = s.max_iterations {
            if n == 0 {
                return Err(value("max-iterations", "must be at least 1"));
            }
            self.max_iterations = n;
        }
        if let Some(n) = s.max_stuck {
            self.max_stuck = n;
        }
        if let Some(a) = s.allow_test_changes {
            self.allow_test_changes = a;
        }
        if let Some(n) = s.max_stall {
            self.max_stall = n;
        }
        if let Some(d) = s.iteration_timeout {
            if d.0.is_zero() {
                return Err(value("iteration-timeout", "must be more than 0 (e.g. 30m)"));
            }
            self.iteration_timeout_ms = Some(d.0.as_millis() as u64);
        }
        if let Some(d) = s.max_runtime {
            if d.0.is_zero() {
                return Err(value("max-runtime", "must be more than 0 (e.g. 8h)"));
            }
            self.max_runtime_ms = Some(d.0.as_millis() as u64);
        }
        if let Some(c) = s.max_cost {
            if !(c.is_finite() && c > 0.0) {
                return Err(value(
                    "max-cost",
                    format!("{c} is not a positive amount of US dollars"),
                ));
            }
            self.max_cost = Some(c);
        }
        if let Some(p) = &s.completion_promise {
            let p = p.trim();
            if p.is_empty()
                || p.contains('<')
                || p.contains('>')
                || p.starts_with("BLOCKED")
                || p.starts_with("DECIDE")
            {
                return Err(value(
                    "completion-promise",
                    format!("`{p}` cannot be a promise text; use a word such as COMPLETE or DONE"),
                ));
            }
            self.completion_promise = Some(p.to_string());
        }
        if let Some(g) = s.kill_grace {
            self.kill_grace_ms = g.0.as_millis() as u64;
        }
        if let Some(size) = &s.max_log_size {
            let n = parse_size(size).map_err(|m| value("max-log-size", m))?;
            if n < MIN_LOG_CAP {
                return Err(value(
                    "max-log-size",
                    format!("{size} is too small; use at least 16KB"),
                ));
            }
            self.max_log_bytes = n;
        }
        self.apply_sandbox(s)?;
        self.apply_failure_policy(s)
    }

    /// The sandbox the settings ask for, resolved for the agent and checked: one that
    /// cannot start fails here, before iteration 1.
    fn apply_sandbox(&mut self, s: &Settings) -> Result<(), ResolveError> {
        let sandbox = s.sandbox_settings();
        if sandbox != crate::sandbox::SandboxSettings::default() {
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            self.sandbox =
                crate::sandbox::SandboxPlan::resolve(&sandbox, &self.agent, home.as_deref())?;
        }
        crate::sandbox::check_available(&self.sandbox)?;
        Ok(())
    }

    fn apply_failure_policy(&mut self, s: &Settings) -> Result<(), ResolveError> {
        let p = &mut self.failure_policy;
        if let Some(a) = &s.on_usage_limit {
            p.on_usage_limit =
                super::failures::OnUsageLimit::parse(a).map_err(|m| value("on-usage-limit", m))?;
        }
        if let Some(d) = s.max_wait {
            p.max_wait_ms = d.0.as_millis() as u64;
        }
        if let Some(d) = s.retry_backoff {
            if d.0.is_zero() {
                return Err(value("retry-backoff", "must be more than 0 (e.g. 30s)"));
            }
            p.retry_backoff_ms = d.0.as_millis() as u64;
        }
        if let Some(n) = s.max_retries {
            p.max_retries = n;
        }
        if let Some(d) = s.quiet_warning {
            p.quiet_warning_ms = d.0.as_millis() as u64;
        }
        if let Some(pct) = s.pause_at_usage {
            if !(1..=100).contains(&pct) {
                return Err(value(
                    "pause-at-usage",
                    format!("{pct} is not a percentage; use 1-100 (e.g. 90)"),
                ));
            }
            p.pause_at_usage = Some(pct);
        }
        if let Some(d) = s.no_progress_timeout {
            p.no_progress_ms = d.0.as_millis() as u64;
        }
        Ok(())
    }

    pub fn completion_text(&self) -> &str {
        self.completion_promise
            .as_deref()
            .unwrap_or(DEFAULT_COMPLETION_TEXT)
    }

    pub fn iteration_timeout(&self) -> Option<Duration> {
        self.iteration_timeout_ms.map(Duration::from_millis)
    }
    pub fn max_runtime(&self) -> Option<Duration> {
        self.max_runtime_ms.map(Duration::from_millis)
    }
    pub fn kill_grace(&self) -> Duration {
        Duration::from_millis(self.kill_grace_ms)
    }
}

/// The saved progress of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    pub run_id: String,
    pub config: RunConfig,
    /// Iterations finished (including an interrupted one); the next is this + 1.
    pub iterations_done: u32,
    pub stuck_count: u32,
    /// Iterations without progress over the whole run.
    pub stuck_iterations: u32,
    /// Short harness notes of earlier iterations, oldest first.
    pub progress: Vec<String>,
    /// Validation output of the last failed iteration.
    pub previous_errors: Option<String>,
    pub last_head: Option<String>,
    /// Time spent in earlier sessions of this run.
    pub elapsed_ms: u64,
    pub cost_usd: f64,
    pub cost_reported: bool,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub started_at: String,
    pub updated_at: String,
    /// `None` while running (or after a crash): resumable.
    pub outcome: Option<Outcome>,
    /// Consecutive iterations with the same tool-call signature, and that signature.
    #[serde(default)]
    pub stall_count: u32,
    #[serde(default)]
    pub last_signature: Option<String>,
    /// Stall recoveries in this run; the second fails it.
    #[serde(default)]
    pub stall_recoveries: u32,
    /// Completions rejected by hard gates in a row; the fifth aborts the task.
    #[serde(default)]
    pub gate_failures: u32,
    /// The task number when `taskdaemon task` started this run: its completion takes the
    /// `task-N-post` snapshot, also after a resume.
    #[serde(default)]
    pub task: Option<u32>,
    /// HEAD when the run first started (kept across resumes): a phase loop completes only
    /// with a commit since then.
    #[serde(default)]
    pub start_head: Option<String>,
    /// The run's start looked for the user's uncommitted work (and saved it as
    /// `run-N-pre`): never again for this run, also after a kill and a resume.
    #[serde(default)]
    pub uncommitted_checked: bool,
    /// Agent failures: a wait in progress, failures in a row.
    #[serde(default)]
    pub failures: super::failures::FailureState,
    /// The evidence as it was when the run started (issue 36): in memory, and in the user's
    /// state directory for a resume (`gates::evidence::Baseline::path`), never in `run.json`.
    #[serde(skip)]
    pub evidence: Option<std::sync::Arc<crate::gates::evidence::Baseline>>,
    /// The gate question a person was asked (DECIDE), and the requirements they waived by
    /// answering `accept`: those are not asked again in this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_question: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waived: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a valid run state: {message}\n  hint: move it aside and start a new run"
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl RunState {
    /// Why a resume could run no iteration: its `max_iterations` are spent. What to do is
    /// in the text.
    pub fn spent_limit(&self) -> Option<String> {
        let (done, max) = (self.iterations_done, self.config.max_iterations);
        (done >= max).then(|| {
            format!(
                "max-iterations {max} is spent: this run has done {done} iteration(s), so a resume would run none\n  hint: allow more, e.g. `taskdaemon run --resume --max-iterations {}`",
                done.saturating_add(10)
            )
        })
    }

    /// A run id that sorts by start time and is unique: `20261121T120000-1a2b3c4d`
    /// (the time, then random bits of a UUIDv7).
    pub fn new_id(now: jiff::Timestamp) -> String {
        let uuid = uuid::Uuid::now_v7().simple().to_string();
        format!(
            "{}-{}",
            now.strftime("%Y%m%dT%H%M%S"),
            &uuid[uuid.len() - 8..]
        )
    }

    pub fn new(config: RunConfig, run_id: String, head: Option<String>, now: String) -> RunState {
        RunState {
            version: STATE_VERSION,
            run_id,
            config,
            iterations_done: 0,
            stuck_count: 0,
            stuck_iterations: 0,
            progress: Vec::new(),
            previous_errors: None,
            last_head: head,
            elapsed_ms: 0,
            cost_usd: 0.0,
            cost_reported: false,
            tokens_in: 0,
            tokens_out: 0,
            started_at: now.clone(),
            updated_at: now,
            outcome: None,
            task: None,
            stall_count: 0,
            last_signature: None,
            stall_recoveries: 0,
            gate_failures: 0,
            start_head: None,
            uncommitted_checked: false,
            failures: Default::default(),
            evidence: None,
            gate_question: Vec::new(),
            waived: Vec::new(),
        }
    }

    pub fn load(ws: &Workspace) -> Result<Option<RunState>, StateError> {
        let path = ws.run_state();
        let text = match crate::fsutil::read_optional(&path) {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(None),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        // Nothing in it: a start record a crash of the machine left without its contents
        // (it is written without syncs; the run had done nothing a resume needs).
        if text
            .trim_matches(|c: char| c == '\0' || c.is_whitespace())
            .is_empty()
        {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path,
                message: e.to_string(),
            })
    }

    /// Save the state durably: after a crash of the machine it is on disk.
    pub fn save(&self, ws: &Workspace) -> Result<(), StateError> {
        self.write(ws, write_atomic)
    }

    /// [`RunState::save`] once `pending` (the iteration's log and CSV row) is on disk: all
    /// synced at once, the state's new file named last.
    pub fn save_after(
        &self,
        ws: &Workspace,
        pending: crate::fsutil::PendingSyncs,
    ) -> Result<(), StateError> {
        let path = ws.run_state();
        let json = self.json(&path)?;
        crate::fsutil::write_atomic_after(&path, &json, pending)
            .map_err(|source| StateError::Write { path, source })
    }

    /// Save the state a run starts from without the syncs. A process killed at any moment
    /// leaves it whole (`run --resume` goes on from it); a crash of the machine before the
    /// first iteration's end may leave the record before it, no record or an empty one
    /// (read as none), and this run then has done nothing a resume would need: its agent's
    /// work is in the work tree and git.
    ///
    /// An earlier run's record still there moves beside that run's logs first
    /// ([`Workspace::set_aside_state`]), so this one takes a free name: no file is replaced
    /// and freed at each start. Not moved (replaced, as before) when it cannot be.
    pub fn save_start(&self, ws: &Workspace) -> Result<(), StateError> {
        if let Some(id) = record_id(ws)
            && id != self.run_id
        {
            let _ = ws.set_aside_state(&id);
        }
        self.write(ws, write_atomic_volatile)
    }

    fn write(
        &self,
        ws: &Workspace,
        how: fn(&std::path::Path, &[u8]) -> std::io::Result<()>,
    ) -> Result<(), StateError> {
        let path = ws.run_state();
        let json = self.json(&path)?;
        how(&path, &json).map_err(|source| StateError::Write { path, source })
    }

    fn json(&self, path: &std::path::Path) -> Result<Vec<u8>, StateError> {
        serde_json::to_vec_pretty(self).map_err(|e| StateError::Write {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
    }
}

fn default_log_cap() -> u64 {
    DEFAULT_LOG_CAP
}

/// The run id of the record in `run.json`, read alone (the rest is not needed to set it
/// aside); `None` when there is none or it does not read.
fn record_id(ws: &Workspace) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        run_id: String,
    }
    let text = crate::fsutil::read_optional(&ws.run_state()).ok()??;
    serde_json::from_str::<Id>(&text).ok().map(|r| r.run_id)
}

/// Remove the temporary files of atomic writes (`.tmp-*`) a kill left in `.ralph/` and, for
/// a resumed run, in its logs (a new run's start removed those as it set the earlier run's
/// logs aside: `logs/` is listed once per start). Called at the start of a run, under its
/// lock. How many were removed.
pub fn clean_temp_files(ws: &Workspace, resumed: bool) -> usize {
    ws.remove_root_temps() + if resumed { ws.remove_log_temps() } else { 0 }
}

fn default_max_stall() -> u32 {
    DEFAULT_MAX_STALL
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::Registry;

    fn state(dir: &std::path::Path, id: &str) -> RunState {
        let reg = Registry::load(None, &dir.join("no-loops-here")).unwrap();
        let s = crate::config::Settings {
            agent: Some("cmd:true".into()),
            ..Default::default()
        };
        let cfg = RunConfig::resolve(dir, "t".into(), &s, &reg).unwrap();
        RunState::new(cfg, id.into(), None, "now".into())
    }

    #[test]
    fn a_resumed_run_cleans_its_logs_of_temp_files_and_a_new_one_leaves_that_to_the_set_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::new(tmp.path());
        std::fs::create_dir_all(ws.logs_dir()).unwrap();
        let temps = [ws.root().join(".tmp-1"), ws.logs_dir().join(".tmp-2")];
        for t in &temps {
            std::fs::write(t, "half").unwrap();
        }
        // A new run: `.ralph/` only (its set-aside listed `logs/`).
        assert_eq!(clean_temp_files(&ws, false), 1);
        assert!(!temps[0].exists() && temps[1].exists());
        // A resumed one: nothing set its logs aside, so they are looked at here.
        assert_eq!(clean_temp_files(&ws, true), 1);
        assert!(!temps[1].exists());
        std::fs::write(ws.logs_dir().join("iteration-001.log"), "kept").unwrap();
        assert_eq!(clean_temp_files(&ws, true), 0);
        assert!(ws.logs_dir().join("iteration-001.log").exists());
    }

    #[test]
    fn a_start_record_sets_an_earlier_runs_aside_and_an_empty_one_reads_as_none() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".git")).unwrap();
        let ws = Workspace::new(tmp.path());
        let first = state(tmp.path(), "run-1");
        first.save(&ws).unwrap();
        // The same run again (a resume): its record is replaced in place.
        first.save_start(&ws).unwrap();
        assert!(!ws.earlier_runs_dir().join("run-1").exists());
        // A new run: the earlier record moves beside its logs, the new one takes its name.
        let second = state(tmp.path(), "run-2");
        second.save_start(&ws).unwrap();
        let kept = ws.earlier_runs_dir().join("run-1/run.json");
        assert!(
            std::fs::read_to_string(&kept)
                .unwrap()
                .contains("\"run-1\"")
        );
        assert_eq!(RunState::load(&ws).unwrap().unwrap().run_id, "run-2");
        // A record a crash left without its contents is no record.
        for empty in ["", "\0\0\0\0", " \n"] {
            std::fs::write(ws.run_state(), empty).unwrap();
            assert!(RunState::load(&ws).unwrap().is_none(), "{empty:?}");
        }
        std::fs::write(ws.run_state(), "{").unwrap();
        assert!(matches!(
            RunState::load(&ws),
            Err(StateError::Corrupt { .. })
        ));
    }
}
